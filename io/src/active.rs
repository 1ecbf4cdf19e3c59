//! How many of a reader pool's workers take jobs at once, changeable while the pool runs.
//!
//! Why: a disk can want fewer reads in flight than a pool has workers, and still want the next
//! request queued so no time passes between one read's end and the next one's start. The dev
//! machine's virtio disk reads a cold tensor ~1.4x faster with one reader and two requests
//! queued behind it than with sixteen readers and two requests in flight (docs/BENCHMARKS.md,
//! "one reader, requests queued"), while the H200 machine's disk and NVMe drives want deep
//! queues. A cold copy measures which ([`crate::PoolConfig::active`], the engine's depth tuner)
//! without restarting the pool.
//!
//! Workers `0..limit` take jobs; the others wait here until the limit rises or the pool closes.
//! Limits: a worker checks before it waits for its next job, so after the limit is lowered, a
//! worker above it that was already waiting for a job may still take one (at most one each).

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// A shared, changeable count of active workers (clone it to keep a handle; every clone is
/// the same limit).
#[derive(Clone, Debug)]
pub struct ActiveLimit(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    changed: Condvar,
    workers: usize,
}

#[derive(Debug)]
struct State {
    limit: usize,
    closed: bool,
}

impl ActiveLimit {
    /// A limit of `active` (clamped to 1..=`workers`) out of `workers`.
    pub(crate) fn new(workers: usize, active: usize) -> Self {
        let workers = workers.max(1);
        Self(Arc::new(Inner {
            state: Mutex::new(State {
                limit: active.clamp(1, workers),
                closed: false,
            }),
            changed: Condvar::new(),
            workers,
        }))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A limit and a flag: no invariant a panicking holder could break.
        self.0.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Workers allowed to take jobs now.
    pub fn get(&self) -> usize {
        self.lock().limit
    }

    /// The pool's worker count (the most [`ActiveLimit::set`] can allow).
    pub fn workers(&self) -> usize {
        self.0.workers
    }

    /// Lets `n` workers (clamped to 1..=workers) take jobs from now on; returns the limit set.
    pub fn set(&self, n: usize) -> usize {
        let n = n.clamp(1, self.0.workers);
        let mut s = self.lock();
        if s.limit != n {
            s.limit = n;
            self.0.changed.notify_all();
        }
        n
    }

    /// Blocks worker `index` while it is above the limit; returns at once when the pool is
    /// closing (the worker then sees the stop signal).
    pub(crate) fn admit(&self, index: usize) {
        let mut s = self.lock();
        while index >= s.limit && !s.closed {
            s = self.0.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Wakes every waiting worker for good (the pool is closing).
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.0.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn set_clamps_and_reports() {
        let l = ActiveLimit::new(4, 0);
        assert_eq!(l.get(), 1);
        assert_eq!(l.set(9), 4);
        assert_eq!(l.set(0), 1);
        assert_eq!(l.set(3), 3);
        assert_eq!(l.clone().get(), 3);
        assert_eq!(l.workers(), 4);
    }

    #[test]
    // Real threads and sleeps; the pool's own tests cover the same under Miri-free CI.
    #[cfg_attr(miri, ignore)]
    fn workers_above_the_limit_wait_until_it_rises_or_closes() {
        let l = ActiveLimit::new(3, 1);
        let passed = Arc::new(AtomicUsize::new(0));
        let spawn = |i: usize| {
            let (l, p) = (l.clone(), Arc::clone(&passed));
            std::thread::spawn(move || {
                l.admit(i);
                p.fetch_add(1, Ordering::SeqCst);
            })
        };
        l.admit(0); // below the limit: no wait
        let t1 = spawn(1);
        let t2 = spawn(2);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            passed.load(Ordering::SeqCst),
            0,
            "1 and 2 are above a limit of 1"
        );
        l.set(2);
        t1.join().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            passed.load(Ordering::SeqCst),
            1,
            "2 is still above a limit of 2"
        );
        l.close();
        t2.join().unwrap();
        assert_eq!(passed.load(Ordering::SeqCst), 2);
    }
}
