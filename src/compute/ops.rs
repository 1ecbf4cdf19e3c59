//! The element-wise and reduction steps of the MoE stack `ds4 --ssd-streaming` computes (its
//! arithmetic is fixed in docs/MOE_STACK.md): rms_norm, sqrt(softplus), the router's
//! top-k, swiglu with clamp, and the weighted accumulate. All f32, as the stack is.
//!
//! Summation order (fixed, so host results are deterministic): every sum goes through [`dot`]:
//! 8 lanes, lane j accumulates elements j, j+8, j+16, … in index order, then the lanes are
//! added as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)). No fused multiply-add anywhere (Rust never
//! contracts `a * b + c`), so each step rounds as written.

use super::ComputeError;

/// Σ a_i·b_i in f32 in the order of the module docs. Lengths must match (callers check).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..8 {
            acc[j] += x[j] * y[j];
        }
    }
    for (j, (x, y)) in ra.iter().zip(rb).enumerate() {
        acc[j] += x * y;
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
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

/// `out_i = x_i / sqrt(mean(x·x) + eps) · w_i` (divide, then multiply, as written).
/// mean = dot(x, x) / n. `w` and `out` have x's length; an empty x gives an empty out.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) -> Result<(), ComputeError> {
    check_len("rms_norm weight", x.len(), w.len())?;
    check_len("rms_norm output", x.len(), out.len())?;
    if x.is_empty() {
        return Ok(());
    }
    let mean = dot(x, x) / x.len() as f32;
    let denom = (mean + eps).sqrt();
    for ((o, &xi), &wi) in out.iter_mut().zip(x).zip(w) {
        *o = xi / denom * wi;
    }
    Ok(())
}

/// softplus(z) = log(1 + exp(z)) in the stable form max(z, 0) + log1p(exp(−|z|)): no overflow
/// for large z (softplus(z) → z), no loss for very negative z (→ exp(z), not 0 − rounding).
pub fn softplus(z: f32) -> f32 {
    z.max(0.0) + (-z.abs()).exp().ln_1p()
}

/// sqrt(softplus(z)): the router's expert score p.
pub fn sqrt_softplus(z: f32) -> f32 {
    softplus(z).sqrt()
}

/// `out_i = sqrt_softplus(z_i)`.
pub fn sqrt_softplus_slice(z: &[f32], out: &mut [f32]) -> Result<(), ComputeError> {
    check_len("sqrt_softplus output", z.len(), out.len())?;
    for (o, &v) in out.iter_mut().zip(z) {
        *o = sqrt_softplus(v);
    }
    Ok(())
}

/// The `k` largest of `p_i + bias_i` (bias absent = 0), as expert ids ordered by descending
/// p + bias, ties by ascending id (so a tie at the cut keeps the lower id). The sum is one f32
/// addition; scores that compare equal numerically (0.0 and −0.0 included) are ties. A NaN or
/// infinite score is an error: no order is defined for it. 1 <= k <= p.len().
pub fn top_k(p: &[f32], bias: Option<&[f32]>, k: usize) -> Result<Vec<usize>, ComputeError> {
    if let Some(b) = bias {
        check_len("top_k bias", p.len(), b.len())?;
    }
    if k == 0 || k > p.len() {
        return Err(ComputeError::TopK { k, n: p.len() });
    }
    let scores: Vec<f32> = match bias {
        Some(b) => p.iter().zip(b).map(|(&a, &c)| a + c).collect(),
        None => p.to_vec(),
    };
    if let Some((index, &value)) = scores.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(ComputeError::NotFinite { index, value });
    }
    let mut ids: Vec<usize> = (0..p.len()).collect();
    // Finite scores: partial_cmp is total here; equal scores fall through to the id.
    ids.sort_by(|&a, &b| {
        scores[b]
            .partial_cmp(&scores[a])
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.cmp(&b))
    });
    ids.truncate(k);
    Ok(ids)
}

/// silu(g) = g / (1 + exp(−g)).
pub fn silu(g: f32) -> f32 {
    g / (1.0 + (-g).exp())
}

/// `out_i = silu(g_i') · u_i'` where, when `clamp > 0`, g' = min(g, clamp) and
/// u' = clamp(u, −clamp, clamp); otherwise g' = g, u' = u (0 or a negative clamp = no clamp).
pub fn swiglu(g: &[f32], u: &[f32], clamp: f32, out: &mut [f32]) -> Result<(), ComputeError> {
    check_len("swiglu up", g.len(), u.len())?;
    check_len("swiglu output", g.len(), out.len())?;
    for ((o, &gi), &ui) in out.iter_mut().zip(g).zip(u) {
        let (gi, ui) = if clamp > 0.0 {
            (gi.min(clamp), ui.clamp(-clamp, clamp))
        } else {
            (gi, ui)
        };
        *o = silu(gi) * ui;
    }
    Ok(())
}

/// `y_i += w · v_i` (the product rounded, then the sum).
pub fn weighted_add(y: &mut [f32], w: f32, v: &[f32]) -> Result<(), ComputeError> {
    check_len("weighted_add input", y.len(), v.len())?;
    for (yi, &vi) in y.iter_mut().zip(v) {
        *yi += w * vi;
    }
    Ok(())
}

#[cfg(test)]
#[path = "ops_tests.rs"]
mod tests;
