//! Helpers shared by the ds4-io integration tests (portable: they also run under Wine).
#![allow(dead_code)] // each test binary uses a different subset

use std::path::PathBuf;

/// A scratch directory on a real disk (cargo's target/tmp), not tmpfs: direct IO behaves like
/// it would on the model's disk. `DS4_IO_TEST_DIR` picks another place (e.g. a tmpfs, to see
/// the fallback taken). Removed when dropped.
pub fn scratch() -> tempfile::TempDir {
    let base = std::env::var_os("DS4_IO_TEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    let _ = std::fs::create_dir_all(&base);
    tempfile::Builder::new()
        .prefix("ds4-io-")
        .tempdir_in(&base)
        .expect("create scratch dir under CARGO_TARGET_TMPDIR")
}

/// splitmix64: a small deterministic generator for test offsets.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, n)` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub const GIB: u64 = 1 << 30;
pub const MIB: u64 = 1 << 20;

use ds4_io::{Job, ReadAt};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// How a counted job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ran,
    Cancelled,
}

/// Per-job completion counters: `ran[i]` / `cancelled[i]` count how often job `i` ended each way
/// (exactly-once means `ran[i] + cancelled[i] == 1` for every submitted job).
pub struct Ledger {
    pub ran: Vec<AtomicU32>,
    pub cancelled: Vec<AtomicU32>,
}

impl Ledger {
    pub fn new(n: usize) -> Arc<Self> {
        Arc::new(Self {
            ran: (0..n).map(|_| AtomicU32::new(0)).collect(),
            cancelled: (0..n).map(|_| AtomicU32::new(0)).collect(),
        })
    }
    pub fn totals(&self) -> (u64, u64) {
        let r = self
            .ran
            .iter()
            .map(|a| a.load(Ordering::SeqCst) as u64)
            .sum();
        let c = self
            .cancelled
            .iter()
            .map(|a| a.load(Ordering::SeqCst) as u64)
            .sum();
        (r, c)
    }
    /// Panics naming the first job that did not end exactly once.
    pub fn assert_exactly_once(&self, submitted: usize) {
        for i in 0..submitted {
            let (r, c) = (
                self.ran[i].load(Ordering::SeqCst),
                self.cancelled[i].load(Ordering::SeqCst),
            );
            assert_eq!(r + c, 1, "job {i}: ran {r} times, cancelled {c} times");
        }
    }
}

/// A job that reads `len` bytes at `offset`, checks them against the pattern with `seed`
/// (`None`: no check), optionally sleeps, and records its outcome in the ledger.
pub struct CountJob {
    pub id: usize,
    pub ledger: Arc<Ledger>,
    pub offset: u64,
    pub len: usize,
    pub seed: Option<u64>,
    pub sleep: std::time::Duration,
}

impl Job for CountJob {
    fn run(self: Box<Self>, h: &mut dyn ReadAt) {
        let mut buf = vec![0u8; self.len];
        h.read_exact_at(&mut buf, self.offset).expect("read");
        if let Some(seed) = self.seed {
            ds4_io::pattern::verify(seed, self.offset, &buf).expect("pattern");
        }
        if !self.sleep.is_zero() {
            std::thread::sleep(self.sleep);
        }
        self.ledger.ran[self.id].fetch_add(1, Ordering::SeqCst);
    }
    fn cancel(self: Box<Self>) {
        self.ledger.cancelled[self.id].fetch_add(1, Ordering::SeqCst);
    }
}

/// A job that sends its outcome (and the read's result) on a channel.
pub struct ReportJob<F: FnOnce(&mut dyn ReadAt) -> std::io::Result<()> + Send + 'static> {
    pub id: usize,
    pub body: F,
    pub tx: crossbeam_channel::Sender<(usize, Result<std::io::Result<()>, Outcome>)>,
}

impl<F: FnOnce(&mut dyn ReadAt) -> std::io::Result<()> + Send + 'static> Job for ReportJob<F> {
    fn run(self: Box<Self>, h: &mut dyn ReadAt) {
        let r = (self.body)(h);
        let _ = self.tx.send((self.id, Ok(r)));
    }
    fn cancel(self: Box<Self>) {
        let _ = self.tx.send((self.id, Err(Outcome::Cancelled)));
    }
}
