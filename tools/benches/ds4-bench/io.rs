//! `ds4-bench io`: one file, every read path, side by side.
//!
//! For each pattern (seq, expert) and cache mode (cold, hot) it runs, on the same plan:
//! fio (the ceiling), `mmap` (the old path), `c-load` and `c-stream` (the C engine's paths),
//! `io-threads` (raw `ds4_io` threads) and the engine, sweeping workers x chunk x direct for
//! the last two. Each configuration runs `--reps` times (median reported), repetitions
//! interleaved across configurations (see [`Ctx::run_block`]); the cache is prepared before
//! every repetition and its residency recorded; the destination is poisoned before and verified
//! after every repetition. Hot runs skip `direct=on` (O_DIRECT bypasses the cache, so it would
//! be a cold run under another name).

use super::args::{CaseArg, IoArgs, PatternArg};
use super::cache;
use super::file::{HostDest, TestFile};
use super::fio;
use super::io_cases::{self, Block};
use super::io_runner::Ctx;
use super::plan::{Pattern, Plan};
use super::report::{self, Mode, Row};
use super::{plot, BenchError};
use ds4_stream::units::human_bytes;
use ds4_tools::cli::files::Output;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Runs `ds4-bench io`.
pub fn run(mut args: IoArgs) -> Result<(), BenchError> {
    // `auto` (the default) becomes the backend it opens, once: the cases pick their path by
    // backend (host memory or a device), and every row names the one that ran.
    args.backend =
        ds4_stream::device::BackendArg::Kind(args.backend.resolve().map_err(|e| {
            BenchError::Runtime(format!("opening the {} device: {e}", args.backend))
        })?);
    // Everything that can be checked is checked before a multi-GiB file is written.
    let Sizes {
        existing,
        file_len,
        total,
    } = check_sizes(&args)?;
    let outs = OutFiles::create(args.csv.as_ref(), args.plot.as_ref(), args.force)?;
    let plans = make_plans(&args, file_len, total)?;
    let modes: Vec<Mode> = match (args.cold, args.hot) {
        (true, false) => vec![Mode::Cold],
        (false, true) => vec![Mode::Hot],
        _ => vec![Mode::Cold, Mode::Hot],
    };
    let dest_len = plans.iter().map(|p| p.dest_len).max().unwrap_or(0);
    check_memory(&args, dest_len)?;
    let file = match existing {
        Some(f) => f,
        None => {
            if !args.quiet {
                eprintln!(
                    "writing {} test file in {}",
                    human_bytes(file_len),
                    args.dir.display()
                );
            }
            TestFile::create(&args.dir, file_len, !args.quiet)?
        }
    };
    let fio_version = if args.cases.contains(&CaseArg::Fio) {
        fio::version()
    } else {
        None
    };
    let mut ctx = Ctx {
        args: &args,
        file: &file,
        verifier: file.verifier()?,
        dest: HostDest::new(dest_len)?,
        engine_staged: None,
        engine_host: None,
        machine: args.machine.clone().unwrap_or_else(machine_name),
        rows: Vec::new(),
        done: 0,
        total: 0,
        started: std::time::Instant::now(),
    };
    log_start(&ctx, total, dest_len, fio_version.as_deref());
    let workers = unique_workers(&args);
    let blocks = io_cases::blocks(&args, &plans, &modes, &workers, fio_version.is_some());
    // "N of M" and time left over every run of every block (a quick look can take minutes).
    ctx.total = blocks.iter().map(|b| b.cases.len()).sum::<usize>() * args.reps as usize;
    ctx.started = std::time::Instant::now();
    for Block { plan, mode, cases } in blocks {
        ctx.log(&format!("{} / {}:", plan.pattern.name(), mode.name()));
        ctx.run_block(plan, mode, cases)?;
    }
    let mut rows = std::mem::take(&mut ctx.rows);
    report::sort_rows(&mut rows);
    report::compute_ratios(&mut rows);
    let title = format!(
        "ds4-bench io — {} — {} ({}, {} per run)",
        ctx.machine,
        file.path.display(),
        human_bytes(file.len),
        human_bytes(total)
    );
    write_outputs(&args, outs, &rows, &title)
}

/// The benchmark's first line: file, sizes, reps, machine, fio.
fn log_start(ctx: &Ctx<'_>, total: u64, dest_len: u64, fio_version: Option<&str>) {
    let (args, file) = (ctx.args, ctx.file);
    ctx.log(&format!(
        "ds4-bench io: {} ({}), {} per run, dest {}, reps {}, machine {}, fio: {}",
        file.path.display(),
        human_bytes(file.len),
        human_bytes(total),
        human_bytes(dest_len),
        args.reps,
        ctx.machine,
        fio_version.unwrap_or(if args.cases.contains(&CaseArg::Fio) {
            "not on PATH (skipped)"
        } else {
            "not selected"
        }),
    ));
}

/// `--workers`, each value once, in the order given.
fn unique_workers(args: &IoArgs) -> Vec<usize> {
    let mut workers: Vec<usize> = Vec::new();
    for w in args.workers.iter().map(|&w| w as usize) {
        if !workers.contains(&w) {
            workers.push(w);
        }
    }
    workers
}

/// The test file (when `--file` names one), its length and the bytes read per run.
struct Sizes {
    existing: Option<TestFile>,
    file_len: u64,
    total: u64,
}

/// Opens `--file` or checks `--dir`, and checks `--total` against the file's length.
fn check_sizes(args: &IoArgs) -> Result<Sizes, BenchError> {
    let existing = match &args.file {
        Some(p) => Some(TestFile::existing(p)?),
        None => None,
    };
    let file_len = existing
        .as_ref()
        .map_or(args.size.unwrap_or(4 << 30), |f| f.len);
    if existing.is_none() && !args.dir.is_dir() {
        return Err(BenchError::usage(format!(
            "--dir {} is not a directory",
            args.dir.display()
        )));
    }
    let total = args.total.unwrap_or(file_len);
    if total > file_len {
        return Err(BenchError::usage(format!(
            "--total {} is larger than the file ({})",
            human_bytes(total),
            human_bytes(file_len)
        )));
    }
    Ok(Sizes {
        existing,
        file_len,
        total,
    })
}

/// One read plan per `--pattern`.
fn make_plans(args: &IoArgs, file_len: u64, total: u64) -> Result<Vec<Plan>, BenchError> {
    let patterns: Vec<Pattern> = match args.pattern {
        PatternArg::Seq => vec![Pattern::Seq],
        PatternArg::Expert => vec![Pattern::Expert],
        PatternArg::Both => vec![Pattern::Seq, Pattern::Expert],
    };
    let mut plans = Vec::new();
    for &p in &patterns {
        plans.push(match p {
            Pattern::Seq => Plan::seq(file_len, total, args.dest)?,
            Pattern::Expert => Plan::expert(file_len, total, args.dest, args.seed)?,
        });
    }
    Ok(plans)
}

/// The baselines' destination plus one per engine destination kind, all touched up front,
/// must fit in 80% of the available memory.
fn check_memory(args: &IoArgs, dest_len: u64) -> Result<(), BenchError> {
    let copies = 1 + [CaseArg::Engine, CaseArg::EngineHost]
        .iter()
        .filter(|c| args.cases.contains(c))
        .count() as u64;
    if let Some(avail) = cache::available_memory() {
        let need = dest_len.saturating_mul(copies);
        if need > avail / 10 * 8 {
            return Err(BenchError::usage(format!(
                "{copies} destinations of {} ({}) exceed 80% of available memory ({}): lower --dest",
                human_bytes(dest_len),
                human_bytes(need),
                human_bytes(avail)
            )));
        }
    }
    Ok(())
}

fn write_outputs(
    args: &IoArgs,
    outs: OutFiles,
    rows: &[Row],
    title: &str,
) -> Result<(), BenchError> {
    let table = report::table(rows);
    let stdout_err = |e: std::io::Error| -> Result<(), BenchError> {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Ok(())
        } else {
            Err(BenchError::Runtime(format!("writing stdout: {e}")))
        }
    };
    if args.json {
        let j = report::json_lines(rows).map_err(|e| BenchError::Runtime(format!("JSON: {e}")))?;
        if let Err(e) = std::io::stdout().write_all(j.as_bytes()) {
            stdout_err(e)?;
        }
        if !args.quiet {
            eprint!("{table}");
        }
    } else if let Err(e) = std::io::stdout().write_all(table.as_bytes()) {
        stdout_err(e)?;
    }
    outs.write(rows, title)
}

/// A `ds4_tools::cli` failure as a bench error, keeping its exit code.
pub(crate) fn cli_error(e: ds4_tools::cli::CliError) -> BenchError {
    if e.code == 2 {
        BenchError::Usage(e.message)
    } else {
        BenchError::Runtime(e.message)
    }
}

/// The `--csv` and `--plot` outputs, created (under temporary names) before any measurement,
/// so that an existing or unwritable path fails at once; written whole and renamed into place
/// at the end ([`OutFiles::write`]), never a partial file.
pub(crate) struct OutFiles {
    csv: Option<Output>,
    /// The SVG, and the PNG rendered from it for a .png name.
    plot: Option<(Output, Option<PathBuf>)>,
}

impl OutFiles {
    pub(crate) fn create(
        csv: Option<&PathBuf>,
        plot_path: Option<&PathBuf>,
        force: bool,
    ) -> Result<OutFiles, BenchError> {
        let out = |p: &Path, flag: &str| {
            Output::create(p, force, &format!("{flag} {}", p.display())).map_err(cli_error)
        };
        let csv = csv.map(|p| out(p, "--csv")).transpose()?;
        let plot = match plot_path {
            Some(p) if p.extension().is_some_and(|e| e.eq_ignore_ascii_case("png")) => {
                ds4_tools::cli::files::check_out(p, force, &format!("--plot {}", p.display()))
                    .map_err(cli_error)?;
                Some((out(&p.with_extension("svg"), "--plot")?, Some(p.clone())))
            }
            Some(p) => Some((out(p, "--plot")?, None)),
            None => None,
        };
        Ok(OutFiles { csv, plot })
    }

    /// Writes the CSV and the plot (SVG, or SVG + PNG for a .png name) where asked.
    pub(crate) fn write(self, rows: &[Row], title: &str) -> Result<(), BenchError> {
        if let Some(o) = self.csv {
            o.commit(report::csv(rows).as_bytes()).map_err(cli_error)?;
        }
        if let Some((o, png)) = self.plot {
            o.commit(plot::svg(rows, title).as_bytes())
                .map_err(cli_error)?;
            if let Some(png) = png {
                render_png(&png.with_extension("svg"), &png)?;
            }
        }
        Ok(())
    }
}

/// Renders an SVG to PNG with `rsvg-convert` (librsvg2-bin), when installed.
fn render_png(svg: &Path, png: &Path) -> Result<(), BenchError> {
    let st = std::process::Command::new("rsvg-convert")
        .arg("-o")
        .arg(png)
        .arg(svg)
        .status()
        .map_err(|e| {
            BenchError::Runtime(format!(
                "cannot render {} (install librsvg2-bin for rsvg-convert, or ask for .svg): {e}",
                png.display()
            ))
        })?;
    if !st.success() {
        return Err(BenchError::Runtime(format!(
            "rsvg-convert {} exited with {st}",
            svg.display()
        )));
    }
    Ok(())
}

/// `hostname (N cpus)`.
pub fn machine_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_else(|| "unknown".into());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{host} ({cpus} cpus)")
}
