//! Resource accounting: after an engine (and its device) is dropped, the process's open file
//! descriptors (/proc/self/fd), threads (/proc/self/task) and the staging ring's pinned bytes
//! (counted by `device::testing::CountingDevice`, the test double) are back where they started, and every
//! destination buffer is held by its owner alone (the engine and the copy thread let go of
//! their `Arc`s). Exercised paths: staged and direct reads on a real file with direct IO,
//! dropped tickets, EIO, shutdown with hundreds of requests in flight, an engine whose worker
//! fails to open its handle, an engine on a missing file. Repeated so a leak of one fd per
//! cycle shows up as a count, not a flake.
//!
//! Linux only: fds and threads are counted through /proc. Under Wine (Windows build) neither
//! is countable this way; the pinned-byte and `Arc` checks are portable.
//! One test function: the counts are process-wide, a test running alongside would disturb them.

use ds4_io::fault::{FaultPlan, FaultySource};
use ds4_io::pattern::write_file;
use ds4_io::Source;
use ds4_stream::device::testing::{open_fds, threads, CountingDevice, PinnedCounter};
use ds4_stream::device::{Device, DeviceBuffer, HostDevice};
use ds4_stream::engine::{Engine, EngineConfig, EngineError, ReadRequest};
use std::sync::Arc;
use std::time::Duration;

const MIB: usize = 1 << 20;
const GIB: u64 = 1 << 30;

fn cfg() -> EngineConfig {
    EngineConfig {
        workers: 6,
        slots: 4,
        slot_bytes: MIB,
        queue_depth: 8,
        ..EngineConfig::default()
    }
}

fn counted(delay: Duration) -> (Arc<dyn Device>, Arc<PinnedCounter>) {
    let d = CountingDevice::new(Arc::new(HostDevice::discrete(delay).unwrap()));
    let c = d.counter();
    (Arc::new(d), c)
}

/// Reads through `e`: staged (device memory), direct (host memory), some tickets dropped.
/// Returns the destinations, which the caller checks are released.
fn traffic(e: &Engine, dev: &dyn Device) -> Vec<Arc<DeviceBuffer>> {
    let mut keep = Vec::new();
    for i in 0..24u64 {
        let len = 3 * MIB + 123;
        let dst = Arc::new(if i % 2 == 0 {
            dev.alloc(len).unwrap()
        } else {
            DeviceBuffer::host(len).unwrap()
        });
        let off = (2 * GIB - MIB as u64 + i * 4096).min(e.file_len() - len as u64);
        let t = e
            .submit(vec![ReadRequest::new(off, len, Arc::clone(&dst), 0)])
            .unwrap();
        if i % 3 == 0 {
            drop(t); // dropped early: the engine finishes without us
        } else {
            t.wait().unwrap();
        }
        keep.push(dst);
    }
    keep
}

fn assert_released(bufs: &[Arc<DeviceBuffer>], what: &str) {
    for (i, b) in bufs.iter().enumerate() {
        assert_eq!(
            Arc::strong_count(b),
            1,
            "{what}: destination {i} still shared"
        );
    }
}

#[test]
fn engines_return_fds_threads_pinned_memory_and_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leak.bin");
    let len = 4 * GIB + 8192;
    write_file(
        &path,
        len,
        &[
            0..8 * MIB as u64,
            2 * GIB - 8 * MIB as u64..2 * GIB + 8 * MIB as u64,
        ],
    )
    .unwrap();
    let fds0 = open_fds();
    let threads0 = threads();
    assert!(fds0.is_some() == cfg!(target_os = "linux"));
    let check = |what: &str, pinned: &PinnedCounter| {
        assert_eq!(
            pinned.live_bytes(),
            0,
            "{what}: pinned bytes still allocated"
        );
        assert_eq!(
            pinned.live_bufs(),
            0,
            "{what}: pinned buffers still allocated"
        );
        assert_eq!(open_fds(), fds0, "{what}: open fds changed");
        // A joined thread can stay listed in /proc/self/task for a moment after `join` returns
        // (the kernel wakes the joiner before it removes the exiting task): wait for it, with a
        // bound. A thread that was never joined stays and fails the check.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while threads() != threads0 && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert_eq!(threads(), threads0, "{what}: thread count changed");
    };

    for cycle in 0..5 {
        // 1. A real file with direct IO: staged and direct reads, dropped tickets.
        let (dev, pinned) = counted(Duration::ZERO);
        let e = Engine::open(&path, Arc::clone(&dev), cfg()).unwrap();
        assert_eq!(
            pinned.live_bytes(),
            4 * MIB as u64,
            "the ring is allocated once"
        );
        if let (Some(a), Some(b)) = (fds0, open_fds()) {
            assert!(
                b >= a + 6,
                "each of 6 workers opens its own handle ({a} -> {b})"
            );
        }
        let bufs = traffic(&e, dev.as_ref());
        drop(e);
        drop(dev);
        assert_released(&bufs, "file engine");
        check(&format!("cycle {cycle}: file engine"), &pinned);

        // 2. Shutdown with hundreds of requests in flight (slow copies keep them there).
        let (dev, pinned) = counted(Duration::from_micros(200));
        let src: Arc<dyn Source> = ds4_io::FileSource::open(&path, Default::default()).unwrap();
        let e = Engine::new(src, Arc::clone(&dev), cfg()).unwrap();
        let mut tickets = Vec::new();
        let mut bufs = Vec::new();
        for i in 0..300u64 {
            let dst = Arc::new(dev.alloc(256 * 1024).unwrap());
            let t = e
                .submit(vec![ReadRequest::new(
                    i * 65_536,
                    256 * 1024,
                    Arc::clone(&dst),
                    0,
                )])
                .unwrap();
            tickets.push(t);
            bufs.push(dst);
        }
        drop(e);
        assert!(
            tickets.iter().all(|t| t.is_done()),
            "a ticket outlived its engine"
        );
        let shut = tickets
            .into_iter()
            .map(|t| t.wait())
            .filter(|r| matches!(r, Err(EngineError::Shutdown { .. })))
            .count();
        drop(dev);
        assert_released(&bufs, "shutdown");
        check(
            &format!("cycle {cycle}: shutdown ({shut} cut short)"),
            &pinned,
        );

        // 3. EIO on some reads.
        let (dev, pinned) = counted(Duration::ZERO);
        let plan = FaultPlan {
            seed: cycle,
            eio_prob: 0.2,
            ..FaultPlan::default()
        };
        let src = Arc::new(FaultySource::new(
            ds4_io::FileSource::open(&path, Default::default()).unwrap(),
            plan,
        ));
        let e = Engine::new(src.clone(), Arc::clone(&dev), cfg()).unwrap();
        let mut bufs = Vec::new();
        let mut failed = 0;
        for i in 0..40u64 {
            let dst = Arc::new(dev.alloc(2 * MIB).unwrap());
            let r = e
                .submit(vec![ReadRequest::new(
                    i * 4096,
                    2 * MIB,
                    Arc::clone(&dst),
                    0,
                )])
                .unwrap()
                .wait();
            failed += usize::from(r.is_err());
            bufs.push(dst);
        }
        assert!(failed > 0 && src.counts().eio > 0);
        drop(e);
        drop(src);
        drop(dev);
        assert_released(&bufs, "eio");
        check(&format!("cycle {cycle}: eio"), &pinned);

        // 4. A worker's handle fails to open: the start fails, nothing stays behind.
        let (dev, pinned) = counted(Duration::ZERO);
        let plan = FaultPlan {
            fail_open_at: Some(4),
            ..FaultPlan::default()
        };
        let src = Arc::new(FaultySource::new(
            ds4_io::FileSource::open(&path, Default::default()).unwrap(),
            plan,
        ));
        let err = Engine::new(src, Arc::clone(&dev), cfg()).unwrap_err();
        assert!(matches!(err, EngineError::Workers { .. }), "{err}");
        drop(dev);
        check(&format!("cycle {cycle}: failed open"), &pinned);

        // 5. A missing file.
        let (dev, pinned) = counted(Duration::ZERO);
        assert!(Engine::open(dir.path().join("missing"), Arc::clone(&dev), cfg()).is_err());
        drop(dev);
        check(&format!("cycle {cycle}: missing file"), &pinned);
    }
}
