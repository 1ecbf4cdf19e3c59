//! Concurrency: many submitting threads, many async tasks, and a tiny staging ring with slow
//! copies (the proof that a slot is never refilled before its copy has run: every copied chunk
//! would otherwise carry another chunk's self-describing pattern).

mod engine_util;

use ds4_io::pattern::verify;
use ds4_stream::engine::ReadRequest;
use engine_util::*;
use std::sync::Arc;
use std::time::Duration;

/// Deterministic pseudo-random numbers (xorshift), so failures reproduce.
fn rng(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut x = seed | 1;
    move |n| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    }
}

#[test]
fn many_threads_submit_concurrently() {
    const FILE: u64 = 64 * MIB as u64;
    for (name, dev) in devices() {
        let e = Arc::new(pattern_engine(FILE, Arc::clone(&dev), cfg(6, 32 * KIB)));
        within(Duration::from_secs(60), move || {
            let threads: Vec<_> = (0..8u64)
                .map(|t| {
                    let e = Arc::clone(&e);
                    let dev = Arc::clone(&dev);
                    std::thread::spawn(move || {
                        let mut r = rng(t + 1);
                        for _ in 0..40 {
                            // 1..3 ranges per batch, odd sizes up to 300 KiB, odd offsets.
                            let n = 1 + r(3) as usize;
                            let lens: Vec<usize> =
                                (0..n).map(|_| 1 + r(300_000) as usize).collect();
                            let total: usize = lens.iter().sum();
                            let buf = Arc::new(dev.alloc(total).unwrap());
                            let mut at = 0;
                            let mut reqs = Vec::new();
                            let mut want = Vec::new();
                            for len in lens {
                                let off = r(FILE - len as u64);
                                reqs.push(ReadRequest::new(off, len, Arc::clone(&buf), at));
                                want.push((at, off, len));
                                at += len;
                            }
                            e.submit(reqs).unwrap().wait().unwrap();
                            for (at, off, len) in want {
                                assert_pattern(dev.as_ref(), &buf, at, off, len);
                            }
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            let s = e.stats();
            assert_eq!(s.requests, 8 * 40, "{name}");
            assert_eq!(s.failed_requests, 0, "{name}");
        });
    }
}

#[test]
fn many_async_tasks_on_a_multi_thread_runtime() {
    const FILE: u64 = 32 * MIB as u64;
    for (name, dev) in devices() {
        let e = Arc::new(pattern_engine(FILE, Arc::clone(&dev), cfg(4, 64 * KIB)));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut tasks = Vec::new();
            for i in 0..64u64 {
                let e = Arc::clone(&e);
                let dev = Arc::clone(&dev);
                tasks.push(tokio::spawn(async move {
                    let mut r = rng(i + 100);
                    let len = 1 + r(500_000) as usize;
                    let off = r(FILE - len as u64);
                    if i % 2 == 0 {
                        let b = e.read_bytes_async(off, len).await.unwrap();
                        verify(SEED, off, &b).unwrap();
                    } else {
                        let buf = Arc::new(dev.alloc(len).unwrap());
                        let t = e
                            .submit(vec![ReadRequest::new(off, len, Arc::clone(&buf), 0)])
                            .unwrap();
                        tokio::time::timeout(Duration::from_secs(30), t)
                            .await
                            .expect("ticket completes")
                            .unwrap();
                        assert_pattern(dev.as_ref(), &buf, 0, off, len);
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap_or_else(|p| panic!("{name}: {p}"));
            }
        });
    }
}

#[test]
fn tiny_ring_with_slow_copies_never_reuses_a_slot_early() {
    // 2 slots, every copy delayed: readers (pattern source: instant) would refill a slot long
    // before its copy ran if the ring recycled slots before their event completed.
    let dev = discrete(Duration::from_millis(2));
    let e = pattern_engine(16 * MIB as u64, Arc::clone(&dev), cfg(2, 4 * KIB));
    within(Duration::from_secs(60), move || {
        let mut r = rng(7);
        for _ in 0..6 {
            let len = 20 * 4096 + r(4096) as usize; // ~21 chunks through 2 slots
            let off = r(16 * MIB as u64 - len as u64);
            let buf = Arc::new(dev.alloc(len).unwrap());
            e.submit(vec![ReadRequest::new(off, len, Arc::clone(&buf), 0)])
                .unwrap()
                .wait()
                .unwrap();
            assert_pattern(dev.as_ref(), &buf, 0, off, len);
        }
        // Several batches in flight at once share the 2 slots.
        let mut pending = Vec::new();
        for i in 0..10u64 {
            let off = i * 100_003;
            let buf = Arc::new(dev.alloc(30_000).unwrap());
            let t = e
                .submit(vec![ReadRequest::new(off, 30_000, Arc::clone(&buf), 0)])
                .unwrap();
            pending.push((t, buf, off));
        }
        for (t, buf, off) in pending {
            t.wait().unwrap();
            assert_pattern(dev.as_ref(), &buf, 0, off, 30_000);
        }
        let s = e.stats();
        assert!(s.staged_chunks > 100, "{s:?}");
        assert_eq!(s.copy.count, s.staged_chunks);
    });
}
