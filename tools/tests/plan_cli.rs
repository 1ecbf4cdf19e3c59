//! `ds4 plan` on a generated Flash-layout file (the exact 81 GiB tensor table, every tensor a
//! hole: nothing is written): the Strix Halo numbers (ctx 229,376 admitted, 245,760 refused on
//! the KV line), `32GB` of expert cache = 4,854 experts, a 24 GB card, and hostile input.

mod gen_util;

use gen_util::*;
use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::process::Output;

/// Strix Halo's GPU-visible memory, round(107.87 × 2^30) bytes.
const STRIX: &str = "115824530555";
const GIB: f64 = (1u64 << 30) as f64;

fn flash() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("flash.gguf");
    gen_model(&p, &["--scale", "flash", "--holes", "all"]);
    (dir, p)
}

fn plan(model: &Path, args: &[&str]) -> Output {
    let mut v = vec!["plan", "-m", model.to_str().unwrap()];
    v.extend_from_slice(args);
    run_ds4(&v)
}

fn plan_json(model: &Path, args: &[&str]) -> (i32, Json) {
    let mut v = args.to_vec();
    v.push("--json");
    let o = plan(model, &v);
    let j = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {} / {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o.status.code().unwrap(), j)
}

fn line<'a>(j: &'a Json, what: &str) -> &'a Json {
    j["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["what"] == what)
        .unwrap_or_else(|| panic!("no line {what:?} in {j}"))
}

fn bytes(j: &Json, what: &str) -> u64 {
    line(j, what)["bytes"].as_u64().unwrap()
}

fn device_sum(j: &Json) -> u64 {
    j["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["side"] == "device")
        .map(|l| l["bytes"].as_u64().unwrap())
        .sum()
}

#[test]
fn strix_halo_admits_229376_and_refuses_245760() {
    let (_d, f) = flash();
    let strix = [
        "--gpu-mem",
        STRIX,
        "--platform",
        "windows",
        "--prefill-chunk",
        "4096",
    ];
    let at = |ctx: &'static str| {
        let mut a = strix.to_vec();
        a.extend(["--ctx", ctx]);
        a
    };
    let (rc, j) = plan_json(&f, &at("229376"));
    assert_eq!(rc, 0, "{j}");
    assert_eq!(j["fits"], true);
    assert_eq!(j["max_ctx"], 237_553);
    assert_eq!(j["cache_experts"], 0); // resident: no cache
                                       // The file's tensor table against DS4_TENSORS.md: 80.759 GiB in all.
    let all = bytes(&j, "resident weights");
    assert_eq!(all, 86_714_775_900);
    assert!((all as f64 / GIB - 80.759).abs() < 0.0005);
    assert_eq!(line(&j, "resident weights")["source"], "file");
    assert_eq!(bytes(&j, "platform reserve"), 12_530_567_086); // 11.67 GiB, measured
    assert_eq!(line(&j, "platform reserve")["source"], "measured");
    assert_eq!(bytes(&j, "Q8->F16 cache"), 115_824_530_555 / 20); // max(4 GiB, 5 %)
    assert_eq!(bytes(&j, "fragmentation headroom"), 5_315 << 20);
    assert_eq!(
        bytes(&j, "KV cache + prefill scratch"),
        229_376 * (13_760 + 2 * 4096)
    );
    assert_eq!(j["device_used"].as_u64().unwrap(), device_sum(&j));
    assert!(device_sum(&j) <= 115_824_530_555);

    let (rc, j) = plan_json(&f, &at("245760"));
    assert_eq!(rc, 1, "{j}");
    assert_eq!(j["fits"], false);
    assert_eq!(j["misfit"]["line"], "KV cache + prefill scratch");
    let over = j["misfit"]["over"].as_u64().unwrap();
    assert_eq!(over, device_sum(&j) - 115_824_530_555);
    assert_eq!(over, 180_143_918); // 171.80 MiB
    let m = &j["misfit"];
    assert_eq!(
        m["short"].as_u64().unwrap(),
        m["needs"].as_u64().unwrap() - m["left"].as_u64().unwrap(),
        "{m}"
    );
    // Text mode: the plan on stdout, one error line naming the line and the overshoot.
    let o = plan(&f, &at("245760"));
    assert_eq!(o.status.code(), Some(1));
    let err = stderr_line(&o);
    assert!(
        err.contains("does not fit: KV cache + prefill scratch needs 5.02 GiB")
            && err.contains("this line is ")
            && err.contains("the whole plan 171.80 MiB over")
            && err.contains("237,553"),
        "{err}"
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("fragmentation headroom"), "{out}");
}

#[test]
fn streaming_resident_bytes_match_ds4_tensors() {
    let (_d, f) = flash();
    let (rc, j) = plan_json(
        &f,
        &[
            "--gpu-mem",
            "140GiB",
            "--platform",
            "linux",
            "--ssd-streaming",
        ],
    );
    assert_eq!(rc, 0, "{j}");
    let resident = bytes(&j, "resident weights");
    assert_eq!(resident, 8_801_384_796);
    // DS4_TENSORS.md: 8.197 GiB resident.
    assert!((resident as f64 / GIB - 8.197).abs() < 0.0005);
    // Routed: 72.562 GiB (72.5625 exactly) = 11,008 experts of 7,077,888 B, all cached here.
    assert_eq!(j["cache_experts"], 11_008);
    assert_eq!(bytes(&j, "expert cache"), 11_008 * 7_077_888);
    assert!(((11_008u64 * 7_077_888) as f64 / GIB - 72.562).abs() < 0.001);
}

#[test]
fn cache_budget_32gb_is_4854_experts() {
    let (_d, f) = flash();
    let args = [
        "--gpu-mem",
        "64GiB",
        "--platform",
        "linux",
        "--ssd-streaming",
        "--ssd-streaming-cache-experts",
        "32GB",
    ];
    let (rc, j) = plan_json(&f, &args);
    assert_eq!(rc, 0, "{j}");
    // The C engine's flag reads GB as GiB: floor(32 × 2^30 / 7,077,888) = 4,854.
    assert_eq!(j["cache_experts"], 4854);
    assert_eq!(line(&j, "expert cache")["source"], "flag");
    let (_, j) = plan_json(&f, &[&args[..6], &["4854"]].concat());
    assert_eq!(j["cache_experts"], 4854);
}

#[test]
fn card_24gb_leaves_weights_and_kv_room() {
    let (_d, f) = flash();
    for mem in ["24GB", "24GiB"] {
        let (rc, j) = plan_json(
            &f,
            &["--gpu-mem", mem, "--platform", "linux", "--ssd-streaming"],
        );
        assert_eq!(rc, 0, "{j}");
        let total = j["device_total"].as_u64().unwrap();
        let n = j["cache_experts"].as_u64().unwrap();
        assert!(n > 1000 && n < 11_008, "{n}");
        let kv = bytes(&j, "KV cache + prefill scratch");
        assert_eq!(kv, 32_768 * 21_952);
        let w = bytes(&j, "resident weights");
        let cache = bytes(&j, "expert cache");
        assert_eq!(cache, n * 7_077_888);
        assert!(w + kv + cache + bytes(&j, "fragmentation headroom") <= total);
        assert!(device_sum(&j) <= total);
        assert!(j["max_ctx"].as_u64().unwrap() > 32_768);
        // Simulated used memory lowers the plan (and only the plan).
        let (rc, s) = plan_json(
            &f,
            &[
                "--gpu-mem",
                mem,
                "--platform",
                "linux",
                "--ssd-streaming",
                "--simulate-used-memory",
                "4GiB",
            ],
        );
        assert_eq!(rc, 0);
        assert_eq!(bytes(&s, "simulated used memory"), 4 << 30);
        assert!(s["cache_experts"].as_u64().unwrap() < n - 500);
    }
    // The whole file resident on 24 GB: refused on the weights line.
    let o = plan(&f, &["--gpu-mem", "24GB", "--platform", "linux"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr_line(&o).contains("resident weights needs 80.76 GiB"));
}

#[test]
fn hostile_input_is_a_clear_error() {
    let (_d, f) = flash();
    let cases: &[(&[&str], &str)] = &[
        (&["--gpu-mem", "0"], "device memory of 0 bytes"),
        (
            &["--gpu-mem", "24GB", "--ctx", "1099511627776"],
            "--ctx 1099511627776 is outside",
        ),
        (&["--gpu-mem", "24GB", "--ctx", "0"], "--ctx 0 is outside"),
        (&["--gpu-mem", "24GB", "--ctx", "2^40"], "--ctx"),
        (&["--gpu-mem", "24GB", "--platform", "macos"], "macos"),
        (&["--gpu-mem", "24 parsecs"], "--gpu-mem"),
        (&["--gpu-mem", "99999999999TiB"], "overflows"),
        (
            &["--gpu-mem", "24GB", "--prefill-chunk", "0"],
            "--prefill-chunk 0",
        ),
        (&["--backend", "host"], "pass --gpu-mem"),
        (
            &["--gpu-mem", "24GB", "--ssd-streaming-cache-experts", "8"],
            "--ssd-streaming",
        ),
        (
            &[
                "--gpu-mem",
                "24GB",
                "--ssd-streaming",
                "--ssd-streaming-cache-experts",
                "lots",
            ],
            "--ssd-streaming-cache-experts",
        ),
        (
            &["--gpu-mem", "24GB", "--simulate-used-memory=-1"],
            "--simulate-used-memory",
        ),
    ];
    for (args, want) in cases {
        let o = plan(&f, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        let err = stderr_line(&o);
        assert!(
            err.starts_with("ds4: error: ") && err.contains(want),
            "{args:?}: {err}"
        );
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    let o = run_ds4(&["plan", "-m", "/nonexistent/x.gguf", "--gpu-mem", "24GB"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr_line(&o).contains("no such file"));
}

#[test]
fn small_model_is_capped_by_its_context_length() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny.gguf");
    gen_model(&p, &["--scale", "tiny"]);
    let (rc, j) = plan_json(
        &p,
        &[
            "--gpu-mem",
            "8GiB",
            "--platform",
            "linux",
            "--ssd-streaming",
        ],
    );
    assert_eq!(rc, 0, "{j}");
    assert_eq!(j["max_ctx"], 4096); // the tiny model's deepseek4.context_length
    assert_eq!(j["ctx"], 4096);
    let o = plan(&p, &["--gpu-mem", "8GiB", "--ctx", "4097"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr_line(&o).contains("1..=4096"));
}

#[test]
fn ram_tier_flag_is_the_run_s_flag_with_the_old_spelling_kept() {
    // `ds4 plan` takes the run's `--ram-streaming-cache-experts N|SIZE` (whole experts, as the
    // run sizes its RAM tier); `--ram-tier SIZE` still works.
    let (_d, model) = flash();
    let base = ["--gpu-mem", "128GiB", "--ssd-streaming"];
    let with = |extra: &[&str]| {
        let mut v = base.to_vec();
        v.extend_from_slice(extra);
        let (code, j) = plan_json(&model, &v);
        assert_eq!(code, 0, "{j}");
        bytes(&j, "RAM tier")
    };
    let per_expert = 7_077_888u64;
    assert_eq!(
        with(&["--ram-streaming-cache-experts", "100"]),
        100 * per_expert
    );
    let gib = with(&["--ram-streaming-cache-experts", "1GiB"]);
    assert_eq!(gib, (1u64 << 30) / per_expert * per_expert);
    assert_eq!(with(&["--ram-tier", "1GiB"]), gib);
}
