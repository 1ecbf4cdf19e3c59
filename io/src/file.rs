//! The positional-read trait and the file source that opens per-worker handles.
//!
//! Contract of [`ReadAt::read_exact_at`]: fill the whole buffer from `offset` or fail; short
//! reads are continued, EINTR retried, and 0 bytes before the buffer is full is
//! `UnexpectedEof`. Implementations decide per call whether the unbuffered path can be used
//! (offset, length and buffer address aligned) and fall back to buffered reads otherwise.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One handle on one file, owned by one worker. Not shared between threads.
pub trait ReadAt: Send {
    /// Reads exactly `buf.len()` bytes starting at `offset`.
    fn read_exact_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()>;

    /// Alignment (bytes) that offset, length and buffer address need for the unbuffered path;
    /// `None` when this handle only does buffered reads. One number for all three: the larger
    /// of [`DirectAlignment::offset`] and [`DirectAlignment::memory`].
    fn direct_alignment(&self) -> Option<usize> {
        None
    }

    /// The unbuffered path's two alignments, kept apart: file offset and length
    /// ([`DirectAlignment::offset`]: the logical sector size) and buffer address
    /// ([`DirectAlignment::memory`]). `direct_alignment()` is always
    /// `direct_alignments().map(DirectAlignment::max)`. Default: both equal to
    /// [`Self::direct_alignment`] (what a wrapper that only forwards that reports).
    fn direct_alignments(&self) -> Option<DirectAlignment> {
        self.direct_alignment().map(|a| DirectAlignment {
            offset: a,
            memory: a,
        })
    }

    /// Hint that the range just read will not be needed again (cold mode: `posix_fadvise
    /// DONTNEED` on Linux). Default: nothing.
    fn drop_cache(&mut self, _offset: u64, _len: u64) {}

    /// Which paths this handle's reads took so far (for engine stats and tests).
    fn stats(&self) -> HandleStats {
        HandleStats::default()
    }

    /// The counters of [`Self::stats`] alone (cheap: no allocation), which the engine samples
    /// around every read to tell which path that read took.
    fn counters(&self) -> ReadCounters {
        self.stats().counters
    }
}

/// Inside an `impl ReadAt for Wrapper`: forwards everything but `read_exact_at` to the
/// wrapper's `inner: Box<dyn ReadAt>` field (`direct_alignment`, `direct_alignments`,
/// `drop_cache`, `stats`, `counters`), so a wrapper that only changes reads (fault injection,
/// throttling, logging) reports its inner handle's alignment and counters exactly, and the next
/// method added to [`ReadAt`] is forwarded in one place.
#[macro_export]
macro_rules! forward_read_at {
    ($inner:ident) => {
        fn direct_alignment(&self) -> Option<usize> {
            self.$inner.direct_alignment()
        }
        fn direct_alignments(&self) -> Option<$crate::DirectAlignment> {
            self.$inner.direct_alignments()
        }
        fn drop_cache(&mut self, offset: u64, len: u64) {
            self.$inner.drop_cache(offset, len)
        }
        fn stats(&self) -> $crate::HandleStats {
            self.$inner.stats()
        }
        fn counters(&self) -> $crate::ReadCounters {
            self.$inner.counters()
        }
    };
}

/// The unbuffered path's alignment requirements (powers of two, bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectAlignment {
    /// File offset and length multiple (Linux: `stx_dio_offset_align` or the logical block
    /// size; Windows: the volume's logical sector size).
    pub offset: usize,
    /// Buffer address multiple (Linux: `stx_dio_mem_align`; Windows: the physical sector size,
    /// at most the page size, 4096).
    pub memory: usize,
}

impl DirectAlignment {
    /// The one alignment that satisfies both (what [`ReadAt::direct_alignment`] reports).
    pub fn max(self) -> usize {
        self.offset.max(self.memory)
    }
}

/// Per-handle byte and decision counters (see [`HandleStats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadCounters {
    /// Bytes read through the unbuffered path (O_DIRECT / FILE_FLAG_NO_BUFFERING / F_NOCACHE).
    pub direct_bytes: u64,
    /// Bytes read through the buffered (page cache) path.
    pub buffered_bytes: u64,
    /// Read system calls issued on the unbuffered path.
    pub direct_calls: u64,
    /// Read system calls issued on the buffered path.
    pub buffered_calls: u64,
    /// Reads that could have gone unbuffered but were served from the page cache because the
    /// cache probe found their bytes there ([`OpenConfig::use_cache`]).
    pub cache_hits: u64,
    /// Reads the cache probe sent to the unbuffered path (bytes not cached).
    pub cache_misses: u64,
    /// Cache probes that could not answer for one read (an error other than "not cached"):
    /// that read went the unbuffered way; the probe stays on for the next.
    pub probe_errors: u64,
}

/// Which paths a handle's reads took. Counted per handle (no atomics: a handle is owned by one
/// worker), read back through [`ReadAt::stats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HandleStats {
    /// Which path each read took (the same counters [`ReadAt::counters`] samples).
    pub counters: ReadCounters,
    /// How this handle finds out whether a range is in the page cache: "cachestat",
    /// "rwf_nowait", or "none" (cold reads asked for, no unbuffered path, or no probe works
    /// here: see `cache_probe_note`).
    pub cache_probe: &'static str,
    /// Why the better probes were not used, if they were not.
    pub cache_probe_note: Option<String>,
    /// True while the unbuffered path may still be used for aligned requests.
    pub direct_active: bool,
    /// Why the unbuffered path was turned off for good (the OS refused it at open or at a
    /// read, or the filesystem reports no direct-IO support), if it was.
    pub direct_fallback: Option<String>,
    /// Read calls that the OS refused for lack of memory or quota and that were retried with
    /// half the length (Windows: `ERROR_NOT_ENOUGH_MEMORY`, `ERROR_NO_SYSTEM_RESOURCES`,
    /// `ERROR_WORKING_SET_QUOTA`, `ERROR_NOT_ENOUGH_QUOTA`, `ERROR_INVALID_USER_BUFFER`).
    /// Always 0 on Unix.
    pub call_retries: u64,
}

/// A file that can hand out independent per-worker handles.
pub trait Source: Send + Sync {
    /// The file's path, for error messages.
    fn path(&self) -> &Path;
    /// The file's length in bytes (64-bit everywhere).
    fn len(&self) -> u64;
    /// True when the file is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Opens a new handle for one worker.
    fn open_handle(&self) -> io::Result<Box<dyn ReadAt>>;
}

/// How handles are opened.
#[derive(Clone, Debug)]
pub struct OpenConfig {
    /// Use the unbuffered path (O_DIRECT / FILE_FLAG_NO_BUFFERING) for aligned requests.
    pub direct: bool,
    /// Advise the OS to drop each range from the page cache after it is read.
    pub drop_cache: bool,
    /// With `direct`: read a range from the page cache when its bytes are already there, and
    /// unbuffered only when they are not (Linux: `cachestat`, else a one-page `RWF_NOWAIT`
    /// probe). `false` = always unbuffered where aligned (cold benchmarks,
    /// `--ssd-streaming-cold`). No effect without `direct`.
    pub use_cache: bool,
}

impl Default for OpenConfig {
    fn default() -> Self {
        Self {
            direct: true,
            drop_cache: false,
            use_cache: true,
        }
    }
}

/// A real file on disk. Each [`Source::open_handle`] call opens the file again (Linux: a new
/// fd; Windows: `ReOpenFile` of the handle opened here), so workers never share a handle.
pub struct FileSource {
    pub(crate) path: PathBuf,
    pub(crate) len: u64,
    pub(crate) config: OpenConfig,
    pub(crate) inner: crate::sys::SharedFile,
}

impl FileSource {
    /// Opens `path` for reading; errors name the path.
    pub fn open(path: impl AsRef<Path>, config: OpenConfig) -> io::Result<Arc<Self>> {
        let path = path.as_ref().to_path_buf();
        let (inner, len) = crate::sys::SharedFile::open(&path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display()))
        })?;
        Ok(Arc::new(Self {
            path,
            len,
            config,
            inner,
        }))
    }

    pub fn config(&self) -> &OpenConfig {
        &self.config
    }
}

impl Source for FileSource {
    fn path(&self) -> &Path {
        &self.path
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn open_handle(&self) -> io::Result<Box<dyn ReadAt>> {
        self.inner.open_handle(&self.path, &self.config)
    }
}

/// Fraction of `[offset, offset + len)` of `file` that is in the page cache, where the OS can
/// say cheaply (Linux 6.5+: one `cachestat` call, no mapping); `None` elsewhere or on error.
/// For choices made before reading (`ds4 cat` sizes its reader pool by it).
pub fn cached_fraction(file: &std::fs::File, offset: u64, len: u64) -> Option<f64> {
    #[cfg(unix)]
    return crate::sys::cached_fraction(file, offset, len);
    #[cfg(not(unix))]
    {
        let _ = (file, offset, len);
        None
    }
}

/// Marks a file that is about to be written with holes as sparse, so that the ranges never
/// written cost no disk. Unix filesystems leave holes without being asked (this does nothing
/// there); NTFS keeps a file dense unless it is marked: extending it with `set_len`, or writing
/// past its end, allocates every byte in between and zero-fills it (for a flash layout: up to
/// 81 GiB of zeros written). Call it right after creating the file, before writing. Best
/// effort: where the filesystem has no sparse files (FAT32, exFAT) the zeros are written.
pub fn mark_sparse(file: &std::fs::File) {
    #[cfg(windows)]
    crate::sys::mark_sparse(file);
    #[cfg(not(windows))]
    let _ = file;
}
