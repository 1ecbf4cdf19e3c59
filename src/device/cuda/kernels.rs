//! The decode path's kernels on a CUDA device: `kernels/ds4_kernels.cu` compiled at run time
//! with NVRTC (once per device, on first use), launched on a compute stream of their own that
//! waits for the copy stream on the GPU (`cuStreamWaitEvent`), never through a host round trip.
//!
//! Ordering: every launch first records an event on the copy stream and makes the compute
//! stream wait for it, so a kernel sees every copy issued before the launch (the weights the
//! engine just streamed), while copies issued after it overlap with it. Lifetimes: each launch
//! keeps `Arc`s of the buffers it touches until [`CudaCompute::synchronize`], so no buffer is
//! freed under a running kernel.
//!
//! Limits: the arithmetic is `src/compute/`'s (the host reference); results agree within the
//! bounds stated in kernels/README.md, not bit for bit (summation order). Launch shapes are the
//! README's; the kernels are simple (one block per output row), not tuned.

use super::api::{check, void, Ctx};
use super::{CudaMemory, Stream};
use crate::compute::KERNEL_NAMES as NAMES;
use crate::device::gpu::compile_error;
use crate::device::{BackendKind, DeviceBuffer, DeviceError, Event, GpuDevice};
use cudarc::driver::sys;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex, PoisonError};

/// The compiled module and the compute stream of one device.
pub struct CudaCompute {
    ctx: Arc<Ctx>,
    module: sys::CUmodule,
    funcs: HashMap<&'static str, sys::CUfunction>,
    stream: Stream,
    /// Buffers used by launches not yet synchronised.
    keep: Mutex<Vec<Arc<DeviceBuffer>>>,
}

// SAFETY: module and function handles may be used from any thread with their context current
// (every use binds it); the driver synchronises its own state. `keep` is behind a Mutex.
unsafe impl Send for CudaCompute {}
// SAFETY: as above.
unsafe impl Sync for CudaCompute {}

fn nvrtc_error(detail: String) -> DeviceError {
    compile_error(
        BackendKind::Cuda,
        "nvrtc compile of kernels/ds4_kernels.cu",
        detail,
    )
}

impl CudaCompute {
    pub(super) fn new(ctx: &Arc<Ctx>) -> Result<Self, DeviceError> {
        // SAFETY: only tries to dlopen NVRTC by its known names.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(nvrtc_error(
                "NVRTC (libnvrtc) not found: the kernels are compiled at run time".into(),
            ));
        }
        ctx.bind()?;
        let major =
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor =
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let opts = cudarc::nvrtc::CompileOptions {
            options: vec![format!("--gpu-architecture=compute_{major}{minor}")],
            name: Some("ds4_kernels.cu".into()),
            ..Default::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(crate::compute::DS4_KERNELS_CU, opts)
            .map_err(|e| nvrtc_error(format!("{e:?}")))?;
        let image = CString::new(ptx.to_src()).map_err(|_| nvrtc_error("NUL in PTX".into()))?;
        let mut module = std::ptr::null_mut();
        // SAFETY: `image` is a NUL-terminated PTX string that outlives the call; the context
        // is current.
        let r = unsafe { sys::cuModuleLoadData(&mut module, image.as_ptr().cast()) };
        check(r, "cuModuleLoadData")?;
        let mut funcs = HashMap::new();
        for name in NAMES {
            let cname = CString::new(name).map_err(|_| nvrtc_error(name.into()))?;
            let mut f = std::ptr::null_mut();
            // SAFETY: a live module and a NUL-terminated name.
            let r = unsafe { sys::cuModuleGetFunction(&mut f, module, cname.as_ptr()) };
            if let Err(e) = check(r, "cuModuleGetFunction") {
                // SAFETY: the module is ours and nothing runs from it yet.
                unsafe { sys::cuModuleUnload(module) };
                return Err(e);
            }
            funcs.insert(name, f);
        }
        let stream = match Stream::new(ctx) {
            Ok(s) => s,
            Err(e) => {
                // SAFETY: as above.
                unsafe { sys::cuModuleUnload(module) };
                return Err(e);
            }
        };
        Ok(Self {
            ctx: ctx.clone(),
            module,
            funcs,
            stream,
            keep: Mutex::new(Vec::new()),
        })
    }

    /// Device address of `buf[offset..offset + len]`, checked; `buf` must be this device's.
    fn addr(&self, buf: &Arc<DeviceBuffer>, offset: usize, len: usize) -> Result<u64, DeviceError> {
        crate::device::check_range(offset, len, buf.len(), "device buffer")?;
        let mem = buf.memory().as_any().downcast_ref::<CudaMemory>().ok_or(
            DeviceError::WrongBackend {
                expected: BackendKind::Cuda,
                found: buf.backend(),
            },
        )?;
        if !Arc::ptr_eq(&mem.ctx, &self.ctx) {
            return Err(DeviceError::WrongBackend {
                expected: BackendKind::Cuda,
                found: BackendKind::Cuda,
            });
        }
        self.keep
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(buf.clone());
        Ok(mem.at(offset))
    }

    /// Makes the compute stream wait (on the GPU) for every copy issued on `copies` so far;
    /// binds the context.
    fn after_copies(&self, copies: &Stream) -> Result<(), DeviceError> {
        self.ctx.bind()?;
        let ev = copies.record()?;
        // SAFETY: live event and stream of the current context.
        let r = unsafe { sys::cuStreamWaitEvent(self.stream.raw, ev.raw, 0) };
        check(r, "cuStreamWaitEvent")
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
                BackendKind::Cuda,
                "cuModuleGetFunction",
                format!("no kernel {name}"),
            )
        })?;
        // SAFETY: `f` comes from our module; by the caller's contract `args` points at one
        // value per kernel parameter, of the parameter types, and every pointer argument is a
        // checked device address of a buffer kept alive in `keep` until the compute stream is
        // synchronised.
        let r = unsafe {
            sys::cuLaunchKernel(
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
        check(r, "cuLaunchKernel")
    }

    /// Waits for every kernel launched so far, then lets go of the buffers they used.
    pub fn synchronize(&self) -> Result<(), DeviceError> {
        self.stream.synchronize()?;
        self.keep
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        Ok(())
    }
}

/// The device's half of [`GpuDevice`]: checked addresses and launches on the compute stream
/// (made on first use: the NVRTC compile), mapped memory and device-side copies.
// SAFETY: `kernel_ptr` is `CudaCompute::addr`: it checks the range against the buffer, refuses memory of
// another backend or device, and keeps the buffer in `keep` until the compute stream is
// synchronised; `launch` and `zero` make the compute stream wait for an event recorded on the
// copy stream first.
unsafe impl GpuDevice for super::CudaDevice {
    fn alloc_mapped(&self, len: usize) -> Result<DeviceBuffer, DeviceError> {
        self.ctx.bind()?;
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
        self.ctx.bind()?;
        if len > 0 {
            // Pinned host memory as the source: the host-to-device DMA path (the canonical
            // fast one); device memory: device to device.
            // SAFETY: both ranges lie in live allocations of this context (checked by the
            // leases, which keep them alive and exclusive until the completion thread has seen
            // the copy finish); a mapped source is pinned, valid for `len` bytes from its host
            // address, and device addresses of mapped memory are valid in this context.
            let r = unsafe {
                match s.host {
                    Some(h) => sys::cuMemcpyHtoDAsync_v2(
                        d.at(dst_offset),
                        void(h.as_ptr().add(src_offset)),
                        len,
                        self.stream.raw,
                    ),
                    None => sys::cuMemcpyDtoDAsync_v2(
                        d.at(dst_offset),
                        s.at(src_offset),
                        len,
                        self.stream.raw,
                    ),
                }
            };
            check(r, "cuMemcpyHtoDAsync / cuMemcpyDtoDAsync")?;
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
        // SAFETY: the caller's contract is `CudaCompute::launch`'s.
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
        // context is current (bound by `after_copies`).
        let r = unsafe { sys::cuMemsetD8Async(at, 0, len, c.stream.raw) };
        check(r, "cuMemsetD8Async")
    }

    fn synchronize_compute(&self) -> Result<(), DeviceError> {
        match self.compute.get() {
            Some(c) => c.synchronize(),
            None => Ok(()),
        }
    }
}

impl super::CudaDevice {
    fn compute(&self) -> Result<&CudaCompute, DeviceError> {
        if let Some(c) = self.compute.get() {
            return Ok(c);
        }
        let c = CudaCompute::new(&self.ctx)?;
        Ok(self.compute.get_or_init(|| c))
    }
}

impl Drop for CudaCompute {
    fn drop(&mut self) {
        let _ = self.stream.synchronize();
        if self.ctx.bind().is_ok() {
            // SAFETY: the module is ours; its kernels have finished (stream synchronised).
            unsafe {
                sys::cuModuleUnload(self.module);
            }
        }
    }
}
