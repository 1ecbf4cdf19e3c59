//! Unix per-worker handles: each worker opens the file itself (its own fd, no shared file
//! offset, no lock in the kernel's `struct file`), reads with `pread`, and, when asked for
//! unbuffered IO, opens a second fd lazily for aligned requests:
//!
//! - Linux: `O_DIRECT`. The alignment comes from `statx(STATX_DIOALIGN)` (kernel 6.1+:
//!   `stx_dio_offset_align` for file offset and length, `stx_dio_mem_align` for the buffer
//!   address), else the device's logical block size from sysfs, else 4096.
//! - macOS: `F_NOCACHE` on the second fd (no alignment is required by the OS; page alignment is
//!   used so that only whole pages bypass the cache).
//! - Other unix targets: buffered reads only; the handle says so in its stats.
//!
//! A request whose offset, length and buffer address are aligned goes to the unbuffered fd; a
//! large unaligned request reads its aligned middle unbuffered and its head and tail buffered
//! (see [`super::plan`]). When the unbuffered fd cannot be opened (for any reason) or the kernel
//! refuses an unbuffered read (`EINVAL`, `ENOTSUP`: tmpfs on older kernels, some FUSE and
//! network filesystems) the handle falls back to buffered reads for the rest of its life and
//! records why.
//!
//! Hot files ([`OpenConfig::use_cache`], Linux): before a read that would go unbuffered, the
//! handle asks whether its bytes are in the page cache, and reads them from there if they are
//! (an unbuffered read would fetch them from the disk again, at a fraction of memory speed).
//! The probe is `cachestat(2)` (Linux 6.5+; no side effect). Where it is missing or filtered
//! (ENOSYS, EPERM in a seccomp sandbox) the fallback is a `preadv2(RWF_NOWAIT)` of the range's
//! first page on the buffered fd, which is set to `POSIX_FADV_RANDOM`: measured on Linux 6.18,
//! an RWF_NOWAIT read that misses still starts readahead of the whole range it asked for (three
//! 4 MiB probes of a cold file left 16 MiB in the page cache), so probing the whole range would
//! read cold data twice (once buffered, once unbuffered); one page with readahead off costs at
//! most one 4 KiB read per miss. A NOWAIT result of 0 bytes counts as a miss, never as end of
//! file (the 5.9/5.10 bug in preadv2(2) BUGS). Each handle probes on its own: an error on one
//! read sends that read unbuffered and is counted; only "unsupported" answers turn a probe off,
//! for that handle.
//!
//! Either probe, the buffered fd of a handle with an unbuffered path is set to
//! `POSIX_FADV_RANDOM` (readahead off): it serves cached bytes, partly cached ranges and the
//! unaligned ends of unbuffered reads, and readahead there only pulls in the bytes the next
//! request would have read unbuffered. Measured on the dev machine (read_ahead_kb 8192): a cold
//! tensor whose first chunk shared pages with the GGUF header went buffered at its first read,
//! whose readahead made the next chunk look cached to the probe, and so on to the end: the whole
//! tensor was read buffered at 0.43 GB/s instead of unbuffered at ~1.1. Readahead comes back
//! (`POSIX_FADV_NORMAL`) when the unbuffered path is turned off and the buffered fd serves
//! everything.
//!
//! Limits: the file is assumed not to change while it is read (it is a model file); a file that
//! was replaced on disk between [`SharedFile::open`] and a worker's open is detected by its
//! device and inode numbers and refused.

use super::{exact_loop, plan, Plan};
use crate::error::ReadError;
use crate::file::{HandleStats, OpenConfig, ReadAt};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What every worker's handle is checked against: the identity of the file opened first.
pub(crate) struct SharedFile {
    dev: u64,
    ino: u64,
}

impl SharedFile {
    /// Opens `path` once to learn its length and identity. Only regular files are accepted.
    pub(crate) fn open(path: &Path) -> io::Result<(Self, u64)> {
        let f = open_read(path, 0)?;
        let md = f.metadata()?;
        if !md.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        Ok((
            SharedFile {
                dev: md.dev(),
                ino: md.ino(),
            },
            md.len(),
        ))
    }

    /// Opens a new, independent fd on the same file for one worker.
    pub(crate) fn open_handle(&self, path: &Path, cfg: &OpenConfig) -> io::Result<Box<dyn ReadAt>> {
        let file = open_read(path, 0)?;
        check_same_file(&file, self.dev, self.ino)?;
        Ok(Box::new(UnixHandle::new(path, file, self, cfg)))
    }
}

/// Opens read-only with extra `flags`. O_NONBLOCK makes opening a FIFO (a hostile or replaced
/// path) return at once instead of waiting for a writer, so the regular-file / same-file check
/// that follows can refuse it; on regular files it changes nothing.
fn open_read(path: &Path, flags: libc::c_int) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | flags)
        .open(path)
}

/// Refuses an fd whose file is not the one [`SharedFile::open`] saw.
fn check_same_file(file: &File, dev: u64, ino: u64) -> io::Result<()> {
    let md = file.metadata()?;
    if md.dev() != dev || md.ino() != ino {
        return Err(io::Error::other(format!(
            "file was replaced since it was first opened (device/inode {}/{} now, {dev}/{ino} \
             before)",
            md.dev(),
            md.ino()
        )));
    }
    Ok(())
}

/// How a handle asks whether a range is in the page cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Probe {
    /// Not asked (cold reads, no unbuffered path) or nothing works here.
    None,
    #[cfg(target_os = "linux")]
    Cachestat,
    #[cfg(target_os = "linux")]
    NoWait,
}

impl Probe {
    fn name(self) -> &'static str {
        match self {
            Probe::None => "none",
            #[cfg(target_os = "linux")]
            Probe::Cachestat => "cachestat",
            #[cfg(target_os = "linux")]
            Probe::NoWait => "rwf_nowait",
        }
    }
}

/// State of the unbuffered path of one handle.
enum Direct {
    /// Not requested ([`OpenConfig::direct`] is false).
    Off,
    /// Usable; the unbuffered fd is opened at the first request that can use it.
    Ready {
        offset_align: usize,
        mem_align: usize,
        fd: Option<File>,
    },
    /// Turned off for good; [`HandleStats::direct_fallback`] says why.
    Disabled,
}

struct UnixHandle {
    path: PathBuf,
    dev: u64,
    ino: u64,
    buffered: File,
    direct: Direct,
    probe: Probe,
    drop_cache: bool,
    stats: HandleStats,
}

impl UnixHandle {
    fn new(path: &Path, buffered: File, shared: &SharedFile, cfg: &OpenConfig) -> Self {
        let mut stats = HandleStats::default();
        let direct = if !cfg.direct {
            Direct::Off
        } else {
            match dio_alignment(&buffered, shared.dev) {
                Ok((offset_align, mem_align)) => Direct::Ready {
                    offset_align,
                    mem_align,
                    fd: None,
                },
                Err(reason) => {
                    stats.direct_fallback = Some(reason);
                    Direct::Disabled
                }
            }
        };
        let probe = if cfg.use_cache && matches!(direct, Direct::Ready { .. }) {
            choose_probe(&buffered, &mut stats)
        } else {
            Probe::None
        };
        Self {
            path: path.to_path_buf(),
            dev: shared.dev,
            ino: shared.ino,
            buffered,
            direct,
            probe,
            drop_cache: cfg.drop_cache,
            stats,
        }
    }

    fn disable_direct(&mut self, reason: String) {
        self.direct = Direct::Disabled; // closes the unbuffered fd
        self.stats.direct_fallback = Some(reason);
        // Every read is buffered from now on: sequential ones want readahead again.
        #[cfg(target_os = "linux")]
        if self.probe != Probe::None {
            linux::advise(&self.buffered, libc::POSIX_FADV_NORMAL);
        }
    }

    /// The unbuffered fd, opened on first use; `None` when the unbuffered path is off.
    fn direct_fd(&mut self) -> io::Result<Option<RawFd>> {
        let Direct::Ready { fd, .. } = &mut self.direct else {
            return Ok(None);
        };
        if let Some(f) = fd {
            return Ok(Some(f.as_raw_fd()));
        }
        match open_direct(&self.path).and_then(|f| {
            check_same_file(&f, self.dev, self.ino)?;
            Ok(f)
        }) {
            Ok(f) => {
                let raw = f.as_raw_fd();
                *fd = Some(f);
                Ok(Some(raw))
            }
            // Whatever the reason (EINVAL from the filesystem, EMFILE, a replaced file), the
            // buffered fd can still serve every read.
            Err(e) => {
                self.disable_direct(format!("opening for unbuffered reads failed: {e}"));
                Ok(None)
            }
        }
    }

    /// True when the page cache should serve this read (the probe found its bytes there).
    fn cached(&mut self, offset: u64, len: usize) -> bool {
        let hit = match self.probe {
            Probe::None => return false,
            #[cfg(target_os = "linux")]
            Probe::Cachestat => match linux::cachestat(&self.buffered, offset, len as u64) {
                // At least half of the range's pages cached: the page cache serves it (a mixed
                // range costs a buffered read of its cold part, instead of re-reading its hot
                // part from the disk).
                Ok((cached, pages)) => cached * 2 >= pages,
                Err(_) => {
                    self.stats.counters.probe_errors += 1;
                    return false;
                }
            },
            #[cfg(target_os = "linux")]
            Probe::NoWait => match linux::nowait_first_page(&self.buffered, offset) {
                Ok(hit) => hit,
                Err(e) if linux::unsupported(&e) => {
                    self.probe = Probe::None;
                    self.stats.cache_probe = Probe::None.name();
                    self.stats.cache_probe_note =
                        Some(format!("preadv2(RWF_NOWAIT) refused, probe off: {e}"));
                    return false;
                }
                Err(_) => {
                    self.stats.counters.probe_errors += 1;
                    return false;
                }
            },
        };
        if hit {
            self.stats.counters.cache_hits += 1;
        } else {
            self.stats.counters.cache_misses += 1;
        }
        hit
    }

    fn read_inner(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if !super::check_span(offset, buf.len())? {
            return Ok(());
        }
        let p = match self.direct {
            Direct::Ready {
                offset_align,
                mem_align,
                ..
            } => plan(
                offset,
                buf.len(),
                buf.as_ptr() as usize,
                offset_align,
                mem_align,
            ),
            Direct::Off | Direct::Disabled => Plan::Buffered,
        };
        let p = if p != Plan::Buffered && self.cached(offset, buf.len()) {
            Plan::Buffered
        } else {
            p
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
        let fd = self.buffered.as_raw_fd();
        let (done, err) = exact_loop(
            buf,
            offset,
            None,
            &mut self.stats.counters.buffered_calls,
            |b, o| pread_once(fd, b, o),
        );
        self.stats.counters.buffered_bytes += done as u64;
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Reads `buf` (aligned per the plan) through the unbuffered fd; whatever it cannot do (a
    /// misaligned remainder after a short read, a refusal) continues on the buffered fd.
    fn read_direct(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let Some(fd) = self.direct_fd()? else {
            return self.read_buffered(buf, offset);
        };
        let align = match self.direct {
            Direct::Ready {
                offset_align,
                mem_align,
                ..
            } => (offset_align, mem_align),
            _ => return self.read_buffered(buf, offset),
        };
        let (done, err) = exact_loop(
            buf,
            offset,
            Some(align),
            &mut self.stats.counters.direct_calls,
            |b, o| pread_once(fd, b, o),
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

    fn advise_dontneed(&self, offset: u64, len: u64) {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            let (Ok(off), Ok(l)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len))
            else {
                return;
            };
            if l == 0 {
                return; // 0 would mean "to the end of the file"
            }
            // SAFETY: posix_fadvise only reads its integer arguments; the fd is owned by
            // self.buffered and open. The advice is best-effort: its result is ignored.
            unsafe {
                libc::posix_fadvise(self.buffered.as_raw_fd(), off, l, libc::POSIX_FADV_DONTNEED);
            }
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        {
            // macOS has no posix_fadvise; its unbuffered path (F_NOCACHE) is the cold mode.
            let _ = (offset, len);
        }
    }
}

impl ReadAt for UnixHandle {
    fn read_exact_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let len = buf.len() as u64;
        self.read_inner(buf, offset)
            .map_err(|e| ReadError::wrap(&self.path, offset, len, e))?;
        if self.drop_cache {
            self.advise_dontneed(offset, len);
        }
        Ok(())
    }

    fn direct_alignment(&self) -> Option<usize> {
        match self.direct {
            Direct::Ready {
                offset_align,
                mem_align,
                ..
            } => Some(offset_align.max(mem_align)),
            Direct::Off | Direct::Disabled => None,
        }
    }

    fn direct_alignments(&self) -> Option<crate::file::DirectAlignment> {
        match self.direct {
            Direct::Ready {
                offset_align,
                mem_align,
                ..
            } => Some(crate::file::DirectAlignment {
                offset: offset_align,
                memory: mem_align,
            }),
            Direct::Off | Direct::Disabled => None,
        }
    }

    fn drop_cache(&mut self, offset: u64, len: u64) {
        self.advise_dontneed(offset, len);
    }

    fn stats(&self) -> HandleStats {
        let mut s = self.stats.clone();
        s.direct_active = matches!(self.direct, Direct::Ready { .. });
        s
    }

    fn counters(&self) -> crate::file::ReadCounters {
        self.stats.counters
    }
}

/// Picks this handle's cache probe: cachestat when the kernel answers it, else RWF_NOWAIT on
/// one page (with readahead turned off on the buffered fd), else none; says why in `stats`.
fn choose_probe(buffered: &File, stats: &mut HandleStats) -> Probe {
    #[cfg(target_os = "linux")]
    {
        let why_not_cachestat = match linux::cachestat(buffered, 0, 1) {
            Ok(_) => {
                // Readahead off: it would make the next cold chunk look cached (module docs).
                linux::advise(buffered, libc::POSIX_FADV_RANDOM);
                stats.cache_probe = Probe::Cachestat.name();
                return Probe::Cachestat;
            }
            Err(e) => e,
        };
        // Readahead off first, so that the probe below reads at most one page of a cold file.
        linux::advise(buffered, libc::POSIX_FADV_RANDOM);
        match linux::nowait_first_page(buffered, 0) {
            Ok(_) => {
                stats.cache_probe = Probe::NoWait.name();
                stats.cache_probe_note =
                    Some(format!("cachestat unavailable: {why_not_cachestat}"));
                Probe::NoWait
            }
            Err(e) => {
                linux::advise(buffered, libc::POSIX_FADV_NORMAL);
                stats.cache_probe = Probe::None.name();
                stats.cache_probe_note = Some(format!(
                    "no page-cache probe: cachestat: {why_not_cachestat}; preadv2(RWF_NOWAIT): {e}"
                ));
                Probe::None
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = buffered;
        stats.cache_probe = Probe::None.name();
        stats.cache_probe_note = Some("no page-cache probe on this OS".into());
        Probe::None
    }
}

/// Fraction of `[offset, offset + len)` of `f` in the page cache (Linux `cachestat`, 6.5+);
/// `None` where the kernel cannot say.
pub(crate) fn cached_fraction(f: &std::fs::File, offset: u64, len: u64) -> Option<f64> {
    #[cfg(target_os = "linux")]
    {
        linux::cachestat(f, offset, len)
            .ok()
            .map(|(cached, pages)| cached as f64 / pages.max(1) as f64)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (f, offset, len);
        None
    }
}

/// The Linux page-cache probes.
#[cfg(target_os = "linux")]
mod linux {
    use std::fs::File;
    use std::io;
    use std::os::fd::AsRawFd;

    /// `cachestat` has one number on every architecture (the unified table, Linux 6.5).
    const SYS_CACHESTAT: libc::c_long = 451;

    #[repr(C)]
    struct CachestatRange {
        off: u64,
        len: u64,
    }

    #[repr(C)]
    #[derive(Default)]
    struct Cachestat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }

    /// (cached pages, pages) of `[offset, offset + len)`, pages of 4096 bytes.
    pub(super) fn cachestat(f: &File, offset: u64, len: u64) -> io::Result<(u64, u64)> {
        let first = offset / 4096;
        let last = (offset + len.max(1) - 1) / 4096;
        let range = CachestatRange {
            off: first * 4096,
            len: (last - first + 1) * 4096,
        };
        let mut cs = Cachestat::default();
        // SAFETY: the fd is open (owned by `f`); `range` is readable and `cs` writable for the
        // kernel's structs of exactly these layouts (five u64 out, two u64 in); flags 0.
        let r = unsafe {
            libc::syscall(
                SYS_CACHESTAT,
                f.as_raw_fd(),
                &range as *const CachestatRange,
                &mut cs as *mut Cachestat,
                0u32,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((cs.nr_cache, last - first + 1))
    }

    /// Reads the page holding `offset` with RWF_NOWAIT: `Ok(true)` when the page cache had it,
    /// `Ok(false)` when it did not (EAGAIN, or 0 bytes: the 5.9/5.10 bug, or end of file).
    pub(super) fn nowait_first_page(f: &File, offset: u64) -> io::Result<bool> {
        let mut page = [0u8; 4096];
        let at = offset - offset % 4096;
        let off =
            libc::off_t::try_from(at).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        let iov = libc::iovec {
            iov_base: page.as_mut_ptr().cast(),
            iov_len: page.len(),
        };
        loop {
            // SAFETY: `iov` describes `page`, a live writable stack buffer of its length, for
            // the whole call; the fd is open (owned by `f`).
            let r = unsafe { libc::preadv2(f.as_raw_fd(), &iov, 1, off, libc::RWF_NOWAIT) };
            if r > 0 {
                return Ok(true);
            }
            if r == 0 {
                return Ok(false);
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) => return Ok(false),
                Some(libc::EINTR) => continue,
                _ => return Err(e),
            }
        }
    }

    /// True for the answers of a kernel or sandbox that has no RWF_NOWAIT for this file.
    pub(super) fn unsupported(e: &io::Error) -> bool {
        matches!(
            e.raw_os_error(),
            Some(libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS | libc::EPERM)
        )
    }

    /// Access advice for the whole file (POSIX_FADV_RANDOM: readahead off, so a NOWAIT probe
    /// that misses reads one page, not a window).
    pub(super) fn advise(f: &File, advice: libc::c_int) {
        // SAFETY: posix_fadvise only reads its integer arguments; the fd is open. Best effort.
        unsafe {
            libc::posix_fadvise(f.as_raw_fd(), 0, 0, advice);
        }
    }
}

/// True for the errors with which an OS refuses unbuffered IO on a file or a request.
fn refuses_direct(e: &io::Error) -> bool {
    // ENOTSUP and EOPNOTSUPP are one value on Linux and two on macOS.
    e.raw_os_error()
        .is_some_and(|c| c == libc::EINVAL || c == libc::ENOTSUP || c == libc::EOPNOTSUPP)
}

/// One `pread` (the caller bounds the length to [`super::MAX_CALL`]).
fn pread_once(fd: RawFd, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    // Checked, never truncated: a 32-bit off_t must not wrap an offset past 2 GiB.
    let off = libc::off_t::try_from(offset).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("offset {offset} does not fit this platform's off_t"),
        )
    })?;
    // SAFETY: `buf` is a live, exclusively borrowed region of `buf.len()` writable bytes for
    // the whole call; `fd` is an open descriptor owned by a `File` the caller holds.
    let r = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), off) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Opens the unbuffered fd.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn open_direct(path: &Path) -> io::Result<File> {
    open_read(path, libc::O_DIRECT)
}

/// Opens the unbuffered fd: a plain fd with the page cache turned off for it.
#[cfg(target_vendor = "apple")]
fn open_direct(path: &Path) -> io::Result<File> {
    let f = open_read(path, 0)?;
    // SAFETY: fcntl on an fd owned by `f`; F_NOCACHE takes an int argument and touches no memory.
    if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_NOCACHE, 1) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(f)
}

#[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
fn open_direct(_path: &Path) -> io::Result<File> {
    Err(io::Error::from_raw_os_error(libc::ENOTSUP))
}

/// The unbuffered path's (offset/length alignment, buffer address alignment), or why there is no
/// unbuffered path for this file.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn dio_alignment(file: &File, dev: u64) -> Result<(usize, usize), String> {
    let sane = |x: u32| x.is_power_of_two() && x <= 1 << 20;
    #[cfg(any(target_env = "gnu", target_os = "android"))]
    if let Some((mem, off)) = statx_dioalign(file) {
        if off == 0 {
            return Err("the filesystem reports no direct-IO support for this file \
                        (statx dio_offset_align = 0)"
                .into());
        }
        if sane(mem) && sane(off) {
            return Ok((off as usize, mem as usize));
        }
    }
    #[cfg(not(any(target_env = "gnu", target_os = "android")))]
    let _ = file;
    if let Some(lbs) = sysfs_logical_block_size(dev).filter(|&b| sane(b)) {
        return Ok((lbs as usize, lbs as usize));
    }
    Ok((4096, 4096))
}

#[cfg(target_vendor = "apple")]
fn dio_alignment(_file: &File, _dev: u64) -> Result<(usize, usize), String> {
    Ok((4096, 4096))
}

#[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
fn dio_alignment(_file: &File, _dev: u64) -> Result<(usize, usize), String> {
    Err("unbuffered reads are implemented for Linux (O_DIRECT) and macOS (F_NOCACHE) only".into())
}

/// `(stx_dio_mem_align, stx_dio_offset_align)` when the kernel answers STATX_DIOALIGN.
#[cfg(all(
    any(target_os = "linux", target_os = "android"),
    any(target_env = "gnu", target_os = "android")
))]
fn statx_dioalign(file: &File) -> Option<(u32, u32)> {
    // SAFETY: statx is plain old data; all-zero is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: the fd is open (owned by `file`), the path is an empty NUL-terminated string as
    // AT_EMPTY_PATH requires, and `stx` is a writable statx the kernel fills.
    let r = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if r != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 {
        return None; // old kernel, or a seccomp filter: use the next source
    }
    Some((stx.stx_dio_mem_align, stx.stx_dio_offset_align))
}

/// The logical block size of the block device holding the file, from sysfs (a partition's
/// queue settings live in its parent device's directory).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn sysfs_logical_block_size(dev: u64) -> Option<u32> {
    let (major, minor) = (
        libc::major(dev as libc::dev_t),
        libc::minor(dev as libc::dev_t),
    );
    let base = format!("/sys/dev/block/{major}:{minor}");
    [
        format!("{base}/queue/logical_block_size"),
        format!("{base}/../queue/logical_block_size"),
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok()?.trim().parse().ok())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::pattern;

    /// Forces the unbuffered path onto requests the kernel must refuse (alignment 1 claimed,
    /// the read is at an odd offset into an odd address): the read still returns the right
    /// bytes, through the buffered fd, and the handle records why and stays buffered.
    #[test]
    fn refused_unbuffered_read_falls_back_for_good() {
        let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
        let path = dir.path().join("f.bin");
        let p = pattern::write_full(&path, 1 << 20).unwrap();
        let (shared, _) = SharedFile::open(&path).unwrap();
        let file = File::open(&path).unwrap();
        let cfg = OpenConfig {
            direct: true,
            drop_cache: false,
            use_cache: false,
        };
        let mut h = UnixHandle::new(&path, file, &shared, &cfg);
        h.direct = Direct::Ready {
            offset_align: 1,
            mem_align: 1,
            fd: None,
        };
        let mut buf = vec![0u8; 4097];
        h.read_exact_at(&mut buf[1..], 3).unwrap();
        p.verify(3, &buf[1..]).unwrap();
        let s = h.stats();
        assert!(!s.direct_active, "{s:?}");
        assert!(s.direct_fallback.is_some(), "{s:?}");
        assert_eq!(s.counters.buffered_bytes, 4096);
        assert!(h.direct_alignment().is_none());
        // Later requests stay on the buffered path.
        h.read_exact_at(&mut buf[1..], 4099).unwrap();
        p.verify(4099, &buf[1..]).unwrap();
        assert_eq!(h.stats().counters.direct_calls, s.counters.direct_calls);
    }

    /// The cache-first decision (`use_cache`), with each probe this kernel offers: a range in
    /// the page cache is read buffered, a range dropped from it is read unbuffered, and the
    /// RWF_NOWAIT probe of a cold range pulls at most a page or two into the cache (not the
    /// range: the readahead pitfall documented at the top of this file).
    #[test]
    fn hot_ranges_come_from_the_page_cache_and_cold_ones_unbuffered() {
        const LEN: u64 = 8 << 20;
        let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
        let path = dir.path().join("hot.bin");
        let p = pattern::write_full(&path, LEN).unwrap();
        File::open(&path).unwrap().sync_all().unwrap(); // clean pages can be dropped
        let (shared, _) = SharedFile::open(&path).unwrap();
        let cfg = OpenConfig {
            direct: true,
            drop_cache: false,
            use_cache: true,
        };
        let mut h = UnixHandle::new(&path, File::open(&path).unwrap(), &shared, &cfg);
        if h.probe == Probe::None || !matches!(h.direct, Direct::Ready { .. }) {
            eprintln!(
                "skipped: no unbuffered path or no cache probe here: {:?}",
                h.stats()
            );
            return;
        }
        let drop_all = |h: &UnixHandle| {
            // SAFETY: integer arguments only; the fd is open.
            unsafe { libc::posix_fadvise(h.buffered.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        };
        let mut buf = crate::AlignedBuf::new(1 << 20, 4096).unwrap();
        for probe in [Probe::Cachestat, Probe::NoWait] {
            h.probe = probe;
            if probe == Probe::NoWait {
                linux::advise(&h.buffered, libc::POSIX_FADV_RANDOM);
            }
            // Hot: read the range buffered once so it is cached, then through the handle.
            let mut warm = vec![0u8; 1 << 20];
            h.read_buffered(&mut warm, 0).unwrap();
            let before = h.stats();
            h.read_exact_at(&mut buf, 0).unwrap();
            p.verify(0, &buf).unwrap();
            let s = h.stats();
            assert_eq!(
                s.counters.cache_hits,
                before.counters.cache_hits + 1,
                "{probe:?} {s:?}"
            );
            assert_eq!(
                s.counters.direct_bytes, before.counters.direct_bytes,
                "{probe:?}"
            );
            // Cold: dropped from the cache, read unbuffered. Up to three tries: on a loaded
            // machine the range was once found cached between the check and the read (CI
            // flake); a probe that never reads a dropped range unbuffered still fails.
            let mut tries = 0;
            let (before, s) = loop {
                tries += 1;
                drop_all(&h);
                let (cached, _) = linux::cachestat(&h.buffered, 0, LEN).unwrap_or((0, 0));
                if cached > 0 {
                    break (None, h.stats());
                }
                let before = h.stats();
                h.read_exact_at(&mut buf, 4 << 20).unwrap();
                p.verify(4 << 20, &buf).unwrap();
                let s = h.stats();
                if s.counters.cache_misses == before.counters.cache_misses + 1 || tries == 3 {
                    break (Some(before), s);
                }
                eprintln!("{probe:?}: a dropped range read as cached, try {tries}: {s:?}");
            };
            let Some(before) = before else {
                eprintln!("skipped {probe:?}: the kernel kept pages after DONTNEED");
                continue;
            };
            assert_eq!(
                s.counters.cache_misses,
                before.counters.cache_misses + 1,
                "{probe:?} {s:?} (after {tries} tries)"
            );
            assert_eq!(
                s.counters.direct_bytes,
                before.counters.direct_bytes + (1 << 20),
                "{probe:?}"
            );
            if let Ok((cached, _)) = linux::cachestat(&h.buffered, 4 << 20, 1 << 20) {
                assert!(
                    cached <= 2,
                    "{probe:?}: the probe pulled {cached} pages into the cache"
                );
            }
        }
    }

    #[test]
    fn non_regular_files_are_refused() {
        let e = SharedFile::open(Path::new("/")).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        // A FIFO with no writer: refused at once, not waited on.
        let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = SharedFile::open(&fifo).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
