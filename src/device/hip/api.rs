//! The middle layer of the HIP backend: the HIP runtime calls we make, each returning
//! `Result<_, DeviceError>` with the call's name and HIP's own error name and text.
//!
//! Why our own `extern "C"` declarations and not hip-sys's functions: hip-sys 0.1.2 was
//! generated from the HIP 5.4 headers with every `hipError_t` as a Rust enum, and receiving a
//! value that enum does not list is undefined behaviour in Rust. Newer runtimes return codes it
//! does not list (ROCm 6.x added `hipErrorInvalidClusterSize = 1054` and moved `hipErrorTbd` to
//! 1055; newer headers also list 914, 915, 917), so a status must cross the boundary as a plain
//! `c_int`. hip-sys still gives us the link line (its build script finds HIP through `HIP_PATH`,
//! `ROCM_PATH`, `hipconfig -p` or /opt/rocm and links `amdhip64`), the opaque handle types and
//! the flag values. The maintained alternative is `cubecl-hip-sys` (bindings per ROCm release).
//!
//! ABI kept to what ROCm 5 to 7 share: device attributes through `hipDeviceGetAttribute` (the
//! values of `hipDeviceAttributeCanMapHostMemory` = 3 and `hipDeviceAttributeIntegrated` = 16
//! are the same in the 5.2, 5.4 and 6.x headers), never the `hipDeviceProp_t` struct, whose
//! layout and symbol ROCm 6 versioned (`hipGetDevicePropertiesR0600`).
//!
//! The [`Runtime`](crate::device::gpu::Runtime) on top of them is `runtime.rs`.

use super::super::{BackendKind, DeviceError};
use hip_sys::hiprt as sys;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

pub(super) use sys::{hipEvent_t, hipStream_t};

/// A HIP status (`hipError_t`), as the C ABI passes it.
pub(super) type Status = c_int;
pub(super) const HIP_SUCCESS: Status = 0;
pub(super) const HIP_ERROR_OUT_OF_MEMORY: Status = 2;
/// hipEventQuery's "recorded work still running" (hipErrorNotReady).
pub(super) const HIP_ERROR_NOT_READY: Status = 600;

/// Flag values from the HIP headers (the same in every release since 5.x).
pub(super) const STREAM_NON_BLOCKING: c_uint = sys::hipStreamNonBlocking;
pub(super) const EVENT_FLAGS: c_uint = sys::hipEventDisableTiming | sys::hipEventBlockingSync;
pub(super) const HOST_MALLOC_PORTABLE: c_uint = sys::hipHostMallocPortable;
pub(super) const HOST_MALLOC_MAPPED: c_uint = sys::hipHostMallocMapped;
pub(super) const HOST_REGISTER_PORTABLE: c_uint = sys::hipHostRegisterPortable;
pub(super) const ATTR_CAN_MAP_HOST_MEMORY: c_int =
    sys::hipDeviceAttribute_t::hipDeviceAttributeCanMapHostMemory as c_int;
pub(super) const ATTR_INTEGRATED: c_int =
    sys::hipDeviceAttribute_t::hipDeviceAttributeIntegrated as c_int;

// Resolved against libamdhip64, which hip-sys's build script links.
extern "C" {
    pub(super) fn hipGetDeviceCount(count: *mut c_int) -> Status;
    pub(super) fn hipGetDevice(device: *mut c_int) -> Status;
    pub(super) fn hipSetDevice(device: c_int) -> Status;
    pub(super) fn hipDeviceGetAttribute(value: *mut c_int, attr: c_int, device: c_int) -> Status;
    pub(super) fn hipDeviceGetName(name: *mut c_char, len: c_int, device: c_int) -> Status;
    pub(super) fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> Status;
    fn hipGetErrorName(e: Status) -> *const c_char;
    fn hipGetErrorString(e: Status) -> *const c_char;
    pub(super) fn hipStreamCreateWithFlags(stream: *mut hipStream_t, flags: c_uint) -> Status;
    pub(super) fn hipStreamSynchronize(stream: hipStream_t) -> Status;
    pub(super) fn hipStreamDestroy(stream: hipStream_t) -> Status;
    pub(super) fn hipEventCreateWithFlags(event: *mut hipEvent_t, flags: c_uint) -> Status;
    pub(super) fn hipEventRecord(event: hipEvent_t, stream: hipStream_t) -> Status;
    pub(super) fn hipEventSynchronize(event: hipEvent_t) -> Status;
    pub(super) fn hipEventQuery(event: hipEvent_t) -> Status;
    pub(super) fn hipEventDestroy(event: hipEvent_t) -> Status;
    pub(super) fn hipHostMalloc(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> Status;
    pub(super) fn hipHostFree(ptr: *mut c_void) -> Status;
    pub(super) fn hipHostRegister(ptr: *mut c_void, size: usize, flags: c_uint) -> Status;
    pub(super) fn hipHostUnregister(ptr: *mut c_void) -> Status;
    pub(super) fn hipHostGetDevicePointer(
        dev: *mut *mut c_void,
        host: *mut c_void,
        flags: c_uint,
    ) -> Status;
    pub(super) fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> Status;
    pub(super) fn hipFree(ptr: *mut c_void) -> Status;
    pub(super) fn hipMemsetAsync(
        dst: *mut c_void,
        value: c_int,
        len: usize,
        stream: hipStream_t,
    ) -> Status;
    pub(super) fn hipMemcpyHtoDAsync(
        dst: *mut c_void,
        src: *mut c_void,
        len: usize,
        stream: hipStream_t,
    ) -> Status;
    pub(super) fn hipMemcpyHtoD(dst: *mut c_void, src: *mut c_void, len: usize) -> Status;
    pub(super) fn hipMemcpyDtoH(dst: *mut c_void, src: *mut c_void, len: usize) -> Status;
    pub(super) fn hipMemcpyDtoDAsync(
        dst: *mut c_void,
        src: *mut c_void,
        len: usize,
        stream: hipStream_t,
    ) -> Status;
    pub(super) fn hipStreamWaitEvent(
        stream: hipStream_t,
        event: hipEvent_t,
        flags: c_uint,
    ) -> Status;
    pub(super) fn hipModuleLoadData(module: *mut HipModule, image: *const c_void) -> Status;
    pub(super) fn hipModuleGetFunction(
        f: *mut HipFunction,
        module: HipModule,
        name: *const c_char,
    ) -> Status;
    pub(super) fn hipModuleUnload(module: HipModule) -> Status;
    #[allow(clippy::too_many_arguments)]
    pub(super) fn hipModuleLaunchKernel(
        f: HipFunction,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared_bytes: c_uint,
        stream: hipStream_t,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> Status;
}

/// `hipModule_t` and `hipFunction_t`: opaque pointers in every HIP release.
pub(super) type HipModule = *mut c_void;
pub(super) type HipFunction = *mut c_void;

/// Turns a runtime status into a typed error naming the call.
pub(super) fn check(r: Status, call: &'static str) -> Result<(), DeviceError> {
    if r == HIP_SUCCESS {
        return Ok(());
    }
    Err(DeviceError::Backend {
        backend: BackendKind::Hip,
        call,
        code: r as i64,
        detail: describe(r),
    })
}

/// "hipErrorX: text" from the runtime (just the name when the text repeats it, as HIP 5 does).
pub(super) fn describe(r: Status) -> String {
    let owned = |p: *const c_char| {
        // SAFETY: a non-null result points to a NUL-terminated static string of the runtime.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    // SAFETY: both take any value (unknown ones give "hipErrorUnknown") and return a pointer to
    // a static string or null.
    let (name, text) = unsafe { (owned(hipGetErrorName(r)), owned(hipGetErrorString(r))) };
    match (name, text) {
        (Some(n), Some(t)) if n != t => format!("{n}: {t}"),
        (Some(n), _) => n,
        (None, _) => format!("hipError_t {r}"),
    }
}
