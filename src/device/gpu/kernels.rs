//! What the GPU MoE stack (`decode::GpuMoe`) needs from a CUDA or HIP device beyond
//! [`Device`]: the kernels of `kernels/ds4_kernels.cu` and the RAM tier's copies, written once
//! for both backends.
//!
//! [`Gpu`](super::Gpu) supplies the small part ([`GpuDevice`]'s required methods, in
//! `compute.rs`: a checked kernel argument address, a launch on its compute stream after every
//! copy issued so far, a memset, a wait, mapped memory and device-side copies); the typed
//! launches (matvec, rms_norm, …) are provided methods here, so the argument lists and launch
//! shapes of kernels/README.md are spelled out in one place. CUDA compiles the source with
//! NVRTC (`device::cuda`), HIP with hipRTC (`device::hip`).
//!
//! Ordering contract (both backends): a kernel sees every copy issued on the copy stream before
//! its launch (the compute stream waits for an event of the copy stream, on the GPU); copies
//! issued after it overlap with it. Buffers passed to kernels stay alive until
//! [`GpuDevice::synchronize_compute`].

use crate::device::{Device, DeviceBuffer, DeviceError, Event};
use crate::gguf::GgmlType;
use std::ffi::c_void;
use std::sync::Arc;

/// Threads per block of the reducing kernels (`DS4_THREADS` in the source).
pub const THREADS: u32 = 256;

/// A CUDA or HIP device that runs the decode kernels.
///
/// # Safety
/// The provided launches trust the implementation: [`Self::kernel_ptr`] must return an address
/// valid on this device for `len` bytes from `offset` of `buf` (after checking the range and
/// that `buf` is this device's memory) and keep `buf` alive until [`Self::synchronize_compute`];
/// [`Self::launch`] must order the kernel after the copies issued before it. (The same reason
/// [`PinnedMemory`](crate::device::PinnedMemory) and
/// [`DeviceMemory`](crate::device::DeviceMemory) are
/// `unsafe trait`s.)
pub unsafe trait GpuDevice: Device + 'static {
    /// `len` bytes of mapped pinned host memory with a device address (zeroed): the RAM tier.
    fn alloc_mapped(&self, len: usize) -> Result<DeviceBuffer, DeviceError>;

    /// Queues a copy of `src[src_offset..+len]` to `dst[dst_offset..]` on the copy stream
    /// (device memory or mapped host memory on either side) and returns its event. Both ranges
    /// are write-leased until the copy has run ([`DeviceError::Busy`] when either is leased
    /// now); kernels launched later wait for it on the GPU.
    fn copy_d2d_async(
        &self,
        src: &Arc<DeviceBuffer>,
        src_offset: usize,
        dst: &Arc<DeviceBuffer>,
        dst_offset: usize,
        len: usize,
    ) -> Result<Event, DeviceError>;

    /// The device address of `buf[offset..offset + len]` as a kernel argument: checked to be
    /// this device's memory and in range, and kept alive until [`Self::synchronize_compute`].
    fn kernel_ptr(
        &self,
        buf: &Arc<DeviceBuffer>,
        offset: usize,
        len: usize,
    ) -> Result<u64, DeviceError>;

    /// Launches kernel `name` (1-D grid of `grid` blocks of `block` threads, no dynamic shared
    /// memory) on the compute stream, after every copy issued on the copy stream so far.
    ///
    /// # Safety
    /// `args` holds one pointer per parameter of the kernel, each to a live value of that
    /// parameter's type (kernels/README.md); every device pointer among them comes from
    /// [`Self::kernel_ptr`] for a range that the kernel, launched with this shape, stays inside.
    unsafe fn launch(
        &self,
        name: &'static str,
        grid: u32,
        block: u32,
        args: &mut [*mut c_void],
    ) -> Result<(), DeviceError>;

    /// Zeroes `buf[offset..offset + len]` on the compute stream (after every copy issued so
    /// far, before every kernel launched later).
    fn zero(&self, buf: &Arc<DeviceBuffer>, offset: usize, len: usize) -> Result<(), DeviceError>;

    /// Waits for every kernel launched so far, then lets go of the buffers they used.
    fn synchronize_compute(&self) -> Result<(), DeviceError>;

    /// `y[0..rows] = W·x` with `W` = `rows` rows of `cols` values of type `ty` stored at
    /// `w[w_off..]` (IQ2_XXS, Q2_K, Q4_K, Q8_0 or F16), `x` = `cols` f32, `y` f32.
    #[allow(clippy::too_many_arguments)]
    fn matvec(
        &self,
        ty: GgmlType,
        w: &Arc<DeviceBuffer>,
        w_off: usize,
        x: &Arc<DeviceBuffer>,
        y: &Arc<DeviceBuffer>,
        rows: usize,
        cols: usize,
    ) -> Result<(), DeviceError> {
        let backend = self.kind();
        let bad = |detail: String| DeviceError::Backend {
            backend,
            call: "matvec",
            code: -1,
            detail,
        };
        let name = match ty {
            GgmlType::IQ2_XXS => "ds4_matvec_iq2_xxs",
            GgmlType::Q2_K => "ds4_matvec_q2_k",
            GgmlType::Q4_K => "ds4_matvec_q4_k",
            GgmlType::Q8_0 => "ds4_matvec_q8_0",
            GgmlType::F16 => "ds4_matvec_f16",
            other => return Err(bad(format!("no matvec kernel for {other:?}"))),
        };
        let bytes = crate::compute::row_bytes(ty, cols)
            .map_err(|e| bad(e.to_string()))?
            .checked_mul(rows)
            .ok_or(DeviceError::OutOfRange {
                offset: w_off as u64,
                len: u64::MAX,
                size: w.len() as u64,
                what: "weights",
            })?;
        let (mut pw, mut px, mut py) = (
            self.kernel_ptr(w, w_off, bytes)?,
            self.kernel_ptr(x, 0, cols * 4)?,
            self.kernel_ptr(y, 0, rows * 4)?,
        );
        let (mut r, mut k) = (to_i32(rows)?, to_i32(cols)?);
        let mut args = [
            arg(&mut pw),
            arg(&mut px),
            arg(&mut py),
            arg(&mut r),
            arg(&mut k),
        ];
        // SAFETY: (u8* w, f32* x, f32* y, int rows, int cols) as the matvec kernels declare;
        // one block per row reads `bytes` of `w`, `cols` of x and writes `rows` of y, the
        // ranges checked above.
        unsafe { self.launch(name, rows as u32, THREADS, &mut args) }
    }

    /// `out[0..n] = x / sqrt(mean(x²) + eps) · w` (f32 buffers).
    fn rms_norm(
        &self,
        x: &Arc<DeviceBuffer>,
        w: &Arc<DeviceBuffer>,
        out: &Arc<DeviceBuffer>,
        n: usize,
        eps: f32,
    ) -> Result<(), DeviceError> {
        let (mut px, mut pw, mut po) = (
            self.kernel_ptr(x, 0, n * 4)?,
            self.kernel_ptr(w, 0, n * 4)?,
            self.kernel_ptr(out, 0, n * 4)?,
        );
        let (mut nn, mut e) = (to_i32(n)?, eps);
        let mut args = [
            arg(&mut px),
            arg(&mut pw),
            arg(&mut po),
            arg(&mut nn),
            arg(&mut e),
        ];
        // SAFETY: (f32* x, f32* w, f32* out, int n, float eps); n values of each, checked.
        unsafe { self.launch("ds4_rms_norm", 1, THREADS, &mut args) }
    }

    /// `out[i] = sqrt(softplus(z[i]))` for `i < n`.
    fn sqrt_softplus(
        &self,
        z: &Arc<DeviceBuffer>,
        out: &Arc<DeviceBuffer>,
        n: usize,
    ) -> Result<(), DeviceError> {
        let (mut pz, mut po) = (
            self.kernel_ptr(z, 0, n * 4)?,
            self.kernel_ptr(out, 0, n * 4)?,
        );
        let mut nn = to_i32(n)?;
        let mut args = [arg(&mut pz), arg(&mut po), arg(&mut nn)];
        // SAFETY: (f32* z, f32* out, int n); n values of each, checked.
        unsafe { self.launch("ds4_sqrt_softplus", blocks(n), THREADS, &mut args) }
    }

    /// `out[i] = silu(min(g,c)) · clamp(u,−c,c)` (no clamp when `clamp <= 0`).
    fn swiglu_clamp(
        &self,
        g: &Arc<DeviceBuffer>,
        u: &Arc<DeviceBuffer>,
        out: &Arc<DeviceBuffer>,
        n: usize,
        clamp: f32,
    ) -> Result<(), DeviceError> {
        let (mut pg, mut pu, mut po) = (
            self.kernel_ptr(g, 0, n * 4)?,
            self.kernel_ptr(u, 0, n * 4)?,
            self.kernel_ptr(out, 0, n * 4)?,
        );
        let (mut nn, mut cl) = (to_i32(n)?, clamp);
        let mut args = [
            arg(&mut pg),
            arg(&mut pu),
            arg(&mut po),
            arg(&mut nn),
            arg(&mut cl),
        ];
        // SAFETY: (f32* g, f32* u, f32* out, int n, float clamp); n values of each, checked.
        unsafe { self.launch("ds4_swiglu_clamp", blocks(n), THREADS, &mut args) }
    }

    /// `y[i] += w · v[i]` for `i < n`.
    fn weighted_add(
        &self,
        y: &Arc<DeviceBuffer>,
        v: &Arc<DeviceBuffer>,
        w: f32,
        n: usize,
    ) -> Result<(), DeviceError> {
        let (mut py, mut pv) = (self.kernel_ptr(y, 0, n * 4)?, self.kernel_ptr(v, 0, n * 4)?);
        let (mut ww, mut nn) = (w, to_i32(n)?);
        let mut args = [arg(&mut py), arg(&mut pv), arg(&mut ww), arg(&mut nn)];
        // SAFETY: (f32* y, f32* v, float w, int n); n values of each, checked.
        unsafe { self.launch("ds4_weighted_add", blocks(n), THREADS, &mut args) }
    }

    /// Q8_0 blocks at `q[q_off..]` → `n` f16 values (`n` a multiple of 32) in `out`.
    fn q8_0_to_f16(
        &self,
        q: &Arc<DeviceBuffer>,
        q_off: usize,
        out: &Arc<DeviceBuffer>,
        n: usize,
    ) -> Result<(), DeviceError> {
        let (mut pq, mut po) = (
            self.kernel_ptr(q, q_off, n / 32 * 34)?,
            self.kernel_ptr(out, 0, n * 2)?,
        );
        let mut nn = n as u64;
        let mut args = [arg(&mut pq), arg(&mut po), arg(&mut nn)];
        // SAFETY: (u8* q, u16* out, u64 n); n/32 blocks of 34 bytes in, n f16 out, checked
        // (the kernel converts whole blocks only: n / 32 of them).
        unsafe { self.launch("ds4_q8_0_to_f16", blocks(n), THREADS, &mut args) }
    }
}

/// A kernel argument: its address, as `cuLaunchKernel` / `hipModuleLaunchKernel` take them.
fn arg<T>(v: &mut T) -> *mut c_void {
    (v as *mut T).cast()
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
