//! The error that every platform reader attaches to a failed read: which file, where, how much.
//!
//! Why a type and not a string: [`ReadAt::read_exact_at`](crate::ReadAt::read_exact_at) returns
//! `io::Result` (the trait must stay object-safe and cheap), but the engine above wants the
//! path, offset and length as fields to build its own typed error. A [`ReadError`] travels
//! inside the `io::Error` (as its `get_ref()` payload) with the original `ErrorKind` preserved,
//! so `UnexpectedEof` is still `UnexpectedEof`; [`ReadError::find`] gets it back.

use std::io;
use std::path::PathBuf;

/// A positional read that failed: the file, the requested range and the cause.
#[derive(Debug, thiserror::Error)]
#[error("reading {len} bytes at offset {offset} of {}", path.display())]
pub struct ReadError {
    /// The file that was read.
    pub path: PathBuf,
    /// Start of the requested range (absolute file offset).
    pub offset: u64,
    /// Length of the requested range in bytes.
    pub len: u64,
    /// What went wrong (the OS error, or `UnexpectedEof` when the file ended first).
    #[source]
    pub source: io::Error,
}

impl ReadError {
    /// Wraps `source` into an `io::Error` of the same kind that carries the range.
    pub fn wrap(path: &std::path::Path, offset: u64, len: u64, source: io::Error) -> io::Error {
        let kind = source.kind();
        io::Error::new(
            kind,
            ReadError {
                path: path.to_path_buf(),
                offset,
                len,
                source,
            },
        )
    }

    /// The [`ReadError`] carried by `e`, if any.
    pub fn find(e: &io::Error) -> Option<&ReadError> {
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<ReadError>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_keeps_kind_and_fields() {
        let e = ReadError::wrap(
            std::path::Path::new("/x/model.gguf"),
            5 << 32,
            4096,
            io::ErrorKind::UnexpectedEof.into(),
        );
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let r = ReadError::find(&e).expect("payload");
        assert_eq!((r.offset, r.len), (5 << 32, 4096));
        let msg = e.to_string();
        assert!(
            msg.contains("/x/model.gguf") && msg.contains("21474836480"),
            "{msg}"
        );
    }
}
