//! Memory that somebody else owns, wrapped as a [`DeviceBuffer`] so engine requests can land in
//! it: [`ForeignHostMemory`] is a caller's host pointer (the C ABI's `ds4s_read` into memory the
//! C program allocated).
//!
//! Why a type of its own: every other [`DeviceMemory`] owns its allocation and frees it on drop.
//! This one frees nothing; dropping it only ends our use of the caller's memory. The engine reads
//! straight into it (it is host-visible: no staging, no copy), under the usual write leases.
//!
//! Caller *device* memory (a `CUdeviceptr` from `cuMemAlloc`) is the backends' business, since
//! they copy only into their own allocation types: [`super::Device::wrap_device_memory`] makes
//! one that frees nothing.

use super::buffer::{DeviceBuffer, DeviceMemory};
use super::BackendKind;
use std::any::Any;
use std::ptr::NonNull;

/// `len` bytes at `ptr`, owned by someone else. See [`ForeignHostMemory::new`] for the contract.
pub struct ForeignHostMemory {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the memory is plain host memory that the creator promised (`new`'s contract) is not
// touched by anyone else while this object exists; moving the address between threads is fine.
unsafe impl Send for ForeignHostMemory {}
// SAFETY: shared access hands out only the address; writes go through DeviceBuffer's leases.
unsafe impl Sync for ForeignHostMemory {}

impl ForeignHostMemory {
    /// Wraps `len` bytes at `ptr`.
    ///
    /// # Safety
    /// Until this object (and so the `DeviceBuffer` wrapping it, and every `Arc` of that the
    /// engine holds while a request is in flight) is dropped, `ptr` must be valid for writes of
    /// `len` bytes, must not be freed, and must not be read or written by anything else (the
    /// engine writes it from its reader threads). For `len == 0` any non-null `ptr` is fine.
    pub unsafe fn new(ptr: NonNull<u8>, len: usize) -> Self {
        Self { ptr, len }
    }

    /// [`Self::new`] wrapped as a [`DeviceBuffer`], ready to be a request's destination.
    ///
    /// # Safety
    /// The contract of [`Self::new`], for the life of the returned buffer.
    pub unsafe fn buffer(ptr: NonNull<u8>, len: usize) -> DeviceBuffer {
        // SAFETY: forwarded: the caller upholds `new`'s contract for the buffer's life.
        DeviceBuffer::from_memory(Box::new(unsafe { Self::new(ptr, len) }))
    }
}

// SAFETY: `len` is fixed at construction and `host_ptr` always returns the same `ptr`, which the
// creator promised (`new`'s contract) is valid for reads and writes of `len` bytes until this
// object is dropped and touched by nobody else meanwhile; this type itself never touches it.
unsafe impl DeviceMemory for ForeignHostMemory {
    fn len(&self) -> usize {
        self.len
    }
    fn backend(&self) -> BackendKind {
        BackendKind::Host
    }
    fn host_ptr(&self) -> Option<NonNull<u8>> {
        Some(self.ptr)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Engine, EngineConfig, ReadRequest};
    use ds4_io::pattern::{verify, PatternSource};
    use std::sync::Arc;

    /// In memory (no file), so that it also runs under Miri (.ci/miri.sh runs `device::`).
    #[test]
    fn engine_reads_into_caller_memory_and_never_frees_it() {
        const SEED: u64 = 0x0f0e;
        let src = Arc::new(PatternSource::new(100_000, SEED));
        let dev = crate::device::BackendKind::Host.open_default().unwrap();
        let cfg = EngineConfig {
            workers: 2,
            slots: 2,
            slot_bytes: 16 << 10,
            queue_depth: 4,
            host_pool_bytes: 0,
            ..EngineConfig::default()
        };
        let engine = Engine::new(src, dev, cfg).unwrap();
        let mut mine = vec![0u8; 60_001];
        let ptr = NonNull::new(mine.as_mut_ptr()).unwrap();
        // SAFETY: `mine` outlives `buf` (dropped below, after the ticket completed and the
        // engine released it) and is not touched until then.
        let buf = Arc::new(unsafe { ForeignHostMemory::buffer(ptr, mine.len()) });
        assert!(buf.host_visible());
        let t = engine
            .submit(vec![
                ReadRequest::new(777, 30_000, Arc::clone(&buf), 1),
                ReadRequest::new(50_000, 30_000, Arc::clone(&buf), 30_001),
            ])
            .unwrap();
        t.wait().unwrap();
        drop(buf);
        drop(engine);
        assert_eq!(mine[0], 0);
        verify(SEED, 777, &mine[1..30_001]).unwrap();
        verify(SEED, 50_000, &mine[30_001..]).unwrap();
    }
}
