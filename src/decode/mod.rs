//! The MoE half of DS4's decode, exactly as docs/MOE_STACK.md (the project's spec) fixes it: per token, per layer, RMS norm → router (F16) → sqrt(softplus) →
//! experts (hash layers: `tid2eid[token]`; others: top-k of p + bias) → weights (normalised,
//! scaled) → the K routed experts' SwiGLU FFNs and the shared expert → residual add.
//!
//! Why it exists: `ds4 --ssd-streaming` is judged by bringing each token's experts in time, so
//! the engine computes the part of the model that streams, on the file's real weights, and the
//! result (a digest of every hidden state) proves streamed ≡ resident. Attention and
//! hyper-connections are left out on purpose (the MoE part alone streams); every output says so.
//!
//! Shape: [`MoeWeights`] (metadata + resident tensors, validated before any token runs: a bad
//! tensor is an error naming it) → [`MoeStack::token`] computes one token with the host
//! reference kernels of [`crate::compute`], asking an [`ExpertProvider`] for each layer's
//! experts: [`ResidentExperts`] (everything loaded first) or [`StreamedExperts`] (a bounded
//! cache, misses read through the engine, hash-layer experts fetched at token start).
//!
//! On a GPU (`GpuMoe`, features `cuda` / `hip`: one generic stack over
//! `GpuDevice`) the same stack runs on the kernels of
//! `kernels/ds4_kernels.cu` (NVRTC on CUDA, hipRTC on HIP), with the experts in a device slab of
//! cache slots; [`c_pattern`] re-implements the C engine's streaming pattern there for same-run
//! comparisons. Limits: tokens are independent (no attention, no KV cache); HIP has run on an
//! NVIDIA GPU through tests/hip_shim only, never on an AMD GPU.

pub mod c_pattern;
mod error;
mod experts;
#[cfg(any(feature = "cuda", feature = "hip"))]
mod gpu;
mod load_error;
mod popularity;
pub(crate) mod slots;
mod stack;
mod weights;

pub use error::DecodeError;
pub use experts::{
    ExpertData, ExpertProvider, FetchStats, RamTierStats, ResidentExperts, StreamedExperts,
};
#[cfg(any(feature = "cuda", feature = "hip"))]
pub use gpu::{AllocStep, GpuMoe};
pub use load_error::LoadError;
pub use popularity::{checked_key, most_used, parse_popularity};
pub use stack::{digest_hex, MoeStack, TokenTrace};
pub use weights::{MoeParams, MoeWeights};
