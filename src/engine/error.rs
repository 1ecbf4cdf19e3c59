//! The engine's error type. Every error that concerns one range says which: file offset, length,
//! and the label (tensor / expert name) the caller attached, so a failed expert fetch reads like
//! "read of blk.3.ffn_gate_exps[17] (offset 4294967290, 4096 bytes) from model.gguf failed".
//! `Display` says only this level; the cause (EIO, a device error) is `source()`: print the
//! chain for the whole story.

use crate::device::DeviceError;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// Formats an optional label as " of NAME".
pub(crate) struct Label<'a>(pub &'a Option<Arc<str>>);

impl fmt::Display for Label<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(l) => write!(f, " of {l}"),
            None => Ok(()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("read{} (offset {offset}, {len} bytes) from {} failed", Label(.label), .path.display())]
    Read {
        path: PathBuf,
        offset: u64,
        len: u64,
        label: Option<Arc<str>>,
        #[source]
        source: io::Error,
    },
    #[error("copy to the device{} (file offset {offset}, {len} bytes) failed", Label(.label))]
    Device {
        offset: u64,
        len: u64,
        label: Option<Arc<str>>,
        #[source]
        source: DeviceError,
    },
    #[error("range{} (offset {offset}, {len} bytes) ends past the end of {} ({file_len} bytes)", Label(.label), .path.display())]
    OutOfFile {
        path: PathBuf,
        offset: u64,
        len: u64,
        file_len: u64,
        label: Option<Arc<str>>,
    },
    #[error("destination range{} (offset {dst_offset}, {len} bytes) is outside its {dst_len}-byte buffer", Label(.label))]
    OutOfBuffer {
        dst_offset: u64,
        len: u64,
        dst_len: u64,
        label: Option<Arc<str>>,
    },
    #[error("destination range{} (offset {dst_offset}, {len} bytes) overlaps a range that a request in flight is writing", Label(.label))]
    DestinationBusy {
        dst_offset: u64,
        len: u64,
        label: Option<Arc<str>>,
    },
    #[error("cannot allocate {bytes} bytes of host memory for a read")]
    OutOfMemory { bytes: u64 },
    #[error("cannot open {}", .path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A reader worker could not start (its own handle failed to open: too many open files,
    /// the file gone); the io error names the worker and the path.
    #[error("starting the reader workers")]
    Workers {
        #[source]
        source: io::Error,
    },
    #[error("allocating the staging ring ({slots} slots of {slot_bytes} bytes) failed")]
    Staging {
        slots: usize,
        slot_bytes: usize,
        #[source]
        source: DeviceError,
    },
    #[error("invalid engine configuration: {0}")]
    Config(String),
    #[error("cannot start engine thread")]
    Thread(#[source] io::Error),
    #[error("the engine shut down before the request{} (offset {offset}, {len} bytes) was read", Label(.label))]
    Shutdown {
        offset: u64,
        len: u64,
        label: Option<Arc<str>>,
    },
    #[error("a chunk{} (offset {offset}, {len} bytes) was lost: an engine thread stopped (panic?)", Label(.label))]
    Lost {
        offset: u64,
        len: u64,
        label: Option<Arc<str>>,
    },
    #[error("the ticket's result was already taken (polled after it returned Ready)")]
    AlreadyTaken,
}

impl EngineError {
    /// The caller's label of the range this error concerns, if any.
    pub fn label(&self) -> Option<&str> {
        match self {
            EngineError::Read { label, .. }
            | EngineError::Device { label, .. }
            | EngineError::OutOfFile { label, .. }
            | EngineError::OutOfBuffer { label, .. }
            | EngineError::DestinationBusy { label, .. }
            | EngineError::Shutdown { label, .. }
            | EngineError::Lost { label, .. } => label.as_deref(),
            _ => None,
        }
    }

    /// True for errors caused by the engine shutting down.
    pub fn is_shutdown(&self) -> bool {
        matches!(self, EngineError::Shutdown { .. })
    }
}
