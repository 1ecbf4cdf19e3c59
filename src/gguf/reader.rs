//! PLACEHOLDER (skeleton): the hostile-safe GGUF parser lands with the foundation issue.

use super::GgufFile;
use std::path::Path;

/// Named caps on every count and length read from a header.
#[derive(Clone, Debug)]
pub struct Caps {
    pub max_tensors: u64,
    pub max_kv: u64,
    pub max_string: u64,
    pub max_array: u64,
    pub max_depth: u32,
    pub max_dims: u32,
}

impl Default for Caps {
    fn default() -> Self {
        Self {
            max_tensors: 1 << 20,
            max_kv: 1 << 20,
            max_string: 1 << 24,
            max_array: 1 << 28,
            max_depth: 8,
            max_dims: 4,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("GGUF parser not implemented yet")]
    Unimplemented,
}

pub fn parse_file(_path: &Path, _caps: &Caps) -> Result<GgufFile, GgufError> {
    Err(GgufError::Unimplemented)
}

pub fn parse_bytes(_bytes: &[u8], _caps: &Caps) -> Result<GgufFile, GgufError> {
    Err(GgufError::Unimplemented)
}
