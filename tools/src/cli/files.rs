//! The files the programs (`ds4`, `ds4-bench`, `ds4-stress`) create, and the rules they keep:
//! a program writes or deletes only files it created, never leaves a partial or temporary file
//! behind, and finds out that an output cannot be written before the work, not after it.
//!
//! - [`check_out`]: an existing output is refused (exit 2) unless the user said `--force`; a
//!   directory, device or FIFO is never replaced, `--force` or not.
//! - [`Output`]: an output named by a flag (`--dump-hidden`, `--csv`, ...) is created as
//!   `OUT.tmp-PID` before the work (so an unwritable path fails at once), filled at the end and
//!   renamed into place: OUT is either absent or complete.
//! - [`Temp`]: every temporary file is registered while it lives; SIGINT, SIGTERM and SIGHUP
//!   (Ctrl-C / close on Windows) remove the registered files and exit 130. The handler is
//!   installed by the first registration, so a run that creates no file keeps the default
//!   signal behaviour.
//! - [`sweep_stale`]: temporary files of our own naming whose process is gone (a `kill -9`, a
//!   power loss) are removed by the next run that would create one in the same place.
//!
//! Limits: the registry is process-global because a signal is; SIGKILL cannot be caught (the
//! next run's sweep removes what it left). On Windows an open file cannot be removed by the
//! handler (its writer holds it) and process liveness is not probed, so nothing is swept there.

use super::{CliError, CliResult};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once, PoisonError};

/// Temporary files this process created and has not finished with (see the module docs for
/// why this is a global).
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static HANDLER: Once = Once::new();

/// Exit status after an interrupt (128 + SIGINT, the shell's convention).
pub const INTERRUPTED: i32 = 130;

fn install_handler() {
    HANDLER.call_once(|| {
        // An error means another handler is already installed (none in these programs): then
        // the signal's default action applies and the next run's sweep cleans up.
        let _ = ctrlc::set_handler(|| {
            // Held until exit: a Temp dropped meanwhile (a rename racing the signal) waits.
            let live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
            let mut removed = 0;
            for p in live.iter() {
                if std::fs::remove_file(p).is_ok() {
                    removed += 1;
                }
            }
            let _ = writeln!(
                std::io::stderr(),
                "interrupted: removed {removed} temporary file{}",
                if removed == 1 { "" } else { "s" }
            );
            std::process::exit(INTERRUPTED);
        });
    });
}

/// A temporary file of ours: registered for removal on interrupt while it lives, removed when
/// dropped unless [`Temp::keep`] was called (it was renamed into place, or is kept on purpose).
#[derive(Debug)]
pub struct Temp {
    path: PathBuf,
    armed: bool,
}

impl Temp {
    /// Registers `path` (before the caller creates the file, so that no signal can fall between
    /// the creation and the registration).
    pub fn register(path: PathBuf) -> Temp {
        install_handler();
        LIVE.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(path.clone());
        Temp { path, armed: true }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// No longer ours to remove: unregisters without removing.
    pub fn keep(mut self) {
        self.armed = false;
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let mut live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
        if self.armed {
            let _ = std::fs::remove_file(&self.path);
        }
        if let Some(i) = live.iter().position(|p| *p == self.path) {
            live.swap_remove(i);
        }
    }
}

/// Whether process `pid` may still be running (true when unsure: a file is never swept from
/// under a live process).
pub fn pid_alive(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(p) = libc::pid_t::try_from(pid) else {
            return true;
        };
        if p <= 0 {
            return true;
        }
        // SAFETY: signal 0 sends nothing; kill only checks that the process exists.
        let r = unsafe { libc::kill(p, 0) };
        r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

/// Removes the regular files in `dir` whose names `pid_of` recognises as ours (returning the
/// PID in the name) when that process is gone and is not this one. Returns what it removed.
pub fn sweep_stale(dir: &Path, pid_of: impl Fn(&str) -> Option<u32>) -> Vec<PathBuf> {
    let me = std::process::id();
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return removed;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(&pid_of) else {
            continue;
        };
        if pid == me || pid_alive(pid) || !e.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        if std::fs::remove_file(e.path()).is_ok() {
            removed.push(e.path());
        }
    }
    removed
}

/// The PID of `name` when it is `{prefix}{PID}{sep}...` (`sep` = None: the PID ends the name).
pub fn pid_after(name: &str, prefix: &str, sep: Option<char>) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    let digits = match sep {
        Some(c) => rest.split_once(c)?.0,
        None => rest,
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `OUT.tmp-PID`, beside OUT (so the rename stays on one file system): the temporary name of
/// every output (the generator's too).
pub fn tmp_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp-{}", std::process::id()));
    out.with_file_name(name)
}

/// Sweeps stale `OUT.tmp-PID` files of OUT (see [`sweep_stale`]).
pub fn sweep_stale_tmp(out: &Path) -> Vec<PathBuf> {
    let Some(name) = out.file_name().and_then(|n| n.to_str()) else {
        return Vec::new();
    };
    let prefix = format!("{name}.tmp-");
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    sweep_stale(dir, |n| pid_after(n, &prefix, None))
}

/// Refuses, before any work, an output path the final rename would fail on or must not
/// replace: no file name (`dir/`, `..`), an existing directory, device or FIFO (as root a
/// rename onto `/dev/null` would replace the device node), or an existing file without
/// `force`. `what` names the output in messages (`--csv io.csv`, or the path alone).
pub fn check_out(out: &Path, force: bool, what: &str) -> CliResult {
    let s = out.as_os_str().to_string_lossy();
    if out.file_name().is_none() || s.ends_with('/') || s.ends_with(std::path::MAIN_SEPARATOR) {
        return Err(CliError::bad_input(format!("{what} is not a file path")));
    }
    match std::fs::metadata(out) {
        Ok(m) if !m.is_file() => Err(CliError::bad_input(format!(
            "{what} exists and is not a regular file (directory, device or FIFO): refusing to \
             replace it"
        ))),
        Ok(_) if !force => Err(CliError::bad_input(format!(
            "{what} exists (use --force to overwrite)"
        ))),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        // E.g. a path through a regular file (`file.gguf/x.gguf`): ENOTDIR.
        Err(e) => Err(CliError::bad_input(format!("cannot write {what}: {e}"))),
    }
}

/// An output file named by a flag: checked and created under its temporary name before the
/// work ([`Output::create`]), written whole and renamed into place after it
/// ([`Output::commit`]). Dropped without a commit (an error, a panic), it leaves nothing.
#[derive(Debug)]
pub struct Output {
    out: PathBuf,
    what: String,
    tmp: Temp,
    file: std::fs::File,
}

impl Output {
    /// Checks `out` ([`check_out`]), sweeps its stale temporary files, and creates
    /// `OUT.tmp-PID`. An existing file without `force` is bad input (exit 2); a path that
    /// cannot be created (no such directory, read-only) is a runtime error (exit 1).
    pub fn create(out: &Path, force: bool, what: &str) -> Result<Output, CliError> {
        check_out(out, force, what)?;
        sweep_stale_tmp(out);
        let tmp = Temp::register(tmp_path(out));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(tmp.path())
            .map_err(|e| CliError::runtime(format!("cannot write {what}: {e}")))?;
        Ok(Output {
            out: out.to_path_buf(),
            what: what.to_string(),
            tmp,
            file,
        })
    }

    /// Writes `bytes`, syncs and renames the file into place.
    pub fn commit(mut self, bytes: &[u8]) -> CliResult {
        let what = &self.what;
        self.file
            .write_all(bytes)
            .and_then(|()| self.file.sync_all())
            .map_err(|e| CliError::runtime(format!("writing {what}: {e}")))?;
        std::fs::rename(self.tmp.path(), &self.out).map_err(|e| {
            CliError::runtime(format!(
                "renaming {} to {what}: {e}",
                self.tmp.path().display()
            ))
        })?;
        self.tmp.keep();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_after_reads_only_our_names() {
        assert_eq!(pid_after("m.gguf.tmp-123", "m.gguf.tmp-", None), Some(123));
        assert_eq!(pid_after("m.gguf.tmp-12x", "m.gguf.tmp-", None), None);
        assert_eq!(pid_after("m.gguf.tmp-", "m.gguf.tmp-", None), None);
        assert_eq!(pid_after("n.gguf.tmp-1", "m.gguf.tmp-", None), None);
        assert_eq!(
            pid_after("ds4-bench-77-00ff.bin", "ds4-bench-", Some('-')),
            Some(77)
        );
        assert_eq!(pid_after("ds4-bench-77.bin", "ds4-bench-", Some('-')), None);
    }

    #[cfg(unix)]
    #[test]
    fn sweep_removes_files_of_dead_processes_only() {
        let dir = tempfile::tempdir().unwrap();
        // A child that has exited and been reaped: its PID is free (reuse within this test
        // is possible but would only keep the file, the safe direction).
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let dead = c.id();
        c.wait().unwrap();
        let me = std::process::id();
        let names = [
            format!("m.gguf.tmp-{dead}"),
            format!("m.gguf.tmp-{me}"),
            "m.gguf.tmp-1".to_string(), // init: alive
            format!("other.tmp-{dead}"),
        ];
        for n in &names {
            std::fs::write(dir.path().join(n), b"x").unwrap();
        }
        let removed = sweep_stale_tmp(&dir.path().join("m.gguf"));
        let left: Vec<String> = {
            let mut v: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            v.sort();
            v
        };
        if pid_alive(dead) {
            return; // reused already: nothing to assert
        }
        assert_eq!(removed, vec![dir.path().join(&names[0])]);
        let mut want = names[1..].to_vec();
        want.sort();
        assert_eq!(left, want);
    }

    #[test]
    fn output_is_absent_or_complete() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("o.bin");
        let o = Output::create(&out, false, "o.bin").unwrap();
        assert!(!out.exists() && tmp_path(&out).exists());
        drop(o);
        assert!(!tmp_path(&out).exists(), "a dropped output leaves nothing");
        Output::create(&out, false, "o.bin")
            .unwrap()
            .commit(b"abc")
            .unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"abc");
        assert!(!tmp_path(&out).exists());
        let e = Output::create(&out, false, "o.bin").unwrap_err();
        assert_eq!(e.code, 2);
        assert!(e.message.contains("--force"), "{}", e.message);
        Output::create(&out, true, "o.bin")
            .unwrap()
            .commit(b"d")
            .unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"d");
        let live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(!live.contains(&tmp_path(&out)), "unregistered");
    }
}
