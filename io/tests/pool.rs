//! Reader pool: exactly-once completion under shutdown races, backpressure, per-worker handles,
//! open failures, panicking jobs. Portable (also runs under Wine).

mod common;

use common::{CountJob, Ledger, ReportJob};
use ds4_io::fault::{self, FaultPlan, FaultySource, InjectedFault};
use ds4_io::pattern::PatternSource;
use ds4_io::{Job, PoolConfig, ReadAt, ReaderPool, Source, WorkerOpenError};
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn pool_cfg(workers: usize, queue_depth: usize) -> PoolConfig {
    PoolConfig {
        workers,
        queue_depth,
        name: "test-io".into(),
        active: None,
    }
}

fn pattern_source() -> Arc<dyn Source> {
    Arc::new(PatternSource::new(1 << 40, 5))
}

#[test]
fn every_job_completes_exactly_once_under_shutdown_races() {
    const SUBMITTERS: usize = 4;
    const PER: usize = 600;
    let (mut ran, mut cancelled) = (0, 0);
    for round in 0..12u64 {
        let pool = Arc::new(ReaderPool::new(pattern_source(), &pool_cfg(18, 8)).unwrap());
        let ledger = Ledger::new(SUBMITTERS * PER);
        let subs: Vec<_> = (0..SUBMITTERS)
            .map(|s| {
                let pool = Arc::clone(&pool);
                let ledger = Arc::clone(&ledger);
                std::thread::spawn(move || {
                    for k in 0..PER {
                        let id = s * PER + k;
                        let job = Box::new(CountJob {
                            id,
                            ledger: Arc::clone(&ledger),
                            offset: (id as u64) * 4099 + (5 << 32),
                            len: 1 + id % 5000,
                            seed: Some(5),
                            sleep: Duration::from_micros((id % 3) as u64 * 50),
                        });
                        if k % 2 == 0 {
                            pool.submit(job);
                        } else {
                            let mut job: Box<dyn Job> = job;
                            // try_submit hands a job back only when the queue is full.
                            loop {
                                match pool.try_submit(job) {
                                    Ok(()) => break,
                                    Err(back) => {
                                        job = back;
                                        std::thread::yield_now();
                                    }
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        // Close at a different moment each round: before, during and after the submits.
        std::thread::sleep(Duration::from_micros(round * round * 150));
        pool.close();
        for s in subs {
            s.join().unwrap();
        }
        ledger.assert_exactly_once(SUBMITTERS * PER);
        drop(pool); // a second close (from Drop) changes nothing
        ledger.assert_exactly_once(SUBMITTERS * PER);
        let (r, c) = ledger.totals();
        eprintln!("round {round}: {r} ran, {c} cancelled");
        ran += r;
        cancelled += c;
    }
    // The rounds covered both outcomes (closing early cancels most, closing late runs most).
    assert!(ran > 0 && cancelled > 0, "ran {ran}, cancelled {cancelled}");
}

/// A job that blocks until released, telling when it has started.
struct GateJob {
    started: crossbeam_channel::Sender<()>,
    release: crossbeam_channel::Receiver<()>,
    done: Arc<AtomicUsize>,
    cancelled: Arc<AtomicUsize>,
}

impl Job for GateJob {
    fn run(self: Box<Self>, _h: &mut dyn ReadAt) {
        let _ = self.started.send(());
        let _ = self.release.recv();
        self.done.fetch_add(1, Ordering::SeqCst);
    }
    fn cancel(self: Box<Self>) {
        self.cancelled.fetch_add(1, Ordering::SeqCst);
    }
}

struct Gates {
    started_tx: crossbeam_channel::Sender<()>,
    started_rx: crossbeam_channel::Receiver<()>,
    release_tx: Option<crossbeam_channel::Sender<()>>,
    release_rx: crossbeam_channel::Receiver<()>,
    done: Arc<AtomicUsize>,
    cancelled: Arc<AtomicUsize>,
}

impl Gates {
    fn new() -> Self {
        let (started_tx, started_rx) = crossbeam_channel::unbounded();
        let (release_tx, release_rx) = crossbeam_channel::unbounded();
        Self {
            started_tx,
            started_rx,
            release_tx: Some(release_tx),
            release_rx,
            done: Arc::default(),
            cancelled: Arc::default(),
        }
    }
    fn job(&self) -> Box<GateJob> {
        Box::new(GateJob {
            started: self.started_tx.clone(),
            release: self.release_rx.clone(),
            done: Arc::clone(&self.done),
            cancelled: Arc::clone(&self.cancelled),
        })
    }
    fn wait_started(&self, n: usize) {
        for _ in 0..n {
            self.started_rx
                .recv_timeout(Duration::from_secs(10))
                .expect("job did not start");
        }
    }
    fn release_all(&mut self) {
        self.release_tx = None; // disconnect: every recv returns
    }
}

#[test]
fn close_cancels_queued_jobs_and_lets_running_ones_finish() {
    let pool = Arc::new(ReaderPool::new(pattern_source(), &pool_cfg(2, 16)).unwrap());
    let mut g = Gates::new();
    pool.submit(g.job());
    pool.submit(g.job());
    g.wait_started(2); // both workers are busy
    for _ in 0..10 {
        pool.submit(g.job());
    }
    assert_eq!(pool.queued(), 10);
    let closer = {
        let pool = Arc::clone(&pool);
        std::thread::spawn(move || pool.close())
    };
    // close() cancels the queue at once but waits for the two running jobs.
    let t0 = Instant::now();
    while g.cancelled.load(Ordering::SeqCst) < 10 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "queued jobs not cancelled"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        !closer.is_finished(),
        "close returned while jobs were running"
    );
    assert_eq!(g.done.load(Ordering::SeqCst), 0);
    g.release_all();
    closer.join().unwrap();
    assert_eq!(g.done.load(Ordering::SeqCst), 2);
    assert_eq!(g.cancelled.load(Ordering::SeqCst), 10);
    assert!(pool.is_closed());
    // Submitting after close cancels, through both entry points.
    pool.submit(g.job());
    assert!(pool.try_submit(g.job()).is_ok());
    assert_eq!(g.cancelled.load(Ordering::SeqCst), 12);
}

#[test]
fn try_submit_gives_the_job_back_when_the_queue_is_full() {
    let pool = ReaderPool::new(pattern_source(), &pool_cfg(1, 2)).unwrap();
    let mut g = Gates::new();
    pool.submit(g.job());
    g.wait_started(1);
    assert!(pool.try_submit(g.job()).is_ok());
    assert!(pool.try_submit(g.job()).is_ok());
    let back = pool.try_submit(g.job()).expect_err("queue is full");
    // The caller still owns it: nothing was counted.
    assert_eq!(g.cancelled.load(Ordering::SeqCst), 0);
    back.cancel();
    assert_eq!(g.cancelled.load(Ordering::SeqCst), 1);
    g.release_all();
    drop(pool);
    // The running job finished; the two queued ones ran or were cancelled by the close.
    let (done, cancelled) = (
        g.done.load(Ordering::SeqCst),
        g.cancelled.load(Ordering::SeqCst),
    );
    assert!(
        done >= 1 && done + cancelled == 4,
        "done {done} cancelled {cancelled}"
    );
}

#[test]
fn a_submitter_blocked_on_a_full_queue_is_released_by_close() {
    let pool = Arc::new(ReaderPool::new(pattern_source(), &pool_cfg(1, 1)).unwrap());
    let mut g = Gates::new();
    pool.submit(g.job());
    g.wait_started(1);
    pool.submit(g.job()); // fills the queue
    let blocked = {
        let pool = Arc::clone(&pool);
        let job = g.job();
        std::thread::spawn(move || pool.submit(job))
    };
    std::thread::sleep(Duration::from_millis(30));
    assert!(
        !blocked.is_finished(),
        "submit should block on a full queue"
    );
    let closer = {
        let pool = Arc::clone(&pool);
        std::thread::spawn(move || pool.close())
    };
    blocked.join().unwrap(); // woken by close, its job cancelled
    let t0 = Instant::now();
    while g.cancelled.load(Ordering::SeqCst) < 2 {
        assert!(t0.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(1));
    }
    g.release_all();
    closer.join().unwrap();
    assert_eq!(g.done.load(Ordering::SeqCst), 1);
    assert_eq!(g.cancelled.load(Ordering::SeqCst), 2);
}

/// Handles that fill the buffer with their own id, so a job can tell which handle it got.
struct TagSource {
    opens: AtomicU64,
}

struct TagHandle(u64);

impl ReadAt for TagHandle {
    fn read_exact_at(&mut self, buf: &mut [u8], _offset: u64) -> io::Result<()> {
        buf.copy_from_slice(&self.0.to_le_bytes()[..buf.len()]);
        Ok(())
    }
}

impl Source for TagSource {
    fn path(&self) -> &Path {
        Path::new("<tags>")
    }
    fn len(&self) -> u64 {
        u64::MAX
    }
    fn open_handle(&self) -> io::Result<Box<dyn ReadAt>> {
        Ok(Box::new(TagHandle(
            self.opens.fetch_add(1, Ordering::SeqCst),
        )))
    }
}

#[test]
fn eighteen_workers_each_keep_one_distinct_handle() {
    let src = Arc::new(TagSource {
        opens: AtomicU64::new(0),
    });
    let pool = ReaderPool::new(src.clone(), &PoolConfig::default()).unwrap();
    assert_eq!(pool.workers(), 18);
    assert_eq!(src.opens.load(Ordering::SeqCst), 18);
    let seen: Arc<Mutex<HashMap<std::thread::ThreadId, HashSet<u64>>>> = Arc::default();
    let (tx, rx) = crossbeam_channel::unbounded();
    const JOBS: usize = 2000;
    for id in 0..JOBS {
        let seen = Arc::clone(&seen);
        pool.submit(Box::new(ReportJob {
            id,
            tx: tx.clone(),
            body: move |h: &mut dyn ReadAt| {
                let mut b = [0u8; 8];
                h.read_exact_at(&mut b, 0)?;
                let tag = u64::from_le_bytes(b);
                seen.lock()
                    .unwrap()
                    .entry(std::thread::current().id())
                    .or_default()
                    .insert(tag);
                // Long enough that every worker gets some of the jobs.
                std::thread::sleep(Duration::from_micros(200));
                Ok(())
            },
        }));
    }
    for _ in 0..JOBS {
        let (_, r) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        r.expect("not cancelled").unwrap();
    }
    drop(pool);
    // No handle was opened after start, none was shared, every worker kept its own.
    assert_eq!(src.opens.load(Ordering::SeqCst), 18);
    let seen = seen.lock().unwrap();
    let mut all = HashSet::new();
    for tags in seen.values() {
        assert_eq!(tags.len(), 1, "a worker used several handles: {tags:?}");
        assert!(
            all.insert(*tags.iter().next().unwrap()),
            "two workers shared a handle"
        );
    }
    assert!(seen.len() > 1, "only one worker ever ran");
}

#[test]
fn a_worker_whose_handle_fails_to_open_fails_new() {
    let faulty = Arc::new(FaultySource::new(
        pattern_source(),
        FaultPlan {
            fail_open_at: Some(7),
            ..Default::default()
        },
    ));
    let e = ReaderPool::new(faulty.clone(), &PoolConfig::default())
        .err()
        .expect("the 7th open fails");
    let w = e
        .get_ref()
        .and_then(|r| r.downcast_ref::<WorkerOpenError>())
        .expect("WorkerOpenError payload");
    assert!(w.worker < 18);
    assert!(e.to_string().contains("<pattern"), "{e}");
    assert_eq!(
        fault::injected(&e),
        Some(&InjectedFault::OpenFailed { call: 7 })
    );
    let c = faulty.counts();
    assert_eq!((c.opens, c.open_failures), (18, 1));
    // The same source works once the fault is past (open call 19 onwards).
    let pool = ReaderPool::new(faulty.clone(), &PoolConfig::default()).unwrap();
    drop(pool);
}

#[test]
fn worker_counts_out_of_range_are_refused() {
    for workers in [0, ds4_io::pool::MAX_WORKERS + 1] {
        let e = ReaderPool::new(pattern_source(), &pool_cfg(workers, 4))
            .err()
            .expect("refused");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}

#[cfg(panic = "unwind")]
#[test]
fn a_panicking_job_does_not_kill_its_worker() {
    /// Holds the sending side of a channel only to drop it: the waiter sees the disconnect.
    struct Boom {
        _guard: crossbeam_channel::Sender<()>,
    }
    impl Job for Boom {
        fn run(self: Box<Self>, _h: &mut dyn ReadAt) {
            panic!("job exploded on purpose");
        }
        fn cancel(self: Box<Self>) {}
    }
    let pool = ReaderPool::new(pattern_source(), &pool_cfg(1, 4)).unwrap();
    let (guard_tx, guard_rx) = crossbeam_channel::bounded::<()>(0);
    pool.submit(Box::new(Boom { _guard: guard_tx }));
    // The job's captures were dropped while unwinding: a waiter on them learns it is gone.
    assert_eq!(
        guard_rx.recv_timeout(Duration::from_secs(10)),
        Err(crossbeam_channel::RecvTimeoutError::Disconnected)
    );
    // The single worker is still alive and serves the next job with its handle.
    let (tx, rx) = crossbeam_channel::unbounded();
    pool.submit(Box::new(ReportJob {
        id: 1,
        tx,
        body: |h: &mut dyn ReadAt| {
            let mut b = [0u8; 64];
            h.read_exact_at(&mut b, 1 << 33)?;
            ds4_io::pattern::verify(5, 1 << 33, &b).map_err(io::Error::other)
        },
    }));
    let (_, r) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    r.expect("ran").unwrap();
    assert_eq!(pool.panicked_jobs(), 1);
}
