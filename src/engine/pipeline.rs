//! The engine's threads: the dispatcher (plans chunks, takes staging slots, feeds the reader
//! pool), the reader jobs (read a chunk, issue its copy) and the completer (waits for copy
//! events, recycles slots, finishes chunks).
//!
//! Slot life cycle: free ring -> dispatcher -> job (read into it, queue the copy, event recorded
//! in the slot) -> completer (waits the event) -> free ring. A slot is only ever in the free ring
//! after its copy's event has completed; on top of that `PinnedBuf::as_mut_slice` waits for the
//! event itself, so even a slot returned early could not be overwritten under a running copy.
//! A `SlotGuard` returns its slot when dropped on any path (error, cancel, shutdown).

use super::grid::{chunks, host_chunks, ramp_head, widen, GRID_ALIGN};
use super::request::{ChunkToken, RequestState};
use super::stats::{ReadPath, Stats};
use super::trace::ChunkTimes;
use super::EngineError;
use crate::device::{Device, PinnedBuf, WriteLease};
use crossbeam_channel::{select, Receiver, Sender, TryRecvError};
use ds4_io::{Job, ReadAt, ReaderPool, Source};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// What every thread of one engine shares.
pub(crate) struct Shared {
    pub(crate) source: Arc<dyn Source>,
    pub(crate) device: Arc<dyn Device>,
    pub(crate) stats: Arc<Stats>,
    /// Chunk size = staging slot size.
    pub(crate) slot_bytes: usize,
    /// Widen staged reads to the handle's direct-IO alignment (so O_DIRECT applies).
    pub(crate) align_reads: bool,
    /// Ask the OS to drop each chunk from the page cache after reading it.
    pub(crate) cold: bool,
    /// Staged reads go in pieces of this many bytes, each piece's copy issued once it is read
    /// (0: one read and one copy per chunk).
    pub(crate) copy_piece: usize,
    /// The ramp (`EngineConfig::ramp`), when on.
    pub(crate) ramp: Option<Ramp>,
}

/// The ramp's count of staged chunks between dispatch and the end of their read
/// (`EngineConfig::ramp`; the cut is [`ramp_head`]).
pub(crate) struct Ramp {
    pub(crate) workers: usize,
    pub(crate) in_flight: Arc<AtomicUsize>,
}

impl Ramp {
    fn seat(&self) -> Seat {
        Seat {
            ahead: self.in_flight.fetch_add(1, Ordering::Relaxed),
            count: Arc::clone(&self.in_flight),
        }
    }
}

/// A staged chunk's place in the ramp: `ahead` chunks were in flight when it was dispatched.
/// It leaves the count when dropped: its read is over, failed or was cancelled.
struct Seat {
    ahead: usize,
    count: Arc<AtomicUsize>,
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One range of a submitted batch, validated and leased: `lease` covers exactly
/// `[dst_offset, dst_offset + len)` of the destination and keeps it alive.
pub(crate) struct Item {
    pub(crate) offset: u64,
    pub(crate) len: usize,
    pub(crate) lease: Arc<WriteLease>,
    pub(crate) dst_offset: usize,
    pub(crate) label: Option<Arc<str>>,
}

/// A batch on its way to the dispatcher.
pub(crate) struct Pending {
    pub(crate) state: Arc<RequestState>,
    pub(crate) items: Vec<Item>,
}

/// A staging slot on loan; returns to the ring when dropped, on any path (error, cancel,
/// shutdown). It may return with its last copy still running: the event stays recorded in the
/// buffer, and the next user's `as_mut_slice` (or the buffer's `Drop`) waits for it.
pub(crate) struct SlotGuard {
    buf: Option<PinnedBuf>,
    home: Sender<PinnedBuf>,
}

impl SlotGuard {
    fn buf(&mut self) -> &mut PinnedBuf {
        // Only `Drop` takes the buffer out.
        self.buf.as_mut().unwrap_or_else(|| unreachable!())
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            // If the ring is gone (engine stopping), the buffer is freed here; its Drop waits
            // for its last copy first.
            let _ = self.home.send(b);
        }
    }
}

/// A copy in flight, waiting for the completer.
pub(crate) struct InFlight {
    slot: SlotGuard,
    token: ChunkToken,
    issued: Instant,
    taken: Instant,
    /// When the read started and the time inside the copy calls (for the stage trace).
    started: Instant,
    issue: std::time::Duration,
}

/// True when the unbuffered path can serve this read on this handle (used for the stats of
/// handles that do not count their paths themselves).
fn direct_ok(align: Option<usize>, offset: u64, len: usize, ptr: *const u8) -> bool {
    match align {
        Some(a) if a.is_power_of_two() && len > 0 => {
            let m = a as u64 - 1;
            offset & m == 0 && len as u64 & m == 0 && (ptr as usize as u64) & m == 0
        }
        _ => false,
    }
}

/// Reads a chunk straight into host-visible destination memory (the token carries the lease).
struct DirectJob {
    shared: Arc<Shared>,
    dst_offset: usize,
    token: ChunkToken,
}

impl Job for DirectJob {
    fn run(self: Box<Self>, handle: &mut dyn ReadAt) {
        let DirectJob {
            shared,
            dst_offset,
            token,
        } = *self;
        let (offset, len) = (token.offset, token.len);
        let p = match &token.lease {
            Some(l) if l.check(dst_offset, len).is_ok() => l.buffer().host_ptr_at(dst_offset),
            _ => None,
        };
        let Some(p) = p else {
            // Unreachable: the dispatcher plans chunks inside the item's lease, host-visible.
            let e = token.shutdown_error();
            return token.finish(Err(e));
        };
        // SAFETY: the range is inside the token's lease (checked above), which is inside the
        // buffer; the write lease excludes every other writer and reader (engine requests,
        // copies, read_d2h) while the token holds it (until `finish` below), chunks of one
        // request are disjoint, and the lease's Arc keeps the memory alive for this call. DeviceMemory promises host_ptr is
        // valid for the buffer's length.
        let buf = unsafe { std::slice::from_raw_parts_mut(p, len) };
        let t0 = Instant::now();
        let aligned = direct_ok(handle.direct_alignment(), offset, len, p);
        let before = handle.counters();
        let r = handle.read_exact_at(buf, offset);
        let path = ReadPath::between(before, handle.counters(), aligned);
        if shared.cold {
            handle.drop_cache(offset, len as u64);
        }
        shared.stats.chunk_read(t0.elapsed(), path, false);
        let r = r.map_err(|source| read_error(&shared, &token, source));
        token.finish(r);
    }

    fn cancel(self: Box<Self>) {
        let e = self.token.shutdown_error();
        self.token.finish(Err(e));
    }
}

fn read_error(shared: &Shared, token: &ChunkToken, source: std::io::Error) -> EngineError {
    EngineError::Read {
        path: shared.source.path().to_path_buf(),
        offset: token.offset,
        len: token.len as u64,
        label: token.label.clone(),
        source,
    }
}

/// Reads a chunk into a staging slot and queues its copy to the destination (the token
/// carries the lease; the backend holds its own clone until the copy has run). The read goes in
/// pieces of `Shared::copy_piece` bytes and each piece's copy is issued as soon as it is read,
/// so the copy link works while the rest of the chunk is still being read and only the last
/// piece's copy is left when the read ends.
struct StagedJob {
    shared: Arc<Shared>,
    slot: SlotGuard,
    dst_offset: usize,
    token: ChunkToken,
    done: Sender<InFlight>,
    /// When the dispatcher took the slot.
    taken: Instant,
    /// The chunk's place in the ramp, when it is on.
    seat: Option<Seat>,
}

impl Job for StagedJob {
    fn run(self: Box<Self>, handle: &mut dyn ReadAt) {
        let StagedJob {
            shared,
            mut slot,
            dst_offset,
            token,
            done,
            taken,
            seat,
        } = *self;
        let started = Instant::now();
        // A seat exists only when the ramp is on.
        let ramp = seat
            .as_ref()
            .zip(shared.ramp.as_ref())
            .map(|(s, r)| (s.ahead, r.workers));
        let staged = stage(&shared, &mut slot, handle, &token, dst_offset, ramp);
        drop(seat); // the read is over
        let (issued, issue) = match staged {
            Ok(copies) => {
                let queued = started.saturating_duration_since(taken);
                shared.stats.staged(queued, copies.issue, copies.pieces);
                (Instant::now(), copies.issue)
            }
            // The slot returns to the ring with its last copy's event recorded (the next
            // user waits for it); the backend's lease clones keep the destination leased.
            Err(e) => return token.finish(Err(e)),
        };
        // The completer lives until every job's sender is gone, so this cannot fail; if it did,
        // the dropped message fails the token (Lost) and returns the slot with its copy's event
        // recorded (the next user of the slot waits for it), and the backend's clone of the
        // lease keeps the destination range leased until the copy is over.
        let _ = done.send(InFlight {
            slot,
            token,
            issued,
            taken,
            started,
            issue,
        });
    }

    fn cancel(self: Box<Self>) {
        let e = self.token.shutdown_error();
        self.token.finish(Err(e));
    }
}

/// What a staged chunk's copies cost on the issuing side.
struct Copies {
    /// Time inside the backend's copy calls.
    issue: std::time::Duration,
    pieces: u64,
}

/// The end of the piece of a staged read of `n` bytes that starts at `at` (< n): the ramp's
/// `head` first (when 0 < head < n), then pieces of `piece` bytes (0: the rest in one).
pub fn piece_end(at: usize, n: usize, head: usize, piece: usize) -> usize {
    if at == 0 && head > 0 && head < n {
        return head;
    }
    match piece {
        0 => n,
        p => at.saturating_add(p).min(n),
    }
}

/// Reads `token`'s chunk into the slot, widened to the handle's alignment so the unbuffered
/// path applies (the chunk grid is anchored at 4096, GRID_ALIGN, so the widened range fits the
/// slot unless the alignment is larger), piece by piece, queueing each piece's copy of the
/// chunk's bytes right after reading it. `ramp`: (chunks in flight before this one, workers)
/// cuts a head piece first ([`ramp_head`]).
fn stage(
    shared: &Shared,
    slot: &mut SlotGuard,
    handle: &mut dyn ReadAt,
    token: &ChunkToken,
    dst_offset: usize,
    ramp: Option<(usize, usize)>,
) -> Result<Copies, EngineError> {
    let (offset, len) = (token.offset, token.len);
    let align = handle.direct_alignment().filter(|_| shared.align_reads);
    let (r0, r1) = widen(offset, len, align, shared.source.len(), slot.buf().len());
    let n = (r1 - r0) as usize;
    let head = (offset - r0) as usize;
    let Some(lease) = token.lease.as_ref() else {
        // Unreachable: planned chunks always carry their lease.
        return Err(token.shutdown_error());
    };
    // Pieces stay on the direct-IO alignment so each one can take the unbuffered path.
    let unit = align.unwrap_or(1).max(GRID_ALIGN as usize);
    let cut = ramp.map_or(0, |(ahead, workers)| ramp_head(n, ahead, workers, unit));
    let mut copies = Copies {
        issue: std::time::Duration::ZERO,
        pieces: 0,
    };
    let (t0, before, mut aligned) = (Instant::now(), handle.counters(), true);
    let mut at = 0;
    while at < n {
        let m = piece_end(at, n, cut, shared.copy_piece) - at;
        let tail = slot
            .buf()
            .tail_mut(at)
            .map_err(|e| device_error(token, e))?;
        let Some(target) = tail.get_mut(..m) else {
            // Unreachable: chunks are at most slot_bytes long and the slot is slot_bytes.
            return Err(token.shutdown_error());
        };
        aligned &= direct_ok(align, r0 + at as u64, m, target.as_ptr());
        if let Err(source) = handle.read_exact_at(target, r0 + at as u64) {
            read_done(shared, handle, before, aligned, t0.elapsed(), (r0, n));
            return Err(read_error(shared, token, source));
        }
        // The chunk's own bytes in this piece (the widened head and tail are not copied).
        let (c0, c1) = (at.max(head), (at + m).min(head + len));
        if c0 < c1 {
            let ti = Instant::now();
            shared
                .device
                .copy_h2d_leased(slot.buf(), c0, lease, dst_offset + (c0 - head), c1 - c0)
                .map_err(|e| device_error(token, e))?;
            copies.issue += ti.elapsed();
            copies.pieces += 1;
        }
        at += m;
    }
    let read = t0.elapsed().saturating_sub(copies.issue);
    read_done(shared, handle, before, aligned, read, (r0, n));
    Ok(copies)
}

/// Counts a staged read (`range`: file offset and length read) and drops it from the page
/// cache on cold engines.
fn read_done(
    shared: &Shared,
    handle: &mut dyn ReadAt,
    before: ds4_io::ReadCounters,
    aligned: bool,
    took: std::time::Duration,
    range: (u64, usize),
) {
    let path = ReadPath::between(before, handle.counters(), aligned);
    if shared.cold {
        handle.drop_cache(range.0, range.1 as u64);
    }
    shared.stats.chunk_read(took, path, true);
}

fn device_error(token: &ChunkToken, source: crate::device::DeviceError) -> EngineError {
    EngineError::Device {
        offset: token.offset,
        len: token.len as u64,
        label: token.label.clone(),
        source,
    }
}

/// The completer thread: waits copy events in issue order, recycles slots, finishes chunks.
pub(crate) fn completer(rx: Receiver<InFlight>, stats: Arc<Stats>) {
    while let Some(mut f) = crate::device::handoff::recv(&rx) {
        let ev = match stats.trace.on() {
            true => f.slot.buf().event().cloned(),
            false => None,
        };
        let r = f.slot.buf().wait();
        stats.copy(f.issued.elapsed());
        let InFlight {
            slot,
            token,
            taken,
            started,
            issue,
            issued,
        } = f;
        drop(slot); // back to the ring: its copy is over
        stats.slot_held(taken.elapsed());
        if stats.trace.on() {
            let (handed, seen) = ev.map_or((None, None), |e| e.times());
            stats.trace.chunk(&ChunkTimes {
                handed,
                seen,
                offset: token.offset,
                len: token.len as u64,
                taken,
                started,
                issue,
                issued,
                done: Instant::now(),
            });
        }
        let r = r.map_err(|source| device_error(&token, source));
        token.finish(r);
    }
}

/// Everything the dispatcher thread owns.
pub(crate) struct Dispatcher {
    pub(crate) shared: Arc<Shared>,
    pub(crate) pool: ReaderPool,
    pub(crate) requests: Receiver<Pending>,
    /// Disconnected when the engine is dropped.
    pub(crate) stop: Receiver<()>,
    pub(crate) free: Receiver<PinnedBuf>,
    pub(crate) free_home: Sender<PinnedBuf>,
    pub(crate) done: Sender<InFlight>,
}

impl Dispatcher {
    fn stopping(&self) -> bool {
        matches!(self.stop.try_recv(), Err(TryRecvError::Disconnected))
    }

    pub(crate) fn run(self) {
        loop {
            if self.stopping() {
                break;
            }
            select! {
                recv(self.requests) -> p => match p {
                    Ok(p) => self.dispatch(p),
                    Err(_) => break,
                },
                recv(self.stop) -> _ => break,
            }
        }
        // Stopping: whatever was submitted but not planned fails with Shutdown.
        while let Ok(p) = self.requests.try_recv() {
            self.fail_all(p);
        }
        // Dropping the pool cancels queued jobs (their tokens fail with Shutdown, their slots
        // return) and joins the workers after their current job.
        drop(self.pool);
    }

    fn fail_all(&self, p: Pending) {
        for it in &p.items {
            let (c, a) = (self.shared.slot_bytes, GRID_ALIGN);
            let planned: Box<dyn Iterator<Item = (u64, usize, usize)>> =
                if it.lease.buffer().host_visible() {
                    Box::new(host_chunks(it.offset, it.len, c, a))
                } else {
                    Box::new(chunks(it.offset, it.len, c, a))
                };
            for (off, len, _) in planned {
                let t = ChunkToken::new(Arc::clone(&p.state), off, len, it.label.clone(), None);
                let e = t.shutdown_error();
                t.finish(Err(e));
            }
        }
    }

    /// Takes a free slot, blocking when the ring is empty (timed: the stall signal). `None` when
    /// the engine is stopping.
    fn acquire(&self) -> Option<PinnedBuf> {
        match self.free.try_recv() {
            Ok(b) => return Some(b),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => {}
        }
        let t0 = Instant::now();
        let got = select! {
            recv(self.free) -> b => b.ok(),
            recv(self.stop) -> _ => None,
        };
        self.shared.stats.stall(t0.elapsed());
        got
    }

    fn dispatch(&self, p: Pending) {
        let Pending { state, items } = p;
        let mut stopped = false;
        for it in items {
            let host_visible = it.lease.buffer().host_visible();
            // The item's lease moves into its chunks' tokens (the last one takes the original),
            // so none stays behind here once the chunks can complete.
            let mut lease = Some(it.lease);
            let (c, a) = (self.shared.slot_bytes, GRID_ALIGN);
            let planned: Box<dyn Iterator<Item = (u64, usize, usize)>> = if host_visible {
                Box::new(host_chunks(it.offset, it.len, c, a))
            } else {
                Box::new(chunks(it.offset, it.len, c, a))
            };
            let mut planned = planned.peekable();
            while let Some((off, len, rel)) = planned.next() {
                let share = if planned.peek().is_some() {
                    lease.clone()
                } else {
                    lease.take()
                };
                let token = ChunkToken::new(Arc::clone(&state), off, len, it.label.clone(), share);
                stopped = stopped || self.stopping();
                if stopped {
                    let e = token.shutdown_error();
                    token.finish(Err(e));
                    continue;
                }
                let dst_offset = it.dst_offset + rel;
                if host_visible {
                    self.pool.submit(Box::new(DirectJob {
                        shared: Arc::clone(&self.shared),
                        dst_offset,
                        token,
                    }));
                    continue;
                }
                let Some(buf) = self.acquire() else {
                    stopped = true;
                    let e = token.shutdown_error();
                    token.finish(Err(e));
                    continue;
                };
                self.pool.submit(Box::new(StagedJob {
                    shared: Arc::clone(&self.shared),
                    slot: SlotGuard {
                        buf: Some(buf),
                        home: self.free_home.clone(),
                    },
                    dst_offset,
                    token,
                    done: self.done.clone(),
                    taken: Instant::now(),
                    seat: self.shared.ramp.as_ref().map(Ramp::seat),
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_ok_needs_everything_aligned() {
        let p = std::ptr::without_provenance::<u8>(4096);
        assert!(direct_ok(Some(4096), 8192, 4096, p));
        assert!(!direct_ok(Some(4096), 8193, 4096, p));
        assert!(!direct_ok(Some(4096), 8192, 4095, p));
        assert!(!direct_ok(
            Some(4096),
            8192,
            4096,
            std::ptr::without_provenance::<u8>(4097)
        ));
        assert!(!direct_ok(None, 0, 4096, p));
    }

    #[test]
    fn pieces_tile_the_read_with_the_ramp_head_first() {
        for (n, head, piece) in [
            (100usize, 0usize, 0usize),
            (100, 30, 0),
            (100, 30, 20),
            (100, 0, 40),
            (100, 100, 0),
            (100, 150, 7),
            (1, 0, 4096),
        ] {
            let mut ends = vec![];
            let mut at = 0;
            while at < n {
                let e = piece_end(at, n, head, piece);
                assert!(e > at && e <= n, "{n} {head} {piece}: {at} -> {e}");
                ends.push(e);
                at = e;
            }
            if head > 0 && head < n {
                assert_eq!(ends[0], head);
            }
            let rest = if head > 0 && head < n { n - head } else { n };
            let want = 1
                + usize::from(head > 0 && head < n)
                + match piece {
                    0 => 0,
                    p => rest.div_ceil(p) - 1,
                };
            assert_eq!(ends.len(), want, "{n} {head} {piece}: {ends:?}");
        }
    }
}
