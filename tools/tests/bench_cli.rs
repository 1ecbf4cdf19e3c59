//! `ds4-bench io` end to end on a small patterned file: JSON rows parse, every delivered byte
//! sample was verified, ratios are filled in, CSV and SVG are written, a corrupted destination
//! fails the run, and bad flags exit 2.

use std::path::Path;
use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ds4-bench"))
        .args(args)
        .output()
        .expect("run ds4-bench")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn has_fio() -> bool {
    Command::new("fio")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Directories on disk (not tmpfs) where the temp file is written; the tempdir is removed after.
fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ds4-bench-test")
        .tempdir_in(std::env::temp_dir())
        .expect("tempdir")
}

fn leftover_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

#[test]
fn io_small_sweep_seq_json_rows() {
    small_sweep("seq");
}

#[test]
fn io_small_sweep_expert_json_rows() {
    small_sweep("expert");
}

/// One pattern per test so the two run in parallel (they mostly wait on the disk).
fn small_sweep(pattern: &str) {
    let dir = tempdir();
    let csv = dir.path().join("out.csv");
    let svg = dir.path().join("out.svg");
    let d = dir.path().to_str().unwrap();
    let o = bench(&[
        "io",
        "--size",
        "48MiB",
        "--dir",
        d,
        "--reps",
        "1",
        "--workers",
        "1,2",
        "--chunk",
        "4MiB",
        "--dest",
        "48MiB",
        "--json",
        "--quiet",
        "--machine",
        "test-box",
        "--csv",
        csv.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
        "--fio-secs",
        "0.3",
        "--pattern",
        pattern,
    ]);
    assert!(o.status.success(), "exit {:?}: {}", o.status, stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON row {l}: {e}")))
        .collect();
    let n = |case: &str, pattern: &str, mode: &str| {
        rows.iter()
            .filter(|r| r["case"] == case && r["pattern"] == pattern && r["mode"] == mode)
            .count()
    };
    assert!(rows.iter().all(|r| r["pattern"] == pattern));
    // Swept cases: 2 workers x 1 chunk x (2 direct settings cold, 1 hot).
    for case in ["engine", "engine-host", "io-threads"] {
        assert_eq!(n(case, pattern, "cold"), 4, "{case} {pattern}");
        assert_eq!(n(case, pattern, "hot"), 2, "{case} {pattern}");
    }
    for mode in ["cold", "hot"] {
        assert_eq!(n("mmap", pattern, mode), 1);
        assert_eq!(n("c-load", pattern, mode), 1);
        // The C engine's streaming path only exists for experts.
        assert_eq!(
            n("c-stream", pattern, mode),
            usize::from(pattern == "expert")
        );
    }
    for r in &rows {
        assert_eq!(r["machine"], "test-box");
        let gbps = r["gbps"].as_f64().unwrap();
        assert!(gbps > 0.0 && gbps.is_finite(), "{r}");
        if r["case"] == "fio" {
            assert_eq!(r["vs_fio"].as_f64(), Some(1.0), "{r}");
            assert!(r["command"].as_str().unwrap().starts_with("fio "));
            continue;
        }
        if r["case"] == "fio-aio" {
            // The cold ceiling set: libaio, one job; no psync twin to compare with.
            assert!(
                r["command"].as_str().unwrap().contains("--ioengine=libaio"),
                "{r}"
            );
            assert_eq!(r["mode"], "cold", "{r}");
            continue;
        }
        assert!(r["verified_bytes"].as_u64().unwrap() >= 8192, "{r}");
        // CPU is measured over the timed part only: it cannot exceed the cores we have.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let cpu = r["cpu_util"].as_f64().unwrap();
        assert!((0.0..=cores + 0.5).contains(&cpu), "{r}");
        assert!(r["vs_mmap"].as_f64().is_some(), "{r}");
        assert!(r["vs_c"].as_f64().is_some(), "{r}");
        assert!(r["bytes"].as_u64().unwrap() > 0);
        if r["case"].as_str().unwrap().starts_with("engine") {
            // The engine's own stats ride along and agree with the row.
            let extra = &r["extra"];
            assert_eq!(extra["bytes"], r["bytes"], "{r}");
            assert_eq!(extra["failed_requests"], 0, "{r}");
            let staged = extra["staged_chunks"].as_u64().unwrap();
            let zero_copy = extra["zero_copy_chunks"].as_u64().unwrap();
            if r["case"] == "engine" {
                assert!(staged > 0 && zero_copy == 0, "{r}");
            } else {
                assert!(staged == 0 && zero_copy > 0, "{r}");
            }
        }
        let cache = r["cache"].as_str().unwrap();
        if r["mode"] == "hot" {
            assert_eq!(cache, "warmed");
            assert_eq!(r["direct"], false, "hot runs never use O_DIRECT: {r}");
        } else {
            assert!(cache.starts_with("dropped("), "{r}");
        }
    }
    if has_fio() {
        assert!(rows.iter().any(|r| r["case"] == "fio"));
        // Every swept row has a fio row with the same workers (and chunk, for seq).
        for r in rows
            .iter()
            .filter(|r| r["workers"] == 2 && r["case"] != "fio")
        {
            if r["case"] == "mmap" || r["case"].as_str().unwrap().starts_with("c-") {
                continue;
            }
            assert!(r["vs_fio"].as_f64().is_some(), "{r}");
        }
    }
    let csv_text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(csv_text.lines().count(), rows.len() + 1);
    assert!(csv_text.starts_with("machine,case,pattern,mode"));
    let svg_text = std::fs::read_to_string(&svg).unwrap();
    assert!(svg_text.starts_with("<svg") && svg_text.contains("<polyline"));
    // The temp file was removed: only the CSV and the SVG remain.
    assert_eq!(leftover_files(dir.path()), 2);

    // `report` renders the same rows again from the JSON lines.
    let jsonl = dir.path().join("rows.jsonl");
    std::fs::write(&jsonl, &out).unwrap();
    let csv2 = dir.path().join("again.csv");
    let o = bench(&[
        "report",
        jsonl.to_str().unwrap(),
        "--csv",
        csv2.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = String::from_utf8(o.stdout).unwrap();
    assert_eq!(
        table.lines().count(),
        rows.len() + 2,
        "header + rows + legend"
    );
    assert_eq!(
        std::fs::read_to_string(&csv2).unwrap().lines().count(),
        rows.len() + 1
    );
    std::fs::write(&jsonl, "{\"not\": \"a row\"}\n").unwrap();
    let o = bench(&["report", jsonl.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("line 1: not a ds4-bench row"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn io_corrupted_destination_fails_loudly() {
    let dir = tempdir();
    let d = dir.path().to_str().unwrap();
    let o = bench(&[
        "io",
        "--size",
        "48MiB",
        "--dir",
        d,
        "--reps",
        "1",
        "--pattern",
        "seq",
        "--hot",
        "--cases",
        "mmap",
        "--quiet",
        "--inject-corruption",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.starts_with("ds4-bench: error: verification failed"),
        "{e}"
    );
    assert!(e.contains("case mmap"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert_eq!(leftover_files(dir.path()), 0, "temp file left behind");
}

#[test]
fn io_existing_unpatterned_file_verified_by_reference() {
    let dir = tempdir();
    let p = dir.path().join("plain.bin");
    let data: Vec<u8> = (0..(45u64 << 20)).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(&p, &data).unwrap();
    let o = bench(&[
        "io",
        "--file",
        p.to_str().unwrap(),
        "--reps",
        "1",
        "--hot",
        "--workers",
        "2",
        "--chunk",
        "4MiB",
        "--cases",
        "io-threads,c-load",
        "--json",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(out.lines().count() >= 4);
    for l in out.lines() {
        let r: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(r["verified_bytes"].as_u64().unwrap() > 0);
    }
    assert!(p.exists(), "--file must never be removed");
}

#[test]
fn io_bad_flags_exit_2() {
    let dir = tempdir();
    let d = dir.path().to_str().unwrap();
    let sparse_path = dir.path().join("sparse.bin");
    std::fs::File::create(&sparse_path)
        .unwrap()
        .set_len(4 << 40)
        .unwrap();
    let sparse = sparse_path.to_str().unwrap().to_string();
    for args in [
        vec!["io", "--chunk", "3parsecs"],
        vec!["io", "--chunk", "1KiB"],
        vec!["io", "--chunk", "5000"],
        vec!["io", "--slots", "0"],
        vec!["io", "--fio-secs", "0"],
        // 3 destinations of 4 TiB fit no machine's memory (a sparse file: costs no disk).
        vec![
            "io",
            "--file",
            sparse.as_str(),
            "--dest",
            "4TiB",
            "--pattern",
            "seq",
        ],
        vec!["io", "--workers", "0"],
        vec!["io", "--size", "4GiB", "--file", "/etc/hostname"],
        vec!["io", "--direct", "maybe"],
        vec!["io", "--reps", "0"],
        vec!["io", "--cold", "--hot"],
        vec!["io", "--file", "/nonexistent/ds4-bench-file"],
        vec!["io", "--size", "16MiB", "--dir", d, "--total", "1GiB"],
        vec!["io", "--size", "1PiB", "--dir", d],
        vec!["io", "--size", "1TiB", "--dir", d],
        vec!["io", "--size", "16MiB", "--dir", "/nonexistent-dir"],
        vec!["nosuchbench"],
    ] {
        let o = bench(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    assert_eq!(leftover_files(dir.path()), 1, "only the sparse file");
    let o = bench(&["io", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = String::from_utf8_lossy(&o.stdout);
    for flag in [
        "--file",
        "--size",
        "--workers",
        "--chunk",
        "--direct",
        "--total",
        "--json",
        "--csv",
        "--plot",
        "--machine",
    ] {
        assert!(help.contains(flag), "help lacks {flag}");
    }
    assert!(!help.contains("inject-corruption"));
}

#[test]
fn io_progress_counts_every_run_of_the_whole_benchmark() {
    // A long sweep says where it is: "run N of M, T elapsed, ~L left" on every run line, M the
    // runs of all blocks (patterns x modes x cases x reps), counting up to M exactly.
    let dir = tempdir();
    let d = dir.path().to_str().unwrap();
    let o = bench(&[
        "io",
        "--size",
        "32MiB",
        "--dir",
        d,
        "--reps",
        "2",
        "--workers",
        "2",
        "--chunk",
        "4MiB",
        "--dest",
        "32MiB",
        "--cases",
        "engine,io-threads",
        "--pattern",
        "seq",
    ]);
    assert!(o.status.success(), "exit {:?}: {}", o.status, stderr(&o));
    let err = stderr(&o);
    let runs: Vec<(usize, usize)> = err
        .lines()
        .filter_map(|l| {
            let l = l.trim_start().strip_prefix("run ")?;
            let (n, rest) = l.split_once(" of ")?;
            let (m, _) = rest.split_once(',')?;
            Some((n.parse().ok()?, m.parse().ok()?))
        })
        .collect();
    // seq, cold (direct on and off) and hot (off): 2 cases x 3 settings x 2 reps.
    assert_eq!(runs.len(), 12, "{err}");
    for (i, &(n, m)) in runs.iter().enumerate() {
        assert_eq!((n, m), (i + 1, 12), "{err}");
    }
    assert!(err.contains("s left:"), "{err}");
}
