//! The engine's threads: the dispatcher (plans chunks, takes staging slots, feeds the reader
//! pool), the reader jobs (read a chunk, issue its copy) and the completer (waits for copy
//! events, recycles slots, finishes chunks).
//!
//! Slot life cycle: free ring -> dispatcher -> job (read into it, queue the copy, event recorded
//! in the slot) -> completer (waits the event) -> free ring. A slot is only ever in the free ring
//! after its copy's event has completed; on top of that `PinnedBuf::as_mut_slice` waits for the
//! event itself, so even a slot returned early could not be overwritten under a running copy.
//! A `SlotGuard` returns its slot when dropped on any path (error, cancel, shutdown).

use super::request::{ChunkToken, RequestState};
use super::stats::Stats;
use super::EngineError;
use crate::device::{Device, DeviceBuffer, PinnedBuf};
use crossbeam_channel::{select, Receiver, Sender, TryRecvError};
use ds4_io::{Job, ReadAt, ReaderPool, Source};
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
}

/// One range of a submitted batch, validated and leased.
pub(crate) struct Item {
    pub(crate) offset: u64,
    pub(crate) len: usize,
    pub(crate) dst: Arc<DeviceBuffer>,
    pub(crate) dst_offset: usize,
    pub(crate) label: Option<Arc<str>>,
}

/// A batch on its way to the dispatcher.
pub(crate) struct Pending {
    pub(crate) state: Arc<RequestState>,
    pub(crate) items: Vec<Item>,
}

/// Number of chunks `[offset, offset + len)` splits into when chunk boundaries sit at multiples
/// of `chunk` in file space (so every chunk but the first starts aligned).
pub fn chunk_count(offset: u64, len: usize, chunk: usize) -> u64 {
    if len == 0 {
        return 0;
    }
    let c = chunk as u64;
    let last = offset + (len as u64 - 1); // validated: offset + len <= file length
    last / c - offset / c + 1
}

/// The chunks of one item: (file offset, length, offset into the item).
pub fn chunks(offset: u64, len: usize, chunk: usize) -> impl Iterator<Item = (u64, usize, usize)> {
    let end = offset + len as u64;
    let c = chunk as u64;
    let mut pos = offset;
    std::iter::from_fn(move || {
        if pos >= end {
            return None;
        }
        let next = ((pos / c) + 1).saturating_mul(c).min(end);
        let item = (pos, (next - pos) as usize, (pos - offset) as usize);
        pos = next;
        Some(item)
    })
}

/// A staging slot on loan; returns to the ring when dropped.
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
}

/// True when the unbuffered path can serve this read on this handle.
fn direct_ok(align: Option<usize>, offset: u64, len: usize, ptr: *const u8) -> bool {
    match align {
        Some(a) if a.is_power_of_two() && len > 0 => {
            let m = a as u64 - 1;
            offset & m == 0 && len as u64 & m == 0 && (ptr as usize as u64) & m == 0
        }
        _ => false,
    }
}

/// Reads a chunk straight into host-visible destination memory.
struct DirectJob {
    shared: Arc<Shared>,
    dst: Arc<DeviceBuffer>,
    dst_offset: usize,
    token: ChunkToken,
}

impl Job for DirectJob {
    fn run(self: Box<Self>, handle: &mut dyn ReadAt) {
        let DirectJob {
            shared,
            dst,
            dst_offset,
            token,
        } = *self;
        let (offset, len) = (token.offset, token.len);
        let Some(p) = dst.host_ptr_at(dst_offset) else {
            let e = token.shutdown_error();
            return token.finish(Err(e));
        };
        // SAFETY: submit checked dst_offset + len <= dst.len(); the request holds a write lease
        // on this range (no other writer, no reader through read_d2h), chunks of one request are
        // disjoint, and `dst` (an Arc) keeps the memory alive for this call.
        let buf = unsafe { std::slice::from_raw_parts_mut(p, len) };
        let t0 = Instant::now();
        let direct = direct_ok(handle.direct_alignment(), offset, len, p);
        let r = handle.read_exact_at(buf, offset);
        if shared.cold {
            handle.drop_cache(offset, len as u64);
        }
        shared.stats.chunk_read(t0.elapsed(), direct, false);
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

/// Reads a chunk into a staging slot and queues its copy to the destination.
struct StagedJob {
    shared: Arc<Shared>,
    slot: SlotGuard,
    dst: Arc<DeviceBuffer>,
    dst_offset: usize,
    token: ChunkToken,
    done: Sender<InFlight>,
}

impl Job for StagedJob {
    fn run(self: Box<Self>, handle: &mut dyn ReadAt) {
        let StagedJob {
            shared,
            mut slot,
            dst,
            dst_offset,
            token,
            done,
        } = *self;
        let (offset, len) = (token.offset, token.len);
        // Widen the read to the handle's alignment so the unbuffered path applies; chunk
        // boundaries sit at multiples of slot_bytes (a multiple of 4096), so the widened range
        // still fits the slot unless the alignment is larger than that. Never past the file end.
        let align = handle.direct_alignment();
        let (start, end) = (offset, offset + len as u64);
        let (r0, r1) = match align {
            Some(a) if shared.align_reads && a.is_power_of_two() => {
                let m = a as u64 - 1;
                let r0 = start & !m;
                let r1 = end
                    .checked_add(m)
                    .map_or(end, |e| e & !m)
                    .min(shared.source.len());
                if r1 - r0 <= slot.buf().len() as u64 {
                    (r0, r1)
                } else {
                    (start, end)
                }
            }
            _ => (start, end),
        };
        let n = (r1 - r0) as usize;
        let head = (start - r0) as usize;
        let buf = match slot.buf().as_mut_slice() {
            Ok(b) => b,
            Err(source) => {
                let e = device_error(&token, source);
                return token.finish(Err(e));
            }
        };
        let Some(target) = buf.get_mut(..n) else {
            // Unreachable: chunks are at most slot_bytes long and the slot is slot_bytes.
            let e = token.shutdown_error();
            return token.finish(Err(e));
        };
        let t0 = Instant::now();
        let direct = direct_ok(align, r0, n, target.as_ptr());
        let r = handle.read_exact_at(target, r0);
        if shared.cold {
            handle.drop_cache(r0, n as u64);
        }
        shared.stats.chunk_read(t0.elapsed(), direct, true);
        if let Err(source) = r {
            let e = read_error(&shared, &token, source);
            return token.finish(Err(e));
        }
        let issued = Instant::now();
        if let Err(source) = shared
            .device
            .copy_h2d_async(slot.buf(), head, &dst, dst_offset, len)
        {
            let e = device_error(&token, source);
            return token.finish(Err(e));
        }
        // The completer lives until every job's sender is gone, so this cannot fail; if it did,
        // dropping the message still waits the event (slot guard) and fails the token (Lost).
        let _ = done.send(InFlight {
            slot,
            token,
            issued,
        });
    }

    fn cancel(self: Box<Self>) {
        let e = self.token.shutdown_error();
        self.token.finish(Err(e));
    }
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
    for mut f in rx.iter() {
        let r = f.slot.buf().wait();
        stats.copy(f.issued.elapsed());
        let InFlight { slot, token, .. } = f;
        drop(slot); // back to the ring: its copy is over
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
            for (off, len, _) in chunks(it.offset, it.len, self.shared.slot_bytes) {
                let t = ChunkToken::new(Arc::clone(&p.state), off, len, it.label.clone());
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
            for (off, len, rel) in chunks(it.offset, it.len, self.shared.slot_bytes) {
                let token = ChunkToken::new(Arc::clone(&state), off, len, it.label.clone());
                stopped = stopped || self.stopping();
                if stopped {
                    let e = token.shutdown_error();
                    token.finish(Err(e));
                    continue;
                }
                let dst_offset = it.dst_offset + rel;
                if it.dst.host_visible() {
                    self.pool.submit(Box::new(DirectJob {
                        shared: Arc::clone(&self.shared),
                        dst: Arc::clone(&it.dst),
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
                    dst: Arc::clone(&it.dst),
                    dst_offset,
                    token,
                    done: self.done.clone(),
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_split_at_multiples_and_cover_the_range() {
        for (off, len, c) in [
            (0u64, 10usize, 4usize),
            (3, 10, 4),
            (4, 8, 4),
            (7, 1, 4),
            ((1 << 32) - 5, 20, 8),
            (5, 0, 4),
        ] {
            let v: Vec<_> = chunks(off, len, c).collect();
            assert_eq!(v.len() as u64, chunk_count(off, len, c), "{off} {len} {c}");
            let mut pos = off;
            for &(o, l, rel) in &v {
                assert_eq!(o, pos);
                assert_eq!(rel as u64, o - off);
                assert!(l > 0 && l <= c);
                // Only the first chunk may start unaligned.
                assert!(o == off || o % c as u64 == 0);
                pos += l as u64;
            }
            assert_eq!(pos, off + len as u64);
        }
    }

    #[test]
    fn direct_ok_needs_everything_aligned() {
        let p = 4096 as *const u8;
        assert!(direct_ok(Some(4096), 8192, 4096, p));
        assert!(!direct_ok(Some(4096), 8193, 4096, p));
        assert!(!direct_ok(Some(4096), 8192, 4095, p));
        assert!(!direct_ok(Some(4096), 8192, 4096, 4097 as *const u8));
        assert!(!direct_ok(None, 0, 4096, p));
    }
}
