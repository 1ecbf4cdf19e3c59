//! `ds4-bench io`'s measuring loop: one (pattern, mode) block's repetitions, each case's run,
//! its verification, and the rows they become.

use super::args::IoArgs;
use super::cache;
use super::engine_case::{EngineBench, EngineRun};
use super::file::{HostDest, TestFile, Verifier};
use super::fio::{self, FioJob};
use super::io_cases::{run_cat, Case};
use super::plan::Plan;
use super::report::{self, Mode, Row};
use super::threads::{run_threads, ThreadsCfg};
use super::{baselines, BenchError};
use ds4_stream::engine::DEFAULT_COPY_PIECE;

/// A configuration of one (pattern, mode) block and what its repetitions measured so far.
pub(super) struct Slot {
    case: Case,
    m: Measured,
    /// fio only: why it stopped (its rows are dropped, the benchmark goes on).
    skipped: bool,
}

pub(super) struct Ctx<'a> {
    pub(super) args: &'a IoArgs,
    pub(super) file: &'a TestFile,
    pub(super) verifier: Verifier,
    pub(super) dest: HostDest,
    /// The engine's destinations: staged (not host-visible) and host-visible.
    pub(super) engine_staged: Option<EngineBench>,
    pub(super) engine_host: Option<EngineBench>,
    pub(super) machine: String,
    pub(super) rows: Vec<Row>,
    /// Progress over the whole benchmark: runs done (or skipped) of all planned, since when.
    pub(super) done: usize,
    pub(super) total: usize,
    pub(super) started: std::time::Instant,
}

impl Ctx<'_> {
    pub(super) fn log(&self, msg: &str) {
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
    pub(super) fn run_block(
        &mut self,
        plan: &Plan,
        mode: Mode,
        cases: Vec<Case>,
    ) -> Result<(), BenchError> {
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
                let job = self.fio_job(plan, mode, workers, chunk, aio);
                return self.fio_once(&job, plan, mode, method, m);
            }
            Case::Engine {
                host,
                workers,
                chunk,
                direct,
            } => self.engine_case_once(host, plan, workers, chunk, direct, m)?,
            Case::Copy => return self.copy_once(plan, m),
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
                let (out, depth) = run_cat(&path, plan, self.dest.ptr())?;
                m.extra = Some(depth);
                out
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
                let eb = self.take_staged()?;
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
        self.record(plan, case, out, method, m)
    }

    /// The fio job of one fio case on `plan`.
    fn fio_job(
        &self,
        plan: &Plan,
        mode: Mode,
        workers: usize,
        chunk: u64,
        aio: Option<usize>,
    ) -> FioJob {
        FioJob {
            pattern: plan.pattern,
            workers,
            aio_depth: aio,
            chunk,
            total: plan.bytes,
            file_len: self.file.len,
            cold: mode == Mode::Cold,
            runtime_ms: (self.args.fio_secs * 1000.0) as u64,
        }
    }

    /// fio's part of [`Self::run_once`]: its bandwidth as the time our plan's bytes would
    /// take, so medians and GB/s are computed as for every other case. No cpu figure: fio is
    /// another process.
    fn fio_once(
        &self,
        job: &FioJob,
        plan: &Plan,
        mode: Mode,
        method: String,
        m: &mut Measured,
    ) -> Result<f64, BenchError> {
        let out = fio::run(job, &self.file.path)?;
        let secs = plan.bytes as f64 / out.bw_bytes;
        m.times.push(secs);
        m.cache = if mode == Mode::Cold {
            format!("{method}+o_direct")
        } else {
            method
        };
        m.command = Some(out.command);
        Ok(secs)
    }

    /// The staged engine destination, opened on first use.
    fn take_staged(&mut self) -> Result<EngineBench, BenchError> {
        match self.engine_staged.take() {
            Some(eb) => Ok(eb),
            None => EngineBench::new(self.args.backend, false, self.dest.len()),
        }
    }

    /// An engine case: its destination (staged or host-visible, opened on first use and kept
    /// for the next repetition), then [`Self::run_engine_once`].
    fn engine_case_once(
        &mut self,
        host: bool,
        plan: &Plan,
        workers: usize,
        chunk: u64,
        direct: bool,
        m: &mut Measured,
    ) -> Result<super::threads::RunOut, BenchError> {
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
        r
    }

    /// The copy ceiling (no file read): host-to-device copies of the plan's bytes.
    fn copy_once(&mut self, plan: &Plan, m: &mut Measured) -> Result<f64, BenchError> {
        let eb = self.take_staged()?;
        let r = eb.copy_ceiling(plan);
        self.engine_staged = Some(eb);
        let mut out = r?;
        out.direct_fraction = None;
        m.times.push(out.elapsed.as_secs_f64());
        m.cache = "none (no file read)".into();
        Ok(out.elapsed.as_secs_f64())
    }

    /// Records one timed run in `m` and verifies the host destination (cases verified through
    /// the device did that already). Returns the timed seconds.
    fn record(
        &mut self,
        plan: &Plan,
        case: &Case,
        out: super::threads::RunOut,
        method: String,
        m: &mut Measured,
    ) -> Result<f64, BenchError> {
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
            copy_piece: self
                .args
                .copy_piece
                .map_or(DEFAULT_COPY_PIECE, |p| p as usize),
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
pub(super) struct Measured {
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
