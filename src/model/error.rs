//! Errors of the DS4 tensor map: each names the tensor (or metadata key) and what is wrong.

use crate::gguf::{GgmlType, GgufError};
use std::path::{Path, PathBuf};

/// Why a GGUF file is not a usable DS4 layout, or why a query on the map is out of range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error("not a DeepSeek V4 file: general.architecture is {found}, expected \"deepseek4\"")]
    WrongArch { found: String },
    #[error("metadata key {key} is missing")]
    MissingKey { key: String },
    #[error("metadata key {key} is {found}, expected {expected}")]
    KeyType {
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("metadata key {key} = {value}: {why}")]
    BadValue {
        key: String,
        value: String,
        why: String,
    },
    #[error("tensor {name} is missing")]
    MissingTensor { name: String },
    #[error("tensor {name} appears more than once")]
    DuplicateTensor { name: String },
    #[error("routed tensor {name} belongs to layer {layer}, but block_count is {n_layer}")]
    StrayTensor {
        name: String,
        layer: u64,
        n_layer: u64,
    },
    #[error("tensor {name}: dims {found:?}, expected {expected:?} ({why})")]
    BadShape {
        name: String,
        found: Vec<u64>,
        expected: Vec<u64>,
        why: &'static str,
    },
    #[error("tensor {name}: type {found} is not a routed expert type (IQ2_XXS, Q2_K, Q4_K)")]
    RoutedType { name: String, found: GgmlType },
    #[error("tensor {name}: type {found}, expected {expected}")]
    WrongType {
        name: String,
        found: GgmlType,
        expected: &'static str,
    },
    #[error("layer {layer}: ffn_gate_exps is {gate} but ffn_up_exps is {up} (must match)")]
    GateUpMismatch {
        layer: u32,
        gate: GgmlType,
        up: GgmlType,
    },
    #[error("tensor {name}: dim0 {dim0} is not a multiple of the {ggml_type} block size {block}")]
    PartialBlock {
        name: String,
        dim0: u64,
        ggml_type: GgmlType,
        block: u64,
    },
    #[error(
        "tensor {name}: {nbytes} bytes in the tensor table, but its type and dims give {computed}"
    )]
    SizeMismatch {
        name: String,
        nbytes: u64,
        computed: u64,
    },
    #[error("size overflow computing {what}")]
    Overflow { what: String },
    #[error("layer {layer} out of range (the model has {n_layer} layers)")]
    NoSuchLayer { layer: u64, n_layer: u32 },
    #[error("expert {expert} out of range: tensor {name} has {n_expert} experts")]
    NoSuchExpert {
        name: String,
        expert: u64,
        n_expert: u64,
    },
}

/// Why [`Ds4Model::open`](super::Ds4Model::open) failed. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum ModelOpenError {
    /// The file could not be opened or its header read (the GGUF error names the path).
    #[error(transparent)]
    Read(GgufError),
    /// The GGUF header is malformed (the cause says what and at which byte).
    #[error("{}", path.display())]
    Header {
        path: PathBuf,
        #[source]
        source: GgufError,
    },
    /// A valid GGUF file, but not a usable DS4 layout.
    #[error("{}", path.display())]
    Layout {
        path: PathBuf,
        #[source]
        source: ModelError,
    },
}

impl ModelOpenError {
    pub(crate) fn from_gguf(path: &Path, e: GgufError) -> Self {
        match e.path() {
            Some(_) => ModelOpenError::Read(e),
            None => ModelOpenError::Header {
                path: path.to_path_buf(),
                source: e,
            },
        }
    }

    /// The file this error is about.
    pub fn path(&self) -> &Path {
        match self {
            ModelOpenError::Read(e) => e.path().unwrap_or(Path::new("")),
            ModelOpenError::Header { path, .. } | ModelOpenError::Layout { path, .. } => path,
        }
    }

    /// True when the input is at fault (a malformed or non-DS4 file, a path that cannot be
    /// opened or is not a regular file); false for a read of an opened file that failed.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, ModelOpenError::Read(GgufError::Io { .. }))
    }
}
