//! `ds4 inspect` end to end: the built binary on gguf-py-written files (its JSON must agree with
//! gguf-py's GGUFReader) and on hostile files (exit 2, one `ds4: error: <path>: ...` line, no
//! stdout, no panic).

#[path = "../../tests/gguf_common/mod.rs"]
mod gguf_common;

use gguf_common::*;
use serde_json::{json, Value as J};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn ds4(args: &[&OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ds4"))
        .args(args)
        .output()
        .expect("run ds4")
}

fn inspect(path: &Path, json: bool) -> Output {
    let mut a: Vec<&OsStr> = vec!["inspect".as_ref(), path.as_os_str()];
    if json {
        a.push("--json".as_ref());
    }
    ds4(&a)
}

/// What `ds4 inspect --json` should print for a metadata value the oracle dumped (typed form).
fn expected_json(v: &J) -> J {
    let ty = v["type"].as_str().unwrap();
    match ty {
        "ARRAY" => {
            let items = v["items"].as_array().unwrap();
            if items.len() <= 64 {
                J::Array(items.iter().map(expected_json).collect())
            } else {
                json!({"type": "array", "len": items.len(), "elem": v["elem"]})
            }
        }
        // Floats: compare as the bit patterns they decode to (see same()).
        "FLOAT32" | "FLOAT64" => v.clone(),
        _ => v["value"].clone(),
    }
}

/// `ours` (inspect's JSON) equals `want` (expected_json); floats compare by bits.
fn same(ours: &J, want: &J) -> bool {
    match (ours, want) {
        (J::Array(a), J::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y))
        }
        (o, J::Object(w)) if w.get("bits").is_some() => {
            let bits = w["bits"].as_u64().unwrap();
            let Some(x) = o.as_f64() else { return false };
            if w["type"] == "FLOAT32" {
                (x as f32).to_bits() as u64 == bits
            } else {
                x.to_bits() == bits
            }
        }
        (o, w) => o == w,
    }
}

fn oracle_files(dir: &Path) -> Vec<PathBuf> {
    oracle(&["write".as_ref(), dir.as_os_str()])
        .lines()
        .map(PathBuf::from)
        .collect()
}

#[test]
fn json_agrees_with_gguf_py() {
    let dir = tempfile::tempdir().unwrap();
    let paths = oracle_files(dir.path());
    let mut args: Vec<&OsStr> = vec!["read".as_ref()];
    args.extend(paths.iter().map(|p| p.as_os_str()));
    let theirs: J = serde_json::from_str(&oracle(&args)).unwrap();
    let mut summarised = 0;
    for (p, t) in paths.iter().zip(theirs.as_array().unwrap()) {
        let out = inspect(p, true);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stderr.is_empty());
        let ours: J = serde_json::from_slice(&out.stdout).expect("inspect --json prints JSON");
        for k in [
            "version",
            "alignment",
            "data_offset",
            "file_size",
            "tensors",
        ] {
            assert_eq!(ours[k], t[k], "{}: {k}", p.display());
        }
        let md = ours["metadata"].as_object().unwrap();
        let their_md = t["metadata"].as_array().unwrap();
        assert_eq!(md.len(), their_md.len());
        for kv in their_md {
            let (k, v) = (kv[0].as_str().unwrap(), &kv[1]);
            let want = expected_json(v);
            summarised += usize::from(want.get("len").is_some());
            assert!(
                same(&md[k], &want),
                "{}: {k}: ours {} want {}",
                p.display(),
                md[k],
                want
            );
        }
    }
    assert!(summarised > 0, "no long array was exercised");
}

#[test]
fn text_view_summarises() {
    let dir = tempfile::tempdir().unwrap();
    let paths = oracle_files(dir.path());
    let p = paths
        .iter()
        .find(|p| p.ends_with("oracle_a64.gguf"))
        .unwrap();
    let out = inspect(p, false);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "GGUF v3",
        "alignment:    64",
        "[3000 x STRING]",
        "[3000 x FLOAT32]",
        "(5600 bytes)",
        "[[1, 2], [3], [-4, 5, 6]]",
        "iq2_xxs.4d",
        "[256, 2, 1, 2]",
        "IQ2_XXS",
        "total: 8 tensors",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    // No line explodes: long arrays and strings are summarised.
    assert!(text.lines().all(|l| l.len() < 200), "{text}");
}

fn expect_bad_input(path: &Path) -> String {
    for json in [false, true] {
        let out = inspect(path, json);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{}: {err}", path.display());
        assert!(
            out.stdout.is_empty(),
            "stdout not empty for {}",
            path.display()
        );
        let prefix = format!("ds4: error: {}: ", path.display());
        assert!(err.starts_with(&prefix), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!err.contains("panicked"));
    }
    String::from_utf8_lossy(&inspect(path, false).stderr).into_owned()
}

#[test]
fn hostile_files_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    let valid = small_valid();
    let mut huge_tc = valid.clone();
    huge_tc[8..16].copy_from_slice(&(1u64 << 62).to_le_bytes());
    let e = expect_bad_input(&write("huge_tc", &huge_tc));
    assert!(
        e.contains("tensor count 4611686018427387904") && e.contains("at byte 8"),
        "{e}"
    );

    let mut magic = valid.clone();
    magic[..4].copy_from_slice(b"GGML");
    assert!(expect_bad_input(&write("magic", &magic)).contains("not a GGUF file"));

    let e = expect_bad_input(&write("trunc", &valid[..valid.len() - 1]));
    assert!(e.contains("past the end of the file"), "{e}");

    let mut b = B::new();
    b.header(3, 1, 0)
        .tensor("t", &[1, 1, 1, 1, 1], 0, 0)
        .pad(32)
        .data(4);
    assert!(expect_bad_input(&write("ndims", &b.0)).contains("n_dims 5"));

    expect_bad_input(&write("empty", b""));
}

#[test]
fn missing_path_and_directory_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let e = expect_bad_input(&dir.path().join("missing.gguf"));
    assert!(e.contains("cannot open"), "{e}");
    let e = expect_bad_input(dir.path());
    assert!(e.contains("not a regular file"), "{e}");
}

#[test]
fn usage_errors_exit_2() {
    let out = ds4(&["inspect".as_ref()]);
    assert_eq!(out.status.code(), Some(2));
    let out = ds4(&["inspect".as_ref(), "--bogus".as_ref(), "x".as_ref()]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn small_valid_file_in_json() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("small.gguf");
    std::fs::write(&p, small_valid()).unwrap();
    let out = inspect(&p, true);
    assert_eq!(out.status.code(), Some(0));
    let j: J = serde_json::from_slice(&out.stdout).unwrap();
    let data_offset = j["data_offset"].as_u64().unwrap();
    assert_eq!(
        j["tensors"][1],
        json!({"name": "b.q8", "type": "Q8_0", "shape": [32, 2], "offset": data_offset + 32, "nbytes": 68})
    );
    assert_eq!(j["metadata"]["nested"], json!([[1, 2], [3]]));
    assert_eq!(j["metadata"]["f32"], json!(1.5));
    assert_eq!(j["metadata"]["i64"], json!(-(1i64 << 40)));
}
