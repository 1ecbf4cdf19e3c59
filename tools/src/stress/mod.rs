//! Stress, fault and fuzz support: the engine of `ds4-stress` (random reads through the engine
//! against patterned files, every byte verified, faults injected through `ds4_io::fault`,
//! cancellation and shutdown storms), a device wrapper that counts staging bytes
//! (resource-leak checks), and the checks behind the fuzz targets.
//!
//! Why in the library and not in tests only: the `ds4-stress` binary, the fuzz crate and the
//! integration tests all drive the same code, so a CI stress run, a fuzz crash replay and a
//! long manual run check the same properties.
//!
//! A run ([`run`]): make the file (a sparse file with pattern regions and holes, or a virtual
//! pattern file of any size), start the main engine on a fault-injecting source (open
//! failures may make a start fail: that is counted and retried), run M blocking clients and T
//! tokio tasks until the duration or op count is reached, and meanwhile a storm thread that
//! starts extra engines, fills them with requests and drops them mid-flight. Then wait for
//! every request the engine accepted to complete (`lost` otherwise), drop everything and
//! compare fds and pinned bytes with the start. Limits: one device (the host backend, discrete
//! emulation unless `unified`); latencies are the client's view (submit to verified).

pub mod client;
pub mod content;
pub mod faults;
pub mod fuzz;
pub mod report;
mod storm;

use client::Ctx;
use content::Expect;
use ds4_io::fault::FaultySource;
use ds4_io::pattern::{PatternSource, FILE_SEED};
use ds4_io::{FileSource, OpenConfig, Source};
use ds4_stream::device::testing::{self as counting, CountingDevice};
use ds4_stream::device::{Device, HostConfig, HostDevice};
use ds4_stream::engine::{Engine, EngineConfig, EngineError};
use ds4_stream::errors::chain;
use faults::{classify, EioLog, ErrorKind, FaultSpec, LoggedSource};
use report::{Injected, Report, Resources, Tally};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Which file the run reads.
#[derive(Clone, Debug, serde::Serialize)]
pub enum FileKind {
    /// A real sparse file (pattern regions, holes elsewhere) at `path`, or a temporary file
    /// when `None`. Written at start; removed at the end unless `keep`.
    Sparse { path: Option<PathBuf>, keep: bool },
    /// The virtual pattern file (no disk; any length).
    Virtual,
}

/// Settings of a stress run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StressConfig {
    pub file: FileKind,
    pub file_len: u64,
    /// Stop after this long (when neither limit is given: 10 s).
    pub duration: Option<Duration>,
    /// Stop after this many operations in total.
    pub ops: Option<u64>,
    /// Blocking client threads.
    pub threads: usize,
    /// Async clients (tokio tasks on a 2-thread runtime).
    pub tasks: usize,
    pub engine: EngineConfig,
    /// Device memory host-visible (reads land directly) instead of the discrete emulation
    /// (device destinations go through the staging ring and the copy thread).
    pub unified: bool,
    pub faults: FaultSpec,
    /// Probability that a client cancels an operation (drops its ticket or future).
    pub cancel: f64,
    /// A shutdown storm this often (none when `None`).
    pub storm_every: Option<Duration>,
    /// Requests submitted to a storm engine before it is dropped.
    pub storm_requests: usize,
    /// Size of the multi-GiB reads (0: none).
    pub huge_bytes: u64,
    /// Largest operation (bytes read by one request); larger draws are drawn again. For runs
    /// that count operations (a million verified reads) rather than bytes.
    pub max_op_bytes: u64,
    /// Bytes of destinations all clients may hold at once.
    pub max_inflight_bytes: u64,
    pub seed: u64,
    /// A request not complete after this long counts as lost.
    pub lost_timeout: Duration,
    /// Print a progress line to stderr every few seconds.
    pub progress: bool,
}

impl Default for StressConfig {
    fn default() -> Self {
        Self {
            file: FileKind::Sparse {
                path: None,
                keep: false,
            },
            file_len: (6 << 30) + 4093,
            duration: None,
            ops: None,
            threads: 4,
            tasks: 8,
            engine: EngineConfig {
                slots: 16,
                ..EngineConfig::default()
            },
            unified: false,
            faults: FaultSpec::default(),
            cancel: 0.05,
            storm_every: Some(Duration::from_secs(3)),
            storm_requests: 2000,
            huge_bytes: (9 << 30) / 4,
            max_op_bytes: u64::MAX,
            max_inflight_bytes: 3 << 30,
            seed: 1,
            lost_timeout: Duration::from_secs(60),
            progress: false,
        }
    }
}

/// Errors that stop a run before it produces a report.
#[derive(Debug, thiserror::Error)]
pub enum StressError {
    #[error("invalid stress configuration: {0}")]
    Config(String),
    #[error("writing the stress file {}", .path.display())]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the main engine did not start")]
    Engine(#[source] EngineError),
    #[error("cannot start the async runtime or a client thread")]
    Runtime(#[source] std::io::Error),
    #[error("the host device did not start")]
    Device(#[source] ds4_stream::device::DeviceError),
}

/// Memory the clients' destinations may take at once.
pub struct Budget {
    max: u64,
    used: Mutex<u64>,
    cv: Condvar,
}

impl Budget {
    pub fn new(max: u64) -> Self {
        Self {
            max,
            used: Mutex::new(0),
            cv: Condvar::new(),
        }
    }
    pub fn max(&self) -> u64 {
        self.max
    }
    /// Bytes held now.
    pub fn used(&self) -> u64 {
        *self.used.lock().unwrap_or_else(PoisonError::into_inner)
    }
    /// Takes `n` bytes if they fit now (async clients poll this: blocking a runtime thread
    /// in [`Budget::acquire`] could stall the very tasks that would give bytes back).
    pub fn try_acquire(&self, n: u64) -> Option<BudgetGuard<'_>> {
        let n = n.min(self.max);
        let mut u = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        if *u + n > self.max {
            return None;
        }
        *u += n;
        Some(BudgetGuard { b: self, n })
    }

    /// Blocks until `n` bytes fit (`n` is at most `max`: operations are planned that way).
    pub fn acquire(&self, n: u64) -> BudgetGuard<'_> {
        let n = n.min(self.max);
        let mut u = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        while *u + n > self.max {
            u = self.cv.wait(u).unwrap_or_else(PoisonError::into_inner);
        }
        *u += n;
        BudgetGuard { b: self, n }
    }
}

/// Gives its bytes back to the [`Budget`] when dropped.
pub struct BudgetGuard<'a> {
    b: &'a Budget,
    n: u64,
}

impl Drop for BudgetGuard<'_> {
    fn drop(&mut self) {
        *self.b.used.lock().unwrap_or_else(PoisonError::into_inner) -= self.n;
        self.b.cv.notify_all();
    }
}

/// Bytes verified per second assumed before a run has measured its own (its first second).
const PRIOR_RATE: f64 = 256.0 * 1024.0 * 1024.0;
/// Destination bytes prepared (allocated and poisoned) per second assumed before a run has
/// timed enough of its own.
const PRIOR_POISON_RATE: f64 = 256.0 * 1024.0 * 1024.0;
/// Poisoned bytes a run must have timed before its own poisoning rate replaces the prior.
const POISON_SAMPLE: u64 = 64 << 20;

/// When to stop: a deadline and/or an op count, or an explicit stop.
pub struct Work {
    start: Instant,
    deadline: Option<Instant>,
    limit: Option<u64>,
    issued: AtomicU64,
    stopped: AtomicBool,
    /// Destination bytes prepared so far, and the client time it took (nanoseconds).
    poisoned_bytes: AtomicU64,
    poison_nanos: AtomicU64,
}

impl Work {
    fn new(duration: Option<Duration>, limit: Option<u64>) -> Self {
        let duration = match (duration, limit) {
            (None, None) => Some(Duration::from_secs(10)),
            (d, _) => d,
        };
        let start = Instant::now();
        Self {
            start,
            deadline: duration.map(|d| start + d),
            limit,
            issued: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            poisoned_bytes: AtomicU64::new(0),
            poison_nanos: AtomicU64::new(0),
        }
    }
    /// The next operation's number, or `None` when the work is done.
    pub fn next(&self) -> Option<u64> {
        if !self.active() {
            return None;
        }
        let id = self.issued.fetch_add(1, Ordering::Relaxed);
        match self.limit {
            Some(l) if id >= l => None,
            _ => Some(id),
        }
    }
    /// True until the deadline, the op count or a stop.
    pub fn active(&self) -> bool {
        !self.stopped.load(Ordering::Relaxed)
            && self.deadline.is_none_or(|d| Instant::now() < d)
            && self
                .limit
                .is_none_or(|l| self.issued.load(Ordering::Relaxed) < l)
    }
    fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }
    /// True once the run's duration is over (false for a run bounded by --ops alone).
    pub fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }
    /// A client prepared (allocated and poisoned) `bytes` of destination in `took`.
    pub fn poisoned(&self, bytes: u64, took: Duration) {
        self.poisoned_bytes.fetch_add(bytes, Ordering::Relaxed);
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.poison_nanos.fetch_add(ns, Ordering::Relaxed);
    }
    /// Bytes one client prepares per second (its own measure once it has timed enough).
    fn poison_rate(&self) -> f64 {
        let bytes = self.poisoned_bytes.load(Ordering::Relaxed);
        let ns = self.poison_nanos.load(Ordering::Relaxed);
        if bytes < POISON_SAMPLE || ns == 0 {
            return PRIOR_POISON_RATE;
        }
        bytes as f64 / (ns as f64 * 1e-9)
    }
    /// The largest operation that can still finish by the deadline. The bytes other clients
    /// hold in flight finish first, at what the run has verified per second so far; then this
    /// one is prepared (its destination allocated and poisoned, at the clients' measured
    /// rate: a fresh 2.25 GiB destination took 2.4-5.8 s on a 2-core machine) and read.
    /// Without a deadline: no cap; in the first second (no rate yet), [`PRIOR_RATE`] stands
    /// for the rate.
    /// This keeps `--duration` honest: a multi-GiB read started a moment before the end
    /// would otherwise run (and be verified) for seconds after it.
    pub fn bytes_until_deadline(&self, verified: u64, in_flight: u64) -> u64 {
        let Some(deadline) = self.deadline else {
            return u64::MAX;
        };
        let now = Instant::now();
        let elapsed = now.duration_since(self.start).as_secs_f64();
        let left = deadline.saturating_duration_since(now).as_secs_f64();
        // No rate of its own yet: a slow machine's, so that a multi-GiB read drawn at the very
        // start of a short run does not outlast it (a 4 s run took 8.8 s so on a 2-core machine).
        let rate = if elapsed < 1.0 || verified == 0 {
            PRIOR_RATE
        } else {
            verified as f64 / elapsed
        };
        let left = (left - in_flight as f64 / rate).max(0.0);
        (left / (1.0 / rate + 1.0 / self.poison_rate())) as u64
    }
}

/// Starts engines on fault-injecting sources and keeps their counters.
pub(crate) struct Starter {
    base: Arc<dyn Source>,
    device: Arc<dyn Device>,
    cfg: EngineConfig,
    faults: FaultSpec,
    seed: u64,
    log: Arc<EioLog>,
    next_id: AtomicU32,
    sources: Mutex<Vec<Arc<FaultySource>>>,
    rng: Mutex<client::Rng>,
}

impl Starter {
    /// A starter of engines on `base` (through fault injection) into `device`.
    fn new(
        cfg: &StressConfig,
        base: Arc<dyn Source>,
        device: &Arc<dyn Device>,
        log: &Arc<EioLog>,
    ) -> Self {
        Starter {
            base,
            device: Arc::clone(device),
            cfg: cfg.engine.clone(),
            faults: cfg.faults.clone(),
            seed: cfg.seed,
            log: Arc::clone(log),
            next_id: AtomicU32::new(0),
            sources: Mutex::default(),
            rng: Mutex::new(client::Rng::new(cfg.seed ^ 0x0123_4567)),
        }
    }

    /// Starts an engine; an injected open failure fails the start (counted) and the next try
    /// gets no open failure. Returns the engine and its source id.
    pub(crate) fn start(&self, tally: &Tally) -> Result<(Engine, u32), EngineError> {
        let mut allow_open_fault = true;
        loop {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let fail_open_at = {
                let mut r = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
                (allow_open_fault && r.chance(self.faults.open_fail))
                    .then(|| 1 + r.below(self.cfg.workers as u64))
            };
            let plan = self
                .faults
                .plan(self.seed ^ u64::from(id).wrapping_mul(0x9e37), fail_open_at);
            let faulty = Arc::new(FaultySource::new(Arc::clone(&self.base), plan));
            self.sources
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Arc::clone(&faulty));
            let src = Arc::new(LoggedSource::new(faulty, id, Arc::clone(&self.log)));
            tally.engine_starts.fetch_add(1, Ordering::Relaxed);
            match Engine::new(src, Arc::clone(&self.device), self.cfg.clone()) {
                Ok(e) => return Ok((e, id)),
                Err(e) => {
                    let (kind, _) = classify(&e);
                    tally.error(kind);
                    if kind != ErrorKind::Open || fail_open_at.is_none() {
                        tally.unexpected(format!("engine start: {}", chain(&e)));
                        return Err(e);
                    }
                    allow_open_fault = false;
                }
            }
        }
    }

    fn injected(&self) -> Injected {
        let mut t = Injected::default();
        for s in self
            .sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let c = s.counts();
            t.reads += c.reads;
            t.short_reads += c.short_reads;
            t.eintr += c.eintr;
            t.eio += c.eio;
            t.spikes += c.spikes;
            t.open_failures += c.open_failures;
            t.bit_flips += c.bit_flips;
        }
        t
    }
}

fn validate(cfg: &StressConfig) -> Result<(), StressError> {
    let bad = |m: &str| Err(StressError::Config(m.to_string()));
    if cfg.file_len < 1 << 20 {
        return bad("the file must be at least 1 MiB");
    }
    if cfg.threads + cfg.tasks == 0 {
        return bad("need at least one client thread or task");
    }
    if cfg.max_inflight_bytes < 16 << 20 {
        return bad("max in-flight bytes must be at least 16 MiB");
    }
    if !(0.0..=1.0).contains(&cfg.cancel) {
        return bad("cancel probability must be in 0..=1");
    }
    if cfg.threads > 1024 || cfg.tasks > 65536 {
        return bad("at most 1024 threads and 65536 tasks");
    }
    cfg.engine
        .validate()
        .map_err(|e| StressError::Config(chain(&e)))?;
    Ok(())
}

/// Runs a stress (see the module docs) and returns its report; [`Report::passed`] says
/// whether it held.
pub fn run(cfg: &StressConfig) -> Result<Report, StressError> {
    validate(cfg)?;
    let fds_before = counting::open_fds();
    let threads_before = counting::threads();
    let t_start = Instant::now();
    let tally = Arc::new(Tally::new());
    let log = Arc::new(EioLog::default());

    // Removes the stress file when the run ends (also on early returns and on SIGINT/SIGTERM)
    // unless it is kept.
    let OpenedSource { temp, base, expect } = open_source(cfg)?;
    let (device, pinned) = open_device(cfg)?;
    let starter = Arc::new(Starter::new(cfg, base, &device, &log));
    let (engine, source_id) = starter.start(&tally).map_err(StressError::Engine)?;
    let engine = Arc::new(engine);
    let work = Arc::new(Work::new(cfg.duration, cfg.ops));
    let setup = t_start.elapsed();
    let submitted = Arc::new(AtomicU64::new(0));
    let budget = Arc::new(Budget::new(cfg.max_inflight_bytes));
    let expect = Arc::new(expect);
    let ctx = |async_client| {
        Arc::new(Ctx {
            engine: Arc::clone(&engine),
            source_id,
            device: Arc::clone(&device),
            expect: Arc::clone(&expect),
            tally: Arc::clone(&tally),
            budget: Arc::clone(&budget),
            work: Arc::clone(&work),
            cancel: cfg.cancel,
            huge_bytes: cfg.huge_bytes,
            max_op_bytes: cfg.max_op_bytes,
            eio_expected: cfg.faults.fails_reads(),
            lost_timeout: cfg.lost_timeout,
            submitted: Arc::clone(&submitted),
            async_client,
        })
    };
    let thread_ctx = ctx(false);
    let task_ctx = ctx(true);

    let lost_tickets = Arc::new(Mutex::new(Vec::new()));
    let handles = spawn_clients(cfg, &thread_ctx, &lost_tickets)?;
    let storm = spawn_storm(cfg, &starter, &thread_ctx)?;
    let progress = cfg.progress.then(|| {
        let (t, w) = (Arc::clone(&tally), Arc::clone(&work));
        std::thread::spawn(move || progress_loop(&t, &w, t_start))
    });
    if cfg.tasks > 0 {
        run_tasks(cfg, &task_ctx, &tally)?;
    }
    let ops_time = join_all(handles, storm, progress, &work, &tally);
    check_all_completed(cfg, &engine, &submitted, &tally);
    drop(thread_ctx);
    drop(task_ctx);
    let main = Arc::try_unwrap(engine);
    drop(main); // joins the engine's threads, frees its staging ring
    drop(lost_tickets);
    let injected = starter.injected();
    drop(starter);
    drop(device);
    drop(temp);
    let wall = t_start.elapsed();
    let mut report = tally.report(injected, &log.entries(), wall);
    report.setup_s = setup.as_secs_f64();
    report.ops_s = ops_time.as_secs_f64();
    report.resources = Resources {
        fds_before,
        fds_after: counting::open_fds(),
        threads_before,
        threads_after: counting::threads(),
        pinned_live_after: pinned.live_bytes(),
        pinned_allocs: pinned.total_allocs(),
    };
    Ok(report)
}

/// The file the stress reads, what its bytes must be, and the guard that removes a temporary
/// stress file when dropped.
struct OpenedSource {
    base: Arc<dyn Source>,
    expect: Expect,
    temp: Option<crate::cli::files::Temp>,
}

/// Opens the stress's source: the virtual pattern file, or a sparse file written now (a
/// temporary one, removed when the returned guard drops, unless it is kept).
fn open_source(cfg: &StressConfig) -> Result<OpenedSource, StressError> {
    let (path, keep) = match &cfg.file {
        FileKind::Virtual => {
            return Ok(OpenedSource {
                base: Arc::new(PatternSource::new(cfg.file_len, FILE_SEED)),
                expect: Expect::Pattern {
                    seed: FILE_SEED,
                    len: cfg.file_len,
                },
                temp: None,
            })
        }
        FileKind::Sparse { path, keep } => (path, *keep),
    };
    let path = path.clone().unwrap_or_else(temp_stress_path);
    let mut temp = None;
    if !keep {
        temp = Some(crate::cli::files::Temp::register(path.clone()));
    }
    let err = |source| StressError::File {
        path: path.clone(),
        source,
    };
    let regions = content::sparse_regions(cfg.file_len);
    let p = ds4_io::pattern::write_file(&path, cfg.file_len, &regions).map_err(err)?;
    let src = FileSource::open(
        &path,
        OpenConfig {
            direct: cfg.engine.direct,
            drop_cache: false,
            use_cache: !cfg.engine.cold,
        },
    )
    .map_err(err)?;
    Ok(OpenedSource {
        base: src,
        expect: Expect::Sparse(p),
        temp,
    })
}

/// A fresh temporary stress file's path, after sweeping those of earlier killed runs.
fn temp_stress_path() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir();
    // Files of earlier runs that were killed (their PID is gone).
    crate::cli::files::sweep_stale(&dir, |n| {
        crate::cli::files::pid_after(n, "ds4-stress-", Some('-')).filter(|_| n.ends_with(".bin"))
    });
    dir.join(format!("ds4-stress-{}-{nanos}.bin", std::process::id()))
}

/// The host device the stress streams into, wrapped to count pinned allocations.
fn open_device(
    cfg: &StressConfig,
) -> Result<(Arc<dyn Device>, Arc<counting::PinnedCounter>), StressError> {
    let host = HostDevice::new(HostConfig {
        host_visible: cfg.unified,
        copy_delay: cfg.faults.slow_copy,
        gate: None,
    })
    .map_err(StressError::Device)?;
    let counting = CountingDevice::new(Arc::new(host));
    let pinned = counting.counter();
    Ok((Arc::new(counting), pinned))
}

/// Starts the `cfg.threads` client threads.
fn spawn_clients(
    cfg: &StressConfig,
    thread_ctx: &Arc<Ctx>,
    lost_tickets: &Arc<Mutex<Vec<ds4_stream::engine::Ticket>>>,
) -> Result<Vec<std::thread::JoinHandle<()>>, StressError> {
    let mut handles = Vec::new();
    for i in 0..cfg.threads {
        let (c, l) = (Arc::clone(thread_ctx), Arc::clone(lost_tickets));
        let seed = cfg.seed ^ (0x1000 + i as u64).wrapping_mul(0x9e37_79b9);
        let h = std::thread::Builder::new()
            .name(format!("stress-client-{i}"))
            .spawn(move || client::thread_client(c, seed, l))
            .map_err(StressError::Runtime)?;
        handles.push(h);
    }
    Ok(handles)
}

/// Starts the engine-start storm thread when `cfg.storm_every` asks for one.
fn spawn_storm(
    cfg: &StressConfig,
    starter: &Arc<Starter>,
    thread_ctx: &Arc<Ctx>,
) -> Result<Option<std::thread::JoinHandle<()>>, StressError> {
    let Some(every) = cfg.storm_every else {
        return Ok(None);
    };
    let s = storm::Storm {
        starter: Arc::clone(starter),
        ctx: Arc::clone(thread_ctx),
        every,
        requests: cfg.storm_requests,
        seed: cfg.seed ^ 0x5707,
    };
    std::thread::Builder::new()
        .name("stress-storm".into())
        .spawn(move || s.run())
        .map(Some)
        .map_err(StressError::Runtime)
}

/// Runs the `cfg.tasks` async clients on a tokio runtime to the end.
fn run_tasks(cfg: &StressConfig, task_ctx: &Arc<Ctx>, tally: &Tally) -> Result<(), StressError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("stress-task")
        .enable_time()
        .build()
        .map_err(StressError::Runtime)?;
    rt.block_on(async {
        let tasks: Vec<_> = (0..cfg.tasks)
            .map(|i| {
                let seed = cfg.seed ^ (0x2000 + i as u64).wrapping_mul(0x9e37_79b9);
                tokio::spawn(client::task_client(Arc::clone(task_ctx), seed))
            })
            .collect();
        for t in tasks {
            if let Err(e) = t.await {
                tally.unexpected(format!("an async client panicked: {e}"));
            }
        }
    });
    rt.shutdown_timeout(Duration::from_secs(10));
    Ok(())
}

/// Joins the client threads, stops the work, then joins the storm and progress threads;
/// returns how long the operations ran.
fn join_all(
    handles: Vec<std::thread::JoinHandle<()>>,
    storm: Option<std::thread::JoinHandle<()>>,
    progress: Option<std::thread::JoinHandle<()>>,
    work: &Work,
    tally: &Tally,
) -> Duration {
    for h in handles {
        if h.join().is_err() {
            tally.unexpected("a client thread panicked".into());
        }
    }
    work.stop();
    let ops_time = work.start.elapsed();
    if let Some(s) = storm {
        if s.join().is_err() {
            tally.unexpected("the storm thread panicked".into());
        }
    }
    if let Some(p) = progress {
        let _ = p.join();
    }
    ops_time
}

/// Every request the main engine accepted must complete, including those whose tickets were
/// dropped: the engine's completed-request count must reach the number submitted.
fn check_all_completed(cfg: &StressConfig, engine: &Engine, submitted: &AtomicU64, tally: &Tally) {
    let want = submitted.load(Ordering::SeqCst);
    let wait_until = Instant::now() + cfg.lost_timeout;
    while engine.stats().requests < want && Instant::now() < wait_until {
        std::thread::sleep(Duration::from_millis(5));
    }
    let done = engine.stats().requests;
    if done < want {
        tally.lost.fetch_add(want - done, Ordering::Relaxed);
        tally.unexpected(format!(
            "{} of {want} accepted requests never completed",
            want - done
        ));
    }
}

fn progress_loop(t: &Tally, w: &Work, t0: Instant) {
    let mut last = Instant::now();
    while w.active() {
        std::thread::sleep(Duration::from_millis(200));
        if last.elapsed() >= Duration::from_secs(5) {
            last = Instant::now();
            eprintln!(
                "ds4-stress: {:.0} s: {} ops, {} ok, {:.2} GiB verified, {} lost, {} wrong bytes",
                t0.elapsed().as_secs_f64(),
                t.ops.load(Ordering::Relaxed),
                t.ok.load(Ordering::Relaxed),
                t.bytes_verified.load(Ordering::Relaxed) as f64 / (1u64 << 30) as f64,
                t.lost.load(Ordering::Relaxed),
                t.wrong_bytes.load(Ordering::Relaxed)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Work;
    use std::time::Duration;

    const MIB: f64 = (1u64 << 20) as f64;

    /// The cap counts the preparation of the destination as well as the read: 10 s left at
    /// 256 MiB/s for each is 1280 MiB, less what others hold in flight, and more once the
    /// clients have timed a faster preparation.
    #[test]
    fn cap_counts_preparing_the_destination() {
        let w = Work::new(Some(Duration::from_secs(10)), None);
        let mib = |b: u64| b as f64 / MIB;
        let fresh = mib(w.bytes_until_deadline(0, 0));
        assert!((1270.0..=1280.0).contains(&fresh), "{fresh}");
        let busy = mib(w.bytes_until_deadline(0, 512 << 20));
        assert!((1010.0..=1024.0).contains(&busy), "{busy}");
        w.poisoned(1 << 30, Duration::from_secs(1));
        let fast = mib(w.bytes_until_deadline(0, 0));
        assert!((2030.0..=2048.0).contains(&fast), "{fast}");
        assert_eq!(
            Work::new(None, Some(5)).bytes_until_deadline(0, 0),
            u64::MAX
        );
    }
}
