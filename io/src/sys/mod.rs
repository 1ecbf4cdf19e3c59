//! Platform implementations of per-worker handles, one file per OS; this file picks one and holds
//! the platform-independent part: how one request is split between the unbuffered and the
//! buffered path ([`plan`]).
//!
//! - `unix.rs`: Linux (own `open()` fd per worker, O_DIRECT when aligned) and macOS (F_NOCACHE).
//! - `windows/mod.rs`: `CreateFileW` once, then `ReOpenFile` per worker with
//!   `FILE_FLAG_OVERLAPPED` (+ `FILE_FLAG_NO_BUFFERING` for aligned requests).
//!
//! Any other target fails to compile here rather than silently falling back to something slow.

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub(crate) use unix::{cached_fraction, SharedFile};

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub(crate) use windows::{mark_sparse, SharedFile};

use std::io;

#[cfg(not(any(unix, windows)))]
compile_error!(
    "ds4-io supports unix (Linux, macOS) and Windows only: io/src/sys/ has no positional-read \
     implementation for this target"
);

/// Requests whose aligned middle is smaller than this are read entirely through the buffered
/// path: splitting costs up to three system calls, which only pays off for large reads.
pub(crate) const SPLIT_MIN_MIDDLE: u64 = 256 * 1024;

/// Largest single read system call. Linux caps `pread` at 0x7fff_f000 bytes, macOS rejects
/// counts above `INT_MAX`, Windows takes a DWORD: 1 GiB fits everywhere and is a multiple of
/// every direct-IO alignment.
pub(crate) const MAX_CALL: usize = 1 << 30;

/// Checks a request's byte range before any system call: every offset it touches must fit a
/// signed 64-bit file offset (Linux `off_t`, Windows `LARGE_INTEGER`). `Ok(false)` for an empty
/// request, which reads nothing.
pub(crate) fn check_span(offset: u64, len: usize) -> io::Result<bool> {
    if len == 0 {
        return Ok(false);
    }
    if offset
        .checked_add(len as u64)
        .is_none_or(|end| end > i64::MAX as u64)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "range exceeds the largest file offset (2^63 - 1)",
        ));
    }
    Ok(true)
}

/// How one request is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Everything through the buffered path.
    Buffered,
    /// Everything through the unbuffered path (offset, length and address aligned).
    Direct,
    /// Buffered head `[0, head)`, unbuffered middle `[head, tail)`, buffered tail
    /// `[tail, len)` (indices into the request).
    Split { head: usize, tail: usize },
}

/// Decides how to read `len` bytes at file offset `offset` into memory at address `addr`, given
/// the unbuffered path's offset/length alignment and memory alignment (powers of two).
pub(crate) fn plan(
    offset: u64,
    len: usize,
    addr: usize,
    offset_align: usize,
    mem_align: usize,
) -> Plan {
    debug_assert!(offset_align.is_power_of_two() && mem_align.is_power_of_two());
    let oa = offset_align as u64;
    let len64 = len as u64;
    if len == 0 {
        return Plan::Buffered;
    }
    if offset % oa == 0 && len64 % oa == 0 && addr % mem_align == 0 {
        return Plan::Direct;
    }
    let Some(end) = offset.checked_add(len64) else {
        return Plan::Buffered;
    };
    let mid_start = offset.div_ceil(oa) * oa;
    let mid_end = end / oa * oa;
    if mid_end <= mid_start || mid_end - mid_start < SPLIT_MIN_MIDDLE {
        return Plan::Buffered;
    }
    // Both fit in usize: they are at most `len` bytes into the request.
    let head = (mid_start - offset) as usize;
    let tail = (mid_end - offset) as usize;
    if addr.wrapping_add(head) % mem_align != 0 {
        // The buffer sits at an address the unbuffered path cannot use for this offset.
        return Plan::Buffered;
    }
    Plan::Split { head, tail }
}

/// The one exact-read loop every implementation uses (the platform readers and the fault
/// injector): reads into `buf` from `offset` through `read_once` (one system call, at most
/// [`MAX_CALL`] bytes, may return fewer) until `buf` is full. EINTR (`Interrupted`) is retried,
/// a short read is continued, 0 bytes before the end is `UnexpectedEof`. With `align =
/// Some((offset_align, mem_align))` (the unbuffered path) it also stops, without an error, as
/// soon as the remaining range is no longer aligned (after a short read at the end of a file).
///
/// Returns the bytes read and the error that stopped it, if any; `calls` counts system calls.
pub(crate) fn exact_loop(
    buf: &mut [u8],
    offset: u64,
    align: Option<(usize, usize)>,
    calls: &mut u64,
    mut read_once: impl FnMut(&mut [u8], u64) -> io::Result<usize>,
) -> (usize, Option<io::Error>) {
    let mut done = 0usize;
    while done < buf.len() {
        let off = offset + done as u64;
        let rest = &mut buf[done..];
        if let Some((oa, ma)) = align {
            let aligned =
                off % oa as u64 == 0 && rest.len() % oa == 0 && (rest.as_ptr() as usize) % ma == 0;
            if !aligned {
                return (done, None);
            }
        }
        let want = rest.len().min(MAX_CALL);
        *calls += 1;
        match read_once(&mut rest[..want], off) {
            Ok(0) => {
                let e = io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("file ended at offset {off}"),
                );
                return (done, Some(e));
            }
            Ok(n) if n > want => {
                let e = io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("read at offset {off} reported {n} bytes for a {want}-byte buffer"),
                );
                return (done, Some(e));
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (done, Some(e)),
        }
    }
    (done, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_span_takes_empty_and_signed_64_bit_ranges_only() {
        assert!(
            !check_span(u64::MAX, 0).unwrap(),
            "empty: nothing to read, never an error"
        );
        assert!(check_span(0, 1).unwrap());
        assert!(check_span(i64::MAX as u64 - 4096, 4096).unwrap());
        for (offset, len) in [
            (i64::MAX as u64 - 4095, 4096),
            (i64::MAX as u64, 1),
            (u64::MAX, 1),
        ] {
            let e = check_span(offset, len).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "({offset}, {len})");
        }
    }

    /// A fake system call over a pattern "file" of `len` bytes that returns at most `max` bytes
    /// and fails with EINTR every `eintr_every`-th call.
    fn fake(
        len: u64,
        max: usize,
        eintr_every: u64,
    ) -> impl FnMut(&mut [u8], u64) -> io::Result<usize> {
        let mut n_calls = 0u64;
        move |b: &mut [u8], off: u64| {
            n_calls += 1;
            if eintr_every > 0 && n_calls % eintr_every == 0 {
                return Err(io::ErrorKind::Interrupted.into());
            }
            let n = (b.len() as u64)
                .min(max as u64)
                .min(len.saturating_sub(off)) as usize;
            crate::pattern::fill(1, off, &mut b[..n]);
            Ok(n)
        }
    }

    #[test]
    fn exact_loop_continues_short_reads_and_retries_eintr() {
        let mut buf = vec![0u8; 10_000];
        let mut calls = 0;
        let (done, err) = exact_loop(&mut buf, 77, None, &mut calls, fake(1 << 20, 999, 3));
        assert!(err.is_none());
        assert_eq!(done, buf.len());
        crate::pattern::verify(1, 77, &buf).unwrap();
        // 11 reads of <= 999 bytes plus one EINTR every third call.
        assert!(calls >= 15, "{calls}");
    }

    #[test]
    fn exact_loop_reports_eof_with_progress() {
        let mut buf = vec![0u8; 100];
        let mut calls = 0;
        let (done, err) = exact_loop(&mut buf, 950, None, &mut calls, fake(1000, 1 << 20, 0));
        assert_eq!(done, 50);
        assert_eq!(err.unwrap().kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn exact_loop_rejects_overlong_reports() {
        let mut buf = vec![0u8; 10];
        let mut calls = 0;
        let (_, err) = exact_loop(&mut buf, 0, None, &mut calls, |b: &mut [u8], _| {
            Ok(b.len() + 1)
        });
        assert_eq!(err.unwrap().kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn exact_loop_stops_when_direct_range_turns_unaligned() {
        let mut buf = crate::AlignedBuf::new(8192, 4096).unwrap();
        let mut calls = 0;
        // A short read of 100 bytes leaves an unaligned remainder: the loop hands it back.
        let (done, err) = exact_loop(
            &mut buf,
            0,
            Some((512, 512)),
            &mut calls,
            fake(1 << 20, 100, 0),
        );
        assert!(err.is_none());
        assert_eq!(done, 100);
    }

    #[test]
    fn aligned_requests_go_direct() {
        assert_eq!(plan(0, 4096, 8192, 512, 512), Plan::Direct);
        assert_eq!(plan(5 << 32, 1 << 20, 1 << 12, 4096, 4096), Plan::Direct);
    }

    #[test]
    fn small_or_misaligned_requests_go_buffered() {
        assert_eq!(plan(1, 4096, 4096, 512, 512), Plan::Buffered);
        assert_eq!(plan(0, 4095, 4096, 512, 512), Plan::Buffered);
        assert_eq!(plan(0, 4096, 4097, 512, 512), Plan::Buffered);
        assert_eq!(plan(0, 0, 0, 512, 512), Plan::Buffered);
        // Large but the buffer's address is off by one relative to the file offset.
        assert_eq!(plan(100, 4 << 20, 4096, 4096, 4096), Plan::Buffered);
        assert_eq!(plan(u64::MAX - 10, 1 << 20, 0, 4096, 4096), Plan::Buffered);
    }

    #[test]
    fn large_unaligned_requests_split() {
        // File offset 100 at address 100: the aligned file offset 4096 lands on the aligned
        // address 4096.
        let p = plan(100, 4 << 20, 100, 4096, 4096);
        assert_eq!(
            p,
            Plan::Split {
                head: 3996,
                tail: (((100 + (4 << 20)) / 4096 * 4096) - 100) as usize
            }
        );
        // Offset aligned, only the length is not: no head, a tail.
        let p = plan(8192, (1 << 20) + 7, 0, 512, 512);
        assert_eq!(
            p,
            Plan::Split {
                head: 0,
                tail: 1 << 20
            }
        );
    }
}
