//! `ds4 gen-model` as a command: determinism, no overwrite without --force, no half-written
//! file on failure, exit codes and one-line errors, `--layers N` end to end.

mod gen_util;

use gen_util::*;

#[test]
fn same_seed_same_file_and_summary() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        dir.path().join("a.gguf"),
        dir.path().join("b.gguf"),
        dir.path().join("c.gguf"),
    );
    let line = gen_model(&a, &["--scale", "tiny", "--seed", "5"]);
    gen_model(&b, &["--scale", "tiny", "--seed", "5"]);
    gen_model(&c, &["--scale", "tiny", "--seed", "6"]);
    assert!(
        line.starts_with(&format!("wrote {}: 178 tensors, ", a.display())),
        "{line}"
    );
    assert!(line.contains("6 layers x 16 experts of 55,296 B"), "{line}");
    let (fa, fb, fc) = (
        std::fs::read(&a).unwrap(),
        std::fs::read(&b).unwrap(),
        std::fs::read(&c).unwrap(),
    );
    assert!(fa == fb, "same seed, different files");
    assert_eq!(fa.len(), fc.len());
    assert!(fa != fc, "different seeds, same file");
    assert_eq!(dir_names(dir.path()), ["a.gguf", "b.gguf", "c.gguf"]);
}

#[test]
fn refuses_to_overwrite_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.gguf");
    std::fs::write(&p, b"precious").unwrap();
    let o = run_ds4(&["gen-model", p.to_str().unwrap(), "--scale", "tiny"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr_line(&o);
    assert!(err.starts_with("ds4: error: "), "{err}");
    assert!(
        err.contains(&format!("{} exists (use --force", p.display())),
        "{err}"
    );
    assert_eq!(std::fs::read(&p).unwrap(), b"precious");

    let o = run_ds4(&[
        "gen-model",
        p.to_str().unwrap(),
        "--scale",
        "tiny",
        "--force",
    ]);
    assert!(o.status.success());
    assert_eq!(&std::fs::read(&p).unwrap()[..4], b"GGUF");
    assert_eq!(dir_names(dir.path()), ["m.gguf"]);
}

#[test]
fn unwritable_path_is_a_one_line_runtime_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("no/such/dir/m.gguf");
    let o = run_ds4(&["gen-model", p.to_str().unwrap(), "--scale", "tiny"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr_line(&o);
    assert!(
        err.contains(&format!("cannot write {}", p.display())),
        "{err}"
    );
    // The OS's words for a missing directory: ENOENT on Unix, ERROR_PATH_NOT_FOUND (3) on
    // Windows ("The system cannot find the path specified.", Wine: "Path not found.").
    #[cfg(unix)]
    assert!(err.contains("No such file or directory"), "{err}");
    #[cfg(windows)]
    assert!(err.contains("(os error 3)"), "{err}");
}

/// A full disk, simulated with a file size limit (RLIMIT_FSIZE, SIGXFSZ ignored so writes fail
/// with EFBIG instead of killing the process): one line naming OUT, exit 1, nothing left.
#[cfg(target_os = "linux")]
#[test]
fn write_failure_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.gguf");
    let script = format!(
        "trap '' XFSZ; ulimit -f 1024; exec '{}' gen-model '{}' --scale tiny",
        env!("CARGO_BIN_EXE_ds4"),
        p.display()
    );
    let o = std::process::Command::new("bash")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err = stderr_line(&o);
    assert!(err.starts_with("ds4: error: cannot write "), "{err}");
    assert!(err.contains(&p.display().to_string()), "{err}");
    assert!(err.contains("File too large"), "{err}");
    assert!(
        dir_names(dir.path()).is_empty(),
        "{:?}",
        dir_names(dir.path())
    );
}

#[test]
fn bad_arguments_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.gguf");
    let p = p.to_str().unwrap();
    for (args, msg) in [
        (
            vec!["--scale", "tiny", "--fill-layers", "6"],
            "fill layer 6 does not exist",
        ),
        (
            vec!["--scale", "tiny", "--holes", "all", "--fill-layers", "x"],
            "not a number",
        ),
        (vec!["--scale", "tiny", "--fill-experts", "3-1"], "reversed"),
        (
            vec!["--scale", "tiny", "--fill-experts", "16"],
            "fill expert 16 does not exist",
        ),
        (
            vec!["--scale", "tiny", "--layers", "0"],
            "--layers 0 is outside 1..=6 (scale tiny has 6 layers)",
        ),
        (
            vec!["--scale", "demo", "--layers", "11"],
            "--layers 11 is outside 1..=10",
        ),
        (
            vec!["--scale", "flash", "--layers", "44", "--fill"],
            "--layers 44 is outside 1..=43",
        ),
        (
            vec!["--scale", "demo", "--layers", "4", "--fill-layers", "2-4"],
            "fill layer 4 does not exist (the model has 4 layers",
        ),
    ] {
        let mut a = vec!["gen-model", p];
        a.extend(args);
        let o = run_ds4(&a);
        assert_eq!(o.status.code(), Some(2), "{a:?}");
        let err = stderr_line(&o);
        assert!(err.contains(msg), "{a:?}: {err}");
    }
    for a in [
        vec!["gen-model", p, "--scale", "huge"],
        vec![
            "gen-model",
            p,
            "--scale",
            "tiny",
            "--fill",
            "--holes",
            "all",
        ],
        vec!["gen-model", p],
        vec!["gen-model", p, "--scale", "tiny", "--layers", "-1"],
        vec!["gen-model", p, "--scale", "tiny", "--layers", "x"],
    ] {
        assert_eq!(run_ds4(&a).status.code(), Some(2), "{a:?}");
    }
    assert!(dir_names(dir.path()).is_empty());
}

/// `--layers 4` on the demo scale: a 4-layer model that the DS4 map opens (`ds4 inspect`), that
/// `ds4 demo` verifies byte for byte against the generator, and that `ds4 --ssd-streaming` runs
/// with the resident run's digest; `--layers 1` cuts the hash layers too.
#[test]
fn layers_flag_writes_a_smaller_model_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("demo4.gguf");
    let line = gen_model(&out, &["--scale", "demo", "--layers", "4", "--seed", "3"]);
    assert!(line.contains(" 4 layers x 128 experts of "), "{line}");
    assert!(line.contains(", 0 B holes;"), "{line}");
    let again = dir.path().join("again.gguf");
    gen_model(&again, &["--scale", "demo", "--layers", "4", "--seed", "3"]);
    assert!(
        std::fs::read(&out).unwrap() == std::fs::read(&again).unwrap(),
        "same options, different files"
    );
    let m = out.to_str().unwrap();

    let v = run_ds4_json(&["inspect", m]);
    assert_eq!(v["ds4"]["layers"], 4, "{}", v["ds4"]);
    assert_eq!(v["ds4"]["hash_layers"], 3);
    assert_eq!(v["ds4"]["per_layer"].as_array().map(Vec::len), Some(4));

    let o = run_ds4(&["demo", "--model", m, "--n-tokens", "2", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let base = ["-m", m, "-n", "2"];
    let resident = run_ds4_json(&base);
    let streamed = run_ds4_json(&[&base[..], &["--ssd-streaming"]].concat());
    assert_eq!(streamed["layers"], 4);
    assert_eq!(
        (&resident["mode"], &streamed["mode"]),
        (&"resident".into(), &"ssd-streaming".into())
    );
    assert_eq!(streamed["digest"], resident["digest"]);

    let one = dir.path().join("tiny1.gguf");
    let line = gen_model(&one, &["--scale", "tiny", "--layers", "1"]);
    assert!(line.contains(" 1 layers x 16 experts of "), "{line}");
    let v = run_ds4_json(&["inspect", one.to_str().unwrap()]);
    assert_eq!(
        (v["ds4"]["layers"].clone(), v["ds4"]["hash_layers"].clone()),
        (1.into(), 1.into())
    );
    let r = run_ds4_json(&["-m", one.to_str().unwrap(), "-n", "2", "--ssd-streaming"]);
    assert_eq!(r["layers"], 1);
}
