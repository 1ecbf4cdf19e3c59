//! The `host` backend: device memory is host memory, the "stream" is one copy thread that runs
//! commands in issue order, events are completion flags (Mutex + Condvar).
//!
//! Why: every test and CI run uses it, so it must behave like a GPU stream where it matters:
//! copies are asynchronous, in order, and only visible through events. Knobs emulate a discrete
//! GPU and make races testable: `host_visible = false` makes `alloc` return memory the engine
//! cannot write directly (so requests go through the staging ring and the copy thread),
//! `copy_delay` slows every copy down, and a [`CopyGate`] holds the copy thread at a gate (and
//! can fail copies) so tests order events with gates, not sleeps.
//!
//! Limits: one copy thread, memcpy speed; device-to-host reads also run on the copy thread (so
//! they are ordered after earlier copies, like a synchronous copy on a GPU stream).

use super::buffer::{
    DeferredErrors, DeviceBuffer, DeviceMemory, Event, EventImpl, PinnedBuf, PinnedMemory,
    WriteLease,
};
use super::{check_range, BackendKind, Device, DeviceError, PINNED_ALIGN};
use crossbeam_channel::{unbounded, Sender};
use ds4_io::AlignedBuf;
use std::any::Any;
use std::ptr::NonNull;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Settings of a [`HostDevice`].
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// `alloc` returns host-visible memory (the engine reads straight into it, like a
    /// unified-memory APU). `false` emulates a discrete GPU: staging + copy thread.
    pub host_visible: bool,
    /// Artificial delay before every copy (tests, benches).
    pub copy_delay: Duration,
    /// Test hook: the copy thread stops at this gate before every command while it is closed,
    /// and fails the copies it is told to fail.
    pub gate: Option<Arc<CopyGate>>,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            host_visible: true,
            copy_delay: Duration::ZERO,
            gate: None,
        }
    }
}

/// A gate in front of the host copy thread (tests): while closed, the copy thread waits before
/// running its next command; [`Self::fail_next`] makes the next copies fail instead of running.
#[derive(Debug, Default)]
pub struct CopyGate {
    state: Mutex<GateState>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    closed: bool,
    /// Commands the copy thread has reached the gate with and not yet run.
    waiting: usize,
    fail_next: u64,
}

impl CopyGate {
    /// A gate that starts closed.
    pub fn closed() -> Arc<Self> {
        let g = Arc::new(Self::default());
        g.close();
        g
    }

    pub fn close(&self) {
        self.lock().closed = true;
    }

    pub fn open(&self) {
        self.lock().closed = false;
        self.cv.notify_all();
    }

    /// The next `n` copies fail (their events report an error) instead of copying.
    pub fn fail_next(&self, n: u64) {
        self.lock().fail_next = n;
    }

    /// Waits until the copy thread is held at the closed gate (true), or `limit` passes (false).
    pub fn wait_until_held(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut st = self.lock();
        while st.waiting == 0 {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            st = self
                .cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Called by the copy thread before a command: waits while closed; true = fail this copy.
    fn pass(&self, is_copy: bool) -> bool {
        let mut st = self.lock();
        st.waiting += 1;
        self.cv.notify_all();
        while st.closed {
            st = self.cv.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        st.waiting -= 1;
        if is_copy && st.fail_next > 0 {
            st.fail_next -= 1;
            return true;
        }
        false
    }
}

/// Host memory standing in for device memory.
pub(crate) struct HostMemory {
    buf: AlignedBuf,
    host_visible: bool,
}

impl HostMemory {
    pub(crate) fn new(len: usize, host_visible: bool) -> Result<Self, DeviceError> {
        let buf = AlignedBuf::new(len, PINNED_ALIGN).ok_or(DeviceError::OutOfMemory {
            bytes: len as u64,
            what: "host device memory",
        })?;
        Ok(Self { buf, host_visible })
    }

    /// Start address. Writes go through raw pointers only (never `&mut` to the whole buffer),
    /// so disjoint writers and the copy thread do not alias.
    fn ptr(&self) -> *mut u8 {
        self.buf.as_ptr().cast_mut()
    }
}

// SAFETY: `len` is fixed at allocation; `host_ptr` is the AlignedBuf's start, stable and valid
// for `len` bytes until the AlignedBuf (owned here) is dropped. The copy thread writes it only
// under a write lease and reads it only under a read lease (see `run`).
unsafe impl DeviceMemory for HostMemory {
    fn len(&self) -> usize {
        self.buf.len()
    }
    fn backend(&self) -> BackendKind {
        BackendKind::Host
    }
    fn host_ptr(&self) -> Option<NonNull<u8>> {
        if self.host_visible {
            NonNull::new(self.ptr())
        } else {
            None
        }
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl DeviceBuffer {
    /// Plain page-aligned host memory, usable as a destination with any device (the engine reads
    /// straight into it). Fails cleanly when the allocation fails.
    pub fn host(len: usize) -> Result<Self, DeviceError> {
        Ok(Self::from_memory(Box::new(HostMemory::new(len, true)?)))
    }
}

struct HostPinned(AlignedBuf);

// SAFETY: the AlignedBuf is aligned to PINNED_ALIGN (alloc_pinned asks for it), owned here, so
// its address and length are stable and valid until drop; only the owning PinnedBuf and the
// copies issued from it (fenced by their events) touch it.
unsafe impl PinnedMemory for HostPinned {
    fn as_ptr(&self) -> *mut u8 {
        self.0.as_ptr().cast_mut()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// Event state: pending until the copy thread signals it.
#[derive(Default)]
struct HostEvent {
    state: Mutex<EventState>,
    cv: Condvar,
}

#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum EventState {
    #[default]
    Pending,
    Done,
    /// The copy was told to fail (a [`CopyGate`] fault); it never touched memory.
    Failed,
    /// The command was dropped without running (copy thread gone).
    Dropped,
}

impl HostEvent {
    fn set(&self, s: EventState) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if *st == EventState::Pending {
            *st = s;
        }
        self.cv.notify_all();
    }
    fn result(s: EventState) -> Result<bool, DeviceError> {
        match s {
            EventState::Pending => Ok(false),
            EventState::Done => Ok(true),
            EventState::Failed => Err(DeviceError::Backend {
                backend: BackendKind::Host,
                call: "copy",
                code: -1,
                detail: "injected copy failure".into(),
            }),
            EventState::Dropped => Err(DeviceError::StreamClosed(BackendKind::Host)),
        }
    }
}

// SAFETY: the copy thread sets a state other than Pending only after the command is over and
// has released everything it borrowed (see `run`: the lease is dropped first); a Dropped command
// never ran. So `query() == Ok(true)` and a returned `wait()` mean the memory is free again.
unsafe impl EventImpl for HostEvent {
    fn query(&self) -> Result<bool, DeviceError> {
        Self::result(*self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }
    fn wait(&self) -> Result<(), DeviceError> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        while *st == EventState::Pending {
            st = self.cv.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        Self::result(*st).map(|_| ())
    }
}

/// Signals its event exactly once: the state given to `fire` when the command ran, `Dropped`
/// when it never will.
struct Signal(Arc<HostEvent>);

impl Signal {
    fn fire(self, s: EventState) {
        self.0.set(s);
    }
}

impl Drop for Signal {
    fn drop(&mut self) {
        self.0.set(EventState::Dropped);
    }
}

/// A raw address that crosses to the copy thread. Validity is argued where it is created.
struct RawPtr(*mut u8);
// SAFETY: the pointee's lifetime and exclusivity are guaranteed by the issuer (see Cmd).
unsafe impl Send for RawPtr {}

enum Cmd {
    /// `src` stays valid and unwritten until `signal` fires: it belongs to a `PinnedBuf` whose
    /// event is this signal's. `dst` is the write lease on the target range (it keeps the
    /// buffer alive and every other writer and reader out).
    Copy {
        src: RawPtr,
        dst: Arc<WriteLease>,
        dst_offset: usize,
        len: usize,
        signal: Signal,
    },
    /// Synchronous read: the issuer blocks on `signal`, keeping `src` and `dst` borrowed and a
    /// read lease on the source range.
    Read {
        src: RawPtr,
        dst: RawPtr,
        len: usize,
        signal: Signal,
    },
}

/// The CPU device. Dropping it finishes every queued command, then joins the copy thread.
pub struct HostDevice {
    cfg: HostConfig,
    deferred: Arc<DeferredErrors>,
    tx: Option<Sender<Cmd>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for HostDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostDevice")
            .field("cfg", &self.cfg)
            .finish()
    }
}

impl HostDevice {
    /// Starts the copy thread; fails (StreamClosed) only if the OS refuses to start a thread.
    pub fn new(cfg: HostConfig) -> Result<Self, DeviceError> {
        let (tx, rx) = unbounded::<Cmd>();
        let delay = cfg.copy_delay;
        let gate = cfg.gate.clone();
        let thread = std::thread::Builder::new()
            .name("ds4-host-copy".into())
            .spawn(move || {
                for cmd in rx.iter() {
                    run(cmd, delay, gate.as_deref());
                }
            })
            .map_err(|_| DeviceError::StreamClosed(BackendKind::Host))?;
        Ok(Self {
            cfg,
            deferred: Arc::default(),
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// A discrete-GPU emulation: device memory not host-visible, every copy delayed.
    pub fn discrete(copy_delay: Duration) -> Result<Self, DeviceError> {
        Self::new(HostConfig {
            host_visible: false,
            copy_delay,
            gate: None,
        })
    }

    fn send(&self, cmd: Cmd) -> Result<(), DeviceError> {
        let tx = self
            .tx
            .as_ref()
            .ok_or(DeviceError::StreamClosed(BackendKind::Host))?;
        // On failure the command (and its Signal) is dropped: the event reports StreamClosed.
        tx.send(cmd)
            .map_err(|_| DeviceError::StreamClosed(BackendKind::Host))
    }

    /// Queues a marker; its event completes after every earlier command.
    fn marker(&self) -> Result<Arc<HostEvent>, DeviceError> {
        let ev = Arc::new(HostEvent::default());
        let (src, dst) = (RawPtr(std::ptr::null_mut()), RawPtr(std::ptr::null_mut()));
        self.send(Cmd::Read {
            src,
            dst,
            len: 0,
            signal: Signal(Arc::clone(&ev)),
        })?;
        Ok(ev)
    }
}

fn run(cmd: Cmd, delay: Duration, gate: Option<&CopyGate>) {
    let fail = gate.is_some_and(|g| g.pass(matches!(cmd, Cmd::Copy { .. })));
    match cmd {
        Cmd::Copy {
            src,
            dst,
            dst_offset,
            len,
            signal,
        } => {
            if fail {
                drop(dst);
                return signal.fire(EventState::Failed);
            }
            if !delay.is_zero() {
                std::thread::sleep(delay);
            }
            let buf = dst.buffer();
            if let Some(mem) = buf.memory().as_any().downcast_ref::<HostMemory>() {
                // SAFETY: copy_h2d_leased checked both ranges (dst inside the lease, the lease
                // inside the buffer); src is kept valid by its PinnedBuf until `signal` fires;
                // dst is alive and exclusively ours through the write lease.
                unsafe { std::ptr::copy_nonoverlapping(src.0, mem.ptr().add(dst_offset), len) }
            }
            // Release the range before the event says "done": a caller woken by the event may
            // lease it again at once.
            drop(dst);
            signal.fire(EventState::Done);
        }
        Cmd::Read {
            src,
            dst,
            len,
            signal,
        } => {
            if len > 0 {
                // SAFETY: read_d2h checked the range and blocks until `signal` fires, keeping
                // both borrows and its read lease (no writer on the range) alive; dst is the
                // caller's exclusive `&mut [u8]`.
                unsafe { std::ptr::copy_nonoverlapping(src.0, dst.0, len) }
            }
            signal.fire(EventState::Done);
        }
    }
}

impl Drop for HostDevice {
    fn drop(&mut self) {
        self.tx = None; // The copy thread drains what is queued, then sees the channel closed.
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Device for HostDevice {
    fn name(&self) -> String {
        if self.cfg.host_visible {
            "host (unified memory)".into()
        } else {
            format!(
                "host (discrete emulation, copy delay {:?})",
                self.cfg.copy_delay
            )
        }
    }

    fn kind(&self) -> BackendKind {
        BackendKind::Host
    }

    fn unified_memory(&self) -> bool {
        self.cfg.host_visible
    }

    fn alloc_pinned(&self, len: usize) -> Result<PinnedBuf, DeviceError> {
        let buf = AlignedBuf::new(len, PINNED_ALIGN).ok_or(DeviceError::OutOfMemory {
            bytes: len as u64,
            what: "pinned host memory",
        })?;
        Ok(PinnedBuf::new(
            Box::new(HostPinned(buf)),
            Arc::clone(&self.deferred),
        ))
    }

    fn alloc(&self, len: usize) -> Result<DeviceBuffer, DeviceError> {
        Ok(DeviceBuffer::from_memory(Box::new(HostMemory::new(
            len,
            self.cfg.host_visible,
        )?)))
    }

    fn copy_h2d_leased(
        &self,
        src: &mut PinnedBuf,
        src_offset: usize,
        dst: &Arc<WriteLease>,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), DeviceError> {
        check_range(src_offset, len, src.len(), "pinned buffer")?;
        check_range(dst_offset, len, dst.buffer().len(), "device buffer")?;
        dst.check(dst_offset, len)?;
        let buf = dst.buffer();
        if buf.memory().as_any().downcast_ref::<HostMemory>().is_none() {
            return Err(DeviceError::WrongBackend {
                expected: BackendKind::Host,
                found: buf.backend(),
            });
        }
        let ev = Arc::new(HostEvent::default());
        // SAFETY: src_offset + len <= src.len() (checked above).
        let p = unsafe { src.src_ptr().add(src_offset) }.cast_mut();
        self.send(Cmd::Copy {
            src: RawPtr(p),
            dst: Arc::clone(dst),
            dst_offset,
            len,
            signal: Signal(Arc::clone(&ev)),
        })?;
        src.record(Event::new(ev), src_offset + len);
        Ok(())
    }

    fn read_d2h(
        &self,
        src: &DeviceBuffer,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<(), DeviceError> {
        check_range(offset, dst.len(), src.len(), "device buffer")?;
        let mem = src.memory().as_any().downcast_ref::<HostMemory>().ok_or(
            DeviceError::WrongBackend {
                expected: BackendKind::Host,
                found: src.backend(),
            },
        )?;
        if dst.is_empty() {
            return Ok(());
        }
        // Held until the copy thread has run the read: no writer can start on these bytes.
        let _lease = src.lease_read(offset, dst.len())?;
        let ev = Arc::new(HostEvent::default());
        // SAFETY: offset + dst.len() <= src.len() (checked above).
        let p = unsafe { mem.ptr().add(offset) };
        self.send(Cmd::Read {
            src: RawPtr(p),
            dst: RawPtr(dst.as_mut_ptr()),
            len: dst.len(),
            signal: Signal(Arc::clone(&ev)),
        })?;
        // Both borrows stay alive until the copy thread has run the command.
        ev.wait()
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        self.marker()?.wait()?;
        self.deferred.take()
    }
}
