//! The one cursor the parser reads through: over a byte slice, or over a file with bounded
//! buffered reads.
//!
//! Both know the total size up front (the slice length, the file's metadata) and refuse a read
//! that would cross it with [`GgufError::Truncated`] *before* touching the bytes, so the parser's
//! "does the rest of the file hold this?" checks and the read itself agree. The file cursor reads
//! sequentially through a fixed-size `BufReader`; it never seeks into or maps the data section.
//!
//! On Linux the header's file is advised `POSIX_FADV_RANDOM` (readahead off) and read in 1 MiB
//! pieces: with readahead on, walking the ~4 MB header of a Flash file read ~10 MB of tensor
//! data behind it into the page cache, with readahead marks in it, and the engine's buffered
//! reads of those pages carried the readahead on chunk after chunk: a cold `ds4 cat` of
//! `token_embd.weight` (the first tensor) went through the page cache at 0.43 GB/s instead of
//! unbuffered at ~1.1 (ds4-io's unix handle, "readahead off", tells the rest).

use super::GgufError;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::PathBuf;

/// A forward-only byte cursor with a known total size. (Not `ds4_io::Source`, which opens
/// positional-read handles for the data path: this one only walks a header, front to back.)
pub(crate) trait HeaderSource {
    /// Bytes consumed so far (the absolute offset of the next byte).
    fn pos(&self) -> u64;
    /// Total size of the input.
    fn size(&self) -> u64;
    /// Fills `buf` from the current position. Fails without reading if the input is too short.
    fn read_exact(&mut self, buf: &mut [u8], what: &'static str) -> Result<(), GgufError>;

    /// Bytes left after the current position.
    fn remaining(&self) -> u64 {
        self.size().saturating_sub(self.pos())
    }

    /// The `Truncated` error for a read of `need` bytes here, if it would cross the end.
    fn check_room(&self, need: u64, what: &'static str) -> Result<(), GgufError> {
        if need > self.remaining() {
            return Err(GgufError::Truncated {
                what,
                at: self.pos(),
                need,
                file_size: self.size(),
            });
        }
        Ok(())
    }
}

/// Cursor over bytes in memory.
pub(crate) struct SliceHeaderSource<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> SliceHeaderSource<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }
}

impl HeaderSource for SliceHeaderSource<'_> {
    fn pos(&self) -> u64 {
        self.pos as u64
    }
    fn size(&self) -> u64 {
        self.bytes.len() as u64
    }
    fn read_exact(&mut self, buf: &mut [u8], what: &'static str) -> Result<(), GgufError> {
        self.check_room(buf.len() as u64, what)?;
        // check_room guarantees pos + len <= bytes.len(), so neither can fail; `get` keeps it
        // panic-free regardless.
        let end = self.pos + buf.len();
        let src = self.bytes.get(self.pos..end).ok_or(GgufError::Truncated {
            what,
            at: self.pos as u64,
            need: buf.len() as u64,
            file_size: self.bytes.len() as u64,
        })?;
        buf.copy_from_slice(src);
        self.pos = end;
        Ok(())
    }
}

/// Bytes per read of the header (the buffer of [`FileHeaderSource`]).
const HEADER_READ: usize = 1 << 20;

/// Cursor over a file: sequential reads through a [`HEADER_READ`]-byte buffer, readahead off
/// where the OS allows, size taken from the file's metadata when it was opened.
pub(crate) struct FileHeaderSource {
    reader: BufReader<File>,
    path: PathBuf,
    pos: u64,
    size: u64,
}

impl FileHeaderSource {
    pub(crate) fn open(path: PathBuf) -> Result<Self, GgufError> {
        let file = match open_read(&path) {
            Ok(f) => f,
            // Windows refuses to open a directory as a file (ERROR_ACCESS_DENIED, "Access is
            // denied"), which would blame permissions; say what the path is instead. (On Unix
            // the open succeeds and the `is_file` check below catches it.)
            Err(_) if std::fs::metadata(&path).is_ok_and(|m| m.is_dir()) => {
                return Err(GgufError::NotAFile { path });
            }
            Err(source) => return Err(GgufError::Open { path, source }),
        };
        let meta = file.metadata().map_err(|source| GgufError::Open {
            path: path.clone(),
            source,
        })?;
        // A FIFO or device would report size 0 or block forever; a directory fails on read.
        // Only regular files have a size we can bound every read by.
        if !meta.is_file() {
            return Err(GgufError::NotAFile { path });
        }
        no_readahead(&file);
        Ok(Self {
            reader: BufReader::with_capacity(HEADER_READ, file),
            path,
            pos: 0,
            size: meta.len(),
        })
    }
}

/// Opens `path` read-only without blocking on a FIFO: a plain `open(2)` of a FIFO waits for a
/// writer forever, before the regular-file check above could refuse it. O_NONBLOCK makes that
/// open return at once; on a regular file it changes nothing (reads of regular files never
/// return EAGAIN).
#[cfg(unix)]
fn open_read(path: &std::path::Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

/// Turns readahead off for this open file (module docs: why). Best effort: an fd that refuses
/// the advice is read with readahead, as before.
#[cfg(target_os = "linux")]
fn no_readahead(file: &File) {
    use std::os::unix::io::AsRawFd;
    // SAFETY: posix_fadvise only reads its integer arguments; the fd is open for this call.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM);
    }
}

#[cfg(not(target_os = "linux"))]
fn no_readahead(_file: &File) {}

/// Elsewhere a named pipe cannot sit at a file path and block an open; a plain open is fine.
#[cfg(not(unix))]
fn open_read(path: &std::path::Path) -> std::io::Result<File> {
    File::open(path)
}

impl HeaderSource for FileHeaderSource {
    fn pos(&self) -> u64 {
        self.pos
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn read_exact(&mut self, buf: &mut [u8], what: &'static str) -> Result<(), GgufError> {
        self.check_room(buf.len() as u64, what)?;
        // A file that shrank after we took its size ends here with UnexpectedEof: reported as an
        // IO error with the offset, which is what it is.
        self.reader
            .read_exact(buf)
            .map_err(|source| GgufError::Io {
                path: self.path.clone(),
                offset: self.pos,
                len: buf.len() as u64,
                source,
            })?;
        self.pos += buf.len() as u64;
        Ok(())
    }
}
