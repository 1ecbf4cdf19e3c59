//! Per-engine statistics: counters (atomics) and latency histograms (hdrhistogram, microseconds).
//!
//! Why: the benchmark and the decode loop need to see where time goes: reading (chunk read
//! latency), copying (issue to event completion), whole requests, and the stall signal (time the
//! dispatcher waited for a free staging slot: the ring is too small or copies too slow). A staged
//! chunk's life is timed stage by stage: slot taken → read started (`queued`: waiting for a
//! reader), the read, the copy calls (`issue`: time inside the backend's copy call, all pieces),
//! last copy issued → completion seen (`copy`), slot taken → slot back in the ring (`slot_held`).
//! Histograms are behind one mutex each; they are touched once per chunk, not per byte.

use super::trace::StageTrace;
use ds4_io::ReadCounters;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// Highest latency tracked exactly (1 hour in microseconds); longer values saturate.
const MAX_US: u64 = 3_600_000_000;

fn new_hist() -> Histogram<u64> {
    // Bounds are constants that hdrhistogram accepts (low >= 1, high >= 2 * low, sigfig <= 5).
    Histogram::new_with_bounds(1, MAX_US, 3).unwrap_or_else(|_| unreachable!("constant bounds"))
}

struct Hist(Mutex<Histogram<u64>>);

impl Hist {
    fn new() -> Self {
        Self(Mutex::new(new_hist()))
    }
    fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .saturating_record(us.min(MAX_US));
    }
    fn snapshot(&self) -> Latency {
        let h = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Latency {
            count: h.len(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            max_us: h.max(),
            mean_us: h.mean(),
        }
    }
    fn reset(&self) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .reset();
    }
}

/// A latency distribution in microseconds (0 everywhere when empty).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Latency {
    pub count: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
}

/// A copy of an engine's statistics at one moment.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct StatsSnapshot {
    /// Bytes delivered to destinations by successful chunks.
    pub bytes: u64,
    /// Requests completed (ok or failed).
    pub requests: u64,
    /// Requests that completed with an error.
    pub failed_requests: u64,
    /// Chunks read (ok or failed).
    pub chunks: u64,
    /// Chunks read entirely through the unbuffered path (as the handle reports it; for sources
    /// that report nothing: chunks whose offset, length and buffer were aligned for it).
    pub direct_chunks: u64,
    /// Chunks read (at least partly) through the page cache.
    pub buffered_chunks: u64,
    /// Chunks that could have gone unbuffered but were read from the page cache because the
    /// handle's cache probe found their bytes there (hot file).
    pub cache_hit_chunks: u64,
    /// Chunks the cache probe sent to the unbuffered path (bytes not cached).
    pub cache_miss_chunks: u64,
    /// Cache probes that failed for one chunk (it went unbuffered; the probe stays on).
    pub probe_errors: u64,
    /// Chunks that went through a staging slot and a device copy.
    pub staged_chunks: u64,
    /// Chunks read straight into host-visible destination memory (no copy).
    pub zero_copy_chunks: u64,
    /// Host-to-device copies issued for staged chunks (a chunk read in pieces issues one per
    /// piece, each as soon as that piece is read).
    pub copy_pieces: u64,
    /// Time to read one chunk from the source.
    pub chunk_read: Latency,
    /// Staged chunks: time from taking the slot to a reader starting the read.
    pub queued: Latency,
    /// Staged chunks: time spent inside the backend's copy calls (all pieces of the chunk).
    pub issue: Latency,
    /// Time from issuing a chunk's (last) copy to seeing its event complete.
    pub copy: Latency,
    /// Staged chunks: time from taking the slot to its return to the ring.
    pub slot_held: Latency,
    /// Time from `submit` to the request's completion.
    pub request: Latency,
    /// Each time the dispatcher found no free staging slot: how long it waited.
    pub stall: Latency,
    /// Sum of all stalls, microseconds.
    pub stall_total_us: u64,
}

/// Which way one chunk's read went (from the handle's counters around the read).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ReadPath {
    pub(crate) direct: bool,
    pub(crate) cache_hit: bool,
    pub(crate) cache_miss: bool,
    pub(crate) probe_error: bool,
}

impl ReadPath {
    /// From the handle's counters before and after the read; `aligned` (offset, length and
    /// address fit the handle's direct alignment) decides for handles that count nothing.
    pub(crate) fn between(before: ReadCounters, after: ReadCounters, aligned: bool) -> Self {
        let d = after.direct_bytes.wrapping_sub(before.direct_bytes);
        let b = after.buffered_bytes.wrapping_sub(before.buffered_bytes);
        Self {
            direct: if d + b > 0 { b == 0 } else { aligned },
            cache_hit: after.cache_hits != before.cache_hits,
            cache_miss: after.cache_misses != before.cache_misses,
            probe_error: after.probe_errors != before.probe_errors,
        }
    }
}

/// Live statistics, shared by the engine's threads.
pub(crate) struct Stats {
    bytes: AtomicU64,
    requests: AtomicU64,
    failed_requests: AtomicU64,
    chunks: AtomicU64,
    direct_chunks: AtomicU64,
    buffered_chunks: AtomicU64,
    cache_hit_chunks: AtomicU64,
    cache_miss_chunks: AtomicU64,
    probe_errors: AtomicU64,
    staged_chunks: AtomicU64,
    zero_copy_chunks: AtomicU64,
    copy_pieces: AtomicU64,
    stall_total_us: AtomicU64,
    chunk_read: Hist,
    queued: Hist,
    issue: Hist,
    copy: Hist,
    slot_held: Hist,
    request: Hist,
    stall: Hist,
    /// The optional per-chunk timeline (`DS4_STAGE_TRACE`).
    pub(crate) trace: StageTrace,
}

impl Stats {
    pub(crate) fn new() -> Self {
        Self {
            bytes: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            failed_requests: AtomicU64::new(0),
            chunks: AtomicU64::new(0),
            direct_chunks: AtomicU64::new(0),
            buffered_chunks: AtomicU64::new(0),
            cache_hit_chunks: AtomicU64::new(0),
            cache_miss_chunks: AtomicU64::new(0),
            probe_errors: AtomicU64::new(0),
            staged_chunks: AtomicU64::new(0),
            zero_copy_chunks: AtomicU64::new(0),
            copy_pieces: AtomicU64::new(0),
            stall_total_us: AtomicU64::new(0),
            chunk_read: Hist::new(),
            queued: Hist::new(),
            issue: Hist::new(),
            copy: Hist::new(),
            slot_held: Hist::new(),
            request: Hist::new(),
            stall: Hist::new(),
            trace: StageTrace::from_env(),
        }
    }

    /// A chunk was read along `path`; `staged` says whether it went through a slot.
    pub(crate) fn chunk_read(&self, took: Duration, path: ReadPath, staged: bool) {
        self.chunks.fetch_add(1, Ordering::Relaxed);
        let c = if path.direct {
            &self.direct_chunks
        } else {
            &self.buffered_chunks
        };
        c.fetch_add(1, Ordering::Relaxed);
        for (yes, c) in [
            (path.cache_hit, &self.cache_hit_chunks),
            (path.cache_miss, &self.cache_miss_chunks),
            (path.probe_error, &self.probe_errors),
        ] {
            if yes {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        let c = if staged {
            &self.staged_chunks
        } else {
            &self.zero_copy_chunks
        };
        c.fetch_add(1, Ordering::Relaxed);
        self.chunk_read.record(took);
    }

    pub(crate) fn delivered(&self, bytes: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn copy(&self, took: Duration) {
        self.copy.record(took);
    }

    /// A staged chunk's read started `queued` after its slot was taken; its `pieces` copies
    /// spent `issue` inside the backend's copy calls.
    pub(crate) fn staged(&self, queued: Duration, issue: Duration, pieces: u64) {
        self.queued.record(queued);
        self.issue.record(issue);
        self.copy_pieces.fetch_add(pieces, Ordering::Relaxed);
    }

    pub(crate) fn slot_held(&self, took: Duration) {
        self.slot_held.record(took);
    }

    pub(crate) fn request(&self, took: Duration, ok: bool) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.failed_requests.fetch_add(1, Ordering::Relaxed);
        }
        self.request.record(took);
    }

    pub(crate) fn stall(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.stall_total_us.fetch_add(us, Ordering::Relaxed);
        self.stall.record(took);
    }

    pub(crate) fn snapshot(&self) -> StatsSnapshot {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            bytes: ld(&self.bytes),
            requests: ld(&self.requests),
            failed_requests: ld(&self.failed_requests),
            chunks: ld(&self.chunks),
            direct_chunks: ld(&self.direct_chunks),
            buffered_chunks: ld(&self.buffered_chunks),
            cache_hit_chunks: ld(&self.cache_hit_chunks),
            cache_miss_chunks: ld(&self.cache_miss_chunks),
            probe_errors: ld(&self.probe_errors),
            staged_chunks: ld(&self.staged_chunks),
            zero_copy_chunks: ld(&self.zero_copy_chunks),
            copy_pieces: ld(&self.copy_pieces),
            chunk_read: self.chunk_read.snapshot(),
            queued: self.queued.snapshot(),
            issue: self.issue.snapshot(),
            copy: self.copy.snapshot(),
            slot_held: self.slot_held.snapshot(),
            request: self.request.snapshot(),
            stall: self.stall.snapshot(),
            stall_total_us: ld(&self.stall_total_us),
        }
    }

    pub(crate) fn reset(&self) {
        for a in [
            &self.bytes,
            &self.requests,
            &self.failed_requests,
            &self.chunks,
            &self.direct_chunks,
            &self.buffered_chunks,
            &self.cache_hit_chunks,
            &self.cache_miss_chunks,
            &self.probe_errors,
            &self.staged_chunks,
            &self.zero_copy_chunks,
            &self.copy_pieces,
            &self.stall_total_us,
        ] {
            a.store(0, Ordering::Relaxed);
        }
        for h in [
            &self.chunk_read,
            &self.queued,
            &self.issue,
            &self.copy,
            &self.slot_held,
            &self.request,
            &self.stall,
        ] {
            h.reset();
        }
    }
}
