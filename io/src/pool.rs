//! The reader pool: N worker threads, each owning its own handle for its whole life, fed by a
//! bounded queue (a full queue blocks the submitter: backpressure).
//!
//! A [`Job`] runs on a worker with that worker's handle; it is either run or cancelled, exactly
//! once, whatever happens (shutdown while it is queued, submitted after shutdown, submitted while
//! a shutdown races with the submit), so completions are never lost. What a job does (read into a
//! staging slot, then issue an async copy) is the engine's business.
//!
//! Shutdown ([`ReaderPool::close`], also run by `shutdown` and `Drop`): no new jobs are taken
//! (later submits cancel their job), jobs still queued are cancelled, jobs already running
//! finish, then the workers are joined.
//!
//! [`PoolConfig::active`] lets fewer workers than the pool has take jobs at once, changeable
//! while it runs ([`ActiveLimit`]): jobs queued beyond them wait in the queue, so a worker that
//! finishes a read starts the next one at once.
//!
//! Limits:
//! - A job that panics is consumed by the panic, so it can neither complete nor be cancelled;
//!   the worker catches the panic, logs it to stderr, counts it ([`ReaderPool::panicked_jobs`])
//!   and keeps serving the queue with the same handle. Whatever the job owned is dropped while
//!   unwinding, so a job that holds its completion in a guard with a `Drop` (e.g. the sending
//!   side of a channel) still tells its waiter. In a `panic = "abort"` build nothing can be
//!   caught: the process ends.
//! - `close` must not be called from inside a job (it would wait for that job); if it is, the
//!   calling worker is left to exit on its own instead of being joined.

use crate::active::ActiveLimit;
use crate::file::{ReadAt, Source};
use crossbeam_channel::{bounded, select, Receiver, Select, Sender, TryRecvError, TrySendError};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

/// Work for one reader-pool worker.
pub trait Job: Send + 'static {
    /// Runs on a worker thread with that worker's own handle.
    fn run(self: Box<Self>, handle: &mut dyn ReadAt);
    /// Called instead of `run` when the job will never run (pool shut down before it was taken).
    fn cancel(self: Box<Self>);
}

/// Reader pool settings.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Worker threads, each with its own handle (default 18: 6 experts x 3 tensors).
    pub workers: usize,
    /// Jobs that may wait in the queue before `submit` blocks.
    pub queue_depth: usize,
    /// Thread name prefix.
    pub name: String,
    /// `Some(n)`: only `n` workers (clamped to 1..=workers) take jobs at a time, changeable with
    /// [`ReaderPool::active_limit`]. `None` (default): every worker, no check per job.
    pub active: Option<usize>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            workers: 18,
            queue_depth: 64,
            name: "ds4-io".into(),
            active: None,
        }
    }
}

/// Most workers one pool may start: far above any useful count (each holds a file handle and
/// a thread), low enough that a mistyped setting fails cleanly instead of exhausting the OS.
pub const MAX_WORKERS: usize = 1024;

/// A worker could not open its handle; [`ReaderPool::new`] returns it inside an `io::Error` of
/// the same kind.
#[derive(Debug, thiserror::Error)]
#[error("reader worker {worker}: cannot open {}", path.display())]
pub struct WorkerOpenError {
    pub worker: usize,
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

/// N workers with their own handles on one [`Source`].
pub struct ReaderPool {
    tx: Sender<Box<dyn Job>>,
    rx: Receiver<Box<dyn Job>>,
    /// Dropped (never sent on) to tell workers and blocked submitters that the pool is closing.
    stop_tx: Mutex<Option<Sender<()>>>,
    stop_rx: Receiver<()>,
    /// Set once closing starts; read under `gate` by submitters.
    closed: AtomicBool,
    /// Submitters hold it shared while they queue a job; `close` takes it exclusively, so once
    /// it has, no submit can still be putting a job into the queue.
    gate: RwLock<()>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    workers: usize,
    panicked: Arc<AtomicU64>,
    active: Option<ActiveLimit>,
}

impl ReaderPool {
    /// Starts the workers; each opens its handle before this returns. If any handle fails to
    /// open, every worker is stopped and the first error is returned (a [`WorkerOpenError`]
    /// naming the worker and the path, inside an `io::Error` of the original kind).
    pub fn new(source: Arc<dyn Source>, cfg: &PoolConfig) -> io::Result<Self> {
        if cfg.workers == 0 || cfg.workers > MAX_WORKERS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "reader pool needs 1 to {MAX_WORKERS} workers, {} requested",
                    cfg.workers
                ),
            ));
        }
        let (tx, rx) = bounded::<Box<dyn Job>>(cfg.queue_depth.max(1));
        let (stop_tx, stop_rx) = bounded::<()>(0);
        let pool = Self {
            tx,
            rx,
            stop_tx: Mutex::new(Some(stop_tx)),
            stop_rx,
            closed: AtomicBool::new(false),
            gate: RwLock::new(()),
            threads: Mutex::new(Vec::with_capacity(cfg.workers)),
            workers: cfg.workers,
            panicked: Arc::new(AtomicU64::new(0)),
            active: cfg.active.map(|n| ActiveLimit::new(cfg.workers, n)),
        };
        let (ready_tx, ready_rx) = bounded::<io::Result<()>>(cfg.workers);
        let mut first_err = None;
        let mut started = 0;
        for i in 0..cfg.workers {
            let worker = Worker {
                index: i,
                rx: pool.rx.clone(),
                stop: pool.stop_rx.clone(),
                panicked: Arc::clone(&pool.panicked),
                active: pool.active.clone(),
            };
            let source = Arc::clone(&source);
            let ready = ready_tx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("{}-{i}", cfg.name))
                .spawn(move || worker.main(source, ready));
            match spawned {
                Ok(t) => {
                    lock(&pool.threads).push(t);
                    started += 1;
                }
                Err(e) => {
                    first_err = Some(io::Error::new(
                        e.kind(),
                        format!("cannot start reader worker {i}: {e}"),
                    ));
                    break;
                }
            }
        }
        drop(ready_tx);
        for _ in 0..started {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(io::Error::other(
                        "a reader worker exited during start (its open_handle panicked)",
                    ));
                }
            }
        }
        match first_err {
            Some(e) => Err(e), // Drop closes the pool and joins the started workers.
            None => Ok(pool),
        }
    }

    /// Number of workers (each with its own handle).
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The limit on workers taking jobs at once, when the pool was built with
    /// [`PoolConfig::active`].
    pub fn active_limit(&self) -> Option<&ActiveLimit> {
        self.active.as_ref()
    }

    /// Jobs waiting in the queue (not yet taken by a worker).
    pub fn queued(&self) -> usize {
        self.rx.len()
    }

    /// Jobs that panicked in `run` so far (see the module docs).
    pub fn panicked_jobs(&self) -> u64 {
        self.panicked.load(Ordering::Relaxed)
    }

    /// True once [`ReaderPool::close`] (or `shutdown`) has started.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Queues a job, blocking while the queue is full. If the pool is closed, or closes while
    /// this waits, the job is cancelled instead. Either way it completes exactly once.
    pub fn submit(&self, job: Box<dyn Job>) {
        let _g = self.gate.read().unwrap_or_else(|p| p.into_inner());
        if self.closed.load(Ordering::SeqCst) {
            job.cancel();
            return;
        }
        // Wait for queue space or for `close`, whichever comes first: a submitter blocked on a
        // full queue must not block `close` (which waits for the gate) forever.
        let mut sel = Select::new();
        let send_op = sel.send(&self.tx);
        let stop_op = sel.recv(&self.stop_rx);
        let op = sel.select();
        if op.index() == send_op {
            // The pool owns both ends, so the queue cannot be disconnected; handle it anyway.
            if let Err(e) = op.send(&self.tx, job) {
                e.into_inner().cancel();
            }
        } else {
            debug_assert_eq!(op.index(), stop_op);
            let _ = op.recv(&self.stop_rx); // disconnected: the pool is closing
            job.cancel();
        }
    }

    /// Queues a job without blocking. `Err(job)` gives the job back when the queue is full (the
    /// caller still owns it). `Ok(())` means the pool took it: queued, or cancelled because the
    /// pool is closed.
    pub fn try_submit(&self, job: Box<dyn Job>) -> Result<(), Box<dyn Job>> {
        let _g = self.gate.read().unwrap_or_else(|p| p.into_inner());
        if self.closed.load(Ordering::SeqCst) {
            job.cancel();
            return Ok(());
        }
        match self.tx.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(job)) => Err(job),
            Err(TrySendError::Disconnected(job)) => {
                job.cancel();
                Ok(())
            }
        }
    }

    /// Stops taking jobs, cancels the ones still queued, lets running ones finish, joins the
    /// workers. Safe to call from any thread, any number of times, concurrently with submits.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        // Wake workers waiting for work (or for the active limit) and submitters waiting for
        // queue space.
        lock(&self.stop_tx).take();
        if let Some(a) = &self.active {
            a.close();
        }
        // Wait until no submitter is between its `closed` check and its send.
        drop(self.gate.write().unwrap_or_else(|p| p.into_inner()));
        // Queued jobs are cancelled rather than run (workers cancel the ones they take now too).
        self.cancel_queued();
        let me = std::thread::current().id();
        let threads: Vec<_> = lock(&self.threads).drain(..).collect();
        for t in threads {
            if t.thread().id() == me {
                continue; // close() from inside a job: that worker exits after the job
            }
            // A worker only ends by panicking outside a job (it catches job panics): nothing
            // left to clean up, so the join result carries no information.
            let _ = t.join();
        }
        // Nothing can have been queued since the gate, but a worker may have exited between
        // taking the stop signal and the queue's last items: cancel those.
        self.cancel_queued();
    }

    /// Same as [`ReaderPool::close`] (kept for callers holding the pool mutably).
    pub fn shutdown(&mut self) {
        self.close();
    }

    fn cancel_queued(&self) {
        while let Ok(job) = self.rx.try_recv() {
            job.cancel();
        }
    }
}

impl Drop for ReaderPool {
    fn drop(&mut self) {
        self.close();
    }
}

/// A mutex whose data stays valid if a holder panicked (the pool's data is a Vec of handles or
/// an Option: no invariant a panic could break).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct Worker {
    index: usize,
    rx: Receiver<Box<dyn Job>>,
    stop: Receiver<()>,
    panicked: Arc<AtomicU64>,
    active: Option<ActiveLimit>,
}

impl Worker {
    fn main(self, source: Arc<dyn Source>, ready: Sender<io::Result<()>>) {
        let mut handle = match source.open_handle() {
            Ok(h) => h,
            Err(e) => {
                let kind = e.kind();
                let err = WorkerOpenError {
                    worker: self.index,
                    path: source.path().to_path_buf(),
                    source: e,
                };
                let _ = ready.send(Err(io::Error::new(kind, err)));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        drop(ready);
        drop(source); // the handle is all a worker needs
        loop {
            if let Some(a) = &self.active {
                a.admit(self.index); // returns at once once closing: the select sees the stop
            }
            select! {
                recv(self.rx) -> job => match job {
                    // Closing already started: this job was still queued, so it is cancelled
                    // like the ones `close` drains (select picks randomly among ready arms).
                    Ok(job) if self.stop.try_recv() == Err(TryRecvError::Disconnected) => {
                        job.cancel();
                    }
                    Ok(job) => self.run(job, handle.as_mut()),
                    Err(_) => break,
                },
                recv(self.stop) -> _ => break,
            }
        }
    }

    fn run(&self, job: Box<dyn Job>, handle: &mut dyn ReadAt) {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run(handle)));
        if let Err(payload) = r {
            self.panicked.fetch_add(1, Ordering::Relaxed);
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(non-string panic payload)".into());
            eprintln!(
                "ds4-io: reader worker {}: a job panicked and was dropped without completing: \
                 {msg}; the worker keeps running",
                self.index
            );
        }
    }
}
