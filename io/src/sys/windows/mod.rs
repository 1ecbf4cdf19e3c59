//! Windows per-worker handles: the file is opened once with `CreateFileW`; each worker then calls
//! `ReOpenFile` on that handle once, for its whole life, with `FILE_FLAG_OVERLAPPED`, and reads
//! with `ReadFile` + an `OVERLAPPED` carrying the 64-bit offset, waiting on one manual-reset event
//! of its own (`GetOverlappedResult(wait = TRUE)`). No shared file pointer, no per-call open (the
//! C engine's `pread` shim opened a handle per call), no 32-bit offsets.
//!
//! Unbuffered reads: when asked for ([`OpenConfig::direct`]), a worker opens a second handle
//! lazily, `ReOpenFile(FILE_FLAG_OVERLAPPED | FILE_FLAG_NO_BUFFERING)`, and uses it for requests
//! whose offset, length and buffer address are multiples of the sector size (from
//! `GetFileInformationByHandleEx(FileStorageInfo)`, else 4096); large unaligned requests read
//! their aligned middle through it and head/tail buffered ([`super::plan`]). If Windows refuses
//! (`ERROR_INVALID_PARAMETER`, `ERROR_NOT_SUPPORTED` at open or read) the worker falls back to
//! buffered reads for good and records why.
//!
//! Limits: no per-range page-cache eviction exists on Windows, so `drop_cache` does nothing (the
//! unbuffered handle is the cold mode). Paths of `MAX_PATH` length or more are opened through
//! their absolute `\\?\` form, as std does, so a path the GGUF parser (std) opened opens here
//! too. A read waits for its own completion before returning: one read in flight per worker; the
//! pool's workers provide the queue depth.

use super::{exact_loop, plan, Plan};
use crate::error::ReadError;
use crate::file::{HandleStats, OpenConfig, ReadAt};
use std::io;
use std::path::{Path, PathBuf};
use windows::core::HSTRING;
use windows::Win32::Foundation::{
    CloseHandle, ERROR_HANDLE_EOF, ERROR_INVALID_PARAMETER, ERROR_IO_PENDING, ERROR_NOT_SUPPORTED,
    GENERIC_READ, HANDLE, WIN32_ERROR,
};
use windows::Win32::Storage::FileSystem::{
    CreateFileW, FileStorageInfo, GetFileInformationByHandleEx, GetFileSizeEx, GetFileType,
    ReOpenFile, ReadFile, FILE_ATTRIBUTE_NORMAL, FILE_FLAGS_AND_ATTRIBUTES, FILE_FLAG_NO_BUFFERING,
    FILE_FLAG_OVERLAPPED, FILE_SHARE_DELETE, FILE_SHARE_MODE, FILE_SHARE_READ, FILE_SHARE_WRITE,
    FILE_STORAGE_INFO, FILE_TYPE_DISK,
};
use windows::Win32::System::Threading::{CreateEventW, WaitForSingleObject, INFINITE};
use windows::Win32::System::IO::{GetOverlappedResult, OVERLAPPED};

/// Others may read, write, rename or delete the file while we read it (we must not lock a model
/// file another tool has open).
const SHARE: FILE_SHARE_MODE =
    FILE_SHARE_MODE(FILE_SHARE_READ.0 | FILE_SHARE_WRITE.0 | FILE_SHARE_DELETE.0);

/// `OVERLAPPED::Internal` while the IO is in flight (NTSTATUS STATUS_PENDING).
const STATUS_PENDING: usize = 0x103;

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
        unsafe {
            let _ = CloseHandle(self.0);
        }
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

/// Paths this long or longer take the `\\?\` prefix: `CreateFileW` refuses `MAX_PATH` (260)
/// characters or more without it (unless the process opted into long paths), and std, which
/// opened the same path for the GGUF header, uses the same threshold (directories: 248).
const LONG_PATH: usize = 248;

/// The name `CreateFileW` gets for `path`: the path itself when short, else its absolute form
/// with the `\\?\` (or `\\?\UNC\`) prefix. A prefixed path is taken literally (no `/` or `..`
/// handling), so `std::path::absolute` (GetFullPathNameW) resolves those first.
fn create_name(path: &Path) -> io::Result<HSTRING> {
    use std::os::windows::ffi::OsStrExt;
    let wide: Vec<u16> = path.as_os_str().encode_wide().collect();
    if wide.len() < LONG_PATH || wide.starts_with(&wide_str(r"\\?\")) {
        return Ok(HSTRING::from_wide(&wide));
    }
    let abs: Vec<u16> = std::path::absolute(path)?
        .as_os_str()
        .encode_wide()
        .collect();
    Ok(HSTRING::from_wide(&verbatim(&abs)))
}

/// `\\?\` + an absolute path: `C:\x` -> `\\?\C:\x`, `\\server\share\x` ->
/// `\\?\UNC\server\share\x`; paths already in a device form (`\\?\`, `\\.\`) stay.
fn verbatim(abs: &[u16]) -> Vec<u16> {
    if abs.starts_with(&wide_str(r"\\?\")) || abs.starts_with(&wide_str(r"\\.\")) {
        return abs.to_vec();
    }
    if let Some(unc) = abs.strip_prefix(&wide_str(r"\\")[..]) {
        return [&wide_str(r"\\?\UNC\")[..], unc].concat();
    }
    [&wide_str(r"\\?\")[..], abs].concat()
}

fn wide_str(s: &str) -> Vec<u16> {
    s.encode_utf16().collect()
}

/// The handle opened with `CreateFileW`; workers `ReOpenFile` it.
pub(crate) struct SharedFile {
    handle: Owned,
}

impl SharedFile {
    pub(crate) fn open(path: &Path) -> io::Result<(Self, u64)> {
        let name = create_name(path)?;
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
        // Manual reset: ReadFile resets it when an IO starts; GetOverlappedResult waits on it.
        // SAFETY: no security attributes, no name: a fresh private event.
        let event = Owned(unsafe { CreateEventW(None, true, false, None) }.map_err(to_io)?);
        let direct = if cfg.direct {
            Direct::Ready {
                align: sector_size(&file),
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

/// The alignment FILE_FLAG_NO_BUFFERING needs on this file's volume: the larger of the logical
/// sector size and the physical sector size for performance, when the OS says; else 4096.
fn sector_size(file: &Owned) -> usize {
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
    let sane = |x: u32| x.is_power_of_two() && (512..=1 << 20).contains(&x);
    match r {
        Ok(()) if sane(info.LogicalBytesPerSector) => {
            let phys = info.PhysicalBytesPerSectorForPerformance;
            let s = if sane(phys) {
                phys.max(info.LogicalBytesPerSector)
            } else {
                info.LogicalBytesPerSector
            };
            s as usize
        }
        // Windows 7 has no FileStorageInfo; some filesystems do not answer.
        _ => 4096,
    }
}

enum Direct {
    Off,
    Ready { align: usize, handle: Option<Owned> },
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
    stats: HandleStats,
}

impl WinHandle {
    fn disable_direct(&mut self, reason: String) {
        self.direct = Direct::Disabled; // closes the unbuffered handle
        self.stats.direct_fallback = Some(reason);
    }

    /// The unbuffered handle, reopened on first use; `None` when the unbuffered path is off.
    fn direct_handle(&mut self) -> io::Result<Option<HANDLE>> {
        let Direct::Ready { handle, .. } = &mut self.direct else {
            return Ok(None);
        };
        if let Some(h) = handle {
            return Ok(Some(h.0));
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
                Ok(Some(h))
            }
            Err(e) if refuses_direct(&e) => {
                self.disable_direct(format!(
                    "ReOpenFile with FILE_FLAG_NO_BUFFERING failed: {e}"
                ));
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn read_inner(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        // Windows file offsets are signed 64-bit (LARGE_INTEGER).
        if offset
            .checked_add(buf.len() as u64)
            .is_none_or(|end| end > i64::MAX as u64)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "range exceeds the largest file offset (2^63 - 1)",
            ));
        }
        let p = match self.direct {
            Direct::Ready { align, .. } => {
                plan(offset, buf.len(), buf.as_ptr() as usize, align, align)
            }
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
        let (file, event) = (self.file.0, self.event.0);
        let (done, err) = exact_loop(buf, offset, None, &mut self.stats.buffered_calls, |b, o| {
            read_overlapped(file, event, b, o)
        });
        self.stats.buffered_bytes += done as u64;
        err.map_or(Ok(()), Err)
    }

    fn read_direct(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let Some(h) = self.direct_handle()? else {
            return self.read_buffered(buf, offset);
        };
        let Direct::Ready { align, .. } = self.direct else {
            return self.read_buffered(buf, offset);
        };
        let event = self.event.0;
        let (done, err) = exact_loop(
            buf,
            offset,
            Some((align, align)),
            &mut self.stats.direct_calls,
            |b, o| read_overlapped(h, event, b, o),
        );
        self.stats.direct_bytes += done as u64;
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

/// One overlapped `ReadFile` of `buf.len()` (<= 1 GiB, see `MAX_CALL`) bytes at `offset`,
/// waited for. Returns the bytes read; 0 at or past the end of the file.
fn read_overlapped(file: HANDLE, event: HANDLE, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut ov = OVERLAPPED::default();
    ov.Anonymous.Anonymous.Offset = offset as u32; // low 32 bits
    ov.Anonymous.Anonymous.OffsetHigh = (offset >> 32) as u32;
    ov.hEvent = event;
    // SAFETY: `buf` and `ov` live on this frame (borrowed mutably, so nobody else touches
    // them) until this function returns, and it returns only after the IO has completed:
    // either ReadFile finished synchronously, or GetOverlappedResult(wait = TRUE) returned, or
    // (defensively) the event was waited for until the IO is no longer pending. The byte-count
    // out-pointer is NULL as the docs require for overlapped reads.
    unsafe {
        if let Err(e) = ReadFile(file, Some(buf), None, Some(&mut ov)) {
            match win32(&e) {
                Some(ERROR_IO_PENDING) => {}
                Some(ERROR_HANDLE_EOF) => return Ok(0),
                _ => return Err(to_io(e)),
            }
        }
        let mut got = 0u32;
        match GetOverlappedResult(file, &ov, &mut got, true) {
            Ok(()) => Ok(got as usize),
            Err(e) => {
                // Never let `buf` go while the kernel may still write into it.
                while std::ptr::read_volatile(&ov.Internal) == STATUS_PENDING {
                    WaitForSingleObject(event, INFINITE);
                }
                match win32(&e) {
                    Some(ERROR_HANDLE_EOF) => Ok(0),
                    _ => Err(to_io(e)),
                }
            }
        }
    }
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
mod tests {
    use super::*;
    use crate::pattern;

    /// Forces the unbuffered handle onto a request Windows must refuse (alignment 1 claimed,
    /// odd offset, odd address): the bytes still arrive, through the buffered handle, and the
    /// handle records why. Wine does not enforce FILE_FLAG_NO_BUFFERING's alignment, so there
    /// the read may succeed unbuffered instead; either way the bytes must be right.
    #[test]
    fn refused_unbuffered_read_falls_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.bin");
        let p = pattern::write_full(&path, 1 << 20).unwrap();
        let (shared, _) = SharedFile::open(&path).unwrap();
        let cfg = OpenConfig {
            direct: true,
            drop_cache: false,
            use_cache: false,
        };
        // Built by hand (as open_handle does) so the test can set the alignment.
        assert!(cfg.direct);
        let file = shared.reopen(FILE_FLAG_OVERLAPPED).unwrap();
        // SAFETY: a fresh unnamed event, as in open_handle.
        let event = Owned(unsafe { CreateEventW(None, true, false, None) }.unwrap());
        let mut h = WinHandle {
            path: path.clone(),
            file,
            event,
            direct: Direct::Ready {
                align: 1,
                handle: None,
            },
            stats: HandleStats::default(),
        };
        let mut buf = vec![0u8; 4097];
        h.read_exact_at(&mut buf[1..], 3).unwrap();
        p.verify(3, &buf[1..]).unwrap();
        let s = h.stats();
        if s.direct_fallback.is_some() {
            assert!(!s.direct_active && s.buffered_bytes == 4096, "{s:?}");
        } else {
            assert_eq!(s.direct_bytes, 4096, "{s:?}");
        }
    }

    #[test]
    fn long_paths_get_the_verbatim_prefix() {
        let v = |s: &str| String::from_utf16(&verbatim(&wide_str(s))).unwrap();
        assert_eq!(v(r"C:\m\x.gguf"), r"\\?\C:\m\x.gguf");
        assert_eq!(v(r"\\srv\share\x.gguf"), r"\\?\UNC\srv\share\x.gguf");
        assert_eq!(v(r"\\?\C:\x.gguf"), r"\\?\C:\x.gguf");
        assert_eq!(v(r"\\.\PhysicalDrive0"), r"\\.\PhysicalDrive0");

        let short = Path::new(r"C:/models/../x.gguf");
        assert_eq!(create_name(short).unwrap(), HSTRING::from(short));
        let long = format!(r"C:\{}\..\m/x.gguf", "d".repeat(300));
        let name = create_name(Path::new(&long)).unwrap().to_string();
        assert_eq!(name, r"\\?\C:\m\x.gguf", "absolute resolves .. and /");
    }

    /// A file marked sparse leaves what was never written unallocated: 8 GiB of length with
    /// 1 MiB written at the end takes about 1 MiB. On NTFS this holds only because of
    /// FSCTL_SET_SPARSE (gen-model's flash files rely on it); under Wine the Linux filesystem
    /// makes the holes anyway and the test shows only that the call does no harm.
    #[test]
    fn marked_sparse_files_leave_holes() {
        use std::io::{Seek, SeekFrom, Write};
        use std::os::windows::io::AsRawHandle;
        use windows::Win32::Storage::FileSystem::{
            FileStandardInfo, GetCompressedFileSizeW, FILE_STANDARD_INFO,
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sparse.bin");
        let mut f = std::fs::File::create(&path).unwrap();
        mark_sparse(&f);
        f.seek(SeekFrom::Start(8 << 30)).unwrap();
        f.write_all(&vec![1u8; 1 << 20]).unwrap();
        f.set_len((8 << 30) + (2 << 20)).unwrap();
        f.sync_all().unwrap();
        assert_eq!(f.metadata().unwrap().len(), (8 << 30) + (2 << 20));
        // Two measures of the allocated bytes: GetCompressedFileSizeW is the documented one for
        // sparse files on Windows (Wine answers the logical size there); FileStandardInfo's
        // AllocationSize is what Wine fills from the Linux block count. Neither is ever below
        // the real allocation, so the smaller one is an honest upper bound on both.
        let mut info = FILE_STANDARD_INFO::default();
        // SAFETY: `f` is open; `info` is a writable FILE_STANDARD_INFO of the size passed.
        unsafe {
            GetFileInformationByHandleEx(
                HANDLE(f.as_raw_handle()),
                FileStandardInfo,
                (&mut info as *mut FILE_STANDARD_INFO).cast(),
                std::mem::size_of::<FILE_STANDARD_INFO>() as u32,
            )
        }
        .unwrap();
        drop(f);
        let name = HSTRING::from(path.as_path());
        let mut high = 0u32;
        // SAFETY: `name` is a NUL-terminated wide string and `high` a writable u32, both alive
        // for the call.
        let low = unsafe { GetCompressedFileSizeW(&name, Some(&mut high)) };
        let compressed = (u64::from(high) << 32) | u64::from(low);
        let allocated = compressed.min(u64::try_from(info.AllocationSize).unwrap_or(u64::MAX));
        assert!(
            allocated < 64 << 20,
            "1 MiB written, {compressed} B compressed size, {} B allocation size: not sparse",
            info.AllocationSize
        );
    }
}
