//! Test doubles of the device layer, public so that tests of every crate (the engine's leak and
//! allocation-failure tests, `ds4-stress`) use one: not for production use.
//!
//! [`CountingDevice`]: wraps any [`Device`] and counts the pinned (staging) memory it hands out
//! and still holds, so a test can assert that dropping an engine returns every staging byte.
//!
//! How: `alloc_pinned` asks the inner device for the buffer, then hides it inside a
//! [`PinnedMemory`] of its own whose `Drop` (which runs after the outer [`PinnedBuf`] has waited
//! for its last copy) gives the bytes back to the counter and frees the inner buffer. Copies are
//! issued by the inner device on the same address, so the data path is unchanged.
//!
//! Limits: device memory (`alloc`) is passed through uncounted, because backends recognise
//! their own allocations by type (the host backend downcasts); a test checks device buffers by
//! their `Arc` count instead (the engine and the backend keep clones only while writing).
//!
//! [`open_fds`] and [`threads`] are the process's counts a leak test compares before and after.

use super::{BackendKind, Device, DeviceBuffer, DeviceError, PinnedBuf, PinnedMemory, WriteLease};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Live and total counts of pinned memory handed out by a [`CountingDevice`].
#[derive(Debug, Default)]
pub struct PinnedCounter {
    live_bytes: AtomicU64,
    live_bufs: AtomicU64,
    total_allocs: AtomicU64,
}

impl PinnedCounter {
    /// Pinned bytes allocated and not yet freed.
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes.load(Ordering::SeqCst)
    }
    /// Pinned buffers allocated and not yet freed.
    pub fn live_bufs(&self) -> u64 {
        self.live_bufs.load(Ordering::SeqCst)
    }
    /// Pinned buffers allocated so far.
    pub fn total_allocs(&self) -> u64 {
        self.total_allocs.load(Ordering::SeqCst)
    }
}

/// A device that counts its pinned memory (see the module docs).
#[derive(Debug)]
pub struct CountingDevice {
    inner: Arc<dyn Device>,
    counter: Arc<PinnedCounter>,
    /// Pinned allocations still allowed before they fail (`u64::MAX`: no limit).
    pinned_left: AtomicU64,
}

impl CountingDevice {
    pub fn new(inner: Arc<dyn Device>) -> Self {
        Self {
            inner,
            counter: Arc::default(),
            pinned_left: AtomicU64::new(u64::MAX),
        }
    }

    /// Lets `n` more pinned allocations succeed; the ones after fail with `OutOfMemory`
    /// (staging-allocation failure tests).
    pub fn fail_pinned_after(self, n: u64) -> Self {
        self.pinned_left.store(n, Ordering::SeqCst);
        self
    }

    /// The counter; stays readable after the device is dropped.
    pub fn counter(&self) -> Arc<PinnedCounter> {
        Arc::clone(&self.counter)
    }
}

/// The inner device's buffer, kept alive (and counted) until this is dropped.
struct Counted {
    /// Never accessed: it owns the memory `ptr` points into. It records no event (copies are
    /// recorded in the outer `PinnedBuf`), so dropping it frees at once.
    _inner: PinnedBuf,
    ptr: *mut u8,
    len: usize,
    counter: Arc<PinnedCounter>,
}

// SAFETY: `ptr` points into `_inner`'s allocation, which is Send + Sync (PinnedBuf is); the
// pointer is only handed out through `as_ptr`, and the outer PinnedBuf guards access to it.
unsafe impl Send for Counted {}
// SAFETY: as above; `Counted` has no interior mutability of its own.
unsafe impl Sync for Counted {}

// SAFETY: `ptr` and `len` are the inner PinnedBuf's whole allocation (taken from its
// `as_mut_slice`), which the inner buffer keeps valid, aligned and at a stable address until
// `_inner` drops with this object; nothing else touches it (the inner buffer is never used again
// and records no copies).
unsafe impl PinnedMemory for Counted {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.counter
            .live_bytes
            .fetch_sub(self.len as u64, Ordering::SeqCst);
        self.counter.live_bufs.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Device for CountingDevice {
    fn name(&self) -> String {
        format!("{} (counting pinned memory)", self.inner.name())
    }
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }
    fn unified_memory(&self) -> bool {
        self.inner.unified_memory()
    }
    fn alloc_pinned(&self, len: usize) -> Result<PinnedBuf, DeviceError> {
        let allowed = self
            .pinned_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| match n {
                u64::MAX => Some(n),
                0 => None,
                _ => Some(n - 1),
            })
            .is_ok();
        if !allowed {
            return Err(DeviceError::OutOfMemory {
                bytes: len as u64,
                what: "pinned host memory (injected failure)",
            });
        }
        let mut inner = self.inner.alloc_pinned(len)?;
        // A fresh buffer has no copy in flight: this does not block.
        let ptr = inner.as_mut_slice()?.as_mut_ptr();
        self.counter
            .live_bytes
            .fetch_add(len as u64, Ordering::SeqCst);
        self.counter.live_bufs.fetch_add(1, Ordering::SeqCst);
        self.counter.total_allocs.fetch_add(1, Ordering::SeqCst);
        let deferred = Arc::clone(inner.deferred());
        Ok(PinnedBuf::new(
            Box::new(Counted {
                _inner: inner,
                ptr,
                len,
                counter: Arc::clone(&self.counter),
            }),
            deferred,
        ))
    }
    fn alloc(&self, len: usize) -> Result<DeviceBuffer, DeviceError> {
        self.inner.alloc(len)
    }
    fn copy_h2d_leased(
        &self,
        src: &mut PinnedBuf,
        src_offset: usize,
        dst: &Arc<WriteLease>,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), DeviceError> {
        self.inner
            .copy_h2d_leased(src, src_offset, dst, dst_offset, len)
    }
    fn read_d2h(
        &self,
        src: &DeviceBuffer,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<(), DeviceError> {
        self.inner.read_d2h(src, offset, dst)
    }
    fn synchronize(&self) -> Result<(), DeviceError> {
        self.inner.synchronize()
    }
}

/// Open file descriptors of this process (`/proc/self/fd`), or `None` where that is not
/// available (not Linux, or Wine: Windows handles are not fds).
pub fn open_fds() -> Option<usize> {
    count_dir("/proc/self/fd")
}

/// Threads of this process (`/proc/self/task`), or `None` where not available.
pub fn threads() -> Option<usize> {
    count_dir("/proc/self/task")
}

fn count_dir(path: &str) -> Option<usize> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    // The directory handle itself is one fd while it is open; it is closed before returning,
    // and `read_dir` lists it, so subtract it for /proc/self/fd.
    let n = std::fs::read_dir(path).ok()?.count();
    Some(if path.ends_with("/fd") {
        n.saturating_sub(1)
    } else {
        n
    })
}
