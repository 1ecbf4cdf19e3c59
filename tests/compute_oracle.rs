//! gguf-py + numpy as the oracle of `compute`: random valid blocks of every supported type
//! (tests/py/compute_oracle.py builds them field by field, finite f16 scales) must dequantise
//! to exactly gguf-py's f32 bits; matvec must agree with numpy's float64 dot products within
//! the rounding bound of its documented summation order; Q8_0 → F16 and f32 → f16 must equal
//! numpy's float16 bits; one expert FFN must agree with a float64 numpy FFN.
//!
//! Tolerances:
//! - dequantize_row, q8_0_to_f16, f32_to_f16: exact (bits).
//! - matvec, per row: |y − y64| <= (G + cols/G + 2) · 2^-24 · Σ|w_i·x_i| with G the summation
//!   group (the block size; 32 for F32/F16): the worst-case error of that order, so it cannot
//!   flake, yet one wrong element (an error of about Σ|w·x|/cols) breaks it for these sizes.
//! - expert_ffn: ‖y − y64‖₂ <= 1e-5 · ‖y64‖₂ (three matvecs and a clamp; measured 3.9e-7).

mod gguf_common;

use ds4_stream::compute::f16::f32_to_f16;
use ds4_stream::compute::{dequantize_row, expert_ffn, matvec, q8_0_to_f16};
use ds4_stream::gguf::GgmlType;
use gguf_common::{py_script, python};
use serde_json::Value;
use std::path::Path;

/// Runs compute_oracle.py gen into `dir`; returns the manifest.
fn generate(dir: &Path, seed: u64) -> Value {
    let out = std::process::Command::new(python())
        .arg(py_script("compute_oracle.py"))
        .arg("gen")
        .arg(dir)
        .arg(seed.to_string())
        .output()
        .expect("cannot run DS4_PYTHON");
    assert!(
        out.status.success(),
        "compute_oracle.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m: Value = serde_json::from_slice(&out.stdout).expect("manifest is JSON");
    assert_eq!(
        m["gguf_version"], "0.19.0",
        "the oracle must be gguf-py 0.19.0"
    );
    m
}

fn read(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn f64s(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn u16s(b: &[u8]) -> Vec<u16> {
    b.chunks_exact(2)
        .map(|c| u16::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// The cases of the manifest as (name, type, rows, cols).
fn cases(m: &Value) -> Vec<(String, GgmlType, usize, usize)> {
    m["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                GgmlType::from_name(c["type"].as_str().unwrap()).expect("known type"),
                c["rows"].as_u64().unwrap() as usize,
                c["cols"].as_u64().unwrap() as usize,
            )
        })
        .collect()
}

#[test]
fn dequantize_is_bit_identical_to_gguf_py() {
    let dir = tempfile::tempdir().unwrap();
    let m = generate(dir.path(), 1);
    let mut types = std::collections::BTreeSet::new();
    let mut values = 0;
    for (name, ty, rows, cols) in cases(&m) {
        let w = read(dir.path(), &format!("{name}.w"));
        let want = f32s(&read(dir.path(), &format!("{name}.deq")));
        assert_eq!(want.len(), rows * cols, "{name}");
        let mut got = vec![f32::NAN; rows * cols];
        dequantize_row(ty, &w, &mut got).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (i, (g, r)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.to_bits(),
                r.to_bits(),
                "{name} ({ty}): value {i} (row {}, col {}): ours {g:e}, gguf-py {r:e}",
                i / cols,
                i % cols
            );
        }
        types.insert(ty.name());
        values += got.len();
    }
    assert_eq!(
        types.into_iter().collect::<Vec<_>>(),
        ["F16", "F32", "IQ2_XXS", "Q2_K", "Q4_K", "Q8_0"]
    );
    assert!(values > 300_000, "{values} values compared");
}

#[test]
fn matvec_is_within_the_rounding_bound_of_float64() {
    let dir = tempfile::tempdir().unwrap();
    let m = generate(dir.path(), 2);
    for (name, ty, rows, cols) in cases(&m) {
        let w = read(dir.path(), &format!("{name}.w"));
        let x = f32s(&read(dir.path(), &format!("{name}.x")));
        let y64 = f64s(&read(dir.path(), &format!("{name}.y64")));
        let abs64 = f64s(&read(dir.path(), &format!("{name}.abs64")));
        let mut y = vec![f32::NAN; rows];
        matvec(ty, &w, rows, cols, &x, &mut y).unwrap_or_else(|e| panic!("{name}: {e}"));
        let group = if ty.block_elems() == 1 {
            32
        } else {
            ty.block_elems() as usize
        };
        let bound = (group + cols.div_ceil(group) + 2) as f64 * 2f64.powi(-24);
        let mut worst = 0f64;
        for r in 0..rows {
            let err = (f64::from(y[r]) - y64[r]).abs();
            assert!(
                err <= bound * abs64[r],
                "{name} ({ty}) row {r}: ours {:e}, float64 {:e}, error {err:e} > {bound:e} · {:e}",
                y[r],
                y64[r],
                abs64[r]
            );
            assert!(
                abs64[r] > 0.0,
                "{name} row {r}: an all-zero row proves nothing"
            );
            worst = worst.max(err / abs64[r]);
        }
        eprintln!("{name}: worst error / Σ|w·x| = {worst:.2e} (bound {bound:.2e})");
    }
}

#[test]
fn q8_0_to_f16_rounds_like_numpy() {
    let dir = tempfile::tempdir().unwrap();
    let m = generate(dir.path(), 3);
    let mut checked = 0;
    for (name, ty, rows, cols) in cases(&m) {
        if ty != GgmlType::Q8_0 {
            continue;
        }
        let w = read(dir.path(), &format!("{name}.w"));
        let want = u16s(&read(dir.path(), &format!("{name}.f16")));
        let mut got = vec![0u16; rows * cols];
        q8_0_to_f16(&w, &mut got).unwrap();
        for (i, (g, r)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, r, "{name}: value {i}: ours {g:#06x}, numpy {r:#06x}");
        }
        checked += got.len();
    }
    assert!(checked >= 8 * 256 + 16 * 4096);
}

#[test]
fn f32_to_f16_rounds_like_numpy() {
    let dir = tempfile::tempdir().unwrap();
    generate(dir.path(), 4);
    let input = f32s(&read(dir.path(), "f32_to_f16.in"));
    let want = u16s(&read(dir.path(), "f32_to_f16.out"));
    assert_eq!(input.len(), want.len());
    assert!(input.len() > 190_000);
    for (f, r) in input.iter().zip(&want) {
        let g = f32_to_f16(*f);
        assert_eq!(
            g,
            *r,
            "{f:e} ({:#010x}): ours {g:#06x}, numpy {r:#06x}",
            f.to_bits()
        );
    }
}

fn rel_l2(y: &[f32], y64: &[f64]) -> f64 {
    let num: f64 = y
        .iter()
        .zip(y64)
        .map(|(a, b)| (f64::from(*a) - b).powi(2))
        .sum();
    let den: f64 = y64.iter().map(|b| b * b).sum();
    (num / den).sqrt()
}

#[test]
fn expert_ffn_matches_float64() {
    let dir = tempfile::tempdir().unwrap();
    let m = generate(dir.path(), 5);
    let f = &m["ffn"];
    let (e, ff) = (
        f["e"].as_u64().unwrap() as usize,
        f["ff"].as_u64().unwrap() as usize,
    );
    let clamp = f["clamp"].as_f64().unwrap() as f32;
    // The clamp must bite on both sides, or this would not test it.
    assert!(f["clamped_gate"].as_u64().unwrap() > 10, "{f}");
    assert!(f["clamped_up"].as_u64().unwrap() > 10, "{f}");
    let gate = read(dir.path(), "ffn.gate");
    let up = read(dir.path(), "ffn.up");
    let down = read(dir.path(), "ffn.down");
    let x = f32s(&read(dir.path(), "ffn.x"));
    let y64 = f64s(&read(dir.path(), "ffn.y64"));
    assert_eq!((x.len(), y64.len(), gate.len()), (e, e, ff * e / 256 * 66));
    let run = |c: f32| {
        expert_ffn(
            (GgmlType::IQ2_XXS, &gate),
            (GgmlType::IQ2_XXS, &up),
            (GgmlType::Q2_K, &down),
            &x,
            c,
        )
        .unwrap()
    };
    let y = run(clamp);
    let err = rel_l2(&y, &y64);
    eprintln!("expert_ffn: relative L2 error {err:.2e}");
    assert!(err <= 1e-5, "relative L2 error {err:e}");
    // Without the clamp the answer is far off: the tolerance does distinguish.
    assert!(rel_l2(&run(0.0), &y64) > 1e-2);
    // Shapes that do not fit are errors: down with a row too few, up of another FF.
    let r = expert_ffn(
        (GgmlType::IQ2_XXS, &gate),
        (GgmlType::IQ2_XXS, &up),
        (GgmlType::Q2_K, &down[..down.len() - 84]),
        &x,
        clamp,
    );
    assert!(r.is_err(), "{r:?}");
    let r = expert_ffn(
        (GgmlType::IQ2_XXS, &gate),
        (GgmlType::IQ2_XXS, &up[..up.len() - 2 * 66]),
        (GgmlType::Q2_K, &down),
        &x,
        clamp,
    );
    assert!(r.is_err(), "{r:?}");
}
