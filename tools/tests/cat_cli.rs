//! `ds4 cat` on a generated tiny model: bytes equal the generator's, expert slices, ranges,
//! exit codes with one-line errors, and a closed stdout counted as success.

mod gen_util;

use ds4_stream::generate::{Generator, Shape};
use ds4_stream::model::ExpertKind;
use gen_util::*;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;

const SEED: u64 = 21;

fn tiny() -> (tempfile::TempDir, PathBuf, Generator) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny.gguf");
    gen_model(&p, &["--scale", "tiny", "--seed", &SEED.to_string()]);
    (dir, p, Generator::new(&Shape::tiny(), SEED).unwrap())
}

fn cat(p: &Path, args: &[&str]) -> std::process::Output {
    ds4().arg("cat").arg(p).args(args).output().unwrap()
}

fn want(generator: &Generator, name: &str, off: u64, len: u64) -> Vec<u8> {
    let mut v = vec![0u8; len as usize];
    generator.tensor_bytes(name, off, &mut v).unwrap();
    v
}

#[test]
fn whole_tensors_experts_and_ranges() {
    let (_d, p, generator) = tiny();
    for name in [
        "token_embd.weight",
        "blk.0.ffn_gate_tid2eid.weight",
        "blk.3.ffn_down_exps.weight",
        "output_hc_scale.weight",
    ] {
        let o = cat(&p, &[name]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let n = generator.tensor_len(name).unwrap();
        assert!(o.stdout == want(&generator, name, 0, n), "{name}");
    }
    for kind in ExpertKind::ALL {
        let name = kind.tensor_name(2);
        let eb = generator.expert_bytes(kind);
        for e in [0u64, 7, 15] {
            let o = cat(&p, &[&name, "--expert", &e.to_string()]);
            assert!(o.status.success());
            assert!(
                o.stdout == want(&generator, &name, e * eb, eb),
                "{name} expert {e}"
            );
        }
        let o = cat(&p, &[&name, "--expert", "3", "--range", "100:1000"]);
        assert!(o.stdout == want(&generator, &name, 3 * eb + 100, 1000));
        let o = cat(
            &p,
            &[&name, "--expert", "3", "--range", &format!("{}:", eb - 5)],
        );
        assert!(o.stdout == want(&generator, &name, 4 * eb - 5, 5));
    }
    let o = cat(&p, &["output.weight", "--range", "0x10:0x20"]);
    assert!(o.stdout == want(&generator, "output.weight", 16, 32));
    let n = generator.tensor_len("output.weight").unwrap();
    let o = cat(&p, &["output.weight", "--range", &format!("{n}:")]);
    assert!(o.status.success() && o.stdout.is_empty());
}

/// `--backend auto`: through the GPU where one is (cuda build on a GPU machine: file → pinned
/// staging → device memory → read back), else through the host backend's discrete-GPU
/// emulation (staging ring + copy thread). The bytes are the generator's either way.
#[test]
fn through_a_device_the_bytes_are_the_same() {
    let (_d, p, generator) = tiny();
    for (name, range) in [
        ("token_embd.weight", None),
        ("blk.3.ffn_down_exps.weight", Some("4097:99999")),
    ] {
        let mut args = vec![name, "--backend", "auto"];
        if let Some(r) = range {
            args.extend(["--range", r]);
        }
        let o = cat(&p, &args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let (off, len) = match range {
            None => (0, generator.tensor_len(name).unwrap()),
            Some(_) => (4097, 99999),
        };
        assert!(o.stdout == want(&generator, name, off, len), "{name}");
    }
    let o = cat(&p, &["output.weight", "--backend", "tpu"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn bad_requests_exit_2_with_one_line() {
    let (_d, p, _gen) = tiny();
    let cases: &[(&[&str], &str)] = &[
        (
            &["blk.1.ffn_up_exps.weigth"],
            "no tensor \"blk.1.ffn_up_exps.weigth\"",
        ),
        (
            &["blk.1.ffn_up_exps.weigth"],
            "closest: blk.1.ffn_up_exps.weight",
        ),
        (
            &["output.weight", "--expert", "0"],
            "not a routed expert tensor",
        ),
        (
            &["blk.1.ffn_up_exps.weight", "--expert", "16"],
            "expert 16 out of range",
        ),
        (&["output.weight", "--range", "5"], "expected START:LEN"),
        (&["output.weight", "--range", "0:99999999"], "exceeds"),
        (
            &[
                "blk.0.ffn_down_exps.weight",
                "--expert",
                "1",
                "--range",
                "21504:1",
            ],
            "exceeds the 21504 bytes",
        ),
    ];
    for (args, msg) in cases {
        let o = cat(&p, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr_line(&o);
        assert!(err.starts_with("ds4: error: "), "{err}");
        assert!(err.contains(msg), "{args:?}: {err}");
        assert!(o.stdout.is_empty());
    }
    let o = run_ds4(&["cat", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "missing TENSOR is a usage error");
}

#[test]
fn reader_shape_override_is_used_or_refused() {
    let (_d, p, generator) = tiny();
    let name = "blk.3.ffn_down_exps.weight";
    let n = generator.tensor_len(name).unwrap();
    // A small shape (1 reader, 2 in flight, 4 KiB requests) still gives every byte.
    let o = ds4()
        .env("DS4_CAT_SHAPE", "1,2,4")
        .args(["cat", p.to_str().unwrap(), name])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stdout == want(&generator, name, 0, n));
    for bad in ["8,12", "0,1,4", "1,1,6", "x"] {
        let o = ds4()
            .env("DS4_CAT_SHAPE", bad)
            .args(["cat", p.to_str().unwrap(), name])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad}");
        let err = stderr_line(&o);
        assert!(err.contains("DS4_CAT_SHAPE"), "{bad}: {err}");
        assert!(o.stdout.is_empty());
    }
}

#[test]
fn bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.gguf");
    let o = cat(&missing, &["x"]);
    // As for `ds4 inspect`: a path that cannot be opened is bad input.
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr_line(&o).contains(&missing.display().to_string()));

    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"this is not a gguf file at all").unwrap();
    let o = cat(&junk, &["x"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr_line(&o).contains(&junk.display().to_string()));

    // A valid header whose data was cut off: the tensor table points past EOF.
    let (_d, p, _gen) = tiny();
    let cut = dir.path().join("cut.gguf");
    let bytes = std::fs::read(&p).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let o = cat(&cut, &["output.weight"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    stderr_line(&o);
}

#[test]
fn closed_stdout_is_success() {
    let (_d, p, _gen) = tiny();
    // 884,736 bytes: far more than a pipe buffer, so cat is still writing when we hang up.
    let mut child = ds4()
        .arg("cat")
        .arg(&p)
        .arg("blk.2.ffn_down_exps.weight")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    out.read_exact(&mut first).unwrap();
    drop(out);
    let o = child.wait_with_output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
