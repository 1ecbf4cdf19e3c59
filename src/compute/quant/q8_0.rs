//! Q8_0: 32 values per 34-byte block: f16 scale d, then 32 signed bytes q; value = q · d.

use crate::compute::f16::f16_to_f32;

pub(super) const ELEMS: usize = 32;
pub(super) const BYTES: usize = 34;

/// One block (`b.len() == BYTES`) into `out` (`out.len() == ELEMS`).
pub(super) fn dequantize_block(b: &[u8], out: &mut [f32]) {
    let d = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    for (o, &q) in out.iter_mut().zip(&b[2..BYTES]) {
        *o = f32::from(q as i8) * d;
    }
}
