//! Page-cache control for cold and hot runs, and a residency probe that says whether it worked.
//!
//! Cold: `posix_fadvise(DONTNEED)` on the whole file, and `echo 1 > /proc/sys/vm/drop_caches`
//! (root) only when the probe shows fadvise left pages behind. Hot: read the whole file once through the page cache.
//! [`resident_fraction`] asks the kernel (`mincore` on a mapping of the file) how much of the file
//! is cached, so every row records what the cache really held before the run. The mapping is used
//! only for this probe, never to read data.
//!
//! Limits: Linux only (elsewhere cold runs rely on O_DIRECT and residency is unknown); a file
//! larger than free memory cannot be made fully hot, which the residency column then shows.

use super::BenchError;
use std::fs::File;
use std::io::Read;
use std::path::Path;

/// Drops the file's pages from the page cache with `posix_fadvise(DONTNEED)`; returns the method
/// that worked (`"fadvise"`, or `"none"`). See [`drop_all_caches`] for the global fallback.
pub fn drop_pages(path: &Path) -> Result<String, BenchError> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::io::AsRawFd;
        let f = File::open(path).map_err(|e| BenchError::Io {
            what: "open for cache drop",
            path: path.to_path_buf(),
            offset: 0,
            len: 0,
            source: e,
        })?;
        // SAFETY: fd is valid for the life of `f`; fadvise only advises the kernel.
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if r == 0 {
            return Ok("fadvise".into());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = path;
    Ok("none".into())
}

/// `echo 1 > /proc/sys/vm/drop_caches`: drops every clean page of every file (root only). Used
/// only when fadvise left the file cached: it slows down everything else on the machine.
pub fn drop_all_caches() -> bool {
    std::fs::write("/proc/sys/vm/drop_caches", b"1").is_ok()
}

/// Reads the whole file once through the page cache (8 MiB buffered reads).
pub fn warm(path: &Path) -> Result<(), BenchError> {
    let mut f = File::open(path).map_err(|e| BenchError::Io {
        what: "open for warm-up",
        path: path.to_path_buf(),
        offset: 0,
        len: 0,
        source: e,
    })?;
    let mut buf = vec![0u8; 8 << 20];
    let mut off = 0u64;
    loop {
        match f.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => off += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(BenchError::Io {
                    what: "warm-up read",
                    path: path.to_path_buf(),
                    offset: off,
                    len: buf.len() as u64,
                    source: e,
                })
            }
        }
    }
}

/// Fraction of the file's pages in the page cache (0.0 ..= 1.0); `None` where unknown.
pub fn resident_fraction(path: &Path) -> Option<f64> {
    #[cfg(target_os = "linux")]
    {
        let f = File::open(path).ok()?;
        let len = f.metadata().ok()?.len();
        if len == 0 {
            return Some(1.0);
        }
        // SAFETY: `sysconf` has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let page = u64::try_from(page).ok().filter(|&p| p > 0)?;
        const WINDOW: u64 = 1 << 30;
        let (mut resident, mut total) = (0u64, 0u64);
        let mut off = 0u64;
        let mut vec = Vec::new();
        while off < len {
            let n = (len - off).min(WINDOW);
            // SAFETY: read-only mapping used only as an address range for mincore; its bytes
            // are never read, so a concurrent change to the file cannot cause UB here.
            let map = unsafe {
                memmap2::MmapOptions::new()
                    .offset(off)
                    .len(n as usize)
                    .map(&f)
                    .ok()?
            };
            let pages = n.div_ceil(page) as usize;
            vec.clear();
            vec.resize(pages, 0u8);
            // SAFETY: `map` is a live mapping of n bytes at a page-aligned address (offset is a
            // multiple of 1 GiB) and `vec` has one byte per page of it, as mincore requires.
            let r = unsafe {
                libc::mincore(
                    map.as_ptr() as *mut libc::c_void,
                    n as usize,
                    vec.as_mut_ptr(),
                )
            };
            if r != 0 {
                return None;
            }
            resident += vec.iter().filter(|&&b| b & 1 != 0).count() as u64;
            total += pages as u64;
            off += n;
        }
        Some(resident as f64 / total as f64)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        None
    }
}

/// CPU seconds (user + system) used so far by this process (`children`: by its waited-for
/// children). `None` where unknown.
pub fn cpu_seconds(children: bool) -> Option<f64> {
    #[cfg(unix)]
    {
        // SAFETY: rusage is plain data; zeroed is a valid value for it.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let who = if children {
            libc::RUSAGE_CHILDREN
        } else {
            libc::RUSAGE_SELF
        };
        // SAFETY: `ru` is a valid out-pointer for the call.
        if unsafe { libc::getrusage(who, &mut ru) } != 0 {
            return None;
        }
        let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
        Some(t(ru.ru_utime) + t(ru.ru_stime))
    }
    #[cfg(not(unix))]
    {
        let _ = children;
        None
    }
}

pub use ds4_stream::units::available_memory;
