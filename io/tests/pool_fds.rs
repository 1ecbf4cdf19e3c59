//! Linux: each of 18 workers holds its own fd (plus its own O_DIRECT fd once it read aligned
//! data), and every fd is closed when the pool is dropped. Alone in its test binary so that no
//! other test opens files while the fds are counted.

#![cfg(target_os = "linux")]

mod common;

use common::{scratch, ReportJob, MIB};
use ds4_io::pattern;
use ds4_io::{AlignedBuf, FileSource, OpenConfig, PoolConfig, ReadAt, ReaderPool};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

#[test]
fn eighteen_workers_hold_their_own_fds_and_close_them() {
    let dir = scratch();
    let path = dir.path().join("fds.bin");
    let p = Arc::new(pattern::write_full(&path, 18 * MIB).unwrap());
    let src = FileSource::open(&path, OpenConfig::default()).unwrap();
    let base = open_fds();

    let pool = ReaderPool::new(src, &PoolConfig::default()).unwrap();
    assert_eq!(
        open_fds(),
        base + 18,
        "one buffered fd per worker after start"
    );

    // One aligned 1 MiB read per worker; the barrier keeps each worker on exactly one job.
    let barrier = Arc::new(Barrier::new(18));
    let (tx, rx) = crossbeam_channel::unbounded();
    let direct = Arc::new(AtomicUsize::new(0));
    for id in 0..18 {
        let barrier = Arc::clone(&barrier);
        let p = Arc::clone(&p);
        let direct = Arc::clone(&direct);
        pool.submit(Box::new(ReportJob {
            id,
            tx: tx.clone(),
            body: move |h: &mut dyn ReadAt| {
                barrier.wait();
                let off = id as u64 * MIB;
                let mut b = AlignedBuf::new(MIB as usize, 4096).unwrap();
                h.read_exact_at(&mut b, off)?;
                p.verify(off, &b).map_err(std::io::Error::other)?;
                let s = h.stats();
                assert!(
                    s.direct_bytes == MIB || s.direct_fallback.is_some(),
                    "{s:?}"
                );
                if s.direct_bytes == MIB {
                    direct.fetch_add(1, Ordering::SeqCst);
                }
                Ok(())
            },
        }));
    }
    for _ in 0..18 {
        let (_, r) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        r.expect("ran").unwrap();
    }
    // 18 buffered fds, plus one O_DIRECT fd for each worker that read through it.
    let direct = direct.load(Ordering::SeqCst);
    assert!(
        direct == 0 || direct == 18,
        "{direct} workers used O_DIRECT"
    );
    assert_eq!(open_fds(), base + 18 + direct);
    drop(pool);
    assert_eq!(open_fds(), base, "fds leaked after the pool was dropped");
}
