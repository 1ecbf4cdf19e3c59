//! The `cuda` backend: NVIDIA GPUs through the CUDA driver API (cudarc's bindings, loaded at
//! run time, so a `cuda` build starts with no CUDA installed and answers "no CUDA driver").
//!
//! Shape (STYLE.md item 1): raw bindings (`cudarc::driver::sys`) → one `Result` per call
//! (`api.rs`) → RAII types here that free in `Drop`: [`CudaDevice`] (primary context, one
//! non-blocking copy stream, a completion thread), pinned staging memory (`cuMemHostAlloc`,
//! page-aligned or else aligned allocation + `cuMemHostRegister`), device memory (`cuMemAlloc`,
//! or mapped pinned host memory in unified mode), and per-copy events.
//!
//! Copies: `cuMemcpyHtoDAsync` from our pinned memory only (a pageable source would silently
//! become a synchronous staged copy), then an event; the completion thread waits for that
//! event, drops the copy's write lease, and only then completes the [`Event`] the staging
//! buffer holds (see `completion.rs`: a stream callback may not free device memory).
//!
//! Unified mode ([`CudaConfig::unified`]; automatic on integrated GPUs): device allocations are
//! mapped pinned host memory with a device pointer; the engine reads files straight into them.
//! Forcing it on a discrete GPU runs that path on the H200 (the GPU then reads over PCIe).
//!
//! Limits: one stream per device; device-to-host reads are synchronous (tests, `cat`).

mod api;
mod kernels;

pub use kernels::CudaCompute;

use super::buffer::{
    DeferredErrors, DeviceBuffer, DeviceMemory, PinnedBuf, PinnedMemory, WriteLease,
};
use super::completion::{Completer, RawEvent};
use super::{check_range, BackendKind, Device, DeviceError, GpuDevice, MemInfo, PINNED_ALIGN};
use api::{check, void, Ctx};
use cudarc::driver::sys::{self, CUresult};
use std::alloc::Layout;
use std::any::Any;
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

/// Settings of a [`CudaDevice`].
#[derive(Clone, Debug, Default)]
pub struct CudaConfig {
    /// Device ordinal (0 = the first GPU).
    pub ordinal: usize,
    /// Unified mode: `None` = on for integrated GPUs only; `Some(true)` forces it on a
    /// discrete GPU (device allocations become mapped pinned host memory).
    pub unified: Option<bool>,
}

/// One CUDA device with one copy stream.
pub struct CudaDevice {
    // Drop order: the completion thread first (it waits for every queued copy), then the
    // stream, then the context.
    done: Completer,
    /// The kernels and their stream, made on first use (NVRTC compile).
    compute: OnceLock<CudaCompute>,
    stream: Stream,
    ctx: Arc<Ctx>,
    deferred: Arc<DeferredErrors>,
    name: String,
    unified: bool,
    integrated: bool,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice")
            .field("name", &self.name)
            .field("unified", &self.unified)
            .finish()
    }
}

impl CudaDevice {
    /// Opens device `cfg.ordinal`: a clean [`DeviceError::NoDevice`] when there is no driver or
    /// no such device.
    pub fn new(cfg: CudaConfig) -> Result<Self, DeviceError> {
        let ctx = Arc::new(Ctx::open(cfg.ordinal)?);
        ctx.bind()?;
        let integrated =
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_INTEGRATED)? != 0;
        let unified = cfg.unified.unwrap_or(integrated);
        if unified
            && ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)? == 0
        {
            return Err(DeviceError::Backend {
                backend: BackendKind::Cuda,
                call: "unified mode",
                code: -1,
                detail: "this device cannot map host memory".into(),
            });
        }
        let stream = Stream::new(&ctx)?;
        let c = ctx.clone();
        let done = Completer::start(BackendKind::Cuda, move || c.bind())?;
        let name = format!("{} (CUDA {})", ctx.name(), cfg.ordinal);
        Ok(Self {
            done,
            compute: OnceLock::new(),
            stream,
            ctx,
            deferred: Arc::default(),
            name,
            unified,
            integrated,
        })
    }

    /// True when the GPU shares memory with the CPU (what `unified` defaults to).
    pub fn integrated(&self) -> bool {
        self.integrated
    }

    /// `len` bytes of mapped pinned host memory (the context is current).
    fn mapped(&self, len: usize, what: &'static str) -> Result<CudaMemory, DeviceError> {
        let size = len.max(1).next_multiple_of(PINNED_ALIGN);
        let mut p = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: writes one pointer; the context is current.
        let r = unsafe { sys::cuMemHostAlloc(&mut p, size, flags) };
        alloc_check(r, "cuMemHostAlloc", size, what)?;
        let mut d: sys::CUdeviceptr = 0;
        // SAFETY: `p` is mapped pinned memory we just allocated.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, p, 0) };
        if let Err(e) = check(r, "cuMemHostGetDevicePointer") {
            // SAFETY: frees what we just allocated.
            unsafe { sys::cuMemFreeHost(p) };
            return Err(e);
        }
        Ok(CudaMemory {
            ctx: self.ctx.clone(),
            dptr: d,
            len,
            host: NonNull::new(p.cast::<u8>()),
            owned: true,
        })
    }

    /// Zeroes a new allocation (like the host backend's: tests and callers may rely on it):
    /// one memset on the stream, waited for here (allocation is the slow path anyway).
    fn zeroed(&self, mem: CudaMemory) -> Result<DeviceBuffer, DeviceError> {
        if mem.len > 0 {
            // SAFETY: `len` bytes of memory we just allocated; the context is current.
            let r = unsafe { sys::cuMemsetD8Async(mem.dptr, 0, mem.len, self.stream.raw) };
            check(r, "cuMemsetD8Async")?;
            self.stream.synchronize()?;
        }
        Ok(DeviceBuffer::from_memory(Box::new(mem)))
    }

    fn ours<'a>(&self, buf: &'a DeviceBuffer) -> Result<&'a CudaMemory, DeviceError> {
        let mem = buf.memory().as_any().downcast_ref::<CudaMemory>().ok_or(
            DeviceError::WrongBackend {
                expected: BackendKind::Cuda,
                found: buf.backend(),
            },
        )?;
        if !Arc::ptr_eq(&mem.ctx, &self.ctx) {
            return Err(DeviceError::Backend {
                backend: BackendKind::Cuda,
                call: "copy",
                code: -1,
                detail: "device memory of another CUDA device".into(),
            });
        }
        Ok(mem)
    }
}

/// The copy stream.
struct Stream {
    ctx: Arc<Ctx>,
    raw: sys::CUstream,
}

// SAFETY: a CUstream handle may be used from any thread with its context current (which every
// use here makes sure of); the driver serialises work on it.
unsafe impl Send for Stream {}
// SAFETY: as above.
unsafe impl Sync for Stream {}

impl Stream {
    fn new(ctx: &Arc<Ctx>) -> Result<Self, DeviceError> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: writes one stream handle; the context is current (bound by the caller).
        let r = unsafe {
            sys::cuStreamCreate(&mut raw, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
        };
        check(r, "cuStreamCreate")?;
        Ok(Self {
            ctx: ctx.clone(),
            raw,
        })
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        self.ctx.bind()?;
        // SAFETY: a live stream of the current context.
        let r = unsafe { sys::cuStreamSynchronize(self.raw) };
        check(r, "cuStreamSynchronize")
    }

    /// Records a new event after everything queued so far.
    fn record(&self) -> Result<CudaEvent, DeviceError> {
        let mut raw = std::ptr::null_mut();
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32
            | sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
        // SAFETY: writes one event handle; the context is current (bound by the caller).
        let r = unsafe { sys::cuEventCreate(&mut raw, flags) };
        check(r, "cuEventCreate")?;
        let ev = CudaEvent {
            ctx: self.ctx.clone(),
            raw,
        };
        // SAFETY: a live event and stream of the current context.
        let r = unsafe { sys::cuEventRecord(ev.raw, self.raw) };
        check(r, "cuEventRecord")?;
        Ok(ev)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: the stream is ours and used by nobody else any more; pending work finishes
            // first (the completion thread waited for every copy before this runs).
            unsafe {
                sys::cuStreamSynchronize(self.raw);
                sys::cuStreamDestroy_v2(self.raw);
            }
        }
    }
}

/// One copy's event, waited for and destroyed on the completion thread.
struct CudaEvent {
    ctx: Arc<Ctx>,
    raw: sys::CUevent,
}

// SAFETY: a CUevent may be waited for and destroyed from any thread with its context current.
unsafe impl Send for CudaEvent {}

impl RawEvent for CudaEvent {
    fn wait(&self) -> Result<(), DeviceError> {
        self.ctx.bind()?;
        // SAFETY: a live event of the current context.
        let r = unsafe { sys::cuEventSynchronize(self.raw) };
        check(r, "cuEventSynchronize")
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: the event is ours; destroying a pending event is allowed (the driver
            // releases it at completion).
            unsafe {
                sys::cuEventDestroy_v2(self.raw);
            }
        }
    }
}

/// How a pinned allocation was made (how to free it).
enum PinnedKind {
    HostAlloc,
    /// `std::alloc` memory registered with the driver (when `cuMemHostAlloc` memory is not
    /// page-aligned: not a documented promise).
    Registered(Layout),
}

struct CudaPinned {
    ctx: Arc<Ctx>,
    ptr: NonNull<u8>,
    len: usize,
    kind: PinnedKind,
}

// SAFETY: plain memory owned by this object; the driver may be called from any thread.
unsafe impl Send for CudaPinned {}
// SAFETY: as above; shared access hands out only the address.
unsafe impl Sync for CudaPinned {}

// SAFETY: `ptr` is fixed at allocation, aligned to PINNED_ALIGN (checked in `alloc_pinned`) and
// valid for `len` (≤ the allocated size) bytes until `drop` frees it; only the owning PinnedBuf
// and the copies it issues (fenced by events) touch it.
unsafe impl PinnedMemory for CudaPinned {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    fn len(&self) -> usize {
        self.len
    }
    fn backend(&self) -> BackendKind {
        BackendKind::Cuda
    }
}

impl Drop for CudaPinned {
    fn drop(&mut self) {
        if self.ctx.bind().is_err() {
            return; // leak rather than free memory the driver may still use
        }
        // SAFETY: the allocation is ours, and its PinnedBuf waited for its last copy before
        // dropping it.
        unsafe {
            match self.kind {
                PinnedKind::HostAlloc => {
                    sys::cuMemFreeHost(void(self.ptr.as_ptr()));
                }
                PinnedKind::Registered(layout) => {
                    if sys::cuMemHostUnregister(void(self.ptr.as_ptr())) == CUresult::CUDA_SUCCESS {
                        std::alloc::dealloc(self.ptr.as_ptr(), layout);
                    }
                }
            }
        }
    }
}

/// Device memory: `cuMemAlloc`, or mapped pinned host memory (unified mode).
struct CudaMemory {
    ctx: Arc<Ctx>,
    dptr: sys::CUdeviceptr,
    len: usize,
    /// Host address of mapped memory (unified mode).
    host: Option<NonNull<u8>>,
    /// False for a caller's allocation (`wrap_device_memory`): never freed here.
    owned: bool,
}

// SAFETY: a device address and an owned mapping; the driver may be called from any thread.
unsafe impl Send for CudaMemory {}
// SAFETY: as above; shared access hands out only addresses.
unsafe impl Sync for CudaMemory {}

// SAFETY: `len` is fixed; `host` (mapped memory) is fixed at allocation and valid for `len`
// bytes until `drop`; the backend touches the memory only through copies fenced by leases and
// events.
unsafe impl DeviceMemory for CudaMemory {
    fn len(&self) -> usize {
        self.len
    }
    fn backend(&self) -> BackendKind {
        BackendKind::Cuda
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

impl CudaMemory {
    /// Device address of byte `offset` (checked by the caller).
    fn at(&self, offset: usize) -> sys::CUdeviceptr {
        self.dptr + offset as u64
    }
}

impl Drop for CudaMemory {
    fn drop(&mut self) {
        if !self.owned || self.ctx.bind().is_err() {
            return;
        }
        // SAFETY: ours; no copy writes it any more (copies hold a lease on the buffer, which
        // keeps this alive until the copy has completed).
        unsafe {
            match self.host {
                Some(h) => {
                    sys::cuMemFreeHost(void(h.as_ptr()));
                }
                None if self.len > 0 => {
                    sys::cuMemFree_v2(self.dptr);
                }
                None => {}
            }
        }
    }
}

/// Maps an allocation failure to `OutOfMemory`, anything else to the call's error.
fn alloc_check(
    r: CUresult,
    call: &'static str,
    bytes: usize,
    what: &'static str,
) -> Result<(), DeviceError> {
    if r == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        return Err(DeviceError::OutOfMemory {
            bytes: bytes as u64,
            what,
        });
    }
    check(r, call)
}

impl Device for CudaDevice {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn kind(&self) -> BackendKind {
        BackendKind::Cuda
    }

    fn unified_memory(&self) -> bool {
        self.unified
    }

    fn alloc_pinned(&self, len: usize) -> Result<PinnedBuf, DeviceError> {
        self.ctx.bind()?;
        // Never a zero-size allocation (the driver refuses it); a whole page at least.
        let size = len.max(1).next_multiple_of(PINNED_ALIGN);
        let mut p = std::ptr::null_mut();
        // SAFETY: writes one pointer; the context is current.
        let r = unsafe { sys::cuMemHostAlloc(&mut p, size, sys::CU_MEMHOSTALLOC_PORTABLE) };
        alloc_check(r, "cuMemHostAlloc", size, "pinned host memory")?;
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(DeviceError::OutOfMemory {
            bytes: size as u64,
            what: "pinned host memory",
        })?;
        let mem = if (ptr.as_ptr() as usize) % PINNED_ALIGN == 0 {
            CudaPinned {
                ctx: self.ctx.clone(),
                ptr,
                len,
                kind: PinnedKind::HostAlloc,
            }
        } else {
            // SAFETY: frees what cuMemHostAlloc just returned.
            unsafe { sys::cuMemFreeHost(p) };
            self.register_aligned(len, size)?
        };
        Ok(PinnedBuf::new(Box::new(mem), self.deferred.clone()))
    }

    unsafe fn wrap_device_memory(
        &self,
        addr: u64,
        len: usize,
    ) -> Result<DeviceBuffer, DeviceError> {
        super::check_foreign(addr, len, BackendKind::Cuda)?;
        // Not owned: Drop frees nothing. The caller vouches (the trait's contract) that the
        // range is this context's memory and outlives the buffer.
        Ok(DeviceBuffer::from_memory(Box::new(CudaMemory {
            ctx: self.ctx.clone(),
            dptr: addr,
            len,
            host: None,
            owned: false,
        })))
    }

    fn alloc(&self, len: usize) -> Result<DeviceBuffer, DeviceError> {
        self.ctx.bind()?;
        let mem = if self.unified {
            self.mapped(len, "mapped device memory")?
        } else {
            let mut d: sys::CUdeviceptr = 0;
            if len > 0 {
                // SAFETY: writes one device pointer; the context is current.
                let r = unsafe { sys::cuMemAlloc_v2(&mut d, len) };
                alloc_check(r, "cuMemAlloc", len, "device memory")?;
            }
            CudaMemory {
                ctx: self.ctx.clone(),
                dptr: d,
                len,
                host: None,
                owned: true,
            }
        };
        self.zeroed(mem)
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
        dst.check(dst_offset, len)?;
        if src.backend() != BackendKind::Cuda {
            return Err(DeviceError::WrongBackend {
                expected: BackendKind::Cuda,
                found: src.backend(),
            });
        }
        let mem = self.ours(dst.buffer())?;
        self.ctx.bind()?;
        if len > 0 {
            // SAFETY: the source range lies in pinned memory owned by `src` (checked above),
            // which waits for the event recorded below before any host write or free; the
            // destination range lies in `mem` (checked by the lease), which the lease keeps
            // alive and exclusive until the completion thread has seen the copy finish.
            let r = unsafe {
                sys::cuMemcpyHtoDAsync_v2(
                    mem.at(dst_offset),
                    void(src.src_ptr().add(src_offset)),
                    len,
                    self.stream.raw,
                )
            };
            check(r, "cuMemcpyHtoDAsync")?;
        }
        let ev = self.stream.record()?;
        src.record(self.done.track(Box::new(ev), Some(dst.clone())));
        Ok(())
    }

    fn read_d2h(
        &self,
        src: &DeviceBuffer,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<(), DeviceError> {
        check_range(offset, dst.len(), src.len(), "device buffer")?;
        let _lease = src.lease_read(offset, dst.len())?;
        let mem = self.ours(src)?;
        // After every copy and kernel queued before.
        self.synchronize_compute()?;
        self.stream.synchronize()?;
        if dst.is_empty() {
            return Ok(());
        }
        match mem.host {
            Some(h) => {
                // SAFETY: mapped memory valid for `len` bytes; the range was checked, the read
                // lease keeps writers out, and the stream is idle.
                let s = unsafe { std::slice::from_raw_parts(h.as_ptr().add(offset), dst.len()) };
                dst.copy_from_slice(s);
            }
            None => {
                // SAFETY: `dst` is a live exclusive slice of `len` bytes; the source range lies
                // in `mem` (checked) under a read lease. Synchronous copy.
                let r = unsafe {
                    sys::cuMemcpyDtoH_v2(void(dst.as_mut_ptr()), mem.at(offset), dst.len())
                };
                check(r, "cuMemcpyDtoH")?;
            }
        }
        Ok(())
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        self.synchronize_compute()?;
        self.stream.synchronize()?;
        self.done.drain();
        self.deferred.take()
    }

    fn memory_info(&self) -> Result<Option<MemInfo>, DeviceError> {
        let (free, total) = self.ctx.mem_info()?;
        Ok(Some(MemInfo { free, total }))
    }

    fn copy_pageable_blocking(
        &self,
        src: &[u8],
        dst: &Arc<DeviceBuffer>,
        dst_offset: usize,
    ) -> Result<(), DeviceError> {
        let _lease = dst.lease_write(dst_offset, src.len())?;
        let mem = self.ours(dst)?;
        self.synchronize()?;
        self.ctx.bind()?;
        if src.is_empty() {
            return Ok(());
        }
        match mem.host {
            Some(h) => {
                // SAFETY: mapped memory valid for `len` bytes; the range was checked by the
                // lease, which keeps every other writer and reader out; the stream is idle.
                let d = unsafe {
                    std::slice::from_raw_parts_mut(h.as_ptr().add(dst_offset), src.len())
                };
                d.copy_from_slice(src);
            }
            None => {
                // SAFETY: `src` is a live slice of `len` bytes (pageable: the driver stages it
                // and returns when the copy is done); the destination range lies in `mem`
                // (checked by the lease) and is exclusively ours while the lease lives.
                let r = unsafe {
                    sys::cuMemcpyHtoD_v2(mem.at(dst_offset), void(src.as_ptr()), src.len())
                };
                check(r, "cuMemcpyHtoD")?;
            }
        }
        Ok(())
    }
}

impl CudaDevice {
    /// Pinned memory the slow way: an aligned `std::alloc` block registered with the driver.
    fn register_aligned(&self, len: usize, size: usize) -> Result<CudaPinned, DeviceError> {
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
        let r = unsafe {
            sys::cuMemHostRegister_v2(void(p.as_ptr()), size, sys::CU_MEMHOSTREGISTER_PORTABLE)
        };
        if let Err(e) = alloc_check(r, "cuMemHostRegister", size, "pinned host memory") {
            // SAFETY: allocated above with this layout, never registered.
            unsafe { std::alloc::dealloc(p.as_ptr(), layout) };
            return Err(e);
        }
        Ok(CudaPinned {
            ctx: self.ctx.clone(),
            ptr: p,
            len,
            kind: PinnedKind::Registered(layout),
        })
    }
}
