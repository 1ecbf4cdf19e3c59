//! Fault injection: hidden faults (short reads, EINTR storms) never reach the caller and never
//! change a byte; visible ones (EIO, open failures) arrive as typed errors naming the range;
//! latency and throttling slow reads down; bit flips are caught by the verifier. Portable.

mod common;

use common::{scratch, ReportJob, Rng, GIB, MIB};
use ds4_io::fault::{self, FaultPlan, FaultySource, InjectedFault, ThrottledSource};
use ds4_io::pattern::{self, PatternSource};
use ds4_io::{FileSource, OpenConfig, PoolConfig, ReadError, ReaderPool, Source};
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn short_reads_and_eintr_storms_are_invisible_on_a_real_file() {
    let dir = scratch();
    let path = dir.path().join("f.bin");
    let p = pattern::write_file(
        &path,
        4 * GIB + MIB,
        &[0..4 * MIB, 4 * GIB - MIB..4 * GIB + MIB],
    )
    .unwrap();
    let faulty = FaultySource::new(
        FileSource::open(&path, OpenConfig::default()).unwrap(),
        FaultPlan {
            seed: 11,
            short_read_prob: 0.5,
            eintr_prob: 0.3,
            eintr_storm_max: 40,
            ..Default::default()
        },
    );
    let mut h = faulty.open_handle().unwrap();
    let mut rng = Rng(3);
    for i in 0..300 {
        let region = &p.regions()[i % 2];
        let off = region.start + rng.below(region.end - region.start - 1);
        let len = 1 + rng.below((region.end - off).min(600_000)) as usize;
        let mut buf = vec![0u8; len];
        h.read_exact_at(&mut buf, off).unwrap();
        p.verify(off, &buf).unwrap();
    }
    let c = faulty.counts();
    assert_eq!(c.reads, 300);
    assert!(c.short_reads > 50 && c.eintr > 100, "{c:?}");
    assert_eq!((c.eio, c.bit_flips), (0, 0));
}

#[test]
fn eio_at_the_nth_read_reaches_the_caller_typed_and_the_handle_stays_usable() {
    let faulty = FaultySource::new(
        Arc::new(PatternSource::new(16 * GIB, 2)),
        FaultPlan {
            eio_at_op: Some(5),
            ..Default::default()
        },
    );
    let mut h = faulty.open_handle().unwrap();
    for op in 1..=10u64 {
        let off = op * GIB - 3;
        let mut buf = vec![0u8; 4096];
        let r = h.read_exact_at(&mut buf, off);
        if op == 5 {
            let e = r.unwrap_err();
            let re = ReadError::find(&e).expect("ReadError");
            assert_eq!((re.offset, re.len), (off, 4096));
            assert!(re.path.to_string_lossy().contains("pattern"));
            assert_eq!(fault::injected(&e), Some(&InjectedFault::Eio { op: 5 }));
            // The cause is the error's source, said once (not repeated in its own message).
            let cause = std::error::Error::source(&e).map(|c| c.to_string());
            assert!(
                cause.as_deref().unwrap_or("").contains("EIO"),
                "{e}: {cause:?}"
            );
            assert!(!e.to_string().contains("EIO"), "{e}");
        } else {
            r.unwrap();
            pattern::verify(2, off, &buf).unwrap();
        }
    }
    assert_eq!(faulty.counts().eio, 1);
}

#[test]
fn eio_with_a_probability_is_counted_exactly() {
    let faulty = FaultySource::new(
        Arc::new(PatternSource::new(GIB, 4)),
        FaultPlan {
            seed: 99,
            eio_prob: 0.2,
            ..Default::default()
        },
    );
    let mut h = faulty.open_handle().unwrap();
    let mut failed = 0;
    for i in 0..500u64 {
        let mut b = [0u8; 100];
        match h.read_exact_at(&mut b, i * 1000) {
            Ok(()) => pattern::verify(4, i * 1000, &b).unwrap(),
            Err(e) => {
                assert!(matches!(
                    fault::injected(&e),
                    Some(InjectedFault::Eio { .. })
                ));
                failed += 1;
            }
        }
    }
    assert_eq!(faulty.counts().eio, failed);
    assert!(failed > 40 && failed < 200, "{failed} of 500 at p = 0.2");
}

#[test]
fn the_same_seed_injects_the_same_faults() {
    let run = |seed| {
        let faulty = FaultySource::new(
            Arc::new(PatternSource::new(GIB, 4)),
            FaultPlan {
                seed,
                eio_prob: 0.3,
                short_read_prob: 0.5,
                ..Default::default()
            },
        );
        let mut h = faulty.open_handle().unwrap();
        let fails: Vec<bool> = (0..200u64)
            .map(|i| h.read_exact_at(&mut [0u8; 64], i).is_err())
            .collect();
        (fails, faulty.counts())
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7).0, run(8).0);
}

#[test]
fn latency_and_spikes_slow_reads_down() {
    let faulty = FaultySource::new(
        Arc::new(PatternSource::new(GIB, 4)),
        FaultPlan {
            latency: Duration::from_millis(2),
            spike_prob: 1.0,
            spike: Duration::from_millis(3),
            ..Default::default()
        },
    );
    let mut h = faulty.open_handle().unwrap();
    let t0 = Instant::now();
    for i in 0..10u64 {
        let mut b = [0u8; 10];
        h.read_exact_at(&mut b, i).unwrap();
        pattern::verify(4, i, &b).unwrap();
    }
    // Sleeps last at least as long as asked: a lower bound never flakes.
    assert!(
        t0.elapsed() >= Duration::from_millis(50),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(faulty.counts().spikes, 10);
}

#[test]
fn bit_flips_are_silent_for_the_reader_and_caught_by_the_verifier() {
    let faulty = FaultySource::new(
        Arc::new(PatternSource::new(GIB, 6)),
        FaultPlan {
            seed: 1,
            bit_flip_prob: 1.0,
            ..Default::default()
        },
    );
    let mut h = faulty.open_handle().unwrap();
    for i in 0..50u64 {
        let off = i * 7919;
        let mut b = vec![0u8; 4096];
        h.read_exact_at(&mut b, off).unwrap();
        let m = pattern::verify(6, off, &b).expect_err("a flipped bit must be caught");
        assert!(m.offset >= off && m.offset < off + 4096);
        assert_eq!((m.expected ^ m.actual).count_ones(), 1, "{m}");
    }
    assert_eq!(faulty.counts().bit_flips, 50);
}

#[test]
fn throttled_source_caps_the_rate_of_all_handles_together() {
    let src = Arc::new(ThrottledSource::new(
        Arc::new(PatternSource::new(GIB, 8)),
        4 * MIB,
    ));
    let t0 = Instant::now();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let src = Arc::clone(&src);
            std::thread::spawn(move || {
                let mut h = src.open_handle().unwrap();
                for k in 0..2u64 {
                    let off = (t * 2 + k) * 256 * 1024;
                    let mut b = vec![0u8; 256 * 1024];
                    h.read_exact_at(&mut b, off).unwrap();
                    pattern::verify(8, off, &b).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // 2 MiB at 4 MiB/s: at least half a second, whatever the thread count.
    assert!(
        t0.elapsed() >= Duration::from_millis(490),
        "{:?}",
        t0.elapsed()
    );
}

#[test]
fn faults_through_the_pool_arrive_typed_and_leave_it_usable() {
    let dir = scratch();
    let path = dir.path().join("pool.bin");
    let p = Arc::new(pattern::write_full(&path, 16 * MIB + 77).unwrap());
    let faulty = Arc::new(FaultySource::new(
        FileSource::open(&path, OpenConfig::default()).unwrap(),
        FaultPlan {
            seed: 5,
            eio_prob: 0.1,
            short_read_prob: 0.3,
            eintr_prob: 0.1,
            eintr_storm_max: 5,
            ..Default::default()
        },
    ));
    let pool = ReaderPool::new(faulty.clone(), &PoolConfig::default()).unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    const JOBS: usize = 600;
    let mut rng = Rng(17);
    for id in 0..JOBS {
        let off = rng.below(16 * MIB);
        let len = 1 + rng.below(200_000).min(16 * MIB + 77 - off - 1) as usize;
        let p = Arc::clone(&p);
        pool.submit(Box::new(ReportJob {
            id,
            tx: tx.clone(),
            body: move |h: &mut dyn ds4_io::ReadAt| {
                let mut b = vec![0u8; len];
                h.read_exact_at(&mut b, off)?;
                p.verify(off, &b).map_err(io::Error::other)
            },
        }));
    }
    let (mut ok, mut eio) = (0u64, 0u64);
    let mut seen = vec![false; JOBS];
    for _ in 0..JOBS {
        let (id, r) = rx.recv_timeout(Duration::from_secs(60)).unwrap();
        assert!(
            !std::mem::replace(&mut seen[id], true),
            "job {id} completed twice"
        );
        match r.expect("not cancelled") {
            Ok(()) => ok += 1,
            Err(e) => {
                assert!(
                    matches!(fault::injected(&e), Some(InjectedFault::Eio { .. })),
                    "unexpected error: {e}"
                );
                assert!(ReadError::find(&e).is_some());
                eio += 1;
            }
        }
    }
    drop(pool);
    let c = faulty.counts();
    assert_eq!(c.eio, eio);
    assert_eq!(ok + eio, JOBS as u64);
    assert!(ok > 400 && eio > 0, "ok {ok} eio {eio}");
    assert!(c.short_reads > 0 && c.eintr > 0, "{c:?}");
}
