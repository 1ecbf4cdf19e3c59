//! One overlapped `ReadFile`, waited for with a bound, and the call-size policy around it.
//!
//! **Bounded waits.** A read that never completes (a dead network share, a hung driver, a
//! device that stopped answering) must not hang the worker, and with it the engine's shutdown,
//! for ever. After `ReadFile` answers `ERROR_IO_PENDING` the worker waits on its event with
//! `WaitForSingleObject(event, timeout)` (default [`IO_TIMEOUT`], 60 s; one call of at most
//! [`CALL_LIMIT`] bytes from a local disk takes well under a second). On timeout it calls
//! `CancelIoEx(file, &overlapped)` and then waits, without a bound, for the IO to finish: the
//! buffer and the `OVERLAPPED` live on the caller's stack and must not be released while the
//! kernel may still write into them ("the application must not free or reuse the OVERLAPPED
//! structure associated with the canceled I/O operations until they have completed",
//! CancelIoEx). File-system reads complete promptly once cancelled; a driver that ignores
//! cancellation would still hang that worker, and nothing short of leaking the buffer (which
//! belongs to the caller) or ending the process avoids that. A cancelled read is returned as
//! `io::ErrorKind::TimedOut`; one that completed while being cancelled returns its bytes.
//! `WaitForSingleObject` + `GetOverlappedResult(wait = FALSE)` rather than
//! `GetOverlappedResultEx(timeout)`: the same effect, and it also exists on Windows 7 (the Wine
//! build's target is `x86_64-win7-windows-gnu`; `GetOverlappedResultEx` is Windows 8+).
//!
//! **Call size.** Every `ReadFile` of an unbuffered handle locks its whole buffer in memory for
//! the duration of the IO, and a large one can fail for lack of memory or quota. A call reads
//! at most [`CALL_LIMIT`] (64 MiB); when Windows answers one of the errors of
//! [`short_of_resources`] (`ReadFile` documents `ERROR_INVALID_USER_BUFFER` and
//! `ERROR_NOT_ENOUGH_MEMORY` for "too many outstanding asynchronous I/O requests"; the others
//! are the memory-manager and quota answers to locking a large buffer) the call is retried
//! with half the length, down to one sector, and each retry is counted
//! (`HandleStats::call_retries`). The smaller size holds for the rest of that request.

use super::{to_io, win32};
use std::io;
use std::time::Duration;
use windows::Win32::Foundation::{
    ERROR_HANDLE_EOF, ERROR_INVALID_USER_BUFFER, ERROR_IO_PENDING, ERROR_NOT_ENOUGH_MEMORY,
    ERROR_NOT_ENOUGH_QUOTA, ERROR_NO_SYSTEM_RESOURCES, ERROR_OPERATION_ABORTED,
    ERROR_WORKING_SET_QUOTA, HANDLE, WAIT_OBJECT_0,
};
use windows::Win32::Storage::FileSystem::ReadFile;
use windows::Win32::System::Threading::{WaitForSingleObject, INFINITE};
use windows::Win32::System::IO::{CancelIoEx, GetOverlappedResult, OVERLAPPED};

/// How long one `ReadFile` may stay pending before it is cancelled.
pub(super) const IO_TIMEOUT: Duration = Duration::from_secs(60);

/// The most one `ReadFile` call reads (a power of two, so halving keeps sector multiples).
pub(super) const CALL_LIMIT: usize = 64 << 20;

/// `OVERLAPPED::Internal` while the IO is in flight (NTSTATUS STATUS_PENDING).
const STATUS_PENDING: usize = 0x103;

/// True for the `ReadFile` errors that mean "too large for the memory or quota available now",
/// which a smaller call may not hit.
pub(super) fn short_of_resources(e: &io::Error) -> bool {
    let Some(c) = e.raw_os_error() else {
        return false;
    };
    [
        ERROR_NOT_ENOUGH_MEMORY,
        ERROR_NO_SYSTEM_RESOURCES,
        ERROR_WORKING_SET_QUOTA,
        ERROR_NOT_ENOUGH_QUOTA,
        ERROR_INVALID_USER_BUFFER,
    ]
    .iter()
    .any(|w| w.0 as i32 == c)
}

/// The call-size state of one request: starts at [`CALL_LIMIT`], halves on
/// [`short_of_resources`] errors down to `floor` (a power of two: the sector size on the
/// unbuffered handle, so every call stays a sector multiple).
pub(super) struct CallSize {
    limit: usize,
    floor: usize,
}

impl CallSize {
    pub(super) fn new(floor: usize) -> Self {
        debug_assert!(floor.is_power_of_two() && floor <= CALL_LIMIT);
        Self {
            limit: CALL_LIMIT,
            floor,
        }
    }

    /// One read of up to `buf.len()` bytes through `read_once` (one system call per attempt),
    /// in calls of at most the current limit, halving it and trying again on
    /// [`short_of_resources`] errors; `retries` counts those. Returns what the successful call
    /// returned (possibly fewer bytes than `buf.len()`: the caller continues).
    pub(super) fn read(
        &mut self,
        buf: &mut [u8],
        offset: u64,
        retries: &mut u64,
        mut read_once: impl FnMut(&mut [u8], u64) -> io::Result<usize>,
    ) -> io::Result<usize> {
        loop {
            let n = buf.len().min(self.limit);
            match read_once(&mut buf[..n], offset) {
                Err(e) if short_of_resources(&e) && n > self.floor => {
                    // n is a multiple of the floor whenever buf.len() is (the unbuffered
                    // handle), and so is the halved limit.
                    self.limit = (n / 2 / self.floor * self.floor).max(self.floor);
                    *retries += 1;
                }
                r => return r,
            }
        }
    }
}

/// Debug builds: the unbuffered handle's rules, checked before every `ReadFile` on it (Wine
/// does not enforce them; real Windows fails such a read with `ERROR_INVALID_PARAMETER`).
#[inline]
pub(super) fn debug_assert_aligned(buf: &[u8], offset: u64, offset_align: usize, mem_align: usize) {
    debug_assert!(
        offset % offset_align as u64 == 0
            && buf.len() % offset_align == 0
            && (buf.as_ptr() as usize) % mem_align == 0,
        "unbuffered ReadFile of {} bytes at offset {offset} into {:p} breaks FILE_FLAG_NO_BUFFERING \
         alignment (offset and length: {offset_align}, address: {mem_align})",
        buf.len(),
        buf.as_ptr()
    );
}

/// One overlapped `ReadFile` of `buf.len()` (<= [`CALL_LIMIT`]) bytes at `offset` on `file`
/// (opened with `FILE_FLAG_OVERLAPPED`), signalling `event` (manual reset), waited for at most
/// `timeout` before it is cancelled (module docs). Returns the bytes read; 0 at or past the end
/// of the file; `TimedOut` when it was cancelled.
pub(super) fn read_overlapped(
    file: HANDLE,
    event: HANDLE,
    buf: &mut [u8],
    offset: u64,
    timeout: Duration,
) -> io::Result<usize> {
    debug_assert!(buf.len() <= CALL_LIMIT);
    let mut ov = OVERLAPPED::default();
    ov.Anonymous.Anonymous.Offset = offset as u32; // low 32 bits
    ov.Anonymous.Anonymous.OffsetHigh = (offset >> 32) as u32;
    ov.hEvent = event;
    // SAFETY: `buf` and `ov` live on this frame (borrowed mutably, so nobody else touches them)
    // until this function returns, and every path below returns only after the IO is complete
    // (synchronous completion, the event signalled, or a cancel followed by an unbounded wait).
    // The byte-count out-pointer is NULL, as the docs require for overlapped reads.
    let r = unsafe { ReadFile(file, Some(buf), None, Some(&mut ov)) };
    let synchronous = r.is_ok();
    if let Err(e) = r {
        match win32(&e) {
            Some(ERROR_IO_PENDING) => {}
            Some(ERROR_HANDLE_EOF) => return Ok(0),
            _ => return Err(to_io(e)), // nothing was started
        }
    }
    // Completed synchronously, or already (HasOverlappedIoCompleted): no wait, no extra call.
    // SAFETY: reads a field of our own live `ov` that the kernel updates (hence volatile).
    let done = synchronous || unsafe { std::ptr::read_volatile(&ov.Internal) } != STATUS_PENDING;
    let ms = u32::try_from(timeout.as_millis()).map_or(INFINITE - 1, |m| m.min(INFINITE - 1));
    // SAFETY: `event` is an open event handle owned by the caller.
    let signalled = done || unsafe { WaitForSingleObject(event, ms) } == WAIT_OBJECT_0;
    if !signalled {
        // Timed out (or the wait failed): ask for the IO to be cancelled. It may have completed
        // meanwhile (then CancelIoEx answers ERROR_NOT_FOUND and the result below is its own).
        // SAFETY: `ov` is the OVERLAPPED of this IO, still alive on this frame.
        let _ = unsafe { CancelIoEx(file, Some(&ov)) };
    }
    let mut got = 0u32;
    // SAFETY: `ov` describes an IO started on `file`; wait = TRUE returns once it is complete
    // (after a cancel, when the cancellation has completed it).
    let r = unsafe { GetOverlappedResult(file, &ov, &mut got, true) };
    if r.is_err() {
        // Never let `buf` go while the kernel may still write into it.
        // SAFETY: reads a field of our own live `ov` that the kernel updates (hence volatile);
        // waits on the caller's open event.
        unsafe {
            while std::ptr::read_volatile(&ov.Internal) == STATUS_PENDING {
                WaitForSingleObject(event, INFINITE);
            }
        }
    }
    match r {
        Ok(()) => Ok(got as usize),
        Err(e) => match win32(&e) {
            Some(ERROR_HANDLE_EOF) => Ok(0),
            Some(ERROR_OPERATION_ABORTED) if !signalled => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "read of {} bytes at offset {offset} did not complete within {} ms; cancelled",
                    buf.len(),
                    timeout.as_millis()
                ),
            )),
            _ => Err(to_io(e)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(code: windows::Win32::Foundation::WIN32_ERROR) -> io::Error {
        io::Error::from_raw_os_error(code.0 as i32)
    }

    /// A fake ReadFile that refuses calls above `max` with `code` and reads the rest fully.
    #[test]
    fn calls_are_capped_and_halved_down_to_one_sector() {
        let mut buf = vec![0u8; 200 << 20];
        let mut sizes = Vec::new();
        let mut retries = 0;
        let mut cs = CallSize::new(4096);
        let max = 5 << 20;
        let n = cs
            .read(&mut buf, 0, &mut retries, |b, _| {
                sizes.push(b.len());
                if b.len() > max {
                    Err(err(ERROR_WORKING_SET_QUOTA))
                } else {
                    Ok(b.len())
                }
            })
            .unwrap();
        // 64 -> 32 -> 16 -> 8 -> 4 MiB.
        assert_eq!(sizes, [64 << 20, 32 << 20, 16 << 20, 8 << 20, 4 << 20]);
        assert_eq!((n, retries), (4 << 20, 4));
        // The request keeps the smaller size.
        let n = cs
            .read(&mut buf, 0, &mut retries, |b, _| Ok(b.len()))
            .unwrap();
        assert_eq!((n, retries), (4 << 20, 4));

        // Down to the floor, then the error is returned.
        let mut cs = CallSize::new(4096);
        let mut calls = 0;
        let e = cs
            .read(&mut buf[..3 * 4096], 0, &mut retries, |_, _| {
                calls += 1;
                Err(err(ERROR_NO_SYSTEM_RESOURCES))
            })
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(ERROR_NO_SYSTEM_RESOURCES.0 as i32));
        // 12 KiB -> 4 KiB (a sector multiple, not 6 KiB) -> error.
        assert_eq!(calls, 2);

        // Other errors are not retried.
        let mut calls = 0;
        let e = CallSize::new(4096)
            .read(&mut buf, 0, &mut retries, |_, _| {
                calls += 1;
                Err(io::Error::from_raw_os_error(87))
            })
            .unwrap_err();
        assert_eq!((e.raw_os_error(), calls), (Some(87), 1));
    }

    #[test]
    fn resource_errors_are_the_documented_five() {
        for c in [
            ERROR_NOT_ENOUGH_MEMORY,
            ERROR_NO_SYSTEM_RESOURCES,
            ERROR_WORKING_SET_QUOTA,
            ERROR_NOT_ENOUGH_QUOTA,
            ERROR_INVALID_USER_BUFFER,
        ] {
            assert!(short_of_resources(&err(c)), "{c:?}");
        }
        assert!(!short_of_resources(&io::Error::from_raw_os_error(87)));
        assert!(!short_of_resources(&io::ErrorKind::Other.into()));
    }
}
