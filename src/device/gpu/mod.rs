//! One GPU device, written once for CUDA and HIP: [`Gpu<R>`] over a small [`Runtime`] (the
//! calls that differ), which `device::cuda` implements on cudarc's `result` layer and
//! `device::hip` on our HIP declarations. `CudaDevice` = `Gpu<Cuda>`, `HipDevice` = `Gpu<Hip>`.
//!
//! Shape (STYLE.md item 1): raw calls (`Runtime`, one `Result` each) → RAII types that free in
//! `Drop`: [`Gpu`] (the device bound per thread, non-blocking copy streams, a completion
//! thread), pinned staging memory and device memory (`memory.rs`), per-copy events, and the
//! kernels with their own stream (`compute.rs`, [`GpuDevice`]; typed launches in `kernels.rs`).
//!
//! Copies: host to device only from our own pinned memory (a pageable source would silently
//! become a synchronous staged copy), then an event; the completion thread waits for that
//! event, drops the copy's write lease, and only then completes the [`Event`](crate::device::Event) the staging
//! buffer holds (see `completion.rs`: a stream callback may not free device memory).
//!
//! Unified mode ([`GpuConfig::unified`]; automatic on integrated GPUs such as Strix Halo's
//! gfx1151): device allocations are mapped pinned host memory with a device address; the
//! engine reads files straight into them. Forcing it on a discrete GPU runs that path there.
//!
//! Memory of another backend is [`DeviceError::WrongBackend`]; memory of another device of the
//! same backend is [`DeviceError::Backend`] with `call` naming the operation, everywhere.
//!
//! Copy streams (`GpuConfig::copy_streams`): one by default; with several, each reader thread
//! copies on its own and what must follow the copies waits for each stream that took one
//! (`stream.rs`, `CopyStreams`).
//!
//! Limits: device-to-host reads are synchronous (tests, `cat`).

mod compute;
mod issue;
mod kernels;
mod memory;
mod runtime;
mod stream;

pub use kernels::{GpuDevice, THREADS};
pub use runtime::{Caps, MemKind, RawAlloc, Runtime};

use super::buffer::{DeferredErrors, DeviceBuffer, PinnedBuf, WriteLease};
use super::completion::Completer;
use super::{check_range, BackendKind, Device, DeviceError, MemInfo};
use compute::Compute;
use issue::{CopyThread, H2d, SendPtr};
use memory::{Memory, Pinned};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use stream::CopyStreams;
pub use stream::MAX_COPY_STREAMS;

/// Settings of a [`Gpu`] (`CudaConfig`, `HipConfig`).
#[derive(Clone, Debug, Default)]
pub struct GpuConfig {
    /// Device ordinal (0 = the first GPU).
    pub ordinal: usize,
    /// Unified mode: `None` = on for integrated GPUs only; `Some(true)` forces it on a
    /// discrete GPU (device allocations become mapped pinned host memory).
    pub unified: Option<bool>,
    /// Issue host-to-device copies on the device's copy thread (`issue.rs`): `None` = off
    /// unless the environment says `DS4_COPY_THREAD=on` (or `1`); `Some(false)` issues on the
    /// caller's thread. Off by default: on an H100 it measured no gain over issuing on the
    /// readers' threads (docs/BENCHMARKS.md, "Issue 18", runs 3-8).
    pub copy_thread: Option<bool>,
    /// How long a wait for a copy's event polls it (cuEventQuery / hipEventQuery) before it
    /// blocks in the driver: `None` = `DS4_EVENT_SPIN_US` (microseconds) or
    /// [`DEFAULT_EVENT_SPIN`]; zero blocks at once.
    pub event_spin: Option<Duration>,
    /// How many host-to-device copy streams: `None` = `DS4_COPY_STREAMS` or
    /// [`DEFAULT_COPY_STREAMS`]; with several, each reader thread copies on its own (thread
    /// `k` on stream `k % n`, as KvikIO's threads do). Clamped to 1..=[`MAX_COPY_STREAMS`];
    /// one with the copy thread (it issues on one stream).
    pub copy_streams: Option<usize>,
}

/// Copy streams when neither the config nor `DS4_COPY_STREAMS` says (`GpuConfig::copy_streams`).
pub const DEFAULT_COPY_STREAMS: usize = 1;

/// `GpuConfig::copy_streams` resolved against `DS4_COPY_STREAMS` (ignored unless a number;
/// `CopyStreams::new` clamps it).
fn copy_streams(cfg: Option<usize>) -> usize {
    cfg.or_else(|| crate::knobs::env_number("DS4_COPY_STREAMS").map(|n| n as usize))
        .unwrap_or(DEFAULT_COPY_STREAMS)
}

/// How long a copy's event is polled before the wait blocks (`GpuConfig::event_spin`): zero,
/// since polling for 1 ms bought 0-8 % on the H100's expert pattern and nothing in decode for a
/// spinning core (docs/BENCHMARKS.md, "Issue 18", run 5).
pub const DEFAULT_EVENT_SPIN: Duration = Duration::ZERO;

/// `GpuConfig::event_spin` resolved against `DS4_EVENT_SPIN_US` (ignored unless a number).
fn event_spin(cfg: Option<Duration>) -> Duration {
    cfg.or_else(|| crate::knobs::env_micros("DS4_EVENT_SPIN_US"))
        .unwrap_or(DEFAULT_EVENT_SPIN)
}

/// `GpuConfig::copy_thread` resolved against `DS4_COPY_THREAD`.
fn copy_thread_on(cfg: Option<bool>) -> bool {
    cfg.or_else(|| crate::knobs::env_switch("DS4_COPY_THREAD"))
        .unwrap_or(false)
}

/// One GPU with its copy streams.
pub struct Gpu<R: Runtime> {
    // Drop order: the copy thread first (it issues what is queued), the completion thread (it
    // waits for every queued copy), then the kernels, the streams, then the runtime handle (its
    // last `Arc`: memory holds one too).
    copier: Option<CopyThread>,
    done: Completer,
    /// The kernels and their stream, made on first use (NVRTC / hipRTC compile).
    compute: OnceLock<Compute<R>>,
    copies: CopyStreams<R>,
    rt: Arc<R>,
    deferred: Arc<DeferredErrors>,
    name: String,
    unified: bool,
    integrated: bool,
}

impl<R: Runtime> std::fmt::Debug for Gpu<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ty = match R::KIND {
            BackendKind::Cuda => "CudaDevice",
            BackendKind::Hip => "HipDevice",
            BackendKind::Host => "Gpu",
        };
        f.debug_struct(ty)
            .field("name", &self.name)
            .field("unified", &self.unified)
            .finish()
    }
}

impl<R: Runtime> Gpu<R> {
    /// Opens device `cfg.ordinal`: a clean [`DeviceError::NoDevice`] when there is no driver or
    /// no such device.
    pub fn new(cfg: GpuConfig) -> Result<Self, DeviceError> {
        let rt = Arc::new(R::open(cfg.ordinal)?);
        rt.bind()?;
        let caps = rt.caps()?;
        let unified = cfg.unified.unwrap_or(caps.integrated);
        if unified && !caps.can_map_host {
            return Err(DeviceError::Backend {
                backend: R::KIND,
                call: "unified mode",
                code: -1,
                detail: "this device cannot map host memory".into(),
            });
        }
        let threaded = copy_thread_on(cfg.copy_thread);
        let n = match threaded {
            true => 1,
            false => copy_streams(cfg.copy_streams),
        };
        let copies = CopyStreams::new(&rt, n, event_spin(cfg.event_spin))?;
        let r = rt.clone();
        let done = Completer::start(R::KIND, move || r.bind())?;
        let deferred: Arc<DeferredErrors> = Arc::default();
        let copier = match threaded {
            true => Some(CopyThread::start(
                rt.clone(),
                copies.first().clone(),
                done.queue(),
                deferred.clone(),
            )?),
            false => None,
        };
        let name = format!("{} ({} {})", rt.name(), R::LABEL, cfg.ordinal);
        Ok(Self {
            copier,
            done,
            compute: OnceLock::new(),
            copies,
            rt,
            deferred,
            name,
            unified,
            integrated: caps.integrated,
        })
    }

    /// Returns once every copy queued on the copy thread so far is on the stream (at once when
    /// none is queued or there is no copy thread): what must follow them in stream order (a
    /// kernel launch, a stream sync) calls this first.
    fn flush_copies(&self) {
        if let Some(c) = &self.copier {
            c.queue.flush();
        }
    }

    /// True when the GPU copies on a thread of its own (`GpuConfig::copy_thread`).
    pub fn copy_thread(&self) -> bool {
        self.copier.is_some()
    }

    /// How many host-to-device copy streams the GPU has (`GpuConfig::copy_streams`).
    pub fn copy_streams(&self) -> usize {
        self.copies.len()
    }

    /// True when the GPU shares memory with the CPU (what `unified` defaults to).
    pub fn integrated(&self) -> bool {
        self.integrated
    }

    /// Zeroes a new allocation (like the host backend's: tests and callers may rely on it):
    /// one memset on the copy stream, waited for here (allocation is the slow path anyway).
    fn zeroed(&self, mem: Memory<R>) -> Result<DeviceBuffer, DeviceError> {
        if mem.len > 0 {
            let s = self.copies.first();
            // SAFETY: `len` bytes of memory just allocated (which bound the device).
            unsafe { self.rt.zero_async(mem.at(0), mem.len, s.raw) }?;
            s.synchronize()?;
        }
        Ok(DeviceBuffer::from_memory(Box::new(mem)))
    }

    /// `buf`'s memory if it is this device's: [`DeviceError::WrongBackend`] for another
    /// backend's, [`DeviceError::Backend`] (`call`) for another device's.
    fn ours<'a>(
        &self,
        buf: &'a DeviceBuffer,
        call: &'static str,
    ) -> Result<&'a Memory<R>, DeviceError> {
        let mem =
            buf.memory()
                .as_any()
                .downcast_ref::<Memory<R>>()
                .ok_or(DeviceError::WrongBackend {
                    expected: R::KIND,
                    found: buf.backend(),
                })?;
        if !Arc::ptr_eq(&mem.rt, &self.rt) {
            return Err(DeviceError::Backend {
                backend: R::KIND,
                call,
                code: -1,
                detail: format!("device memory of another {} device", R::LABEL),
            });
        }
        Ok(mem)
    }
}

impl<R: Runtime> Device for Gpu<R> {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn kind(&self) -> BackendKind {
        R::KIND
    }

    fn unified_memory(&self) -> bool {
        self.unified
    }

    fn alloc_pinned(&self, len: usize) -> Result<PinnedBuf, DeviceError> {
        let mem = Pinned::new(&self.rt, len)?;
        Ok(PinnedBuf::new(Box::new(mem), self.deferred.clone()))
    }

    unsafe fn wrap_device_memory(
        &self,
        addr: u64,
        len: usize,
    ) -> Result<DeviceBuffer, DeviceError> {
        super::check_foreign(addr, len, R::KIND)?;
        // Not owned: Drop frees nothing. The caller vouches (the trait's contract) that the
        // range is this device's memory and outlives the buffer.
        let mem = Memory::foreign(&self.rt, addr, len);
        Ok(DeviceBuffer::from_memory(Box::new(mem)))
    }

    fn alloc(&self, len: usize) -> Result<DeviceBuffer, DeviceError> {
        let what = match self.unified {
            true => "mapped device memory",
            false => "device memory",
        };
        self.zeroed(Memory::new(&self.rt, len, self.unified, what)?)
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
        if src.backend() != R::KIND {
            return Err(DeviceError::WrongBackend {
                expected: R::KIND,
                found: src.backend(),
            });
        }
        let mem = self.ours(dst.buffer(), "copy")?;
        if let Some(c) = &self.copier {
            let (done, ev) = self.done.pending();
            let job = H2d {
                to: mem.at(dst_offset),
                // In bounds: checked above (`src_offset + len <= src.len()`).
                from: SendPtr(src.src_ptr().wrapping_add(src_offset)),
                len,
                lease: dst.clone(),
                done,
            };
            if let Err(job) = c.queue.push(job) {
                // Only while the device is dropped, which no caller can overlap.
                drop(job.lease);
                job.done.fail("copy thread stopped".into());
                return Err(DeviceError::StreamClosed(R::KIND));
            }
            src.record(ev, src_offset + len);
            return Ok(());
        }
        self.rt.bind()?;
        let (lane, stream) = self.copies.this_thread();
        if len > 0 {
            // SAFETY: bound; the source range lies in pinned memory owned by `src` (checked
            // above), which waits for the event recorded below before any host write or free;
            // the destination range lies in `mem` (checked by the lease), which the lease keeps
            // alive and exclusive until the completion thread has seen the copy finish.
            unsafe {
                let from = src.src_ptr().add(src_offset);
                self.rt
                    .copy_h2d_async(mem.at(dst_offset), from, len, stream.raw)
            }?;
        }
        let ev = stream.record()?;
        self.copies.mark(lane);
        src.record(
            self.done.track(Box::new(ev), Some(dst.clone())),
            src_offset + len,
        );
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
        let mem = self.ours(src, "copy")?;
        // After every copy and kernel queued before.
        self.flush_copies();
        self.synchronize_compute()?;
        self.copies.synchronize()?;
        if dst.is_empty() {
            return Ok(());
        }
        match mem.host {
            Some(h) => {
                // SAFETY: mapped memory valid for `len` bytes; the range was checked, the read
                // lease keeps writers out, and the stream is idle.
                let s = unsafe { std::slice::from_raw_parts(h.as_ptr().add(offset), dst.len()) };
                dst.copy_from_slice(s);
                Ok(())
            }
            // SAFETY: bound (by the stream sync); `dst` is a live exclusive slice of `len`
            // bytes; the source range lies in `mem` (checked) under a read lease.
            None => unsafe {
                self.rt
                    .copy_d2h(dst.as_mut_ptr(), mem.at(offset), dst.len())
            },
        }
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        self.flush_copies();
        self.synchronize_compute()?;
        self.copies.synchronize()?;
        self.done.drain();
        self.deferred.take()
    }

    fn memory_info(&self) -> Result<Option<MemInfo>, DeviceError> {
        let (free, total) = self.rt.mem_info()?;
        Ok(Some(MemInfo { free, total }))
    }

    fn copy_pageable_blocking(
        &self,
        src: &[u8],
        dst: &Arc<DeviceBuffer>,
        dst_offset: usize,
    ) -> Result<(), DeviceError> {
        let _lease = dst.lease_write(dst_offset, src.len())?;
        let mem = self.ours(dst, "copy")?;
        self.synchronize()?;
        self.rt.bind()?;
        if src.is_empty() {
            return Ok(());
        }
        match mem.host {
            Some(h) => {
                // SAFETY: mapped memory valid for `len` bytes; the range was checked by the
                // lease, which keeps every other writer and reader out; the stream is idle.
                let d = unsafe {
                    std::slice::from_raw_parts_mut(h.as_ptr().add(dst_offset), src.len())
                };
                d.copy_from_slice(src);
                Ok(())
            }
            // SAFETY: bound; `src` is a live slice of `len` bytes (pageable: the runtime stages
            // it and returns when the copy is done); the destination range lies in `mem`
            // (checked by the lease) and is exclusively ours while the lease lives.
            None => unsafe {
                self.rt
                    .copy_h2d(mem.at(dst_offset), src.as_ptr(), src.len())
            },
        }
    }
}
