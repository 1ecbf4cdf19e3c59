//! `ds4-bench`: throughput benchmarks that compare the engine with the paths it replaces and
//! with the disk's ceiling, on the same file in the same run.
//!
//! `ds4-bench io` (see [`io`]) reads one file with every case (engine, raw `ds4_io` threads, the
//! old mmap path, the C engine's load and streaming paths, fio), sequentially and in expert-shaped
//! batches, cold and hot, and reports GB/s with ratios between cases, as a table, JSON lines, CSV
//! and an SVG plot. Every run's destination is checked against the file: a case that delivers
//! wrong bytes fails the benchmark (exit 1).
//!
//! `ds4-bench cache` (see [`cache_sim`]) simulates the expert cache's policies on a routing trace
//! and reports hit rate against cache size beside the static frequency oracle and Belady.
//!
//! Limits: numbers are only as good as the machine is quiet; ratios within one run are what to
//! compare (../shared/TARGETS.md). Cold runs need Linux (fadvise / drop_caches) or O_DIRECT.

mod args;
mod baselines;
mod cache;
mod cache_sim;
mod engine_case;
mod file;
mod fio;
mod io;
mod io_cases;
mod io_runner;
mod plan;
mod plot;
mod replay;
mod report;
mod size;
mod threads;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Why a benchmark failed. Usage and bad-input errors exit 2, everything else 1.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A flag value that cannot work (exit 2).
    #[error("{0}")]
    Usage(String),
    /// An input file that cannot be used (exit 2).
    #[error("{0}")]
    BadInput(String),
    #[error("{what} {}: offset {offset}, length {len}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        offset: u64,
        len: u64,
        #[source]
        source: std::io::Error,
    },
    /// A case delivered bytes that differ from the file.
    #[error("verification failed: {0}")]
    Verify(String),
    #[error("fio: {0}")]
    Fio(String),
    #[error(transparent)]
    Plan(#[from] plan::PlanError),
    #[error("{0}")]
    Runtime(String),
}

impl BenchError {
    pub fn usage(msg: impl Into<String>) -> Self {
        BenchError::Usage(msg.into())
    }

    /// Exit code: 2 for usage / bad input, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            BenchError::Usage(_) | BenchError::BadInput(_) => 2,
            BenchError::Plan(plan::PlanError::Inconsistent(_)) => 1,
            BenchError::Plan(_) => 2,
            _ => 1,
        }
    }
}

/// Throughput benchmarks for ds4-stream.
#[derive(Parser, Debug)]
#[command(name = "ds4-bench", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// File -> destination throughput: engine vs raw threads vs mmap vs the C engine vs fio.
    Io(args::IoArgs),
    /// Table, CSV and plot again from the JSON rows of an earlier `io --json` run.
    Report(replay::ReportArgs),
    /// Expert-cache hit rate against cache size: every policy, the static frequency oracle and
    /// Belady's optimum, on a recorded routing trace or synthetic ones (no IO).
    Cache(cache_sim::CacheArgs),
}

/// A progress bar on stderr, hidden when `show` is false or stderr is not a terminal.
fn progress_bar(len: u64, msg: &'static str, show: bool) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !show || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{msg} {bar:40} {bytes}/{total_bytes} {bytes_per_sec}",
    ) {
        bar.set_style(style);
    }
    bar.set_message(msg);
    bar
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return ds4_tools::cli::clap_exit("ds4-bench", &e),
    };
    let r = match cli.command {
        Command::Io(a) => io::run(a),
        Command::Report(a) => replay::run(a),
        Command::Cache(a) => cache_sim::run(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ds4-bench: error: {}", ds4_tools::cli::chain(&e));
            ExitCode::from(e.exit_code())
        }
    }
}
