//! Hand-built blocks with known values, and every bad-input path. The gguf-py comparison on
//! random blocks is tests/compute_oracle.rs.

use super::*;

fn f16(v: f32) -> [u8; 2] {
    f32_to_f16(v).to_le_bytes()
}

#[test]
fn q8_0_block_by_hand() {
    let mut b = vec![0u8; 34];
    b[..2].copy_from_slice(&f16(0.5));
    for i in 0..32 {
        b[2 + i] = (i as i8 - 16) as u8;
    }
    let mut out = [0f32; 32];
    dequantize_row(GgmlType::Q8_0, &b, &mut out).unwrap();
    for (i, v) in out.iter().enumerate() {
        assert_eq!(*v, (i as f32 - 16.0) * 0.5);
    }
    let mut h = [0u16; 32];
    q8_0_to_f16(&b, &mut h).unwrap();
    assert_eq!(h[0], f32_to_f16(-8.0));
    assert_eq!(h[17], f32_to_f16(0.5));
}

#[test]
fn q2_k_block_by_hand() {
    let mut b = vec![0u8; 84];
    b[0] = 0x21; // values 0..16: scale 1, min 2
    b[15] = 0x03; // values 240..256: scale 3, min 0
    b[16] = 0b1110_0100; // byte 0 of group 0: value 0 = 0, 32 = 1, 64 = 2, 96 = 3
    b[16 + 32 + 31] = 0b1100_0000; // group 1, l = 31, j = 3: value 128+96+31 = 255 = 3
    b[80..82].copy_from_slice(&f16(2.0));
    b[82..84].copy_from_slice(&f16(0.25));
    let mut out = [0f32; 256];
    dequantize_row(GgmlType::Q2_K, &b, &mut out).unwrap();
    assert_eq!(out[0], 2.0 * 1.0 * 0.0 - 0.25 * 2.0);
    assert_eq!(out[1], -0.5);
    assert_eq!(out[32], 0.0); // scale byte 2 is 0
    assert_eq!(out[255], 2.0 * 3.0 * 3.0);
}

#[test]
fn q4_k_scale_min_unpacking() {
    // Sub-blocks 0..4 take the low 6 bits; 4..8 combine a nibble of bytes 8..12 with the top 2
    // bits of bytes 0..8.
    let sc = [
        0xc1, 0x02, 0x03, 0x04, 0x45, 0x06, 0x07, 0x08, 0x9a, 0x0b, 0x0c, 0x0d,
    ];
    assert_eq!(scale_min_q4k(&sc, 0), (0x01, 0x05));
    assert_eq!(scale_min_q4k(&sc, 4), (0x0a | 0x30, 0x09 | 0x10));
    assert_eq!(scale_min_q4k(&sc, 5), (0x0b, 0x00));
}

fn scale_min_q4k(sc: &[u8], s: usize) -> (u8, u8) {
    q4_k::scale_min(sc, s)
}

#[test]
fn iq2_xxs_tables() {
    assert_eq!(IQ2XXS_KSIGNS[0], 0x00);
    assert_eq!(IQ2XXS_KSIGNS[1], 0x81);
    assert_eq!(IQ2XXS_KSIGNS[3], 0x03);
    assert_eq!(IQ2XXS_KSIGNS[127], 0xff);
    assert_eq!(IQ2XXS_GRID[0], 0x0808_0808_0808_0808);
    assert_eq!(IQ2XXS_GRID[1], 0x0808_0808_0808_082b);
    assert_eq!(IQ2XXS_GRID[255], 0x2b2b_2b19_0808_1908);
    // Every grid byte is one of the three magnitudes.
    for g in IQ2XXS_GRID {
        for j in 0..8 {
            assert!(matches!((g >> (8 * j)) as u8, 0x08 | 0x19 | 0x2b));
        }
    }
}

#[test]
fn iq2_xxs_block_by_hand() {
    let mut b = vec![0u8; 66];
    b[..2].copy_from_slice(&f16(1.0));
    // Group 0: grid indexes 1, 0, 0, 0; signs index 1 for the first 8 (0x81: values 0 and 7
    // negative); ls = 2 → db = 1 · 2.5 · 0.25 = 0.625.
    b[2] = 1;
    b[6..10].copy_from_slice(&((2u32 << 28) | 1).to_le_bytes());
    let mut out = [0f32; 256];
    dequantize_row(GgmlType::IQ2_XXS, &b, &mut out).unwrap();
    assert_eq!(out[0], -0.625 * 43.0);
    assert_eq!(out[1], 0.625 * 8.0);
    assert_eq!(out[7], -0.625 * 8.0);
    assert_eq!(out[8], 0.625 * 8.0);
    assert_eq!(out[32], 0.125 * 8.0); // group 1: ls = 0 → db = 0.125
}

#[test]
fn matvec_matches_a_plain_dot() {
    // F32 2 x 40: crosses a 32-value group boundary, and a partial last group.
    let w: Vec<f32> = (0..80).map(|i| (i as f32 - 40.0) * 0.25).collect();
    let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    let x: Vec<f32> = (0..40).map(|i| 1.0 / (1 + i) as f32).collect();
    let mut y = [0f32; 2];
    matvec(GgmlType::F32, &bytes, 2, 40, &x, &mut y).unwrap();
    for r in 0..2 {
        let exact: f64 = (0..40)
            .map(|c| f64::from(w[r * 40 + c]) * f64::from(x[c]))
            .sum();
        assert!(
            (f64::from(y[r]) - exact).abs() < 1e-5,
            "{} vs {exact}",
            y[r]
        );
    }
    // F16: the same through f16 bits.
    let h: Vec<u8> = w.iter().flat_map(|&v| f16(v)).collect();
    let mut y16 = [0f32; 2];
    matvec(GgmlType::F16, &h, 2, 40, &x, &mut y16).unwrap();
    assert_eq!(y16, y); // every w is exact in f16, so the same sums
}

#[test]
fn bad_input_is_a_typed_error() {
    let mut out = [0f32; 32];
    assert_eq!(
        dequantize_row(GgmlType::Q8_0, &[0; 33], &mut out),
        Err(ComputeError::PartialBlock {
            ty: GgmlType::Q8_0,
            len: 33,
            block_bytes: 34
        })
    );
    assert!(matches!(
        dequantize_row(GgmlType::Q8_0, &[0; 34], &mut out[..31]),
        Err(ComputeError::Length {
            expected: 32,
            actual: 31,
            ..
        })
    ));
    assert_eq!(
        dequantize_row(GgmlType::Q6_K, &[0; 210], &mut [0f32; 256]),
        Err(ComputeError::Unsupported { ty: GgmlType::Q6_K })
    );
    assert!(!is_supported(GgmlType::BF16));
    assert!(is_supported(GgmlType::IQ2_XXS));
    let x = [0f32; 256];
    let mut y = [0f32; 2];
    assert_eq!(
        matvec(GgmlType::Q2_K, &[0; 168], 2, 255, &x[..255], &mut y),
        Err(ComputeError::RowNotBlocks {
            ty: GgmlType::Q2_K,
            cols: 255,
            block_elems: 256
        })
    );
    assert!(matches!(
        matvec(GgmlType::Q2_K, &[0; 167], 2, 256, &x, &mut y),
        Err(ComputeError::Length {
            expected: 168,
            actual: 167,
            ..
        })
    ));
    assert!(matches!(
        matvec(GgmlType::Q2_K, &[0; 168], 2, 256, &x[..128], &mut y),
        Err(ComputeError::Length {
            expected: 256,
            actual: 128,
            ..
        })
    ));
    assert!(matches!(
        matvec(GgmlType::Q2_K, &[0; 168], 2, 256, &x, &mut y[..1]),
        Err(ComputeError::Length {
            expected: 2,
            actual: 1,
            ..
        })
    ));
    assert!(matches!(
        matvec(GgmlType::Q8_0, &[], usize::MAX, 64, &x[..64], &mut y),
        Err(ComputeError::Overflow { .. })
    ));
    assert!(q8_0_to_f16(&[0; 34], &mut [0u16; 31]).is_err());
    assert!(q8_0_to_f16(&[0; 35], &mut [0u16; 32]).is_err());
    assert_eq!(row_bytes(GgmlType::IQ2_XXS, 4096), Ok(16 * 66));
    // Empty matrices are fine.
    matvec(GgmlType::Q8_0, &[], 0, 64, &x[..64], &mut []).unwrap();
    let mut y1 = [7f32; 1];
    matvec(GgmlType::F32, &[], 1, 0, &[], &mut y1).unwrap();
    assert_eq!(y1, [0.0]);
}
