//! The one error type of `compute`: bad input (lengths, shapes, types) is a typed error, never
//! a panic, since the shapes come from a file.

use crate::gguf::GgmlType;

/// What went wrong in a compute call; each variant names the quantity that was wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ComputeError {
    /// The type has no kernel here (only the types DS4's MoE path uses do).
    #[error("{ty} has no compute kernel (supported: F32, F16, Q8_0, Q2_K, Q4_K, IQ2_XXS)")]
    Unsupported { ty: GgmlType },
    /// A byte length that is not a whole number of blocks.
    #[error("{ty}: {len} bytes are not a whole number of {block_bytes}-byte blocks")]
    PartialBlock {
        ty: GgmlType,
        len: usize,
        block_bytes: usize,
    },
    /// A row length (in elements) that is not a multiple of the type's block size.
    #[error("{ty}: a row of {cols} values is not a whole number of {block_elems}-value blocks")]
    RowNotBlocks {
        ty: GgmlType,
        cols: usize,
        block_elems: usize,
    },
    /// A slice of the wrong length.
    #[error("{what}: expected {expected}, got {actual}")]
    Length {
        what: &'static str,
        expected: usize,
        actual: usize,
    },
    /// A matrix whose byte length is not a whole, non-zero number of rows.
    #[error("{what}: {len} bytes are not a whole number of {row_bytes}-byte rows")]
    NotWholeRows {
        what: &'static str,
        len: usize,
        row_bytes: usize,
    },
    /// A byte size (`count` items of `size` bytes) that does not fit in `usize`.
    #[error("{what}: {count} x {size} bytes overflows usize")]
    Overflow {
        what: &'static str,
        count: usize,
        size: usize,
    },
    /// top-k asked for more (or zero) items than there are scores.
    #[error("top-k: k = {k} of {n} scores (need 1 <= k <= n)")]
    TopK { k: usize, n: usize },
    /// A router score (p + bias) that is NaN or infinite: no order among experts is defined.
    #[error("top-k: score {index} (p + bias) is not finite: {value}")]
    NotFinite { index: usize, value: f32 },
}
