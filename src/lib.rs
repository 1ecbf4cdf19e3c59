//! ds4-stream: out-of-core weight streaming for DeepSeek V4 Flash (DS4).
//!
//! The data path: request (tensor range / expert) -> planner (aligned chunks) -> reader pool
//! (`ds4_io`, one handle per worker) -> pinned staging ring -> async host-to-device copy ->
//! completion. No mmap in the data path. See docs/ARCHITECTURE.md.
//!
//! The engine library is [`gguf`], [`model`], [`device`], [`engine`], [`plan`] (the memory
//! planner) and [`generate`] (the deterministic DS4 file generator, for tests). It pulls in no
//! command-line, progress-bar, JSON or async-runtime crate: the programs (`ds4`, `ds4-bench`,
//! `ds4-stress`) are the separate crate `ds4-tools` (`tools/`), which parses the library's
//! named values ([`choice`]) with clap.

pub mod choice;
pub mod compute;
pub mod decode;
pub mod device;
pub mod engine;
pub mod errors;
pub mod expert_cache;
pub mod expert_store;
pub mod generate;
pub mod gguf;
mod knobs;
pub mod model;
pub mod plan;
pub mod units;

pub use ds4_io as io;
