//! The middle layer of the CUDA backend: each driver call we make, returning
//! `Result<_, DeviceError>` with the call's name and CUDA's own error name and text.
//!
//! Raw bindings come from cudarc's `driver::sys` (loaded at run time, `dynamic-loading`);
//! the RAII types live in `mod.rs`. Why not cudarc's safe layer: its `CudaSlice` tracks its own
//! events and streams, while our device trait already fences memory with events and leases; we
//! need raw pointers, pinned memory we can read files into, and mapped (unified) memory.
//!
//! Every call here needs the device's context current on the calling thread: [`Ctx::bind`].

use super::super::{BackendKind, DeviceError};
use cudarc::driver::sys::{self, CUresult};
use std::ffi::{c_void, CStr};
use std::mem::MaybeUninit;

/// Turns a driver status into a typed error naming the call.
pub(super) fn check(r: CUresult, call: &'static str) -> Result<(), DeviceError> {
    if r == CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    Err(DeviceError::Backend {
        backend: BackendKind::Cuda,
        call,
        code: r as i64,
        detail: describe(r),
    })
}

/// "CUDA_ERROR_X: text" from the driver, or the numeric code when it cannot say.
pub(super) fn describe(r: CUresult) -> String {
    let mut name = MaybeUninit::<*const std::ffi::c_char>::uninit();
    let mut text = MaybeUninit::<*const std::ffi::c_char>::uninit();
    // SAFETY: both calls only write a pointer to a static string (or fail and write nothing,
    // which we check); the strings live as long as the driver is loaded.
    unsafe {
        let n = (sys::cuGetErrorName(r, name.as_mut_ptr()) == CUresult::CUDA_SUCCESS).then(|| {
            CStr::from_ptr(name.assume_init())
                .to_string_lossy()
                .into_owned()
        });
        let t =
            (sys::cuGetErrorString(r, text.as_mut_ptr()) == CUresult::CUDA_SUCCESS).then(|| {
                CStr::from_ptr(text.assume_init())
                    .to_string_lossy()
                    .into_owned()
            });
        match (n, t) {
            (Some(n), Some(t)) => format!("{n}: {t}"),
            (Some(n), None) => n,
            _ => format!("CUresult {}", r as i64),
        }
    }
}

/// Is the driver library there at all? Without this check cudarc panics on its first call.
pub(super) fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the driver library by its known names.
    unsafe { sys::is_culib_present() }
}

/// One device's primary context, retained for as long as this lives.
pub(super) struct Ctx {
    pub(super) dev: sys::CUdevice,
    ctx: sys::CUcontext,
}

// SAFETY: a CUcontext handle may be used from any thread (made current there with
// cuCtxSetCurrent); the driver synchronises its own state.
unsafe impl Send for Ctx {}
// SAFETY: as above; `Ctx` has no interior state of its own.
unsafe impl Sync for Ctx {}

impl Ctx {
    /// Initialises the driver, finds device `ordinal` and retains its primary context.
    pub(super) fn open(ordinal: usize) -> Result<Self, DeviceError> {
        let no_device = |detail: String| DeviceError::NoDevice {
            backend: BackendKind::Cuda,
            detail,
        };
        if !driver_present() {
            return Err(no_device(
                "no CUDA driver (libcuda.so.1 / nvcuda.dll not found)".into(),
            ));
        }
        // SAFETY: cuInit has no pointer arguments.
        let r = unsafe { sys::cuInit(0) };
        if r != CUresult::CUDA_SUCCESS {
            return Err(no_device(format!("cuInit failed: {}", describe(r))));
        }
        let mut count = 0i32;
        // SAFETY: writes one int.
        let r = unsafe { sys::cuDeviceGetCount(&mut count) };
        check(r, "cuDeviceGetCount")?;
        if ordinal >= count as usize {
            return Err(no_device(format!(
                "device {ordinal} asked for, {count} CUDA device(s) present"
            )));
        }
        let mut dev: sys::CUdevice = 0;
        // SAFETY: writes one device handle; the ordinal was checked against the count.
        let r = unsafe { sys::cuDeviceGet(&mut dev, ordinal as i32) };
        check(r, "cuDeviceGet")?;
        let mut ctx = MaybeUninit::uninit();
        // SAFETY: writes one context handle for a device handle the driver gave us.
        let r = unsafe { sys::cuDevicePrimaryCtxRetain(ctx.as_mut_ptr(), dev) };
        check(r, "cuDevicePrimaryCtxRetain")?;
        // SAFETY: initialised by the successful call above.
        let ctx = unsafe { ctx.assume_init() };
        Ok(Self { dev, ctx })
    }

    /// Makes this context current on the calling thread unless it already is (asking the
    /// driver each time: code outside ours, e.g. a C caller, may switch contexts too).
    pub(super) fn bind(&self) -> Result<(), DeviceError> {
        let mut cur = MaybeUninit::uninit();
        // SAFETY: writes one context handle (possibly null).
        let r = unsafe { sys::cuCtxGetCurrent(cur.as_mut_ptr()) };
        check(r, "cuCtxGetCurrent")?;
        // SAFETY: initialised by the successful call above.
        if unsafe { cur.assume_init() } == self.ctx {
            return Ok(());
        }
        // SAFETY: the context is retained for as long as `self` lives.
        let r = unsafe { sys::cuCtxSetCurrent(self.ctx) };
        check(r, "cuCtxSetCurrent")
    }

    pub(super) fn attribute(&self, a: sys::CUdevice_attribute) -> Result<i32, DeviceError> {
        let mut v = 0i32;
        // SAFETY: writes one int for a valid device handle.
        let r = unsafe { sys::cuDeviceGetAttribute(&mut v, a, self.dev) };
        check(r, "cuDeviceGetAttribute")?;
        Ok(v)
    }

    pub(super) fn name(&self) -> String {
        let mut buf = [0 as std::ffi::c_char; 256];
        // SAFETY: the driver writes at most `len` bytes, NUL-terminated.
        let r = unsafe { sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as i32, self.dev) };
        if r != CUresult::CUDA_SUCCESS {
            return "CUDA device".into();
        }
        // SAFETY: NUL-terminated by the driver within the buffer.
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    /// (free, total) bytes of device memory.
    pub(super) fn mem_info(&self) -> Result<(u64, u64), DeviceError> {
        self.bind()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: writes two sizes; the context is current.
        let r = unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) };
        check(r, "cuMemGetInfo")?;
        Ok((free as u64, total as u64))
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: balances the retain in `open`. Nothing of ours uses the context any more:
        // every allocation, stream and event holds an Arc of this Ctx.
        unsafe {
            sys::cuDevicePrimaryCtxRelease_v2(self.dev);
        }
    }
}

/// A raw pointer usable as a `*mut c_void` argument.
pub(super) fn void(p: *const u8) -> *mut c_void {
    p as *mut c_void
}
