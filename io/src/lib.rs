//! `ds4-io`: positional file reads for the ds4-stream engine.
//!
//! Why a crate of its own: every OS-specific `unsafe` of the data path lives here, behind one
//! small trait ([`ReadAt`]: read exactly N bytes at offset O into a caller-owned buffer), so the
//! engine above is portable and testable with fault-injecting implementations.
//!
//! - [`Source`] opens per-worker handles ([`ReadAt`]) on one file: each IO worker owns its handle
//!   for its whole life (Linux: its own `open()` fd; Windows: its own `ReOpenFile` handle).
//! - [`pool::ReaderPool`] runs N such workers fed by a bounded queue (backpressure); every job
//!   is run or cancelled exactly once, shutdown included.
//! - Platform readers (private `sys` module): Linux/macOS in `sys/unix.rs` (own fd, `pread`,
//!   O_DIRECT / F_NOCACHE for aligned requests), Windows in `sys/windows.rs` (`ReOpenFile`,
//!   overlapped `ReadFile`, FILE_FLAG_NO_BUFFERING). Failed reads carry a [`ReadError`] (path,
//!   offset, length); [`HandleStats`] says which path the bytes took.
//! - Test support that other crates use too: [`pattern`] (self-describing data, sparse files
//!   past 4 GiB) and [`fault`] (fault-injecting and throttled sources).
//! - No mmap anywhere in this crate.

pub mod active;
pub mod align;
pub mod error;
pub mod fault;
pub mod file;
pub mod pattern;
pub mod pool;
mod sys;

pub use active::ActiveLimit;
pub use align::AlignedBuf;
pub use error::ReadError;
pub use file::{
    cached_fraction, mark_sparse, DirectAlignment, FileSource, HandleStats, OpenConfig, ReadAt,
    ReadCounters, Source,
};
pub use pool::{Job, PoolConfig, ReaderPool, WorkerOpenError};
