//! The copy thread of a GPU device: the one thread that issues host-to-device copies onto the
//! copy stream, so the engine's readers never call the driver.
//!
//! Why: sixteen readers each calling cuMemcpyHtoDAsync and cuEventRecord on one stream queue on
//! the driver's locks. On an H100 the time inside those calls grew from 26 µs per 4 MiB chunk
//! (one copy each) to 2.9 ms when the chunk went in 256 KiB pieces (docs/BENCHMARKS.md, "Issue
//! 18"), so a copy could not start before its whole chunk was read. Here a reader's copy call
//! only queues the copy (a mutex and a condvar); this thread takes whatever is queued, issues it
//! in order, records one event after the burst and hands that event to the completion thread
//! with every copy's lease and completion.
//!
//! Order: copies are issued in the order their calls returned. Anything that must come after
//! the copies issued so far (a kernel launch, a stream sync) calls [`IssueQueue::flush`] first:
//! it returns at once when nothing is queued, else when this thread has issued what was queued.
//! Errors: a failed issue fails that copy and every copy queued after it (the device is broken:
//! a copy with checked arguments fails only when the context has), and goes to the device's
//! deferred errors so the next `synchronize` reports it too.
//! Opt-in: `DS4_COPY_THREAD=on` (or `GpuConfig::copy_thread = Some(true)`); by default the
//! caller's thread issues. Measured on an H100 (docs/BENCHMARKS.md, "Issue 18", runs 3-8) it
//! bought nothing: the readers' time inside the copy calls was 40-50 µs of a 400-500 µs chunk,
//! and the staged expert pattern is bounded by the copies queueing on the link, not by the
//! calls.

use super::stream::Stream;
use super::Runtime;
use crate::device::buffer::{DeferredErrors, WriteLease};
use crate::device::completion::{Completion, CompletionQueue};
use crate::device::{handoff, DeviceError};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

/// Most copies issued before one event is recorded (bounds how long a burst holds its slots).
pub(super) const BURST: usize = 32;

/// A FIFO of jobs between the callers and one worker thread, with a flush that waits until the
/// jobs queued before it have been taken and run. Generic so its rules are tested on the host.
pub(super) struct IssueQueue<J> {
    st: Mutex<State<J>>,
    /// Jobs queued and not yet taken (mirrors `st.jobs.len()` for the worker's polling).
    waiting: AtomicUsize,
    work: Condvar,
    issued: Condvar,
}

struct State<J> {
    jobs: VecDeque<J>,
    /// Jobs queued so far / jobs the worker has finished issuing (both only grow).
    queued: u64,
    done: u64,
    closed: bool,
    /// Callers waiting in `flush`.
    flushers: usize,
}

impl<J> IssueQueue<J> {
    pub(super) fn new() -> Self {
        Self {
            st: Mutex::new(State {
                jobs: VecDeque::new(),
                queued: 0,
                done: 0,
                closed: false,
                flushers: 0,
            }),
            work: Condvar::new(),
            issued: Condvar::new(),
            waiting: AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<J>> {
        self.st.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `job`; `Err(job)` once the queue is closed (the caller runs it itself).
    pub(super) fn push(&self, job: J) -> Result<(), J> {
        let mut st = self.lock();
        if st.closed {
            return Err(job);
        }
        let wake = st.jobs.is_empty();
        st.jobs.push_back(job);
        st.queued += 1;
        self.waiting.fetch_add(1, Ordering::Release);
        drop(st);
        if wake {
            self.work.notify_one();
        }
        Ok(())
    }

    /// Blocks until every job queued before this call has been issued (returned from the
    /// worker's `issue`). Returns at once when nothing is outstanding.
    pub(super) fn flush(&self) {
        let mut st = self.lock();
        let target = st.queued;
        if st.done >= target {
            return;
        }
        st.flushers += 1;
        while st.done < target {
            st = self.issued.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        st.flushers -= 1;
    }

    /// Refuses new jobs; the worker issues what is queued, then `run` returns.
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.work.notify_all();
    }

    /// The worker's loop: takes up to `burst` queued jobs at a time, in order, and hands them
    /// to `issue` (which empties the vector); returns once closed and empty. `issue` must not
    /// panic (a flush would then wait for ever): the GPU's issues only `Result`s.
    pub(super) fn run(&self, burst: usize, mut issue: impl FnMut(&mut Vec<J>)) {
        let mut batch = Vec::with_capacity(burst);
        loop {
            if self.waiting.load(Ordering::Acquire) == 0 {
                handoff::poll_for(handoff::spin(), || self.waiting.load(Ordering::Acquire) > 0);
            }
            let mut st = self.lock();
            while st.jobs.is_empty() && !st.closed {
                st = self.work.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
            if st.jobs.is_empty() {
                return;
            }
            let n = st.jobs.len().min(burst.max(1));
            batch.extend(st.jobs.drain(..n));
            self.waiting.fetch_sub(n, Ordering::Release);
            drop(st);
            issue(&mut batch);
            batch.clear();
            let mut st = self.lock();
            st.done += n as u64;
            let wake = st.flushers > 0;
            drop(st);
            if wake {
                self.issued.notify_all();
            }
        }
    }
}

/// One queued host-to-device copy: `len` bytes from pinned `from` to device address `to`.
pub(super) struct H2d {
    pub(super) to: u64,
    pub(super) from: SendPtr,
    pub(super) len: usize,
    /// Keeps the destination range alive and exclusive until the copy has run.
    pub(super) lease: Arc<WriteLease>,
    /// Completes (through the completion thread) once the copy has run, or fails.
    pub(super) done: Arc<Completion>,
}

/// A pointer into a [`PinnedBuf`](crate::device::PinnedBuf), which outlives the copy: the
/// buffer waits for the copy's event (completed only after this thread issued the copy and the
/// GPU ran it, or failed it) before any host write or free.
pub(super) struct SendPtr(pub(super) *const u8);

// SAFETY: see the type's doc: only this thread reads through it, while the buffer waits.
unsafe impl Send for SendPtr {}

/// The device's copy thread; dropping it issues what is queued, then joins it.
pub(super) struct CopyThread {
    pub(super) queue: Arc<IssueQueue<H2d>>,
    thread: Option<JoinHandle<()>>,
}

impl CopyThread {
    /// Starts the thread (it binds the device first). `done` queues each burst's event on the
    /// completion thread; `deferred` keeps issue errors for the device's next `synchronize`.
    pub(super) fn start<R: Runtime>(
        rt: Arc<R>,
        stream: Arc<Stream<R>>,
        done: CompletionQueue,
        deferred: Arc<DeferredErrors>,
    ) -> Result<Self, DeviceError> {
        let queue = Arc::new(IssueQueue::new());
        let q = queue.clone();
        let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
        let thread = std::thread::Builder::new()
            .name(format!("ds4-{}-copy", R::LABEL))
            .spawn(move || {
                let bound = rt.bind();
                let ok = bound.is_ok();
                let _ = ready_tx.send(bound);
                if !ok {
                    return;
                }
                let mut failed: Option<String> = None;
                q.run(BURST, |batch| {
                    issue_burst(&*rt, &stream, &done, &deferred, &mut failed, batch)
                });
            })
            .map_err(|e| DeviceError::Backend {
                backend: R::KIND,
                call: "spawn copy thread",
                code: e.raw_os_error().unwrap_or(-1) as i64,
                detail: e.to_string(),
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self {
                queue,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(DeviceError::StreamClosed(R::KIND))
            }
        }
    }
}

impl Drop for CopyThread {
    fn drop(&mut self) {
        self.queue.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Issues one burst in order, then records one event after it and queues that event with the
/// burst's leases and completions. After a failure every later copy fails unissued.
fn issue_burst<R: Runtime>(
    rt: &R,
    stream: &Stream<R>,
    done: &CompletionQueue,
    deferred: &DeferredErrors,
    failed: &mut Option<String>,
    batch: &mut Vec<H2d>,
) {
    let (mut leases, mut dones) = (Vec::with_capacity(batch.len()), Vec::new());
    for j in batch.drain(..) {
        if failed.is_none() && j.len > 0 {
            // SAFETY: bound (the thread bound at start); `from..from + len` lies in pinned memory
            // that waits for this copy's completion before any write or free (SendPtr), and
            // `to..to + len` lies in device memory the lease keeps alive and exclusive (checked
            // by `copy_h2d_leased` before queueing).
            if let Err(e) = unsafe { rt.copy_h2d_async(j.to, j.from.0, j.len, stream.raw) } {
                *failed = Some(e.to_string());
                deferred.push(e);
            }
        }
        match failed {
            Some(why) => {
                drop(j.lease);
                j.done.fail(why.clone());
            }
            None => {
                leases.push(j.lease);
                dones.push(j.done);
            }
        }
    }
    if dones.is_empty() {
        return;
    }
    match stream.record() {
        Ok(ev) => done.track_group(Box::new(ev), leases, dones),
        Err(e) => {
            // Issued copies with no event to wait on: wait for the stream itself before the
            // leases go, then fail them (the device is broken).
            let _ = stream.synchronize();
            let why = e.to_string();
            deferred.push(e);
            drop(leases);
            for d in dones {
                d.fail(why.clone());
            }
            *failed = Some(why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    #[test]
    fn jobs_run_in_order_in_bursts_and_flush_waits_for_them() {
        let q = Arc::new(IssueQueue::<u64>::new());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let issued = Arc::new(AtomicU64::new(0));
        let worker = {
            let (q, seen, issued) = (q.clone(), seen.clone(), issued.clone());
            std::thread::spawn(move || {
                q.run(4, |b: &mut Vec<u64>| {
                    assert!(!b.is_empty() && b.len() <= 4, "burst of {}", b.len());
                    std::thread::sleep(Duration::from_millis(2));
                    issued.fetch_add(b.len() as u64, Ordering::SeqCst);
                    seen.lock().unwrap().extend(b.drain(..));
                })
            })
        };
        for i in 0..50u64 {
            assert!(q.push(i).is_ok());
        }
        q.flush();
        // Every job queued before the flush has been issued when it returns.
        assert_eq!(issued.load(Ordering::SeqCst), 50);
        q.flush(); // nothing outstanding: returns at once
        q.close();
        assert_eq!(q.push(99), Err(99), "a closed queue refuses jobs");
        worker.join().unwrap();
        assert_eq!(*seen.lock().unwrap(), (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn close_issues_what_is_queued_before_run_returns() {
        let q = Arc::new(IssueQueue::<u32>::new());
        for i in 0..10 {
            q.push(i).unwrap();
        }
        q.close();
        let mut got = Vec::new();
        q.run(3, |b| got.append(b));
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        q.flush(); // closed and empty: returns
    }

    #[test]
    fn concurrent_pushers_and_flushers_never_see_their_job_unissued() {
        let q = Arc::new(IssueQueue::<(usize, u64)>::new());
        let last = Arc::new((0..4).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
        let worker = {
            let (q, last) = (q.clone(), last.clone());
            std::thread::spawn(move || {
                q.run(BURST, |b| {
                    for (t, i) in b.drain(..) {
                        // Per pusher, jobs arrive in the order they were pushed.
                        assert_eq!(last[t].swap(i, Ordering::SeqCst) + 1, i);
                    }
                })
            })
        };
        let pushers: Vec<_> = (0..4)
            .map(|t| {
                let (q, last) = (q.clone(), last.clone());
                std::thread::spawn(move || {
                    for i in 1..=2000u64 {
                        q.push((t, i)).unwrap();
                        if i % 97 == 0 {
                            q.flush();
                            assert!(last[t].load(Ordering::SeqCst) >= i, "flush returned early");
                        }
                    }
                })
            })
            .collect();
        for p in pushers {
            p.join().unwrap();
        }
        q.close();
        worker.join().unwrap();
        assert!(last.iter().all(|l| l.load(Ordering::SeqCst) == 2000));
    }
}
