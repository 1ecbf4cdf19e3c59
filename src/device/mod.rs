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
//! overwrite or free staging memory that a copy is still reading. A copy's destination is passed
//! as `Arc<DeviceBuffer>` and the backend keeps that `Arc` until the copy has run, so device
//! memory cannot be freed under a copy either.
//!
//! Limits: one stream per device (one copy engine saturates PCIe, see TARGETS.md); only
//! host-to-device copies are asynchronous, device-to-host reads are synchronous (tests, `cat`).
//! Only `host` is compiled today; [`BackendKind`] reserves `cuda` and `hip`.

pub mod buffer;
pub mod host;

pub(crate) use buffer::WriteLease;
pub use buffer::{DeviceBuffer, DeviceMemory, Event, EventImpl, PinnedBuf, PinnedMemory};
pub use host::{HostConfig, HostDevice};

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
    #[error("ds4-stream was not compiled with {0} support (build with --features {0})")]
    NotCompiled(BackendKind),
    #[error("range {offset}+{len} is outside a {what} of {size} bytes")]
    OutOfRange {
        offset: u64,
        len: u64,
        size: u64,
        what: &'static str,
    },
    #[error("device buffer range {offset}+{len} is being written by a request in flight")]
    Busy { offset: u64, len: u64 },
    #[error("memory of backend {found} passed to a {expected} device")]
    WrongBackend {
        expected: BackendKind,
        found: BackendKind,
    },
    #[error("the {0} device's copy stream has stopped")]
    StreamClosed(BackendKind),
}

/// Which backend a device comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// CPU: device memory is host memory, copies run on a copy thread.
    Host,
    /// NVIDIA through cudarc (feature `cuda`, not yet compiled in).
    Cuda,
    /// AMD through hip-sys (feature `hip`, not yet compiled in).
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

    /// Opens the default device of this backend, or says why it cannot.
    pub fn open_default(self) -> Result<Arc<dyn Device>, DeviceError> {
        match self {
            BackendKind::Host => Ok(Arc::new(HostDevice::new(HostConfig::default()))),
            BackendKind::Cuda | BackendKind::Hip => Err(DeviceError::NotCompiled(self)),
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

    /// Allocates `len` bytes of device memory (zeroed on the host backend; unspecified on GPUs).
    fn alloc(&self, len: usize) -> Result<DeviceBuffer, DeviceError>;

    /// Queues a copy of `src[src_offset..src_offset + len]` to `dst[dst_offset..]` on the
    /// device's stream and records the copy's event into `src` (see [`PinnedBuf::event`]).
    /// Returns once the copy is queued, not done. The backend keeps `dst` alive until the copy
    /// has run. Ranges are checked.
    fn copy_h2d_async(
        &self,
        src: &mut PinnedBuf,
        src_offset: usize,
        dst: &Arc<DeviceBuffer>,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), DeviceError>;

    /// Synchronously copies `dst.len()` bytes of `src` from `offset` into host memory, after
    /// every copy queued before it. Fails with [`DeviceError::Busy`] when an engine request is
    /// still writing an overlapping range.
    fn read_d2h(
        &self,
        src: &DeviceBuffer,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<(), DeviceError>;

    /// Waits until every queued copy has finished.
    fn synchronize(&self) -> Result<(), DeviceError>;
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
