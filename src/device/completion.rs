//! The completion thread of a GPU backend: turns a stream's raw events into [`Event`]s that
//! complete only after the copy's write lease has been released.
//!
//! Why: the device contract says a backend keeps a copy's [`WriteLease`] until the copy has run
//! and drops it *before* the copy's event completes, so whoever waits on the event finds the
//! range free (an engine request that finishes, a read-back right after). A GPU cannot run our
//! code when a copy lands, and a stream callback (`cuLaunchHostFunc`) may not make driver calls,
//! while dropping the last lease may free device memory (a driver call). So one thread per
//! device takes each copy's raw event in issue order, waits for it, drops the lease (and with
//! it, possibly, the buffer), destroys the raw event, and only then marks our event complete.
//!
//! Cost: one thread and a few microseconds per copy between the GPU finishing and our event
//! completing; the thread blocks in the driver's event wait, it does not spin on its own.
//! Limits: completions are handed out in issue order, which is the stream's order anyway.

use super::buffer::{Event, EventImpl, WriteLease};
use super::{BackendKind, DeviceError};
use crossbeam_channel::{unbounded, Sender};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

/// A backend's raw event (CUevent, hipEvent_t): waited for once on the completion thread, then
/// dropped there (its `Drop` destroys it).
pub(crate) trait RawEvent: Send {
    /// Blocks until the operation recorded before the event has finished; an error says it
    /// failed (or the device did).
    fn wait(&self) -> Result<(), DeviceError>;
}

#[derive(Default)]
struct State {
    done: Option<Result<(), String>>,
}

/// Whether completions stamp when they were queued and seen over: set by the first engine that
/// opens a stage trace (`DS4_STAGE_TRACE`), so untraced processes pay no clock reads per copy.
static STAMP: AtomicBool = AtomicBool::new(false);

/// Turns the stamps of [`Completion`] on for the rest of the process (the stage trace reads them).
pub(crate) fn stamp_times() {
    STAMP.store(true, Ordering::Relaxed);
}

fn stamping() -> bool {
    STAMP.load(Ordering::Relaxed)
}

/// Our side of one queued operation: complete once the completion thread has released what the
/// operation held.
pub(crate) struct Completion {
    backend: BackendKind,
    state: Mutex<State>,
    cv: Condvar,
    /// Mirrors `state.done.is_some()` for waiters that poll before they park.
    set_flag: AtomicBool,
    /// When the operation's event went to the completion thread, and when it was seen over
    /// (for the engine's stage trace; stamped only once [`stamp_times`] was called).
    queued_at: OnceLock<Instant>,
    done_at: OnceLock<Instant>,
}

impl Completion {
    fn new(backend: BackendKind) -> Arc<Self> {
        Arc::new(Self {
            backend,
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            set_flag: AtomicBool::new(false),
            queued_at: OnceLock::new(),
            done_at: OnceLock::new(),
        })
    }

    /// Fails an operation that never reached the GPU (nothing of it runs: its lease may go
    /// first, then this).
    pub(crate) fn fail(&self, detail: String) {
        self.set(Err(detail));
    }

    fn set(&self, r: Result<(), String>) {
        if stamping() {
            let _ = self.done_at.set(Instant::now());
        }
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if st.done.is_none() {
            st.done = Some(r);
        }
        self.set_flag.store(true, Ordering::Release);
        self.cv.notify_all();
    }

    fn result(&self, r: &Result<(), String>) -> Result<(), DeviceError> {
        r.clone().map_err(|detail| DeviceError::Backend {
            backend: self.backend,
            call: "asynchronous copy",
            code: -1,
            detail,
        })
    }
}

// SAFETY: `done` is set only by the completion thread after the raw event's wait returned (the
// operation is over: the driver's promise for its event) and after the operation's lease was
// dropped; or, when the completion thread is gone, by `Job::drop` after the same wait. So once
// `query` says true or `wait` returns, the operation touches no memory any more.
unsafe impl EventImpl for Completion {
    fn query(&self) -> Result<bool, DeviceError> {
        match &self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .done
        {
            None => Ok(false),
            Some(r) => self.result(r).map(|_| true),
        }
    }

    fn wait(&self) -> Result<(), DeviceError> {
        super::handoff::poll_for(super::handoff::spin(), || {
            self.set_flag.load(Ordering::Acquire)
        });
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(r) = &st.done {
                return self.result(r);
            }
            st = self.cv.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn times(&self) -> (Option<Instant>, Option<Instant>) {
        (self.queued_at.get().copied(), self.done_at.get().copied())
    }
}

/// One queued operation in the completion thread's queue.
struct Job {
    raw: Option<Box<dyn RawEvent>>,
    leases: Vec<Arc<WriteLease>>,
    /// Every operation the raw event covers (the copy thread records one event per burst).
    done: Vec<Arc<Completion>>,
}

impl Job {
    /// Waits for the raw event, releases the lease and the raw event, then completes.
    fn finish(&mut self) {
        let r = match self.raw.as_ref() {
            Some(raw) => raw.wait().map_err(|e| e.to_string()),
            None => Ok(()),
        };
        // Order matters: the leases go before anyone can see the completion.
        self.leases.clear();
        self.raw = None;
        for d in self.done.drain(..) {
            d.set(r.clone());
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // A job dropped unrun (the thread is gone) still must not complete early.
        if self.raw.is_some() {
            self.finish();
        }
    }
}

/// The completion thread. Dropping it finishes every queued job, then joins the thread.
pub(crate) struct Completer {
    backend: BackendKind,
    tx: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Completer {
    /// Starts the thread. `bind` runs first on it (a GPU backend makes its context current).
    pub(crate) fn start(
        backend: BackendKind,
        bind: impl FnOnce() -> Result<(), DeviceError> + Send + 'static,
    ) -> Result<Self, DeviceError> {
        let (tx, rx) = unbounded::<Job>();
        let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
        let thread = std::thread::Builder::new()
            .name(format!("ds4-{backend}-done"))
            .spawn(move || {
                let bound = bind();
                let ok = bound.is_ok();
                let _ = ready_tx.send(bound);
                if !ok {
                    return;
                }
                while let Some(mut job) = super::handoff::recv(&rx) {
                    job.finish();
                }
            })
            .map_err(|e| DeviceError::Backend {
                backend,
                call: "spawn completion thread",
                code: e.raw_os_error().unwrap_or(-1) as i64,
                detail: e.to_string(),
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self {
                backend,
                tx: Some(tx),
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(DeviceError::StreamClosed(backend))
            }
        }
    }

    /// Queues `raw` (recorded after an operation on the stream) with the lease the operation
    /// holds; returns the event that completes after both are released. If the thread is gone,
    /// finishes the job here (waits) so nothing completes early.
    pub(crate) fn track(&self, raw: Box<dyn RawEvent>, lease: Option<Arc<WriteLease>>) -> Event {
        self.track_leases(raw, lease.into_iter().collect())
    }

    /// [`Self::track`] for an operation that holds several ranges (a device-to-device copy
    /// holds its source and its destination).
    pub(crate) fn track_leases(
        &self,
        raw: Box<dyn RawEvent>,
        leases: Vec<Arc<WriteLease>>,
    ) -> Event {
        let done = Completion::new(self.backend);
        self.queue().track_group(raw, leases, vec![done.clone()]);
        Event::new(done)
    }

    /// A handle that queues jobs from another thread (the copy thread); the completion thread
    /// ends only once every handle is gone.
    pub(crate) fn queue(&self) -> CompletionQueue {
        CompletionQueue {
            tx: self.tx.clone(),
        }
    }

    /// A completion not yet tied to an operation, and the event that waits for it: the copy
    /// thread later queues it with the raw event of its copy ([`CompletionQueue::track_group`])
    /// or fails it ([`Completion::fail`]).
    pub(crate) fn pending(&self) -> (Arc<Completion>, Event) {
        let done = Completion::new(self.backend);
        (done.clone(), Event::new(done))
    }

    /// Waits until every job queued so far has been finished.
    pub(crate) fn drain(&self) {
        let done = Completion::new(self.backend);
        let job = Job {
            raw: None,
            leases: Vec::new(),
            done: vec![done.clone()],
        };
        if let Some(tx) = &self.tx {
            if tx.send(job).is_ok() {
                let _ = done.wait();
            }
        }
    }
}

/// Queues jobs for a device's completion thread from any thread.
pub(crate) struct CompletionQueue {
    tx: Option<Sender<Job>>,
}

impl CompletionQueue {
    /// Queues `raw` (recorded after one or more operations) with the leases they hold; each of
    /// `done` completes once the raw event has been waited for and the leases dropped. If the
    /// thread is gone, finishes the job here (waits) so nothing completes early.
    pub(crate) fn track_group(
        &self,
        raw: Box<dyn RawEvent>,
        leases: Vec<Arc<WriteLease>>,
        done: Vec<Arc<Completion>>,
    ) {
        if stamping() {
            let now = Instant::now();
            for d in &done {
                let _ = d.queued_at.set(now);
            }
        }
        let job = Job {
            raw: Some(raw),
            leases,
            done,
        };
        match &self.tx {
            Some(tx) => {
                if let Err(unsent) = tx.send(job) {
                    drop(unsent.into_inner()); // Job::drop waits and completes
                }
            }
            None => drop(job),
        }
    }
}

impl Drop for Completer {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
