//! Device backends behind one object-safe trait ([`Device`], used as `Arc<dyn Device>`).
//!
//! Why: the engine must move bytes file -> pinned staging -> device memory the same way on the
//! CPU (`host`, what every test uses), CUDA (cudarc) and HIP (hip-sys). The trait is the narrow
//! boundary: allocate pinned host memory and device memory, issue an async host-to-device copy on
//! the device's one stream (recording an [`Event`] into the source [`PinnedBuf`]), query/wait
//! events, read device memory back synchronously.
//!
//! Safety model (after cudarc's `PinnedHostSlice`): a [`PinnedBuf`] remembers the event of its
//! last copy; host access through `&mut` and its `Drop` wait for that event, so no caller can
//! overwrite or free staging memory that a copy is still reading. A copy writes its destination
//! under a [`WriteLease`] (which holds the `Arc<DeviceBuffer>`) and the backend keeps the lease
//! until the copy has run, so device memory cannot be freed under a copy, and no engine request
//! or read-back can touch those bytes meanwhile. The backend traits ([`PinnedMemory`],
//! [`DeviceMemory`], [`EventImpl`]) are `unsafe trait`s: the pointers and completion signals they
//! return are what the unsafe code above trusts. Errors of copies nobody waited for are kept in
//! the device's [`DeferredErrors`] and returned by its next [`Device::synchronize`].
//!
//! Limits: one stream per device (one copy engine saturates PCIe, see TARGETS.md); only
//! host-to-device copies are asynchronous, device-to-host reads are synchronous (tests, `cat`).
//! Backends: `host` (always), `cuda` (feature `cuda`), `hip` (feature `hip`).

pub mod buffer;
#[cfg(any(feature = "cuda", feature = "hip"))]
mod completion;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod foreign;
#[cfg(any(feature = "cuda", feature = "hip"))]
pub mod gpu;
pub(crate) mod handoff;
#[cfg(feature = "hip")]
pub mod hip;
pub mod host;
pub mod testing;

/// Makes the GPU backends' completions stamp when each copy was queued and seen over, for the
/// engine's stage trace (a no-op in builds without a GPU backend).
pub(crate) fn stamp_copy_times() {
    #[cfg(any(feature = "cuda", feature = "hip"))]
    completion::stamp_times();
}

pub use buffer::{
    DeferredErrors, DeviceBuffer, DeviceMemory, Event, EventImpl, PinnedBuf, PinnedMemory,
    WriteLease,
};
pub use foreign::ForeignHostMemory;
#[cfg(any(feature = "cuda", feature = "hip"))]
pub use gpu::GpuDevice;
pub use host::{CopyGate, HostConfig, HostDevice};

use std::fmt;
use std::sync::Arc;

/// Alignment of pinned staging memory: enough for O_DIRECT / FILE_FLAG_NO_BUFFERING on every
/// disk we target (logical blocks of 512 or 4096 bytes) and page-aligned for pinning.
pub const PINNED_ALIGN: usize = 4096;

/// Errors of the device layer.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("out of device memory allocating {bytes} bytes of {what}")]
    OutOfMemory { bytes: u64, what: &'static str },
    #[error("no {backend} device: {detail}")]
    NoDevice {
        backend: BackendKind,
        detail: String,
    },
    #[error("{backend} call {call} failed with code {code}: {detail}")]
    Backend {
        backend: BackendKind,
        call: &'static str,
        code: i64,
        detail: String,
    },
    #[error("this build of ds4-stream has no {0} backend (rebuild with `--features {0}`)")]
    NotCompiled(BackendKind),
    #[error("range {offset}+{len} is outside a {what} of {size} bytes")]
    OutOfRange {
        offset: u64,
        len: u64,
        size: u64,
        what: &'static str,
    },
    #[error("device buffer range {offset}+{len} is being written or read back by an operation in flight")]
    Busy { offset: u64, len: u64 },
    /// Copy errors that were kept because nobody waited for the copy (its staging buffer was
    /// dropped): the first one, and how many more came after it.
    #[error("a copy that nobody waited for failed ({more} more after it)")]
    Deferred {
        more: u64,
        #[source]
        first: Box<DeviceError>,
    },
    #[error("memory of backend {found} passed to a {expected} device")]
    WrongBackend {
        expected: BackendKind,
        found: BackendKind,
    },
    #[error("the {0} device's copy stream has stopped")]
    StreamClosed(BackendKind),
    #[error("the {backend} backend does not support {what}")]
    Unsupported {
        backend: BackendKind,
        what: &'static str,
    },
}

/// Which backend a device comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// CPU: device memory is host memory, copies run on a copy thread.
    Host,
    /// NVIDIA through cudarc (feature `cuda`).
    Cuda,
    /// AMD through hip-sys (feature `hip`).
    Hip,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Host => "host",
            BackendKind::Cuda => "cuda",
            BackendKind::Hip => "hip",
        }
    }

    /// Opens the default device of this backend (ordinal 0, its own memory mode).
    pub fn open_default(self) -> Result<Arc<dyn Device>, DeviceError> {
        self.open(OpenOptions::default())
    }
}

/// How to open a device: which one, and in which memory mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// GPU ordinal (0 = the first).
    pub ordinal: usize,
    /// Unified mode (the engine reads files straight into device memory): `None` = what the
    /// device is (integrated GPU, host backend: on); `Some(true)` forces it on a discrete GPU
    /// (mapped pinned memory), `Some(false)` turns it off (host backend: emulated discrete GPU).
    pub unified: Option<bool>,
    /// The host backend's mode when it is the one opened (asked for, or `auto`'s fallback):
    /// `None` = as `unified` says. `Some(false)` keeps the emulated discrete GPU for the host
    /// while a GPU still gets `unified` (`ds4 demo`'s staged path on every backend).
    pub host_unified: Option<bool>,
}

impl BackendKind {
    /// Opens device `opts.ordinal` of this backend, or says why it cannot.
    pub fn open(self, opts: OpenOptions) -> Result<Arc<dyn Device>, DeviceError> {
        match self {
            BackendKind::Host => Ok(Arc::new(HostDevice::new(HostConfig {
                host_visible: opts.host_unified.or(opts.unified).unwrap_or(true),
                ..HostConfig::default()
            })?)),
            #[cfg(feature = "cuda")]
            BackendKind::Cuda => Ok(Arc::new(cuda::CudaDevice::new(cuda::CudaConfig {
                ordinal: opts.ordinal,
                unified: opts.unified,
                ..Default::default()
            })?)),
            #[cfg(not(feature = "cuda"))]
            BackendKind::Cuda => Err(DeviceError::NotCompiled(self)),
            #[cfg(feature = "hip")]
            BackendKind::Hip => Ok(Arc::new(hip::HipDevice::new(hip::HipConfig {
                ordinal: opts.ordinal,
                unified: opts.unified,
                ..Default::default()
            })?)),
            #[cfg(not(feature = "hip"))]
            BackendKind::Hip => Err(DeviceError::NotCompiled(self)),
        }
    }
}

/// What a `--backend` flag asks for: one backend, or `auto` (the first GPU backend compiled
/// in whose device is present, else host).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendArg {
    Kind(BackendKind),
    Auto,
}

impl BackendArg {
    /// The backend [`BackendArg::open`] would open (for `auto`: the first GPU backend whose
    /// device opens, else host), for code that picks its path by backend before opening.
    pub fn resolve(self) -> Result<BackendKind, DeviceError> {
        match self {
            BackendArg::Kind(k) => Ok(k),
            BackendArg::Auto => Ok(self.open(OpenOptions::default())?.kind()),
        }
    }

    /// Opens the device; for `auto`, also says which backends were passed over and why.
    pub fn open(self, opts: OpenOptions) -> Result<Arc<dyn Device>, DeviceError> {
        match self {
            BackendArg::Kind(k) => k.open(opts),
            BackendArg::Auto => {
                for k in [BackendKind::Cuda, BackendKind::Hip] {
                    match k.open(opts) {
                        Ok(d) => return Ok(d),
                        Err(DeviceError::NotCompiled(_) | DeviceError::NoDevice { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                BackendKind::Host.open(opts)
            }
        }
    }
}

impl std::str::FromStr for BackendArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("auto") {
            return Ok(BackendArg::Auto);
        }
        s.parse::<BackendKind>()
            .map(BackendArg::Kind)
            .map_err(|_| format!("unknown backend {s:?} (expected host, cuda, hip or auto)"))
    }
}

impl fmt::Display for BackendArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendArg::Kind(k) => k.fmt(f),
            BackendArg::Auto => f.write_str("auto"),
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "host" | "cpu" => Ok(BackendKind::Host),
            "cuda" => Ok(BackendKind::Cuda),
            "hip" | "rocm" => Ok(BackendKind::Hip),
            _ => Err(format!(
                "unknown backend {s:?} (expected host, cuda or hip)"
            )),
        }
    }
}

/// One device with one copy stream. Object safe: the engine holds `Arc<dyn Device>`.
///
/// Ordering contract: copies issued through [`Device::copy_h2d_async`] run in issue order; an
/// event recorded after a copy completes when that copy (and every earlier one) has finished.
pub trait Device: Send + Sync + fmt::Debug {
    /// Human-readable name ("host (copy thread)", "NVIDIA H200", ...).
    fn name(&self) -> String;

    fn kind(&self) -> BackendKind;

    /// True when device memory is host-visible (host backend, unified-memory APUs): the reader
    /// can then read straight into the destination, no staging, no copy.
    fn unified_memory(&self) -> bool;

    /// Allocates `len` bytes of pinned host memory aligned to at least [`PINNED_ALIGN`].
    /// Slow on GPUs (pinning runs at ~1 GB/s): allocate once, reuse.
    fn alloc_pinned(&self, len: usize) -> Result<PinnedBuf, DeviceError>;

    /// Allocates `len` bytes of device memory, zeroed.
    fn alloc(&self, len: usize) -> Result<DeviceBuffer, DeviceError>;

    /// Queues a copy of `src[src_offset..src_offset + len]` to `dst[dst_offset..]` on the
    /// device's stream and records the copy's event into `src` (see [`PinnedBuf::event`]).
    /// Returns once the copy is queued, not done. The range must lie inside `dst`'s lease; the
    /// backend keeps a clone of `dst` until the copy has run (and drops it before the copy's
    /// event completes), so the range stays leased exactly as long as the copy can write it.
    /// Ranges are checked.
    fn copy_h2d_leased(
        &self,
        src: &mut PinnedBuf,
        src_offset: usize,
        dst: &Arc<WriteLease>,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), DeviceError>;

    /// [`Self::copy_h2d_leased`] with a write lease taken here on `dst[dst_offset..+len]`:
    /// fails with [`DeviceError::Busy`] when an engine request or another copy is writing, or a
    /// read-back is reading, any byte of it.
    fn copy_h2d_async(
        &self,
        src: &mut PinnedBuf,
        src_offset: usize,
        dst: &Arc<DeviceBuffer>,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), DeviceError> {
        check_range(src_offset, len, src.len(), "pinned buffer")?;
        let lease = Arc::new(dst.lease_write(dst_offset, len)?);
        self.copy_h2d_leased(src, src_offset, &lease, dst_offset, len)
    }

    /// Synchronously copies `dst.len()` bytes of `src` from `offset` into host memory, after
    /// every copy queued before it. Holds a read lease on the range for the whole read: fails
    /// with [`DeviceError::Busy`] when an engine request or a copy is writing an overlapping
    /// range, and no writer can start on it until the read is over.
    fn read_d2h(
        &self,
        src: &DeviceBuffer,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<(), DeviceError>;

    /// Waits until every queued copy has finished. Returns the first error of a copy whose
    /// staging buffer was dropped without waiting (kept in the device's [`DeferredErrors`]).
    fn synchronize(&self) -> Result<(), DeviceError>;

    /// Wraps `len` bytes of this device's memory at device address `addr` that someone else
    /// allocated (a C caller's `cuMemAlloc` / `hipMalloc` in the same context: the C ABI's
    /// `DS4S_MEM_DEVICE` reads) as a copy destination; dropping the buffer frees nothing.
    /// Backends without device memory of their own (host) answer [`DeviceError::Unsupported`].
    ///
    /// # Safety
    /// `[addr, addr + len)` is device memory of this device and context that stays allocated
    /// until the returned buffer (and every clone of its `Arc`) is dropped, and that nothing
    /// else reads or writes while a request or copy into it is in flight.
    unsafe fn wrap_device_memory(
        &self,
        addr: u64,
        len: usize,
    ) -> Result<DeviceBuffer, DeviceError> {
        let _ = (addr, len);
        Err(DeviceError::Unsupported {
            backend: self.kind(),
            what: "destinations in foreign device memory",
        })
    }

    /// Free and total device memory, where the backend can say (GPUs); `None` for the host
    /// backend, whose "device memory" is the process heap.
    fn memory_info(&self) -> Result<Option<MemInfo>, DeviceError> {
        Ok(None)
    }

    /// The path this engine replaces, kept only so benchmarks can measure it (`ds4-bench io
    /// --cases mmap` on a GPU): a blocking copy from *pageable* host memory (a file mapping)
    /// into `dst[dst_offset..]`, after every copy queued before it. The driver bounces pageable
    /// sources through its own staging and page faults stall it; the engine itself never calls
    /// this. Holds a write lease on the range while it runs. Backends without it (host)
    /// answer [`DeviceError::Backend`] with code -1.
    fn copy_pageable_blocking(
        &self,
        src: &[u8],
        dst: &Arc<DeviceBuffer>,
        dst_offset: usize,
    ) -> Result<(), DeviceError> {
        let _ = (src, dst, dst_offset);
        Err(DeviceError::Backend {
            backend: self.kind(),
            call: "copy_pageable_blocking",
            code: -1,
            detail: "not provided by this backend (a benchmark baseline only)".into(),
        })
    }
}

/// Device memory as the driver reports it (bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MemInfo {
    pub free: u64,
    pub total: u64,
}

/// A foreign device range must be non-null and not wrap the address space.
#[cfg(any(feature = "cuda", feature = "hip"))]
pub(crate) fn check_foreign(
    addr: u64,
    len: usize,
    backend: BackendKind,
) -> Result<(), DeviceError> {
    if addr == 0 || addr.checked_add(len as u64).is_none() {
        return Err(DeviceError::Backend {
            backend,
            call: "wrap_device_memory",
            code: -1,
            detail: format!("device range {addr:#x}+{len} is null or wraps around"),
        });
    }
    Ok(())
}

/// Checks `offset + len <= size` without overflow.
pub(crate) fn check_range(
    offset: usize,
    len: usize,
    size: usize,
    what: &'static str,
) -> Result<(), DeviceError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(DeviceError::OutOfRange {
            offset: offset as u64,
            len: len as u64,
            size: size as u64,
            what,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_mode_follows_host_unified_then_unified() {
        let open = |unified, host_unified| {
            BackendKind::Host
                .open(OpenOptions {
                    ordinal: 0,
                    unified,
                    host_unified,
                })
                .unwrap()
                .unified_memory()
        };
        assert!(
            open(None, None),
            "the host backend is host-visible by default"
        );
        assert!(!open(Some(false), None));
        assert!(
            !open(Some(true), Some(false)),
            "host_unified wins on the host"
        );
        assert!(open(None, Some(true)));
        // `auto` on a machine without a GPU falls back to the host in host_unified's mode
        // (`ds4 demo`'s discrete emulation); where a GPU opens, this says nothing.
        let d = BackendArg::Auto
            .open(OpenOptions {
                ordinal: 0,
                unified: None,
                host_unified: Some(false),
            })
            .unwrap();
        if d.kind() == BackendKind::Host {
            assert!(!d.unified_memory());
        }
    }
}
