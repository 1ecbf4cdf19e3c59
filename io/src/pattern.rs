//! Self-describing test data: every aligned 8-byte word holds its own file offset (little-endian,
//! xor a seed), so a byte that lands in the wrong place names where it came from.
//!
//! [`PatternSource`] is a virtual file of any length (no disk, no memory) whose bytes are this
//! pattern; [`fill`] and [`verify`] work on any sub-range, aligned or not. [`write_file`] makes a
//! real, sparse file on disk where only chosen regions hold the pattern and the rest are holes
//! (zeros), so tests can read past 4 GiB without writing 4 GiB ([`SparsePattern`] knows what
//! every byte of it must be).
//!
//! Limit: sparse files need a filesystem with holes (ext4, xfs, btrfs, tmpfs, NTFS once marked
//! sparse); elsewhere the holes are written as zeros and cost real disk space and time.

use crate::file::{ReadAt, Source};
use std::fs::File;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The byte at absolute offset `off` of the pattern with `seed`.
#[inline]
pub fn byte_at(seed: u64, off: u64) -> u8 {
    let word = (off & !7) ^ seed;
    word.to_le_bytes()[(off & 7) as usize]
}

/// Fills `buf` with the pattern bytes of `[offset, offset + buf.len())`.
pub fn fill(seed: u64, offset: u64, buf: &mut [u8]) {
    let mut i = 0usize;
    // Unaligned head, byte by byte.
    while i < buf.len() && (offset + i as u64) & 7 != 0 {
        buf[i] = byte_at(seed, offset + i as u64);
        i += 1;
    }
    // Whole words, eight per loop step: one loop test per 64 bytes and plain array stores, so
    // the fuzzers' comparison tracing and the debug builds' copy checks stay off the per-word
    // path (they used to cost more than the engine reads this pattern serves).
    let len = buf.len();
    let mut blocks = buf[i..].chunks_exact_mut(64);
    let mut base = offset + i as u64;
    for block in &mut blocks {
        let block: &mut [u8; 64] = block.try_into().expect("chunks_exact_mut(64)");
        for k in 0..8 {
            // Wrapping: `base + 63` is the offset of a byte of `buf`, so it cannot overflow,
            // and a checked add is one more traced comparison per word.
            let w = (base.wrapping_add(8 * k as u64) ^ seed).to_le_bytes();
            // A constant-length array store (the loop unrolls), not `copy_from_slice`.
            let word: &mut [u8; 8] = (&mut block[8 * k..8 * k + 8]).try_into().expect("8");
            *word = w;
        }
        base = base.wrapping_add(64);
    }
    i = len - blocks.into_remainder().len();
    while i + 8 <= buf.len() {
        let w = (offset + i as u64) ^ seed;
        buf[i..i + 8].copy_from_slice(&w.to_le_bytes());
        i += 8;
    }
    while i < buf.len() {
        buf[i] = byte_at(seed, offset + i as u64);
        i += 1;
    }
}

/// A pattern mismatch: where, what was expected, what arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub offset: u64,
    pub expected: u8,
    pub actual: u8,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "byte at offset {} is {:#04x}, expected {:#04x}",
            self.offset, self.actual, self.expected
        )
    }
}

impl std::error::Error for Mismatch {}

/// Checks that `buf` holds the pattern of `[offset, offset + buf.len())`; returns the first
/// mismatch.
pub fn verify(seed: u64, offset: u64, buf: &[u8]) -> Result<(), Mismatch> {
    verify_with(offset, buf, |off, exp| fill(seed, off, exp))
}

/// Compares `buf` with what `expect` fills in, 64 KiB at a time (fast enough for reads of
/// hundreds of MiB in debug builds), and names the first differing byte.
fn verify_with(
    offset: u64,
    buf: &[u8],
    mut expect: impl FnMut(u64, &mut [u8]),
) -> Result<(), Mismatch> {
    let mut scratch = vec![0u8; buf.len().min(64 * 1024)];
    for (k, chunk) in buf.chunks(64 * 1024).enumerate() {
        let off = offset + (k * 64 * 1024) as u64;
        let exp = &mut scratch[..chunk.len()];
        expect(off, exp);
        if chunk != &exp[..] {
            // The chunk differs somewhere, so `position` finds it.
            let i = chunk
                .iter()
                .zip(exp.iter())
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Err(Mismatch {
                offset: off + i as u64,
                expected: exp[i],
                actual: chunk[i],
            });
        }
    }
    Ok(())
}

/// Seed of the files [`write_file`] writes.
pub const FILE_SEED: u64 = 0x6473_345f_7374_7265;

/// A file of `len` bytes whose `regions` hold the pattern (with `seed`) and whose other bytes
/// are zeros (holes on disk).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SparsePattern {
    seed: u64,
    len: u64,
    regions: Vec<Range<u64>>,
}

impl SparsePattern {
    /// Regions are clipped to `len`, sorted and merged; empty ones are dropped.
    pub fn new(seed: u64, len: u64, regions: &[Range<u64>]) -> Self {
        let mut rs: Vec<Range<u64>> = regions
            .iter()
            .map(|r| r.start.min(len)..r.end.min(len))
            .filter(|r| r.start < r.end)
            .collect();
        rs.sort_by_key(|r| r.start);
        let mut merged: Vec<Range<u64>> = Vec::with_capacity(rs.len());
        for r in rs {
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        Self {
            seed,
            len,
            regions: merged,
        }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The patterned regions, sorted and disjoint.
    pub fn regions(&self) -> &[Range<u64>] {
        &self.regions
    }

    /// What the file holds at `[offset, offset + buf.len())` (zeros past the end too).
    pub fn fill(&self, offset: u64, buf: &mut [u8]) {
        buf.fill(0);
        let end = offset.saturating_add(buf.len() as u64);
        for r in &self.regions {
            let (s, e) = (r.start.max(offset), r.end.min(end));
            if s < e {
                let (i, j) = ((s - offset) as usize, (e - offset) as usize);
                fill(self.seed, s, &mut buf[i..j]);
            }
        }
    }

    /// Checks `buf` against [`SparsePattern::fill`]; returns the first mismatch.
    pub fn verify(&self, offset: u64, buf: &[u8]) -> Result<(), Mismatch> {
        verify_with(offset, buf, |off, exp| self.fill(off, exp))
    }

    /// Writes the file at `path` (created or truncated): length first (holes), then each region.
    pub fn write(&self, path: &Path) -> io::Result<()> {
        let f = File::create(path)?;
        #[cfg(windows)]
        crate::sys::mark_sparse(&f);
        f.set_len(self.len)?;
        let mut chunk = vec![0u8; 1 << 20];
        for r in &self.regions {
            let mut off = r.start;
            while off < r.end {
                let n = ((r.end - off) as usize).min(chunk.len());
                fill(self.seed, off, &mut chunk[..n]);
                write_all_at(&f, &chunk[..n], off)?;
                off += n as u64;
            }
        }
        f.sync_all()
    }
}

/// Creates a sparse file of `len` bytes at `path` where only `regions` hold pattern bytes
/// (seed [`FILE_SEED`]); returns its description for verifying reads.
pub fn write_file(path: &Path, len: u64, regions: &[Range<u64>]) -> io::Result<SparsePattern> {
    write_file_seeded(path, FILE_SEED, len, regions)
}

/// A file of `len` pattern bytes (no holes), seed [`FILE_SEED`].
pub fn write_full(path: &Path, len: u64) -> io::Result<SparsePattern> {
    write_file_seeded(path, FILE_SEED, len, std::slice::from_ref(&(0..len)))
}

/// [`write_file`] with a chosen seed (so that two files' bytes differ).
pub fn write_file_seeded(
    path: &Path,
    seed: u64,
    len: u64,
    regions: &[Range<u64>],
) -> io::Result<SparsePattern> {
    let p = SparsePattern::new(seed, len, regions);
    p.write(path)?;
    Ok(p)
}

fn write_all_at(f: &File, mut buf: &[u8], mut off: u64) -> io::Result<()> {
    while !buf.is_empty() {
        #[cfg(unix)]
        let r = std::os::unix::fs::FileExt::write_at(f, buf, off);
        #[cfg(windows)]
        let r = std::os::windows::fs::FileExt::seek_write(f, buf, off);
        match r {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                buf = &buf[n..];
                off += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A virtual file of `len` pattern bytes. Handles read the pattern; nothing touches disk.
pub struct PatternSource {
    path: PathBuf,
    len: u64,
    seed: u64,
}

impl PatternSource {
    pub fn new(len: u64, seed: u64) -> Self {
        Self {
            path: PathBuf::from(format!("<pattern seed={seed} len={len}>")),
            len,
            seed,
        }
    }
    pub fn seed(&self) -> u64 {
        self.seed
    }
}

struct PatternHandle {
    len: u64,
    seed: u64,
}

impl ReadAt for PatternHandle {
    fn read_exact_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset.checked_add(buf.len() as u64);
        match end {
            Some(end) if end <= self.len => {
                fill(self.seed, offset, buf);
                Ok(())
            }
            _ => Err(io::ErrorKind::UnexpectedEof.into()),
        }
    }
}

impl Source for PatternSource {
    fn path(&self) -> &Path {
        &self.path
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn open_handle(&self) -> io::Result<Box<dyn ReadAt>> {
        Ok(Box::new(PatternHandle {
            len: self.len,
            seed: self.seed,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_matches_byte_at_for_unaligned_ranges() {
        for off in [0u64, 1, 7, 8, 13, (1 << 32) - 3] {
            for len in [
                0usize, 1, 7, 8, 9, 31, 63, 64, 65, 71, 72, 127, 128, 200, 1000,
            ] {
                let mut b = vec![0u8; len];
                fill(42, off, &mut b);
                for (i, &x) in b.iter().enumerate() {
                    assert_eq!(x, byte_at(42, off + i as u64));
                }
                assert!(verify(42, off, &b).is_ok());
            }
        }
    }

    #[test]
    fn verify_names_first_wrong_byte() {
        let mut b = vec![0u8; 64];
        fill(7, 100, &mut b);
        b[10] ^= 1;
        let m = verify(7, 100, &b).unwrap_err();
        assert_eq!(m.offset, 110);
        // A shifted read is caught too.
        let mut s = vec![0u8; 64];
        fill(7, 108, &mut s);
        assert!(verify(7, 100, &s).is_err());
        // Past the first 64 KiB chunk.
        let mut big = vec![0u8; 200_000];
        fill(7, 3, &mut big);
        big[150_001] ^= 0x80;
        assert_eq!(verify(7, 3, &big).unwrap_err().offset, 150_004);
    }

    #[test]
    fn sparse_pattern_merges_regions_and_fills_holes_with_zeros() {
        let p = SparsePattern::new(9, 100, &[50..60, 0..10, 5..20, 90..200, 30..30]);
        assert_eq!(p.regions(), &[0..20, 50..60, 90..100]);
        let mut b = vec![0xAAu8; 120];
        p.fill(0, &mut b);
        for (i, &x) in b.iter().enumerate() {
            let i = i as u64;
            let inside = p.regions().iter().any(|r| r.contains(&i));
            assert_eq!(x, if inside { byte_at(9, i) } else { 0 }, "byte {i}");
        }
        p.verify(0, &b).unwrap();
        b[55] ^= 1;
        assert_eq!(p.verify(0, &b).unwrap_err().offset, 55);
    }
}
