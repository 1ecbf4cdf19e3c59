//! IEEE binary16 <-> f32 by bit manipulation (the crate has no `half` dependency, and the GPU
//! kernels do the same by hand, so both sides share one definition).
//!
//! `f16_to_f32` is exact for every input (f16 is a subset of f32; NaN payloads are kept, as
//! numpy keeps them). `f32_to_f16` rounds to nearest, ties to even, with correct subnormals and
//! overflow to ±inf, exactly as numpy's `astype(np.float16)`; a NaN becomes a quiet NaN that
//! keeps the top payload bits (numpy may set different payload bits: NaNs are not compared).

/// The f32 value of the f16 with bits `h`. Exact.
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    match exp {
        0 => {
            // Zero or subnormal: man · 2^-24, exact in f32 (man < 2^10, power-of-two scale).
            let v = man as f32 * (1.0 / 16_777_216.0);
            f32::from_bits(v.to_bits() | sign)
        }
        31 => f32::from_bits(sign | 0x7f80_0000 | (man << 13)),
        _ => f32::from_bits(sign | ((exp + 112) << 23) | (man << 13)),
    }
}

/// The f16 bits nearest to `f` (round to nearest, ties to even).
pub fn f32_to_f16(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let man = x & 0x7f_ffff;
    if exp == 0xff {
        return if man != 0 {
            sign | 0x7e00 | (man >> 13) as u16
        } else {
            sign | 0x7c00
        };
    }
    let e = exp - 127;
    if e > 15 {
        return sign | 0x7c00;
    }
    if e >= -14 {
        // Normal f16: keep 10 of 23 mantissa bits; a carry out of the mantissa bumps the
        // exponent, which is the right answer (up to +inf at the top).
        let mut h = (((e + 15) as u32) << 10) | (man >> 13);
        let rest = man & 0x1fff;
        if rest > 0x1000 || (rest == 0x1000 && h & 1 == 1) {
            h += 1;
        }
        return sign | h as u16;
    }
    if e < -25 {
        // Below half of the smallest subnormal (2^-25): rounds to zero. f32 subnormals land here.
        return sign;
    }
    // Subnormal f16: value = m · 2^(e-23) = (m >> s) units of 2^-24 with s = -(e+1) in 14..=24.
    let m = man | 0x80_0000;
    let s = (-(e + 1)) as u32;
    let mut h = m >> s;
    let rest = m & ((1 << s) - 1);
    let half = 1 << (s - 1);
    if rest > half || (rest == half && h & 1 == 1) {
        h += 1;
    }
    sign | h as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_f16_round_trips() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                assert!(f32_to_f16(f) & 0x7c00 == 0x7c00 && f32_to_f16(f) & 0x3ff != 0);
            } else {
                assert_eq!(f32_to_f16(f), h, "{h:#06x} -> {f:e}");
            }
        }
    }

    #[test]
    fn known_values_and_rounding() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x8000).to_bits(), 0x8000_0000);
        assert_eq!(f32_to_f16(65519.0), 0x7bff);
        assert_eq!(f32_to_f16(65520.0), 0x7c00); // the tie rounds to even: infinity
        assert_eq!(f32_to_f16(2f32.powi(-25)), 0); // tie between 0 and 2^-24: even is 0
        assert_eq!(f32_to_f16(2f32.powi(-25) * 1.5), 1);
        assert_eq!(f32_to_f16(3.0 * 2f32.powi(-25)), 2); // tie 1.5 units: even is 2
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00); // tie: even mantissa
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        assert_eq!(f32_to_f16(-f32::INFINITY), 0xfc00);
        assert_eq!(f32_to_f16(f32::MIN_POSITIVE / 2.0), 0);
    }
}
