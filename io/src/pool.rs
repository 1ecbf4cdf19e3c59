//! The reader pool: N worker threads, each owning its own handle for its whole life, fed by a
//! bounded queue (a full queue blocks the submitter: backpressure).
//!
//! A [`Job`] runs on a worker with that worker's handle; it is either run or cancelled, exactly
//! once, whatever happens (shutdown, a worker whose handle failed), so completions are never lost.
//! What a job does (read into a staging slot, then issue an async copy) is the engine's business.

use crate::file::{ReadAt, Source};
use crossbeam_channel::{bounded, Receiver, Sender};
use std::io;
use std::sync::Arc;
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
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            workers: 18,
            queue_depth: 64,
            name: "ds4-io".into(),
        }
    }
}

/// N workers with their own handles on one [`Source`].
pub struct ReaderPool {
    tx: Option<Sender<Box<dyn Job>>>,
    rx: Receiver<Box<dyn Job>>,
    threads: Vec<JoinHandle<()>>,
    workers: usize,
}

impl ReaderPool {
    /// Starts the workers; each opens its handle before this returns. If any handle fails to
    /// open, every worker is stopped and the error (naming the path) is returned.
    pub fn new(source: Arc<dyn Source>, cfg: &PoolConfig) -> io::Result<Self> {
        if cfg.workers == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "reader pool needs at least 1 worker",
            ));
        }
        let (tx, rx) = bounded::<Box<dyn Job>>(cfg.queue_depth.max(1));
        let (ready_tx, ready_rx) = bounded::<io::Result<()>>(cfg.workers);
        let mut threads = Vec::with_capacity(cfg.workers);
        for i in 0..cfg.workers {
            let rx = rx.clone();
            let source = Arc::clone(&source);
            let ready = ready_tx.clone();
            let t = std::thread::Builder::new()
                .name(format!("{}-{i}", cfg.name))
                .spawn(move || {
                    let mut handle = match source.open_handle() {
                        Ok(h) => {
                            let _ = ready.send(Ok(()));
                            h
                        }
                        Err(e) => {
                            let _ = ready.send(Err(io::Error::new(
                                e.kind(),
                                format!("worker {i}: cannot open {}: {e}", source.path().display()),
                            )));
                            return;
                        }
                    };
                    drop(ready);
                    for job in rx.iter() {
                        job.run(handle.as_mut());
                    }
                })?;
            threads.push(t);
        }
        drop(ready_tx);
        let mut first_err = None;
        for _ in 0..cfg.workers {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(io::Error::other("reader worker exited during start"));
                }
            }
        }
        let pool = Self {
            tx: Some(tx),
            rx,
            threads,
            workers: cfg.workers,
        };
        match first_err {
            Some(e) => Err(e), // Drop joins the started workers.
            None => Ok(pool),
        }
    }

    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Queues a job, blocking while the queue is full. After shutdown the job is cancelled.
    pub fn submit(&self, job: Box<dyn Job>) {
        match &self.tx {
            Some(tx) => {
                if let Err(e) = tx.send(job) {
                    e.into_inner().cancel();
                }
            }
            None => job.cancel(),
        }
    }

    /// Stops taking jobs, cancels the ones still queued, lets running ones finish, joins workers.
    pub fn shutdown(&mut self) {
        self.tx = None;
        // Workers see a closed channel only once it is empty; drain it here so queued jobs are
        // cancelled promptly rather than run.
        while let Ok(job) = self.rx.try_recv() {
            job.cancel();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for ReaderPool {
    fn drop(&mut self) {
        self.shutdown();
    }
}
