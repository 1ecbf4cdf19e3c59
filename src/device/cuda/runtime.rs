//! [`Runtime`] on the CUDA driver API: cudarc's `result` layer (each call a `Result`), with
//! errors named `CUDA_ERROR_X: text` and the call. Raw `sys` only where `result` has no call
//! (marked). Every handle belongs to the device's primary context, retained while this lives.

use crate::device::gpu::{Caps, MemKind, RawAlloc, Runtime};
use crate::device::{BackendKind, DeviceError};
use cudarc::driver::result::{self as cu, DriverError};
use cudarc::driver::sys::{self, CUdevice_attribute as Attr};
use std::ffi::{c_void, CStr, CString};

/// One device's primary context, retained for as long as this lives.
pub struct Cuda {
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
}

// SAFETY: a CUcontext may be used from any thread (made current there with cuCtxSetCurrent);
// the driver synchronises its own state.
unsafe impl Send for Cuda {}
// SAFETY: as above; `Cuda` has no interior state of its own.
unsafe impl Sync for Cuda {}

/// "CUDA_ERROR_X: text" from the driver, or the numeric code when it cannot say.
fn describe(e: DriverError) -> String {
    match (e.error_name(), e.error_string()) {
        (Ok(n), Ok(t)) => format!("{}: {}", n.to_string_lossy(), t.to_string_lossy()),
        (Ok(n), Err(_)) => n.to_string_lossy().into_owned(),
        _ => format!("CUresult {}", e.0 as i64),
    }
}

/// Turns a driver error into a typed one naming the call.
fn err(call: &'static str) -> impl FnOnce(DriverError) -> DeviceError {
    move |e| DeviceError::Backend {
        backend: BackendKind::Cuda,
        call,
        code: e.0 as i64,
        detail: describe(e),
    }
}

/// A raw `sys` status (calls `result` lacks) as a typed error.
fn check(r: sys::CUresult, call: &'static str) -> Result<(), DeviceError> {
    r.result().map_err(err(call))
}

fn nvrtc_error(detail: String) -> DeviceError {
    DeviceError::Backend {
        backend: BackendKind::Cuda,
        call: "nvrtc compile of kernels/ds4_kernels.cu",
        code: -1,
        detail,
    }
}

impl Cuda {
    fn attribute(&self, a: Attr) -> Result<i32, DeviceError> {
        // SAFETY: a device handle the driver gave us.
        unsafe { cu::device::get_attribute(self.dev, a) }.map_err(err("cuDeviceGetAttribute"))
    }
}

impl Drop for Cuda {
    fn drop(&mut self) {
        // SAFETY: balances the retain in `open`. Nothing of ours uses the context any more:
        // every allocation, stream and event holds an Arc of this.
        let _ = unsafe { cu::primary_ctx::release(self.dev) };
    }
}

// SAFETY: the driver's handles are usable from any thread with the context current (what
// `bind` does); events are waited for with cuEventSynchronize, which returns after the work
// recorded before them; errors are `Backend { backend: Cuda }` with the CUresult as code.
unsafe impl Runtime for Cuda {
    const KIND: BackendKind = BackendKind::Cuda;
    const LABEL: &'static str = "CUDA";
    const OUT_OF_MEMORY: i64 = sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY as i64;
    type Stream = sys::CUstream;
    type Event = sys::CUevent;
    type Module = sys::CUmodule;
    type Function = sys::CUfunction;

    fn open(ordinal: usize) -> Result<Self, DeviceError> {
        let no_device = |detail: String| DeviceError::NoDevice {
            backend: BackendKind::Cuda,
            detail,
        };
        // Without this check cudarc panics on its first call.
        // SAFETY: only tries to dlopen the driver library by its known names.
        if !unsafe { sys::is_culib_present() } {
            return Err(no_device(
                "no CUDA driver (libcuda.so.1 / nvcuda.dll not found)".into(),
            ));
        }
        cu::init().map_err(|e| no_device(format!("cuInit failed: {}", describe(e))))?;
        let count = cu::device::get_count().map_err(err("cuDeviceGetCount"))?;
        if ordinal >= count.max(0) as usize {
            return Err(no_device(format!(
                "device {ordinal} asked for, {count} CUDA device(s) present"
            )));
        }
        let dev = cu::device::get(ordinal as i32).map_err(err("cuDeviceGet"))?;
        // SAFETY: a device handle the driver just gave us.
        let ctx =
            unsafe { cu::primary_ctx::retain(dev) }.map_err(err("cuDevicePrimaryCtxRetain"))?;
        Ok(Self { dev, ctx })
    }

    fn bind(&self) -> Result<(), DeviceError> {
        if cu::ctx::get_current().map_err(err("cuCtxGetCurrent"))? == Some(self.ctx) {
            return Ok(());
        }
        // SAFETY: the context is retained for as long as `self` lives.
        unsafe { cu::ctx::set_current(self.ctx) }.map_err(err("cuCtxSetCurrent"))
    }

    fn caps(&self) -> Result<Caps, DeviceError> {
        Ok(Caps {
            integrated: self.attribute(Attr::CU_DEVICE_ATTRIBUTE_INTEGRATED)? != 0,
            can_map_host: self.attribute(Attr::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)? != 0,
        })
    }

    fn name(&self) -> String {
        cu::device::get_name(self.dev).unwrap_or_else(|_| "CUDA device".into())
    }

    fn mem_info(&self) -> Result<(u64, u64), DeviceError> {
        self.bind()?;
        let (free, total) = cu::mem_get_info().map_err(err("cuMemGetInfo"))?;
        Ok((free as u64, total as u64))
    }

    unsafe fn alloc(&self, kind: MemKind, size: usize) -> Result<RawAlloc, DeviceError> {
        let host = |flags| {
            // SAFETY: the context is current (the caller's contract).
            unsafe { cu::malloc_host(size, flags) }.map_err(err("cuMemHostAlloc"))
        };
        match kind {
            MemKind::Device => Ok(RawAlloc {
                host: std::ptr::null_mut(),
                // SAFETY: the context is current (the caller's contract).
                dev: unsafe { cu::malloc_sync(size) }.map_err(err("cuMemAlloc"))?,
            }),
            MemKind::Pinned => Ok(RawAlloc {
                host: host(sys::CU_MEMHOSTALLOC_PORTABLE)?.cast(),
                dev: 0,
            }),
            MemKind::Mapped => {
                let p = host(sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE)?;
                let mut dev: sys::CUdeviceptr = 0;
                // Raw: `result` has no cuMemHostGetDevicePointer.
                // SAFETY: `p` is mapped pinned memory we just allocated; writes one address.
                let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, p, 0) };
                if let Err(e) = check(r, "cuMemHostGetDevicePointer") {
                    // SAFETY: frees what we just allocated.
                    let _ = unsafe { cu::free_host(p) };
                    return Err(e);
                }
                Ok(RawAlloc {
                    host: p.cast(),
                    dev,
                })
            }
        }
    }

    unsafe fn free(&self, kind: MemKind, a: RawAlloc) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract: ours, unused, the context current.
        unsafe {
            match kind {
                MemKind::Device => cu::free_sync(a.dev).map_err(err("cuMemFree")),
                _ => cu::free_host(a.host.cast()).map_err(err("cuMemFreeHost")),
            }
        }
    }

    unsafe fn host_register(&self, p: *mut u8, size: usize) -> Result<(), DeviceError> {
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE;
        // Raw: `result` has no cuMemHostRegister.
        // SAFETY: the caller's contract.
        let r = unsafe { sys::cuMemHostRegister_v2(p.cast(), size, flags) };
        check(r, "cuMemHostRegister")
    }

    unsafe fn host_unregister(&self, p: *mut u8) -> Result<(), DeviceError> {
        // Raw: `result` has no cuMemHostUnregister.
        // SAFETY: the caller's contract.
        let r = unsafe { sys::cuMemHostUnregister(p.cast()) };
        check(r, "cuMemHostUnregister")
    }

    unsafe fn stream_create(&self) -> Result<sys::CUstream, DeviceError> {
        cu::stream::create(cu::stream::StreamKind::NonBlocking).map_err(err("cuStreamCreate"))
    }

    unsafe fn stream_sync(&self, s: sys::CUstream) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        unsafe { cu::stream::synchronize(s) }.map_err(err("cuStreamSynchronize"))
    }

    unsafe fn stream_destroy(&self, s: sys::CUstream) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        unsafe { cu::stream::destroy(s) }.map_err(err("cuStreamDestroy"))
    }

    unsafe fn stream_wait(&self, s: sys::CUstream, e: sys::CUevent) -> Result<(), DeviceError> {
        let flags = sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT;
        // SAFETY: the caller's contract.
        unsafe { cu::stream::wait_event(s, e, flags) }.map_err(err("cuStreamWaitEvent"))
    }

    unsafe fn copy_h2d_async(
        &self,
        dst: u64,
        src: *const u8,
        len: usize,
        s: sys::CUstream,
    ) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract: `src..+len` is live pinned memory.
        unsafe { cu::memcpy_htod_async(dst, std::slice::from_raw_parts(src, len), s) }
            .map_err(err("cuMemcpyHtoDAsync"))
    }

    unsafe fn copy_d2d_async(
        &self,
        dst: u64,
        src: u64,
        len: usize,
        s: sys::CUstream,
    ) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        unsafe { cu::memcpy_dtod_async(dst, src, len, s) }.map_err(err("cuMemcpyDtoDAsync"))
    }

    unsafe fn copy_h2d(&self, dst: u64, src: *const u8, len: usize) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract: `src..+len` is live host memory.
        unsafe { cu::memcpy_htod_sync(dst, std::slice::from_raw_parts(src, len)) }
            .map_err(err("cuMemcpyHtoD"))
    }

    unsafe fn copy_d2h(&self, dst: *mut u8, src: u64, len: usize) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract: `dst..+len` is live host memory, exclusively ours.
        unsafe { cu::memcpy_dtoh_sync(std::slice::from_raw_parts_mut(dst, len), src) }
            .map_err(err("cuMemcpyDtoH"))
    }

    unsafe fn zero_async(&self, dst: u64, len: usize, s: sys::CUstream) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        unsafe { cu::memset_d8_async(dst, 0, len, s) }.map_err(err("cuMemsetD8Async"))
    }

    unsafe fn event_create(&self) -> Result<sys::CUevent, DeviceError> {
        // Raw: `result::event::create` takes one flag, and we need two.
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32
            | sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
        let mut e = std::ptr::null_mut();
        // SAFETY: writes one event handle; the context is current (the caller's contract).
        let r = unsafe { sys::cuEventCreate(&mut e, flags) };
        check(r, "cuEventCreate")?;
        Ok(e)
    }

    unsafe fn event_record(&self, e: sys::CUevent, s: sys::CUstream) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        unsafe { cu::event::record(e, s) }.map_err(err("cuEventRecord"))
    }

    unsafe fn event_sync(&self, e: sys::CUevent) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        unsafe { cu::event::synchronize(e) }.map_err(err("cuEventSynchronize"))
    }

    unsafe fn event_query(&self, e: sys::CUevent) -> Result<bool, DeviceError> {
        // SAFETY: the caller's contract.
        match unsafe { sys::cuEventQuery(e) } {
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => check(r, "cuEventQuery").map(|()| true),
        }
    }

    unsafe fn event_destroy(&self, e: sys::CUevent) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        unsafe { cu::event::destroy(e) }.map_err(err("cuEventDestroy"))
    }

    fn compile_kernels(&self) -> Result<Vec<u8>, DeviceError> {
        // SAFETY: only tries to dlopen NVRTC by its known names.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(nvrtc_error(
                "NVRTC (libnvrtc) not found: the kernels are compiled at run time".into(),
            ));
        }
        let major = self.attribute(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = self.attribute(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let opts = cudarc::nvrtc::CompileOptions {
            options: vec![format!("--gpu-architecture=compute_{major}{minor}")],
            name: Some("ds4_kernels.cu".into()),
            ..Default::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(crate::compute::DS4_KERNELS_CU, opts)
            .map_err(|e| nvrtc_error(format!("{e:?}")))?;
        let image = CString::new(ptx.to_src()).map_err(|_| nvrtc_error("NUL in PTX".into()))?;
        Ok(image.into_bytes_with_nul())
    }

    unsafe fn module_load(&self, image: &[u8]) -> Result<sys::CUmodule, DeviceError> {
        // SAFETY: `image` is NUL-terminated PTX (`compile_kernels`) that outlives the call; the
        // context is current (the caller's contract).
        unsafe { cu::module::load_data(image.as_ptr().cast()) }.map_err(err("cuModuleLoadData"))
    }

    unsafe fn module_unload(&self, m: sys::CUmodule) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        unsafe { cu::module::unload(m) }.map_err(err("cuModuleUnload"))
    }

    unsafe fn function(
        &self,
        m: sys::CUmodule,
        name: &CStr,
    ) -> Result<sys::CUfunction, DeviceError> {
        // SAFETY: the caller's contract; a NUL-terminated name.
        unsafe { cu::module::get_function(m, name.to_owned()) }.map_err(err("cuModuleGetFunction"))
    }

    unsafe fn launch(
        &self,
        f: sys::CUfunction,
        grid: u32,
        block: u32,
        s: sys::CUstream,
        args: &mut [*mut c_void],
    ) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract (`GpuDevice::launch`'s on `args`).
        unsafe { cu::launch_kernel(f, (grid, 1, 1), (block, 1, 1), 0, s, args) }
            .map_err(err("cuLaunchKernel"))
    }
}
