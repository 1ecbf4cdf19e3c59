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

use super::args::{CaseArg, IoArgs, OnOff, PatternArg};
use super::cache;
use super::engine_case::{EngineBench, EngineRun};
use super::file::{DestPtr, HostDest, TestFile, Verifier};
use super::fio::{self, FioJob};
use super::plan::{Pattern, Plan, EXPERT_BYTES};
use super::report::{self, Mode, Row};
use super::threads::{run_threads, ThreadsCfg};
use super::{baselines, plot, BenchError};
use ds4_stream::units::human_bytes;
use ds4_tools::cli::files::Output;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The fio configurations added to every cold block so that "best fio" is the disk's ceiling:
/// psync with 1, 4 and 18 jobs and libaio at depth 4, 8, 16 and 32, with 4 and 8 MiB blocks
/// (seq) or one expert per IO (expert); those the sweep runs anyway are left out.
fn ceiling_fio(pattern: Pattern, swept_workers: &[usize], swept_chunks: &[u64]) -> Vec<Case> {
    let chunks: &[u64] = match pattern {
        Pattern::Seq => &[4 << 20, 8 << 20],
        Pattern::Expert => &[EXPERT_BYTES],
    };
    let mut v = Vec::new();
    for &chunk in chunks {
        for w in [1, 4, 18] {
            let swept = swept_workers.contains(&w)
                && (pattern == Pattern::Expert || swept_chunks.contains(&chunk));
            if !swept {
                v.push(Case::Fio {
                    workers: w,
                    chunk,
                    aio: None,
                });
            }
        }
        for d in [4, 8, 16, 32] {
            v.push(Case::Fio {
                workers: 1,
                chunk,
                aio: Some(d),
            });
        }
    }
    v
}

/// `ds4 cat`'s path on the plan (seq): per batch, `copy_range` of its one request into a
/// writer that lays the bytes into the destination ring, so the usual verifier checks them.
/// The copy into the ring is the one cost `cat > /dev/null` does not pay.
fn run_cat(
    path: &Path,
    plan: &Plan,
    dest: DestPtr<'_>,
) -> Result<super::threads::RunOut, BenchError> {
    // The shape `ds4 cat` would choose for these bytes now (after the run's cache preparation).
    let shape = ds4_tools::cli::cat::shape_of(path, 0, plan.file_len).map_err(BenchError::Usage)?;
    let engine = ds4_stream::engine::range_copy::open_engine(path, shape)
        .map_err(|e| BenchError::Runtime(ds4_tools::cli::chain(&e)))?;
    let cpu0 = super::cache::cpu_seconds(false);
    let t0 = std::time::Instant::now();
    for batch in &plan.batches {
        for r in batch {
            let mut w = RingWriter {
                dest,
                pos: r.dest_off,
            };
            ds4_stream::engine::range_copy::copy_range(&engine, shape, r.file_off, r.len, &mut w)
                .map_err(|e| match e {
                ds4_stream::engine::range_copy::CopyError::Read(e) => {
                    BenchError::Runtime(ds4_tools::cli::chain(&e))
                }
                ds4_stream::engine::range_copy::CopyError::Write(e) => {
                    BenchError::Runtime(format!("cat case: {e}"))
                }
            })?;
        }
    }
    let elapsed = t0.elapsed();
    let cpu_secs = super::cache::cpu_seconds(false)
        .zip(cpu0)
        .map(|(a, b)| a - b);
    let s = engine.stats();
    let read = s.direct_chunks + s.buffered_chunks;
    Ok(super::threads::RunOut {
        elapsed,
        cpu_secs,
        direct_fraction: (read > 0).then(|| s.direct_chunks as f64 / read as f64),
    })
}

/// Writes a byte stream into the destination from `pos` on (one thread, in order).
struct RingWriter<'d> {
    dest: DestPtr<'d>,
    pos: u64,
}

impl Write for RingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // SAFETY: this writer is the only user of the destination during the cat case (one
        // thread writes the plan's one request per batch, in order), and the slice is dropped
        // before the next write.
        let d = unsafe { self.dest.slice_mut(self.pos, buf.len() as u64) }
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        d.copy_from_slice(buf);
        self.pos += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One configuration to measure.
#[derive(Clone, Debug)]
enum Case {
    /// psync fio with `workers` jobs, or (`aio: Some(depth)`) one libaio job at that depth.
    Fio {
        workers: usize,
        chunk: u64,
        aio: Option<usize>,
    },
    /// `ds4 cat`'s exact path (seq only): its engine, `copy_range` in 4 MiB requests on the
    /// file grid, each `Bytes` written to a sink that copies it into the destination ring.
    Cat,
    Engine {
        host: bool,
        workers: usize,
        chunk: u64,
        direct: bool,
    },
    Threads {
        workers: usize,
        chunk: u64,
        direct: bool,
    },
    CStream,
    Mmap,
    CLoad {
        direct: bool,
    },
    /// Pinned → device copies only (the link's ceiling), through the staged engine's device.
    Copy,
}

impl Case {
    fn name(&self) -> &'static str {
        match self {
            Case::Fio { aio: None, .. } => "fio",
            Case::Fio { aio: Some(_), .. } => "fio-aio",
            Case::Cat => "cat",
            Case::Engine { host: false, .. } => "engine",
            Case::Engine { host: true, .. } => "engine-host",
            Case::Threads { .. } => "io-threads",
            Case::CStream => "c-stream",
            Case::Mmap => "mmap",
            Case::CLoad { .. } => "c-load",
            Case::Copy => "copy",
        }
    }

    /// (workers, chunk, direct) as reported; chunk `u64::MAX` = one read per slice.
    fn params(&self, pattern: Pattern, mode: Mode) -> (usize, u64, bool) {
        match *self {
            Case::Fio {
                workers,
                chunk,
                aio,
            } => (
                aio.unwrap_or(workers),
                if pattern == Pattern::Expert {
                    EXPERT_BYTES
                } else {
                    chunk
                },
                mode == Mode::Cold,
            ),
            Case::Engine {
                workers,
                chunk,
                direct,
                ..
            }
            | Case::Threads {
                workers,
                chunk,
                direct,
            } => (workers, chunk, direct),
            // cat always opens with direct on, but reads cached bytes from the page cache:
            // in hot runs nothing goes unbuffered (direct_fraction shows it).
            // Its readers follow the bytes' residency (`cat::shape_for`): the shape it picks
            // for a cold or a fully cached file here.
            Case::Cat => (
                ds4_stream::engine::range_copy::shape_for(
                    Some(if mode == Mode::Cold { 0.0 } else { 1.0 }),
                    std::thread::available_parallelism().map_or(2, |n| n.get()),
                )
                .workers,
                ds4_stream::engine::range_copy::CHUNK as u64,
                mode == Mode::Cold,
            ),
            Case::CStream => (18, u64::MAX, false),
            Case::Mmap => (1, 0, false),
            Case::CLoad { direct } => (1, baselines::C_LOAD_SLOT_BYTES, direct),
            Case::Copy => (1, super::engine_case::COPY_BYTES as u64, false),
        }
    }
}

/// A configuration of one (pattern, mode) block and what its repetitions measured so far.
struct Slot {
    case: Case,
    m: Measured,
    /// fio only: why it stopped (its rows are dropped, the benchmark goes on).
    skipped: bool,
}

struct Ctx<'a> {
    args: &'a IoArgs,
    file: &'a TestFile,
    verifier: Verifier,
    dest: HostDest,
    /// The engine's destinations: staged (not host-visible) and host-visible.
    engine_staged: Option<EngineBench>,
    engine_host: Option<EngineBench>,
    machine: String,
    rows: Vec<Row>,
    /// Progress over the whole benchmark: runs done (or skipped) of all planned, since when.
    done: usize,
    total: usize,
    started: std::time::Instant,
}

impl Ctx<'_> {
    fn log(&self, msg: &str) {
        if !self.args.quiet {
            eprintln!("{msg}");
        }
    }

    /// "run N of M, T elapsed, ~L left" (the estimate: the mean time per run so far).
    fn progress(&self) -> String {
        let el = self.started.elapsed().as_secs_f64();
        let left = if self.done == 0 {
            0.0
        } else {
            el / self.done as f64 * self.total.saturating_sub(self.done) as f64
        };
        format!(
            "run {} of {}, {:.0} s elapsed, ~{:.0} s left:",
            self.done, self.total, el, left
        )
    }

    /// Makes the cache cold or hot before one repetition; returns (method, residency).
    fn prepare(&self, mode: Mode) -> Result<(String, Option<f64>), BenchError> {
        let path = &self.file.path;
        match mode {
            Mode::Cold => {
                let mut method = cache::drop_pages(path)?;
                let mut res = cache::resident_fraction(path);
                // fadvise cannot drop dirty pages or pages others hold mapped; fall back to the
                // global drop only when it did not work (it slows everyone's builds).
                if res.is_some_and(|r| r > 0.01) && cache::drop_all_caches() {
                    method.push_str("+drop_caches");
                    res = cache::resident_fraction(path);
                }
                Ok((format!("dropped({method})"), res))
            }
            Mode::Hot => {
                let before = cache::resident_fraction(path);
                if before.is_none_or(|r| r < 0.99) {
                    cache::warm(path)?;
                }
                let after = cache::resident_fraction(path);
                if let Some(r) = after.filter(|&r| r < 0.9) {
                    self.log(&format!(
                        "  warning: only {:.0}% of the file stays in the page cache: hot runs are partly cold",
                        r * 100.0
                    ));
                }
                Ok(("warmed".into(), after))
            }
        }
    }

    /// Runs every configuration of one (pattern, mode) block `--reps` times, interleaved:
    /// repetition r runs each configuration once (odd repetitions in reverse order), so noise
    /// that comes and goes (other jobs on a shared machine, the hypervisor's cache) hits every
    /// case alike and the ratios between them stay meaningful.
    fn run_block(&mut self, plan: &Plan, mode: Mode, cases: Vec<Case>) -> Result<(), BenchError> {
        let mut slots: Vec<Slot> = cases
            .into_iter()
            .map(|case| {
                let (w, c, d) = case.params(plan.pattern, mode);
                Slot {
                    m: Measured::new(case.name(), w, c, d),
                    case,
                    skipped: false,
                }
            })
            .collect();
        let reps = self.args.reps;
        for rep in 0..reps {
            let order: Vec<usize> = if rep % 2 == 0 {
                (0..slots.len()).collect()
            } else {
                (0..slots.len()).rev().collect()
            };
            for i in order {
                let slot = &mut slots[i];
                if slot.skipped {
                    continue;
                }
                let outcome = self.run_once(plan, mode, &slot.case, &mut slot.m);
                self.done += 1;
                let progress = self.progress();
                match outcome {
                    Ok(secs) => {
                        let m = &slot.m;
                        self.log(&format!(
                            "  {progress} [{}/{reps}] {:<11} {:<6} {:<4} w={:<3} chunk={:<7} direct={:<3} {:>7.3} GB/s",
                            rep + 1,
                            m.case,
                            plan.pattern.name(),
                            mode.name(),
                            m.workers,
                            report::chunk_text(if m.chunk == u64::MAX { 0 } else { m.chunk }),
                            if m.direct { "on" } else { "off" },
                            plan.bytes as f64 / secs / 1e9,
                        ));
                    }
                    Err(e) if matches!(slot.case, Case::Fio { .. }) => {
                        // fio failing (e.g. no O_DIRECT on this filesystem) costs its rows,
                        // not the benchmark.
                        slot.skipped = true;
                        self.log(&format!("  fio skipped: {}", ds4_tools::cli::chain(&e)));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        for slot in slots {
            if !slot.skipped {
                self.push_row(plan, mode, slot.m);
            }
        }
        Ok(())
    }

    /// One repetition of one configuration: prepare the cache, poison the destination, run,
    /// verify. Returns the timed seconds.
    fn run_once(
        &mut self,
        plan: &Plan,
        mode: Mode,
        case: &Case,
        m: &mut Measured,
    ) -> Result<f64, BenchError> {
        let (method, res) = self.prepare(mode)?;
        m.resident_before = res;
        let path = self.file.path.clone();
        let out = match *case {
            Case::Fio {
                workers,
                chunk,
                aio,
            } => {
                let job = FioJob {
                    pattern: plan.pattern,
                    workers,
                    aio_depth: aio,
                    chunk,
                    total: plan.bytes,
                    file_len: self.file.len,
                    cold: mode == Mode::Cold,
                    runtime_ms: (self.args.fio_secs * 1000.0) as u64,
                };
                let out = fio::run(&job, &path)?;
                // fio's bandwidth as the time our plan's bytes would take, so medians and GB/s
                // are computed as for every other case. No cpu figure: fio is another process.
                let secs = plan.bytes as f64 / out.bw_bytes;
                m.times.push(secs);
                m.cache = if mode == Mode::Cold {
                    format!("{method}+o_direct")
                } else {
                    method
                };
                m.command = Some(out.command);
                return Ok(secs);
            }
            Case::Engine {
                host,
                workers,
                chunk,
                direct,
            } => {
                let slot = if host {
                    &mut self.engine_host
                } else {
                    &mut self.engine_staged
                };
                let eb = match slot.take() {
                    Some(eb) => eb,
                    None => {
                        let eb = EngineBench::new(self.args.backend, host, self.dest.len())?;
                        self.log(&format!("  {} device: {}", eb.name(), eb.device_name()));
                        eb
                    }
                };
                let r = self.run_engine_once(&eb, plan, workers, chunk, direct, m);
                if host {
                    self.engine_host = Some(eb);
                } else {
                    self.engine_staged = Some(eb);
                }
                r?
            }
            Case::Copy => {
                let eb = match self.engine_staged.take() {
                    Some(eb) => eb,
                    None => EngineBench::new(self.args.backend, false, self.dest.len())?,
                };
                let r = eb.copy_ceiling(plan);
                self.engine_staged = Some(eb);
                let mut out = r?;
                out.direct_fraction = None;
                m.times.push(out.elapsed.as_secs_f64());
                m.cache = "none (no file read)".into();
                return Ok(out.elapsed.as_secs_f64());
            }
            Case::Threads {
                workers,
                chunk,
                direct,
            } => {
                self.dest.poison(plan.dest_len);
                let cfg = ThreadsCfg {
                    workers,
                    chunk,
                    direct,
                    bounce: false,
                    drop_after: false,
                };
                run_threads(&path, plan, self.dest.ptr(), cfg)?
            }
            Case::Cat => {
                self.dest.poison(plan.dest_len);
                run_cat(&path, plan, self.dest.ptr())?
            }
            Case::CStream => {
                self.dest.poison(plan.dest_len);
                let cfg = ThreadsCfg {
                    workers: 18,
                    chunk: u64::MAX,
                    direct: false,
                    bounce: true,
                    drop_after: mode == Mode::Cold,
                };
                run_threads(&path, plan, self.dest.ptr(), cfg)?
            }
            // On a GPU, the old path is the one that crashed on Windows ROCm: copies to the
            // device straight from the file mapping (pageable, demand-paged memory).
            Case::Mmap if !self.host_backend() => {
                let eb = match self.engine_staged.take() {
                    Some(eb) => eb,
                    None => EngineBench::new(self.args.backend, false, self.dest.len())?,
                };
                let r = self.run_old_path_once(&eb, plan, m);
                self.engine_staged = Some(eb);
                r?
            }
            Case::Mmap => {
                self.dest.poison(plan.dest_len);
                baselines::run_mmap(&path, plan, self.dest.ptr())?
            }
            Case::CLoad { direct } => {
                self.dest.poison(plan.dest_len);
                baselines::run_c_load(&path, plan, self.dest.ptr(), direct)?
            }
        };
        // Sum over repetitions; None as soon as one run could not measure it.
        m.cpu_secs = if m.times.is_empty() {
            out.cpu_secs
        } else {
            m.cpu_secs.zip(out.cpu_secs).map(|(a, b)| a + b)
        };
        let secs = out.elapsed.as_secs_f64();
        m.times.push(secs);
        m.cache = method;
        m.direct_fraction = out.direct_fraction;
        let verified_on_device = matches!(case, Case::Engine { .. })
            || (matches!(case, Case::Mmap) && !self.host_backend());
        if !verified_on_device {
            if self.args.inject_corruption {
                self.dest.corrupt_one_byte(plan);
            }
            let dest = &self.dest;
            m.verified_bytes +=
                self.verifier
                    .check(plan, case.name(), self.args.seed, &mut |o, b| {
                        dest.read(o, b)
                    })?;
        }
        Ok(secs)
    }

    /// The engine part of [`Self::run_once`] (poison, run, verify through the device).
    fn run_engine_once(
        &self,
        eb: &EngineBench,
        plan: &Plan,
        workers: usize,
        chunk: u64,
        direct: bool,
        m: &mut Measured,
    ) -> Result<super::threads::RunOut, BenchError> {
        let cfg = EngineRun {
            workers,
            chunk,
            direct,
            slots: self.args.slots as usize,
        };
        eb.poison(plan.dest_len)?;
        let (out, stats) = eb.run(&self.file.path, plan, cfg)?;
        m.extra = serde_json::to_value(&stats).ok();
        if self.args.inject_corruption {
            eb.corrupt_one_byte(plan)?;
        }
        m.verified_bytes += self
            .verifier
            .check(plan, eb.name(), self.args.seed, &mut |o, b| eb.read(o, b))?;
        Ok(out)
    }

    /// True when the destination is host memory (`--backend host`).
    fn host_backend(&self) -> bool {
        matches!(
            self.args.backend,
            ds4_stream::device::BackendArg::Kind(ds4_stream::device::BackendKind::Host)
        )
    }

    /// The `mmap` case on a GPU: poison, copy every request from the file mapping to the
    /// device (pageable source), verify through the device.
    fn run_old_path_once(
        &self,
        eb: &EngineBench,
        plan: &Plan,
        m: &mut Measured,
    ) -> Result<super::threads::RunOut, BenchError> {
        eb.poison(plan.dest_len)?;
        let out = eb.old_path(&self.file.path, plan)?;
        if self.args.inject_corruption {
            eb.corrupt_one_byte(plan)?;
        }
        m.verified_bytes += self
            .verifier
            .check(plan, "mmap", self.args.seed, &mut |o, b| eb.read(o, b))?;
        Ok(out)
    }

    fn push_row(&mut self, plan: &Plan, mode: Mode, m: Measured) {
        if m.times.is_empty() {
            return;
        }
        let mut t = m.times.clone();
        t.sort_by(f64::total_cmp);
        let secs = t[t.len() / 2];
        let wall: f64 = t.iter().sum();
        let bytes = plan.bytes;
        self.rows.push(Row {
            machine: self.machine.clone(),
            case: m.case.to_string(),
            pattern: plan.pattern,
            mode,
            cache: m.cache,
            resident_before: m.resident_before,
            workers: m.workers,
            chunk: if m.chunk == u64::MAX { 0 } else { m.chunk },
            direct: m.direct,
            direct_fraction: m.direct_fraction,
            bytes,
            reps: t.len() as u32,
            secs,
            secs_min: t[0],
            secs_max: t[t.len() - 1],
            gbps: bytes as f64 / secs / 1e9,
            gibps: bytes as f64 / secs / (1u64 << 30) as f64,
            cpu_util: m.cpu_secs.filter(|_| wall > 0.0).map(|c| c / wall),
            vs_fio: None,
            vs_fio_best: None,
            fio_best: None,
            vs_mmap: None,
            vs_c: None,
            verified_bytes: m.verified_bytes,
            file: self.file.path.display().to_string(),
            file_len: self.file.len,
            command: m.command,
            extra: m.extra,
        });
    }
}

/// What one configuration measured, before it becomes a [`Row`].
struct Measured {
    case: &'static str,
    workers: usize,
    chunk: u64,
    direct: bool,
    direct_fraction: Option<f64>,
    cache: String,
    resident_before: Option<f64>,
    times: Vec<f64>,
    cpu_secs: Option<f64>,
    verified_bytes: u64,
    command: Option<String>,
    extra: Option<serde_json::Value>,
}

impl Measured {
    fn new(case: &'static str, workers: usize, chunk: u64, direct: bool) -> Self {
        Self {
            case,
            workers,
            chunk,
            direct,
            direct_fraction: None,
            cache: String::new(),
            resident_before: None,
            times: Vec::new(),
            cpu_secs: None,
            verified_bytes: 0,
            command: None,
            extra: None,
        }
    }
}

/// Runs `ds4-bench io`.
pub fn run(mut args: IoArgs) -> Result<(), BenchError> {
    // `auto` (the default) becomes the backend it opens, once: the cases pick their path by
    // backend (host memory or a device), and every row names the one that ran.
    args.backend =
        ds4_stream::device::BackendArg::Kind(args.backend.resolve().map_err(|e| {
            BenchError::Runtime(format!("opening the {} device: {e}", args.backend))
        })?);
    // Everything that can be checked is checked before a multi-GiB file is written.
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
    let outs = OutFiles::create(args.csv.as_ref(), args.plot.as_ref(), args.force)?;
    let patterns: Vec<Pattern> = match args.pattern {
        PatternArg::Seq => vec![Pattern::Seq],
        PatternArg::Expert => vec![Pattern::Expert],
        PatternArg::Both => vec![Pattern::Seq, Pattern::Expert],
    };
    let modes: Vec<Mode> = match (args.cold, args.hot) {
        (true, false) => vec![Mode::Cold],
        (false, true) => vec![Mode::Hot],
        _ => vec![Mode::Cold, Mode::Hot],
    };
    let mut plans = Vec::new();
    for &p in &patterns {
        plans.push(match p {
            Pattern::Seq => Plan::seq(file_len, total, args.dest)?,
            Pattern::Expert => Plan::expert(file_len, total, args.dest, args.seed)?,
        });
    }
    let dest_len = plans.iter().map(|p| p.dest_len).max().unwrap_or(0);
    // The baselines' destination plus one per engine destination kind, all touched up front.
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
    ctx.log(&format!(
        "ds4-bench io: {} ({}), {} per run, dest {}, reps {}, machine {}, fio: {}",
        file.path.display(),
        human_bytes(file.len),
        human_bytes(total),
        human_bytes(dest_len),
        args.reps,
        ctx.machine,
        fio_version
            .as_deref()
            .unwrap_or(if args.cases.contains(&CaseArg::Fio) {
                "not on PATH (skipped)"
            } else {
                "not selected"
            }),
    ));
    let mut workers: Vec<usize> = Vec::new();
    for w in args.workers.iter().map(|&w| w as usize) {
        if !workers.contains(&w) {
            workers.push(w);
        }
    }
    let mut blocks: Vec<(&Plan, Mode, Vec<Case>)> = Vec::new();
    for plan in &plans {
        for &mode in &modes {
            let directs: Vec<bool> = args
                .direct
                .iter()
                .map(|d| *d == OnOff::On)
                .filter(|&d| mode == Mode::Cold || !d)
                .collect();
            // Cases that are compared run next to each other in every repetition: the
            // baselines, then per (workers, chunk): fio, then engine, engine-host and
            // io-threads for each direct setting.
            let has = |c: CaseArg| args.cases.contains(&c);
            let mut cases = Vec::new();
            if has(CaseArg::Mmap) {
                cases.push(Case::Mmap);
            }
            if has(CaseArg::CLoad) {
                cases.push(Case::CLoad {
                    direct: mode == Mode::Cold,
                });
            }
            if has(CaseArg::CStream) && plan.pattern == Pattern::Expert {
                cases.push(Case::CStream);
            }
            if has(CaseArg::Cat) && plan.pattern == Pattern::Seq {
                cases.push(Case::Cat);
            }
            if has(CaseArg::Copy) && mode == Mode::Hot {
                cases.push(Case::Copy);
            }
            if fio_version.is_some() && has(CaseArg::Fio) && mode == Mode::Cold {
                // The disk's ceiling: the best of several fio configurations, not one.
                for c in ceiling_fio(plan.pattern, &workers, &args.chunk) {
                    cases.push(c);
                }
            }
            for &w in &workers {
                if fio_version.is_some() && plan.pattern == Pattern::Expert {
                    cases.push(Case::Fio {
                        workers: w,
                        chunk: EXPERT_BYTES,
                        aio: None,
                    });
                }
                for &c in &args.chunk {
                    if fio_version.is_some() && plan.pattern == Pattern::Seq {
                        cases.push(Case::Fio {
                            workers: w,
                            chunk: c,
                            aio: None,
                        });
                    }
                    for &d in &directs {
                        for (arg, host) in [(CaseArg::Engine, false), (CaseArg::EngineHost, true)] {
                            if has(arg) {
                                cases.push(Case::Engine {
                                    host,
                                    workers: w,
                                    chunk: c,
                                    direct: d,
                                });
                            }
                        }
                        if has(CaseArg::IoThreads) {
                            cases.push(Case::Threads {
                                workers: w,
                                chunk: c,
                                direct: d,
                            });
                        }
                    }
                }
            }
            blocks.push((plan, mode, cases));
        }
    }
    // "N of M" and time left over every run of every block (a quick look can take minutes).
    ctx.total = blocks.iter().map(|b| b.2.len()).sum::<usize>() * args.reps as usize;
    ctx.started = std::time::Instant::now();
    for (plan, mode, cases) in blocks {
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
