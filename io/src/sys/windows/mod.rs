//! Windows per-worker handles: the file is opened once with `CreateFileW`; each worker then calls
//! `ReOpenFile` on that handle once, for its whole life, with `FILE_FLAG_OVERLAPPED`, and reads
//! with `ReadFile` + an `OVERLAPPED` carrying the 64-bit offset, waiting on one manual-reset event
//! of its own, at most [`overlapped::IO_TIMEOUT`] before the read is cancelled. No shared file
//! pointer, no per-call open (the C engine's `pread` shim opened a handle per call), no 32-bit
//! offsets.
//!
//! Unbuffered reads: when asked for ([`OpenConfig::direct`]), a worker opens a second handle
//! lazily, `ReOpenFile(FILE_FLAG_OVERLAPPED | FILE_FLAG_NO_BUFFERING)`, and uses it for requests
//! whose offset and length are multiples of the volume's logical sector size and whose buffer
//! address is a multiple of the physical sector size, capped at the page size ([`alignments`],
//! from `GetFileInformationByHandleEx(FileStorageInfo)`, else 4096 for both); large unaligned
//! requests read their aligned middle through it and head/tail buffered ([`super::plan`]). If
//! the unbuffered handle cannot be opened (any error) or Windows refuses a read on it
//! (`ERROR_INVALID_PARAMETER`, `ERROR_NOT_SUPPORTED`) the worker falls back to buffered reads
//! for good and records why. Debug builds assert the alignment before every unbuffered
//! `ReadFile` (Wine, where CI runs the Windows tests, does not enforce it).
//!
//! Calls are at most 64 MiB and halve on memory or quota errors ([`overlapped`]). Paths: see
//! [`path`]. Limits: no per-range page-cache eviction exists on Windows, so `drop_cache` does
//! nothing (the unbuffered handle is the cold mode), and there is no page-cache probe
//! (`cache_probe = "none"`: with `direct`, aligned reads go unbuffered even when the file is
//! cached; docs/WINDOWS.md, "Hot files on Windows"). A read waits for its own completion before
//! returning: one read in flight per worker; the pool's workers provide the queue depth.

mod overlapped;
mod path;

use super::{exact_loop, plan, Plan};
use crate::error::ReadError;
use crate::file::{DirectAlignment, HandleStats, OpenConfig, ReadAt};
use overlapped::{debug_assert_aligned, read_overlapped, CallSize, IO_TIMEOUT};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;
use windows::Win32::Foundation::{
    CloseHandle, ERROR_INVALID_PARAMETER, ERROR_NOT_SUPPORTED, GENERIC_READ, HANDLE, WIN32_ERROR,
};
use windows::Win32::Storage::FileSystem::{
    CreateFileW, FileStorageInfo, GetFileInformationByHandleEx, GetFileSizeEx, GetFileType,
    ReOpenFile, FILE_ATTRIBUTE_NORMAL, FILE_FLAGS_AND_ATTRIBUTES, FILE_FLAG_NO_BUFFERING,
    FILE_FLAG_OVERLAPPED, FILE_SHARE_DELETE, FILE_SHARE_MODE, FILE_SHARE_READ, FILE_SHARE_WRITE,
    FILE_STORAGE_INFO, FILE_TYPE_DISK,
};
use windows::Win32::System::Threading::CreateEventW;

/// Others may read, write, rename or delete the file while we read it (we must not lock a model
/// file another tool has open).
const SHARE: FILE_SHARE_MODE =
    FILE_SHARE_MODE(FILE_SHARE_READ.0 | FILE_SHARE_WRITE.0 | FILE_SHARE_DELETE.0);

/// The largest buffer-address alignment asked for: the page size. `FILE_FLAG_NO_BUFFERING`'s
/// docs ask for physical-sector-aligned buffers, "depending on the disk, this requirement may
/// not be enforced", and page-aligned memory (VirtualAlloc) is what they suggest; the engine's
/// staging slots are 4096-aligned.
const PAGE: usize = 4096;

/// The buffered path's smallest call when memory runs short (no sector rule applies there).
const BUFFERED_FLOOR: usize = 4096;

/// A kernel handle closed on drop.
struct Owned(HANDLE);

// SAFETY: Windows kernel handles are process-wide values usable from any thread; the file and
// event objects they name are internally synchronized.
unsafe impl Send for Owned {}
// SAFETY: as above; `&Owned` only exposes the handle value.
unsafe impl Sync for Owned {}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: the handle was returned by a successful Create*/ReOpenFile call and is closed
        // exactly once, here. Nothing useful can be done if closing fails.
        let _ = unsafe { CloseHandle(self.0) };
    }
}

/// Turns a Windows error into an `io::Error` with the raw Win32 code (so `ErrorKind` mapping
/// and `raw_os_error` work).
fn to_io(e: windows::core::Error) -> io::Error {
    match WIN32_ERROR::from_error(&e) {
        Some(w) => io::Error::from_raw_os_error(w.0 as i32),
        None => io::Error::other(e),
    }
}

/// The error for a path that is not a regular file (the same kind and words as on Unix).
fn not_a_file() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "not a regular file")
}

fn win32(e: &windows::core::Error) -> Option<WIN32_ERROR> {
    WIN32_ERROR::from_error(e)
}

/// A fresh unnamed manual-reset event (ReadFile resets it when an IO starts; the IO's
/// completion sets it).
fn new_event() -> io::Result<Owned> {
    // SAFETY: no security attributes, no name: a fresh private event.
    let h = unsafe { CreateEventW(None, true, false, None) }.map_err(to_io)?;
    Ok(Owned(h))
}

/// The handle opened with `CreateFileW`; workers `ReOpenFile` it.
pub(crate) struct SharedFile {
    handle: Owned,
}

impl SharedFile {
    pub(crate) fn open(path: &Path) -> io::Result<(Self, u64)> {
        let name = path::create_name(path)?;
        // SAFETY: `name` is a NUL-terminated wide string that outlives the call; no security
        // attributes or template handle are passed.
        let h = unsafe {
            CreateFileW(
                &name,
                GENERIC_READ.0,
                SHARE,
                None,
                windows::Win32::Storage::FileSystem::OPEN_EXISTING,
                FILE_ATTRIBUTE_NORMAL,
                None,
            )
        }
        .map_err(|e| {
            // Without FILE_FLAG_BACKUP_SEMANTICS a directory cannot be opened: Windows answers
            // ERROR_ACCESS_DENIED, which would blame permissions. Say what the path is.
            if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
                not_a_file()
            } else {
                to_io(e)
            }
        })?;
        let handle = Owned(h);
        // SAFETY: `handle` is an open file handle.
        if unsafe { GetFileType(handle.0) } != FILE_TYPE_DISK {
            return Err(not_a_file());
        }
        let mut size = 0i64;
        // SAFETY: `size` is a writable i64 for the duration of the call.
        unsafe { GetFileSizeEx(handle.0, &mut size) }.map_err(to_io)?;
        let len = u64::try_from(size)
            .map_err(|_| io::Error::other(format!("file size {size} is negative")))?;
        Ok((SharedFile { handle }, len))
    }

    pub(crate) fn open_handle(&self, path: &Path, cfg: &OpenConfig) -> io::Result<Box<dyn ReadAt>> {
        let file = self.reopen(FILE_FLAG_OVERLAPPED)?;
        let event = new_event()?;
        let direct = if cfg.direct {
            Direct::Ready {
                align: alignments(storage_info(&file)),
                handle: None,
            }
        } else {
            Direct::Off
        };
        Ok(Box::new(WinHandle {
            path: path.to_path_buf(),
            file,
            event,
            direct,
            timeout: IO_TIMEOUT,
            stats: HandleStats {
                cache_probe: "none",
                cache_probe_note: (cfg.direct && cfg.use_cache).then(|| {
                    "no page-cache probe on Windows yet: aligned reads go unbuffered".to_string()
                }),
                ..HandleStats::default()
            },
        }))
    }

    fn reopen(&self, flags: FILE_FLAGS_AND_ATTRIBUTES) -> io::Result<Owned> {
        // SAFETY: `self.handle` is open for as long as `self` lives.
        let h = unsafe { ReOpenFile(self.handle.0, GENERIC_READ.0, SHARE, flags) };
        h.map(Owned).map_err(to_io)
    }
}

/// `(LogicalBytesPerSector, PhysicalBytesPerSectorForPerformance)` of the file's volume, when
/// Windows answers `FileStorageInfo` (Windows 8+; some filesystems do not answer).
fn storage_info(file: &Owned) -> Option<(u32, u32)> {
    let mut info = FILE_STORAGE_INFO::default();
    // SAFETY: `info` is a writable FILE_STORAGE_INFO and the size passed is its size.
    let r = unsafe {
        GetFileInformationByHandleEx(
            file.0,
            FileStorageInfo,
            (&mut info as *mut FILE_STORAGE_INFO).cast(),
            std::mem::size_of::<FILE_STORAGE_INFO>() as u32,
        )
    };
    r.ok().map(|()| {
        (
            info.LogicalBytesPerSector,
            info.PhysicalBytesPerSectorForPerformance,
        )
    })
}

/// The two alignments `FILE_FLAG_NO_BUFFERING` needs, from the volume's sector sizes: file
/// offset and length, multiples of the logical sector size ("file access sizes, including the
/// optional file offset in the OVERLAPPED structure, … must be an integer multiple of the volume
/// sector size"); buffer address, the physical sector size (the larger of the two sizes) but at
/// most [`PAGE`]. A volume that reports a physical size above 4096 (some RAID and cloud
/// volumes report 64 KiB) thus keeps the direct path for 4096-aligned buffers. Unknown or
/// implausible answers: 4096 for both (a multiple of every common sector size).
fn alignments(info: Option<(u32, u32)>) -> DirectAlignment {
    let sane = |x: u32| x.is_power_of_two() && (512..=1 << 20).contains(&x);
    match info {
        Some((logical, physical)) if sane(logical) => {
            let physical = if sane(physical) {
                physical.max(logical)
            } else {
                logical
            };
            DirectAlignment {
                offset: logical as usize,
                memory: (physical as usize).min(PAGE),
            }
        }
        _ => DirectAlignment {
            offset: 4096,
            memory: 4096,
        },
    }
}

enum Direct {
    Off,
    Ready {
        align: DirectAlignment,
        handle: Option<Owned>,
    },
    Disabled,
}

/// One worker's handle. The unbuffered handle is reopened from `file` (not from the shared
/// `CreateFileW` handle): a worker's handle may outlive the `FileSource` that opened it, and its
/// own handle is the one thing guaranteed to be open.
struct WinHandle {
    path: PathBuf,
    file: Owned,
    /// One event for all of this worker's reads (buffered or not): it has one read in flight
    /// at a time.
    event: Owned,
    direct: Direct,
    /// How long one ReadFile may stay pending before it is cancelled ([`IO_TIMEOUT`]).
    timeout: Duration,
    stats: HandleStats,
}

impl WinHandle {
    fn disable_direct(&mut self, reason: String) {
        self.direct = Direct::Disabled; // closes the unbuffered handle
        self.stats.direct_fallback = Some(reason);
    }

    /// The unbuffered handle, reopened on first use; `None` when the unbuffered path is off.
    /// Any failure to open it turns the unbuffered path off for this handle: the buffered
    /// handle can serve every read.
    fn direct_handle(&mut self) -> Option<HANDLE> {
        let Direct::Ready { handle, .. } = &mut self.direct else {
            return None;
        };
        if let Some(h) = handle {
            return Some(h.0);
        }
        // SAFETY: `self.file` is open for the life of `self`.
        let r = unsafe {
            ReOpenFile(
                self.file.0,
                GENERIC_READ.0,
                SHARE,
                FILE_FLAG_OVERLAPPED | FILE_FLAG_NO_BUFFERING,
            )
        };
        match r.map_err(to_io) {
            Ok(h) => {
                *handle = Some(Owned(h));
                Some(h)
            }
            Err(e) => {
                self.disable_direct(format!(
                    "ReOpenFile with FILE_FLAG_NO_BUFFERING failed: {e}"
                ));
                None
            }
        }
    }

    fn read_inner(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if !super::check_span(offset, buf.len())? {
            return Ok(());
        }
        let p = match self.direct {
            Direct::Ready { align, .. } => plan(
                offset,
                buf.len(),
                buf.as_ptr() as usize,
                align.offset,
                align.memory,
            ),
            Direct::Off | Direct::Disabled => Plan::Buffered,
        };
        match p {
            Plan::Buffered => self.read_buffered(buf, offset),
            Plan::Direct => self.read_direct(buf, offset),
            Plan::Split { head, tail } => {
                let (h, rest) = buf.split_at_mut(head);
                let (m, t) = rest.split_at_mut(tail - head);
                self.read_buffered(h, offset)?;
                self.read_direct(m, offset + head as u64)?;
                self.read_buffered(t, offset + tail as u64)
            }
        }
    }

    fn read_buffered(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let (file, event, timeout) = (self.file.0, self.event.0, self.timeout);
        let mut size = CallSize::new(BUFFERED_FLOOR);
        let retries = &mut self.stats.call_retries;
        let (done, err) = exact_loop(
            buf,
            offset,
            None,
            &mut self.stats.counters.buffered_calls,
            |b, o| {
                size.read(b, o, retries, |b, o| {
                    read_overlapped(file, event, b, o, timeout)
                })
            },
        );
        self.stats.counters.buffered_bytes += done as u64;
        err.map_or(Ok(()), Err)
    }

    fn read_direct(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let Some(h) = self.direct_handle() else {
            return self.read_buffered(buf, offset);
        };
        let Direct::Ready { align, .. } = self.direct else {
            return self.read_buffered(buf, offset);
        };
        let (event, timeout) = (self.event.0, self.timeout);
        let mut size = CallSize::new(align.offset);
        let retries = &mut self.stats.call_retries;
        let (done, err) = exact_loop(
            buf,
            offset,
            Some((align.offset, align.memory)),
            &mut self.stats.counters.direct_calls,
            |b, o| {
                size.read(b, o, retries, |b, o| {
                    debug_assert_aligned(b, o, align.offset, align.memory);
                    read_overlapped(h, event, b, o, timeout)
                })
            },
        );
        self.stats.counters.direct_bytes += done as u64;
        let rest_off = offset + done as u64;
        match err {
            None if done == buf.len() => Ok(()),
            None => self.read_buffered(&mut buf[done..], rest_off),
            Some(e) if refuses_direct(&e) => {
                self.disable_direct(format!(
                    "unbuffered read of {} bytes at offset {rest_off} refused: {e}",
                    buf.len() - done
                ));
                self.read_buffered(&mut buf[done..], rest_off)
            }
            Some(e) => Err(e),
        }
    }
}

impl ReadAt for WinHandle {
    fn read_exact_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let len = buf.len() as u64;
        self.read_inner(buf, offset)
            .map_err(|e| ReadError::wrap(&self.path, offset, len, e))
    }

    fn direct_alignment(&self) -> Option<usize> {
        self.direct_alignments().map(DirectAlignment::max)
    }

    fn direct_alignments(&self) -> Option<DirectAlignment> {
        match self.direct {
            Direct::Ready { align, .. } => Some(align),
            Direct::Off | Direct::Disabled => None,
        }
    }

    fn stats(&self) -> HandleStats {
        let mut s = self.stats.clone();
        s.direct_active = matches!(self.direct, Direct::Ready { .. });
        s
    }
}

/// True for the errors with which Windows refuses unbuffered IO on a file or a request.
fn refuses_direct(e: &io::Error) -> bool {
    e.raw_os_error()
        .is_some_and(|c| c == ERROR_INVALID_PARAMETER.0 as i32 || c == ERROR_NOT_SUPPORTED.0 as i32)
}

/// Marks a file we are about to write as sparse, so that `set_len` past regions leaves holes
/// (NTFS otherwise writes the zeros). Best effort: a filesystem without sparse files just
/// writes zeros.
pub(crate) fn mark_sparse(f: &std::fs::File) {
    use std::os::windows::io::AsRawHandle;
    let mut returned = 0u32;
    // SAFETY: the handle is open (owned by `f`) for the call; FSCTL_SET_SPARSE with no input
    // buffer means "set sparse"; `returned` is a writable u32; the call is synchronous (no
    // OVERLAPPED: `f` was opened without FILE_FLAG_OVERLAPPED).
    unsafe {
        let _ = windows::Win32::System::IO::DeviceIoControl(
            HANDLE(f.as_raw_handle()),
            windows::Win32::System::Ioctl::FSCTL_SET_SPARSE,
            None,
            0,
            None,
            0,
            Some(&mut returned),
            None,
        );
    }
}

#[cfg(test)]
mod tests;
