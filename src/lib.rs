//! ds4-stream: out-of-core weight streaming for DeepSeek V4 Flash (DS4).
//!
//! The data path: request (tensor range / expert) -> planner (aligned chunks) -> reader pool
//! (`ds4_io`, one handle per worker) -> pinned staging ring -> async host-to-device copy ->
//! completion. No mmap in the data path. See docs/ARCHITECTURE.md.

pub mod bench;
pub mod cli;
pub mod device;
pub mod engine;
pub mod generate;
pub mod gguf;
pub mod model;
pub mod stress;

pub use ds4_io as io;
