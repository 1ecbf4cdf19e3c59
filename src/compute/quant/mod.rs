//! ggml block formats of DS4's MoE path: dequantisation (bit-identical to gguf-py 0.19's
//! `gguf.quants.dequantize`) and the batch-1 matrix-vector product over quantised rows.
//!
//! A row of `cols` values is `cols / block_elems` blocks; a matrix is `rows` such rows back to
//! back (GGUF dims `[cols, rows]`, dim0 innermost). F32 and F16 are "blocks" of one value.
//!
//! Summation order of [`matvec`] (fixed, so the host result is deterministic): the row is cut
//! into groups of G values (G = the block size, 32 or 256; G = 32 for F32 / F16, the last group
//! of such a row may be shorter); each group is dequantised exactly, dotted with x by
//! [`crate::compute::ops::dot`] (8 lanes), and the group sums are added in order into an f32
//! accumulator starting at 0. Error bound against an exact dot of the dequantised row:
//! |err| <= (G + cols/G + 2) · 2^-24 · Σ|w_i·x_i| (the test checks exactly this).

mod iq2_xxs;
mod q2_k;
mod q4_k;
mod q8_0;

use super::f16::{f16_to_f32, f32_to_f16};
use super::ops::dot;
use super::ComputeError;
use crate::gguf::GgmlType;

// The tables are checked by the unit tests and against the copy in kernels/ds4_kernels.cu.
#[cfg(test)]
pub(crate) use iq2_xxs::{GRID as IQ2XXS_GRID, KSIGNS as IQ2XXS_KSIGNS};

/// Largest block (values): the stack buffer of one group.
const MAX_GROUP: usize = 256;
/// Group size of the plain types (F32, F16) in `matvec`.
const PLAIN_GROUP: usize = 32;

/// Decodes one block (`block bytes` in, `block elems` out).
type BlockFn = fn(&[u8], &mut [f32]);

/// How one type is laid out and decoded.
#[derive(Clone, Copy)]
struct Format {
    elems: usize,
    bytes: usize,
    block: BlockFn,
}

fn f32_block(b: &[u8], out: &mut [f32]) {
    out[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
}

fn f16_block(b: &[u8], out: &mut [f32]) {
    out[0] = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
}

fn format(ty: GgmlType) -> Result<Format, ComputeError> {
    let (elems, bytes, block): (usize, usize, BlockFn) = match ty {
        GgmlType::F32 => (1, 4, f32_block),
        GgmlType::F16 => (1, 2, f16_block),
        GgmlType::Q8_0 => (q8_0::ELEMS, q8_0::BYTES, q8_0::dequantize_block),
        GgmlType::Q2_K => (q2_k::ELEMS, q2_k::BYTES, q2_k::dequantize_block),
        GgmlType::Q4_K => (q4_k::ELEMS, q4_k::BYTES, q4_k::dequantize_block),
        GgmlType::IQ2_XXS => (iq2_xxs::ELEMS, iq2_xxs::BYTES, iq2_xxs::dequantize_block),
        _ => return Err(ComputeError::Unsupported { ty }),
    };
    debug_assert_eq!(elems as u64, ty.block_elems());
    debug_assert_eq!(bytes as u64, ty.block_bytes());
    Ok(Format {
        elems,
        bytes,
        block,
    })
}

/// Whether `ty` has a kernel here: F32, F16, Q8_0, Q2_K, Q4_K, IQ2_XXS.
pub fn is_supported(ty: GgmlType) -> bool {
    format(ty).is_ok()
}

/// Bytes of one row of `cols` values of type `ty`.
pub fn row_bytes(ty: GgmlType, cols: usize) -> Result<usize, ComputeError> {
    let f = format(ty)?;
    if cols % f.elems != 0 {
        return Err(ComputeError::RowNotBlocks {
            ty,
            cols,
            block_elems: f.elems,
        });
    }
    (cols / f.elems)
        .checked_mul(f.bytes)
        .ok_or(ComputeError::Overflow {
            what: "row (blocks x block bytes)",
            count: cols / f.elems,
            size: f.bytes,
        })
}

/// Values in `len` bytes of whole blocks of `f`.
fn values_in(ty: GgmlType, f: Format, len: usize) -> Result<usize, ComputeError> {
    if len % f.bytes != 0 {
        return Err(ComputeError::PartialBlock {
            ty,
            len,
            block_bytes: f.bytes,
        });
    }
    Ok(len / f.bytes * f.elems)
}

fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<(), ComputeError> {
    if expected == actual {
        Ok(())
    } else {
        Err(ComputeError::Length {
            what,
            expected,
            actual,
        })
    }
}

/// Decodes whole blocks; lengths already checked.
fn decode(f: Format, bytes: &[u8], out: &mut [f32]) {
    for (b, o) in bytes
        .chunks_exact(f.bytes)
        .zip(out.chunks_exact_mut(f.elems))
    {
        (f.block)(b, o);
    }
}

/// Dequantises `bytes` (whole blocks of `ty`) into `out`, which must hold exactly their values.
/// Bit-identical to gguf-py's `gguf.quants.dequantize` (same f32 operations in the same order).
pub fn dequantize_row(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<(), ComputeError> {
    let f = format(ty)?;
    let n = values_in(ty, f, bytes.len())?;
    check_len("dequantize_row output", n, out.len())?;
    decode(f, bytes, out);
    Ok(())
}

/// `y = W · x` for W = `rows` rows of `cols` values of type `ty` (`weights` exactly
/// `rows · row_bytes(ty, cols)` bytes), batch 1, f32 accumulation in the order of the module
/// docs. `x.len() == cols`, `y.len() == rows`.
pub fn matvec(
    ty: GgmlType,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), ComputeError> {
    let f = format(ty)?;
    let rb = row_bytes(ty, cols)?;
    let total = rows.checked_mul(rb).ok_or(ComputeError::Overflow {
        what: "matvec weights (rows x row bytes)",
        count: rows,
        size: rb,
    })?;
    check_len("matvec weights (bytes)", total, weights.len())?;
    check_len("matvec x", cols, x.len())?;
    check_len("matvec y", rows, y.len())?;
    if rb == 0 {
        y.fill(0.0);
        return Ok(());
    }
    let group = if f.elems == 1 { PLAIN_GROUP } else { f.elems };
    let group_bytes = group / f.elems * f.bytes;
    let mut buf = [0f32; MAX_GROUP];
    for (row, yr) in weights.chunks_exact(rb).zip(y.iter_mut()) {
        let mut acc = 0f32;
        for (gb, xg) in row.chunks(group_bytes).zip(x.chunks(group)) {
            let w = &mut buf[..xg.len()];
            decode(f, gb, w);
            acc += dot(w, xg);
        }
        *yr = acc;
    }
    Ok(())
}

/// Q8_0 blocks to f16 bits: dequantise (exactly), then round each value to the nearest f16
/// (ties to even), as the C engine's Q8_0 → F16 weight cache does. `out.len()` = the values.
pub fn q8_0_to_f16(bytes: &[u8], out: &mut [u16]) -> Result<(), ComputeError> {
    let ty = GgmlType::Q8_0;
    let f = format(ty)?;
    let n = values_in(ty, f, bytes.len())?;
    check_len("q8_0_to_f16 output", n, out.len())?;
    let mut buf = [0f32; q8_0::ELEMS];
    for (b, o) in bytes
        .chunks_exact(f.bytes)
        .zip(out.chunks_exact_mut(f.elems))
    {
        q8_0::dequantize_block(b, &mut buf);
        for (h, &v) in o.iter_mut().zip(&buf) {
            *h = f32_to_f16(v);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
