//! Requests, tickets and the exactly-once completion machinery.
//!
//! A submitted batch becomes one [`RequestState`] with a count of outstanding chunks. Each chunk
//! carries a [`ChunkToken`]; finishing the token (ok or error) decrements the count and the last
//! one completes the [`Ticket`]. A token dropped without being finished (a cancelled job, a
//! panicking thread) finishes itself with an error, and a `RequestState` dropped before it
//! completed completes its ticket with an error, so every ticket completes exactly once whatever
//! path a chunk takes. Completion first releases the destination write leases, so a caller that
//! wakes up can read its buffer at once.

use super::error::EngineError;
use super::stats::Stats;
use crate::device::{DeviceBuffer, WriteLease};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// One range of the file to bring into `dst[dst_offset..dst_offset + len]`.
///
/// `dst` is device memory from [`crate::device::Device::alloc`] or host memory from
/// [`DeviceBuffer::host`]; host-visible destinations are read into directly, others go through a
/// staging slot and an async copy. While the request is in flight the engine holds its own `Arc`
/// and an exclusive write lease on the range.
#[derive(Clone, Debug)]
pub struct ReadRequest {
    /// Byte offset in the file.
    pub offset: u64,
    /// Bytes to read (0 is allowed and reads nothing).
    pub len: usize,
    pub dst: Arc<DeviceBuffer>,
    pub dst_offset: usize,
    /// Tensor or expert name, carried into errors.
    pub label: Option<Arc<str>>,
}

impl ReadRequest {
    pub fn new(offset: u64, len: usize, dst: Arc<DeviceBuffer>, dst_offset: usize) -> Self {
        Self {
            offset,
            len,
            dst,
            dst_offset,
            label: None,
        }
    }

    /// Attaches a tensor / expert name for error messages.
    pub fn with_label(mut self, label: impl Into<Arc<str>>) -> Self {
        self.label = Some(label.into());
        self
    }
}

#[derive(Default)]
struct CompletionState {
    result: Option<Result<(), EngineError>>,
    done: bool,
    waker: Option<Waker>,
}

/// The rendezvous between the engine (completes once) and a ticket (waits or polls).
#[derive(Default)]
pub(crate) struct Completion {
    state: Mutex<CompletionState>,
    cv: Condvar,
}

impl Completion {
    /// Stores the result and wakes the waiter; a second call is ignored.
    fn complete(&self, r: Result<(), EngineError>) {
        let waker = {
            let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if st.done {
                return;
            }
            st.done = true;
            st.result = Some(r);
            st.waker.take()
        };
        self.cv.notify_all();
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn is_done(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .done
    }
}

/// A handle on a submitted batch. `wait()` blocks; `.await` works on any executor (waker based).
/// Dropping it early is safe: the engine keeps the destinations alive and finishes the reads.
#[must_use = "a ticket says when the bytes have arrived"]
pub struct Ticket {
    c: Arc<Completion>,
}

impl Ticket {
    pub(crate) fn new(c: Arc<Completion>) -> Self {
        Self { c }
    }

    /// True when the batch has completed (ok or not).
    pub fn is_done(&self) -> bool {
        self.c.is_done()
    }

    /// A handle that can wait for this batch to finish from another thread.
    pub fn watch(&self) -> TicketWatch {
        TicketWatch { c: self.c.clone() }
    }

    /// Blocks until every range of the batch has arrived, or the first error.
    pub fn wait(self) -> Result<(), EngineError> {
        let mut st = self.c.state.lock().unwrap_or_else(PoisonError::into_inner);
        while !st.done {
            st = self.c.cv.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        st.result.take().unwrap_or(Err(EngineError::AlreadyTaken))
    }

    /// Like [`Self::wait`] with a limit; gives the ticket back on timeout.
    pub fn wait_timeout(self, limit: Duration) -> Result<Result<(), EngineError>, Ticket> {
        let deadline = Instant::now() + limit;
        {
            let mut st = self.c.state.lock().unwrap_or_else(PoisonError::into_inner);
            while !st.done {
                let now = Instant::now();
                if now >= deadline {
                    drop(st);
                    return Err(self);
                }
                st = self
                    .c
                    .cv
                    .wait_timeout(st, deadline - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
        Ok(self.wait())
    }
}

/// A second handle on a ticket's completion ([`Ticket::watch`]): waits until the batch is over
/// without taking its result (the ticket keeps that). For a thread that only needs to know
/// when to look.
#[derive(Clone)]
pub struct TicketWatch {
    c: Arc<Completion>,
}

impl TicketWatch {
    /// Blocks until the batch has completed (ok or not).
    pub fn wait(&self) {
        let mut st = self.c.state.lock().unwrap_or_else(PoisonError::into_inner);
        while !st.done {
            st = self.c.cv.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Future for Ticket {
    type Output = Result<(), EngineError>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut st = self.c.state.lock().unwrap_or_else(PoisonError::into_inner);
        if st.done {
            return Poll::Ready(st.result.take().unwrap_or(Err(EngineError::AlreadyTaken)));
        }
        match &mut st.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("done", &self.is_done())
            .finish()
    }
}

/// One submitted batch, shared by its chunks.
pub(crate) struct RequestState {
    remaining: AtomicU64,
    /// Set by the one `finalize` that completes the request.
    finalized: AtomicBool,
    error: Mutex<Option<EngineError>>,
    leases: Mutex<Vec<Arc<WriteLease>>>,
    started: Instant,
    /// Chunks of the request (for the stage trace).
    chunks: u64,
    completion: Arc<Completion>,
    stats: Arc<Stats>,
}

impl RequestState {
    pub(crate) fn new(
        chunks: u64,
        leases: Vec<Arc<WriteLease>>,
        completion: Arc<Completion>,
        stats: Arc<Stats>,
    ) -> Arc<Self> {
        let s = Arc::new(Self {
            remaining: AtomicU64::new(chunks),
            finalized: AtomicBool::new(false),
            error: Mutex::new(None),
            leases: Mutex::new(leases),
            started: Instant::now(),
            chunks,
            completion,
            stats,
        });
        if chunks == 0 {
            s.finalize();
        }
        s
    }

    fn finish_chunk(&self, r: Result<(), EngineError>) {
        if let Err(e) = r {
            self.error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert(e);
        }
        // AcqRel: the last finisher sees every other chunk's writes before completing.
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.finalize();
        }
    }

    fn finalize(&self) {
        self.leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let err = self
            .error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let r = match err {
            Some(e) => Err(e),
            None => Ok(()),
        };
        if self.finalized.swap(true, Ordering::AcqRel) {
            return;
        }
        // Stats first: a caller woken by the completion must see its request counted.
        self.stats.request(self.started.elapsed(), r.is_ok());
        self.stats.trace.request(self.started, self.chunks);
        self.completion.complete(r);
    }
}

impl Drop for RequestState {
    fn drop(&mut self) {
        // Safety net: every token finishes itself on drop, so this only fires if a request was
        // dropped with chunks never planned (a dispatcher that stopped early).
        if !self.finalized.load(Ordering::Acquire) {
            self.error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert(EngineError::Shutdown {
                    offset: 0,
                    len: 0,
                    label: None,
                });
            self.finalize();
        }
    }
}

/// The right (and duty) to finish one chunk exactly once. It carries the chunk's share of the
/// destination's write lease and drops it before the chunk counts as finished, so that when the
/// last chunk completes the request no engine thread holds the lease any more (a caller woken by
/// the ticket can read its destination back at once).
pub(crate) struct ChunkToken {
    req: Option<Arc<RequestState>>,
    pub(crate) offset: u64,
    pub(crate) len: usize,
    pub(crate) label: Option<Arc<str>>,
    /// `None` only for chunks failed before they were planned (nothing to write).
    pub(crate) lease: Option<Arc<WriteLease>>,
}

impl ChunkToken {
    pub(crate) fn new(
        req: Arc<RequestState>,
        offset: u64,
        len: usize,
        label: Option<Arc<str>>,
        lease: Option<Arc<WriteLease>>,
    ) -> Self {
        Self {
            req: Some(req),
            offset,
            len,
            label,
            lease,
        }
    }

    pub(crate) fn finish(mut self, r: Result<(), EngineError>) {
        self.lease = None;
        if let Some(req) = self.req.take() {
            if r.is_ok() {
                req.stats.delivered(self.len as u64);
            }
            req.finish_chunk(r);
        }
    }

    pub(crate) fn shutdown_error(&self) -> EngineError {
        EngineError::Shutdown {
            offset: self.offset,
            len: self.len as u64,
            label: self.label.clone(),
        }
    }
}

impl Drop for ChunkToken {
    fn drop(&mut self) {
        self.lease = None;
        if let Some(req) = self.req.take() {
            req.finish_chunk(Err(EngineError::Lost {
                offset: self.offset,
                len: self.len as u64,
                label: self.label.clone(),
            }));
        }
    }
}
