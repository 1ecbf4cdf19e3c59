//! Q4_K: 256 values per 144-byte block: f16 d, f16 dmin, 12 bytes of eight 6-bit (scale, min)
//! pairs, 128 bytes of 4-bit quants. Sub-block s (32 values) = 32-byte chunk s / 2, low nibbles
//! for even s, high for odd. value = (d · scale_s) · q − (dmin · min_s), as gguf-py rounds it.

use crate::compute::f16::f16_to_f32;

pub(super) const ELEMS: usize = 256;
pub(super) const BYTES: usize = 144;

/// The (scale, min) of sub-block `s` (0..8) from the 12 packed bytes (ggml's
/// `get_scale_min_k4`): s < 4 takes 6 bits of bytes s and s+4; s >= 4 takes a nibble of byte
/// s+4 and the top 2 bits of bytes s-4 and s.
pub(super) fn scale_min(sc: &[u8], s: usize) -> (u8, u8) {
    if s < 4 {
        (sc[s] & 0x3f, sc[s + 4] & 0x3f)
    } else {
        (
            (sc[s + 4] & 0x0f) | ((sc[s - 4] >> 2) & 0x30),
            (sc[s + 4] >> 4) | ((sc[s] >> 2) & 0x30),
        )
    }
}

pub(super) fn dequantize_block(b: &[u8], out: &mut [f32]) {
    let d = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    let dmin = f16_to_f32(u16::from_le_bytes([b[2], b[3]]));
    let sc = &b[4..16];
    let qs = &b[16..BYTES];
    for s in 0..8 {
        let (scale, min) = scale_min(sc, s);
        let dl = d * f32::from(scale);
        let ml = dmin * f32::from(min);
        let chunk = &qs[(s / 2) * 32..(s / 2) * 32 + 32];
        let shift = 4 * (s % 2);
        for (l, &q) in chunk.iter().enumerate() {
            out[s * 32 + l] = dl * f32::from((q >> shift) & 0xf) - ml;
        }
    }
}
