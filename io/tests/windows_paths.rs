//! Windows only (runs under Wine in CI): the FILE_FLAG_NO_BUFFERING handle is really used for
//! aligned requests, unaligned requests stay on the buffered overlapped handle, and both agree
//! byte for byte, including past 4 GiB. The portable tests in file_reads.rs accept either path;
//! these insist on the unbuffered one, which local NTFS volumes (and Wine) always accept.

#![cfg(windows)]

mod common;

use common::{scratch, ReportJob, GIB, MIB};
use ds4_io::pattern;
use ds4_io::{AlignedBuf, FileSource, OpenConfig, PoolConfig, ReadAt, ReaderPool, Source};
use std::collections::HashSet;
use std::sync::{Arc, Barrier};
use std::time::Duration;

#[test]
fn aligned_requests_use_no_buffering_and_unaligned_ones_do_not() {
    let dir = scratch();
    let path = dir.path().join("nobuf.bin");
    let len = 4 * GIB + 8 * MIB;
    let p = pattern::write_file(&path, len, &[0..4 * MIB, 4 * GIB..4 * GIB + 8 * MIB]).unwrap();
    let src = FileSource::open(&path, OpenConfig::default()).unwrap();
    assert_eq!(src.len(), len, "GetFileSizeEx: 64-bit length");
    let mut h = src.open_handle().unwrap();
    let align = h.direct_alignment().expect("unbuffered path offered");
    assert!(
        align.is_power_of_two() && align >= 512,
        "sector size {align}"
    );

    // Aligned offset, length and buffer, past 4 GiB: FILE_FLAG_NO_BUFFERING.
    let mut buf = AlignedBuf::new(2 * MIB as usize, 4096).unwrap();
    let off = 4 * GIB + 4096;
    h.read_exact_at(&mut buf, off).unwrap();
    p.verify(off, &buf).unwrap();
    let s = h.stats();
    assert_eq!(
        (s.counters.direct_bytes, s.counters.buffered_bytes),
        (2 * MIB, 0),
        "{s:?}"
    );
    assert!(s.direct_active && s.direct_fallback.is_none(), "{s:?}");

    // Unaligned buffer address: the buffered handle, same bytes.
    h.read_exact_at(&mut buf[1..4097], off).unwrap();
    p.verify(off, &buf[1..4097]).unwrap();
    // Unaligned offset and length.
    h.read_exact_at(&mut buf[..1000], off + 3).unwrap();
    p.verify(off + 3, &buf[..1000]).unwrap();
    let s2 = h.stats();
    assert_eq!(s2.counters.direct_bytes, s.counters.direct_bytes, "{s2:?}");
    assert_eq!(s2.counters.buffered_bytes, 4096 + 1000, "{s2:?}");

    // Large unaligned request with a matching buffer: head and tail buffered, middle unbuffered.
    let n = 3 * MIB as usize + 10;
    let mut big = AlignedBuf::new(n + 4096, 4096).unwrap();
    let start = 4 * GIB + 4096 + 7;
    h.read_exact_at(&mut big[7..7 + n], start).unwrap();
    p.verify(start, &big[7..7 + n]).unwrap();
    let s3 = h.stats();
    assert!(
        s3.counters.direct_bytes - s2.counters.direct_bytes >= n as u64 - 2 * align as u64,
        "{s3:?}"
    );
    assert!(
        s3.counters.buffered_bytes - s2.counters.buffered_bytes < 2 * align as u64,
        "{s3:?}"
    );

    // A short final read through the unbuffered handle: the file ends inside the last block.
    // 8 KiB from 4 KiB before the end: aligned, so it goes unbuffered and comes back short.
    let mut t = AlignedBuf::new(8192, 4096).unwrap();
    let e = h.read_exact_at(&mut t, len - 4096).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "{e}");
    p.verify(len - 4096, &t[..4096]).unwrap();
}

#[test]
fn direct_off_never_opens_the_unbuffered_handle() {
    let dir = scratch();
    let path = dir.path().join("buffered.bin");
    let p = pattern::write_full(&path, 2 * MIB).unwrap();
    let src = FileSource::open(
        &path,
        OpenConfig {
            direct: false,
            drop_cache: false,
            use_cache: false,
        },
    )
    .unwrap();
    let mut h = src.open_handle().unwrap();
    let mut buf = AlignedBuf::new(MIB as usize, 4096).unwrap();
    h.read_exact_at(&mut buf, 0).unwrap();
    p.verify(0, &buf).unwrap();
    let s = h.stats();
    assert_eq!(
        (s.counters.direct_bytes, s.counters.buffered_bytes),
        (0, MIB)
    );
    assert!(h.direct_alignment().is_none());
}

#[test]
fn eighteen_pool_workers_read_past_4gib_unbuffered_through_their_own_handles() {
    let dir = scratch();
    let path = dir.path().join("pool.bin");
    let len = 4 * GIB + 18 * MIB;
    let p =
        Arc::new(pattern::write_file(&path, len, std::slice::from_ref(&(4 * GIB..len))).unwrap());
    let pool = ReaderPool::new(
        FileSource::open(&path, OpenConfig::default()).unwrap(),
        &PoolConfig::default(),
    )
    .unwrap();
    // The barrier holds every worker on one job until all 18 run at once.
    let barrier = Arc::new(Barrier::new(18));
    let (tx, rx) = crossbeam_channel::unbounded();
    let (stats_tx, stats_rx) = crossbeam_channel::unbounded();
    for id in 0..18usize {
        let (p, barrier, stats_tx) = (Arc::clone(&p), Arc::clone(&barrier), stats_tx.clone());
        pool.submit(Box::new(ReportJob {
            id,
            tx: tx.clone(),
            body: move |h: &mut dyn ReadAt| {
                barrier.wait();
                let off = 4 * GIB + id as u64 * MIB;
                let mut b = AlignedBuf::new(MIB as usize, 4096).unwrap();
                h.read_exact_at(&mut b, off)?;
                p.verify(off, &b).map_err(std::io::Error::other)?;
                let _ = stats_tx.send((std::thread::current().id(), h.stats()));
                Ok(())
            },
        }));
    }
    for _ in 0..18 {
        let (_, r) = rx.recv_timeout(Duration::from_secs(60)).unwrap();
        r.expect("ran").unwrap();
    }
    let mut threads = HashSet::new();
    for _ in 0..18 {
        let (t, s) = stats_rx.recv().unwrap();
        assert!(
            threads.insert(t),
            "two jobs on one worker despite the barrier"
        );
        // Each worker's own handle did its first read unbuffered.
        assert_eq!(
            (s.counters.direct_bytes, s.counters.buffered_bytes),
            (MIB, 0),
            "{s:?}"
        );
    }
}

/// A path longer than MAX_PATH (260): std opens it (it adds the `\\?\` prefix itself), so the
/// GGUF header parses; the reader must open the same path, through its `\\?\` form. (Wine opens
/// long paths without the prefix too, so under Wine this shows that the prefixed form works,
/// not that real Windows needs it.)
#[test]
fn long_and_relative_paths_open() {
    let dir = scratch();
    let mut deep = dir.path().to_path_buf();
    for i in 0..6 {
        deep.push(format!("{i}-{}", "d".repeat(50)));
    }
    std::fs::create_dir_all(&deep).unwrap();
    let path = deep.join("model.gguf");
    assert!(path.as_os_str().len() > 300, "{}", path.display());
    let p = pattern::write_full(&path, 64 * 1024).unwrap();
    let src = FileSource::open(&path, OpenConfig::default()).unwrap();
    let mut h = src.open_handle().unwrap();
    let mut buf = vec![0u8; 1000];
    h.read_exact_at(&mut buf, 12345).unwrap();
    p.verify(12345, &buf).unwrap();
}
