//! Memory and event types shared by every backend: [`DeviceBuffer`] (copy destinations, with
//! range leases), [`PinnedBuf`] (staging memory that knows its last copy's [`Event`]),
//! [`DeferredErrors`] (copy errors nobody waited for) and the three `unsafe trait`s a backend
//! implements for its own handles.
//!
//! Why here and not per backend: the engine only sees these types, so a backend plugs in by
//! implementing [`DeviceMemory`], [`PinnedMemory`] and [`EventImpl`] for its handles. Those traits
//! are `unsafe` because the engine's unsafe code (direct reads into host-visible memory, host
//! writes into staging memory) trusts what they return: a safe impl could otherwise hand out a
//! dangling pointer and make safe code undefined behaviour.
//!
//! Leases: a [`DeviceBuffer`] records which byte ranges are being written (a [`WriteLease`]:
//! exclusive) or read back (a read lease: shared) right now. Engine requests take a write lease
//! at submit; [`crate::device::Device::copy_h2d_async`] takes one for its copy and the backend
//! holds it until the copy has run; [`crate::device::Device::read_d2h`] holds a read lease for
//! the whole read. Overlapping writers, or a reader and a writer, get a typed `Busy` error
//! instead of a data race.

use super::{BackendKind, DeviceError};
use std::any::Any;
use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, PoisonError};

/// A backend's event: completes when the operation it was recorded after has finished.
///
/// # Safety
/// Once `wait` returns (`Ok` or `Err`) or `query` returns `Ok(true)`, the operation recorded
/// before this event (and every earlier one on its stream) will never read or write its source
/// or destination memory again. [`PinnedBuf`] frees and hands out staging memory on that promise.
pub unsafe trait EventImpl: Send + Sync {
    /// `Ok(true)` when the operation has finished, without blocking.
    fn query(&self) -> Result<bool, DeviceError>;
    /// Blocks until the operation has finished; an error says it failed (it is still over).
    fn wait(&self) -> Result<(), DeviceError>;
    /// When the operation was handed to its waiter and when it was seen finished, where the
    /// backend keeps them (the engine's stage trace); `(None, None)` by default.
    fn times(&self) -> (Option<std::time::Instant>, Option<std::time::Instant>) {
        (None, None)
    }
}

/// A recorded event (cheap to clone). Only backends create them (they vouch for the
/// [`EventImpl`] contract by implementing the unsafe trait).
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
    /// See [`EventImpl::times`].
    pub fn times(&self) -> (Option<std::time::Instant>, Option<std::time::Instant>) {
        self.0.times()
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
///
/// # Safety
/// `as_ptr()` returns the same address for the whole life of the object; that address is aligned
/// to at least [`super::PINNED_ALIGN`] and valid for reads and writes of `len()` bytes until the
/// object is dropped; nothing but the [`PinnedBuf`] that owns the object (and copies issued from
/// it, which are fenced by events) accesses that memory.
pub unsafe trait PinnedMemory: Send + Sync {
    /// Start of the allocation.
    fn as_ptr(&self) -> *mut u8;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The backend that pinned this memory (a GPU backend refuses to copy from memory it did
    /// not pin: the driver would silently turn the async copy into a synchronous bounce).
    fn backend(&self) -> BackendKind {
        BackendKind::Host
    }
}

/// Copy errors that nobody could receive: a [`PinnedBuf`] dropped while its last copy failed
/// (a `Drop` cannot return an error). The device that created the buffer owns one of these and
/// returns what it holds from its next `synchronize()`; nothing is lost and nothing panics.
#[derive(Debug, Default)]
pub struct DeferredErrors {
    inner: Mutex<Deferred>,
}

#[derive(Debug, Default)]
struct Deferred {
    first: Option<DeviceError>,
    more: u64,
}

impl DeferredErrors {
    /// Keeps `e` (the first one in full; later ones are counted).
    pub fn push(&self, e: DeviceError) {
        let mut d = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if d.first.is_none() {
            d.first = Some(e);
        } else {
            d.more += 1;
        }
    }

    /// Takes what is held: `Err` with the first error (and how many more were dropped with it).
    pub fn take(&self) -> Result<(), DeviceError> {
        let mut d = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let more = std::mem::take(&mut d.more);
        match d.first.take() {
            None => Ok(()),
            Some(e) if more == 0 => Err(e),
            Some(e) => Err(DeviceError::Deferred {
                more,
                first: Box::new(e),
            }),
        }
    }
}

/// Pinned staging memory plus the event of the last copy that reads it.
///
/// Host writes (`as_mut_slice`) and `Drop` first wait for that event, so memory a copy is still
/// reading is never overwritten or freed. [`Self::tail_mut`] lets a writer fill the part past
/// every copy issued since the last wait while those copies run (a slot read in pieces, each
/// piece's copy issued as soon as it is read). Only backends record events (crate-private), so the
/// event cannot be replaced by one that completes earlier. A failed copy's error goes to the
/// caller that waits ([`Self::wait`], [`Self::as_mut_slice`]) or, when the buffer is dropped
/// without that, to the device's [`DeferredErrors`] (returned by its next `synchronize()`).
pub struct PinnedBuf {
    mem: Box<dyn PinnedMemory>,
    last: Option<Event>,
    /// One past the highest byte any copy issued since the last wait reads (0: none).
    busy_end: usize,
    deferred: Arc<DeferredErrors>,
}

impl PinnedBuf {
    /// Wraps a backend allocation; `deferred` is where a copy error goes that nobody waited for.
    pub fn new(mem: Box<dyn PinnedMemory>, deferred: Arc<DeferredErrors>) -> Self {
        Self {
            mem,
            last: None,
            busy_end: 0,
            deferred,
        }
    }

    pub fn len(&self) -> usize {
        self.mem.len()
    }

    pub fn is_empty(&self) -> bool {
        self.mem.len() == 0
    }

    /// The backend that pinned this memory.
    pub fn backend(&self) -> BackendKind {
        self.mem.backend()
    }

    /// Mutable host access; waits for the last copy first. A failed copy is reported once here
    /// (the copy is over either way, so the next call succeeds).
    pub fn as_mut_slice(&mut self) -> Result<&mut [u8], DeviceError> {
        self.wait()?;
        // SAFETY: PinnedMemory promises `len` valid bytes at a stable address for the life of
        // `mem`; no copy reads them any more (its event completed above, EventImpl's promise) and
        // `&mut self` excludes other host access.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.mem.as_ptr(), self.mem.len()) })
    }

    /// Mutable host access to `[from..]` (empty when `from` is past the end). Waits for the
    /// last copy only when a copy issued since the last wait reads a byte at or past `from`; so
    /// a buffer filled front to back, each part's copy issued once it is written, never waits
    /// for its own earlier copies.
    pub fn tail_mut(&mut self, from: usize) -> Result<&mut [u8], DeviceError> {
        if from < self.busy_end {
            self.wait()?;
        }
        let len = self.mem.len();
        let from = from.min(len);
        // SAFETY: PinnedMemory promises `len` valid bytes at a stable address for the life of
        // `mem`, and `from <= len`; every copy not yet waited for reads only bytes below
        // `busy_end <= from` (`record`'s promise from the backends; streams run copies in order
        // and `wait` clears it only once they are all over), and `&mut self` excludes other
        // host access.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.mem.as_ptr().add(from), len - from) })
    }

    /// Waits for the last copy (if any) and forgets its event.
    pub fn wait(&mut self) -> Result<(), DeviceError> {
        // The copies are over once the wait returns, whatever it says.
        self.busy_end = 0;
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

    /// Where this buffer's unreceived copy errors go.
    pub fn deferred(&self) -> &Arc<DeferredErrors> {
        &self.deferred
    }

    /// Start address, for a backend issuing a copy. Backends must call [`Self::record`] with
    /// the copy's event before returning.
    pub(crate) fn src_ptr(&self) -> *const u8 {
        self.mem.as_ptr()
    }

    /// Records the event of a copy just queued from this buffer that reads no byte at or past
    /// `end`. Streams are in-order, so the new event completes after any earlier one.
    pub(crate) fn record(&mut self, ev: Event, end: usize) {
        self.busy_end = self.busy_end.max(end);
        self.last = Some(ev);
    }
}

impl Drop for PinnedBuf {
    fn drop(&mut self) {
        // The memory must outlive any copy reading it: wait. The copy is over either way; its
        // error, if any, is kept for the device's next synchronize().
        if let Err(e) = self.wait() {
            self.deferred.push(e);
        }
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
///
/// # Safety
/// `len()` never changes. When `host_ptr()` returns `Some(p)`, it returns the same `p` for the
/// whole life of the object, and `p` is valid for reads and writes of `len()` bytes until the
/// object is dropped; the backend itself only touches that memory through operations it fences
/// with events and leases (see [`DeviceBuffer`]).
pub unsafe trait DeviceMemory: Send + Sync + 'static {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn backend(&self) -> BackendKind;
    /// CPU-writable address of the allocation when the memory is host-visible (host backend,
    /// unified memory); the engine then reads straight into it.
    fn host_ptr(&self) -> Option<NonNull<u8>>;
    /// The address GPU kernels use for byte 0 (a `CUdeviceptr` / HIP device pointer), for
    /// callers outside Rust that launch their own kernels on this memory (the C ABI's expert
    /// pointers). `None` for memory that is not a GPU allocation (the host backend).
    fn device_addr(&self) -> Option<u64> {
        None
    }
    /// For a backend to downcast to its own allocation type.
    fn as_any(&self) -> &dyn Any;
}

/// Kind of a leased range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LeaseKind {
    Write,
    Read,
}

#[derive(Clone, Copy, Debug)]
struct Leased {
    start: usize,
    end: usize,
    kind: LeaseKind,
    id: u64,
}

#[derive(Default)]
struct LeaseTable {
    ranges: Vec<Leased>,
    next_id: u64,
}

/// Device memory that requests land in. Shared as `Arc<DeviceBuffer>`: the engine and the
/// backend keep a clone while they write it, so dropping the caller's handle early is safe.
pub struct DeviceBuffer {
    mem: Box<dyn DeviceMemory>,
    leases: Mutex<LeaseTable>,
}

impl DeviceBuffer {
    /// Wraps a backend allocation.
    pub fn from_memory(mem: Box<dyn DeviceMemory>) -> Self {
        Self {
            mem,
            leases: Mutex::new(LeaseTable::default()),
        }
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

    /// Takes the exclusive right to write `[offset, offset + len)`: fails with `Busy` when any
    /// byte of it is leased (written or read back) already, `OutOfRange` when it is outside the
    /// buffer. Released when the lease (and every clone of its `Arc`) is dropped.
    pub fn lease_write(
        self: &Arc<Self>,
        offset: usize,
        len: usize,
    ) -> Result<WriteLease, DeviceError> {
        let id = self.take(offset, len, LeaseKind::Write)?;
        Ok(WriteLease {
            buf: Arc::clone(self),
            start: offset,
            end: offset + len,
            id,
        })
    }

    /// A shared read lease on `[offset, offset + len)` (conflicts with writers only).
    pub(crate) fn lease_read(
        &self,
        offset: usize,
        len: usize,
    ) -> Result<ReadLease<'_>, DeviceError> {
        let id = self.take(offset, len, LeaseKind::Read)?;
        Ok(ReadLease { buf: self, id })
    }

    fn take(&self, offset: usize, len: usize, kind: LeaseKind) -> Result<u64, DeviceError> {
        super::check_range(offset, len, self.len(), "device buffer")?;
        let end = offset + len;
        let mut t = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        let clash = t.ranges.iter().any(|r| {
            // Empty ranges hold no byte, so they overlap nothing.
            let overlap = offset < r.end && r.start < end && len > 0 && r.end > r.start;
            overlap && (kind == LeaseKind::Write || r.kind == LeaseKind::Write)
        });
        if clash {
            return Err(DeviceError::Busy {
                offset: offset as u64,
                len: len as u64,
            });
        }
        let id = t.next_id;
        t.next_id += 1;
        // Recording empty ranges is harmless (they clash with nothing) and keeps release simple.
        t.ranges.push(Leased {
            start: offset,
            end,
            kind,
            id,
        });
        Ok(id)
    }

    fn release(&self, id: u64) {
        let mut t = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = t.ranges.iter().position(|r| r.id == id) {
            t.ranges.swap_remove(i);
        }
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
/// the buffer alive. Shared as `Arc<WriteLease>` between an engine request and the copies that
/// land in its range: the range stays leased until the last of them is over.
pub struct WriteLease {
    buf: Arc<DeviceBuffer>,
    start: usize,
    end: usize,
    id: u64,
}

impl WriteLease {
    pub fn buffer(&self) -> &Arc<DeviceBuffer> {
        &self.buf
    }

    /// The leased range `[start, end)`.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.start..self.end
    }

    /// Checks that `[offset, offset + len)` lies inside the lease.
    pub fn check(&self, offset: usize, len: usize) -> Result<(), DeviceError> {
        match offset.checked_add(len) {
            Some(end) if offset >= self.start && end <= self.end => Ok(()),
            _ => Err(DeviceError::OutOfRange {
                offset: offset as u64,
                len: len as u64,
                size: self.end as u64,
                what: "write lease",
            }),
        }
    }
}

impl fmt::Debug for WriteLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "WriteLease({}..{} of {:?})",
            self.start, self.end, self.buf
        )
    }
}

impl Drop for WriteLease {
    fn drop(&mut self) {
        self.buf.release(self.id);
    }
}

/// Shared right to read one byte range back while no one writes it; released on drop.
pub(crate) struct ReadLease<'a> {
    buf: &'a DeviceBuffer,
    id: u64,
}

impl Drop for ReadLease<'_> {
    fn drop(&mut self) {
        self.buf.release(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{Device, HostConfig, HostDevice};

    fn buf(len: usize) -> Arc<DeviceBuffer> {
        let d = HostDevice::new(HostConfig::default()).unwrap();
        Arc::new(d.alloc(len).unwrap())
    }

    #[test]
    fn write_leases_exclude_overlaps_and_release_on_drop() {
        let b = buf(100);
        let w = b.lease_write(10, 20).unwrap();
        assert!(matches!(
            b.lease_write(29, 5),
            Err(DeviceError::Busy { .. })
        ));
        assert!(matches!(b.lease_read(0, 11), Err(DeviceError::Busy { .. })));
        let w2 = b.lease_write(30, 5).unwrap(); // adjacent is fine
        drop(w);
        b.lease_write(0, 30).unwrap();
        drop(w2);
        assert!(matches!(
            b.lease_write(90, 11),
            Err(DeviceError::OutOfRange { .. })
        ));
        // Empty ranges never clash.
        let _e = b.lease_write(50, 0).unwrap();
        b.lease_write(40, 20).unwrap();
    }

    #[test]
    fn read_leases_share_but_exclude_writers() {
        let b = buf(100);
        let r1 = b.lease_read(0, 50).unwrap();
        let r2 = b.lease_read(25, 50).unwrap();
        assert!(matches!(
            b.lease_write(60, 1),
            Err(DeviceError::Busy { .. })
        ));
        drop(r1);
        assert!(matches!(
            b.lease_write(60, 1),
            Err(DeviceError::Busy { .. })
        ));
        drop(r2);
        let w = b.lease_write(60, 1).unwrap();
        assert!(w.check(60, 1).is_ok());
        assert!(w.check(59, 1).is_err());
        assert!(w.check(60, 2).is_err());
        assert!(w.check(usize::MAX, 2).is_err());
    }

    #[test]
    fn tail_mut_waits_only_for_copies_reading_the_tail() {
        let d = HostDevice::discrete(std::time::Duration::from_millis(300)).unwrap();
        let dst = Arc::new(d.alloc(8192).unwrap());
        let mut p = d.alloc_pinned(8192).unwrap();
        p.as_mut_slice().unwrap()[..4096].fill(7);
        d.copy_h2d_async(&mut p, 0, &dst, 0, 4096).unwrap();
        // The copy reads [0, 4096): the bytes from 4096 on are free at once.
        let t = std::time::Instant::now();
        assert_eq!(p.tail_mut(4096).unwrap().len(), 4096);
        assert_eq!(p.tail_mut(9000).unwrap().len(), 0, "past the end: empty");
        assert!(!p.is_idle().unwrap(), "did not wait: the copy still runs");
        assert!(t.elapsed() < std::time::Duration::from_millis(250));
        // Any byte the copy reads: waits for it first.
        p.tail_mut(4095).unwrap()[0] = 1;
        assert!(p.is_idle().unwrap());
        let mut back = vec![0u8; 4096];
        d.read_d2h(&dst, 0, &mut back).unwrap();
        assert!(
            back.iter().all(|&b| b == 7),
            "the copy saw the bytes before the write"
        );
    }

    #[test]
    fn deferred_errors_keep_the_first_and_count_the_rest() {
        let d = DeferredErrors::default();
        assert!(d.take().is_ok());
        d.push(DeviceError::StreamClosed(BackendKind::Host));
        assert!(matches!(d.take(), Err(DeviceError::StreamClosed(_))));
        assert!(d.take().is_ok(), "taken once");
        for _ in 0..3 {
            d.push(DeviceError::StreamClosed(BackendKind::Host));
        }
        match d.take() {
            Err(DeviceError::Deferred { more: 2, .. }) => {}
            other => panic!("{other:?}"),
        }
    }
}
