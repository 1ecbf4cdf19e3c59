//! The command-line contract of every binary, checked on the built executables as a hostile
//! user would probe them: exit 0 ok, 1 runtime error, 2 usage error or bad input; on failure
//! exactly one `ds4: error: …` line on stderr and nothing else; never a panic (exit 101) or a
//! signal; a closed stdout is success; malformed input fails fast with bounded memory (the child
//! runs under an address-space limit, RLIMIT_AS, not trusted from the program).
//!
//! Linux only: the probes use Linux devices (/dev/zero, /dev/full), FIFOs, device nodes, /proc
//! and wait4's rusage.
#![cfg(target_os = "linux")]

mod gen_util;

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What one run of a binary did.
#[derive(Debug)]
#[allow(dead_code)] // max_rss_kib: printed with {:?} in failures
struct Run {
    /// Exit status, or None when killed by a signal.
    code: Option<i32>,
    signal: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
    /// Peak resident set of the child, KiB (wait4's ru_maxrss; includes the test process's own peak at exec, see `quick_capped`: shown in failures, not asserted).
    max_rss_kib: i64,
    secs: f64,
}

/// Hang guard for runs that must be quick (hostile input, bad arguments). Generous: it catches
/// a hang or a read of gigabytes, not a slow machine.
const QUICK: Duration = Duration::from_secs(10);

fn ds4_path() -> &'static str {
    env!("CARGO_BIN_EXE_ds4")
}

fn ds4(args: &[&str]) -> Command {
    let mut c = Command::new(ds4_path());
    c.args(args);
    c
}

/// Runs `cmd` (stdin closed; stdout piped unless already set) and reaps it with wait4 to get
/// its own peak RSS. A run longer than `limit` is killed and fails the test as a hang.
// The child is reaped by wait4 below (std's wait would not give its rusage).
#[allow(clippy::zombie_processes)]
fn run(cmd: &mut Command, limit: Duration, stdout: Option<Stdio>) -> Run {
    cmd.stdin(Stdio::null()).stderr(Stdio::piped());
    cmd.stdout(stdout.unwrap_or_else(Stdio::piped));
    let start = Instant::now();
    let mut child = cmd.spawn().expect("spawn");
    let pid = child.id() as libc::pid_t;
    let reader = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = child.stdout.take().map(|s| reader(Box::new(s)));
    let err = child.stderr.take().map(|s| reader(Box::new(s)));
    let mut status = 0;
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4 on our own child's pid with valid pointers to locals; the child is not
        // waited anywhere else (std's Child does not wait on drop).
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        assert!(r >= 0, "wait4: {}", std::io::Error::last_os_error());
        if r == pid {
            break;
        }
        if start.elapsed() > limit {
            // SAFETY: signalling and reaping our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::wait4(pid, &mut status, 0, &mut ru);
            }
            panic!("{cmd:?} still running after {limit:?}: hung");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let secs = start.elapsed().as_secs_f64();
    let (code, signal) = if libc::WIFEXITED(status) {
        (Some(libc::WEXITSTATUS(status)), None)
    } else {
        (None, Some(libc::WTERMSIG(status)))
    };
    let r = Run {
        code,
        signal,
        stdout: out.map(|t| t.join().unwrap()).unwrap_or_default(),
        stderr: String::from_utf8_lossy(&err.map(|t| t.join().unwrap()).unwrap_or_default())
            .into_owned(),
        max_rss_kib: ru.ru_maxrss,
        secs,
    };
    assert!(r.signal.is_none(), "{cmd:?} killed by signal: {r:?}");
    assert_ne!(r.code, Some(101), "{cmd:?} panicked: {}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{cmd:?}: {}", r.stderr);
    r
}

fn quick(args: &[&str]) -> Run {
    run(&mut ds4(args), QUICK, None)
}

/// [`quick`] with the child's address space capped at `cap` bytes (RLIMIT_AS): memory
/// proportional to a hostile claim makes the child fail to allocate (abort, not exit 2). This
/// is the memory bound of the hostile-input tests. wait4's ru_maxrss cannot be that bound: a
/// child spawned with vfork/posix_spawn inherits the test process's own peak RSS at exec, so it
/// measures whatever the other tests running in this process used.
fn quick_capped(args: &[&str], cap: u64) -> Run {
    capped(ds4(args), cap)
}

/// [`quick_capped`] for a command built by the caller (environment, directory).
fn capped(mut c: Command, cap: u64) -> Run {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and only calls setrlimit,
    // which is async-signal-safe; it allocates nothing.
    unsafe {
        c.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: cap,
                rlim_max: cap,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    run(&mut c, QUICK, None)
}

/// Asserts a failure with `code`: one `ds4: error: ` line naming `needle`, nothing on stdout.
/// Returns the line.
fn fails(r: &Run, code: i32, needle: &str) -> String {
    assert_eq!(r.code, Some(code), "{r:?}");
    assert_eq!(r.stderr.lines().count(), 1, "not one line: {:?}", r.stderr);
    assert!(r.stderr.starts_with("ds4: error: "), "{:?}", r.stderr);
    assert!(
        r.stderr.contains(needle),
        "{needle:?} not in {:?}",
        r.stderr
    );
    assert!(
        r.stdout.is_empty(),
        "stdout: {:?}",
        String::from_utf8_lossy(&r.stdout)
    );
    r.stderr.trim_end().to_string()
}

fn ok(r: &Run) {
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(r.stderr.is_empty(), "{:?}", r.stderr);
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A tiny generated model in its own directory.
fn tiny() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny.gguf");
    gen_util::gen_model(&p, &["--scale", "tiny", "--seed", "3"]);
    (dir, p)
}

/// A stdout whose reader is already gone: every write fails with EPIPE at once, so a broken
/// pipe is hit deterministically (no race with a `head` that may read everything first).
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two fresh fds into the array; each is owned exactly once below.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fds[0] / fds[1] are open and owned by nobody else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Stdio::from(write)
}

/// A file at /dev/full: every write fails with ENOSPC.
fn dev_full() -> Stdio {
    Stdio::from(
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap(),
    )
}

// ---- bad paths ----

#[test]
fn unusable_paths_exit_2_for_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let missing = d.join("missing.gguf");
    let empty = d.join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    let fifo = d.join("fifo.gguf");
    let c = std::ffi::CString::new(s(&fifo)).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let cases: [(&Path, &str); 5] = [
        (&missing, "cannot open"),
        (d, "not a regular file"),
        (&empty, "truncated"),
        (Path::new("/dev/zero"), "not a regular file"),
        // Opening a FIFO for reading waits for a writer: this hung before it was refused.
        (&fifo, "not a regular file"),
    ];
    for (p, why) in cases {
        let ps = s(p);
        let mut commands = vec![
            vec!["inspect", ps],
            vec!["inspect", ps, "--json"],
            vec!["cat", ps, "token_embd.weight"],
        ];
        // (demo generates its model at a path that does not exist yet: not an error.)
        if p != missing {
            commands.push(vec!["demo", "--model", ps, "--n-tokens", "1"]);
        }
        for args in commands {
            let line = fails(&quick(&args), 2, why);
            assert!(line.contains(ps), "{args:?}: {line}");
        }
    }
}

#[test]
fn truncated_and_corrupt_files_exit_2() {
    let (dir, p) = tiny();
    let bytes = std::fs::read(&p).unwrap();
    // Inside the magic, the counts, the metadata, the tensor table, and the data.
    for (i, cut) in [3usize, 20, 1000, 40_000, bytes.len() / 2, bytes.len() - 1]
        .into_iter()
        .enumerate()
    {
        let q = dir.path().join(format!("cut{i}.gguf"));
        std::fs::write(&q, &bytes[..cut]).unwrap();
        for args in [
            vec!["inspect", s(&q)],
            vec!["cat", s(&q), "output.weight"],
            vec!["demo", "--model", s(&q)],
        ] {
            fails(&quick(&args), 2, s(&q));
        }
    }
    let mut bad = bytes.clone();
    bad[..4].copy_from_slice(b"GGML");
    let q = dir.path().join("magic.gguf");
    std::fs::write(&q, &bad).unwrap();
    fails(&quick(&["inspect", s(&q)]), 2, "not a GGUF file");
}

/// A tensor count that passes the "can the rest of the file hold it" check, and one far over
/// the cap: both refused at once, without memory proportional to the claim.
#[test]
fn lying_tensor_count_fails_fast_with_bounded_memory() {
    let (dir, p) = tiny();
    let bytes = std::fs::read(&p).unwrap();
    let kv = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
    let plausible = (bytes.len() as u64 - 24 - kv * 13) / 32;
    for count in [plausible, 60_000, 1 << 62, u64::MAX] {
        let mut b = bytes.clone();
        b[8..16].copy_from_slice(&count.to_le_bytes());
        let q = dir.path().join("lying.gguf");
        std::fs::write(&q, &b).unwrap();
        for args in [vec!["inspect", s(&q), "--json"], vec!["cat", s(&q), "x"]] {
            let r = quick_capped(&args, 1 << 30);
            fails(&r, 2, "at byte");
            assert!(r.secs < 5.0, "{count}: {} s", r.secs);
        }
    }
}

/// A 32 GiB sparse file (a few KiB on disk) whose header is 2,000 strings of 16 MiB: each
/// string is under the per-string cap and inside the file, so only the cap on all header
/// strings together stops it. It took 17 GB of memory and over a minute before.
#[test]
fn sparse_file_of_huge_strings_is_refused_with_bounded_memory() {
    use std::io::{Seek, SeekFrom, Write};
    let dir = tempfile::tempdir().unwrap();
    let q = dir.path().join("sparse.gguf");
    let mut f = std::fs::File::create(&q).unwrap();
    let (n, len) = (2000u64, 1u64 << 24);
    let mut h = Vec::new();
    h.extend_from_slice(b"GGUF");
    h.extend_from_slice(&3u32.to_le_bytes());
    h.extend_from_slice(&0u64.to_le_bytes());
    h.extend_from_slice(&1u64.to_le_bytes());
    h.extend_from_slice(&1u64.to_le_bytes());
    h.extend_from_slice(b"k");
    h.extend_from_slice(&9u32.to_le_bytes()); // ARRAY
    h.extend_from_slice(&8u32.to_le_bytes()); // of STRING
    h.extend_from_slice(&n.to_le_bytes());
    f.write_all(&h).unwrap();
    let mut pos = h.len() as u64;
    for _ in 0..n {
        f.seek(SeekFrom::Start(pos)).unwrap();
        f.write_all(&len.to_le_bytes()).unwrap();
        pos += 8 + len;
    }
    f.set_len(pos).unwrap();
    drop(f);
    let r = quick_capped(&["inspect", s(&q)], 1 << 30);
    fails(&r, 2, "max_string_bytes");
}

// ---- bad arguments ----

#[test]
fn bad_arguments_exit_2_with_one_line() {
    let (_d, p) = tiny();
    let p = s(&p);
    let cases: &[(&[&str], &str)] = &[
        (&[], "--demo"), // no command: the main run, on ./ds4flash.gguf, which is not there
        (&["bogus"], "unrecognized subcommand"),
        (&["inspect"], "required"),
        (&["inspect", p, "--bogus"], "--bogus"),
        (&["cat", p], "required"),
        (
            &["cat", p, "no.such.tensor"],
            "no tensor \"no.such.tensor\"",
        ),
        (
            &["cat", p, "blk.1.ffn_up_exps.weight", "--expert", "16"],
            "expert 16 out of range",
        ),
        (
            &["cat", p, "blk.1.ffn_up_exps.weight", "--expert", "-1"],
            "'-1'",
        ),
        (
            &[
                "cat",
                p,
                "blk.1.ffn_up_exps.weight",
                "--expert",
                "99999999999999999999",
            ],
            "--expert",
        ),
        (
            &["cat", p, "output.weight", "--expert", "0"],
            "not a routed expert tensor",
        ),
        (
            &[
                "cat",
                p,
                "output.weight",
                "--range",
                "18446744073709551615:1",
            ],
            "past the end",
        ),
        (
            &[
                "cat",
                p,
                "output.weight",
                "--range",
                "1:18446744073709551615",
            ],
            "exceeds",
        ),
        (
            &[
                "cat",
                p,
                "output.weight",
                "--range",
                "0x1:0x1ffffffffffffffff",
            ],
            "bad LEN",
        ),
        (&["cat", p, "output.weight", "--range", "1-2"], "START:LEN"),
        (
            &["gen-model", "x.gguf", "--scale", "tiny", "--seed", "abc"],
            "--seed",
        ),
        (
            &["gen-model", "x.gguf", "--scale", "tiny", "--seed", "-1"],
            "'-1'",
        ),
        (&["gen-model", "x.gguf", "--scale", "huge"], "--scale"),
        (&["gen-model", "x.gguf"], "--scale"),
        (
            &[
                "gen-model",
                "x.gguf",
                "--scale",
                "tiny",
                "--fill-layers",
                "0-99999999",
            ],
            "entries",
        ),
        (&["demo", "--model", p, "--n-tokens", "0"], "--n-tokens"),
        (&["demo", "--model", p, "--workers", "0"], "--workers"),
        (&["demo", "--model", p, "--workers", "1025"], "--workers"),
        (
            &["demo", "--model", p, "--workers", "18446744073709551616"],
            "--workers",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (args, needle) in cases {
        let r = run(ds4(args).current_dir(dir.path()), QUICK, None);
        fails(&r, 2, needle);
    }
    // Nothing was written by the refused gen-model runs.
    assert_eq!(gen_util::dir_names(dir.path()), Vec::<String>::new());
}

#[test]
fn help_and_version_exit_0() {
    for args in [
        &["--help"][..],
        &["--version"],
        &["cat", "--help"],
        &["demo", "-h"],
    ] {
        let r = quick(args);
        ok(&r);
        assert!(!r.stdout.is_empty());
    }
    // Help into a closed pipe is still success; into a full disk it is a runtime error.
    ok(&run(&mut ds4(&["--help"]), QUICK, Some(closed_pipe())));
    let r = run(&mut ds4(&["--help"]), QUICK, Some(dev_full()));
    assert_eq!(r.code, Some(1), "{r:?}");
}

#[test]
fn ds4_bench_and_stress_bad_flags_exit_2_with_one_prefixed_line() {
    let bench: &[(&[&str], &str)] = &[
        (&["--bogus"], "--bogus"),
        (&["--workers", "x"], "--workers"),
        (&["no-such-bench"], "no-such-bench"),
        (&["io", "--size", "4 parsecs"], "--size"),
        (&["io", "--workers", "x"], "--workers"),
        (&["cache", "--bogus"], "--bogus"),
        (&[], "missing command"),
    ];
    for (args, needle) in bench {
        let r = run(
            Command::new(env!("CARGO_BIN_EXE_ds4-bench")).args(*args),
            QUICK,
            None,
        );
        refused(&r, "ds4-bench", 2, needle);
    }
    let stress_cases: &[(&[&str], &str)] = &[
        (&["--bogus"], "--bogus"),
        (&["--file-len", "6 parsecs"], "--file-len"),
        (&["--duration", "soon"], "--duration"),
        (&["--threads", "x"], "--threads"),
        (&["--keep"], "--file"),
    ];
    for (args, needle) in stress_cases {
        let r = run(
            Command::new(env!("CARGO_BIN_EXE_ds4-stress")).args(*args),
            QUICK,
            None,
        );
        refused(&r, "ds4-stress", 2, needle);
    }
    // Help and version still go to stdout with exit 0.
    for prog in [
        env!("CARGO_BIN_EXE_ds4-bench"),
        env!("CARGO_BIN_EXE_ds4-stress"),
    ] {
        for flag in ["--help", "--version"] {
            let r = run(Command::new(prog).arg(flag), QUICK, None);
            assert_eq!(r.code, Some(0), "{prog} {flag}: {r:?}");
            assert!(!r.stdout.is_empty() && r.stderr.is_empty(), "{r:?}");
        }
    }
}

// ---- outputs ----

#[test]
fn gen_model_never_replaces_a_directory_device_or_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sub = d.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let fifo = d.join("fifo");
    let node = d.join("null");
    let (cf, cn) = (
        std::ffi::CString::new(s(&fifo)).unwrap(),
        std::ffi::CString::new(s(&node)).unwrap(),
    );
    // SAFETY: valid NUL-terminated paths.
    assert_eq!(unsafe { libc::mkfifo(cf.as_ptr(), 0o644) }, 0);
    // A character device like /dev/null (1, 3) needs CAP_MKNOD: checked when we have it.
    // SAFETY: as above.
    let have_node =
        unsafe { libc::mknod(cn.as_ptr(), libc::S_IFCHR | 0o644, libc::makedev(1, 3)) } == 0;
    let mut targets = vec![sub.clone(), fifo.clone()];
    if have_node {
        targets.push(node.clone());
    }
    for t in &targets {
        for force in [false, true] {
            let mut args = vec!["gen-model", s(t), "--scale", "tiny"];
            if force {
                args.push("--force");
            }
            fails(&quick(&args), 2, "not a regular file");
        }
    }
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    if have_node {
        assert!(std::fs::metadata(&node)
            .unwrap()
            .file_type()
            .is_char_device());
    }
    assert!(std::fs::metadata(&sub).unwrap().is_dir());
    let trailing = format!("{}/", s(&d.join("new.gguf")));
    fails(
        &quick(&["gen-model", &trailing, "--scale", "tiny"]),
        2,
        "not a file path",
    );
    let through_file = d.join("file");
    std::fs::write(&through_file, b"x").unwrap();
    fails(
        &quick(&[
            "gen-model",
            s(&through_file.join("m.gguf")),
            "--scale",
            "tiny",
        ]),
        2,
        "Not a directory",
    );
    let mut want = vec!["fifo", "file", "sub"];
    if have_node {
        want.insert(2, "null");
    }
    assert_eq!(gen_util::dir_names(d), want);
}

#[test]
fn unwritable_output_is_a_runtime_error() {
    let dir = tempfile::tempdir().unwrap();
    for out in [
        dir.path().join("no/such/dir/m.gguf"),
        // Nobody, root included, can create files in /proc.
        PathBuf::from("/proc/ds4-contract-test.gguf"),
    ] {
        fails(
            &quick(&["gen-model", s(&out), "--scale", "tiny"]),
            1,
            "cannot write",
        );
        assert!(!out.exists());
    }
}

/// A small file system that fills up: a tmpfs of 8 MiB where we may mount one (root), else a
/// file size limit (RLIMIT_FSIZE, SIGXFSZ ignored, so writes fail with EFBIG).
struct Full {
    dir: tempfile::TempDir,
    mounted: bool,
}

impl Full {
    fn new() -> Full {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        Full { dir, mounted }
    }

    /// Runs `ds4 args` (stdout to `stdout_file` under the small fs if given) under the limit.
    fn run(&self, args: &[&str], stdout_file: Option<&str>) -> Run {
        let mut script = String::from("trap '' XFSZ; ");
        if !self.mounted {
            script.push_str("ulimit -f 4096; ");
        }
        script.push_str("exec \"$0\" \"$@\"");
        if let Some(f) = stdout_file {
            script.push_str(&format!(" > '{}'", self.dir.path().join(f).display()));
        }
        let mut c = Command::new("bash");
        c.arg("-c").arg(script).arg(ds4_path()).args(args);
        run(&mut c, Duration::from_secs(60), None)
    }
}

impl Drop for Full {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(self.dir.path()).status();
        }
    }
}

#[test]
fn full_file_system_is_a_one_line_runtime_error() {
    let full = Full::new();
    let out = full.dir.path().join("m.gguf");
    // gen-model of the demo model (540 MiB) into it: fails, removes its temporary file.
    let r = full.run(&["gen-model", s(&out), "--scale", "demo"], None);
    let line = fails(&r, 1, "cannot write");
    assert!(
        line.contains("No space left on device") || line.contains("File too large"),
        "{line}"
    );
    assert_eq!(gen_util::dir_names(full.dir.path()), Vec::<String>::new());

    // cat of 16 MiB (zeros from a sparse flash file) into a file there.
    let src = tempfile::tempdir().unwrap();
    let flash = src.path().join("flash.gguf");
    gen_util::gen_model(&flash, &["--scale", "flash", "--holes", "all"]);
    let r = full.run(
        &[
            "cat",
            s(&flash),
            "blk.0.ffn_gate_exps.weight",
            "--range",
            "0:16777216",
        ],
        Some("out.bin"),
    );
    let line = fails(&r, 1, "writing");
    assert!(
        line.contains("No space left on device") || line.contains("File too large"),
        "{line}"
    );
}

#[test]
fn full_stdout_is_a_runtime_error_for_every_command() {
    let (_d, p) = tiny();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("g.gguf");
    for args in [
        vec!["inspect", s(&p)],
        vec!["inspect", s(&p), "--json"],
        vec!["cat", s(&p), "output.weight"],
        vec!["gen-model", s(&out), "--scale", "tiny"],
        vec!["demo", "--model", s(&p), "--n-tokens", "1"],
        vec!["demo", "--model", s(&p), "--n-tokens", "1", "--json"],
    ] {
        let r = run(&mut ds4(&args), QUICK, Some(dev_full()));
        fails(&r, 1, "No space left on device");
    }
    // With stderr unusable too, the exit code still tells (eprintln! used to panic: 101).
    let r = run(
        Command::new("bash").args([
            "-c",
            "exec \"$0\" inspect /nonexistent 2>/dev/full",
            ds4_path(),
        ]),
        QUICK,
        None,
    );
    assert_eq!(r.code, Some(2), "{r:?}");
}

#[test]
fn closed_stdout_is_success_for_every_command() {
    let (d, p) = tiny();
    let out = d.path().join("g.gguf");
    for args in [
        vec!["inspect", s(&p)],
        vec!["inspect", s(&p), "--json"],
        vec!["cat", s(&p), "blk.2.ffn_down_exps.weight"],
        vec!["gen-model", s(&out), "--scale", "tiny"],
        vec!["demo", "--model", s(&p), "--n-tokens", "2"],
        vec!["demo", "--model", s(&p), "--n-tokens", "2", "--json"],
    ] {
        ok(&run(&mut ds4(&args), QUICK, Some(closed_pipe())));
    }
    // And through a real `head -c 1`.
    let r = run(
        Command::new("bash").args([
            "-c",
            "\"$0\" cat \"$1\" blk.2.ffn_down_exps.weight | head -c 1 >/dev/null; \
             exit ${PIPESTATUS[0]}",
            ds4_path(),
            s(&p),
        ]),
        QUICK,
        None,
    );
    ok(&r);
}

// ---- demo on files it cannot use ----

#[test]
fn demo_on_a_non_ds4_gguf_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let q = dir.path().join("llama.gguf");
    let script = "import sys, numpy as np, gguf\n\
                  w = gguf.GGUFWriter(sys.argv[1], 'llama')\n\
                  w.add_block_count(2)\n\
                  w.add_tensor('tok', np.zeros((4, 8), dtype=np.float32))\n\
                  w.write_header_to_file(); w.write_kv_data_to_file()\n\
                  w.write_tensors_to_file(); w.close()\n";
    let o = Command::new(gen_util::python())
        .args(["-c", script, s(&q)])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for args in [
        vec!["demo", "--model", s(&q)],
        vec!["demo", "--model", s(&q), "--no-verify"],
        vec!["cat", s(&q), "tok", "--expert", "0"],
    ] {
        fails(&quick(&args), 2, "general.architecture is \"llama\"");
    }
    // inspect works on any GGUF and says why it is not DS4.
    let r = quick(&["inspect", s(&q)]);
    ok(&r);
    assert!(String::from_utf8_lossy(&r.stdout).contains("not a DS4 model"));
}

#[test]
fn demo_worker_counts() {
    let (_d, p) = tiny();
    // The cap itself works (1024 threads, each with its own handle) where the fd limit allows.
    let r = quick(&[
        "demo",
        "--model",
        s(&p),
        "--n-tokens",
        "1",
        "--workers",
        "1024",
    ]);
    match r.code {
        Some(0) => assert!(r.stderr.is_empty(), "{r:?}"),
        _ => {
            fails(&r, 1, "Too many open files");
        }
    }
    let r = quick(&[
        "demo",
        "--model",
        s(&p),
        "--n-tokens",
        "1",
        "--workers",
        "1",
    ]);
    ok(&r);
    assert!(String::from_utf8_lossy(&r.stdout).contains("all correct"));
}

// ---- files a program may touch (issue 21) ----

fn stress(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ds4-stress"));
    // Small and quick: 64 MiB file, no multi-GiB reads, no storms.
    c.args(["--huge", "0", "--file-len", "64MiB", "--storm-every", "0s"]);
    c.args(["--threads", "1", "--tasks", "1", "--workers", "2"]);
    c.args(args);
    c
}

fn bench(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ds4-bench"));
    c.args(args);
    c
}

/// A refusal of `prog`: exit `code`, one `prog: error: ` line naming `needle`.
fn refused(r: &Run, prog: &str, code: i32, needle: &str) {
    assert_eq!(r.code, Some(code), "{r:?}");
    assert_eq!(r.stderr.lines().count(), 1, "not one line: {:?}", r.stderr);
    assert!(
        r.stderr.starts_with(&format!("{prog}: error: ")) && r.stderr.contains(needle),
        "{needle:?} not in {:?}",
        r.stderr
    );
}

#[test]
fn an_existing_file_is_never_overwritten_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let mine = dir.path().join("mine.bin");
    std::fs::write(&mine, b"the user's bytes").unwrap();
    let m = s(&mine);
    // ds4-stress --file: refused before anything is written.
    let r = run(&mut stress(&["--file", m, "--ops", "20"]), QUICK, None);
    refused(&r, "ds4-stress", 2, "exists (use --force to overwrite)");
    assert_eq!(std::fs::read(&mine).unwrap(), b"the user's bytes");
    // ds4 --dump-hidden / --record-trace.
    let (_d, p) = tiny();
    for flag in ["--dump-hidden", "--record-trace"] {
        let r = quick(&["-m", s(&p), "-n", "1", flag, m]);
        fails(
            &r,
            2,
            &format!("{flag} {m} exists (use --force to overwrite)"),
        );
        assert_eq!(std::fs::read(&mine).unwrap(), b"the user's bytes");
    }
    // ds4-bench report --csv / --plot, and cache --plot.
    let rows = dir.path().join("rows.jsonl");
    std::fs::write(&rows, "{}\n").unwrap();
    for args in [
        &["report", s(&rows), "--csv", m][..],
        &["report", s(&rows), "--plot", m],
        &["cache", "--n-tokens", "64", "--plot", m],
    ] {
        let r = run(&mut bench(args), QUICK, None);
        refused(&r, "ds4-bench", 2, "exists (use --force to overwrite)");
        assert_eq!(std::fs::read(&mine).unwrap(), b"the user's bytes");
    }
    // --force: replaced, and said so (ds4-stress also removes it after the run).
    let r = quick(&["-m", s(&p), "-n", "1", "--dump-hidden", m, "--force"]);
    ok(&r);
    assert_eq!(std::fs::metadata(&mine).unwrap().len() % 4, 0);
    let r = run(
        &mut stress(&["--file", m, "--force", "--ops", "20"]),
        Duration::from_secs(60),
        None,
    );
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(r.stderr.contains("--force: overwriting"), "{}", r.stderr);
    assert!(!mine.exists());
    assert_eq!(gen_util::dir_names(dir.path()), vec!["rows.jsonl"]);
}

#[test]
fn outputs_are_checked_before_the_work_and_never_partial() {
    let (_d, p) = tiny();
    // Nobody, root included, can create files in /proc: fails at once, exit 1.
    for flag in ["--dump-hidden", "--record-trace"] {
        let r = quick(&["-m", s(&p), "-n", "1", flag, "/proc/ds4-contract.bin"]);
        fails(
            &r,
            1,
            &format!("cannot write {flag} /proc/ds4-contract.bin"),
        );
    }
    let r = run(
        &mut bench(&["cache", "--n-tokens", "64", "--plot", "/proc/x.svg"]),
        QUICK,
        None,
    );
    refused(&r, "ds4-bench", 1, "cannot write --plot /proc/x.svg");
    // A good output appears complete, with no temporary file beside it.
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("h.bin");
    let t = dir.path().join("t.jsonl");
    ok(&quick(&[
        "-m",
        s(&p),
        "-n",
        "2",
        "--dump-hidden",
        s(&h),
        "--record-trace",
        s(&t),
    ]));
    assert_eq!(gen_util::dir_names(dir.path()), vec!["h.bin", "t.jsonl"]);
    assert!(std::fs::metadata(&h).unwrap().len() > 0);
}

/// Starts `cmd`, waits until a file whose name starts with `prefix` appears in `dir` (the
/// temporary file of the work), sends `sig` and returns the exit code.
fn interrupt_when_file_appears(cmd: &mut Command, dir: &Path, prefix: &str, sig: i32) -> i32 {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !gen_util::dir_names(dir)
        .iter()
        .any(|n| n.starts_with(prefix))
    {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no {prefix}* appeared"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "exited before the signal"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: signalling our own child, which has not been reaped (try_wait said running).
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("interrupted: removed"), "{err}");
    out.status.code().expect("exited, not killed by the signal")
}

#[test]
fn interrupted_work_leaves_no_temporary_file() {
    // gen-model's OUT.tmp-PID (the demo model's cache file is written the same way).
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.gguf");
    let code = interrupt_when_file_appears(
        &mut ds4(&["gen-model", s(&out), "--scale", "demo"]),
        dir.path(),
        "m.gguf.tmp-",
        libc::SIGINT,
    );
    assert_eq!(code, 130);
    assert_eq!(gen_util::dir_names(dir.path()), Vec::<String>::new());
    // ds4-bench io's test file in --dir.
    let code = interrupt_when_file_appears(
        &mut bench(&["io", "--size", "1GiB", "--dir", s(dir.path()), "--quiet"]),
        dir.path(),
        "ds4-bench-",
        libc::SIGTERM,
    );
    assert_eq!(code, 130);
    assert_eq!(gen_util::dir_names(dir.path()), Vec::<String>::new());
}

#[test]
fn stale_temporary_files_of_dead_processes_are_swept() {
    let mut c = Command::new("true").spawn().unwrap();
    let dead = c.id();
    c.wait().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let stale = format!("m.gguf.tmp-{dead}");
    std::fs::write(dir.path().join(&stale), b"left by a killed run").unwrap();
    // Another file of that shape, but not of this output: kept.
    std::fs::write(dir.path().join(format!("n.gguf.tmp-{dead}")), b"").unwrap();
    let out = dir.path().join("m.gguf");
    ok_quietly(&quick(&["gen-model", s(&out), "--scale", "tiny"]));
    let names = gen_util::dir_names(dir.path());
    // The PID may have been reused meanwhile (then the file is rightly kept).
    if !Path::new(&format!("/proc/{dead}")).exists() {
        assert_eq!(
            names,
            vec!["m.gguf".to_string(), format!("n.gguf.tmp-{dead}")]
        );
    }
}

fn ok_quietly(r: &Run) {
    assert_eq!(r.code, Some(0), "{r:?}");
}

#[test]
fn a_stress_run_that_checked_nothing_does_not_pass() {
    for args in [&["--ops", "0"][..], &["--duration", "0s"]] {
        let r = run(&mut stress(args), QUICK, None);
        assert_eq!(r.code, Some(1), "{args:?}: {r:?}");
        assert!(
            !String::from_utf8_lossy(&r.stdout).contains("PASS"),
            "{args:?}"
        );
        assert!(r.stderr.contains("nothing was verified"), "{}", r.stderr);
    }
}

#[test]
fn bad_worker_counts_are_usage_errors_everywhere() {
    let (_d, p) = tiny();
    fails(&quick(&["-m", s(&p), "--workers", "0"]), 2, "--workers 0");
    let mut c = Command::new(env!("CARGO_BIN_EXE_ds4-stress"));
    let r = run(c.args(["--workers", "0", "--ops", "1"]), QUICK, None);
    refused(&r, "ds4-stress", 2, "workers 0");
}

#[test]
fn decimal_sizes_round_down_to_bytes() {
    let (_d, p) = tiny();
    // docs/PLANNER.md quotes Strix Halo's 107.87 GiB: accepted, floor(107.87 × 2^30) bytes.
    let r = quick(&[
        "plan",
        "-m",
        s(&p),
        "--gpu-mem",
        "107.87GiB",
        "--platform",
        "linux",
        "--json",
    ]);
    ok(&r);
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(out.contains("115824530554"), "{out}");
    // A cache budget with a fraction: GB = GiB as in the C engine, then whole experts.
    let r = quick(&[
        "plan",
        "-m",
        s(&p),
        "--gpu-mem",
        "24GiB",
        "--platform",
        "linux",
        "--ssd-streaming",
        "--ssd-streaming-cache-experts",
        "0.5MB",
        "--json",
    ]);
    ok(&r);
    // Tiny experts are 55,296 B: floor(2^19 / 55,296) = 9.
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(out.contains("\"cache_experts\":9"), "{out}");
    // Still strict where it matters: too many decimals, or a second point.
    for bad in ["1.1234567890123456789GiB", "1.2.3MiB"] {
        fails(
            &quick(&["plan", "-m", s(&p), "--gpu-mem", bad]),
            2,
            "--gpu-mem",
        );
    }
}

/// The numbers of `ds4 --ssd-streaming`'s text line `hit rate R% of L lookups (H hits: A
/// resident + B already loading; M misses, ...`.
fn text_cache_counts(out: &str) -> (f64, u64, u64, u64, u64, u64) {
    let line = out
        .lines()
        .find(|l| l.starts_with("expert cache: "))
        .unwrap_or_else(|| panic!("no cache line in {out}"));
    let after = |key: &str| -> &str {
        &line[line
            .find(key)
            .unwrap_or_else(|| panic!("{key:?} not in {line}"))
            + key.len()..]
    };
    let num = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect()
    };
    let rate: f64 = num(after("hit rate ")).parse().unwrap();
    let lookups = num(after("% of ")).parse().unwrap();
    let hits = num(after("lookups (")).parse().unwrap();
    let resident = num(after("hits: ")).parse().unwrap();
    let loading = num(after("resident + ")).parse().unwrap();
    let misses = num(after("already loading; ")).parse().unwrap();
    (rate, lookups, hits, resident, loading, misses)
}

#[test]
fn text_and_json_count_cache_hits_the_same_way() {
    let (_d, p) = tiny();
    let args = [
        "-m",
        s(&p),
        "-n",
        "24",
        "--ssd-streaming",
        "--ssd-streaming-cache-experts",
        "7",
    ];
    let r = quick(&args);
    ok(&r);
    let (rate, lookups, hits, resident, loading, misses) =
        text_cache_counts(&String::from_utf8_lossy(&r.stdout));
    // A hit is a lookup served without a read: resident, or already being read.
    assert_eq!(hits, resident + loading);
    assert_eq!(lookups, hits + misses);
    assert!(
        (rate - 100.0 * hits as f64 / lookups as f64).abs() < 0.06,
        "{rate}"
    );
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let r = quick(&json_args);
    assert_eq!(r.code, Some(0), "{r:?}");
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let c = &v["cache"];
    let n = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("{k} in {c}"));
    assert_eq!(n("hits"), n("resident_hits") + n("loading_hits"), "{c}");
    assert_eq!(n("lookups"), n("hits") + n("misses"), "{c}");
    assert_eq!(n("resident_hits"), c["stats"]["hits"].as_u64().unwrap());
    assert_eq!(
        n("loading_hits"),
        c["stats"]["dedup_hits"].as_u64().unwrap()
    );
    let hr = c["hit_rate"].as_f64().unwrap();
    assert!(
        (hr - n("hits") as f64 / n("lookups") as f64).abs() < 1e-12,
        "{c}"
    );
    // The same routing: the same lookups (which are hits can move with IO timing).
    assert_eq!(n("lookups"), lookups);
}

#[test]
fn one_demo_model_in_the_cache_directory_for_every_command() {
    let cache = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let with_cache = |args: &[&str]| {
        let mut c = ds4(args);
        c.current_dir(cwd.path())
            .env("XDG_CACHE_HOME", cache.path())
            .env_remove("LOCALAPPDATA");
        run(&mut c, Duration::from_secs(300), None)
    };
    // `ds4 demo` writes the demo model into the cache directory, never into the current one.
    let r = with_cache(&["demo", "--n-tokens", "1"]);
    assert_eq!(r.code, Some(0), "{r:?}");
    let model = cache.path().join("ds4-stream").join("ds4-demo.gguf");
    assert!(
        r.stderr.contains("generating the demo model at") && r.stderr.contains(s(&model)),
        "{}",
        r.stderr
    );
    assert!(model.exists());
    assert!(String::from_utf8_lossy(&r.stdout).contains("all correct"));
    assert_eq!(gen_util::dir_names(cwd.path()), Vec::<String>::new());
    // `ds4 --demo` and `ds4 plan --demo` use that same file: nothing is generated again.
    for args in [
        &["--demo", "-n", "1"][..],
        &["plan", "--demo", "--gpu-mem", "24GiB"],
        &["demo", "--n-tokens", "1", "--seed", "7"],
    ] {
        let r = with_cache(args);
        assert_eq!(r.code, Some(0), "{args:?}: {r:?}");
        assert!(!r.stderr.contains("generating"), "{args:?}: {}", r.stderr);
    }
    // Not the generator's file (here: cut short): written again, not used.
    let len = std::fs::metadata(&model).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&model)
        .unwrap()
        .set_len(len - 1)
        .unwrap();
    let r = with_cache(&["demo", "--n-tokens", "1"]);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(r.stderr.contains("writing it again"), "{}", r.stderr);
    assert_eq!(std::fs::metadata(&model).unwrap().len(), len);
    assert_eq!(gen_util::dir_names(cwd.path()), Vec::<String>::new());
    // An explicit -m that is not there is refused, not generated.
    fails(&with_cache(&["demo", "-m", "nope.gguf"]), 2, "no such file");
}

#[test]
fn texts_say_what_the_programs_do() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    // The spec every MoE module cites ships with the repository, and is cited by that path.
    assert!(root.join("docs/MOE_STACK.md").is_file());
    let mut stack = vec![
        root.join("Cargo.toml"),
        root.join("tools/Cargo.toml"),
        root.join("README.md"),
    ];
    for dir in ["src", "docs", "tests", "benches", "tools"] {
        let mut todo = vec![root.join(dir)];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    todo.push(p);
                } else if p.extension().is_some_and(|x| x == "rs" || x == "md") {
                    stack.push(p);
                }
            }
        }
    }
    for p in stack {
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        for (i, _) in text.match_indices("MOE_STACK.md") {
            let before = &text[..i];
            assert!(
                before.ends_with("docs/")
                    || p.ends_with("docs/STATUS.md")
                    || p.ends_with("cli_contract.rs"),
                "{}: MOE_STACK.md cited without docs/",
                p.display()
            );
        }
    }
    // ds4-bench io --total: a token of the expert pattern is 6 experts of 6.75 MiB.
    let r = run(bench(&["io", "--help"]).stdout(Stdio::piped()), QUICK, None);
    assert!(String::from_utf8_lossy(&r.stdout).contains("40.5 MiB"));
    // ds4 demo has no cache to promise.
    let (_d, p) = tiny();
    let r = quick(&["demo", "-m", s(&p), "--n-tokens", "1"]);
    ok(&r);
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(
        out.contains("no expert cache (every expert streamed") && !out.contains("yet"),
        "{out}"
    );
}

/// A pseudo-terminal: (master, slave). The slave is what the child gets as stdout.
fn pty() -> (OwnedFd, std::fs::File) {
    // SAFETY: posix_openpt/grantpt/unlockpt/ptsname_r on a descriptor we own; the name
    // buffer outlives the call and its size is passed.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(m >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        let master = OwnedFd::from_raw_fd(m);
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
        let name = std::ffi::CStr::from_ptr(name.as_ptr()).to_str().unwrap();
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name)
            .unwrap();
        (master, slave)
    }
}

#[test]
fn cat_refuses_a_terminal_unless_forced() {
    let (_d, p) = tiny();
    let (_master, slave) = pty();
    let r = run(
        &mut ds4(&["cat", s(&p), "token_embd.weight"]),
        QUICK,
        Some(Stdio::from(slave.try_clone().unwrap())),
    );
    let line = fails(&r, 2, "to a terminal");
    assert!(
        line.contains("--force") && line.contains("> FILE"),
        "{line}"
    );
    // --force writes them (16 bytes: the pty's buffer holds them without a reader).
    let r = run(
        &mut ds4(&[
            "cat",
            s(&p),
            "token_embd.weight",
            "--range",
            "0:16",
            "--force",
        ]),
        QUICK,
        Some(Stdio::from(slave)),
    );
    ok(&r);
    // A pipe or a file needs no flag.
    let r = quick(&["cat", s(&p), "token_embd.weight", "--range", "0:16"]);
    ok(&r);
    assert_eq!(r.stdout.len(), 16);
}

/// `--backend` defaults to auto everywhere but `cat` (whose bytes end in host memory), and auto
/// on a machine without a GPU is the host backend with not a word more on stderr.
#[test]
fn backend_defaults_to_auto_and_auto_is_quiet_without_a_gpu() {
    let help = |cmd: &mut Command| {
        let r = run(cmd.stdout(Stdio::piped()), QUICK, None);
        assert_eq!(r.code, Some(0), "{r:?}");
        String::from_utf8_lossy(&r.stdout).into_owned()
    };
    let backend_default = |text: &str| {
        let at = text.find("--backend").expect("--backend in help");
        let rest = &text[at..];
        let end = rest.find("\n  -").unwrap_or(rest.len());
        rest[..end]
            .split("[default: ")
            .nth(1)
            .and_then(|d| d.split(']').next())
            .map(str::to_string)
    };
    for args in [&["--help"][..], &["demo", "--help"], &["plan", "--help"]] {
        let text = help(&mut ds4(args));
        assert_eq!(backend_default(&text).as_deref(), Some("auto"), "{args:?}");
    }
    let text = help(&mut bench(&["io", "--help"]));
    assert_eq!(
        backend_default(&text).as_deref(),
        Some("auto"),
        "ds4-bench io"
    );
    let text = help(&mut ds4(&["cat", "--help"]));
    assert_eq!(backend_default(&text).as_deref(), Some("host"), "cat");
    // The default run on this machine: a clean stderr either way; without a GPU, host.
    let (_d, p) = tiny();
    let r = quick(&["-m", s(&p), "-n", "1", "--json"]);
    ok(&r);
    if !cfg!(any(feature = "cuda", feature = "hip")) {
        let out = String::from_utf8_lossy(&r.stdout);
        assert!(out.contains("\"backend\":\"host\""), "{out}");
    }
}

#[test]
fn host_run_that_cannot_fit_fails_before_reading() {
    // The demo model (540 MiB of experts) in a cache of this test's own; then the resident run
    // under an address-space limit it cannot fit in: exit 1 at once, one line saying how much is
    // needed and available and what to do, instead of reading until the limit kills it.
    let cache = tempfile::tempdir().unwrap();
    let mut first = ds4(&["--demo", "-n", "1"]);
    first.env("XDG_CACHE_HOME", cache.path());
    let r = run(&mut first, Duration::from_secs(300), None);
    assert_eq!(r.code, Some(0), "{r:?}");
    let mut c = ds4(&["--demo", "-n", "1"]);
    c.env("XDG_CACHE_HOME", cache.path());
    let t0 = Instant::now();
    let r = capped(c, 700 << 20);
    let line = fails(&r, 1, "host memory: this run needs");
    assert!(
        line.contains("every routed expert resident (540.00 MiB)"),
        "{line}"
    );
    assert!(
        line.contains("nothing was read") && line.contains("--ssd-streaming"),
        "{line}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t0.elapsed()
    );
}

/// Counts are `-n` / `--n-tokens` everywhere (`ds4 -n`, `ds4 demo`, `ds4-bench cache`);
/// `--tokens` is `ds4`'s list of token ids, and only a hidden old name for the counts.
#[test]
fn token_counts_are_n_tokens_and_tokens_is_an_id_list() {
    let help = |cmd: &mut Command| {
        let r = run(cmd.stdout(Stdio::piped()), QUICK, None);
        assert_eq!(r.code, Some(0), "{r:?}");
        String::from_utf8_lossy(&r.stdout).into_owned()
    };
    for (prog, text) in [
        ("ds4 demo", help(&mut ds4(&["demo", "--help"]))),
        ("ds4-bench cache", help(&mut bench(&["cache", "--help"]))),
    ] {
        assert!(text.contains("-n, --n-tokens <N>"), "{prog}: {text}");
        assert!(!text.contains("--tokens"), "{prog} shows --tokens: {text}");
    }
    let text = help(&mut ds4(&["--help"]));
    assert!(text.contains("--tokens <TOKENS>"), "{text}");
    let (_d, p) = tiny();
    // The count, by its name, -n, and the hidden old name.
    for flag in ["--n-tokens", "-n", "--tokens"] {
        let r = quick(&["demo", "-m", s(&p), flag, "2", "--json"]);
        ok(&r);
        let out = String::from_utf8_lossy(&r.stdout);
        assert!(out.contains("\"tokens\":2"), "{flag}: {out}");
    }
    fails(
        &quick(&["demo", "-m", s(&p), "--n-tokens", "0"]),
        2,
        "--n-tokens",
    );
    let r = run(&mut bench(&["cache", "-n", "0"]), QUICK, None);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(r.stderr.contains("--n-tokens"), "{r:?}");
}
