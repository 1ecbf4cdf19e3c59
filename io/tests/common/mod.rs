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
