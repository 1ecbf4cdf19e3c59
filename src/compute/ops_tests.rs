use super::*;

#[test]
fn dot_order_is_the_documented_one() {
    // 1e8 swamps 1.0 in f32 unless the small terms meet first: lanes decide the result.
    let a = [1e8f32, 1.0, -1e8, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0];
    let ones = [1f32; 9];
    // lane0 = 1e8 + 1 (element 8) = 1e8; lane1 = 1; lane2 = -1e8; lane3 = 1:
    // ((1e8 + 1) + (-1e8 + 1)) = 1e8 + (-1e8) = 0 in f32.
    assert_eq!(dot(&a, &ones), 0.0);
    assert_eq!(dot(&[], &[]), 0.0);
    assert_eq!(dot(&[2.0, 3.0], &[4.0, 5.0]), 23.0);
}

#[test]
fn rms_norm_matches_the_formula() {
    let x = [3.0f32, -4.0];
    let w = [1.0f32, 0.5];
    let mut out = [0f32; 2];
    rms_norm(&x, &w, 0.0, &mut out).unwrap();
    // mean(x²) = 12.5, sqrt = 3.5355339
    let d = 12.5f32.sqrt();
    assert_eq!(out, [3.0 / d * 1.0, -4.0 / d * 0.5]);
    // eps enters under the root.
    rms_norm(&[0.0, 0.0], &w, 0.25, &mut out).unwrap();
    assert_eq!(out, [0.0, 0.0]);
    rms_norm(&[1.0, 1.0], &[1.0, 1.0], 3.0, &mut out).unwrap();
    assert_eq!(out, [0.5, 0.5]);
    assert!(matches!(
        rms_norm(&x, &w[..1], 0.0, &mut out),
        Err(ComputeError::Length {
            expected: 2,
            actual: 1,
            ..
        })
    ));
}

#[test]
fn softplus_is_stable_at_large_magnitudes() {
    assert_eq!(softplus(100.0), 100.0); // log(1 + e^100) overflows the naive f32 form
    assert_eq!(sqrt_softplus(100.0), 10.0);
    assert_eq!(softplus(1e30), 1e30);
    let tiny = softplus(-100.0); // e^-100 ≈ 3.72e-44: a subnormal, not 0
    assert!(tiny > 0.0 && (tiny - (-100f32).exp()).abs() <= f32::from_bits(1));
    assert!(sqrt_softplus(-100.0) > 1.9e-22 && sqrt_softplus(-100.0) < 1.96e-22);
    assert_eq!(softplus(-200.0), 0.0);
    assert!((softplus(0.0) - std::f32::consts::LN_2).abs() < 1e-7);
    assert!((softplus(1.0) - 1.313_261_7).abs() < 1e-6);
    assert!((softplus(-1.0) - 0.313_261_7).abs() < 1e-6);
    let mut out = [0f32; 2];
    sqrt_softplus_slice(&[100.0, 0.0], &mut out).unwrap();
    assert_eq!(out[0], 10.0);
    assert!(sqrt_softplus_slice(&[1.0], &mut out).is_err());
}

#[test]
fn top_k_orders_by_score_then_id() {
    let p = [0.5f32, 0.9, 0.5, 0.7, 0.9, 0.1];
    assert_eq!(top_k(&p, None, 3).unwrap(), vec![1, 4, 3]);
    // A tie at the cut: 0 and 2 both score 0.5; the lower id is kept.
    assert_eq!(top_k(&p, None, 4).unwrap(), vec![1, 4, 3, 0]);
    assert_eq!(top_k(&p, None, 6).unwrap(), vec![1, 4, 3, 0, 2, 5]);
    // The bias changes the choice and the order.
    let b = [0.0f32, 0.0, 0.45, 0.0, -0.5, 0.0];
    assert_eq!(top_k(&p, Some(&b), 3).unwrap(), vec![2, 1, 3]);
    // Ties created by the sum: 0.25 + 0.5 == 0.5 + 0.25 exactly.
    let p2 = [0.25f32, 0.5];
    let b2 = [0.5f32, 0.25];
    assert_eq!(top_k(&p2, Some(&b2), 1).unwrap(), vec![0]);
    // 0.0 and -0.0 are a tie.
    assert_eq!(top_k(&[-0.0, 0.0], None, 1).unwrap(), vec![0]);
    assert_eq!(top_k(&[0.0, -0.0], None, 1).unwrap(), vec![0]);
}

#[test]
fn top_k_rejects_bad_input() {
    let p = [1.0f32, 2.0];
    assert_eq!(top_k(&p, None, 0), Err(ComputeError::TopK { k: 0, n: 2 }));
    assert_eq!(top_k(&p, None, 3), Err(ComputeError::TopK { k: 3, n: 2 }));
    assert!(matches!(
        top_k(&p, Some(&[0.0]), 1),
        Err(ComputeError::Length { .. })
    ));
    assert!(matches!(
        top_k(&[1.0, f32::NAN], None, 1),
        Err(ComputeError::NotFinite { index: 1, .. })
    ));
    assert!(matches!(
        top_k(&p, Some(&[f32::INFINITY, 0.0]), 1),
        Err(ComputeError::NotFinite { index: 0, .. })
    ));
}

#[test]
fn swiglu_clamps_gate_above_and_up_both_sides() {
    let g = [10.0f32, -10.0, 1.0];
    let u = [10.0f32, -10.0, 0.5];
    let mut out = [0f32; 3];
    swiglu(&g, &u, 7.0, &mut out).unwrap();
    assert_eq!(out[0], silu(7.0) * 7.0);
    assert_eq!(out[1], silu(-10.0) * -7.0); // the gate is clamped above only
    assert_eq!(out[2], silu(1.0) * 0.5);
    // No clamp when c <= 0.
    for c in [0.0f32, -1.0] {
        swiglu(&g, &u, c, &mut out).unwrap();
        assert_eq!(out[0], silu(10.0) * 10.0);
        assert_eq!(out[1], silu(-10.0) * -10.0);
    }
    assert_eq!(silu(0.0), 0.0);
    assert_eq!(silu(-1000.0), 0.0); // exp overflows to inf: g / inf = -0, no NaN
    assert_eq!(silu(1000.0), 1000.0);
    assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
    assert!(swiglu(&g, &u[..2], 1.0, &mut out).is_err());
}

#[test]
fn weighted_add_accumulates() {
    let mut y = [1.0f32, 2.0];
    weighted_add(&mut y, 0.5, &[2.0, -4.0]).unwrap();
    assert_eq!(y, [2.0, 0.0]);
    assert!(weighted_add(&mut y, 1.0, &[1.0]).is_err());
}
