//! [`Runtime`] on the HIP runtime (our declarations in `api.rs`), errors named
//! `hipErrorX: text` with the call. HIP has no context object of ours to hold: the runtime
//! keeps one primary context per device, selected per thread with `hipSetDevice`.

use super::api::{self, check, describe, hipEvent_t, hipStream_t, HipFunction, HipModule};
use crate::device::gpu::{Caps, MemKind, RawAlloc, Runtime};
use crate::device::{BackendKind, DeviceError};
use std::ffi::{c_char, c_int, c_void, CStr};

/// One HIP device (its ordinal).
pub struct Hip {
    ordinal: c_int,
}

/// A device address as HIP's `void *`. Plain address arithmetic: never dereferenced here.
fn ptr(addr: u64) -> *mut c_void {
    addr as usize as *mut c_void
}

impl Hip {
    fn attribute(&self, attr: c_int) -> Result<i32, DeviceError> {
        let mut v: c_int = 0;
        // SAFETY: writes one int for a device ordinal the runtime reported.
        let r = unsafe { api::hipDeviceGetAttribute(&mut v, attr, self.ordinal) };
        check(r, "hipDeviceGetAttribute")?;
        Ok(v)
    }
}

// SAFETY: HIP handles are usable from any thread with the device current (what `bind` does);
// hipEventSynchronize returns after the work recorded before the event; errors are
// `Backend { backend: Hip }` with the hipError_t as code (received as a plain int: `api.rs`).
unsafe impl Runtime for Hip {
    const KIND: BackendKind = BackendKind::Hip;
    const LABEL: &'static str = "HIP";
    const OUT_OF_MEMORY: i64 = api::HIP_ERROR_OUT_OF_MEMORY as i64;
    type Stream = hipStream_t;
    type Event = hipEvent_t;
    type Module = HipModule;
    type Function = HipFunction;

    /// A clean `NoDevice` when the runtime has no device at all (no AMD GPU, no driver:
    /// `hipErrorNoDevice`) or not that one.
    fn open(ordinal: usize) -> Result<Self, DeviceError> {
        let no_device = |detail: String| DeviceError::NoDevice {
            backend: BackendKind::Hip,
            detail,
        };
        let mut count: c_int = 0;
        // SAFETY: writes one int.
        let r = unsafe { api::hipGetDeviceCount(&mut count) };
        if r != api::HIP_SUCCESS {
            let d = describe(r);
            return Err(no_device(format!("hipGetDeviceCount failed: {d}")));
        }
        if ordinal >= count.max(0) as usize {
            return Err(no_device(format!(
                "device {ordinal} asked for, {count} HIP device(s) present"
            )));
        }
        Ok(Self {
            ordinal: ordinal as c_int,
        })
    }

    fn bind(&self) -> Result<(), DeviceError> {
        let mut cur: c_int = -1;
        // SAFETY: writes one int.
        check(unsafe { api::hipGetDevice(&mut cur) }, "hipGetDevice")?;
        if cur == self.ordinal {
            return Ok(());
        }
        // SAFETY: no pointer arguments; the ordinal was checked against the count in `open`.
        check(unsafe { api::hipSetDevice(self.ordinal) }, "hipSetDevice")
    }

    fn caps(&self) -> Result<Caps, DeviceError> {
        Ok(Caps {
            integrated: self.attribute(api::ATTR_INTEGRATED)? != 0,
            can_map_host: self.attribute(api::ATTR_CAN_MAP_HOST_MEMORY)? != 0,
        })
    }

    fn name(&self) -> String {
        let mut buf = [0 as c_char; 256];
        // The `hipDevice_t` argument is the ordinal: ROCm's hipDeviceGet hands it back unchanged.
        // SAFETY: the runtime writes at most `len` bytes, NUL-terminated.
        let r =
            unsafe { api::hipDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, self.ordinal) };
        if r != api::HIP_SUCCESS {
            return "HIP device".into();
        }
        buf[buf.len() - 1] = 0;
        // SAFETY: NUL-terminated within the buffer (forced above).
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    fn mem_info(&self) -> Result<(u64, u64), DeviceError> {
        self.bind()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: writes two sizes; the device is current.
        let r = unsafe { api::hipMemGetInfo(&mut free, &mut total) };
        check(r, "hipMemGetInfo")?;
        Ok((free as u64, total as u64))
    }

    unsafe fn alloc(&self, kind: MemKind, size: usize) -> Result<RawAlloc, DeviceError> {
        let mut p = std::ptr::null_mut();
        let flags = match kind {
            MemKind::Device => None,
            MemKind::Pinned => Some(api::HOST_MALLOC_PORTABLE),
            MemKind::Mapped => Some(api::HOST_MALLOC_MAPPED | api::HOST_MALLOC_PORTABLE),
        };
        // SAFETY: each writes one pointer; the device is current (the caller's contract).
        let (r, call) = unsafe {
            match flags {
                None => (api::hipMalloc(&mut p, size), "hipMalloc"),
                Some(f) => (api::hipHostMalloc(&mut p, size, f), "hipHostMalloc"),
            }
        };
        check(r, call)?;
        match kind {
            MemKind::Device => Ok(RawAlloc {
                host: std::ptr::null_mut(),
                dev: p as usize as u64,
            }),
            MemKind::Pinned => Ok(RawAlloc {
                host: p.cast(),
                dev: 0,
            }),
            MemKind::Mapped => {
                let mut d = std::ptr::null_mut();
                // SAFETY: `p` is mapped pinned memory we just allocated.
                let r = unsafe { api::hipHostGetDevicePointer(&mut d, p, 0) };
                if let Err(e) = check(r, "hipHostGetDevicePointer") {
                    // SAFETY: frees what we just allocated.
                    unsafe { api::hipHostFree(p) };
                    return Err(e);
                }
                Ok(RawAlloc {
                    host: p.cast(),
                    dev: d as usize as u64,
                })
            }
        }
    }

    unsafe fn free(&self, kind: MemKind, a: RawAlloc) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract: ours, unused, the device current.
        unsafe {
            match kind {
                MemKind::Device => check(api::hipFree(ptr(a.dev)), "hipFree"),
                _ => check(api::hipHostFree(a.host.cast()), "hipHostFree"),
            }
        }
    }

    unsafe fn host_register(&self, p: *mut u8, size: usize) -> Result<(), DeviceError> {
        let flags = api::HOST_REGISTER_PORTABLE;
        // SAFETY: the caller's contract.
        let r = unsafe { api::hipHostRegister(p.cast(), size, flags) };
        check(r, "hipHostRegister")
    }

    unsafe fn host_unregister(&self, p: *mut u8) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        let r = unsafe { api::hipHostUnregister(p.cast()) };
        check(r, "hipHostUnregister")
    }

    unsafe fn stream_create(&self) -> Result<hipStream_t, DeviceError> {
        let mut s = std::ptr::null_mut();
        // SAFETY: writes one stream handle; the device is current (the caller's contract).
        let r = unsafe { api::hipStreamCreateWithFlags(&mut s, api::STREAM_NON_BLOCKING) };
        check(r, "hipStreamCreateWithFlags")?;
        Ok(s)
    }

    unsafe fn stream_sync(&self, s: hipStream_t) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        let r = unsafe { api::hipStreamSynchronize(s) };
        check(r, "hipStreamSynchronize")
    }

    unsafe fn stream_destroy(&self, s: hipStream_t) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        check(unsafe { api::hipStreamDestroy(s) }, "hipStreamDestroy")
    }

    unsafe fn stream_wait(&self, s: hipStream_t, e: hipEvent_t) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        let r = unsafe { api::hipStreamWaitEvent(s, e, 0) };
        check(r, "hipStreamWaitEvent")
    }

    unsafe fn copy_h2d_async(
        &self,
        dst: u64,
        src: *const u8,
        len: usize,
        s: hipStream_t,
    ) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        let r = unsafe { api::hipMemcpyHtoDAsync(ptr(dst), src as *mut c_void, len, s) };
        check(r, "hipMemcpyHtoDAsync")
    }

    unsafe fn copy_d2d_async(
        &self,
        dst: u64,
        src: u64,
        len: usize,
        s: hipStream_t,
    ) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        let r = unsafe { api::hipMemcpyDtoDAsync(ptr(dst), ptr(src), len, s) };
        check(r, "hipMemcpyDtoDAsync")
    }

    unsafe fn copy_h2d(&self, dst: u64, src: *const u8, len: usize) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        let r = unsafe { api::hipMemcpyHtoD(ptr(dst), src as *mut c_void, len) };
        check(r, "hipMemcpyHtoD")
    }

    unsafe fn copy_d2h(&self, dst: *mut u8, src: u64, len: usize) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        let r = unsafe { api::hipMemcpyDtoH(dst.cast(), ptr(src), len) };
        check(r, "hipMemcpyDtoH")
    }

    unsafe fn zero_async(&self, dst: u64, len: usize, s: hipStream_t) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        let r = unsafe { api::hipMemsetAsync(ptr(dst), 0, len, s) };
        check(r, "hipMemsetAsync")
    }

    unsafe fn event_create(&self) -> Result<hipEvent_t, DeviceError> {
        let mut e = std::ptr::null_mut();
        // SAFETY: writes one event handle; the device is current (the caller's contract).
        let r = unsafe { api::hipEventCreateWithFlags(&mut e, api::EVENT_FLAGS) };
        check(r, "hipEventCreateWithFlags")?;
        Ok(e)
    }

    unsafe fn event_record(&self, e: hipEvent_t, s: hipStream_t) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        check(unsafe { api::hipEventRecord(e, s) }, "hipEventRecord")
    }

    unsafe fn event_sync(&self, e: hipEvent_t) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        let r = unsafe { api::hipEventSynchronize(e) };
        check(r, "hipEventSynchronize")
    }

    unsafe fn event_query(&self, e: hipEvent_t) -> Result<bool, DeviceError> {
        // SAFETY: the caller's contract.
        match unsafe { api::hipEventQuery(e) } {
            api::HIP_ERROR_NOT_READY => Ok(false),
            r => check(r, "hipEventQuery").map(|()| true),
        }
    }

    unsafe fn event_destroy(&self, e: hipEvent_t) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        check(unsafe { api::hipEventDestroy(e) }, "hipEventDestroy")
    }

    fn compile_kernels(&self) -> Result<Vec<u8>, DeviceError> {
        let rtc = super::rtc::Rtc::load()?;
        let src = crate::compute::DS4_KERNELS_CU;
        rtc.compile(src, "ds4_kernels.cu", &super::rtc::options())
    }

    unsafe fn module_load(&self, image: &[u8]) -> Result<HipModule, DeviceError> {
        let mut m: HipModule = std::ptr::null_mut();
        // SAFETY: `image` is the code object hipRTC produced, alive for the call (the runtime
        // copies what it keeps); the device is current (the caller's contract).
        let r = unsafe { api::hipModuleLoadData(&mut m, image.as_ptr().cast()) };
        check(r, "hipModuleLoadData")?;
        Ok(m)
    }

    unsafe fn module_unload(&self, m: HipModule) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        check(unsafe { api::hipModuleUnload(m) }, "hipModuleUnload")
    }

    unsafe fn function(&self, m: HipModule, name: &CStr) -> Result<HipFunction, DeviceError> {
        let mut f: HipFunction = std::ptr::null_mut();
        // SAFETY: a live module (the caller's contract) and a NUL-terminated name.
        let r = unsafe { api::hipModuleGetFunction(&mut f, m, name.as_ptr()) };
        check(r, "hipModuleGetFunction")?;
        Ok(f)
    }

    unsafe fn launch(
        &self,
        f: HipFunction,
        grid: u32,
        block: u32,
        s: hipStream_t,
        args: &mut [*mut c_void],
    ) -> Result<(), DeviceError> {
        let null = std::ptr::null_mut();
        // SAFETY: the caller's contract (`GpuDevice::launch`'s on `args`).
        let r = unsafe {
            api::hipModuleLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, s, args.as_mut_ptr(), null)
        };
        check(r, "hipModuleLaunchKernel")
    }
}
