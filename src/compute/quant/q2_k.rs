//! Q2_K: 256 values per 84-byte block: 16 scale bytes (low nibble scale, high nibble min, one
//! per 16 values), 64 bytes of 2-bit quants, f16 d, f16 dmin.
//! value = (d · scale) · q − (dmin · min), each product rounded to f32 as gguf-py does.
//! Quant layout: value i = g·128 + j·32 + l (g in 0..2, j in 0..4, l in 0..32) is bits 2j..2j+2
//! of byte 16 + g·32 + l; its scale byte is i / 16.

use crate::compute::f16::f16_to_f32;

pub(super) const ELEMS: usize = 256;
pub(super) const BYTES: usize = 84;

pub(super) fn dequantize_block(b: &[u8], out: &mut [f32]) {
    let scales = &b[0..16];
    let qs = &b[16..80];
    let d = f16_to_f32(u16::from_le_bytes([b[80], b[81]]));
    let dmin = f16_to_f32(u16::from_le_bytes([b[82], b[83]]));
    for g in 0..2 {
        for j in 0..4 {
            for l in 0..32 {
                let i = g * 128 + j * 32 + l;
                let s = scales[i / 16];
                let dl = d * f32::from(s & 0xf);
                let ml = dmin * f32::from(s >> 4);
                let q = f32::from((qs[g * 32 + l] >> (2 * j)) & 3);
                out[i] = dl * q - ml;
            }
        }
    }
}
