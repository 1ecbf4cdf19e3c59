//! The decode path's kernels on a [`Gpu`]: `kernels/ds4_kernels.cu` compiled at run time
//! (NVRTC / hipRTC: [`Runtime::compile_kernels`], once per device, on first use), loaded as a
//! module and launched on a compute stream of their own that waits for the copy stream on the
//! GPU (`cuStreamWaitEvent` / `hipStreamWaitEvent`), never through a host round trip.
//!
//! Ordering: every launch first records an event on the copy stream and makes the compute
//! stream wait for it, so a kernel sees every copy issued before the launch (the weights the
//! engine just streamed), while copies issued after it overlap with it. Lifetimes: each launch
//! keeps `Arc`s of the buffers it touches until [`GpuDevice::synchronize_compute`], so no
//! buffer is freed under a running kernel.
//!
//! Limits: the arithmetic is `src/compute/`'s (the host reference); results agree within the
//! bounds stated in kernels/README.md, not bit for bit (summation order). Launch shapes are the
//! README's; the kernels are simple (one block per output row), not tuned. HIP kernels ran on a
//! GPU only through tests/hip_shim; AMD's compiler is checked without a GPU by CI.

use super::stream::{CopyStreams, Stream};
use super::{Gpu, GpuDevice, Memory, Runtime};
use crate::compute::KERNEL_NAMES;
use crate::device::{check_range, DeviceBuffer, DeviceError, Event};
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex, PoisonError};

/// The compiled module and the compute stream of one device.
pub(super) struct Compute<R: Runtime> {
    rt: Arc<R>,
    module: R::Module,
    funcs: HashMap<&'static str, R::Function>,
    stream: Stream<R>,
    /// Buffers used by launches not yet synchronised.
    keep: Mutex<Vec<Arc<DeviceBuffer>>>,
}

// SAFETY: module and function handles may be used from any thread with their device bound
// (every use binds it; `Runtime`'s contract); `keep` is behind a Mutex.
unsafe impl<R: Runtime> Send for Compute<R> {}
// SAFETY: as above.
unsafe impl<R: Runtime> Sync for Compute<R> {}

fn kernel_error<R: Runtime>(call: &'static str, detail: String) -> DeviceError {
    DeviceError::Backend {
        backend: R::KIND,
        call,
        code: -1,
        detail,
    }
}

impl<R: Runtime> Compute<R> {
    fn new(rt: &Arc<R>) -> Result<Self, DeviceError> {
        rt.bind()?;
        let image = rt.compile_kernels()?;
        // SAFETY: bound; the image our runtime just compiled.
        let module = unsafe { rt.module_load(&image) }?;
        let unload = || {
            // SAFETY: the module is ours and nothing runs from it yet.
            let _ = unsafe { rt.module_unload(module) };
        };
        let mut funcs = HashMap::new();
        for name in KERNEL_NAMES {
            let Ok(cname) = CString::new(name) else {
                unload();
                return Err(kernel_error::<R>("kernel name", name.into()));
            };
            // SAFETY: bound; a live module.
            match unsafe { rt.function(module, &cname) } {
                Ok(f) => funcs.insert(name, f),
                Err(e) => {
                    unload();
                    return Err(e);
                }
            };
        }
        let stream = Stream::new(rt, std::time::Duration::ZERO).inspect_err(|_| unload())?;
        Ok(Self {
            rt: rt.clone(),
            module,
            funcs,
            stream,
            keep: Mutex::new(Vec::new()),
        })
    }

    /// Makes the compute stream wait (on the GPU) for every copy issued on `copies` so far;
    /// binds the device.
    fn after_copies(&self, copies: &CopyStreams<R>) -> Result<(), DeviceError> {
        self.rt.bind()?;
        copies.wait_on(&self.stream)
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

impl<R: Runtime> Drop for Compute<R> {
    fn drop(&mut self) {
        let _ = self.stream.synchronize();
        if self.rt.bind().is_ok() {
            // SAFETY: the module is ours; its kernels have finished (stream synchronised).
            let _ = unsafe { self.rt.module_unload(self.module) };
        }
    }
}

impl<R: Runtime> Gpu<R> {
    fn compute(&self) -> Result<&Compute<R>, DeviceError> {
        if let Some(c) = self.compute.get() {
            return Ok(c);
        }
        let c = Compute::new(&self.rt)?;
        Ok(self.compute.get_or_init(|| c))
    }

    /// Device address of `buf[offset..offset + len]`, checked to be this device's memory, and
    /// `buf` kept alive until the compute stream is synchronised.
    fn kernel_addr(
        &self,
        c: &Compute<R>,
        buf: &Arc<DeviceBuffer>,
        offset: usize,
        len: usize,
    ) -> Result<u64, DeviceError> {
        check_range(offset, len, buf.len(), "device buffer")?;
        let mem: &Memory<R> = self.ours(buf, "kernel argument")?;
        c.keep
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(buf.clone());
        Ok(mem.at(offset))
    }
}

/// The device's half of [`GpuDevice`]: checked addresses and launches on the compute stream
/// (made on first use: the kernel compile), mapped memory and device-side copies.
// SAFETY: `kernel_ptr` is `kernel_addr`: it checks the range against the buffer, refuses memory
// of another backend or device, and keeps the buffer in `keep` until the compute stream is
// synchronised; `launch` and `zero` make the compute stream wait for an event recorded on the
// copy stream first.
unsafe impl<R: Runtime> GpuDevice for Gpu<R> {
    fn alloc_mapped(&self, len: usize) -> Result<DeviceBuffer, DeviceError> {
        self.zeroed(Memory::new(&self.rt, len, true, "mapped host memory")?)
    }

    fn copy_d2d_async(
        &self,
        src: &Arc<DeviceBuffer>,
        src_offset: usize,
        dst: &Arc<DeviceBuffer>,
        dst_offset: usize,
        len: usize,
    ) -> Result<Event, DeviceError> {
        let (s, d) = (self.ours(src, "copy")?, self.ours(dst, "copy")?);
        let ls = Arc::new(src.lease_write(src_offset, len)?);
        let ld = Arc::new(dst.lease_write(dst_offset, len)?);
        // In stream order after the host copies queued before (as without the copy thread).
        self.flush_copies();
        self.rt.bind()?;
        if len > 0 {
            let (to, raw) = (d.at(dst_offset), self.copies.first().raw);
            // Pinned host memory as the source: the host-to-device DMA path (the canonical
            // fast one); device memory: device to device.
            // SAFETY: bound; both ranges lie in live allocations of this device (checked by
            // the leases, which keep them alive and exclusive until the completion thread has
            // seen the copy finish); a mapped source is pinned, valid for `len` bytes from its
            // host address, and device addresses of mapped memory are valid on this device.
            unsafe {
                match s.host {
                    Some(h) => self
                        .rt
                        .copy_h2d_async(to, h.as_ptr().add(src_offset), len, raw),
                    None => self.rt.copy_d2d_async(to, s.at(src_offset), len, raw),
                }
            }?;
        }
        let ev = self.copies.first().record()?;
        Ok(self.done.track_leases(Box::new(ev), vec![ls, ld]))
    }

    fn kernel_ptr(
        &self,
        buf: &Arc<DeviceBuffer>,
        offset: usize,
        len: usize,
    ) -> Result<u64, DeviceError> {
        self.kernel_addr(self.compute()?, buf, offset, len)
    }

    unsafe fn launch(
        &self,
        name: &'static str,
        grid: u32,
        block: u32,
        args: &mut [*mut c_void],
    ) -> Result<(), DeviceError> {
        let c = self.compute()?;
        self.flush_copies();
        c.after_copies(&self.copies)?;
        let f = *c
            .funcs
            .get(name)
            .ok_or_else(|| kernel_error::<R>("launch", format!("no kernel {name}")))?;
        // SAFETY: bound (by `after_copies`); `f` comes from our module; by the caller's
        // contract `args` points at one value per kernel parameter, of the parameter types, and
        // every pointer argument is a checked device address of a buffer kept alive in `keep`
        // until the compute stream is synchronised.
        unsafe { self.rt.launch(f, grid.max(1), block, c.stream.raw, args) }
    }

    fn zero(&self, buf: &Arc<DeviceBuffer>, offset: usize, len: usize) -> Result<(), DeviceError> {
        let c = self.compute()?;
        let at = self.kernel_addr(c, buf, offset, len)?;
        self.flush_copies();
        c.after_copies(&self.copies)?;
        // SAFETY: `at..at + len` is a checked range of a buffer kept alive in `keep`; bound (by
        // `after_copies`).
        unsafe { self.rt.zero_async(at, len, c.stream.raw) }
    }

    fn synchronize_compute(&self) -> Result<(), DeviceError> {
        match self.compute.get() {
            Some(c) => c.synchronize(),
            None => Ok(()),
        }
    }
}
