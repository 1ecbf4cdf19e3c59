//! Deterministic, valid ggml blocks: every block is a pure function of (tensor key, block
//! index), so any byte of any tensor can be recomputed without generating the rest.
//!
//! The hash is splitmix64 (a counter-based generator: no state to carry between blocks). The
//! values are chosen so that dequantizing gives finite, small weights (|w| < 0.5 for quantized
//! and F16 weights; norm weights around 1.0): scales are positive normal f16 values in a narrow exponent band, quant bits are
//! random. A zero block (what a file hole reads as) is also valid: scale 0 gives all zeros.

use crate::gguf::GgmlType;

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The splitmix64 finaliser: a bijective 64-bit mix.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The per-tensor key: FNV-1a of the name, mixed with the seed.
pub fn tensor_key(seed: u64, name: &str) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    mix64(seed ^ mix64(h))
}

/// A splitmix64 stream seeded from (key, index).
struct Stream(u64);

impl Stream {
    fn new(key: u64, index: u64) -> Self {
        Stream(mix64(key ^ index.wrapping_mul(GOLDEN).rotate_left(17)))
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix64(self.0)
    }
    /// Fills `out` with random bytes.
    fn fill(&mut self, out: &mut [u8]) {
        for c in out.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

/// A positive normal f16 with biased exponent in `lo..=hi` and a random mantissa:
/// value in [2^(lo-15), 2^(hi-14)).
fn f16_pos(h: u64, lo: u16, hi: u16) -> u16 {
    let span = u64::from(hi - lo + 1);
    let exp = lo + (h % span) as u16;
    let mant = ((h >> 20) & 0x3FF) as u16;
    (exp << 10) | mant
}

/// A uniform float in [-1, 1).
fn unit(h: u64) -> f32 {
    ((h >> 40) as f32) / (1u64 << 23) as f32 - 1.0
}

/// What the elements of a plain (non-block) tensor mean, chosen from its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Values {
    /// Around 1.0 (norm weights, hyper-connection scales).
    Unity,
    /// Small signed values (|v| < 0.1): biases, sinks, bases.
    Small,
    /// Matrix weights (|v| < 2^-3).
    Weight,
    /// tid2eid: per token, `used` distinct expert ids in [0, n_expert).
    ExpertIds { used: u64, n_expert: u64 },
}

impl Values {
    /// The value class of tensor `name` of type `ty` in a model with these expert counts.
    pub fn for_tensor(name: &str, ty: GgmlType, used: u64, n_expert: u64) -> Self {
        match ty {
            GgmlType::I32 if name.ends_with("tid2eid.weight") => {
                Values::ExpertIds { used, n_expert }
            }
            GgmlType::F32 if name.contains("norm") || name.ends_with("_scale.weight") => {
                Values::Unity
            }
            GgmlType::F32 => Values::Small,
            _ => Values::Weight,
        }
    }
}

/// Greatest common divisor (for picking a stride coprime with the expert count).
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Types this module can generate.
pub fn supported(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::F32
            | GgmlType::F16
            | GgmlType::I32
            | GgmlType::Q8_0
            | GgmlType::Q2_K
            | GgmlType::Q4_K
            | GgmlType::IQ2_XXS
    )
}

/// Writes block `index` of a tensor (`out.len() == ty.block_bytes()`). For plain types a
/// block is one element. Unsupported types produce zeros (callers check [`supported`]).
pub fn block(ty: GgmlType, values: Values, key: u64, index: u64, out: &mut [u8]) {
    let mut s = Stream::new(key, index);
    match ty {
        GgmlType::F32 => {
            let h = s.next();
            let v = match values {
                Values::Unity => 1.0 + 0.1 * unit(h),
                Values::Small => 0.1 * unit(h),
                _ => 0.125 * unit(h),
            };
            out.copy_from_slice(&v.to_le_bytes());
        }
        GgmlType::F16 => {
            // |v| in [2^-10, 2^-3): biased exponents 5..=11, random sign.
            let h = s.next();
            let bits = f16_pos(h, 5, 11) | (((h >> 40) & 1) as u16) << 15;
            out.copy_from_slice(&bits.to_le_bytes());
        }
        GgmlType::I32 => {
            let v: i32 = match values {
                Values::ExpertIds { used, n_expert } if n_expert > 0 && used > 0 => {
                    // Element index = token * used + slot; ids base + slot * stride (mod X)
                    // are distinct for slot < X when stride is coprime with X.
                    let (token, slot) = (index / used, index % used);
                    let mut t = Stream::new(key, token);
                    let base = t.next() % n_expert;
                    let mut stride = 1 + t.next() % n_expert.max(2);
                    while gcd(stride, n_expert) != 1 {
                        stride += 1;
                    }
                    ((base + slot % n_expert * (stride % n_expert)) % n_expert) as i32
                }
                _ => (s.next() % 65536) as i32,
            };
            out.copy_from_slice(&v.to_le_bytes());
        }
        GgmlType::Q8_0 => {
            // f16 d in [2^-13, 2^-9), then 32 i8 in [-127, 127]: |w| < 0.25.
            let d = f16_pos(s.next(), 2, 5);
            out[..2].copy_from_slice(&d.to_le_bytes());
            s.fill(&mut out[2..34]);
            for q in &mut out[2..34] {
                if *q == 0x80 {
                    *q = 0x81; // -128 -> -127, as ggml's quantizer never emits -128
                }
            }
        }
        GgmlType::Q2_K => {
            // scales[16] (low nibble scale, high nibble min), qs[64], f16 d, f16 dmin.
            // |w| <= d*15*3 + dmin*15 < 2^-9 * 60 < 0.125.
            s.fill(&mut out[..80]);
            let h = s.next();
            out[80..82].copy_from_slice(&f16_pos(h, 2, 5).to_le_bytes());
            out[82..84].copy_from_slice(&f16_pos(h >> 32, 2, 5).to_le_bytes());
        }
        GgmlType::Q4_K => {
            // f16 d, f16 dmin, scales[12] (6-bit scales/mins), qs[128].
            // |w| <= d*63*15 + dmin*63 < 2^-12 * 1008 < 0.25.
            let h = s.next();
            out[0..2].copy_from_slice(&f16_pos(h, 1, 2).to_le_bytes());
            out[2..4].copy_from_slice(&f16_pos(h >> 32, 1, 2).to_le_bytes());
            s.fill(&mut out[4..144]);
        }
        GgmlType::IQ2_XXS => {
            // f16 d, then 8 groups of (4 grid indices, 28 sign bits + 4-bit scale): every bit
            // pattern is valid. |w| <= d * 15.5 * 0.25 * 43 < 2^-9 * 167 < 0.33.
            out[0..2].copy_from_slice(&f16_pos(s.next(), 2, 5).to_le_bytes());
            s.fill(&mut out[2..66]);
        }
        _ => out.fill(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f16_to_f32(b: u16) -> f32 {
        let exp = (b >> 10) & 0x1F;
        let mant = f32::from(b & 0x3FF);
        let sign = if b >> 15 == 1 { -1.0 } else { 1.0 };
        match exp {
            0 => sign * mant * 2f32.powi(-24),
            31 => f32::NAN,
            e => sign * (1.0 + mant / 1024.0) * 2f32.powi(i32::from(e) - 15),
        }
    }

    #[test]
    fn deterministic_and_key_dependent() {
        let k = tensor_key(7, "blk.0.ffn_gate_exps.weight");
        let mut a = [0u8; 66];
        let mut b = [0u8; 66];
        block(GgmlType::IQ2_XXS, Values::Weight, k, 5, &mut a);
        block(GgmlType::IQ2_XXS, Values::Weight, k, 5, &mut b);
        assert_eq!(a, b);
        block(GgmlType::IQ2_XXS, Values::Weight, k, 6, &mut b);
        assert_ne!(a, b);
        assert_ne!(k, tensor_key(8, "blk.0.ffn_gate_exps.weight"));
        assert_ne!(k, tensor_key(7, "blk.0.ffn_up_exps.weight"));
    }

    #[test]
    fn scales_are_positive_finite_and_small() {
        for i in 0..2000 {
            let mut q8 = [0u8; 34];
            block(GgmlType::Q8_0, Values::Weight, 1, i, &mut q8);
            let d = f16_to_f32(u16::from_le_bytes([q8[0], q8[1]]));
            assert!(d > 0.0 && d < 1.0 / 512.0, "{d}");
            assert!(q8[2..].iter().all(|&q| q != 0x80));
            let mut f = [0u8; 2];
            block(GgmlType::F16, Values::Weight, 1, i, &mut f);
            let v = f16_to_f32(u16::from_le_bytes(f));
            assert!(
                v.is_finite() && v.abs() < 0.125 && v.abs() >= 1.0 / 1024.0,
                "{v}"
            );
            let mut n = [0u8; 4];
            block(GgmlType::F32, Values::Unity, 1, i, &mut n);
            let v = f32::from_le_bytes(n);
            assert!((0.9..=1.1).contains(&v), "{v}");
        }
    }

    #[test]
    fn tid2eid_rows_are_distinct_experts() {
        for &(used, x) in &[(6u64, 256u64), (6, 16), (6, 6), (3, 12)] {
            for token in 0..300 {
                let mut ids: Vec<i32> = (0..used)
                    .map(|slot| {
                        let mut b = [0u8; 4];
                        let v = Values::ExpertIds { used, n_expert: x };
                        block(GgmlType::I32, v, 9, token * used + slot, &mut b);
                        i32::from_le_bytes(b)
                    })
                    .collect();
                assert!(ids.iter().all(|&e| e >= 0 && (e as u64) < x), "{ids:?}");
                ids.sort();
                ids.dedup();
                assert_eq!(ids.len() as u64, used, "x={x} token={token}");
            }
        }
    }
}
