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

use super::api::{check, Ctx};
use super::{CudaMemory, Stream};
use crate::compute::KERNEL_NAMES as NAMES;
use crate::device::{BackendKind, DeviceBuffer, DeviceError};
use crate::gguf::GgmlType;
use cudarc::driver::sys;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex, PoisonError};

/// Threads per block of the reducing kernels (`DS4_THREADS` in the source).
const THREADS: u32 = 256;

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

fn compile_error(detail: String) -> DeviceError {
    DeviceError::Backend {
        backend: BackendKind::Cuda,
        call: "nvrtc compile of kernels/ds4_kernels.cu",
        code: -1,
        detail,
    }
}

impl CudaCompute {
    pub(super) fn new(ctx: &Arc<Ctx>) -> Result<Self, DeviceError> {
        // SAFETY: only tries to dlopen NVRTC by its known names.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(compile_error(
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
            .map_err(|e| compile_error(format!("{e:?}")))?;
        let image = CString::new(ptx.to_src()).map_err(|_| compile_error("NUL in PTX".into()))?;
        let mut module = std::ptr::null_mut();
        // SAFETY: `image` is a NUL-terminated PTX string that outlives the call; the context
        // is current.
        let r = unsafe { sys::cuModuleLoadData(&mut module, image.as_ptr().cast()) };
        check(r, "cuModuleLoadData")?;
        let mut funcs = HashMap::new();
        for name in NAMES {
            let cname = CString::new(name).map_err(|_| compile_error(name.into()))?;
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

    /// Launches `name` after every copy issued on `copies` so far.
    fn launch(
        &self,
        copies: &Stream,
        name: &'static str,
        grid: u32,
        block: u32,
        args: &mut [*mut c_void],
    ) -> Result<(), DeviceError> {
        self.ctx.bind()?;
        let ev = copies.record()?;
        // SAFETY: live event and stream of the current context.
        let r = unsafe { sys::cuStreamWaitEvent(self.stream.raw, ev.raw, 0) };
        check(r, "cuStreamWaitEvent")?;
        let f = self.funcs[name];
        // SAFETY: `f` comes from our module; `args` points at one value per kernel parameter,
        // of the kernel's parameter types (each caller below builds them from the signature in
        // kernels/README.md); every pointer argument is a checked device address of a buffer
        // kept alive in `keep` until the compute stream is synchronised.
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

/// A kernel argument: its address, as `cuLaunchKernel` takes them.
fn arg<T>(v: &mut T) -> *mut c_void {
    (v as *mut T).cast()
}

/// Typed launches, one per kernel of kernels/README.md. All are asynchronous: results are
/// there after [`CudaCompute::synchronize`] (or a later copy-stream read-back of them).
impl super::CudaDevice {
    fn compute(&self) -> Result<&CudaCompute, DeviceError> {
        if let Some(c) = self.compute.get() {
            return Ok(c);
        }
        let c = CudaCompute::new(&self.ctx)?;
        Ok(self.compute.get_or_init(|| c))
    }

    /// `y[0..rows] = W·x` with `W` = `rows` rows of `cols` values of type `ty` stored at
    /// `w[w_off..]` (IQ2_XXS, Q2_K, Q4_K, Q8_0 or F16), `x` = `cols` f32, `y` f32.
    #[allow(clippy::too_many_arguments)]
    pub fn matvec(
        &self,
        ty: GgmlType,
        w: &Arc<DeviceBuffer>,
        w_off: usize,
        x: &Arc<DeviceBuffer>,
        y: &Arc<DeviceBuffer>,
        rows: usize,
        cols: usize,
    ) -> Result<(), DeviceError> {
        let name = match ty {
            GgmlType::IQ2_XXS => "ds4_matvec_iq2_xxs",
            GgmlType::Q2_K => "ds4_matvec_q2_k",
            GgmlType::Q4_K => "ds4_matvec_q4_k",
            GgmlType::Q8_0 => "ds4_matvec_q8_0",
            GgmlType::F16 => "ds4_matvec_f16",
            other => {
                return Err(DeviceError::Backend {
                    backend: BackendKind::Cuda,
                    call: "matvec",
                    code: -1,
                    detail: format!("no matvec kernel for {other:?}"),
                })
            }
        };
        let bytes = crate::compute::row_bytes(ty, cols)
            .map_err(|e| DeviceError::Backend {
                backend: BackendKind::Cuda,
                call: "matvec",
                code: -1,
                detail: e.to_string(),
            })?
            .checked_mul(rows)
            .ok_or(DeviceError::OutOfRange {
                offset: w_off as u64,
                len: u64::MAX,
                size: w.len() as u64,
                what: "weights",
            })?;
        let c = self.compute()?;
        let (mut pw, mut px, mut py) = (
            c.addr(w, w_off, bytes)?,
            c.addr(x, 0, cols * 4)?,
            c.addr(y, 0, rows * 4)?,
        );
        let (mut r, mut k) = (to_i32(rows)?, to_i32(cols)?);
        let mut args = [
            arg(&mut pw),
            arg(&mut px),
            arg(&mut py),
            arg(&mut r),
            arg(&mut k),
        ];
        c.launch(&self.stream, name, rows as u32, THREADS, &mut args)
    }

    /// `out[0..n] = x / sqrt(mean(x²) + eps) · w` (f32 buffers).
    pub fn rms_norm(
        &self,
        x: &Arc<DeviceBuffer>,
        w: &Arc<DeviceBuffer>,
        out: &Arc<DeviceBuffer>,
        n: usize,
        eps: f32,
    ) -> Result<(), DeviceError> {
        let c = self.compute()?;
        let (mut px, mut pw, mut po) = (
            c.addr(x, 0, n * 4)?,
            c.addr(w, 0, n * 4)?,
            c.addr(out, 0, n * 4)?,
        );
        let (mut nn, mut e) = (to_i32(n)?, eps);
        let mut args = [
            arg(&mut px),
            arg(&mut pw),
            arg(&mut po),
            arg(&mut nn),
            arg(&mut e),
        ];
        c.launch(&self.stream, "ds4_rms_norm", 1, THREADS, &mut args)
    }

    /// `out[i] = sqrt(softplus(z[i]))` for `i < n`.
    pub fn sqrt_softplus(
        &self,
        z: &Arc<DeviceBuffer>,
        out: &Arc<DeviceBuffer>,
        n: usize,
    ) -> Result<(), DeviceError> {
        let c = self.compute()?;
        let (mut pz, mut po) = (c.addr(z, 0, n * 4)?, c.addr(out, 0, n * 4)?);
        let mut nn = to_i32(n)?;
        let mut args = [arg(&mut pz), arg(&mut po), arg(&mut nn)];
        c.launch(
            &self.stream,
            "ds4_sqrt_softplus",
            blocks(n),
            THREADS,
            &mut args,
        )
    }

    /// `out[i] = silu(min(g,c)) · clamp(u,−c,c)` (no clamp when `clamp <= 0`).
    pub fn swiglu_clamp(
        &self,
        g: &Arc<DeviceBuffer>,
        u: &Arc<DeviceBuffer>,
        out: &Arc<DeviceBuffer>,
        n: usize,
        clamp: f32,
    ) -> Result<(), DeviceError> {
        let c = self.compute()?;
        let (mut pg, mut pu, mut po) = (
            c.addr(g, 0, n * 4)?,
            c.addr(u, 0, n * 4)?,
            c.addr(out, 0, n * 4)?,
        );
        let (mut nn, mut cl) = (to_i32(n)?, clamp);
        let mut args = [
            arg(&mut pg),
            arg(&mut pu),
            arg(&mut po),
            arg(&mut nn),
            arg(&mut cl),
        ];
        c.launch(
            &self.stream,
            "ds4_swiglu_clamp",
            blocks(n),
            THREADS,
            &mut args,
        )
    }

    /// `y[i] += w · v[i]` for `i < n`.
    pub fn weighted_add(
        &self,
        y: &Arc<DeviceBuffer>,
        v: &Arc<DeviceBuffer>,
        w: f32,
        n: usize,
    ) -> Result<(), DeviceError> {
        let c = self.compute()?;
        let (mut py, mut pv) = (c.addr(y, 0, n * 4)?, c.addr(v, 0, n * 4)?);
        let (mut ww, mut nn) = (w, to_i32(n)?);
        let mut args = [arg(&mut py), arg(&mut pv), arg(&mut ww), arg(&mut nn)];
        c.launch(
            &self.stream,
            "ds4_weighted_add",
            blocks(n),
            THREADS,
            &mut args,
        )
    }

    /// Q8_0 blocks at `q[q_off..]` → `n` f16 values (`n` a multiple of 32) in `out`.
    pub fn q8_0_to_f16(
        &self,
        q: &Arc<DeviceBuffer>,
        q_off: usize,
        out: &Arc<DeviceBuffer>,
        n: usize,
    ) -> Result<(), DeviceError> {
        let c = self.compute()?;
        let (mut pq, mut po) = (c.addr(q, q_off, n / 32 * 34)?, c.addr(out, 0, n * 2)?);
        let mut nn = n as u64;
        let mut args = [arg(&mut pq), arg(&mut po), arg(&mut nn)];
        c.launch(
            &self.stream,
            "ds4_q8_0_to_f16",
            blocks(n),
            THREADS,
            &mut args,
        )
    }

    /// Zeroes `buf[offset..offset + len]` on the compute stream (after every copy issued so
    /// far, before every kernel launched later).
    pub fn zero(
        &self,
        buf: &Arc<DeviceBuffer>,
        offset: usize,
        len: usize,
    ) -> Result<(), DeviceError> {
        let c = self.compute()?;
        let at = c.addr(buf, offset, len)?;
        c.ctx.bind()?;
        let ev = self.stream.record()?;
        // SAFETY: live event and streams of the current context.
        let r = unsafe { sys::cuStreamWaitEvent(c.stream.raw, ev.raw, 0) };
        check(r, "cuStreamWaitEvent")?;
        // SAFETY: `at..at + len` is a checked range of a buffer kept alive in `keep`.
        let r = unsafe { sys::cuMemsetD8Async(at, 0, len, c.stream.raw) };
        check(r, "cuMemsetD8Async")
    }

    /// Waits for every kernel launched so far on this device.
    pub fn synchronize_compute(&self) -> Result<(), DeviceError> {
        match self.compute.get() {
            Some(c) => c.synchronize(),
            None => Ok(()),
        }
    }
}

fn blocks(n: usize) -> u32 {
    n.div_ceil(THREADS as usize).max(1) as u32
}

fn to_i32(n: usize) -> Result<i32, DeviceError> {
    i32::try_from(n).map_err(|_| DeviceError::OutOfRange {
        offset: 0,
        len: n as u64,
        size: i32::MAX as u64,
        what: "kernel dimension",
    })
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
