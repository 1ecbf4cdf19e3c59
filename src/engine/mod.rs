//! The streaming engine: file ranges -> reader pool -> staging ring -> async device copies ->
//! tickets. See docs/ARCHITECTURE.md for the data path and its threads.
//!
//! - [`Engine::submit`] validates a batch of [`ReadRequest`]s (range inside the file, inside the
//!   destination, destinations not already being written), and returns a [`Ticket`] at once.
//! - The dispatcher thread splits ranges into chunks of at most `slot_bytes` (windows of
//!   `slot_bytes` on a grid anchored at the request's offset rounded down to 4096, so every chunk
//!   but the first starts aligned and a request that fits a slot is one read), takes a free
//!   staging slot per chunk (blocking: the stall statistic) and queues a job on the reader pool;
//!   host-visible destinations are read into directly, without a slot.
//! - [`Engine::submit_bytes`] / [`Engine::read_bytes`] read into recycled, pre-faulted host
//!   buffers (widened to 4096 so the unbuffered path applies) and hand out `Bytes` over them.
//! - A reader worker reads the chunk with its own handle, queues the copy slot -> destination on
//!   the device stream (an event is recorded in the slot) and hands the slot to the completer,
//!   which waits the event, returns the slot to the ring and finishes the chunk. No synchronize
//!   per chunk: reads of later chunks overlap copies of earlier ones.
//!
//! Limits: one dispatcher (planning is cheap next to IO), one device stream, chunks of one
//! request complete in any order; a failed chunk fails its whole request (first error wins).

pub mod depth_tuner;
mod error;
mod grid;
mod hostpool;
mod pipeline;
pub mod range_copy;
mod request;
mod stats;
mod trace;

pub use error::EngineError;
/// The chunk planner, public only for the `plan_chunks` fuzz target and its regression test.
#[doc(hidden)]
pub use grid::{
    chunk_count as plan_chunk_count, chunks as plan_chunks, widen as plan_widen,
    GRID_ALIGN as PLAN_GRID_ALIGN,
};
pub use hostpool::HostPoolStats;
pub use request::{ReadRequest, Ticket, TicketWatch};
pub use stats::{Latency, StatsSnapshot};

use crate::device::{Device, DeviceBuffer, PINNED_ALIGN};
use bytes::Bytes;
use crossbeam_channel::{bounded, unbounded, Sender};
use ds4_io::{FileSource, OpenConfig, PoolConfig, ReaderPool, Source};
use grid::{chunk_count, GRID_ALIGN};
use hostpool::HostPool;
use pipeline::{Dispatcher, Item, Pending, Shared};
use request::{Completion, RequestState};
use stats::Stats;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::JoinHandle;

/// Largest staging slot accepted (a chunk is read in one call).
pub const MAX_SLOT_BYTES: usize = 1 << 30;
/// Largest staging ring accepted (slots x slot_bytes); pinned memory is precious.
pub const MAX_STAGING_BYTES: u64 = 64 << 30;
/// Most reader workers accepted.
pub const MAX_WORKERS: usize = 1024;

/// Default [`EngineConfig::copy_piece`]: 0, one read and one copy per chunk. Measured on an
/// H100 (docs/BENCHMARKS.md, issue 18): pieces of 2 MiB, 1 MiB, 512 KiB and 256 KiB gave
/// 0.97-1.0x, 0.87x, 0.66x and 0.31x the unpieced rate: every piece is a copy call on the one
/// copy stream, and the calls of 16 readers queue behind each other (the `issue` histogram).
pub const DEFAULT_COPY_PIECE: usize = 0;

/// Default of [`EngineConfig::ramp`] when neither the config nor `DS4_RAMP` says: off, since
/// on an H100 the ramp lost 4-9 % on the staged expert pattern and up to 7 % in decode
/// (docs/BENCHMARKS.md, "Issue 18", runs 9-10: small copies of freshly read memory are slow).
pub const DEFAULT_RAMP: bool = false;

/// The environment switch for [`EngineConfig::ramp`] (`on`/`1` or `off`/`0`).
pub const RAMP_ENV: &str = "DS4_RAMP";

/// Engine settings. Defaults: 18 workers, 32 slots x 4 MiB (128 MiB pinned), direct IO on.
#[derive(Clone, Debug, serde::Serialize)]
pub struct EngineConfig {
    /// Reader threads, each with its own file handle.
    pub workers: usize,
    /// Staging slots in the ring (chunks that can be between "read" and "copied" at once).
    pub slots: usize,
    /// Bytes per staging slot = the largest chunk; a multiple of 4096.
    pub slot_bytes: usize,
    /// Use the unbuffered path (O_DIRECT / NO_BUFFERING) where aligned; `Engine::open` passes it
    /// to the file, and staged reads are widened to the handle's alignment.
    pub direct: bool,
    /// Drop each chunk from the page cache after reading it (cold benchmarks).
    pub cold: bool,
    /// Jobs that may wait for a reader before the dispatcher blocks.
    pub queue_depth: usize,
    /// Free host buffers `read_bytes` keeps for reuse (bytes; buffers in use are not counted).
    pub host_pool_bytes: usize,
    /// Staged chunks are read in pieces of this many bytes, and each piece's copy to the device
    /// is issued as soon as it is read (a multiple of 4096; 0 = one read and one copy per
    /// chunk). Smaller pieces overlap reads with copies more tightly at more copy calls.
    pub copy_piece: usize,
    /// Ramp the start of a burst of staged reads: while fewer staged chunks than workers are
    /// in flight, a new chunk's read is cut in two, its first `(j + 1) / (workers + 1)` (j =
    /// chunks already in flight) read and its copy queued before the rest, so the copy link
    /// starts on the first short piece instead of idling until whole slots are read (the
    /// trace of run 8: ~470 us idle of a 1636 us token). `None` = `DS4_RAMP` or
    /// [`DEFAULT_RAMP`].
    pub ramp: Option<bool>,
    /// `Some(n)`: only `n` of the workers read at a time, changeable while the engine runs
    /// ([`Engine::set_active_readers`]); chunks beyond them wait queued, so a reader that
    /// finishes starts the next at once. For cold copies that measure how many reads in flight
    /// the disk wants (`range_copy`'s depth tuner). `None` (default): every worker reads.
    pub active_readers: Option<usize>,
}

impl EngineConfig {
    /// [`EngineConfig::ramp`] resolved against `DS4_RAMP` (ignored unless on/off).
    pub fn ramp_on(&self) -> bool {
        self.ramp
            .or_else(|| crate::knobs::env_switch(RAMP_ENV))
            .unwrap_or(DEFAULT_RAMP)
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            workers: 18,
            slots: 32,
            slot_bytes: 4 << 20,
            direct: true,
            cold: false,
            queue_depth: 64,
            host_pool_bytes: 256 << 20,
            copy_piece: DEFAULT_COPY_PIECE,
            ramp: None,
            active_readers: None,
        }
    }
}

impl EngineConfig {
    /// The checks [`Engine::open`] makes, for programs that refuse bad flags before any work.
    pub fn validate(&self) -> Result<(), EngineError> {
        let bad = |m: String| Err(EngineError::Config(m));
        if self.workers == 0 || self.workers > MAX_WORKERS {
            return bad(format!("workers {} not in 1..={MAX_WORKERS}", self.workers));
        }
        if self.slots == 0 {
            return bad("slots must be at least 1".into());
        }
        if self.slot_bytes == 0
            || self.slot_bytes % PINNED_ALIGN != 0
            || self.slot_bytes > MAX_SLOT_BYTES
        {
            return bad(format!(
                "slot_bytes {} must be a non-zero multiple of {PINNED_ALIGN} up to {MAX_SLOT_BYTES}",
                self.slot_bytes
            ));
        }
        if (self.slots as u64)
            .checked_mul(self.slot_bytes as u64)
            .is_none_or(|b| b > MAX_STAGING_BYTES)
        {
            return bad(format!(
                "{} slots of {} bytes exceed the staging limit of {MAX_STAGING_BYTES} bytes",
                self.slots, self.slot_bytes
            ));
        }
        if let Some(n) = self.active_readers {
            if n == 0 || n > self.workers {
                return bad(format!(
                    "active_readers {n} not in 1..={} (the workers)",
                    self.workers
                ));
            }
        }
        if self.queue_depth == 0 {
            return bad("queue_depth must be at least 1".into());
        }
        if self.copy_piece % GRID_ALIGN as usize != 0 {
            return bad(format!(
                "copy_piece {} must be 0 or a multiple of {GRID_ALIGN}",
                self.copy_piece
            ));
        }
        Ok(())
    }
}

/// The streaming engine. Dropping it completes every outstanding ticket (Ok when its reads
/// finished, else `Shutdown`), joins its threads and frees the staging ring.
pub struct Engine {
    shared: Arc<Shared>,
    host_pool: HostPool,
    cfg: EngineConfig,
    requests: Option<Sender<Pending>>,
    stop: Option<Sender<()>>,
    dispatcher: Option<JoinHandle<()>>,
    completer: Option<JoinHandle<()>>,
    active: Option<ds4_io::ActiveLimit>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("path", &self.shared.source.path())
            .field("device", &self.shared.device.name())
            .field("cfg", &self.cfg)
            .finish()
    }
}

impl Engine {
    /// Starts an engine on `source`: allocates the staging ring once (pinned memory on GPUs),
    /// opens one handle per worker, starts the dispatcher and completer threads.
    pub fn new(
        source: Arc<dyn Source>,
        device: Arc<dyn Device>,
        cfg: EngineConfig,
    ) -> Result<Engine, EngineError> {
        cfg.validate()?;
        let (free_home, free) = bounded(cfg.slots);
        for _ in 0..cfg.slots {
            let slot =
                device
                    .alloc_pinned(cfg.slot_bytes)
                    .map_err(|source| EngineError::Staging {
                        slots: cfg.slots,
                        slot_bytes: cfg.slot_bytes,
                        source,
                    })?;
            // The channel holds exactly `slots` buffers and the receiver is alive.
            let _ = free_home.send(slot);
        }
        let pool = ReaderPool::new(
            Arc::clone(&source),
            &PoolConfig {
                workers: cfg.workers,
                queue_depth: cfg.queue_depth,
                name: "ds4-read".into(),
                active: cfg.active_readers,
            },
        )
        .map_err(|source| EngineError::Workers { source })?;
        let active = pool.active_limit().cloned();
        let shared = Arc::new(Shared {
            source,
            device,
            stats: Arc::new(Stats::new()),
            slot_bytes: cfg.slot_bytes,
            align_reads: cfg.direct,
            cold: cfg.cold,
            copy_piece: cfg.copy_piece,
            ramp: cfg.ramp_on().then(|| pipeline::Ramp {
                workers: cfg.workers,
                in_flight: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            }),
        });
        let (done_tx, done_rx) = unbounded();
        let stats = Arc::clone(&shared.stats);
        let completer = std::thread::Builder::new()
            .name("ds4-complete".into())
            .spawn(move || pipeline::completer(done_rx, stats))
            .map_err(EngineError::Thread)?;
        let (req_tx, req_rx) = unbounded();
        let (stop_tx, stop_rx) = bounded(0);
        let d = Dispatcher {
            shared: Arc::clone(&shared),
            pool,
            requests: req_rx,
            stop: stop_rx,
            free,
            free_home,
            done: done_tx,
        };
        // On spawn failure the closure (and the dispatcher with its sender) is dropped, so the
        // completer sees its channel close and exits: nothing leaks.
        let dispatcher = match std::thread::Builder::new()
            .name("ds4-dispatch".into())
            .spawn(move || d.run())
        {
            Ok(t) => t,
            Err(e) => {
                let _ = completer.join();
                return Err(EngineError::Thread(e));
            }
        };
        Ok(Engine {
            shared,
            host_pool: HostPool::new(cfg.host_pool_bytes),
            cfg,
            requests: Some(req_tx),
            stop: Some(stop_tx),
            dispatcher: Some(dispatcher),
            completer: Some(completer),
            active,
        })
    }

    /// Lets `n` readers (clamped to 1..=workers) read at a time from now on; returns the count
    /// set, or `None` when the engine was opened without [`EngineConfig::active_readers`].
    /// Reads already running finish; a reader above a lowered count may take one more chunk.
    pub fn set_active_readers(&self, n: usize) -> Option<usize> {
        self.active.as_ref().map(|a| a.set(n))
    }

    /// Readers allowed to read at a time now (`None`: every worker, no limit configured).
    pub fn active_readers(&self) -> Option<usize> {
        self.active.as_ref().map(|a| a.get())
    }

    /// Opens `path` with [`FileSource`] (direct IO per `cfg.direct`) and starts an engine on it.
    pub fn open(
        path: impl AsRef<Path>,
        device: Arc<dyn Device>,
        cfg: EngineConfig,
    ) -> Result<Engine, EngineError> {
        let path = path.as_ref();
        let src = FileSource::open(
            path,
            OpenConfig {
                direct: cfg.direct,
                drop_cache: false, // the engine advises per chunk itself when cfg.cold
                // Cached bytes are read from the page cache unless cold reads are asked for.
                use_cache: !cfg.cold,
            },
        )
        .map_err(|source| EngineError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        Engine::new(src, device, cfg)
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    pub fn source(&self) -> &Arc<dyn Source> {
        &self.shared.source
    }

    pub fn device(&self) -> &Arc<dyn Device> {
        &self.shared.device
    }

    /// Length of the source file in bytes.
    pub fn file_len(&self) -> u64 {
        self.shared.source.len()
    }

    /// Submits a batch; the ticket completes when every range has arrived (or the first error).
    /// Validation errors return here and nothing is read. Never blocks on IO.
    pub fn submit(&self, reqs: Vec<ReadRequest>) -> Result<Ticket, EngineError> {
        let file_len = self.shared.source.len();
        let mut items = Vec::with_capacity(reqs.len());
        let mut chunks: u64 = 0;
        for r in reqs {
            let in_file = r
                .offset
                .checked_add(r.len as u64)
                .is_some_and(|e| e <= file_len);
            if !in_file {
                return Err(EngineError::OutOfFile {
                    path: self.shared.source.path().to_path_buf(),
                    offset: r.offset,
                    len: r.len as u64,
                    file_len,
                    label: r.label,
                });
            }
            let in_buf = r
                .dst_offset
                .checked_add(r.len)
                .is_some_and(|e| e <= r.dst.len());
            if !in_buf {
                return Err(EngineError::OutOfBuffer {
                    dst_offset: r.dst_offset as u64,
                    len: r.len as u64,
                    dst_len: r.dst.len() as u64,
                    label: r.label,
                });
            }
            // Dropping `items` on an early return releases the leases already taken.
            let lease = match r.dst.lease_write(r.dst_offset, r.len) {
                Ok(l) => Arc::new(l),
                Err(_) => {
                    return Err(EngineError::DestinationBusy {
                        dst_offset: r.dst_offset as u64,
                        len: r.len as u64,
                        label: r.label,
                    })
                }
            };
            // Cannot overflow: each item has at most file_len / 4096 + 2 chunks.
            let count = if r.dst.host_visible() {
                grid::host_chunk_count
            } else {
                chunk_count
            };
            chunks = chunks.saturating_add(count(r.offset, r.len, self.cfg.slot_bytes, GRID_ALIGN));
            items.push(Item {
                offset: r.offset,
                len: r.len,
                lease,
                dst_offset: r.dst_offset,
                label: r.label,
            });
        }
        let completion = Arc::new(Completion::default());
        let ticket = Ticket::new(Arc::clone(&completion));
        let leases = items.iter().map(|it| Arc::clone(&it.lease)).collect();
        let state = RequestState::new(chunks, leases, completion, Arc::clone(&self.shared.stats));
        if chunks > 0 {
            if let Some(tx) = &self.requests {
                // If the dispatcher is gone, the Pending is dropped here and its RequestState
                // completes the ticket with Shutdown.
                let _ = tx.send(Pending { state, items });
            }
        }
        Ok(ticket)
    }

    /// Submits one range into page-aligned host memory from the engine's pool of recycled,
    /// pre-faulted buffers (read straight into it, no bounce, no allocation in the steady
    /// state); the result is a `Bytes` over that memory, which returns to the pool when the last
    /// clone of the `Bytes` drops. The read is widened to 4096-byte boundaries (inside the file)
    /// so that the unbuffered path applies whatever `offset` is; the `Bytes` shows exactly
    /// `[offset, offset + len)`.
    pub fn submit_bytes(&self, offset: u64, len: usize) -> Result<BytesTicket, EngineError> {
        // Validate before allocating, so a hostile length cannot allocate.
        let file_len = self.shared.source.len();
        if offset.checked_add(len as u64).is_none_or(|e| e > file_len) {
            return Err(EngineError::OutOfFile {
                path: self.shared.source.path().to_path_buf(),
                offset,
                len: len as u64,
                file_len,
                label: None,
            });
        }
        let (r0, r1) = if len == 0 {
            (offset, offset)
        } else {
            // Never larger than the slot: a widened read that fits no slot would be split at
            // the grid; usize::MAX = no such limit here (host-visible reads need no slot).
            grid::widen(offset, len, Some(GRID_ALIGN as usize), file_len, usize::MAX)
        };
        let n = (r1 - r0) as usize; // <= len + 8190, and len was checked against the file
        let buf = Arc::new(
            self.host_pool
                .get(n)
                .map_err(|_| EngineError::OutOfMemory { bytes: n as u64 })?,
        );
        let ticket = self.submit(vec![ReadRequest::new(r0, n, Arc::clone(&buf), 0)])?;
        Ok(BytesTicket {
            ticket,
            buf,
            head: (offset - r0) as usize,
            len,
        })
    }

    /// Counters of the host buffer pool behind [`Self::read_bytes`].
    pub fn host_pool_stats(&self) -> HostPoolStats {
        self.host_pool.stats()
    }

    /// Reads `[offset, offset + len)` into fresh host memory, blocking.
    pub fn read_bytes(&self, offset: u64, len: usize) -> Result<Bytes, EngineError> {
        self.submit_bytes(offset, len)?.wait()
    }

    /// Async [`Self::read_bytes`].
    pub async fn read_bytes_async(&self, offset: u64, len: usize) -> Result<Bytes, EngineError> {
        self.submit_bytes(offset, len)?.await
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot()
    }

    pub fn reset_stats(&self) {
        self.shared.stats.reset();
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Disconnecting `stop` wakes the dispatcher wherever it waits (next request, free slot);
        // it fails unplanned chunks with Shutdown, then drops the pool (queued jobs cancelled,
        // running ones finish). The completer drains in-flight copies and exits once the last
        // job is gone. Every ticket has completed when both threads are joined.
        self.stop = None;
        self.requests = None;
        if let Some(t) = self.dispatcher.take() {
            let _ = t.join();
        }
        if let Some(t) = self.completer.take() {
            let _ = t.join();
        }
    }
}

/// A pending [`Engine::submit_bytes`]: `wait()` or `.await` for the bytes.
#[must_use = "a ticket says when the bytes have arrived"]
pub struct BytesTicket {
    ticket: Ticket,
    buf: Arc<DeviceBuffer>,
    /// The caller's bytes are `buf[head..head + len]` (the read was widened).
    head: usize,
    len: usize,
}

impl BytesTicket {
    /// True when the read has completed (ok or not): `wait` then returns at once.
    pub fn is_done(&self) -> bool {
        self.ticket.is_done()
    }

    pub fn wait(self) -> Result<Bytes, EngineError> {
        self.ticket.wait()?;
        Ok(into_bytes(self.buf).slice(self.head..self.head + self.len))
    }
}

impl Future for BytesTicket {
    type Output = Result<Bytes, EngineError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.ticket).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Ready(Ok(())) => Poll::Ready(Ok(
                into_bytes(Arc::clone(&self.buf)).slice(self.head..self.head + self.len)
            )),
        }
    }
}

/// Host memory a finished `read_bytes` landed in, exposed read-only.
struct HostBytes {
    _buf: Arc<DeviceBuffer>,
    addr: usize,
    len: usize,
}

impl AsRef<[u8]> for HostBytes {
    fn as_ref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `addr` is the start of `buf`'s host memory, valid for `len` bytes while `buf`
        // lives (held here; pooled memory returns to the pool only when the DeviceBuffer drops).
        // The buffer never left this module, its one request has completed (its write lease is
        // released and no engine thread writes it again), so nothing mutates it any more.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }
}

fn into_bytes(buf: Arc<DeviceBuffer>) -> Bytes {
    let len = buf.len();
    match buf.host_ptr_at(0) {
        Some(p) => Bytes::from_owner(HostBytes {
            addr: p as usize,
            len,
            _buf: buf,
        }),
        None => Bytes::new(), // DeviceBuffer::host is always host-visible
    }
}
