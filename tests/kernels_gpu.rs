//! The decode kernels (kernels/ds4_kernels.cu, NVRTC at run time) on a real GPU against the host
//! reference (`ds4_stream::compute`, itself checked against gguf-py in compute_oracle.rs): every
//! dequant-matvec type on random valid blocks within the rounding bound of kernels/README.md,
//! q8_0→f16 bit-exact, the element-wise kernels, rms_norm, and the ordering contract: a kernel
//! launched right after the copies of its weights (no host wait in between) sees those bytes.
//!
//! One body per check, run on every GPU backend built in (`cuda`: NVRTC; `hip`: hipRTC, run on
//! the H200 through tests/hip_shim). Skipped with a note where no GPU is present, unless
//! `DS4_GPU_TESTS=cuda` (or `hip`) demands it (the GPU machine's run).
#![cfg(any(feature = "cuda", feature = "hip"))]

mod engine_util;

use ds4_stream::compute::{self, f16::f32_to_f16};
use ds4_stream::device::{DeviceBuffer, GpuDevice};
use ds4_stream::gguf::GgmlType;
use std::sync::Arc;

/// Runs `body` on every GPU present, naming the backend in a failure.
fn on_every_gpu(body: fn(&dyn GpuDevice)) {
    for (name, dev) in engine_util::compute_gpus() {
        eprintln!("== {name}");
        body(dev.as_ref());
    }
}

/// splitmix64 stream of test data.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    /// A finite f16 scale of moderate size.
    fn scale(&mut self) -> [u8; 2] {
        f32_to_f16(self.unit() * 0.05).to_le_bytes()
    }
}

/// `rows` rows of `cols` values of random valid blocks of `ty`: random bytes, with every f16
/// field set to a finite scale (layouts of ggml-common.h).
fn random_weights(rng: &mut Rng, ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let n = compute::row_bytes(ty, cols).unwrap() * rows;
    let mut w: Vec<u8> = (0..n).map(|_| rng.byte()).collect();
    let (block, f16_at): (usize, &[usize]) = match ty {
        GgmlType::Q8_0 => (34, &[0]),
        GgmlType::Q4_K => (144, &[0, 2]),
        GgmlType::Q2_K => (84, &[80, 82]),
        GgmlType::IQ2_XXS => (66, &[0]),
        GgmlType::F16 => (2, &[0]),
        _ => unreachable!(),
    };
    for b in w.chunks_exact_mut(block) {
        for &at in f16_at {
            let s = rng.scale();
            b[at..at + 2].copy_from_slice(&s);
        }
    }
    w
}

fn upload(dev: &dyn GpuDevice, bytes: &[u8]) -> Arc<DeviceBuffer> {
    let buf = Arc::new(dev.alloc(bytes.len().max(4)).unwrap());
    let mut p = dev.alloc_pinned(bytes.len().max(4)).unwrap();
    p.as_mut_slice().unwrap()[..bytes.len()].copy_from_slice(bytes);
    dev.copy_h2d_async(&mut p, 0, &buf, 0, bytes.len()).unwrap();
    // No wait here: `p`'s drop waits for its copy; kernels are ordered after copies anyway.
    buf
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn download_f32(dev: &dyn GpuDevice, buf: &DeviceBuffer, n: usize) -> Vec<f32> {
    let mut b = vec![0u8; n * 4];
    dev.read_d2h(buf, 0, &mut b).unwrap();
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn matvec_matches_the_host_reference_for_every_type() {
    on_every_gpu(matvec_matches_the_host_reference_for_every_type_on);
}

fn matvec_matches_the_host_reference_for_every_type_on(dev: &dyn GpuDevice) {
    let mut rng = Rng(0x6b65_726e_656c_7301);
    // DS4 shapes in small: expert gate/up rows of 4096 columns, down rows of 2048, router F16.
    for (ty, rows, cols) in [
        (GgmlType::IQ2_XXS, 96, 4096),
        (GgmlType::Q2_K, 80, 2048),
        (GgmlType::Q4_K, 64, 4096),
        (GgmlType::Q8_0, 72, 4096),
        (GgmlType::F16, 256, 4096),
    ] {
        let w = random_weights(&mut rng, ty, rows, cols);
        let x: Vec<f32> = (0..cols).map(|_| rng.unit()).collect();
        let mut want = vec![0f32; rows];
        compute::matvec(ty, &w, rows, cols, &x, &mut want).unwrap();
        // Offset the weights inside their buffer (the engine packs experts back to back).
        let mut padded = vec![0u8; 100];
        padded.extend_from_slice(&w);
        let (wb, xb) = (upload(dev, &padded), upload(dev, &f32s(&x)));
        let yb = Arc::new(dev.alloc(rows * 4).unwrap());
        dev.matvec(ty, &wb, 100, &xb, &yb, rows, cols).unwrap();
        let got = download_f32(dev, &yb, rows);
        let rb = compute::row_bytes(ty, cols).unwrap();
        let g = if matches!(ty, GgmlType::Q8_0 | GgmlType::F16) {
            32
        } else {
            256
        };
        let mut row = vec![0f32; cols];
        for r in 0..rows {
            compute::dequantize_row(ty, &w[r * rb..(r + 1) * rb], &mut row).unwrap();
            let mag: f64 = row.iter().zip(&x).map(|(a, b)| (a * b).abs() as f64).sum();
            // Both orders' rounding bounds (host and kernel), with slack for FMA contraction.
            let bound = 2.0 * (g + cols / g + 2) as f64 * 2f64.powi(-24) * mag + 1e-30;
            let err = (got[r] as f64 - want[r] as f64).abs();
            assert!(
                err <= bound,
                "{ty:?} row {r}: gpu {} host {} (|err| {err:e} > {bound:e})",
                got[r],
                want[r]
            );
        }
        eprintln!("{ty:?}: {rows}x{cols} within the bound");
    }
}

#[test]
fn q8_0_to_f16_is_bit_exact() {
    on_every_gpu(q8_0_to_f16_is_bit_exact_on);
}

fn q8_0_to_f16_is_bit_exact_on(dev: &dyn GpuDevice) {
    let mut rng = Rng(7);
    let n = 32 * 1000;
    let q = random_weights(&mut rng, GgmlType::Q8_0, 1, n);
    let mut want = vec![0u16; n];
    compute::q8_0_to_f16(&q, &mut want).unwrap();
    let qb = upload(dev, &q);
    let out = Arc::new(dev.alloc(n * 2).unwrap());
    dev.q8_0_to_f16(&qb, 0, &out, n).unwrap();
    let mut b = vec![0u8; n * 2];
    dev.read_d2h(&out, 0, &mut b).unwrap();
    let got: Vec<u16> = b
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    assert!(got == want, "q8_0 -> f16 differs from the host");
}

#[test]
fn elementwise_kernels_and_rms_norm_match_the_host() {
    on_every_gpu(elementwise_kernels_and_rms_norm_match_the_host_on);
}

fn elementwise_kernels_and_rms_norm_match_the_host_on(dev: &dyn GpuDevice) {
    let mut rng = Rng(11);
    let n = 4096;
    let g: Vec<f32> = (0..n).map(|_| rng.unit() * 30.0).collect();
    let u: Vec<f32> = (0..n).map(|_| rng.unit() * 30.0).collect();
    let (gb, ub) = (upload(dev, &f32s(&g)), upload(dev, &f32s(&u)));
    let out = Arc::new(dev.alloc(n * 4).unwrap());
    let close = |a: f32, b: f32| (a - b).abs() <= 1e-5 * (1.0 + b.abs());
    // swiglu with clamp 10 (DS4's), then sqrt(softplus), rms_norm and weighted add.
    dev.swiglu_clamp(&gb, &ub, &out, n, 10.0).unwrap();
    let got = download_f32(dev, &out, n);
    let mut want = vec![0f32; n];
    compute::ops::swiglu(&g, &u, 10.0, &mut want).unwrap();
    assert!(
        got.iter().zip(&want).all(|(&a, &b)| close(a, b)),
        "swiglu_clamp"
    );
    dev.sqrt_softplus(&gb, &out, n).unwrap();
    let got = download_f32(dev, &out, n);
    compute::ops::sqrt_softplus_slice(&g, &mut want).unwrap();
    assert!(
        got.iter().zip(&want).all(|(&a, &b)| close(a, b)),
        "sqrt_softplus"
    );
    dev.rms_norm(&gb, &ub, &out, n, 1e-6).unwrap();
    let got = download_f32(dev, &out, n);
    compute::ops::rms_norm(&g, &u, 1e-6, &mut want).unwrap();
    assert!(
        got.iter().zip(&want).all(|(&a, &b)| close(a, b)),
        "rms_norm"
    );
    let y = upload(dev, &f32s(&u));
    dev.weighted_add(&y, &gb, 0.37, n).unwrap();
    let got = download_f32(dev, &y, n);
    let mut want = u.clone();
    compute::ops::weighted_add(&mut want, 0.37, &g).unwrap();
    assert!(got == want, "weighted_add is exact");
}

/// Weights copied in and a kernel launched at once, 50 times over one pair of buffers: each
/// result must be that round's, so the kernel waited (on the GPU) for the copies before it.
#[test]
fn kernels_see_the_copies_issued_before_them() {
    on_every_gpu(kernels_see_the_copies_issued_before_them_on);
}

fn kernels_see_the_copies_issued_before_them_on(dev: &dyn GpuDevice) {
    let (rows, cols) = (512, 4096);
    let mut rng = Rng(99);
    let rb = compute::row_bytes(GgmlType::Q8_0, cols).unwrap();
    let wb = Arc::new(dev.alloc(rows * rb).unwrap());
    let x: Vec<f32> = (0..cols).map(|_| rng.unit()).collect();
    let xb = upload(dev, &f32s(&x));
    let mut staging = dev.alloc_pinned(rows * rb).unwrap();
    for round in 0..50 {
        let w = random_weights(&mut rng, GgmlType::Q8_0, rows, cols);
        staging.as_mut_slice().unwrap().copy_from_slice(&w);
        dev.copy_h2d_async(&mut staging, 0, &wb, 0, w.len())
            .unwrap();
        assert_matvec_sees(dev, &wb, &w, &xb, &x, (rows, cols), round);
    }
    dev.synchronize().unwrap();
}

/// Launches a Q8_0 matvec of `wb` (just copied from `w`, not waited for) by `xb` (= `x`) and
/// asserts every row matches the host's from `w`: no row was computed from stale weights.
fn assert_matvec_sees(
    dev: &dyn GpuDevice,
    wb: &Arc<DeviceBuffer>,
    w: &[u8],
    xb: &Arc<DeviceBuffer>,
    x: &[f32],
    (rows, cols): (usize, usize),
    round: usize,
) {
    let yb = Arc::new(dev.alloc(rows * 4).unwrap());
    dev.matvec(GgmlType::Q8_0, wb, 0, xb, &yb, rows, cols)
        .unwrap();
    let mut want = vec![0f32; rows];
    compute::matvec(GgmlType::Q8_0, w, rows, cols, x, &mut want).unwrap();
    dev.synchronize_compute().unwrap();
    let got = download_f32(dev, &yb, rows);
    let bad = got
        .iter()
        .zip(&want)
        .filter(|(a, b)| (**a - **b).abs() > 1e-3 * (1.0 + b.abs()))
        .count();
    assert_eq!(
        bad, 0,
        "round {round}: {bad} rows computed from stale weights"
    );
}

/// The same contract with four copy streams (`GpuConfig::copy_streams`): eight threads each
/// copy a block of the weights (so every stream takes copies) and hand their staging back
/// unwaited; the kernel launched next must see every block, so it waited on every stream.
#[test]
fn kernels_see_the_copies_of_every_copy_stream() {
    for (name, dev) in engine_util::compute_gpus_with(Some(4)) {
        eprintln!("== {name} (4 copy streams)");
        kernels_see_the_copies_of_every_copy_stream_on(dev);
    }
}

fn kernels_see_the_copies_of_every_copy_stream_on(dev: Arc<dyn GpuDevice>) {
    let (rows, cols, threads) = (8192, 4096, 8);
    let mut rng = Rng(7);
    let rb = compute::row_bytes(GgmlType::Q8_0, cols).unwrap();
    let block = rows / threads * rb;
    let wb = Arc::new(dev.alloc(rows * rb).unwrap());
    let x: Vec<f32> = (0..cols).map(|_| rng.unit()).collect();
    let xb = upload(dev.as_ref(), &f32s(&x));
    let mut stagings: Vec<_> = (0..threads)
        .map(|_| dev.alloc_pinned(block).unwrap())
        .collect();
    for round in 0..6 {
        let w = Arc::new(random_weights(&mut rng, GgmlType::Q8_0, rows, cols));
        let handles: Vec<_> = stagings
            .drain(..)
            .enumerate()
            .map(|(t, mut staging)| {
                let (dev, wb, w) = (dev.clone(), wb.clone(), w.clone());
                std::thread::spawn(move || {
                    let part = &w[t * block..(t + 1) * block];
                    staging.as_mut_slice().unwrap().copy_from_slice(part);
                    dev.copy_h2d_async(&mut staging, 0, &wb, t * block, block)
                        .unwrap();
                    staging // not waited for: its copy may still run
                })
            })
            .collect();
        stagings = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_matvec_sees(dev.as_ref(), &wb, &w, &xb, &x, (rows, cols), round);
        for s in &mut stagings {
            s.wait().unwrap();
        }
    }
    dev.synchronize().unwrap();
}
