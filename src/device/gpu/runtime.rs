//! The part of a GPU backend that differs between CUDA and HIP: a handful of runtime calls,
//! each returning `Result<_, DeviceError>` with the call's name and the runtime's own error
//! name and text. [`Gpu`](super::Gpu) builds everything else (streams, events, the completion
//! thread, staging and device memory, kernels) once on top of it.
//!
//! Implemented by `device::cuda::Cuda` (the CUDA driver API through cudarc's `result` layer)
//! and `device::hip::Hip` (the HIP runtime through our declarations in `hip/api.rs`).
//! Device addresses cross this boundary as `u64` on both (HIP's `void *` is converted there).

use crate::device::{BackendKind, DeviceError};
use std::ffi::{c_void, CStr};

/// What a device can do, read once when it opens.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    /// The GPU shares memory with the CPU (what unified mode defaults to).
    pub integrated: bool,
    /// The device can map pinned host memory (required by unified mode and the RAM tier).
    pub can_map_host: bool,
}

/// The kind of memory [`Runtime::alloc`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemKind {
    /// Device memory (`cuMemAlloc`, `hipMalloc`): a device address only.
    Device,
    /// Portable pinned host memory (`cuMemHostAlloc`, `hipHostMalloc`): a host address only.
    Pinned,
    /// Portable pinned host memory mapped into the device, with its device address.
    Mapped,
}

/// An allocation as the runtime made it: host address (null for [`MemKind::Device`]) and
/// device address (0 for [`MemKind::Pinned`]).
#[derive(Clone, Copy, Debug)]
pub struct RawAlloc {
    pub host: *mut u8,
    pub dev: u64,
}

/// One GPU runtime, opened on one device.
///
/// # Safety
/// [`Gpu`](super::Gpu)'s unsafe code relies on these promises of the implementation:
/// - every handle it returns (stream, event, module, function) may be used and destroyed from
///   any thread once [`Self::bind`] has run on that thread, and the runtime synchronises its
///   own state, so the handles may be sent and shared between threads (as `Self` is);
/// - [`Self::alloc`] returns memory valid for `size` bytes (host and/or device side, as the
///   kind says) until [`Self::free`], and [`Self::event_sync`] returns only once every
///   operation queued on the stream before the matching [`Self::event_record`] has finished
///   touching memory;
/// - errors are [`DeviceError::Backend`] with `backend` = [`Self::KIND`] (allocation failures
///   for lack of memory with `code` = [`Self::OUT_OF_MEMORY`]).
///
/// Every method other than `open`, `bind`, `caps` and `name` needs the device bound on the
/// calling thread (its `# Safety` says so as "bound").
pub unsafe trait Runtime: Send + Sync + Sized + 'static {
    const KIND: BackendKind;
    /// How device names say which runtime they come from ("CUDA", "HIP").
    const LABEL: &'static str;
    /// The `code` of an out-of-memory error (mapped to [`DeviceError::OutOfMemory`]).
    const OUT_OF_MEMORY: i64;
    type Stream: Copy;
    type Event: Copy;
    type Module: Copy;
    type Function: Copy;

    /// Finds device `ordinal`: [`DeviceError::NoDevice`] when the runtime has no driver or
    /// device at all, or not that one.
    fn open(ordinal: usize) -> Result<Self, DeviceError>;
    /// Makes this device current on the calling thread unless it already is (asking the
    /// runtime each time: code outside ours, e.g. a C caller, may switch devices too).
    fn bind(&self) -> Result<(), DeviceError>;
    fn caps(&self) -> Result<Caps, DeviceError>;
    /// The device's name as the runtime says it (a placeholder if it cannot).
    fn name(&self) -> String;
    /// (free, total) bytes of device memory; binds the device.
    fn mem_info(&self) -> Result<(u64, u64), DeviceError>;

    /// `size` (> 0) bytes of memory of `kind`.
    ///
    /// # Safety
    /// Bound.
    unsafe fn alloc(&self, kind: MemKind, size: usize) -> Result<RawAlloc, DeviceError>;
    /// Frees what [`Self::alloc`] returned for `kind`.
    ///
    /// # Safety
    /// Bound; `a` came from `alloc(kind, _)` on this runtime and nothing uses it any more.
    unsafe fn free(&self, kind: MemKind, a: RawAlloc) -> Result<(), DeviceError>;
    /// Pins (page-locks, portable) `size` bytes of host memory at `p`.
    ///
    /// # Safety
    /// Bound; `p..p + size` is a live allocation of the caller's.
    unsafe fn host_register(&self, p: *mut u8, size: usize) -> Result<(), DeviceError>;
    /// Undoes [`Self::host_register`].
    ///
    /// # Safety
    /// Bound; `p` was registered and no copy reads it any more.
    unsafe fn host_unregister(&self, p: *mut u8) -> Result<(), DeviceError>;

    /// A new non-blocking stream.
    ///
    /// # Safety
    /// Bound.
    unsafe fn stream_create(&self) -> Result<Self::Stream, DeviceError>;
    /// # Safety
    /// Bound; a live stream of this runtime.
    unsafe fn stream_sync(&self, s: Self::Stream) -> Result<(), DeviceError>;
    /// # Safety
    /// Bound; a live stream of this runtime, not used afterwards.
    unsafe fn stream_destroy(&self, s: Self::Stream) -> Result<(), DeviceError>;
    /// Makes `s` wait on the GPU for `e`.
    ///
    /// # Safety
    /// Bound; a live stream and a live, recorded event of this runtime.
    unsafe fn stream_wait(&self, s: Self::Stream, e: Self::Event) -> Result<(), DeviceError>;

    /// Queues a copy of `len` bytes from pinned host memory at `src` to device address `dst`.
    ///
    /// # Safety
    /// Bound; `src..+len` is pinned host memory and `dst..+len` device memory of this device,
    /// both live and untouched by anyone else until an event recorded after it completes.
    unsafe fn copy_h2d_async(
        &self,
        dst: u64,
        src: *const u8,
        len: usize,
        s: Self::Stream,
    ) -> Result<(), DeviceError>;
    /// Queues a copy of `len` bytes between device addresses (mapped memory included).
    ///
    /// # Safety
    /// As [`Self::copy_h2d_async`], with `src..+len` device memory of this device.
    unsafe fn copy_d2d_async(
        &self,
        dst: u64,
        src: u64,
        len: usize,
        s: Self::Stream,
    ) -> Result<(), DeviceError>;
    /// Copies `len` bytes from host memory (pageable or not) to the device; returns when done.
    ///
    /// # Safety
    /// Bound; both ranges live, `dst..+len` device memory of this device written by nobody else.
    unsafe fn copy_h2d(&self, dst: u64, src: *const u8, len: usize) -> Result<(), DeviceError>;
    /// Copies `len` bytes from the device to host memory; returns when done.
    ///
    /// # Safety
    /// Bound; `dst..+len` live host memory exclusively ours, `src..+len` device memory of this
    /// device.
    unsafe fn copy_d2h(&self, dst: *mut u8, src: u64, len: usize) -> Result<(), DeviceError>;
    /// Queues a memset of `len` zero bytes at device address `dst`.
    ///
    /// # Safety
    /// Bound; `dst..+len` device memory of this device, live until the stream has run it.
    unsafe fn zero_async(&self, dst: u64, len: usize, s: Self::Stream) -> Result<(), DeviceError>;

    /// A new event that is waited for by blocking, not spinning, and records no timing.
    ///
    /// # Safety
    /// Bound.
    unsafe fn event_create(&self) -> Result<Self::Event, DeviceError>;
    /// # Safety
    /// Bound; a live event and stream of this runtime.
    unsafe fn event_record(&self, e: Self::Event, s: Self::Stream) -> Result<(), DeviceError>;
    /// Blocks until the work recorded before `e` has finished.
    ///
    /// # Safety
    /// Bound; a live event of this runtime.
    unsafe fn event_sync(&self, e: Self::Event) -> Result<(), DeviceError>;
    /// True once the work recorded before `e` has finished; never blocks.
    ///
    /// # Safety
    /// Bound; a live event of this runtime.
    unsafe fn event_query(&self, e: Self::Event) -> Result<bool, DeviceError>;
    /// # Safety
    /// Bound; a live event of this runtime, not used afterwards (it may still be pending).
    unsafe fn event_destroy(&self, e: Self::Event) -> Result<(), DeviceError>;

    /// Compiles `kernels/ds4_kernels.cu` for this device (NVRTC / hipRTC): an image for
    /// [`Self::module_load`].
    fn compile_kernels(&self) -> Result<Vec<u8>, DeviceError>;
    /// # Safety
    /// Bound; `image` came from [`Self::compile_kernels`] of this runtime.
    unsafe fn module_load(&self, image: &[u8]) -> Result<Self::Module, DeviceError>;
    /// # Safety
    /// Bound; a live module of this runtime, whose kernels have all finished.
    unsafe fn module_unload(&self, m: Self::Module) -> Result<(), DeviceError>;
    /// # Safety
    /// Bound; a live module of this runtime.
    unsafe fn function(&self, m: Self::Module, name: &CStr) -> Result<Self::Function, DeviceError>;
    /// Launches `f` on `s`: a 1-D grid of `grid` blocks of `block` threads, no dynamic shared
    /// memory, `args` one pointer per kernel parameter.
    ///
    /// # Safety
    /// Bound; `f` from a live module and `s` a live stream of this runtime; `args` as
    /// [`GpuDevice::launch`](super::GpuDevice::launch) requires.
    unsafe fn launch(
        &self,
        f: Self::Function,
        grid: u32,
        block: u32,
        s: Self::Stream,
        args: &mut [*mut c_void],
    ) -> Result<(), DeviceError>;
}
