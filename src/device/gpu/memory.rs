//! Memory of a GPU backend: pinned staging allocations and device allocations (device memory,
//! or mapped pinned host memory in unified mode and the RAM tier), each freeing itself in
//! `Drop` with the device bound on the dropping thread, after its owner waited for every copy
//! that touches it.
//!
//! Pinned memory must be [`PINNED_ALIGN`]-aligned (unbuffered reads land in it). The runtimes'
//! page alignment is not a documented promise, so an allocation that is not aligned is given
//! back and replaced by an aligned `std::alloc` block registered with the runtime.

use super::runtime::{MemKind, RawAlloc, Runtime};
use crate::device::{BackendKind, DeviceError, DeviceMemory, PinnedMemory, PINNED_ALIGN};
use std::alloc::Layout;
use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;

/// Maps a runtime's out-of-memory error to [`DeviceError::OutOfMemory`].
fn oom<R: Runtime>(bytes: usize, what: &'static str) -> impl FnOnce(DeviceError) -> DeviceError {
    move |e| match e {
        DeviceError::Backend { code, .. } if code == R::OUT_OF_MEMORY => DeviceError::OutOfMemory {
            bytes: bytes as u64,
            what,
        },
        e => e,
    }
}

/// How a pinned allocation was made (how to free it).
enum PinnedKind {
    Alloc,
    /// `std::alloc` memory registered with the runtime.
    Registered(Layout),
}

/// Pinned host memory (staging buffers).
pub(super) struct Pinned<R: Runtime> {
    rt: Arc<R>,
    ptr: NonNull<u8>,
    len: usize,
    kind: PinnedKind,
}

// SAFETY: plain memory owned by this object; the runtime may be called from any thread
// (`Runtime`'s contract).
unsafe impl<R: Runtime> Send for Pinned<R> {}
// SAFETY: as above; shared access hands out only the address.
unsafe impl<R: Runtime> Sync for Pinned<R> {}

impl<R: Runtime> Pinned<R> {
    /// `len` bytes (a whole page at least: never a zero-size allocation) of pinned memory;
    /// binds the device.
    pub(super) fn new(rt: &Arc<R>, len: usize) -> Result<Self, DeviceError> {
        rt.bind()?;
        let size = len.max(1).next_multiple_of(PINNED_ALIGN);
        let what = "pinned host memory";
        let too_big = || DeviceError::OutOfMemory {
            bytes: size as u64,
            what,
        };
        // SAFETY: bound above.
        let a = unsafe { rt.alloc(MemKind::Pinned, size) }.map_err(oom::<R>(size, what))?;
        let ptr = NonNull::new(a.host).ok_or_else(too_big)?;
        let mut kind = PinnedKind::Alloc;
        let ptr = if (ptr.as_ptr() as usize) % PINNED_ALIGN == 0 {
            ptr
        } else {
            // SAFETY: frees what `alloc` just returned, unused.
            let _ = unsafe { rt.free(MemKind::Pinned, a) };
            let layout = Layout::from_size_align(size, PINNED_ALIGN).map_err(|_| too_big())?;
            // SAFETY: `layout` has a non-zero size.
            let p = NonNull::new(unsafe { std::alloc::alloc(layout) }).ok_or_else(too_big)?;
            // SAFETY: bound; `p` is a live allocation of `size` bytes that we own.
            if let Err(e) = unsafe { rt.host_register(p.as_ptr(), size) } {
                // SAFETY: allocated above with this layout, never registered.
                unsafe { std::alloc::dealloc(p.as_ptr(), layout) };
                return Err(oom::<R>(size, what)(e));
            }
            kind = PinnedKind::Registered(layout);
            p
        };
        Ok(Self {
            rt: rt.clone(),
            ptr,
            len,
            kind,
        })
    }
}

// SAFETY: `ptr` is fixed at allocation, aligned to PINNED_ALIGN (checked in `new`) and valid for
// `len` (≤ the allocated size) bytes until `drop` frees it; only the owning PinnedBuf and the
// copies it issues (fenced by events) touch it.
unsafe impl<R: Runtime> PinnedMemory for Pinned<R> {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    fn len(&self) -> usize {
        self.len
    }
    fn backend(&self) -> BackendKind {
        R::KIND
    }
}

impl<R: Runtime> Drop for Pinned<R> {
    fn drop(&mut self) {
        if self.rt.bind().is_err() {
            return; // leak rather than free memory the runtime may still use
        }
        let p = self.ptr.as_ptr();
        // SAFETY: bound; the allocation is ours, and its PinnedBuf waited for its last copy
        // before dropping it.
        unsafe {
            match self.kind {
                PinnedKind::Alloc => {
                    let _ = self.rt.free(MemKind::Pinned, RawAlloc { host: p, dev: 0 });
                }
                PinnedKind::Registered(layout) => {
                    if self.rt.host_unregister(p).is_ok() {
                        std::alloc::dealloc(p, layout);
                    }
                }
            }
        }
    }
}

/// Device memory, or mapped pinned host memory (unified mode, the RAM tier).
pub(super) struct Memory<R: Runtime> {
    pub(super) rt: Arc<R>,
    dptr: u64,
    pub(super) len: usize,
    /// Host address of mapped memory.
    pub(super) host: Option<NonNull<u8>>,
    /// False for a caller's allocation (`wrap_device_memory`): never freed here.
    owned: bool,
}

// SAFETY: a device address and an owned mapping; the runtime may be called from any thread.
unsafe impl<R: Runtime> Send for Memory<R> {}
// SAFETY: as above; shared access hands out only addresses.
unsafe impl<R: Runtime> Sync for Memory<R> {}

impl<R: Runtime> Memory<R> {
    /// `len` bytes of device memory (`mapped`: of mapped pinned host memory, a whole page at
    /// least); binds the device.
    pub(super) fn new(
        rt: &Arc<R>,
        len: usize,
        mapped: bool,
        what: &'static str,
    ) -> Result<Self, DeviceError> {
        rt.bind()?;
        let (kind, size) = match mapped {
            true => (MemKind::Mapped, len.max(1).next_multiple_of(PINNED_ALIGN)),
            false => (MemKind::Device, len),
        };
        let a = match size {
            0 => RawAlloc {
                host: std::ptr::null_mut(),
                dev: 0,
            },
            // SAFETY: bound above.
            _ => unsafe { rt.alloc(kind, size) }.map_err(oom::<R>(size, what))?,
        };
        let host = NonNull::new(a.host);
        if mapped && host.is_none() {
            return Err(DeviceError::OutOfMemory {
                bytes: size as u64,
                what,
            });
        }
        Ok(Self {
            rt: rt.clone(),
            dptr: a.dev,
            len,
            host,
            owned: true,
        })
    }

    /// A caller's allocation at device address `addr`: freed by nobody here.
    pub(super) fn foreign(rt: &Arc<R>, addr: u64, len: usize) -> Self {
        Self {
            rt: rt.clone(),
            dptr: addr,
            len,
            host: None,
            owned: false,
        }
    }

    /// Device address of byte `offset` (checked by the caller).
    pub(super) fn at(&self, offset: usize) -> u64 {
        self.dptr + offset as u64
    }
}

// SAFETY: `len` is fixed; `host` (mapped memory) is fixed at allocation and valid for `len`
// bytes until `drop`; the backend touches the memory only through copies fenced by leases and
// events.
unsafe impl<R: Runtime> DeviceMemory for Memory<R> {
    fn len(&self) -> usize {
        self.len
    }
    fn backend(&self) -> BackendKind {
        R::KIND
    }
    fn host_ptr(&self) -> Option<NonNull<u8>> {
        self.host
    }
    fn device_addr(&self) -> Option<u64> {
        Some(self.dptr)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl<R: Runtime> Drop for Memory<R> {
    fn drop(&mut self) {
        if !self.owned || self.rt.bind().is_err() {
            return;
        }
        let (kind, host) = match self.host {
            Some(h) => (MemKind::Mapped, h.as_ptr()),
            None if self.len > 0 => (MemKind::Device, std::ptr::null_mut()),
            None => return,
        };
        // SAFETY: bound; ours; no copy writes it any more (copies hold a lease on the buffer,
        // which keeps this alive until the copy has completed).
        let _ = unsafe {
            self.rt.free(
                kind,
                RawAlloc {
                    host,
                    dev: self.dptr,
                },
            )
        };
    }
}
