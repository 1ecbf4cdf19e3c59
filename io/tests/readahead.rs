//! A cold range read chunk after chunk through a cache-first handle stays unbuffered after a
//! cached start: the buffered fd does no readahead (io/src/sys/unix.rs, "readahead
//! off"), so reading the cold part of a half-cached chunk does not pull the next chunk into
//! the page cache and send it, and every chunk after it, down the buffered path. On the dev
//! machine (read_ahead_kb 8192) that chain read whole cold tensors at 0.43 GB/s instead of
//! ~1.1 unbuffered. Linux only (the page-cache probe); skipped where the filesystem or the
//! kernel offers no unbuffered path or no probe.
#![cfg(target_os = "linux")]

use ds4_io::{AlignedBuf, FileSource, OpenConfig, Source};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

const CHUNK: usize = 4 << 20;

fn advise(f: &File, off: i64, len: i64, advice: libc::c_int) {
    // SAFETY: posix_fadvise only reads its integer arguments; the fd is open.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), off, len, advice) };
}

#[test]
fn a_cached_start_does_not_send_the_cold_rest_through_the_page_cache() {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let path = dir.path().join("cold.bin");
    let p = ds4_io::pattern::write_full(&path, 10 * CHUNK as u64).unwrap();
    let f = File::open(&path).unwrap();
    f.sync_all().unwrap(); // clean pages can be dropped
    let src = FileSource::open(
        &path,
        OpenConfig {
            direct: true,
            drop_cache: false,
            use_cache: true,
        },
    )
    .unwrap();
    let mut h = src.open_handle().unwrap();
    let s = h.stats();
    if s.cache_probe != "cachestat" || h.direct_alignment().is_none() {
        eprintln!("skipped: no unbuffered path or no cachestat here: {s:?}");
        return;
    }
    let mut buf = AlignedBuf::new(CHUNK, 4096).unwrap();
    for attempt in 1..=3 {
        advise(&f, 0, 0, libc::POSIX_FADV_DONTNEED);
        if ds4_io::cached_fraction(&f, 0, 10 * CHUNK as u64).is_none_or(|c| c > 0.0) {
            eprintln!("skipped: the kernel kept pages after DONTNEED");
            return;
        }
        // The first chunk and half the second cached, read on an fd of their own with
        // readahead off (so that nothing past them is cached).
        let warm = File::open(&path).unwrap();
        advise(&warm, 0, 0, libc::POSIX_FADV_RANDOM);
        let mut w = vec![0u8; 6 << 20];
        warm.read_exact_at(&mut w, 0).unwrap();
        let before = h.stats().counters;
        for k in 0..8u64 {
            h.read_exact_at(&mut buf, k * CHUNK as u64).unwrap();
            p.verify(k * CHUNK as u64, &buf).unwrap();
        }
        let c = h.stats().counters;
        let (hits, misses) = (
            c.cache_hits - before.cache_hits,
            c.cache_misses - before.cache_misses,
        );
        // Chunks 0 and 1 (half cached) come from the page cache, 2..8 are cold. With readahead
        // on, the read of chunk 1's cold half, right after chunk 0, read ahead into chunk 2,
        // and so on.
        if (hits, misses) == (2, 6) {
            assert_eq!(c.direct_bytes - before.direct_bytes, 6 * CHUNK as u64);
            return;
        }
        // Another process's reads of this file can cache pages between the checks; only a
        // chain in every attempt fails.
        eprintln!("attempt {attempt}: {hits} chunks read buffered, {misses} unbuffered");
        assert!(
            attempt < 3,
            "the buffered reads carried readahead into the cold chunks: {c:?}"
        );
    }
}
