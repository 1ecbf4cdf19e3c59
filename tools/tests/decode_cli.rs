//! `ds4` (no subcommand): the MoE stack on generated models, end to end through the binary.
//! - against an independent numpy + gguf-py implementation of docs/MOE_STACK.md
//!   (tests/py/moe_oracle.py, float64) on the tiny and demo models: relative L2 error ≤ 1e-5;
//! - resident ≡ streamed: identical digests at several cache sizes, policies and cold reads;
//! - the trace and dump formats; bad input (hostile tid2eid, a cache below K experts, a token
//!   outside the vocabulary, a missing file) exits 2 naming what is wrong.

mod gen_util;

use gen_util::{ds4, gen_model, read_f32s, rel_l2, run_ds4_json, run_py};

fn against_oracle(scale: &str, tokens: &str) {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join(format!("{scale}.gguf"));
    gen_model(&model, &["--scale", scale]);
    let ours = dir.path().join("ours.f32");
    let theirs = dir.path().join("numpy.f32");
    let m = model.to_str().unwrap();
    run_ds4_json(&[
        "-m",
        m,
        "--tokens",
        tokens,
        "--dump-hidden",
        ours.to_str().unwrap(),
    ]);
    let said = run_py("moe_oracle.py", &[m, theirs.to_str().unwrap(), tokens]);
    // The clamp branch ran: some gate/up values were above it (else this compares nothing).
    let clamped: u64 = said
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("oracle said {said:?}"));
    assert!(clamped > 0, "{scale}: the clamp never triggered ({said})");
    let rel = rel_l2(&read_f32s(&ours), &read_f32s(&theirs));
    assert!(
        rel <= 1e-5,
        "{scale}: relative L2 error {rel:e} against numpy"
    );
    eprintln!(
        "{scale}: relative L2 error {rel:e} against numpy (float64); {}",
        said.trim()
    );
}

#[test]
fn the_tiny_model_matches_numpy() {
    against_oracle("tiny", "0,1,7,300,511");
}

#[test]
fn the_demo_model_matches_numpy() {
    // The demo model's clamp (10.0) triggers; two tokens keep the oracle at ~10 s.
    against_oracle("demo", "3,4099");
}

#[test]
fn streamed_equals_resident_at_every_cache_size() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    gen_model(&model, &["--scale", "tiny"]);
    let m = model.to_str().unwrap();
    let base = ["-m", m, "-n", "24", "--seed", "5"];
    let resident = run_ds4_json(&base)["digest"].clone();
    assert!(resident.as_str().is_some_and(|d| d.len() == 64));
    for (slots, policy, cold) in [
        ("6", "lru", false),
        ("7", "arc", true),
        ("20", "lfu-decay", false),
        ("9", "adaptive", false),
        ("30", "lfu-admit", true),
        ("96", "w-tinylfu", false),
        ("100000", "arc", false),
        ("1MiB", "lru", false),
    ] {
        let mut args = base.to_vec();
        args.extend(["--ssd-streaming", "--ssd-streaming-cache-experts", slots]);
        args.extend(["--cache-policy", policy]);
        if cold {
            args.push("--ssd-streaming-cold");
        }
        let v = run_ds4_json(&args);
        assert_eq!(v["digest"], resident, "{slots} {policy} cold={cold}");
        let c = &v["cache"];
        let lookups = c["stats"]["hits"].as_u64().unwrap()
            + c["stats"]["dedup_hits"].as_u64().unwrap()
            + c["stats"]["misses"].as_u64().unwrap();
        assert!(lookups >= 24 * 6 * 6, "{slots}: {lookups} lookups");
    }
    // The smallest read chunk (64 KiB slots: the staging ring grows to 2048 slots).
    let mut args = base.to_vec();
    args.extend(["--ssd-streaming", "--ssd-streaming-cache-experts", "7"]);
    args.extend(["--read-chunk", "64KiB"]);
    let v = run_ds4_json(&args);
    assert_eq!(v["digest"], resident, "--read-chunk 64KiB");
    assert_eq!(v["io"]["read_chunk"], 65536, "{v}");
    // Preloaded from a recorded trace, and the first layers resident: still the same result.
    let trace = dir.path().join("t.jsonl");
    let mut rec = base.to_vec();
    rec.extend(["--record-trace", trace.to_str().unwrap()]);
    run_ds4_json(&rec);
    let pop = dir.path().join("pop.txt");
    std::fs::write(&pop, "3 1 10\n3 2 5\n# comment\n\n2 7 1\n").unwrap();
    for (source, full) in [(&trace, "0"), (&trace, "2"), (&pop, "1")] {
        let mut args = base.to_vec();
        args.extend(["--ssd-streaming", "--ssd-streaming-cache-experts", "12"]);
        args.extend(["--ssd-streaming-popularity", source.to_str().unwrap()]);
        args.extend(["--ssd-streaming-full-layers", full]);
        let v = run_ds4_json(&args);
        assert_eq!(
            v["digest"], resident,
            "preload from {source:?}, {full} full layers"
        );
        let pre = v["cache"]["preloaded"].as_u64().unwrap();
        assert!(pre > 0 && pre <= 12, "{source:?}: {pre} preloaded");
        assert_eq!(v["cache"]["full_layers"], full.parse::<u64>().unwrap());
    }
}

#[test]
fn lookahead_changes_reads_not_results() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    gen_model(&model, &["--scale", "tiny"]);
    let m = model.to_str().unwrap();
    let base = ["-m", m, "-n", "24", "--seed", "5"];
    let resident = run_ds4_json(&base)["digest"].clone();
    // 6 slots = one layer's K: every guess finds the cache full of the current layer's
    // experts and must stop quietly; 7 leaves one slot; 96 holds every expert.
    for slots in ["6", "7", "20", "96"] {
        let mut args = base.to_vec();
        args.extend(["--ssd-streaming", "--ssd-streaming-cache-experts", slots]);
        let plain = run_ds4_json(&args);
        args.push("--ssd-streaming-lookahead");
        let v = run_ds4_json(&args);
        assert_eq!(v["digest"], resident, "{slots} slots");
        // The tiny model has three router-routed layers after its three hash layers: one guess
        // of K = 6 experts for each, made at the layer before it.
        let la = &v["lookahead"];
        let predicted = la["predicted"].as_u64().unwrap();
        let used = la["used"].as_u64().unwrap();
        assert_eq!(predicted, 24 * 3 * 6, "{slots}: {la}");
        assert!(used <= predicted, "{slots}: {la}");
        assert!(
            la["reads_started"].as_u64().unwrap() <= predicted,
            "{slots}: {la}"
        );
        // The reported lookups are the layers' own: as many as without the lookahead.
        let lookups = |v: &serde_json::Value| {
            let c = &v["cache"]["stats"];
            ["hits", "dedup_hits", "misses"]
                .iter()
                .map(|k| c[k].as_u64().unwrap())
                .sum::<u64>()
        };
        assert_eq!(lookups(&v), lookups(&plain), "{slots} slots");
        assert!(plain.get("lookahead").is_none());
    }
    // Only with --ssd-streaming.
    fails_with(
        &["-m", m, "--ssd-streaming-lookahead"],
        2,
        "--ssd-streaming",
    );
    // The RAM tier is off on the host backend (device memory is RAM): a note, same results.
    let o = ds4()
        .args([
            "-m",
            m,
            "-n",
            "3",
            "--json",
            "--ssd-streaming",
            "--ram-streaming-cache-experts",
            "8",
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("is off on host"));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v.get("ram_tier").is_none(), "{v}");
    fails_with(
        &[
            "-m",
            m,
            "--ssd-streaming",
            "--ram-streaming-cache-experts",
            "2x",
        ],
        2,
        "--ram-streaming-cache-experts",
    );
    // The C engine's read pattern (re-implemented): other reads, the same results; no
    // hash-layer prefetch; every miss waited for by its layer.
    for (slots, policy) in [("6", "lru"), ("20", "lru"), ("96", "arc")] {
        let mut args = base.to_vec();
        args.extend(["--ssd-streaming", "--ssd-streaming-cache-experts", slots]);
        args.extend(["--cache-policy", policy, "--ssd-streaming-c-engine-pattern"]);
        let v = run_ds4_json(&args);
        assert_eq!(v["digest"], resident, "c-engine pattern, {slots} slots");
        assert_eq!(v["prefetched_hash_experts"], 0, "{v}");
        assert!(v["read_pattern"].as_str().unwrap().starts_with("c-engine"));
        let st = &v["cache"]["stats"];
        assert_eq!(st["dedup_hits"], 0, "{v}");
        assert_eq!(st["misses"], st["fills_done"], "{v}");
    }
    fails_with(
        &[
            "-m",
            m,
            "--ssd-streaming",
            "--ssd-streaming-c-engine-pattern",
            "--ssd-streaming-full-layers",
            "1",
        ],
        2,
        "--ssd-streaming-full-layers",
    );
    // Nor with the lookahead (the C engine has none).
    fails_with(
        &[
            "-m",
            m,
            "--ssd-streaming",
            "--ssd-streaming-c-engine-pattern",
            "--ssd-streaming-lookahead",
        ],
        2,
        "--ssd-streaming-lookahead",
    );
}

#[test]
fn trace_and_dump_have_the_documented_shape() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    gen_model(&model, &["--scale", "tiny"]);
    let (trace, dump) = (dir.path().join("t.jsonl"), dir.path().join("h.f32"));
    let v = run_ds4_json(&[
        "-m",
        model.to_str().unwrap(),
        "--tokens",
        "5,9,5",
        "--record-trace",
        trace.to_str().unwrap(),
        "--dump-hidden",
        dump.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&trace).unwrap();
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let layers = v["layers"].as_u64().unwrap() as usize;
    assert_eq!(rows.len(), 3 * layers);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r["token"], (i / layers) as u64);
        assert_eq!(r["layer"], (i % layers) as u64);
        assert_eq!(r["id"], [5, 9, 5][i / layers]);
        let (e, w) = (
            r["experts"].as_array().unwrap(),
            r["weights"].as_array().unwrap(),
        );
        assert_eq!((e.len(), w.len()), (6, 6));
        // Normalised then scaled by 1.5: the weights sum to 1.5.
        let sum: f64 = w.iter().map(|x| x.as_f64().unwrap()).sum();
        assert!((sum - 1.5).abs() < 1e-5, "weights sum {sum}");
    }
    // Replaying the recorded routing (weights written exactly) gives the same states, resident
    // and streamed through a minimal cache.
    for extra in [
        &[][..],
        &["--ssd-streaming", "--ssd-streaming-cache-experts", "6"][..],
    ] {
        let mut args = vec![
            "-m",
            model.to_str().unwrap(),
            "--routing-trace",
            trace.to_str().unwrap(),
        ];
        args.extend(extra);
        let r = run_ds4_json(&args);
        assert_eq!(r["digest"], v["digest"], "replay {extra:?}");
        assert_eq!(r["tokens"], 3);
    }
    // Token 5 twice: the same routing and the same hidden state.
    assert_eq!(rows[0]["experts"], rows[2 * layers]["experts"]);
    let h = read_f32s(&dump);
    let e = h.len() / 3;
    assert_eq!(h[..e], h[2 * e..]);
    // The digest is the SHA-256 of exactly the dump's bytes (checked by recomputing it).
    assert_eq!(v["digest"].as_str().unwrap().len(), 64);
}

fn fails_with(args: &[&str], code: i32, needle: &str) {
    let o = ds4().args(args).output().expect("spawn ds4");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "ds4 {args:?}: {err}");
    assert!(
        err.contains(needle),
        "ds4 {args:?}: {err:?} lacks {needle:?}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
}

#[test]
fn bad_input_is_named_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    gen_model(&model, &["--scale", "tiny"]);
    let m = model.to_str().unwrap();
    fails_with(&["-m", "/nonexistent/x.gguf"], 2, "--demo");
    fails_with(&["-m", m, "--tokens", "512"], 2, "outside the vocabulary");
    fails_with(&["-m", m, "--tokens", "1,x"], 2, "x");
    fails_with(
        &["-m", m, "--simulate-used-memory", "1GB"],
        2,
        "needs a GPU backend",
    );
    for chunk in ["5000", "32KiB", "128MiB", "lots"] {
        fails_with(&["-m", m, "--read-chunk", chunk], 2, "--read-chunk");
    }
    for piece in ["5000", "lots", "4097B"] {
        fails_with(&["-m", m, "--copy-piece", piece], 2, "--copy-piece");
    }
    fails_with(
        &[
            "-m",
            m,
            "--ssd-streaming",
            "--ssd-streaming-cache-experts",
            "5",
        ],
        2,
        "smaller than one layer's 6 experts",
    );
    fails_with(
        &["-m", m, "--ssd-streaming", "--cache-policy", "fifo"],
        2,
        "unknown cache policy",
    );
    // Streaming flags without --ssd-streaming are refused, not ignored (as `ds4 plan` does).
    for flag in [
        &["--ssd-streaming-cache-experts", "8"][..],
        &["--ssd-streaming-full-layers", "1"],
        &["--cache-policy", "lru"],
        &["--ssd-streaming-preload-experts", "4"],
        &["--ssd-streaming-popularity", m],
    ] {
        let mut args = vec!["-m", m];
        args.extend(flag);
        fails_with(&args, 2, "--ssd-streaming");
    }
    // A hostile tid2eid: expert id 99 (of 16) for token 0 of layer 0.
    let (_, dsm) = ds4_stream::model::Ds4Model::open(&model).unwrap();
    let t = dsm.layers[0].tid2eid.as_ref().unwrap();
    let mut bytes = std::fs::read(&model).unwrap();
    bytes[t.offset as usize..t.offset as usize + 4].copy_from_slice(&99i32.to_le_bytes());
    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, &bytes).unwrap();
    fails_with(
        &["-m", bad.to_str().unwrap(), "--tokens", "3"],
        2,
        "blk.0.ffn_gate_tid2eid.weight",
    );
    // The same id twice in one token's row.
    let second = u32::from_le_bytes(
        bytes[t.offset as usize + 4..t.offset as usize + 8]
            .try_into()
            .unwrap(),
    );
    bytes[t.offset as usize..t.offset as usize + 4].copy_from_slice(&second.to_le_bytes());
    std::fs::write(&bad, &bytes).unwrap();
    fails_with(&["-m", bad.to_str().unwrap()], 2, "twice");
}

/// A model of holes (`gen-model --holes all`: everything zeros but its tid2eid tables) still
/// runs: the H200 check of a Flash-shaped file of holes once failed on an all-zero tid2eid.
#[test]
fn a_model_of_holes_runs() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("holes.gguf");
    gen_model(&model, &["--scale", "tiny", "--holes", "all"]);
    let m = model.to_str().unwrap();
    let v = run_ds4_json(&["-m", m, "-n", "3", "--ssd-streaming"]);
    assert_eq!(v["tokens"], 3, "{v}");
}
