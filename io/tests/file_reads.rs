//! Real-file reads through `FileSource` handles: every byte verified against the pattern.
//! Portable: the same tests run on Linux and, built for Windows, under Wine (where they exercise
//! ReOpenFile + overlapped ReadFile + FILE_FLAG_NO_BUFFERING).

mod common;

use common::{scratch, Rng, GIB, MIB};
use ds4_io::pattern::{self, SparsePattern};
use ds4_io::{AlignedBuf, FileSource, OpenConfig, ReadAt, ReadError, Source};
use std::io;
use std::sync::Arc;

/// `use_cache` off: these tests check the unbuffered path itself, on files they just wrote
/// (which are in the page cache; the cache-first decision is tested in sys/unix.rs).
fn cfg(direct: bool) -> OpenConfig {
    OpenConfig {
        direct,
        drop_cache: false,
        use_cache: false,
    }
}

/// Reads `len` bytes at `offset` into a buffer that starts `misalign` bytes past a 4 KiB
/// boundary, and checks every byte.
fn read_check(h: &mut dyn ReadAt, p: &SparsePattern, offset: u64, len: usize, misalign: usize) {
    let mut buf = AlignedBuf::new(len + misalign, 4096).expect("alloc");
    let b = &mut buf[misalign..];
    h.read_exact_at(b, offset)
        .unwrap_or_else(|e| panic!("read {len} at {offset} (misalign {misalign}): {e}"));
    if let Err(m) = p.verify(offset, b) {
        panic!("read {len} at {offset} (misalign {misalign}): {m}");
    }
}

/// A sparse file a bit over 4 GiB with patterned regions around 2 GiB and 4 GiB and at the end.
fn big_sparse(dir: &std::path::Path) -> (std::path::PathBuf, SparsePattern) {
    let path = dir.join("big.bin");
    let len = 4 * GIB + 3 * MIB + 123;
    let p = pattern::write_file(
        &path,
        len,
        &[
            0..MIB,
            2 * GIB - MIB..2 * GIB + MIB,
            4 * GIB - 2 * MIB..4 * GIB + 2 * MIB,
            len - 4096..len,
        ],
    )
    .expect("write sparse file");
    (path, p)
}

#[test]
fn reads_cross_2gib_and_4gib_on_a_sparse_file() {
    let dir = scratch();
    let (path, p) = big_sparse(dir.path());
    for direct in [false, true] {
        let src = FileSource::open(&path, cfg(direct)).unwrap();
        assert_eq!(src.len(), p.len());
        let mut h = src.open_handle().unwrap();
        for boundary in [2 * GIB, 4 * GIB] {
            // Aligned and unaligned ranges that straddle the boundary, and ones that end or
            // start exactly on it.
            for (start, len) in [
                (boundary - 4096, 8192usize),
                (boundary - 3, 7),
                (boundary - 1, 1),
                (boundary, 1),
                (boundary - 512 * 1024, MIB as usize),
                (boundary - 700_001, 1_400_003),
                (boundary - 4096, 4096),
                (boundary, 4096),
            ] {
                for misalign in [0, 1] {
                    read_check(h.as_mut(), &p, start, len, misalign);
                }
            }
        }
        // Patterned data to zeros (a hole) and back, across 4 GiB + 2 MiB.
        read_check(h.as_mut(), &p, 4 * GIB + 2 * MIB - 5000, 10_000, 0);
        // The file's last bytes, past 4 GiB.
        read_check(h.as_mut(), &p, p.len() - 4096, 4096, 0);
        read_check(h.as_mut(), &p, p.len() - 1, 1, 3);
    }
}

#[test]
fn one_byte_reads_everywhere() {
    let dir = scratch();
    let (path, p) = big_sparse(dir.path());
    let src = FileSource::open(&path, cfg(true)).unwrap();
    let mut h = src.open_handle().unwrap();
    for off in [
        0,
        1,
        7,
        8,
        4095,
        4096,
        2 * GIB - 1,
        2 * GIB,
        4 * GIB - 1,
        4 * GIB,
        4 * GIB + 1,
        p.len() - 1,
    ] {
        let mut b = [0xEEu8; 1];
        h.read_exact_at(&mut b, off).unwrap();
        assert_eq!(b[0], p_byte(&p, off), "byte at {off}");
    }
}

fn p_byte(p: &SparsePattern, off: u64) -> u8 {
    let mut b = [0u8; 1];
    p.fill(off, &mut b);
    b[0]
}

#[test]
fn large_reads_aligned_and_unaligned() {
    let dir = scratch();
    let path = dir.path().join("large.bin");
    let len = 66 * MIB + 4096 + 17;
    let p = pattern::write_full(&path, len).unwrap();
    let src = FileSource::open(&path, cfg(true)).unwrap();
    let mut h = src.open_handle().unwrap();
    // 64 MiB aligned: the unbuffered path when the filesystem has one.
    read_check(h.as_mut(), &p, 4096, 64 * MIB as usize, 0);
    let s0 = h.stats();
    // 64 MiB + 3 at an odd offset with a matching buffer misalignment: split into a buffered
    // head and tail around an unbuffered middle.
    read_check(h.as_mut(), &p, 4096 + 5, 64 * MIB as usize + 3, 5);
    let s1 = h.stats();
    // Same range, buffer misaligned differently: all buffered.
    read_check(h.as_mut(), &p, 4096 + 5, 64 * MIB as usize + 3, 1);
    let s2 = h.stats();
    if s0.direct_active {
        assert_eq!(s0.counters.direct_bytes, 64 * MIB, "{s0:?}");
        let align = h.direct_alignment().unwrap() as u64;
        let direct = s1.counters.direct_bytes - s0.counters.direct_bytes;
        let buffered = s1.counters.buffered_bytes - s0.counters.buffered_bytes;
        assert_eq!(direct + buffered, 64 * MIB + 3);
        assert!(buffered < 2 * align, "split read: {s0:?} -> {s1:?}");
        // A buffer whose address cannot line up with the aligned file offsets: all buffered.
        assert_eq!(s2.counters.direct_bytes, s1.counters.direct_bytes, "{s2:?}");
    }
    // The whole file in one read.
    read_check(h.as_mut(), &p, 0, len as usize, 0);
}

#[test]
fn unaligned_offsets_lengths_and_buffers_with_direct_on() {
    let dir = scratch();
    let path = dir.path().join("unaligned.bin");
    let len = 8 * MIB + 999;
    let p = pattern::write_full(&path, len).unwrap();
    let src = FileSource::open(&path, cfg(true)).unwrap();
    let mut h = src.open_handle().unwrap();
    for base in [0u64, 1, 511, 512, 513, 4095, 4096, 4097, MIB + 7] {
        for n in [1usize, 511, 512, 4096, 4097, 300_001, MIB as usize + 1] {
            for misalign in [0usize, 1, 8, 512] {
                read_check(h.as_mut(), &p, base, n, misalign);
            }
        }
    }
}

#[test]
fn short_final_read_and_eof() {
    let dir = scratch();
    let path = dir.path().join("short.bin");
    let len = MIB + 100; // ends 100 bytes into a block
    let p = pattern::write_full(&path, len).unwrap();
    for direct in [false, true] {
        let src = FileSource::open(&path, cfg(direct)).unwrap();
        let mut h = src.open_handle().unwrap();
        // Exactly up to the end: fine (the last block is short).
        read_check(h.as_mut(), &p, MIB, 100, 0);
        read_check(h.as_mut(), &p, 0, len as usize, 0);
        // Empty read at the end: fine.
        h.read_exact_at(&mut [], len).unwrap();
        // An aligned read that runs past the end: the unbuffered part returns a short count,
        // the rest finds the end. UnexpectedEof, carrying the path and the requested range.
        let mut buf = AlignedBuf::new(MIB as usize + 4096, 4096).unwrap();
        let e = h.read_exact_at(&mut buf, 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
        let r = ReadError::find(&e).expect("ReadError payload");
        assert_eq!((r.offset, r.len), (0, MIB + 4096));
        assert_eq!(r.path, path);
        // The bytes before the end did arrive (the contract only promises an error, but a
        // misplaced byte would still be a bug).
        p.verify(0, &buf[..len as usize]).unwrap();
        // Starting at or past the end.
        let mut one = [0u8; 1];
        let e = h.read_exact_at(&mut one, len).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let e = h.read_exact_at(&mut one, 5 * GIB).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        // Offsets that cannot be a file position at all: typed error, no panic.
        let e = h.read_exact_at(&mut one, u64::MAX).unwrap_err();
        assert!(ReadError::find(&e).is_some(), "{e}");
        // The handle still works after the errors.
        read_check(h.as_mut(), &p, 4096, 8192, 0);
    }
}

/// Whether this platform and filesystem take unbuffered reads of aligned ranges, probed
/// independently of the code under test.
#[cfg(target_os = "linux")]
fn os_takes_direct(path: &std::path::Path) -> bool {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    else {
        return false;
    };
    let mut b = AlignedBuf::new(4096, 4096).unwrap();
    f.read_at(&mut b, 0).is_ok()
}

#[test]
fn direct_path_is_taken_for_aligned_requests_or_the_fallback_is_recorded() {
    let dir = scratch();
    let path = dir.path().join("direct.bin");
    let len = 4 * MIB;
    let p = pattern::write_full(&path, len).unwrap();

    let src = FileSource::open(&path, cfg(true)).unwrap();
    let mut h = src.open_handle().unwrap();
    let before = h.stats();
    read_check(h.as_mut(), &p, 0, MIB as usize, 0);
    let s = h.stats();
    assert_eq!(
        s.counters.direct_bytes + s.counters.buffered_bytes
            - before.counters.direct_bytes
            - before.counters.buffered_bytes,
        MIB
    );
    if s.counters.direct_bytes == MIB {
        assert!(s.direct_active && s.direct_fallback.is_none(), "{s:?}");
        assert!(h.direct_alignment().is_some());
    } else {
        // The OS refused: the read still arrived, buffered, and the handle says why.
        assert_eq!(s.counters.buffered_bytes, MIB, "{s:?}");
        assert!(!s.direct_active && s.direct_fallback.is_some(), "{s:?}");
        assert!(h.direct_alignment().is_none());
    }
    #[cfg(target_os = "linux")]
    assert_eq!(
        s.counters.direct_bytes == MIB,
        os_takes_direct(&path),
        "O_DIRECT use disagrees with a direct probe: {s:?}"
    );

    // Unaligned small requests never use the unbuffered path.
    let d0 = h.stats().counters.direct_bytes;
    read_check(h.as_mut(), &p, 1, 4096, 0);
    read_check(h.as_mut(), &p, 4096, 4096, 1);
    assert_eq!(h.stats().counters.direct_bytes, d0);

    // direct = false: never unbuffered.
    let src = FileSource::open(&path, cfg(false)).unwrap();
    let mut h = src.open_handle().unwrap();
    read_check(h.as_mut(), &p, 0, MIB as usize, 0);
    let s = h.stats();
    assert_eq!(
        (s.counters.direct_bytes, s.counters.buffered_bytes),
        (0, MIB)
    );
    assert!(!s.direct_active);
    assert!(h.direct_alignment().is_none());
}

#[test]
fn drop_cache_mode_reads_the_same_bytes() {
    let dir = scratch();
    let path = dir.path().join("cold.bin");
    let len = 3 * MIB + 5;
    let p = pattern::write_full(&path, len).unwrap();
    for direct in [false, true] {
        let src = FileSource::open(
            &path,
            OpenConfig {
                direct,
                drop_cache: true,
                use_cache: false,
            },
        )
        .unwrap();
        let mut h = src.open_handle().unwrap();
        read_check(h.as_mut(), &p, 0, len as usize, 0);
        read_check(h.as_mut(), &p, 77, MIB as usize, 3);
        h.drop_cache(0, len);
    }
}

#[test]
fn eighteen_threads_with_their_own_handles() {
    let dir = scratch();
    let (path, p) = big_sparse(dir.path());
    let p = Arc::new(p);
    let src: Arc<dyn Source> = FileSource::open(&path, cfg(true)).unwrap();
    let regions = p.regions().to_vec();
    let threads: Vec<_> = (0..18u64)
        .map(|t| {
            let src = Arc::clone(&src);
            let p = Arc::clone(&p);
            let regions = regions.clone();
            std::thread::spawn(move || {
                let mut h = src.open_handle().expect("open handle");
                let mut rng = Rng(t);
                for _ in 0..40 {
                    let r = &regions[rng.below(regions.len() as u64) as usize];
                    // Mostly inside a region, sometimes running into the hole after it.
                    let start = r.start + rng.below(r.end - r.start);
                    let len = 1 + rng.below(256 * 1024).min(p.len() - start - 1) as usize;
                    let aligned = rng.below(2) == 0;
                    let (start, misalign) = if aligned {
                        (start / 4096 * 4096, 0)
                    } else {
                        (start, rng.below(64) as usize)
                    };
                    read_check(h.as_mut(), &p, start, len, misalign);
                }
                h.stats()
            })
        })
        .collect();
    let mut total = 0;
    for t in threads {
        let s = t.join().expect("reader thread panicked");
        total += s.counters.direct_bytes + s.counters.buffered_bytes;
    }
    assert!(total > 0);
}

#[test]
fn open_errors_name_the_path() {
    let dir = scratch();
    let missing = dir.path().join("no-such-model.gguf");
    let e = FileSource::open(&missing, OpenConfig::default())
        .err()
        .expect("missing file must not open");
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    assert!(e.to_string().contains("no-such-model.gguf"), "{e}");
    let e = FileSource::open(dir.path(), OpenConfig::default())
        .err()
        .expect("a directory is not a model file");
    assert!(
        e.to_string().contains(&*dir.path().to_string_lossy()),
        "{e}"
    );
    // The same words on every OS (Windows refuses to open a directory with "access denied").
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains("not a regular file"), "{e}");
}
