//! The `cuda` backend: NVIDIA GPUs through the CUDA driver API (cudarc, loaded at run time, so
//! a `cuda` build starts with no CUDA installed and answers "no CUDA driver").
//!
//! Layers (STYLE.md item 1): cudarc's `sys` (raw) → cudarc's `result` (one `Result` per call)
//! → [`Cuda`], our [`Runtime`](super::gpu::Runtime) (`runtime.rs`: primary context, errors
//! named `CUDA_ERROR_X: text`) → [`CudaDevice`] = [`Gpu<Cuda>`](super::gpu::Gpu), the RAII
//! device shared with HIP (`device::gpu`). Why not cudarc's safe layer: its `CudaSlice` tracks
//! its own events and streams, while our device trait already fences memory with events and
//! leases; we need raw pointers, pinned memory we can read files into, and mapped memory.
//! The kernels are compiled with NVRTC (through cudarc).

mod runtime;

pub use runtime::Cuda;

/// One CUDA device with one copy stream.
pub type CudaDevice = super::gpu::Gpu<Cuda>;
/// Settings of a [`CudaDevice`].
pub type CudaConfig = super::gpu::GpuConfig;
