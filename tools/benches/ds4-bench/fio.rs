//! fio with parameters matching a benchmark case: the disk (or page-cache) ceiling.
//!
//! Sequential: `--rw=read --bs=<chunk> --ioengine=psync --numjobs=<workers>`, the run's bytes
//! split into one contiguous region per job (`--offset_increment`). Expert-shaped:
//! `--rw=randread --bs=7077888` over the file's whole experts (fio aligns random offsets to the
//! block size, so every read is exactly one expert, laid out from offset 0 as in our plan), the
//! run's bytes split over the jobs. fio reads each expert as ONE 6.75 MiB IO where the engine
//! reads 3 slices, and fio has no per-token barrier: this is the more favourable ceiling.
//! Cold: `--direct=1`. Hot: `--direct=0 --invalidate=0` on a warmed file (page-cache ceiling).
//! Always `--readonly --allow_file_create=0`: fio must never write or lay out the file.
//! Always `--time_based --runtime=T` (each job loops over its share until T): without it, short
//! runs on few cores let jobs run one after another, and fio's group bandwidth (bytes / longest
//! job) then adds up per-job rates that never overlapped (we saw "28 GB/s" from the page cache
//! on 2 cores).
//! The result is `jobs[0].read.bw_bytes` of `--output-format=json --group_reporting`.
//! Besides the psync jobs that match a case's workers, cold runs add a ceiling set (see
//! `io.rs`): psync with 1, 4 and 18 jobs and libaio at depth 4-32, 4 and 8 MiB blocks, so the
//! "best fio" a ratio is taken against is the disk's ceiling, not one fio configuration.

use super::plan::{Pattern, EXPERT_BYTES};
use super::BenchError;
use std::path::Path;
use std::process::Command;

/// fio's version string when `fio` is on PATH.
pub fn version() -> Option<String> {
    let out = Command::new("fio").arg("--version").output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// One fio job description.
#[derive(Clone, Debug)]
pub struct FioJob {
    pub pattern: Pattern,
    /// psync jobs (`--numjobs`); with `aio_depth` one libaio job instead.
    pub workers: usize,
    /// `Some(d)`: one job with `--ioengine=libaio --iodepth=d` (asynchronous, d reads in
    /// flight), else `workers` psync jobs.
    pub aio_depth: Option<usize>,
    /// Block size for `seq` (ignored for `expert`: one expert per IO).
    pub chunk: u64,
    /// Bytes to read in all, split over the jobs.
    pub total: u64,
    pub file_len: u64,
    /// Cold (`--direct=1`) or hot (`--direct=0 --invalidate=0`).
    pub cold: bool,
    /// Run time (`--time_based --runtime`), milliseconds.
    pub runtime_ms: u64,
}

/// What fio reported.
#[derive(Clone, Debug)]
pub struct FioOut {
    pub bw_bytes: f64,
    pub command: String,
}

/// The fio arguments for `job` on `path` (without the program name).
pub fn args(job: &FioJob, path: &Path) -> Result<Vec<String>, BenchError> {
    let w = match job.aio_depth {
        Some(_) => 1,
        None => job.workers.max(1) as u64,
    };
    let engine = match job.aio_depth {
        Some(d) => vec![
            "--ioengine=libaio".to_string(),
            format!("--iodepth={}", d.max(1)),
        ],
        None => vec!["--ioengine=psync".to_string()],
    };
    let mut a = vec![
        format!("--name=ds4-{}", job.pattern.name()),
        format!("--filename={}", path.display()),
    ];
    a.extend(engine);
    a.extend([
        format!("--numjobs={w}"),
        "--group_reporting".into(),
        "--output-format=json".into(),
        "--readonly".into(),
        "--allow_file_create=0".into(),
        "--thread".into(),
        "--time_based".into(),
        format!("--runtime={}ms", job.runtime_ms.max(100)),
    ]);
    if job.cold {
        a.push("--direct=1".into());
    } else {
        a.push("--direct=0".into());
        a.push("--invalidate=0".into());
    }
    match job.pattern {
        Pattern::Seq => {
            let bs = job.chunk.max(4096);
            let per = (job.total.min(job.file_len) / w) / bs * bs;
            if per == 0 {
                return Err(BenchError::usage(format!(
                    "fio: {} bytes cannot be split into {w} jobs of {bs}-byte blocks",
                    job.total
                )));
            }
            a.extend([
                "--rw=read".into(),
                format!("--bs={bs}"),
                format!("--size={per}"),
                format!("--offset_increment={per}"),
            ]);
        }
        Pattern::Expert => {
            let experts = job.file_len / EXPERT_BYTES;
            let per = (job.total.min(job.file_len) / EXPERT_BYTES / w) * EXPERT_BYTES;
            if experts == 0 || per == 0 {
                return Err(BenchError::usage(format!(
                    "fio: {} bytes cannot be split into {w} jobs of whole experts",
                    job.total
                )));
            }
            a.extend([
                "--rw=randread".into(),
                format!("--bs={EXPERT_BYTES}"),
                format!("--size={}", experts * EXPERT_BYTES),
                format!("--io_size={per}"),
                "--randrepeat=0".into(),
            ]);
        }
    }
    Ok(a)
}

/// Runs fio and parses its JSON report.
pub fn run(job: &FioJob, path: &Path) -> Result<FioOut, BenchError> {
    let a = args(job, path)?;
    let command = format!("fio {}", a.join(" "));
    let out = Command::new("fio")
        .args(&a)
        .output()
        .map_err(|e| BenchError::Fio(format!("cannot run `{command}`: {e}")))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(BenchError::Fio(format!(
            "`{command}` exited with {}: {}",
            out.status,
            err.lines()
                .chain(stdout.lines())
                .next()
                .unwrap_or("")
                .trim()
        )));
    }
    // io_bytes is parsed (a report without it is malformed) but the ratio uses bandwidth only.
    let (bw_bytes, _io_bytes) =
        parse(&stdout).map_err(|why| BenchError::Fio(format!("`{command}`: {why}")))?;
    Ok(FioOut { bw_bytes, command })
}

/// `(bw_bytes, io_bytes)` from fio's JSON output (text before the first `{` is skipped: fio
/// prints warnings there).
pub fn parse(stdout: &str) -> Result<(f64, u64), String> {
    let start = stdout.find('{').ok_or("no JSON in fio output")?;
    let v: serde_json::Value =
        serde_json::from_str(&stdout[start..]).map_err(|e| format!("bad fio JSON: {e}"))?;
    let job = v
        .get("jobs")
        .and_then(|j| j.get(0))
        .ok_or("fio JSON has no jobs[0]")?;
    let err = job.get("error").and_then(|e| e.as_i64()).unwrap_or(0);
    if err != 0 {
        return Err(format!("fio job error {err}"));
    }
    let read = job.get("read").ok_or("fio JSON has no jobs[0].read")?;
    let bw = read
        .get("bw_bytes")
        .and_then(|b| b.as_f64())
        .ok_or("fio JSON has no read.bw_bytes")?;
    let io = read.get("io_bytes").and_then(|b| b.as_u64()).unwrap_or(0);
    if bw <= 0.0 || io == 0 {
        return Err("fio read nothing".into());
    }
    Ok((bw, io))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seq_args_split_regions() {
        let j = FioJob {
            pattern: Pattern::Seq,
            workers: 4,
            aio_depth: None,
            chunk: 4 << 20,
            total: 1 << 30,
            file_len: 1 << 30,
            cold: true,
            runtime_ms: 2000,
        };
        let a = args(&j, Path::new("/f")).unwrap();
        assert!(a.contains(&"--size=268435456".to_string()));
        assert!(a.contains(&"--offset_increment=268435456".to_string()));
        assert!(a.contains(&"--direct=1".to_string()));
        assert!(a.contains(&"--readonly".to_string()));
        assert!(a.contains(&"--ioengine=psync".to_string()));
        // libaio: one job, the depth in flight, the whole run's bytes in its region.
        let a = args(
            &FioJob {
                aio_depth: Some(8),
                ..j
            },
            Path::new("/f"),
        )
        .unwrap();
        assert!(a.contains(&"--ioengine=libaio".to_string()));
        assert!(a.contains(&"--iodepth=8".to_string()));
        assert!(a.contains(&"--numjobs=1".to_string()));
        assert!(a.contains(&"--size=1073741824".to_string()));
    }

    #[test]
    fn expert_args_whole_experts() {
        let j = FioJob {
            pattern: Pattern::Expert,
            workers: 3,
            aio_depth: None,
            chunk: 1,
            total: 100 * EXPERT_BYTES,
            file_len: 100 * EXPERT_BYTES + 5,
            cold: false,
            runtime_ms: 50,
        };
        let a = args(&j, Path::new("/f")).unwrap();
        assert!(a.contains(&format!("--io_size={}", 33 * EXPERT_BYTES)));
        assert!(a.contains(&format!("--size={}", 100 * EXPERT_BYTES)));
        assert!(a.contains(&"--invalidate=0".to_string()));
        assert!(a.contains(&"--runtime=100ms".to_string()));
    }

    #[test]
    fn parse_json() {
        let s = "fio: warning\n{\"jobs\":[{\"error\":0,\"read\":{\"bw_bytes\":1048576000,\"io_bytes\":67108864}}]}";
        assert_eq!(parse(s), Ok((1048576000.0, 67108864)));
        assert!(parse("{\"jobs\":[{\"error\":5,\"read\":{}}]}").is_err());
        assert!(parse("garbage").is_err());
        assert!(parse("{\"jobs\":[]}").is_err());
    }
}
