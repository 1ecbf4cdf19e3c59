//! The `hip` backend: AMD GPUs through the HIP runtime (libamdhip64, linked at build time by
//! hip-sys, so a `hip` binary needs libamdhip64 to start; with it and no AMD GPU, opening the
//! device answers `NoDevice` with `hipErrorNoDevice`). The same design as the `cuda` backend.
//!
//! Shape (STYLE.md item 1): raw declarations (`api.rs`, see there why not hip-sys's) → one
//! `Result` per call → RAII types here that free in `Drop`: [`HipDevice`] (the device made
//! current per thread with `hipSetDevice`, one non-blocking copy stream, a completion thread),
//! pinned staging memory (`hipHostMalloc`, page-aligned or else aligned allocation +
//! `hipHostRegister`), device memory (`hipMalloc`, or mapped pinned host memory in unified
//! mode), and per-copy events.
//!
//! Copies: `hipMemcpyHtoDAsync` from our pinned memory only (a pageable source would silently
//! become a synchronous staged copy), then an event; the completion thread waits for that
//! event, drops the copy's write lease, and only then completes the [`Event`] the staging
//! buffer holds (see `completion.rs`: a stream callback may not free device memory).
//!
//! Unified mode ([`HipConfig::unified`]; automatic on integrated GPUs such as Strix Halo's
//! gfx1151): device allocations are mapped pinned host memory with a device pointer; the engine
//! reads files straight into them. Forcing it on a discrete GPU runs that path there.
//!
//! Limits: one stream per device; device-to-host reads are synchronous (tests, `cat`). Tested
//! on real hardware only through the CUDA shim (tests/hip_shim), not yet on an AMD GPU.

mod api;
mod kernels;
mod memory;
mod rtc;

pub use kernels::HipCompute;
pub use rtc::{compile_kernels_for, compile_source_for};

use super::buffer::{DeferredErrors, DeviceBuffer, PinnedBuf, WriteLease};
use super::completion::{Completer, RawEvent};
use super::{check_range, BackendKind, Device, DeviceError, GpuDevice, MemInfo, PINNED_ALIGN};
use api::{check, void, Dev};
use memory::{alloc_check, HipMemory, HipPinned, PinnedKind};
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

/// Settings of a [`HipDevice`].
#[derive(Clone, Debug, Default)]
pub struct HipConfig {
    /// Device ordinal (0 = the first GPU).
    pub ordinal: usize,
    /// Unified mode: `None` = on for integrated GPUs only; `Some(true)` forces it on a
    /// discrete GPU (device allocations become mapped pinned host memory).
    pub unified: Option<bool>,
}

/// One HIP device with one copy stream.
pub struct HipDevice {
    // Drop order: the completion thread first (it waits for every queued copy), then the
    // stream, then the device handle.
    done: Completer,
    /// The kernels and their stream, made on first use (hipRTC compile).
    compute: OnceLock<HipCompute>,
    stream: Stream,
    dev: Arc<Dev>,
    deferred: Arc<DeferredErrors>,
    name: String,
    unified: bool,
    integrated: bool,
}

impl std::fmt::Debug for HipDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipDevice")
            .field("name", &self.name)
            .field("unified", &self.unified)
            .finish()
    }
}

impl HipDevice {
    /// Opens device `cfg.ordinal`: a clean [`DeviceError::NoDevice`] when the runtime finds no
    /// device (`hipErrorNoDevice`) or not that one.
    pub fn new(cfg: HipConfig) -> Result<Self, DeviceError> {
        let dev = Arc::new(Dev::open(cfg.ordinal)?);
        dev.bind()?;
        let integrated = dev.attribute(api::ATTR_INTEGRATED)? != 0;
        let unified = cfg.unified.unwrap_or(integrated);
        if unified && dev.attribute(api::ATTR_CAN_MAP_HOST_MEMORY)? == 0 {
            return Err(DeviceError::Backend {
                backend: BackendKind::Hip,
                call: "unified mode",
                code: -1,
                detail: "this device cannot map host memory".into(),
            });
        }
        let stream = Stream::new(&dev)?;
        let d = dev.clone();
        let done = Completer::start(BackendKind::Hip, move || d.bind())?;
        let name = format!("{} (HIP {})", dev.name(), cfg.ordinal);
        Ok(Self {
            done,
            compute: OnceLock::new(),
            stream,
            dev,
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

    /// `len` bytes of mapped pinned host memory with its device pointer (the device is
    /// current).
    fn mapped(&self, len: usize, what: &'static str) -> Result<HipMemory, DeviceError> {
        let size = len.max(1).next_multiple_of(PINNED_ALIGN);
        let mut p = std::ptr::null_mut();
        let flags = api::HOST_MALLOC_MAPPED | api::HOST_MALLOC_PORTABLE;
        // SAFETY: writes one pointer; the device is current.
        let r = unsafe { api::hipHostMalloc(&mut p, size, flags) };
        alloc_check(r, "hipHostMalloc", size, what)?;
        let host = NonNull::new(p.cast::<u8>()).ok_or(DeviceError::OutOfMemory {
            bytes: size as u64,
            what,
        })?;
        let mut d = std::ptr::null_mut();
        // SAFETY: `p` is mapped pinned memory we just allocated.
        let r = unsafe { api::hipHostGetDevicePointer(&mut d, p, 0) };
        if let Err(e) = check(r, "hipHostGetDevicePointer") {
            // SAFETY: frees what we just allocated.
            unsafe { api::hipHostFree(p) };
            return Err(e);
        }
        Ok(HipMemory {
            dev: self.dev.clone(),
            dptr: d,
            len,
            host: Some(host),
            owned: true,
        })
    }

    /// Zeroes new memory like the host backend's (tests and callers may rely on it): one
    /// memset on the copy stream, waited for here (allocation is the slow path anyway).
    fn zeroed(&self, mem: HipMemory) -> Result<DeviceBuffer, DeviceError> {
        if mem.len > 0 {
            // SAFETY: `mem.len` bytes of memory we just allocated; the device is current.
            let r = unsafe { api::hipMemsetAsync(mem.dptr, 0, mem.len, self.stream.raw) };
            check(r, "hipMemsetAsync")?;
            self.stream.synchronize()?;
        }
        Ok(DeviceBuffer::from_memory(Box::new(mem)))
    }

    fn ours<'a>(&self, buf: &'a DeviceBuffer) -> Result<&'a HipMemory, DeviceError> {
        let mem =
            buf.memory()
                .as_any()
                .downcast_ref::<HipMemory>()
                .ok_or(DeviceError::WrongBackend {
                    expected: BackendKind::Hip,
                    found: buf.backend(),
                })?;
        if !Arc::ptr_eq(&mem.dev, &self.dev) {
            return Err(DeviceError::Backend {
                backend: BackendKind::Hip,
                call: "copy",
                code: -1,
                detail: "device memory of another HIP device".into(),
            });
        }
        Ok(mem)
    }
}

/// The copy stream.
struct Stream {
    dev: Arc<Dev>,
    raw: api::hipStream_t,
}

// SAFETY: a hipStream_t may be used from any thread with its device current (which every use
// here makes sure of); the runtime serialises work on it.
unsafe impl Send for Stream {}
// SAFETY: as above.
unsafe impl Sync for Stream {}

impl Stream {
    fn new(dev: &Arc<Dev>) -> Result<Self, DeviceError> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: writes one stream handle; the device is current (bound by the caller).
        let r = unsafe { api::hipStreamCreateWithFlags(&mut raw, api::STREAM_NON_BLOCKING) };
        check(r, "hipStreamCreateWithFlags")?;
        Ok(Self {
            dev: dev.clone(),
            raw,
        })
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        self.dev.bind()?;
        // SAFETY: a live stream of the current device.
        let r = unsafe { api::hipStreamSynchronize(self.raw) };
        check(r, "hipStreamSynchronize")
    }

    /// Records a new event after everything queued so far.
    fn record(&self) -> Result<HipEvent, DeviceError> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: writes one event handle; the device is current (bound by the caller).
        let r = unsafe { api::hipEventCreateWithFlags(&mut raw, api::EVENT_FLAGS) };
        check(r, "hipEventCreateWithFlags")?;
        let ev = HipEvent {
            dev: self.dev.clone(),
            raw,
        };
        // SAFETY: a live event and stream of the current device.
        let r = unsafe { api::hipEventRecord(ev.raw, self.raw) };
        check(r, "hipEventRecord")?;
        Ok(ev)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.dev.bind().is_ok() {
            // SAFETY: the stream is ours and used by nobody else any more; pending work finishes
            // first (the completion thread waited for every copy before this runs).
            unsafe {
                api::hipStreamSynchronize(self.raw);
                api::hipStreamDestroy(self.raw);
            }
        }
    }
}

/// One copy's event, waited for and destroyed on the completion thread.
struct HipEvent {
    dev: Arc<Dev>,
    raw: api::hipEvent_t,
}

// SAFETY: a hipEvent_t may be waited for and destroyed from any thread with its device current.
unsafe impl Send for HipEvent {}

impl RawEvent for HipEvent {
    fn wait(&self) -> Result<(), DeviceError> {
        self.dev.bind()?;
        // SAFETY: a live event of the current device.
        let r = unsafe { api::hipEventSynchronize(self.raw) };
        check(r, "hipEventSynchronize")
    }
}

impl Drop for HipEvent {
    fn drop(&mut self) {
        if self.dev.bind().is_ok() {
            // SAFETY: the event is ours and was waited for (or its copy never queued).
            unsafe {
                api::hipEventDestroy(self.raw);
            }
        }
    }
}

impl Device for HipDevice {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn kind(&self) -> BackendKind {
        BackendKind::Hip
    }

    fn unified_memory(&self) -> bool {
        self.unified
    }

    fn alloc_pinned(&self, len: usize) -> Result<PinnedBuf, DeviceError> {
        self.dev.bind()?;
        // Never a zero-size allocation (the runtime returns null for it); a whole page at least.
        let size = len.max(1).next_multiple_of(PINNED_ALIGN);
        let mut p = std::ptr::null_mut();
        // SAFETY: writes one pointer; the device is current.
        let r = unsafe { api::hipHostMalloc(&mut p, size, api::HOST_MALLOC_PORTABLE) };
        alloc_check(r, "hipHostMalloc", size, "pinned host memory")?;
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(DeviceError::OutOfMemory {
            bytes: size as u64,
            what: "pinned host memory",
        })?;
        let mem = if (ptr.as_ptr() as usize) % PINNED_ALIGN == 0 {
            HipPinned {
                dev: self.dev.clone(),
                ptr,
                len,
                kind: PinnedKind::HostMalloc,
            }
        } else {
            // SAFETY: frees what hipHostMalloc just returned.
            unsafe { api::hipHostFree(p) };
            self.register_aligned(len, size)?
        };
        Ok(PinnedBuf::new(Box::new(mem), self.deferred.clone()))
    }

    unsafe fn wrap_device_memory(
        &self,
        addr: u64,
        len: usize,
    ) -> Result<DeviceBuffer, DeviceError> {
        super::check_foreign(addr, len, BackendKind::Hip)?;
        // Not owned: Drop frees nothing. The caller vouches (the trait's contract) that the
        // range is this device's memory and outlives the buffer.
        Ok(DeviceBuffer::from_memory(Box::new(HipMemory {
            dev: self.dev.clone(),
            dptr: addr as usize as *mut std::ffi::c_void,
            len,
            host: None,
            owned: false,
        })))
    }

    fn alloc(&self, len: usize) -> Result<DeviceBuffer, DeviceError> {
        self.dev.bind()?;
        let mem = if self.unified {
            self.mapped(len, "mapped device memory")?
        } else {
            let mut d = std::ptr::null_mut();
            if len > 0 {
                // SAFETY: writes one device pointer; the device is current.
                let r = unsafe { api::hipMalloc(&mut d, len) };
                alloc_check(r, "hipMalloc", len, "device memory")?;
            }
            HipMemory {
                dev: self.dev.clone(),
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
        if src.backend() != BackendKind::Hip {
            return Err(DeviceError::WrongBackend {
                expected: BackendKind::Hip,
                found: src.backend(),
            });
        }
        let mem = self.ours(dst.buffer())?;
        self.dev.bind()?;
        if len > 0 {
            // SAFETY: the source range lies in pinned memory owned by `src` (checked above),
            // which waits for the event recorded below before any host write or free; the
            // destination range lies in `mem` (checked by the lease), which the lease keeps
            // alive and exclusive until the completion thread has seen the copy finish.
            let r = unsafe {
                api::hipMemcpyHtoDAsync(
                    mem.at(dst_offset),
                    void(src.src_ptr().add(src_offset)),
                    len,
                    self.stream.raw,
                )
            };
            check(r, "hipMemcpyHtoDAsync")?;
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
                    api::hipMemcpyDtoH(void(dst.as_mut_ptr()), mem.at(offset), dst.len())
                };
                check(r, "hipMemcpyDtoH")?;
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
        let (free, total) = self.dev.mem_info()?;
        Ok(Some(MemInfo { free, total }))
    }
}
