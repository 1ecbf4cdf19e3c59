//! `ds4 gen-model`: deterministic DS4-layout GGUF files at three scales (tiny / demo / exact
//! flash), with the real tensor names, metadata keys and valid block formats.
//!
//! Why it exists: tests and demos need DS4 files without downloading 81 GiB, and they need to
//! know what every byte should be. [`Generator::tensor_bytes`] recomputes any byte range of any
//! tensor from (seed, tensor name, block index) alone, so a reader can be checked anywhere in a
//! file, including past 4 GiB, without generating the whole file.
//!
//! Holes: a [`FillPlan`] says which tensors (or which experts of routed tensors) are written;
//! the rest are file holes and read as zeros, not as the generator's bytes.
//! [`FillPlan::file_bytes`] gives what the file really holds (generator bytes or zeros); the
//! plan is recorded in the file's metadata ([`FILL_KEY`]), so `ds4 demo` can verify a holed
//! file too.
//! Zero blocks are valid blocks (scale 0), so a holed file still dequantizes to finite values.

pub mod blocks;
mod fill;
mod options;
mod shape;
mod write;

pub use blocks::{mix64, supported, tensor_key, Values};
pub use fill::{format_list, parse_list, FillPlan, Holes, Region};
pub use options::{write_file, Options, Quant};
pub use shape::{Scale, Shape, FILL_KEY, SPECIAL_TOKENS};
pub use write::{plan_layout, write_model, GenSummary};

use crate::gguf::GgmlType;
use crate::model::ExpertKind;
use std::collections::HashMap;
use std::path::PathBuf;

/// Errors of the generator.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    #[error("unknown tensor {name:?}")]
    UnknownTensor { name: String },
    #[error("range {offset}+{len} is outside tensor {name:?} of {nbytes} bytes")]
    Range {
        name: String,
        offset: u64,
        len: u64,
        nbytes: u64,
    },
    #[error("tensor {name:?}: type {ggml_type} cannot be generated")]
    Unsupported { name: String, ggml_type: GgmlType },
    #[error("bad fill list {list:?}: {why}")]
    BadList { list: String, why: String },
    #[error("bad fill plan: {why}")]
    BadPlan { why: String },
    #[error("--layers {layers} is outside 1..={max} (scale {scale} has {max} layers)")]
    BadLayers {
        layers: u32,
        scale: &'static str,
        max: u32,
    },
    #[error(transparent)]
    Write(#[from] crate::gguf::writer::WriteError),
    #[error("cannot create temporary file {}", path.display())]
    CreateTemp {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Writing the temporary file failed (it has been removed).
    #[error("writing temporary file {}", path.display())]
    WriteTemp {
        path: PathBuf,
        #[source]
        source: Box<GenError>,
    },
    #[error("cannot rename {} to {}", from.display(), to.display())]
    Rename {
        from: PathBuf,
        to: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl GenError {
    /// True when the options were at fault (a bad fill list or plan, a bad layer count), not
    /// the file system.
    pub fn is_bad_input(&self) -> bool {
        match self {
            GenError::BadList { .. } | GenError::BadPlan { .. } | GenError::BadLayers { .. } => {
                true
            }
            GenError::WriteTemp { source, .. } => source.is_bad_input(),
            _ => false,
        }
    }
}

#[derive(Clone, Debug)]
struct GenTensor {
    ggml_type: GgmlType,
    nbytes: u64,
    key: u64,
    values: Values,
}

/// Computes the bytes of every tensor of one shape and seed.
#[derive(Clone, Debug)]
pub struct Generator {
    seed: u64,
    shape: Shape,
    tensors: HashMap<String, GenTensor>,
}

impl Generator {
    /// A generator for `shape`'s inventory. Every type in the family is supported.
    pub fn new(shape: &Shape, seed: u64) -> Result<Self, GenError> {
        let mut tensors = HashMap::new();
        for spec in shape.inventory() {
            if !supported(spec.ggml_type) {
                return Err(GenError::Unsupported {
                    name: spec.name,
                    ggml_type: spec.ggml_type,
                });
            }
            let nbytes = spec.nbytes()?;
            let values = Values::for_tensor(
                &spec.name,
                spec.ggml_type,
                shape.n_expert_used,
                shape.n_expert,
            );
            let key = tensor_key(seed, &spec.name);
            tensors.insert(
                spec.name,
                GenTensor {
                    ggml_type: spec.ggml_type,
                    nbytes,
                    key,
                    values,
                },
            );
        }
        Ok(Self {
            seed,
            shape: shape.clone(),
            tensors,
        })
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Bytes of tensor `name` (unpadded).
    pub fn tensor_len(&self, name: &str) -> Result<u64, GenError> {
        self.get(name).map(|t| t.nbytes)
    }

    /// Bytes of one expert of routed tensor `kind` (`nbytes / n_expert`).
    pub fn expert_bytes(&self, kind: ExpertKind) -> u64 {
        let ty = self.shape.routed_type(kind);
        let (d0, d1) = match kind {
            ExpertKind::Down => (self.shape.expert_ff, self.shape.n_embd),
            _ => (self.shape.n_embd, self.shape.expert_ff),
        };
        // The inventory was validated in `new` (bytes_for succeeded on the whole tensor).
        ty.bytes_for(d0).unwrap_or(0) * d1
    }

    fn get(&self, name: &str) -> Result<&GenTensor, GenError> {
        self.tensors
            .get(name)
            .ok_or_else(|| GenError::UnknownTensor {
                name: name.to_string(),
            })
    }

    /// Checks that `[offset, offset + len)` lies inside tensor `name`; returns its length.
    pub fn check_range(&self, name: &str, offset: u64, len: u64) -> Result<u64, GenError> {
        let t = self.get(name)?;
        if offset.checked_add(len).is_none_or(|end| end > t.nbytes) {
            return Err(GenError::Range {
                name: name.to_string(),
                offset,
                len,
                nbytes: t.nbytes,
            });
        }
        Ok(t.nbytes)
    }

    /// Fills `buf` with bytes `[offset, offset + buf.len())` of tensor `name`, as a fully
    /// written file holds them.
    pub fn tensor_bytes(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<(), GenError> {
        self.check_range(name, offset, buf.len() as u64)?;
        let t = self.get(name)?;
        let bb = t.ggml_type.block_bytes();
        let mut tmp = [0u8; 512];
        let block_buf = &mut tmp[..bb as usize];
        let mut pos = 0usize;
        while pos < buf.len() {
            let abs = offset + pos as u64;
            let (bi, within) = (abs / bb, (abs % bb) as usize);
            let n = (bb as usize - within).min(buf.len() - pos);
            if within == 0 && n == bb as usize {
                // Whole block: generate in place.
                blocks::block(t.ggml_type, t.values, t.key, bi, &mut buf[pos..pos + n]);
            } else {
                blocks::block(t.ggml_type, t.values, t.key, bi, block_buf);
                buf[pos..pos + n].copy_from_slice(&block_buf[within..within + n]);
            }
            pos += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
