//! Errors of the decode path: bad tensors and keys are bad input (named), reads and kernels
//! are runtime failures.

use super::LoadError;
use crate::compute::ComputeError;
use crate::engine::EngineError;

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// A tensor the MoE stack needs is missing, of the wrong type or shape, or holds bad values.
    #[error("tensor {name}: {why}")]
    Tensor { name: String, why: String },
    /// A metadata key is missing or of the wrong type.
    #[error("metadata key {key}: {why}")]
    Key { key: String, why: String },
    /// A bad line of an input file other than the model (a popularity list).
    #[error("{what}: {why}")]
    Input { what: String, why: String },
    /// A token id outside the vocabulary.
    #[error("token id {id} is outside the vocabulary (0..{vocab})")]
    Token { id: u64, vocab: u64 },
    /// Reading weights failed.
    #[error("reading {what}")]
    Read {
        what: String,
        #[source]
        source: EngineError,
    },
    /// A compute kernel refused its input (a shape the validation should have caught).
    #[error("computing {what}")]
    Compute {
        what: String,
        #[source]
        source: ComputeError,
    },
    /// Filling expert-cache slots failed: a cache too small for a layer (bad input) or a
    /// device / OS failure (runtime); [`LoadError::is_bad_input`] tells which.
    #[error(transparent)]
    Load(#[from] LoadError),
}

impl DecodeError {
    /// True for errors caused by the input file or arguments (exit 2), false for runtime ones.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            DecodeError::Tensor { .. }
                | DecodeError::Key { .. }
                | DecodeError::Token { .. }
                | DecodeError::Input { .. }
        ) || matches!(self, DecodeError::Load(e) if e.is_bad_input())
    }
}
