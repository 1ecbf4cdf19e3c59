//! Sources that misbehave on purpose, for tests and stress benches: [`FaultySource`] injects
//! short reads, EINTR storms, EIO, latency, handle-open failures and bit flips into any
//! [`Source`]; [`ThrottledSource`] caps the bytes per second of all its handles together.
//!
//! Why here and public (not `cfg(test)`): the engine's error paths (a worker whose read fails, a
//! worker that never opened, a slow disk that makes the staging ring run dry, a corrupted byte
//! the verifier must catch) are tested from other crates and benches through these wrappers.
//!
//! How short reads and EINTR are modelled: the [`ReadAt`] contract is "exact", so a caller can
//! never see them. The faulty handle therefore runs the same exact-read loop as the platform
//! readers (`sys::exact_loop`) over an injected "system call" that sometimes returns EINTR (in
//! storms of several in a row) or fewer bytes than asked; each piece it does read goes to the
//! inner handle. That proves the loop hides them, and splits requests at random points, which
//! drives the inner handle's aligned/unaligned paths with odd-sized pieces.
//!
//! Determinism: each handle draws from its own generator seeded by [`FaultPlan::seed`] and the
//! handle's open order; op counting ([`FaultPlan::eio_at_op`]) is shared by all handles, so it
//! is exact in single-threaded tests and "about the Nth" with several workers.

use crate::error::ReadError;
use crate::file::{ReadAt, Source};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What to inject. `Default` injects nothing (a transparent wrapper). Probabilities are per
/// read call (`read_exact_at`) except `short_read_prob` and `eintr_prob`, which are per
/// injected system call.
#[derive(Clone, Debug, Default)]
pub struct FaultPlan {
    /// Seed of the per-handle generators.
    pub seed: u64,
    /// Probability that an injected system call returns fewer bytes than asked (at least 1).
    pub short_read_prob: f64,
    /// Probability that an injected system call starts an EINTR storm.
    pub eintr_prob: f64,
    /// Longest storm: a storm is 1..=this many EINTRs in a row (0 is taken as 1).
    pub eintr_storm_max: u32,
    /// The read call with this number (1-based, counted over all handles) fails with EIO.
    pub eio_at_op: Option<u64>,
    /// Probability that a read call fails with EIO.
    pub eio_prob: f64,
    /// Added to every read call.
    pub latency: Duration,
    /// Probability of a latency spike on a read call.
    pub spike_prob: f64,
    /// Length of a spike.
    pub spike: Duration,
    /// The `open_handle` call with this number (1-based) fails.
    pub fail_open_at: Option<u64>,
    /// Probability that a successful read comes back with one bit flipped (silent corruption:
    /// only a verifier can catch it).
    pub bit_flip_prob: f64,
}

/// An injected fault as it reaches the caller: the `source` of a [`ReadError`], or the error of
/// a failed `open_handle`. Find it with [`injected`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InjectedFault {
    #[error("injected I/O error (EIO) at read call {op}")]
    Eio { op: u64 },
    #[error("injected failure of open_handle call {call}")]
    OpenFailed { call: u64 },
}

/// The injected fault carried by `e`, if it is one: directly, or wrapped in a [`ReadError`] or
/// a pool's [`WorkerOpenError`](crate::pool::WorkerOpenError) (any chain of sources and
/// `io::Error` payloads).
pub fn injected(e: &io::Error) -> Option<&InjectedFault> {
    let mut cur: &(dyn std::error::Error + 'static) = e.get_ref()?;
    // Bounded walk: error chains are short; a cycle would be a bug elsewhere, not a hang here.
    for _ in 0..32 {
        if let Some(f) = cur.downcast_ref::<InjectedFault>() {
            return Some(f);
        }
        cur = match cur.downcast_ref::<io::Error>() {
            Some(io) => io.get_ref()?,
            None => cur.source()?,
        };
    }
    None
}

/// How many faults were injected so far (a snapshot of [`FaultySource`]'s counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// `read_exact_at` calls.
    pub reads: u64,
    /// `open_handle` calls.
    pub opens: u64,
    pub short_reads: u64,
    pub eintr: u64,
    pub eio: u64,
    pub spikes: u64,
    pub open_failures: u64,
    pub bit_flips: u64,
}

#[derive(Default)]
struct Counters {
    reads: AtomicU64,
    opens: AtomicU64,
    short_reads: AtomicU64,
    eintr: AtomicU64,
    eio: AtomicU64,
    spikes: AtomicU64,
    open_failures: AtomicU64,
    bit_flips: AtomicU64,
}

/// Wraps a [`Source`]; its handles inject the faults of a [`FaultPlan`].
pub struct FaultySource {
    inner: Arc<dyn Source>,
    plan: FaultPlan,
    counters: Arc<Counters>,
}

impl FaultySource {
    pub fn new(inner: Arc<dyn Source>, plan: FaultPlan) -> Self {
        Self {
            inner,
            plan,
            counters: Arc::default(),
        }
    }

    pub fn plan(&self) -> &FaultPlan {
        &self.plan
    }

    /// Faults injected so far, over all handles.
    pub fn counts(&self) -> FaultCounts {
        let c = &self.counters;
        FaultCounts {
            reads: c.reads.load(Relaxed),
            opens: c.opens.load(Relaxed),
            short_reads: c.short_reads.load(Relaxed),
            eintr: c.eintr.load(Relaxed),
            eio: c.eio.load(Relaxed),
            spikes: c.spikes.load(Relaxed),
            open_failures: c.open_failures.load(Relaxed),
            bit_flips: c.bit_flips.load(Relaxed),
        }
    }
}

impl Source for FaultySource {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn open_handle(&self) -> io::Result<Box<dyn ReadAt>> {
        let call = self.counters.opens.fetch_add(1, Relaxed) + 1;
        if self.plan.fail_open_at == Some(call) {
            self.counters.open_failures.fetch_add(1, Relaxed);
            return Err(io::Error::other(InjectedFault::OpenFailed { call }));
        }
        Ok(Box::new(FaultyHandle {
            inner: self.inner.open_handle()?,
            rng: Rng(self.plan.seed ^ call.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            plan: self.plan.clone(),
            counters: Arc::clone(&self.counters),
            path: self.inner.path().to_path_buf(),
            eintr_pending: 0,
        }))
    }
}

struct FaultyHandle {
    inner: Box<dyn ReadAt>,
    rng: Rng,
    plan: FaultPlan,
    counters: Arc<Counters>,
    path: std::path::PathBuf,
    eintr_pending: u32,
}

impl ReadAt for FaultyHandle {
    fn read_exact_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let op = self.counters.reads.fetch_add(1, Relaxed) + 1;
        if !self.plan.latency.is_zero() {
            std::thread::sleep(self.plan.latency);
        }
        if self.rng.chance(self.plan.spike_prob) {
            self.counters.spikes.fetch_add(1, Relaxed);
            std::thread::sleep(self.plan.spike);
        }
        let len = buf.len() as u64;
        if self.plan.eio_at_op == Some(op) || self.rng.chance(self.plan.eio_prob) {
            self.counters.eio.fetch_add(1, Relaxed);
            let e = io::Error::other(InjectedFault::Eio { op });
            return Err(ReadError::wrap(&self.path, offset, len, e));
        }

        let Self {
            inner,
            rng,
            plan,
            counters,
            eintr_pending,
            ..
        } = self;
        let mut calls = 0u64;
        let (_, err) = crate::sys::exact_loop(buf, offset, None, &mut calls, |piece, off| {
            if *eintr_pending == 0 && rng.chance(plan.eintr_prob) {
                *eintr_pending = 1 + rng.below(u64::from(plan.eintr_storm_max.max(1))) as u32;
            }
            if *eintr_pending > 0 {
                *eintr_pending -= 1;
                counters.eintr.fetch_add(1, Relaxed);
                return Err(io::ErrorKind::Interrupted.into());
            }
            let n = if piece.len() > 1 && rng.chance(plan.short_read_prob) {
                counters.short_reads.fetch_add(1, Relaxed);
                1 + rng.below(piece.len() as u64 - 1) as usize
            } else {
                piece.len()
            };
            inner.read_exact_at(&mut piece[..n], off)?;
            Ok(n)
        });
        if let Some(e) = err {
            // A real handle's error already names the path and the failing piece's range.
            return Err(if ReadError::find(&e).is_some() {
                e
            } else {
                ReadError::wrap(&self.path, offset, len, e)
            });
        }
        if !buf.is_empty() && self.rng.chance(self.plan.bit_flip_prob) {
            let i = self.rng.below(len) as usize;
            buf[i] ^= 1 << self.rng.below(8);
            self.counters.bit_flips.fetch_add(1, Relaxed);
        }
        Ok(())
    }

    crate::forward_read_at!(inner);
}

/// Wraps a [`Source`] so that all its handles together read at most `bytes_per_sec` (a slow
/// disk: makes the staging ring run dry so the stall accounting can be tested). Each read
/// reserves its share of a shared timeline and returns no earlier than its slot ends, so the
/// average rate over any window of several reads stays at or below the cap.
pub struct ThrottledSource {
    inner: Arc<dyn Source>,
    bytes_per_sec: u64,
    next_free: Arc<Mutex<Instant>>,
}

impl ThrottledSource {
    /// `bytes_per_sec` of 0 means no cap.
    pub fn new(inner: Arc<dyn Source>, bytes_per_sec: u64) -> Self {
        Self {
            inner,
            bytes_per_sec,
            next_free: Arc::new(Mutex::new(Instant::now())),
        }
    }

    pub fn bytes_per_sec(&self) -> u64 {
        self.bytes_per_sec
    }
}

impl Source for ThrottledSource {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn open_handle(&self) -> io::Result<Box<dyn ReadAt>> {
        Ok(Box::new(ThrottledHandle {
            inner: self.inner.open_handle()?,
            bytes_per_sec: self.bytes_per_sec,
            next_free: Arc::clone(&self.next_free),
        }))
    }
}

struct ThrottledHandle {
    inner: Box<dyn ReadAt>,
    bytes_per_sec: u64,
    next_free: Arc<Mutex<Instant>>,
}

impl ReadAt for ThrottledHandle {
    fn read_exact_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if self.bytes_per_sec == 0 {
            return self.inner.read_exact_at(buf, offset);
        }
        let share = Duration::from_secs_f64(buf.len() as f64 / self.bytes_per_sec as f64);
        let deadline = {
            // A panic elsewhere while holding this lock leaves a valid Instant: keep using it.
            let mut next = self.next_free.lock().unwrap_or_else(|p| p.into_inner());
            let start = (*next).max(Instant::now());
            *next = start + share;
            *next
        };
        let r = self.inner.read_exact_at(buf, offset);
        let now = Instant::now();
        if deadline > now {
            std::thread::sleep(deadline - now);
        }
        r
    }

    crate::forward_read_at!(inner);
}

/// splitmix64: tiny, seedable, good enough to pick fault points.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)`; 0 when `n` is 0.
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    /// True with probability `p` (no draw when `p <= 0`, so a zero plan stays deterministic).
    fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        ((self.next() >> 11) as f64) / ((1u64 << 53) as f64) < p
    }
}
