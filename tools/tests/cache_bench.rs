//! `ds4-bench cache` end to end on a short synthetic trace: one JSON object per (trace, policy,
//! slots) with the documented fields, the default policy marked, Belady at or above every
//! policy and the static oracle, the plot written, and bad flags exit 2; and the simulator's
//! hits and misses on a `ds4 --record-trace` file equal the ones `ds4 --ssd-streaming` reported
//! on that run (one implementation of every policy).

mod gen_util;

use gen_util::{gen_model, run_ds4_json};
use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ds4-bench"))
        .args(args)
        .output()
        .expect("run ds4-bench")
}

#[test]
fn cache_json_rows_and_belady_bound() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("cache.svg");
    let o = bench(&[
        "cache",
        "--n-tokens",
        "150",
        "--slots",
        "6,5%,20%",
        "--json",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<serde_json::Value> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    // 3 shapes × 3 sizes × (6 policies + 2 references).
    assert_eq!(rows.len(), 3 * 3 * 8);
    let policies = [
        "lru",
        "lfu-decay",
        "lfu-admit",
        "w-tinylfu",
        "arc",
        "adaptive",
    ];
    let mut defaults = std::collections::BTreeSet::new();
    for r in &rows {
        let policy = r["policy"].as_str().unwrap();
        assert!(r["slots"].as_u64().unwrap() >= 6);
        let h = r["hit_rate"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&h), "{r}");
        if r["default"].as_bool().unwrap() {
            defaults.insert(policy.to_string());
        }
        if policies.contains(&policy) {
            let belady = rows
                .iter()
                .find(|b| {
                    b["policy"] == "belady" && b["trace"] == r["trace"] && b["slots"] == r["slots"]
                })
                .unwrap();
            assert!(
                belady["hit_rate"].as_f64().unwrap() >= h,
                "belady below {policy}: {belady} vs {r}"
            );
        }
    }
    assert_eq!(defaults.len(), 1, "exactly one policy is the default");
    assert!(policies.contains(&defaults.first().unwrap().as_str()));
    assert!(rows.iter().any(|r| r["policy"] == "oracle-static"));
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.starts_with("<svg") && plot.contains("synthetic-frequency"));
}

#[test]
fn cache_replays_a_record_trace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.jsonl");
    let mut text = String::new();
    for t in 0..40 {
        for l in 0..2 {
            let e = [(t % 5), (t % 5 + 1) % 8];
            text += &format!(
                "{{\"token\": {t}, \"id\": 7, \"layer\": {l}, \"experts\": [{}, {}], \"weights\": [1.0, 0.5]}}\n",
                e[0], e[1]
            );
        }
    }
    std::fs::write(&path, text).unwrap();
    let o = bench(&["cache", "--trace", path.to_str().unwrap(), "--slots", "4,8"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("40 tokens, 2 layers × 6 experts, K = 2"),
        "{out}"
    );
    std::fs::write(&path, "{\"token\": 0, \"layer\": 0}\n").unwrap();
    let o = bench(&["cache", "--trace", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("line 1"));
}

#[test]
fn cache_bad_flags_exit_2() {
    for args in [
        &["cache", "--slots", "0"][..],
        &["cache", "--shape", "zipf"],
        &["cache", "--policies", "mru"],
        &["cache", "--slots", "5", "--n-tokens", "10"],
    ] {
        let o = bench(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
    }
}

/// The simulator is the engine's cache: a trace recorded by `ds4 --ssd-streaming` replayed by
/// `ds4-bench cache` gives exactly the hits, misses and evictions that run reported, for every
/// policy. The run uses `--ssd-streaming-c-engine-pattern` (per layer: look up its K experts,
/// read the misses, compute, unpin; no hash-layer prefetch, no lookahead), the rules the
/// simulator models; the default path's hash-layer prefetch looks experts up a step early,
/// which the simulator does not model.
#[test]
fn simulated_hits_are_the_engines_on_a_recorded_trace() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    gen_model(&model, &["--scale", "tiny"]);
    let m = model.to_str().unwrap();
    for (slots, policy) in [
        ("9", "lru"),
        ("12", "adaptive"),
        ("12", "lfu-admit"),
        ("20", "arc"),
    ] {
        let trace = dir.path().join(format!("{policy}-{slots}.jsonl"));
        let run = run_ds4_json(&[
            "-m",
            m,
            "-n",
            "40",
            "--seed",
            "3",
            "--ssd-streaming",
            "--ssd-streaming-c-engine-pattern",
            "--ssd-streaming-cache-experts",
            slots,
            "--cache-policy",
            policy,
            "--record-trace",
            trace.to_str().unwrap(),
        ]);
        let cache = &run["cache"];
        let o = bench(&[
            "cache",
            "--trace",
            trace.to_str().unwrap(),
            "--slots",
            slots,
            "--policies",
            policy,
            "--json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let row: serde_json::Value = String::from_utf8(o.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|r| r["policy"] == policy)
            .unwrap();
        assert!(cache["misses"].as_u64().unwrap() > 0, "{cache}");
        for (sim, real) in [
            ("hits", "hits"),
            ("misses", "misses"),
            ("evictions", "evictions"),
        ] {
            assert_eq!(
                row[sim], cache[real],
                "{policy} {slots} {sim}: {row} vs {cache}"
            );
        }
    }
}
