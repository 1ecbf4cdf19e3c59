//! Self-describing test data: every aligned 8-byte word holds its own file offset (little-endian,
//! xor a seed), so a byte that lands in the wrong place names where it came from.
//!
//! [`PatternSource`] is a virtual file of any length (no disk, no memory) whose bytes are this
//! pattern; [`fill`] and [`verify`] work on any sub-range, aligned or not.

use crate::file::{ReadAt, Source};
use std::io;
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
    // Whole words.
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

/// Checks that `buf` holds the pattern of `[offset, offset + buf.len())`; returns the first
/// mismatch.
pub fn verify(seed: u64, offset: u64, buf: &[u8]) -> Result<(), Mismatch> {
    for (i, &b) in buf.iter().enumerate() {
        let off = offset + i as u64;
        let e = byte_at(seed, off);
        if b != e {
            return Err(Mismatch {
                offset: off,
                expected: e,
                actual: b,
            });
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
            for len in [0usize, 1, 7, 8, 9, 31] {
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
    }
}
