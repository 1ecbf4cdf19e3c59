//! Shutdown and early drops: dropping the engine with hundreds of requests in flight completes
//! every ticket exactly once (Ok with the right bytes, or Shutdown) and returns promptly;
//! dropping tickets and destination handles early is safe.

mod engine_util;

use ds4_io::fault::{FaultPlan, FaultySource};
use ds4_io::pattern::PatternSource;
use ds4_stream::engine::{Engine, EngineError, ReadRequest};
use engine_util::*;
use std::sync::Arc;
use std::time::Duration;

/// Submits `n` multi-chunk requests, drops the engine, checks every ticket.
fn shutdown_with_requests_in_flight(
    dev: Arc<dyn ds4_stream::device::Device>,
    read_delay: Duration,
    n: u64,
) -> (usize, usize) {
    let src = Arc::new(FaultySource::new(
        Arc::new(PatternSource::new(64 * MIB as u64, SEED)),
        FaultPlan {
            latency: read_delay,
            ..FaultPlan::default()
        },
    ));
    let e = Engine::new(src, Arc::clone(&dev), cfg(2, 4 * KIB)).unwrap();
    let mut tickets = Vec::new();
    for i in 0..n {
        let off = i * 10_007;
        let len = 3 * 4096 + 17; // 4 or 5 chunks
        let buf = Arc::new(dev.alloc(len).unwrap());
        let t = e
            .submit(vec![ReadRequest::new(off, len, Arc::clone(&buf), 0)])
            .unwrap();
        tickets.push((t, buf, off, len));
    }
    drop(e);
    let (mut ok, mut shut) = (0, 0);
    for (t, buf, off, len) in tickets {
        // Every ticket is already complete once drop returned: no waiting needed.
        assert!(
            t.is_done(),
            "ticket of {off} not complete after engine drop"
        );
        match t.wait() {
            Ok(()) => {
                ok += 1;
                assert_pattern(dev.as_ref(), &buf, 0, off, len);
            }
            Err(EngineError::Shutdown { .. }) => shut += 1,
            Err(other) => panic!("unexpected {other}"),
        }
    }
    assert_eq!(ok + shut, n as usize);
    (ok, shut)
}

#[test]
fn dropping_the_engine_with_hundreds_in_flight_completes_every_ticket() {
    within(Duration::from_secs(60), || {
        // Slow copies: chunks wait in the copy queue and for slots.
        let (_, shut) = shutdown_with_requests_in_flight(
            discrete(Duration::from_millis(1)),
            Duration::ZERO,
            300,
        );
        assert!(shut > 0, "300 slow requests cannot all finish before drop");
        // Slow reads straight into host-visible memory.
        let (_, shut) = shutdown_with_requests_in_flight(unified(), Duration::from_millis(1), 300);
        assert!(shut > 0);
        // Both slow.
        shutdown_with_requests_in_flight(
            discrete(Duration::from_millis(1)),
            Duration::from_millis(1),
            200,
        );
    });
}

#[test]
fn dropping_tickets_and_buffers_early_is_safe() {
    within(Duration::from_secs(60), || {
        for (name, dev) in [
            ("discrete", discrete(Duration::from_millis(1))),
            ("unified", unified()),
        ] {
            let e = pattern_engine(16 * MIB as u64, Arc::clone(&dev), cfg(2, 4 * KIB));
            for i in 0..100u64 {
                let buf = Arc::new(dev.alloc(20_000).unwrap());
                let t = e
                    .submit(vec![ReadRequest::new(i * 4099, 20_000, buf, 0)])
                    .unwrap();
                drop(t); // caller's ticket and buffer both gone; the engine holds its own Arc
            }
            // The engine is still fine and finishes the abandoned work before newer work's
            // slots free up.
            let buf = Arc::new(dev.alloc(50_000).unwrap());
            e.submit(vec![ReadRequest::new(99, 50_000, Arc::clone(&buf), 0)])
                .unwrap()
                .wait()
                .unwrap_or_else(|err| panic!("{name}: {err}"));
            assert_pattern(dev.as_ref(), &buf, 0, 99, 50_000);
            // Every abandoned request still completes (counted by the stats; the watchdog
            // fails the test if one never does).
            while e.stats().requests < 101 {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(e.stats().requests, 101, "{name}");
            assert_eq!(e.stats().failed_requests, 0, "{name}");
        }
    });
}

#[test]
fn dropping_an_idle_engine_and_its_device_is_quick() {
    within(Duration::from_secs(10), || {
        for _ in 0..20 {
            let dev = discrete(Duration::ZERO);
            let e = pattern_engine(MIB as u64, Arc::clone(&dev), cfg(4, 64 * KIB));
            drop(e);
            drop(dev);
        }
    });
}
