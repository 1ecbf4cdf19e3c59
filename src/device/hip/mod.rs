//! The `hip` backend: AMD GPUs through the HIP runtime (libamdhip64, linked at build time by
//! hip-sys, so a `hip` binary needs libamdhip64 to start; with it and no AMD GPU, opening the
//! device answers `NoDevice` with `hipErrorNoDevice`).
//!
//! Layers (STYLE.md item 1): our declarations (`api.rs`, see there why not hip-sys's) →
//! [`Hip`], our [`Runtime`](super::gpu::Runtime) (`runtime.rs`: the device made current per
//! thread with `hipSetDevice`, errors named `hipErrorX: text`) → [`HipDevice`] =
//! [`Gpu<Hip>`](super::gpu::Gpu), the RAII device shared with CUDA (`device::gpu`). The kernels
//! are compiled with hipRTC, loaded at run time (`rtc.rs`).
//!
//! Tested on real hardware only through the CUDA shim (tests/hip_shim), not yet on an AMD GPU.

mod api;
mod rtc;
mod runtime;

pub use rtc::{compile_kernels_for, compile_source_for};
pub use runtime::Hip;

/// One HIP device with one copy stream.
pub type HipDevice = super::gpu::Gpu<Hip>;
/// Settings of a [`HipDevice`].
pub type HipConfig = super::gpu::GpuConfig;
