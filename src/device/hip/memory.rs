//! Memory of the HIP backend: pinned staging allocations and device allocations, each freeing
//! itself in `Drop` (after the owner waited for every copy that touches it).

use super::api::{self, check, void, Dev, Status};
use super::HipDevice;
use crate::device::{BackendKind, DeviceError, DeviceMemory, PinnedMemory, PINNED_ALIGN};
use std::alloc::Layout;
use std::any::Any;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

/// How a pinned allocation was made (how to free it).
pub(super) enum PinnedKind {
    HostMalloc,
    /// `std::alloc` memory registered with the runtime (when `hipHostMalloc` memory is not
    /// page-aligned: not a documented promise).
    Registered(Layout),
}

pub(super) struct HipPinned {
    pub(super) dev: Arc<Dev>,
    pub(super) ptr: NonNull<u8>,
    pub(super) len: usize,
    pub(super) kind: PinnedKind,
}

// SAFETY: plain memory owned by this object; the runtime may be called from any thread.
unsafe impl Send for HipPinned {}
// SAFETY: as above; shared access hands out only the address.
unsafe impl Sync for HipPinned {}

// SAFETY: `ptr` is fixed at allocation, aligned to PINNED_ALIGN (checked in `alloc_pinned`) and
// valid for `len` (≤ the allocated size) bytes until `drop` frees it; only the owning PinnedBuf
// and the copies it issues (fenced by events) touch it.
unsafe impl PinnedMemory for HipPinned {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    fn len(&self) -> usize {
        self.len
    }
    fn backend(&self) -> BackendKind {
        BackendKind::Hip
    }
}

impl Drop for HipPinned {
    fn drop(&mut self) {
        if self.dev.bind().is_err() {
            return; // leak rather than free memory the runtime may still use
        }
        // SAFETY: the allocation is ours, and its PinnedBuf waited for its last copy before
        // dropping it.
        unsafe {
            match self.kind {
                PinnedKind::HostMalloc => {
                    api::hipHostFree(void(self.ptr.as_ptr()));
                }
                PinnedKind::Registered(layout) => {
                    if api::hipHostUnregister(void(self.ptr.as_ptr())) == api::HIP_SUCCESS {
                        std::alloc::dealloc(self.ptr.as_ptr(), layout);
                    }
                }
            }
        }
    }
}

/// Device memory: `hipMalloc`, or mapped pinned host memory (unified mode).
pub(super) struct HipMemory {
    pub(super) dev: Arc<Dev>,
    pub(super) dptr: *mut c_void,
    pub(super) len: usize,
    /// Host address of mapped memory (unified mode).
    pub(super) host: Option<NonNull<u8>>,
    /// False for a caller's allocation (`wrap_device_memory`): never freed here.
    pub(super) owned: bool,
}

// SAFETY: a device address and an owned mapping; the runtime may be called from any thread.
unsafe impl Send for HipMemory {}
// SAFETY: as above; shared access hands out only addresses.
unsafe impl Sync for HipMemory {}

// SAFETY: `len` is fixed; `host` (mapped memory) is fixed at allocation and valid for `len`
// bytes until `drop`; the backend touches the memory only through copies fenced by leases and
// events.
unsafe impl DeviceMemory for HipMemory {
    fn len(&self) -> usize {
        self.len
    }
    fn backend(&self) -> BackendKind {
        BackendKind::Hip
    }
    fn host_ptr(&self) -> Option<NonNull<u8>> {
        self.host
    }
    fn device_addr(&self) -> Option<u64> {
        Some(self.dptr as usize as u64)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl HipMemory {
    /// Device address of byte `offset` (checked by the caller). Plain address arithmetic: the
    /// result is only handed to the runtime, never dereferenced here.
    pub(super) fn at(&self, offset: usize) -> *mut c_void {
        self.dptr.cast::<u8>().wrapping_add(offset).cast()
    }
}

impl Drop for HipMemory {
    fn drop(&mut self) {
        if !self.owned || self.dev.bind().is_err() {
            return;
        }
        // SAFETY: ours; no copy writes it any more (copies hold a lease on the buffer, which
        // keeps this alive until the copy has completed).
        unsafe {
            match self.host {
                Some(h) => {
                    api::hipHostFree(void(h.as_ptr()));
                }
                None if self.len > 0 => {
                    api::hipFree(self.dptr);
                }
                None => {}
            }
        }
    }
}

/// Maps an allocation failure to `OutOfMemory`, anything else to the call's error.
pub(super) fn alloc_check(
    r: Status,
    call: &'static str,
    bytes: usize,
    what: &'static str,
) -> Result<(), DeviceError> {
    if r == api::HIP_ERROR_OUT_OF_MEMORY {
        return Err(DeviceError::OutOfMemory {
            bytes: bytes as u64,
            what,
        });
    }
    check(r, call)
}

impl HipDevice {
    /// Pinned memory the slow way: an aligned `std::alloc` block registered with the runtime.
    pub(super) fn register_aligned(
        &self,
        len: usize,
        size: usize,
    ) -> Result<HipPinned, DeviceError> {
        let layout =
            Layout::from_size_align(size, PINNED_ALIGN).map_err(|_| DeviceError::OutOfMemory {
                bytes: size as u64,
                what: "pinned host memory",
            })?;
        // SAFETY: `layout` has a non-zero size.
        let p =
            NonNull::new(unsafe { std::alloc::alloc(layout) }).ok_or(DeviceError::OutOfMemory {
                bytes: size as u64,
                what: "pinned host memory",
            })?;
        // SAFETY: `p` is a live allocation of `size` bytes that we own.
        let r =
            unsafe { api::hipHostRegister(void(p.as_ptr()), size, api::HOST_REGISTER_PORTABLE) };
        if let Err(e) = alloc_check(r, "hipHostRegister", size, "pinned host memory") {
            // SAFETY: allocated above with this layout, never registered.
            unsafe { std::alloc::dealloc(p.as_ptr(), layout) };
            return Err(e);
        }
        Ok(HipPinned {
            dev: self.dev.clone(),
            ptr: p,
            len,
            kind: PinnedKind::Registered(layout),
        })
    }
}
