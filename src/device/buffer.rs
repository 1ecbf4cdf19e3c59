//! Memory and event types shared by every backend: [`DeviceBuffer`] (copy destinations),
//! [`PinnedBuf`] (staging memory that knows its last copy's [`Event`]) and the small traits a
//! backend implements for its own allocations.
//!
//! Why here and not per backend: the engine only sees these types, so a backend plugs in by
//! implementing [`DeviceMemory`], [`PinnedMemory`] and [`EventImpl`] for its handles.
//!
//! Write leases: a [`DeviceBuffer`] records the ranges that engine requests are writing. A new
//! request may not write a leased range and [`crate::device::Device::read_d2h`] refuses to read
//! one; this is what makes the host backend's direct reads into host-visible memory sound (no two
//! writers, no reader during a write) and turns a caller's overlap bug into a typed error.

use super::{BackendKind, DeviceError};
use std::any::Any;
use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, PoisonError};

/// A backend's event: completes when the copy it was recorded after has finished.
///
/// Contract: once `wait` returns (Ok or Err) or `query` returns `Ok(true)`, the copy will never
/// touch its source or destination again.
pub trait EventImpl: Send + Sync {
    /// `Ok(true)` when the copy has finished, without blocking.
    fn query(&self) -> Result<bool, DeviceError>;
    /// Blocks until the copy has finished; an error says the copy failed (it is still over).
    fn wait(&self) -> Result<(), DeviceError>;
}

/// A recorded event (cheap to clone).
#[derive(Clone)]
pub struct Event(Arc<dyn EventImpl>);

impl Event {
    pub fn new(inner: Arc<dyn EventImpl>) -> Self {
        Self(inner)
    }
    pub fn query(&self) -> Result<bool, DeviceError> {
        self.0.query()
    }
    pub fn wait(&self) -> Result<(), DeviceError> {
        self.0.wait()
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.query() {
            Ok(true) => "done",
            Ok(false) => "pending",
            Err(_) => "failed",
        };
        write!(f, "Event({state})")
    }
}

/// A backend's pinned host allocation (freed when dropped).
pub trait PinnedMemory: Send + Sync {
    /// Start of the allocation, aligned to at least [`super::PINNED_ALIGN`].
    fn as_ptr(&self) -> *mut u8;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Pinned staging memory plus the event of the last copy that reads it.
///
/// Host writes (`as_mut_slice`) and `Drop` first wait for that event, so memory a copy is still
/// reading is never overwritten or freed. Only backends record events (crate-private), so the
/// event cannot be replaced by one that completes earlier.
pub struct PinnedBuf {
    mem: Box<dyn PinnedMemory>,
    last: Option<Event>,
}

impl PinnedBuf {
    pub fn new(mem: Box<dyn PinnedMemory>) -> Self {
        Self { mem, last: None }
    }

    pub fn len(&self) -> usize {
        self.mem.len()
    }

    pub fn is_empty(&self) -> bool {
        self.mem.len() == 0
    }

    /// Mutable host access; waits for the last copy first. A failed copy is reported once here
    /// (the copy is over either way, so the next call succeeds).
    pub fn as_mut_slice(&mut self) -> Result<&mut [u8], DeviceError> {
        self.wait()?;
        // SAFETY: the allocation is valid for len bytes for the life of `mem`; no copy reads it
        // any more (its event completed above) and `&mut self` excludes other host access.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.mem.as_ptr(), self.mem.len()) })
    }

    /// Waits for the last copy (if any) and forgets its event.
    pub fn wait(&mut self) -> Result<(), DeviceError> {
        match self.last.take() {
            Some(ev) => ev.wait(),
            None => Ok(()),
        }
    }

    /// The event of the last copy issued from this buffer, if it has not been waited for.
    pub fn event(&self) -> Option<&Event> {
        self.last.as_ref()
    }

    /// True when no copy is reading this buffer.
    pub fn is_idle(&self) -> Result<bool, DeviceError> {
        match &self.last {
            Some(ev) => ev.query(),
            None => Ok(true),
        }
    }

    /// Start address, for a backend issuing a copy. Backends must call [`Self::record`] with
    /// the copy's event before returning.
    pub(crate) fn src_ptr(&self) -> *const u8 {
        self.mem.as_ptr()
    }

    /// Records the event of a copy just queued from this buffer. Streams are in-order, so the
    /// new event completes after any earlier one.
    pub(crate) fn record(&mut self, ev: Event) {
        self.last = Some(ev);
    }
}

impl Drop for PinnedBuf {
    fn drop(&mut self) {
        // The memory must outlive any copy reading it. A copy error has nowhere to go here; the
        // copy is over either way, which is all freeing needs.
        let _ = self.wait();
    }
}

impl fmt::Debug for PinnedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedBuf")
            .field("len", &self.len())
            .field("last", &self.last)
            .finish()
    }
}

/// A backend's device allocation (freed when dropped).
pub trait DeviceMemory: Send + Sync + 'static {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn backend(&self) -> BackendKind;
    /// CPU-writable address of the allocation when the memory is host-visible (host backend,
    /// unified memory); the engine then reads straight into it.
    fn host_ptr(&self) -> Option<NonNull<u8>>;
    /// For a backend to downcast to its own allocation type.
    fn as_any(&self) -> &dyn Any;
}

/// Device memory that requests land in. Shared as `Arc<DeviceBuffer>`: the engine and the
/// backend keep a clone while they write it, so dropping the caller's handle early is safe.
pub struct DeviceBuffer {
    mem: Box<dyn DeviceMemory>,
    /// Byte ranges `[start, end)` that requests in flight are writing.
    busy: Mutex<Vec<(usize, usize)>>,
}

impl DeviceBuffer {
    /// Wraps a backend allocation.
    pub fn from_memory(mem: Box<dyn DeviceMemory>) -> Self {
        Self {
            mem,
            busy: Mutex::new(Vec::new()),
        }
    }

    /// Plain page-aligned host memory, usable as a destination with any device (the engine reads
    /// straight into it). Fails cleanly when the allocation fails.
    pub fn host(len: usize) -> Result<Self, DeviceError> {
        Ok(Self::from_memory(Box::new(super::host::HostMemory::new(
            len, true,
        )?)))
    }

    pub fn len(&self) -> usize {
        self.mem.len()
    }

    pub fn is_empty(&self) -> bool {
        self.mem.len() == 0
    }

    pub fn backend(&self) -> BackendKind {
        self.mem.backend()
    }

    /// True when the CPU can write this memory directly (no staging copy needed).
    pub fn host_visible(&self) -> bool {
        self.mem.host_ptr().is_some()
    }

    pub fn memory(&self) -> &dyn DeviceMemory {
        self.mem.as_ref()
    }

    /// Reserves `[offset, offset + len)` for one writer. `None` when it overlaps a range being
    /// written. Empty ranges are never reserved (nothing to write).
    pub(crate) fn lease(self: &Arc<Self>, offset: usize, len: usize) -> Option<WriteLease> {
        let end = offset.checked_add(len)?;
        let mut busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        if busy.iter().any(|&(s, e)| offset < e && s < end) {
            return None;
        }
        busy.push((offset, end));
        Some(WriteLease {
            buf: Arc::clone(self),
            start: offset,
            end,
        })
    }

    /// Fails with `Busy` when a request in flight writes any byte of the range.
    pub(crate) fn check_idle(&self, offset: usize, len: usize) -> Result<(), DeviceError> {
        let end = offset.saturating_add(len);
        let busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        if busy.iter().any(|&(s, e)| offset < e && s < end) {
            return Err(DeviceError::Busy {
                offset: offset as u64,
                len: len as u64,
            });
        }
        Ok(())
    }

    /// Host pointer to byte `offset` of host-visible memory.
    pub(crate) fn host_ptr_at(&self, offset: usize) -> Option<*mut u8> {
        if offset > self.len() {
            return None;
        }
        // SAFETY: offset <= len, so the result stays within (or one past) the allocation.
        self.mem
            .host_ptr()
            .map(|p| unsafe { p.as_ptr().add(offset) })
    }
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("backend", &self.backend())
            .field("len", &self.len())
            .field("host_visible", &self.host_visible())
            .finish()
    }
}

/// Exclusive right to write one byte range of a [`DeviceBuffer`]; released on drop. Also keeps
/// the buffer alive.
pub(crate) struct WriteLease {
    buf: Arc<DeviceBuffer>,
    start: usize,
    end: usize,
}

impl Drop for WriteLease {
    fn drop(&mut self) {
        let mut busy = self.buf.busy.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = busy
            .iter()
            .position(|&(s, e)| s == self.start && e == self.end)
        {
            busy.swap_remove(i);
        }
    }
}
