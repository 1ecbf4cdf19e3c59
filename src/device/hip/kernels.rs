//! The decode path's kernels on a HIP device: `kernels/ds4_kernels.cu` compiled at run time
//! with hipRTC (`rtc.rs`; once per device, on first use), loaded with `hipModuleLoadData`, and
//! launched with `hipModuleLaunchKernel` on a compute stream of their own that waits for the
//! copy stream on the GPU (`hipStreamWaitEvent`), never through a host round trip. The same
//! design as `device::cuda::kernels`; the typed launches are [`GpuDevice`]'s, shared.
//!
//! Ordering and lifetimes: every launch records an event on the copy stream and makes the
//! compute stream wait for it; each launch keeps `Arc`s of the buffers it touches until
//! [`GpuDevice::synchronize_compute`].
//!
//! Tested on a GPU only through tests/hip_shim (hipRTC forwarded to NVRTC, modules to the CUDA
//! driver); AMD's compiler is checked without a GPU by CI (`compile_kernels_for`, gfx1030 and
//! gfx90a with Debian's HIP 5.2). Never run on an AMD GPU yet.

use super::api::{self, check, void, Dev, HipFunction, HipModule};
use super::{HipDevice, HipMemory, Stream};
use crate::compute::KERNEL_NAMES as NAMES;
use crate::device::gpu::compile_error;
use crate::device::{BackendKind, DeviceBuffer, DeviceError, Event, GpuDevice};
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex, PoisonError};

/// The compiled module and the compute stream of one device.
pub struct HipCompute {
    dev: Arc<Dev>,
    module: HipModule,
    funcs: HashMap<&'static str, HipFunction>,
    stream: Stream,
    /// Buffers used by launches not yet synchronised.
    keep: Mutex<Vec<Arc<DeviceBuffer>>>,
}

// SAFETY: module and function handles may be used from any thread with their device current
// (every use binds it); the runtime synchronises its own state. `keep` is behind a Mutex.
unsafe impl Send for HipCompute {}
// SAFETY: as above.
unsafe impl Sync for HipCompute {}

impl HipCompute {
    fn new(dev: &Arc<Dev>) -> Result<Self, DeviceError> {
        let rtc = super::rtc::Rtc::load()?;
        let code = rtc.compile(
            crate::compute::DS4_KERNELS_CU,
            "ds4_kernels.cu",
            &super::rtc::options(),
        )?;
        dev.bind()?;
        let mut module: HipModule = std::ptr::null_mut();
        // SAFETY: `code` is the code object hipRTC just produced, alive for the call (the
        // runtime copies what it keeps); the device is current.
        let r = unsafe { api::hipModuleLoadData(&mut module, code.as_ptr().cast()) };
        check(r, "hipModuleLoadData")?;
        let unload = |m: HipModule| {
            // SAFETY: the module is ours and nothing runs from it yet.
            unsafe { api::hipModuleUnload(m) };
        };
        let mut funcs = HashMap::new();
        for name in NAMES {
            let Ok(cname) = CString::new(name) else {
                unload(module);
                return Err(compile_error(BackendKind::Hip, "kernel name", name.into()));
            };
            let mut f: HipFunction = std::ptr::null_mut();
            // SAFETY: a live module and a NUL-terminated name.
            let r = unsafe { api::hipModuleGetFunction(&mut f, module, cname.as_ptr()) };
            if let Err(e) = check(r, "hipModuleGetFunction") {
                unload(module);
                return Err(e);
            }
            funcs.insert(name, f);
        }
        let stream = match Stream::new(dev) {
            Ok(s) => s,
            Err(e) => {
                unload(module);
                return Err(e);
            }
        };
        Ok(Self {
            dev: dev.clone(),
            module,
            funcs,
            stream,
            keep: Mutex::new(Vec::new()),
        })
    }

    /// Device address of `buf[offset..offset + len]`, checked; `buf` must be this device's.
    fn addr(&self, buf: &Arc<DeviceBuffer>, offset: usize, len: usize) -> Result<u64, DeviceError> {
        crate::device::check_range(offset, len, buf.len(), "device buffer")?;
        let mem =
            buf.memory()
                .as_any()
                .downcast_ref::<HipMemory>()
                .ok_or(DeviceError::WrongBackend {
                    expected: BackendKind::Hip,
                    found: buf.backend(),
                })?;
        if !Arc::ptr_eq(&mem.dev, &self.dev) {
            return Err(DeviceError::WrongBackend {
                expected: BackendKind::Hip,
                found: BackendKind::Hip,
            });
        }
        self.keep
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(buf.clone());
        Ok(mem.at(offset) as usize as u64)
    }

    /// Makes the compute stream wait (on the GPU) for every copy issued on `copies` so far;
    /// binds the device.
    fn after_copies(&self, copies: &Stream) -> Result<(), DeviceError> {
        self.dev.bind()?;
        let ev = copies.record()?;
        // SAFETY: a live event and stream of the current device.
        let r = unsafe { api::hipStreamWaitEvent(self.stream.raw, ev.raw, 0) };
        check(r, "hipStreamWaitEvent")
    }

    /// Launches `name` after every copy issued on `copies` so far.
    ///
    /// # Safety
    /// [`GpuDevice::launch`]'s contract.
    unsafe fn launch(
        &self,
        copies: &Stream,
        name: &'static str,
        grid: u32,
        block: u32,
        args: &mut [*mut c_void],
    ) -> Result<(), DeviceError> {
        self.after_copies(copies)?;
        let f = *self.funcs.get(name).ok_or_else(|| {
            compile_error(
                BackendKind::Hip,
                "hipModuleGetFunction",
                format!("no kernel {name}"),
            )
        })?;
        // SAFETY: `f` comes from our module; by the caller's contract `args` points at one
        // value per kernel parameter, of the parameter types, and every pointer argument is a
        // checked device address of a buffer kept alive in `keep` until the compute stream is
        // synchronised.
        let r = unsafe {
            api::hipModuleLaunchKernel(
                f,
                grid.max(1),
                1,
                1,
                block,
                1,
                1,
                0,
                self.stream.raw,
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        check(r, "hipModuleLaunchKernel")
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        self.stream.synchronize()?;
        self.keep
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        Ok(())
    }
}

impl Drop for HipCompute {
    fn drop(&mut self) {
        let _ = self.stream.synchronize();
        if self.dev.bind().is_ok() {
            // SAFETY: the module is ours; its kernels have finished (stream synchronised).
            unsafe {
                api::hipModuleUnload(self.module);
            }
        }
    }
}

/// The device's half of [`GpuDevice`]: checked addresses and launches on the compute stream
/// (made on first use: the hipRTC compile), mapped memory and device-side copies.
// SAFETY: `kernel_ptr` is `HipCompute::addr`: it checks the range against the buffer, refuses memory of
// another backend or device, and keeps the buffer in `keep` until the compute stream is
// synchronised; `launch` and `zero` make the compute stream wait for an event recorded on the
// copy stream first.
unsafe impl GpuDevice for HipDevice {
    fn alloc_mapped(&self, len: usize) -> Result<DeviceBuffer, DeviceError> {
        self.dev.bind()?;
        let mem = self.mapped(len, "mapped host memory")?;
        self.zeroed(mem)
    }

    fn copy_d2d_async(
        &self,
        src: &Arc<DeviceBuffer>,
        src_offset: usize,
        dst: &Arc<DeviceBuffer>,
        dst_offset: usize,
        len: usize,
    ) -> Result<Event, DeviceError> {
        let (s, d) = (self.ours(src)?, self.ours(dst)?);
        let ls = Arc::new(src.lease_write(src_offset, len)?);
        let ld = Arc::new(dst.lease_write(dst_offset, len)?);
        self.dev.bind()?;
        if len > 0 {
            // SAFETY: both ranges lie in live allocations of this device (checked by the
            // leases, which keep them alive and exclusive until the completion thread has seen
            // the copy finish); a mapped source is pinned host memory valid for `len` bytes
            // from its host address (the host-to-device DMA path, as on CUDA).
            let r = unsafe {
                match s.host {
                    Some(h) => api::hipMemcpyHtoDAsync(
                        d.at(dst_offset),
                        void(h.as_ptr().add(src_offset)),
                        len,
                        self.stream.raw,
                    ),
                    None => api::hipMemcpyDtoDAsync(
                        d.at(dst_offset),
                        s.at(src_offset),
                        len,
                        self.stream.raw,
                    ),
                }
            };
            check(r, "hipMemcpyHtoDAsync / hipMemcpyDtoDAsync")?;
        }
        let ev = self.stream.record()?;
        Ok(self.done.track_leases(Box::new(ev), vec![ls, ld]))
    }

    fn kernel_ptr(
        &self,
        buf: &Arc<DeviceBuffer>,
        offset: usize,
        len: usize,
    ) -> Result<u64, DeviceError> {
        self.compute()?.addr(buf, offset, len)
    }

    unsafe fn launch(
        &self,
        name: &'static str,
        grid: u32,
        block: u32,
        args: &mut [*mut c_void],
    ) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract is `HipCompute::launch`'s.
        unsafe {
            self.compute()?
                .launch(&self.stream, name, grid, block, args)
        }
    }

    fn zero(&self, buf: &Arc<DeviceBuffer>, offset: usize, len: usize) -> Result<(), DeviceError> {
        let c = self.compute()?;
        let at = c.addr(buf, offset, len)?;
        c.after_copies(&self.stream)?;
        // SAFETY: `at..at + len` is a checked range of a buffer kept alive in `keep`; the
        // device is current (bound by `after_copies`).
        let r = unsafe { api::hipMemsetAsync(at as usize as *mut c_void, 0, len, c.stream.raw) };
        check(r, "hipMemsetAsync")
    }

    fn synchronize_compute(&self) -> Result<(), DeviceError> {
        match self.compute.get() {
            Some(c) => c.synchronize(),
            None => Ok(()),
        }
    }
}

impl HipDevice {
    fn compute(&self) -> Result<&HipCompute, DeviceError> {
        if let Some(c) = self.compute.get() {
            return Ok(c);
        }
        let c = HipCompute::new(&self.dev)?;
        Ok(self.compute.get_or_init(|| c))
    }
}
