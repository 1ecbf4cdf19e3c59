//! One expert's feed-forward block, `down · swiglu(gate · x, up · x)`: the unit of work the
//! decode path repeats for each routed expert (weight w_j applied by the caller) and for the
//! shared expert.

use super::ops::swiglu;
use super::quant::{matvec, row_bytes};
use super::ComputeError;
use crate::gguf::GgmlType;

/// A weight matrix as stored: its ggml type and its bytes (rows back to back).
pub type Weights<'a> = (GgmlType, &'a [u8]);

/// Rows of `w` when each row holds `cols` values: the byte length must be a whole, non-zero
/// number of rows (E = 0 is refused: no row has a size).
fn rows_of(what: &'static str, w: Weights<'_>, cols: usize) -> Result<usize, ComputeError> {
    let rb = row_bytes(w.0, cols)?;
    if rb == 0 || w.1.len() % rb != 0 {
        return Err(ComputeError::NotWholeRows {
            what,
            len: w.1.len(),
            row_bytes: rb,
        });
    }
    Ok(w.1.len() / rb)
}

/// `down · swiglu(gate · x, up · x, clamp)` for one expert. With E = `x.len()`: `gate` and
/// `up` are [E, FF] (FF rows of E values, FF taken from gate's byte length), `down` is [FF, E]
/// (E rows of FF values). Returns E values. `clamp` as in [`swiglu`] (<= 0: none).
pub fn expert_ffn(
    gate: Weights<'_>,
    up: Weights<'_>,
    down: Weights<'_>,
    x: &[f32],
    clamp: f32,
) -> Result<Vec<f32>, ComputeError> {
    let e = x.len();
    let ff = rows_of("expert_ffn gate", gate, e)?;
    let up_rows = rows_of("expert_ffn up", up, e)?;
    if up_rows != ff {
        return Err(ComputeError::Length {
            what: "expert_ffn up rows (FF, from gate)",
            expected: ff,
            actual: up_rows,
        });
    }
    let mut g = vec![0f32; ff];
    let mut u = vec![0f32; ff];
    matvec(gate.0, gate.1, ff, e, x, &mut g)?;
    matvec(up.0, up.1, ff, e, x, &mut u)?;
    let mut a = vec![0f32; ff];
    swiglu(&g, &u, clamp, &mut a)?;
    let mut y = vec![0f32; e];
    matvec(down.0, down.1, e, ff, &a, &mut y)?;
    Ok(y)
}
