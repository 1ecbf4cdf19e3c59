//! Helpers shared by the gen / model / cat integration tests: the `ds4` binary, the python
//! oracle (gguf-py, through DS4_PYTHON), and generating model files.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `ds4` binary built for this test run.
pub fn ds4() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ds4"))
}

/// Runs `ds4 args…`, returning its output.
pub fn run_ds4(args: &[&str]) -> Output {
    ds4().args(args).output().expect("spawn ds4")
}

/// Runs `ds4 gen-model OUT args…` and asserts success.
pub fn gen_model(out: &Path, args: &[&str]) -> String {
    let o = ds4()
        .arg("gen-model")
        .arg(out)
        .args(args)
        .output()
        .expect("spawn ds4");
    assert!(
        o.status.success(),
        "gen-model failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The python that has gguf-py. Fails (never skips) when DS4_PYTHON is not set.
pub fn python() -> PathBuf {
    match std::env::var_os("DS4_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "DS4_PYTHON is not set: this test needs gguf-py 0.19.0 as its oracle. \
             Run `bash .ci/test.sh`, or set DS4_PYTHON to a python with `pip install gguf==0.19.0`"
        ),
    }
}

/// Runs `tests/py/<script> args…` with DS4_PYTHON and returns stdout; panics with stderr on
/// failure.
pub fn run_py(script: &str, args: &[&str]) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/py")
        .join(script);
    let o = Command::new(python())
        .arg(&path)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run DS4_PYTHON {:?}: {e}", python()));
    assert!(
        o.status.success(),
        "{script} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("utf-8 output")
}

/// One line of stderr, without the trailing newline.
pub fn stderr_line(o: &Output) -> String {
    let s = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(
        s.lines().count(),
        1,
        "expected one line on stderr, got {s:?}"
    );
    s.trim_end().to_string()
}

/// The files in `dir` (names), sorted.
pub fn dir_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Runs `ds4 args… --json`, asserts success and returns its one JSON object.
pub fn run_ds4_json(args: &[&str]) -> serde_json::Value {
    let o = ds4().args(args).arg("--json").output().expect("spawn ds4");
    assert!(
        o.status.success(),
        "ds4 {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("one JSON object")
}

/// A file of little-endian f32 (a `--dump-hidden` output).
pub fn read_f32s(p: &Path) -> Vec<f32> {
    std::fs::read(p)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Relative L2 distance of `a` from the reference `b`.
pub fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "lengths");
    let diff: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let norm: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (diff / norm).sqrt()
}
