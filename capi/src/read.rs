//! Reads of byte ranges into caller memory: `ds4s_read` (one engine batch), and the completion
//! it returns (`ds4s_poll`, `ds4s_wait`, `ds4s_completion_free`).
//!
//! Caller memory becomes a [`ForeignHostMemory`] buffer per range; the engine reads straight
//! into it (host-visible: no staging, no copy, on any backend). Caller device memory
//! (`DS4S_MEM_DEVICE`, GPU backends) is wrapped with `Device::wrap_device_memory` and filled
//! through the staging ring and the device's copy stream. Those buffers are dropped only
//! after the batch's ticket has completed, and the engine has released them by then, so the
//! caller's memory is never touched after an outcome was reported, a free, or a close.

use crate::error::{Failure, DS4S_ERR_BUSY, DS4S_OK, DS4S_PENDING, DS4S_TIMEOUT};
use crate::handle::{with_handle, with_open};
use crate::{put, slice_in, Ds4sRange, DS4S_MEM_DEVICE, DS4S_MEM_HOST};
use ds4_stream::device::{DeviceBuffer, ForeignHostMemory};
use ds4_stream::engine::{ReadRequest, Ticket};
use std::ffi::c_int;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, PoisonError, TryLockError};
use std::time::Duration;

enum State {
    /// The batch is running; the buffers over caller memory live until it completed.
    Running(Ticket, Vec<Arc<DeviceBuffer>>),
    /// The outcome (sticky).
    Done(Result<(), crate::error::Failure>),
}

/// One `ds4s_read` batch.
pub(crate) struct Pending {
    state: Mutex<State>,
}

impl Pending {
    fn finish(st: &mut State, r: Result<(), ds4_stream::engine::EngineError>) {
        // The buffers are dropped here, after the ticket completed.
        *st = State::Done(r.map_err(Failure::from));
    }

    fn outcome(st: &State) -> Result<c_int, Failure> {
        match st {
            State::Done(Ok(())) => Ok(DS4S_OK),
            State::Done(Err(f)) => Err(f.clone()),
            State::Running(..) => Ok(DS4S_PENDING),
        }
    }

    /// Waits up to `limit` (`None`: no limit) for the outcome.
    fn wait(&self, limit: Option<Duration>) -> Result<c_int, Failure> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let State::Running(..) = &*st {
            let State::Running(ticket, bufs) = std::mem::replace(&mut *st, State::Done(Ok(())))
            else {
                return Self::outcome(&st);
            };
            match limit {
                None => Self::finish(&mut st, ticket.wait()),
                Some(d) => match ticket.wait_timeout(d) {
                    Ok(r) => Self::finish(&mut st, r),
                    Err(t) => {
                        *st = State::Running(t, bufs);
                        return Ok(DS4S_TIMEOUT);
                    }
                },
            }
        }
        Self::outcome(&st)
    }

    /// Non-blocking: the outcome, or DS4S_PENDING (also while another thread waits on it).
    fn poll(&self) -> Result<c_int, Failure> {
        let mut st = match self.state.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(DS4S_PENDING),
        };
        if let State::Running(t, _) = &*st {
            if !t.is_done() {
                return Ok(DS4S_PENDING);
            }
            if let State::Running(ticket, _) = std::mem::replace(&mut *st, State::Done(Ok(()))) {
                Self::finish(&mut st, ticket.wait()); // done: returns at once
            }
        }
        Self::outcome(&st)
    }

    /// Waits for the batch with no limit (free and close: caller memory must be left alone
    /// when they return). The outcome is dropped.
    pub(crate) fn settle(&self) {
        let _ = self.wait(None);
    }
}

/// # Safety
/// `ranges` is NULL or valid for reads of `n` `ds4s_range`s; each `dst` is valid for writes of
/// `len` bytes and left alone until the completion reports an outcome, is freed, or `h` is
/// closed; `out` is NULL or valid for a write of a `ds4s_completion`.
#[no_mangle]
pub unsafe extern "C" fn ds4s_read(
    h: u64,
    ranges: *const Ds4sRange,
    n: usize,
    memory: c_int,
    out: *mut u64,
) -> c_int {
    with_open("ds4s_read", h, |hd, o| {
        if out.is_null() {
            return Err(Failure::invalid("out is NULL"));
        }
        let device = match memory {
            DS4S_MEM_HOST => false,
            DS4S_MEM_DEVICE => true,
            m => return Err(Failure::invalid(format!("memory {m} is not DS4S_MEM_*"))),
        };
        if n == 0 {
            return Err(Failure::invalid("n is 0: a batch needs at least one range"));
        }
        // SAFETY: the header's contract for `ranges`.
        let rs = unsafe { slice_in(ranges, n, "ranges")? };
        let mut spans = Vec::with_capacity(n);
        for (i, r) in rs.iter().enumerate() {
            let len = usize::try_from(r.len)
                .map_err(|_| Failure::invalid(format!("ranges[{i}].len {} is too large", r.len)))?;
            if r.dst.is_null() && len > 0 {
                return Err(Failure::invalid(format!("ranges[{i}].dst is NULL")));
            }
            let start = r.dst as usize;
            let end = start
                .checked_add(len)
                .ok_or_else(|| Failure::invalid(format!("ranges[{i}]: dst + len overflows")))?;
            spans.push((start, end, i));
        }
        // Two ranges of one batch writing the same bytes would race: refuse.
        spans.retain(|&(s, e, _)| e > s);
        spans.sort_unstable();
        let mut reach: Option<(usize, usize)> = None; // furthest end so far, and its range
        for &(s, e, i) in &spans {
            if let Some((end, j)) = reach {
                if s < end {
                    return Err(Failure::new(
                        DS4S_ERR_BUSY,
                        format!("ranges[{j}] and ranges[{i}] have overlapping destinations"),
                    ));
                }
            }
            if reach.is_none_or(|(end, _)| e > end) {
                reach = Some((e, i));
            }
        }
        let mut reqs = Vec::with_capacity(n);
        let mut bufs = Vec::with_capacity(n);
        for r in rs {
            let b = if device {
                if r.len == 0 {
                    continue;
                }
                // SAFETY: the header's contract for DS4S_MEM_DEVICE: `dst` is device memory of
                // this handle's device and context, valid for `len` bytes and untouched until
                // an outcome, a free or a close, each of which waits for the batch before this
                // buffer is dropped; destinations do not overlap (checked above).
                Arc::new(unsafe {
                    o.engine
                        .device()
                        .wrap_device_memory(r.dst as usize as u64, r.len as usize)?
                })
            } else {
                let ptr = NonNull::new(r.dst.cast::<u8>()).unwrap_or(NonNull::dangling());
                // SAFETY: the header's contract: `dst` is valid for `len` bytes and untouched
                // by the caller until an outcome, a free or a close; each of those waits for
                // the batch before this buffer is dropped (Pending::wait / settle), and the
                // engine releases the buffer before the ticket completes. Destinations do not
                // overlap (checked above).
                Arc::new(unsafe { ForeignHostMemory::buffer(ptr, r.len as usize) })
            };
            reqs.push(
                ReadRequest::new(r.file_offset, r.len as usize, Arc::clone(&b), 0)
                    .with_label(format!("ds4s_read range at file offset {}", r.file_offset)),
            );
            bufs.push(b);
        }
        let ticket = o.engine.submit(reqs)?;
        let id = hd.completions.insert(Arc::new(Pending {
            state: Mutex::new(State::Running(ticket, bufs)),
        }));
        // SAFETY: checked non-null; the caller promised room for a completion id.
        unsafe { put(out, id, "out")? };
        Ok(DS4S_OK)
    })
}

#[no_mangle]
pub extern "C" fn ds4s_poll(h: u64, c: u64) -> c_int {
    with_handle("ds4s_poll", h, |hd| hd.completions.get(c)?.poll())
}

#[no_mangle]
pub extern "C" fn ds4s_wait(h: u64, c: u64, timeout_ms: i64) -> c_int {
    with_handle("ds4s_wait", h, |hd| {
        let p = hd.completions.get(c)?;
        let limit = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        p.wait(limit)
    })
}

#[no_mangle]
pub extern "C" fn ds4s_completion_free(h: u64, c: u64) -> c_int {
    with_handle("ds4s_completion_free", h, |hd| {
        let p = hd.completions.remove(c)?;
        p.settle();
        Ok(DS4S_OK)
    })
}
