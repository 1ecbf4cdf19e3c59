//! Recycled host buffers for [`super::Engine::submit_bytes`] (`read_bytes`, `ds4 cat`).
//!
//! Why: allocating fresh memory per read costs more than the read. `alloc_zeroed` of a few MiB
//! is a fresh mapping whose every page faults and is cleared on first touch, and the matching
//! free unmaps it again: measured, that was half of all cycles of `ds4 cat` on a cold file. Here a
//! buffer is allocated once, pre-faulted once (one pass that touches every page), handed out as
//! the destination of a read, and comes back to the pool when the last `Bytes` over it drops.
//!
//! Policy: a request takes the smallest free buffer whose capacity fits it and is at most twice
//! its size (so a 4 KiB read never pins a 64 MiB buffer); otherwise a new one is allocated with
//! the size rounded up to 64 KiB. Free buffers are kept up to `max_free_bytes` in total; beyond
//! that, returned buffers are freed. Buffers in use are not counted (they belong to the caller).
//!
//! Limits: the pool never shrinks below what it keeps; one mutex (a handful of operations per
//! request of MiBs).

use crate::device::{BackendKind, DeviceBuffer, DeviceError, DeviceMemory, PINNED_ALIGN};
use ds4_io::AlignedBuf;
use std::any::Any;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// Capacities are multiples of this.
const GRANULE: usize = 64 << 10;

/// Counters of a `HostPool`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct HostPoolStats {
    /// Buffers handed out that came from the free list.
    pub reused: u64,
    /// Buffers allocated (and pre-faulted) because none fitted.
    pub allocated: u64,
    /// Bytes currently kept on the free list.
    pub free_bytes: u64,
}

struct Inner {
    free: Vec<AlignedBuf>,
    free_bytes: usize,
    max_free_bytes: usize,
    stats: HostPoolStats,
}

/// A pool of page-aligned, pre-faulted host buffers.
pub(crate) struct HostPool {
    inner: Arc<Mutex<Inner>>,
}

impl HostPool {
    pub(crate) fn new(max_free_bytes: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                free: Vec::new(),
                free_bytes: 0,
                max_free_bytes,
                stats: HostPoolStats::default(),
            })),
        }
    }

    pub(crate) fn stats(&self) -> HostPoolStats {
        let g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        HostPoolStats {
            free_bytes: g.free_bytes as u64,
            ..g.stats
        }
    }

    /// A host-visible destination of exactly `len` bytes (its memory may be larger).
    pub(crate) fn get(&self, len: usize) -> Result<DeviceBuffer, DeviceError> {
        let reused = {
            let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            let best = g
                .free
                .iter()
                .enumerate()
                .filter(|(_, b)| b.len() >= len && b.len() / 2 <= len.max(GRANULE))
                .min_by_key(|(_, b)| b.len())
                .map(|(i, _)| i);
            best.map(|i| {
                let b = g.free.swap_remove(i);
                g.free_bytes -= b.len();
                g.stats.reused += 1;
                b
            })
        };
        let buf = match reused {
            Some(b) => b,
            None => {
                let cap = len.div_ceil(GRANULE).max(1) * GRANULE;
                let b = AlignedBuf::new_prefaulted(cap, PINNED_ALIGN).ok_or(
                    DeviceError::OutOfMemory {
                        bytes: cap as u64,
                        what: "host read buffer",
                    },
                )?;
                self.inner
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .stats
                    .allocated += 1;
                b
            }
        };
        Ok(DeviceBuffer::from_memory(Box::new(Pooled {
            buf: Some(buf),
            len,
            home: Arc::downgrade(&self.inner),
        })))
    }
}

/// A pooled buffer as device memory of `len` bytes; returns home when dropped.
struct Pooled {
    /// Always `Some` until `Drop` takes it.
    buf: Option<AlignedBuf>,
    len: usize,
    home: Weak<Mutex<Inner>>,
}

impl Pooled {
    fn ptr(&self) -> Option<NonNull<u8>> {
        self.buf
            .as_ref()
            .and_then(|b| NonNull::new(b.as_ptr().cast_mut()))
    }
}

// SAFETY: `len` is fixed and at most the AlignedBuf's length; the AlignedBuf is owned here until
// Drop, so its address is stable and valid for `len` bytes. Only the engine writes it, under the
// DeviceBuffer's write lease, and it goes back to the pool only when this object is dropped,
// i.e. when the last Arc<DeviceBuffer> (and with it every `Bytes` over it) is gone.
unsafe impl DeviceMemory for Pooled {
    fn len(&self) -> usize {
        self.len
    }
    fn backend(&self) -> BackendKind {
        BackendKind::Host
    }
    fn host_ptr(&self) -> Option<NonNull<u8>> {
        self.ptr()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let (Some(buf), Some(home)) = (self.buf.take(), self.home.upgrade()) else {
            return; // the engine is gone: the buffer is freed here
        };
        let mut g = home.lock().unwrap_or_else(PoisonError::into_inner);
        if g.free_bytes + buf.len() <= g.max_free_bytes {
            g.free_bytes += buf.len();
            g.free.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_and_are_reused_by_size() {
        let p = HostPool::new(64 << 20);
        let a = p.get(4 << 20).unwrap();
        assert_eq!(a.len(), 4 << 20);
        assert!(a.host_visible());
        let addr = a.memory().host_ptr().unwrap();
        assert_eq!(addr.as_ptr() as usize % PINNED_ALIGN, 0);
        drop(a);
        assert_eq!(p.stats().free_bytes, 4 << 20);
        // A slightly smaller request reuses it; a tiny one does not (it would waste 4 MiB).
        let b = p.get((4 << 20) - 8192).unwrap();
        assert_eq!(b.memory().host_ptr().unwrap(), addr);
        let c = p.get(100).unwrap();
        assert_ne!(c.memory().host_ptr().unwrap(), addr);
        let s = p.stats();
        assert_eq!((s.reused, s.allocated), (1, 2));
    }

    #[test]
    fn the_free_list_is_bounded_and_survives_the_pool() {
        let p = HostPool::new(1 << 20);
        let bufs: Vec<_> = (0..4).map(|_| p.get(512 << 10).unwrap()).collect();
        drop(bufs);
        assert_eq!(p.stats().free_bytes, 1 << 20, "two of four kept");
        let held = p.get(512 << 10).unwrap();
        drop(p);
        drop(held); // the pool is gone: freed, no panic
    }
}
