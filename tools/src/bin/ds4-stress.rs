//! `ds4-stress`: random reads through the engine against a patterned file, every byte
//! verified, with injected faults, cancellation storms and engine shutdowns under load.
//! Exit 0 when nothing was lost, no byte was wrong and every error is one the fault plan
//! explains; 1 otherwise (or on a runtime error); 2 on a usage error.
//!
//! Examples:
//!   ds4-stress --duration 60s
//!   ds4-stress --ops 20000 --faults all --json
//!   ds4-stress --virtual --file-len 64GiB --duration 10m --faults short=0.1,eintr=0.05

use clap::Parser;
use ds4_stream::engine::EngineConfig;
use ds4_tools::stress::faults::{parse_duration, FaultSpec};
use ds4_tools::stress::{run, FileKind, StressConfig};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Stress the ds4-stream engine: random reads (DS4 expert slices, whole tensors, 1-byte,
/// multi-GiB, across 2 and 4 GiB) from M threads and T async tasks, every byte verified,
/// faults injected, tickets and futures dropped, engines shut down mid-flight.
#[derive(Parser, Debug)]
#[command(name = "ds4-stress", version)]
struct Args {
    /// Run this long (e.g. 30s, 10m). Default 10s when --ops is not given either. Near the
    /// end no operation starts that cannot finish by then at the rate verified so far (the
    /// multi-GiB reads stop first); the file's set-up before and the final checks after add
    /// about a second.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Stop after this many operations (all clients together).
    #[arg(long)]
    ops: Option<u64>,
    /// The sparse test file to create, fill with the pattern and read; it must not exist
    /// (see --force). Removed at the end unless --keep. Default: a temporary file.
    #[arg(long, conflicts_with = "virtual_file")]
    file: Option<PathBuf>,
    /// Let --file overwrite (and afterwards remove) an existing file.
    #[arg(long, requires = "file")]
    force: bool,
    /// Keep the file given with --file after the run.
    #[arg(long, requires = "file")]
    keep: bool,
    /// Read the virtual pattern file instead of a file on disk (any size, no disk).
    #[arg(long = "virtual")]
    virtual_file: bool,
    /// File length (e.g. 6GiB, 64GiB, 6442455133). Default 6 GiB + 4093 bytes.
    #[arg(long, value_parser = parse_size, default_value = "6442455133")]
    file_len: u64,
    /// Blocking client threads.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Async client tasks (tokio, 2 worker threads).
    #[arg(long, default_value_t = 8)]
    tasks: usize,
    /// Reader workers of each engine (each with its own file handle).
    #[arg(long, default_value_t = 18)]
    workers: usize,
    /// Staging slots of each engine.
    #[arg(long, default_value_t = 16)]
    slots: usize,
    /// Staging slot size (a multiple of 4096).
    #[arg(long, value_parser = parse_size, default_value = "4MiB")]
    slot_bytes: u64,
    /// Buffered reads only (no O_DIRECT).
    #[arg(long)]
    no_direct: bool,
    /// Host-visible device memory (every read lands directly; no staging ring).
    #[arg(long)]
    unified: bool,
    /// Faults: none, all, or a list such as short=0.05,eintr=0.02:8,eio=0.001,eio-at=500,
    /// spike=0.01:20ms,latency=50us,open-fail=0.3,slow-copy=200us (later items override);
    /// bitflip=P corrupts reads on purpose (a verifier self-test: the run must fail).
    #[arg(long, default_value = "none", value_parser = FaultSpec::parse)]
    faults: FaultSpec,
    /// Probability that a client drops its ticket or future (now, or after 0-3 ms).
    #[arg(long, default_value_t = 0.05)]
    cancel: f64,
    /// A shutdown storm this often (an extra engine dropped with requests in flight); 0 = none.
    #[arg(long, value_parser = parse_duration, default_value = "3s")]
    storm_every: Duration,
    /// Requests submitted to each storm engine before it is dropped.
    #[arg(long, default_value_t = 2000)]
    storm_requests: usize,
    /// Size of the multi-GiB reads across 2 and 4 GiB; 0 = none.
    #[arg(long, value_parser = parse_size, default_value = "2.25GiB")]
    huge: u64,
    /// Destination bytes all clients may hold at once.
    #[arg(long, value_parser = parse_size, default_value = "3GiB")]
    max_inflight: u64,
    /// Largest single operation (e.g. 16MiB: no whole-tensor or multi-GiB reads, so a run of
    /// many operations finishes sooner); default: no limit.
    #[arg(long, value_parser = parse_size)]
    max_op: Option<u64>,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// A request not complete after this long counts as lost.
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    lost_timeout: Duration,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Print a progress line to stderr every 5 seconds.
    #[arg(long)]
    progress: bool,
}

/// A byte size flag (`4096`, `4KiB`, `6GB`): the library's parser, errors as clap text.
fn parse_size(s: &str) -> Result<u64, String> {
    ds4_stream::units::parse_size(s).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let a = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => return ds4_tools::cli::clap_exit("ds4-stress", &e),
    };
    if let Some(p) = &a.file {
        let what = format!("--file {}", p.display());
        if let Err(e) = ds4_tools::cli::files::check_out(p, a.force, &what) {
            eprintln!("ds4-stress: error: {}", e.message);
            return ExitCode::from(e.code);
        }
        if p.exists() {
            eprintln!(
                "ds4-stress: --force: overwriting {} with the stress pattern{}",
                p.display(),
                if a.keep {
                    ""
                } else {
                    " and removing it after the run"
                }
            );
        }
    }
    let Ok(slot_bytes) = usize::try_from(a.slot_bytes) else {
        eprintln!("ds4-stress: error: slot size {} is too large", a.slot_bytes);
        return ExitCode::from(2);
    };
    let cfg = StressConfig {
        file: if a.virtual_file {
            FileKind::Virtual
        } else {
            FileKind::Sparse {
                path: a.file,
                keep: a.keep,
            }
        },
        file_len: a.file_len,
        duration: a.duration,
        ops: a.ops,
        threads: a.threads,
        tasks: a.tasks,
        engine: EngineConfig {
            workers: a.workers,
            slots: a.slots,
            slot_bytes,
            direct: !a.no_direct,
            ..EngineConfig::default()
        },
        unified: a.unified,
        faults: a.faults,
        cancel: a.cancel,
        storm_every: (!a.storm_every.is_zero()).then_some(a.storm_every),
        storm_requests: a.storm_requests,
        huge_bytes: a.huge,
        max_op_bytes: a.max_op.unwrap_or(u64::MAX),
        max_inflight_bytes: a.max_inflight,
        seed: a.seed,
        lost_timeout: a.lost_timeout,
        progress: a.progress,
    };
    let report = match run(&cfg) {
        Ok(r) => r,
        Err(e) => {
            let code = match e {
                ds4_tools::stress::StressError::Config(_) => 2,
                _ => 1,
            };
            eprintln!("ds4-stress: error: {}", ds4_tools::cli::chain(&e));
            return ExitCode::from(code);
        }
    };
    if a.json {
        let out = serde_json::json!({ "config": cfg, "report": report, "passed": report.passed() });
        println!("{out}");
    } else {
        print!("{}", report.text());
    }
    let failures = report.failures();
    if failures.is_empty() {
        if !a.json {
            println!("PASS: nothing lost, no wrong byte, every error explained");
        }
        ExitCode::SUCCESS
    } else {
        eprintln!("ds4-stress: error: FAIL: {}", failures.join("; "));
        ExitCode::from(1)
    }
}
