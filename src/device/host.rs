//! The `host` backend: device memory is host memory, the "stream" is one copy thread that runs
//! commands in issue order, events are completion flags (Mutex + Condvar).
//!
//! Why: every test and CI run uses it, so it must behave like a GPU stream where it matters:
//! copies are asynchronous, in order, and only visible through events. Two knobs emulate a
//! discrete GPU: `host_visible = false` makes `alloc` return memory the engine cannot write
//! directly (so requests go through the staging ring and the copy thread), and `copy_delay`
//! slows every copy down (tests prove a staging slot is never reused before its copy ran).
//!
//! Limits: one copy thread, memcpy speed; device-to-host reads also run on the copy thread (so
//! they are ordered after earlier copies, like a synchronous copy on a GPU stream).

use super::buffer::{DeviceBuffer, DeviceMemory, Event, EventImpl, PinnedBuf, PinnedMemory};
use super::{check_range, BackendKind, Device, DeviceError, PINNED_ALIGN};
use crossbeam_channel::{unbounded, Sender};
use ds4_io::AlignedBuf;
use std::any::Any;
use std::ptr::NonNull;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Settings of a [`HostDevice`].
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// `alloc` returns host-visible memory (the engine reads straight into it, like a
    /// unified-memory APU). `false` emulates a discrete GPU: staging + copy thread.
    pub host_visible: bool,
    /// Artificial delay before every copy (tests).
    pub copy_delay: Duration,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            host_visible: true,
            copy_delay: Duration::ZERO,
        }
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

impl DeviceMemory for HostMemory {
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

struct HostPinned(AlignedBuf);

impl PinnedMemory for HostPinned {
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
            EventState::Dropped => Err(DeviceError::StreamClosed(BackendKind::Host)),
        }
    }
}

impl EventImpl for HostEvent {
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

/// Signals its event exactly once: `Done` when the command ran, `Dropped` when it never will.
struct Signal(Arc<HostEvent>);

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
    /// event is this signal's. `dst` is kept alive by the Arc.
    Copy {
        src: RawPtr,
        dst: Arc<DeviceBuffer>,
        dst_offset: usize,
        len: usize,
        signal: Signal,
    },
    /// Synchronous read: the issuer blocks on `signal`, keeping `src` and `dst` borrowed.
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
    /// Starts the copy thread. Panics only if the OS refuses to spawn a thread at all.
    pub fn new(cfg: HostConfig) -> Self {
        let (tx, rx) = unbounded::<Cmd>();
        let delay = cfg.copy_delay;
        let thread = std::thread::Builder::new()
            .name("ds4-host-copy".into())
            .spawn(move || {
                for cmd in rx.iter() {
                    run(cmd, delay);
                }
            })
            .ok();
        // Without a copy thread the device still works: commands are dropped and their events
        // report StreamClosed instead of hanging.
        Self {
            cfg,
            tx: thread.as_ref().map(|_| tx),
            thread,
        }
    }

    /// A discrete-GPU emulation: device memory not host-visible, every copy delayed.
    pub fn discrete(copy_delay: Duration) -> Self {
        Self::new(HostConfig {
            host_visible: false,
            copy_delay,
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

fn run(cmd: Cmd, delay: Duration) {
    match cmd {
        Cmd::Copy {
            src,
            dst,
            dst_offset,
            len,
            signal,
        } => {
            if !delay.is_zero() {
                std::thread::sleep(delay);
            }
            if let Some(mem) = dst.memory().as_any().downcast_ref::<HostMemory>() {
                // SAFETY: copy_h2d_async checked both ranges; src is kept valid by its
                // PinnedBuf until `signal` fires; dst is alive through the Arc, and engine
                // leases (or the caller, per the Device contract) exclude other writers.
                unsafe { std::ptr::copy_nonoverlapping(src.0, mem.ptr().add(dst_offset), len) }
            }
            signal.0.set(EventState::Done);
        }
        Cmd::Read {
            src,
            dst,
            len,
            signal,
        } => {
            if len > 0 {
                // SAFETY: read_d2h checked the range and blocks until `signal` fires, keeping
                // both borrows alive; dst is the caller's exclusive `&mut [u8]`.
                unsafe { std::ptr::copy_nonoverlapping(src.0, dst.0, len) }
            }
            signal.0.set(EventState::Done);
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
        Ok(PinnedBuf::new(Box::new(HostPinned(buf))))
    }

    fn alloc(&self, len: usize) -> Result<DeviceBuffer, DeviceError> {
        Ok(DeviceBuffer::from_memory(Box::new(HostMemory::new(
            len,
            self.cfg.host_visible,
        )?)))
    }

    fn copy_h2d_async(
        &self,
        src: &mut PinnedBuf,
        src_offset: usize,
        dst: &Arc<DeviceBuffer>,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), DeviceError> {
        check_range(src_offset, len, src.len(), "pinned buffer")?;
        check_range(dst_offset, len, dst.len(), "device buffer")?;
        if dst.memory().as_any().downcast_ref::<HostMemory>().is_none() {
            return Err(DeviceError::WrongBackend {
                expected: BackendKind::Host,
                found: dst.backend(),
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
        src.record(Event::new(ev));
        Ok(())
    }

    fn read_d2h(
        &self,
        src: &DeviceBuffer,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<(), DeviceError> {
        check_range(offset, dst.len(), src.len(), "device buffer")?;
        src.check_idle(offset, dst.len())?;
        let mem = src.memory().as_any().downcast_ref::<HostMemory>().ok_or(
            DeviceError::WrongBackend {
                expected: BackendKind::Host,
                found: src.backend(),
            },
        )?;
        if dst.is_empty() {
            return Ok(());
        }
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
        self.marker()?.wait()
    }
}
