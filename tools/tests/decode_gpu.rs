//! `ds4 --backend cuda|hip`: the MoE stack on the GPU kernels, end to end through the binary, on the
//! demo model (its clamp triggers; 10 layers, 3 of them hash layers):
//! - resident and streamed runs on the GPU give bit-identical hidden states (same kernels, same
//!   order), at cache sizes from the minimum (6 experts) up, and under every policy;
//! - the GPU's hidden states agree with the host reference within a relative L2 error of 1e-5
//!   (the kernels' summation order differs; kernels/README.md states the per-matvec bound).
//!
//! Every test runs on each GPU backend built in (`cuda`; `hip`, on the H200 through
//! tests/hip_shim) whose device opens; skipped with a note otherwise, unless
//! `DS4_GPU_TESTS=cuda` (or `hip`) demands it (the GPU machine's run).
#![cfg(any(feature = "cuda", feature = "hip"))]

#[path = "../../tests/engine_util/mod.rs"]
mod engine_util;
mod gen_util;

use ds4_stream::device::GpuDevice;
use gen_util::{gen_model, read_f32s, rel_l2, run_ds4_json};
use std::sync::Arc;

/// The backend names only (the `ds4` runs open their own device).
fn backends() -> Vec<&'static str> {
    engine_util::compute_gpus()
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}

#[test]
fn the_gpu_stack_matches_the_host_and_streams_bit_identically() {
    for b in backends() {
        eprintln!("== {b}");
        gpu_stack_matches_the_host(b);
    }
}

fn gpu_stack_matches_the_host(backend: &str) {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("demo.gguf");
    gen_model(&model, &["--scale", "demo"]);
    let m = model.to_str().unwrap();
    let dump = |name: &str| dir.path().join(name);
    let tokens = ["--tokens", "3,4099,17,3,8191,255,1024,9"];
    let host_dump = dump("host.f32");
    let mut host = vec!["-m", m, "--backend", "host", "--dump-hidden"];
    host.push(host_dump.to_str().unwrap());
    host.extend(tokens);
    let h = run_ds4_json(&host);
    let mut gpu = vec!["-m", m, "--backend", backend, "--dump-hidden"];
    let gpu_dump = dump("gpu.f32");
    gpu.push(gpu_dump.to_str().unwrap());
    gpu.extend(tokens);
    let g = run_ds4_json(&gpu);
    assert_eq!(g["backend"], backend);
    let rel = rel_l2(&read_f32s(&gpu_dump), &read_f32s(&host_dump));
    assert!(rel <= 1e-5, "GPU vs host: relative L2 error {rel:e}");
    eprintln!(
        "GPU vs host reference: relative L2 error {rel:e}; host digest {}",
        h["digest"]
    );
    for (slots, policy) in [
        ("6", "lru"),
        ("7", "arc"),
        ("50", "lfu-decay"),
        ("400", "w-tinylfu"),
    ] {
        let mut s = vec!["-m", m, "--backend", backend, "--ssd-streaming"];
        s.extend([
            "--ssd-streaming-cache-experts",
            slots,
            "--cache-policy",
            policy,
        ]);
        s.extend(tokens);
        let v = run_ds4_json(&s);
        assert_eq!(
            v["digest"], g["digest"],
            "streamed ({slots}, {policy}) vs resident on the GPU"
        );
        // The lookahead and the C engine's read pattern change reads, never results.
        for extra in [
            "--ssd-streaming-lookahead",
            "--ssd-streaming-c-engine-pattern",
            "--ram-streaming-cache-experts=64",
        ] {
            let mut x = s.clone();
            x.push(extra);
            let w = run_ds4_json(&x);
            assert_eq!(w["digest"], g["digest"], "{extra} ({slots}, {policy})");
            if extra.ends_with("lookahead") {
                let la = &w["lookahead"];
                assert!(la["predicted"].as_u64().unwrap() > 0, "{la}");
                assert!(la["used"].as_u64() <= la["predicted"].as_u64(), "{la}");
            } else if extra.starts_with("--ram") {
                // One RAM lookup per device miss; the RAM tier holds 64 experts.
                let r = &w["ram_tier"];
                assert_eq!(r["experts"], 64, "{r}");
                let c = &r["cache"];
                let lookups = c["hits"].as_u64().unwrap() + c["misses"].as_u64().unwrap();
                assert_eq!(
                    lookups,
                    w["cache"]["stats"]["misses"].as_u64().unwrap(),
                    "{w}"
                );
                assert_eq!(
                    r["copies"],
                    c["hits"].as_u64().unwrap() + c["fills_done"].as_u64().unwrap(),
                    "{r}"
                );
                eprintln!("ram tier ({slots}, {policy}): {r}");
            } else {
                assert_eq!(w["prefetched_hash_experts"], 0, "{w}");
            }
        }
        eprintln!(
            "{backend} streamed {slots} {policy}: hit rate {:.3}, {:.2} tokens/s",
            v["cache"]["hit_rate"].as_f64().unwrap(),
            v["tokens_per_s"].as_f64().unwrap()
        );
    }
}

/// `ds4 --simulate-used-memory`: the memory is really taken (the plan's free memory drops by
/// it), and a run that no longer fits is refused before it allocates.
#[test]
fn simulated_used_memory_is_taken_for_real() {
    for b in backends() {
        eprintln!("== {b}");
        simulated_used_memory_on(b);
    }
}

fn simulated_used_memory_on(backend: &str) {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    gen_model(&model, &["--scale", "tiny"]);
    let m = model.to_str().unwrap();
    let base = ["-m", m, "--backend", backend, "-n", "2", "--ssd-streaming"];
    let free = |v: &serde_json::Value| v["device_memory"]["free_at_plan"].as_u64().unwrap();
    let plain = run_ds4_json(&base);
    let mut x = base.to_vec();
    x.extend(["--simulate-used-memory", "4GiB"]);
    let taken = run_ds4_json(&x);
    assert_eq!(taken["digest"], plain["digest"]);
    let drop = free(&plain) as i64 - free(&taken) as i64;
    assert!(
        (drop - (4i64 << 30)).abs() < 64 << 20,
        "free memory at the plan dropped by {drop} B, not 4 GiB"
    );
    // All but 64 MiB taken: the plan (headroom 256 MiB alone) no longer fits and says so
    // (exit 1) before allocating.
    let all = format!("{}", free(&plain) - (64u64 << 20));
    let mut y = base.to_vec();
    y.extend(["--simulate-used-memory", &all]);
    let o = gen_util::ds4().args(&y).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("the plan does not fit"), "{err}");
}

/// `GpuDevice::copy_d2d_async` (the RAM tier's copy): mapped host memory → device memory is
/// byte exact, and both ranges are leased while the copy runs.
#[test]
fn mapped_to_device_copies_are_byte_exact() {
    for (name, dev) in engine_util::compute_gpus() {
        eprintln!("== {name}");
        mapped_to_device_copies_on(dev.as_ref());
    }
}

fn mapped_to_device_copies_on(dev: &dyn GpuDevice) {
    let n = 3 << 20;
    let ram = Arc::new(dev.alloc_mapped(n).unwrap());
    assert!(ram.host_visible());
    let data: Vec<u8> = (0..n).map(|i| (i * 31 + i / 4093) as u8).collect();
    let mut pinned = dev.alloc_pinned(n).unwrap();
    pinned.as_mut_slice().unwrap()[..n].copy_from_slice(&data);
    dev.copy_h2d_async(&mut pinned, 0, &ram, 0, n).unwrap();
    pinned.wait().unwrap();
    let gpu = Arc::new(dev.alloc(2 * n).unwrap());
    let ev = dev.copy_d2d_async(&ram, 1000, &gpu, n, n - 1000).unwrap();
    ev.wait().unwrap();
    let mut back = vec![0u8; n - 1000];
    dev.read_d2h(&gpu, n, &mut back).unwrap();
    assert_eq!(back, data[1000..]);
    // A leased source range: Busy, nothing copied.
    let lease = ram.lease_write(0, 4096).unwrap();
    let e = dev.copy_d2d_async(&ram, 0, &gpu, 0, 8192).unwrap_err();
    assert!(e.to_string().contains("being written"), "{e}");
    drop(lease);
    dev.copy_d2d_async(&ram, 0, &gpu, 0, 8192)
        .unwrap()
        .wait()
        .unwrap();
}
