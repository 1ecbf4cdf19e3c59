//! ds4-stream: out-of-core weight streaming for DeepSeek V4 Flash (DS4).
//!
//! The data path: request (tensor range / expert) -> planner (aligned chunks) -> reader pool
//! (`ds4_io`, one handle per worker) -> pinned staging ring -> async host-to-device copy ->
//! completion. No mmap in the data path. See docs/ARCHITECTURE.md.
//!
//! The engine library is [`gguf`], [`model`], [`device`], [`engine`], [`plan`] (the memory
//! planner) and [`generate`] (the deterministic DS4 file generator, for tests). With `default-features = false` that is all
//! there is, and it pulls in no command-line, progress-bar, JSON or async-runtime crate. The
//! default feature `tools` adds [`cli`] and [`stress`], the code of the `ds4` and `ds4-stress`
//! programs (`ds4-bench` lives in `benches/ds4-bench/`).

#[cfg(feature = "tools")]
pub mod cli;
pub mod compute;
pub mod decode;
pub mod device;
pub mod engine;
pub mod expert_cache;
pub mod expert_store;
pub mod generate;
pub mod gguf;
pub mod model;
pub mod plan;
#[cfg(feature = "tools")]
pub mod stress;
pub mod units;

pub use ds4_io as io;
