//! The device's streams and their events: [`Stream`] (a non-blocking stream with a pool of idle
//! events), [`GpuEvent`] (one recorded event, waited for on the completion thread, then back to
//! its pool), and [`CopyStreams`] (the host-to-device copy streams: one, or one per reader lane).

use super::runtime::Runtime;
use crate::device::completion::RawEvent;
use crate::device::DeviceError;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// A stream of the device (the copy stream; the kernels have one of their own).
pub(super) struct Stream<R: Runtime> {
    rt: Arc<R>,
    pub(super) raw: R::Stream,
    events: Arc<EventPool<R>>,
}

// SAFETY: a stream may be used from any thread with its device bound (which every use here
// makes sure of); the runtime serialises work on it (`Runtime`'s contract).
unsafe impl<R: Runtime> Send for Stream<R> {}
// SAFETY: as above.
unsafe impl<R: Runtime> Sync for Stream<R> {}

impl<R: Runtime> Stream<R> {
    /// The device is bound (by the caller). Waits for its events poll them for `spin` first.
    pub(super) fn new(rt: &Arc<R>, spin: Duration) -> Result<Self, DeviceError> {
        // SAFETY: bound by the caller.
        let raw = unsafe { rt.stream_create() }?;
        Ok(Self {
            rt: rt.clone(),
            raw,
            events: Arc::new(EventPool {
                rt: rt.clone(),
                free: Mutex::new(Vec::new()),
                spin,
            }),
        })
    }

    pub(super) fn synchronize(&self) -> Result<(), DeviceError> {
        self.rt.bind()?;
        // SAFETY: bound; a live stream.
        unsafe { self.rt.stream_sync(self.raw) }
    }

    /// Records an event after everything queued so far (the device is bound by the caller): a
    /// pooled one when there is one (a copy per staging piece would otherwise create and
    /// destroy an event each).
    pub(super) fn record(&self) -> Result<GpuEvent<R>, DeviceError> {
        let raw = match self.events.take() {
            Some(e) => e,
            // SAFETY: bound by the caller.
            None => unsafe { self.rt.event_create() }?,
        };
        let ev = GpuEvent {
            pool: self.events.clone(),
            raw,
            reusable: Cell::new(false),
        };
        // SAFETY: a live event and stream; bound.
        unsafe { self.rt.event_record(ev.raw, self.raw) }?;
        Ok(ev)
    }
}

impl<R: Runtime> Drop for Stream<R> {
    fn drop(&mut self) {
        if self.rt.bind().is_ok() {
            // SAFETY: the stream is ours and used by nobody else any more; pending work finishes
            // first (the completion thread waited for every copy before this runs).
            unsafe {
                let _ = self.rt.stream_sync(self.raw);
                let _ = self.rt.stream_destroy(self.raw);
            }
        }
    }
}

/// Most idle events a stream keeps for reuse (more are destroyed).
const POOLED_EVENTS: usize = 256;

/// Events whose last recording was waited for successfully: idle, ready to be recorded again.
struct EventPool<R: Runtime> {
    rt: Arc<R>,
    free: Mutex<Vec<R::Event>>,
    /// How long a wait polls an event before it blocks in the driver.
    spin: Duration,
}

// SAFETY: idle events may be recorded, waited for and destroyed from any thread with their
// device bound (every use binds first); the mutex serialises access to the list.
unsafe impl<R: Runtime> Send for EventPool<R> {}
// SAFETY: as above.
unsafe impl<R: Runtime> Sync for EventPool<R> {}

impl<R: Runtime> EventPool<R> {
    fn take(&self) -> Option<R::Event> {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
    }

    /// Keeps an idle event, or destroys it when the pool is full.
    fn give(&self, raw: R::Event) {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        if free.len() < POOLED_EVENTS {
            free.push(raw);
            return;
        }
        drop(free);
        destroy_event(&*self.rt, raw);
    }
}

impl<R: Runtime> Drop for EventPool<R> {
    fn drop(&mut self) {
        let free = std::mem::take(self.free.get_mut().unwrap_or_else(PoisonError::into_inner));
        for raw in free {
            destroy_event(&*self.rt, raw);
        }
    }
}

fn destroy_event<R: Runtime>(rt: &R, raw: R::Event) {
    if rt.bind().is_ok() {
        // SAFETY: the event is ours and nobody holds it any more; destroying a pending event is
        // allowed (the runtime releases it at completion).
        let _ = unsafe { rt.event_destroy(raw) };
    }
}

/// One copy's event, waited for on the completion thread, then back to its stream's pool (or
/// destroyed, when its wait failed or never happened).
pub(super) struct GpuEvent<R: Runtime> {
    pool: Arc<EventPool<R>>,
    pub(super) raw: R::Event,
    /// Set when a wait saw the recorded work finish: the event is idle and may be recorded again.
    reusable: Cell<bool>,
}

// SAFETY: an event may be waited for and destroyed from any thread with its device bound.
unsafe impl<R: Runtime> Send for GpuEvent<R> {}

impl<R: Runtime> RawEvent for GpuEvent<R> {
    /// Polls the event for the pool's `spin`, then blocks in the driver: a blocking wait
    /// wakes on the GPU's interrupt, which costs a thread wake-up per event (the completion
    /// thread's latency is every staged chunk's latency).
    fn wait(&self) -> Result<(), DeviceError> {
        let rt = &*self.pool.rt;
        rt.bind()?;
        let mut failed = None;
        // One query even with no spin: an event already over costs no blocking call.
        let over = crate::device::handoff::poll_for(self.pool.spin, || {
            // SAFETY: bound; a live event.
            match unsafe { rt.event_query(self.raw) } {
                Ok(over) => over,
                Err(e) => {
                    failed = Some(e);
                    true
                }
            }
        });
        if let Some(e) = failed {
            return Err(e); // not reused: destroyed on drop
        }
        if over {
            self.reusable.set(true);
            return Ok(());
        }
        // SAFETY: bound; a live event.
        let r = unsafe { rt.event_sync(self.raw) };
        self.reusable.set(r.is_ok());
        r
    }
}

impl<R: Runtime> Drop for GpuEvent<R> {
    fn drop(&mut self) {
        if self.reusable.get() {
            self.pool.give(self.raw);
        } else {
            destroy_event(&*self.pool.rt, self.raw);
        }
    }
}

/// Most copy streams a device keeps (`GpuConfig::copy_streams`; one bit each in a mask).
pub const MAX_COPY_STREAMS: usize = 64;

/// The host-to-device copy streams of a device: stream 0 (device-side copies, memsets, the copy
/// thread's bursts, and every reader's copies when there is one stream) and, with several, one
/// per reader lane: a thread's copies go to stream `lane % n`, where a thread's lane is fixed at
/// its first copy (the engine's readers are long-lived, so each keeps its stream, as KvikIO's
/// threads do).
///
/// Ordering: copies on different streams may run in any order, which is safe because a copy
/// holds its destination's write lease until the completion thread has seen it finish (no two
/// in-flight copies overlap) and a staging slot waits for its own copy's event. What must follow
/// copies (a kernel launch, a sync) waits for every stream that took one: `dirty` marks them.
pub(super) struct CopyStreams<R: Runtime> {
    all: Vec<Arc<Stream<R>>>,
    /// Bit i: stream i (i > 0) took a copy since the compute stream last waited for it.
    dirty: AtomicU64,
    /// Serialises [`CopyStreams::wait_on`]: a launch that finds no dirty stream must still come
    /// after a concurrent launch's waits in the compute stream's order.
    waiting: Mutex<()>,
}

impl<R: Runtime> CopyStreams<R> {
    /// `n` streams (clamped to 1..=[`MAX_COPY_STREAMS`]); the device is bound by the caller.
    pub(super) fn new(rt: &Arc<R>, n: usize, spin: Duration) -> Result<Self, DeviceError> {
        let n = n.clamp(1, MAX_COPY_STREAMS);
        let all = (0..n)
            .map(|_| Stream::new(rt, spin).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            all,
            dirty: Default::default(),
            waiting: Mutex::new(()),
        })
    }

    /// Stream 0.
    pub(super) fn first(&self) -> &Arc<Stream<R>> {
        &self.all[0]
    }

    /// How many streams there are.
    pub(super) fn len(&self) -> usize {
        self.all.len()
    }

    /// The calling thread's stream and its index.
    pub(super) fn this_thread(&self) -> (usize, &Stream<R>) {
        let i = match self.all.len() {
            1 => 0,
            n => lane() % n,
        };
        (i, &self.all[i])
    }

    /// Notes that stream `i` took a copy (after it was issued).
    pub(super) fn mark(&self, i: usize) {
        if i > 0 {
            self.dirty.fetch_or(1 << i, Ordering::AcqRel);
        }
    }

    /// Makes `waiter` wait (on the GPU) for everything issued so far on stream 0 and on every
    /// stream marked since the last call; the device is bound by the caller.
    pub(super) fn wait_on(&self, waiter: &Stream<R>) -> Result<(), DeviceError> {
        let _one = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        let dirty = self.dirty.swap(0, Ordering::AcqRel);
        for (i, s) in self.all.iter().enumerate() {
            if i == 0 || dirty & (1 << i) != 0 {
                let ev = s.record()?;
                // SAFETY: bound by the caller; a live, recorded event and a live stream.
                unsafe { s.rt.stream_wait(waiter.raw, ev.raw) }?;
                // A wait takes the event's state when it is queued, so the event may be
                // recorded again at once.
                ev.reusable.set(true);
            }
        }
        Ok(())
    }

    /// Waits (on the host) for every stream.
    pub(super) fn synchronize(&self) -> Result<(), DeviceError> {
        self.all.iter().try_for_each(|s| s.synchronize())
    }
}

/// The calling thread's copy lane: 0, 1, 2, ... in the order threads first ask.
fn lane() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static LANE: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    LANE.with(|l| *l)
}
