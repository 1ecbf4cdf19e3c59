//! What the stress file holds and how arrived bytes are checked against it.
//!
//! Two kinds of file: a real sparse file written by [`ds4_io::pattern::SparsePattern`] (pattern
//! bytes in chosen regions, holes elsewhere that must read as zeros), or the virtual
//! [`ds4_io::pattern::PatternSource`] (pattern everywhere, any length, no disk). Either way every
//! 8-byte word of pattern encodes its own offset, so a misplaced byte is caught, and
//! destinations are filled with [`POISON`] before a read, so a byte the engine never wrote is
//! caught even where the file holds zeros.

use ds4_io::pattern::{self, SparsePattern};
use std::ops::Range;

/// Fill byte of destinations before a read.
pub const POISON: u8 = 0xA5;
const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// The expected content of the stress file.
#[derive(Clone, Debug)]
pub enum Expect {
    /// A sparse file: pattern in the regions, zeros elsewhere.
    Sparse(SparsePattern),
    /// A virtual file: pattern with this seed everywhere.
    Pattern { seed: u64, len: u64 },
}

impl Expect {
    pub fn len(&self) -> u64 {
        match self {
            Expect::Sparse(p) => p.len(),
            Expect::Pattern { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The expected bytes of `[offset, offset + buf.len())`.
    pub fn fill(&self, offset: u64, buf: &mut [u8]) {
        match self {
            Expect::Sparse(p) => p.fill(offset, buf),
            Expect::Pattern { seed, .. } => pattern::fill(*seed, offset, buf),
        }
    }

    /// Counts the bytes of `got` (file bytes from `offset`) that differ from the expected
    /// ones; `first` receives the first wrong offset. `scratch` is reused between calls.
    pub fn count_wrong(
        &self,
        offset: u64,
        got: &[u8],
        scratch: &mut Vec<u8>,
        first: &mut Option<WrongByte>,
    ) -> u64 {
        const STEP: usize = 256 * 1024;
        scratch.resize(STEP.min(got.len().max(1)), 0);
        let mut wrong = 0u64;
        for (k, piece) in got.chunks(STEP).enumerate() {
            let off = offset + (k * STEP) as u64;
            let exp = &mut scratch[..piece.len()];
            self.fill(off, exp);
            if piece != &exp[..] {
                for (i, (&a, &e)) in piece.iter().zip(exp.iter()).enumerate() {
                    if a != e {
                        wrong += 1;
                        first.get_or_insert(WrongByte {
                            offset: off + i as u64,
                            expected: e,
                            actual: a,
                        });
                    }
                }
            }
        }
        wrong
    }
}

/// The first wrong byte seen: where, what was expected, what arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct WrongByte {
    pub offset: u64,
    pub expected: u8,
    pub actual: u8,
}

/// Pattern regions of a sparse stress file of `len` bytes: the start, 16 MiB either side of
/// 2 GiB and 4 GiB, 64 MiB at 5 GiB, the last 16 MiB, and a 1 MiB island every 256 MiB.
/// Everything else is a hole. About 180 MiB of data for a 6 GiB file.
pub fn sparse_regions(len: u64) -> Vec<Range<u64>> {
    let mut r = vec![
        0..32 * MIB,
        2 * GIB - 16 * MIB..2 * GIB + 16 * MIB,
        4 * GIB - 16 * MIB..4 * GIB + 16 * MIB,
        5 * GIB..5 * GIB + 64 * MIB,
        len.saturating_sub(16 * MIB)..len,
    ];
    let mut at = 256 * MIB + 12_345;
    while at < len {
        r.push(at..at + MIB);
        at += 256 * MIB;
    }
    r
}

/// Offsets the boundary reads straddle: 2 GiB, 4 GiB (the 32-bit `off_t` / DWORD traps) and
/// the end of the file, where they exist.
pub fn boundaries(len: u64) -> Vec<u64> {
    [2 * GIB, 4 * GIB, len]
        .into_iter()
        .filter(|&b| b <= len && b > 0)
        .collect()
}
