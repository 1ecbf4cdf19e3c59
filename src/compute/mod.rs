//! The host reference of every compute kernel of DS4's MoE decode path, and the host backend's
//! implementation of it.
//!
//! Why: the GPU kernels (`kernels/ds4_kernels.cu`, exported as [`DS4_KERNELS_CU`]) need a
//! reference to be checked against, and the host backend needs the same arithmetic to run the
//! MoE stack (docs/MOE_STACK.md: router, routed experts, shared expert) itself.
//!
//! What: [`quant`] decodes the ggml block formats the stack uses (F32, F16, Q8_0, Q2_K, Q4_K,
//! IQ2_XXS; dequantisation bit-identical to gguf-py 0.19) and multiplies quantised matrices by
//! a vector; [`ops`] holds rms_norm, sqrt(softplus), the router's top-k, swiglu with clamp and
//! the weighted accumulate; [`expert_ffn`] chains them into one expert. Bad lengths, shapes and
//! types are [`ComputeError`]s, never panics.
//!
//! Limits: batch 1 (one token), single-threaded, f32 throughout; summation orders are fixed and
//! documented (see [`quant`] and [`ops`]) so host results are deterministic, but the GPU
//! kernels sum in another order: host and GPU agree within a stated tolerance, not bit for bit.
//! No SIMD beyond what the compiler vectorises, no `unsafe`. The full MoE layer (routing
//! weights, the expert loop) is assembled from these pieces by the decode path, not here.

mod error;
pub mod f16;
mod ffn;
pub mod ops;
pub mod quant;

pub use error::ComputeError;
pub use ffn::{expert_ffn, Weights};
pub use quant::{dequantize_row, is_supported, matvec, q8_0_to_f16, row_bytes};

/// The CUDA / HIP source of the same kernels (common subset; compile with NVRTC or hipRTC).
/// kernels/README.md documents each kernel's launch shape.
pub const DS4_KERNELS_CU: &str = include_str!("../../kernels/ds4_kernels.cu");

/// Every `extern "C" __global__` kernel of [`DS4_KERNELS_CU`] (the GPU backends load each by
/// name; `kernel_source_tests` checks that the source defines exactly these and
/// kernels/README.md documents them).
pub const KERNEL_NAMES: [&str; 10] = [
    "ds4_matvec_iq2_xxs",
    "ds4_matvec_q2_k",
    "ds4_matvec_q4_k",
    "ds4_matvec_q8_0",
    "ds4_matvec_f16",
    "ds4_q8_0_to_f16",
    "ds4_rms_norm",
    "ds4_sqrt_softplus",
    "ds4_swiglu_clamp",
    "ds4_weighted_add",
];

#[cfg(test)]
mod kernel_source_tests;
