//! The device layer on its own (host backend): events order copies, a `PinnedBuf` cannot be
//! rewritten or freed under a running copy, copies and read-backs hold leases on their ranges so
//! no engine request can write under them, errors of copies nobody waited for reach the next
//! `synchronize`, ranges are checked, failures are typed. Ordering is forced with a
//! [`CopyGate`] (the copy thread waits at it), never with sleeps.

mod engine_util;

use ds4_io::pattern::PatternSource;
use ds4_stream::device::{CopyGate, Device, DeviceBuffer, DeviceError, HostConfig, HostDevice};
use ds4_stream::engine::{Engine, EngineError, ReadRequest};
use engine_util::*;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// How long a test waits for the copy thread to reach the gate before failing (not a timing
/// assertion: only a hang guard).
const HELD: Duration = Duration::from_secs(30);

fn gated(host_visible: bool) -> (Arc<HostDevice>, Arc<CopyGate>) {
    let gate = CopyGate::closed();
    let dev = HostDevice::new(HostConfig {
        host_visible,
        gate: Some(Arc::clone(&gate)),
        ..HostConfig::default()
    })
    .unwrap();
    (Arc::new(dev), gate)
}

/// A unified gated host device and an engine on a 1 MiB pattern source that writes into it.
fn gated_engine() -> (Arc<HostDevice>, Arc<CopyGate>, Arc<dyn Device>, Engine) {
    let (dev, gate) = gated(true);
    let device: Arc<dyn Device> = dev.clone();
    let engine = Engine::new(
        Arc::new(PatternSource::new(1 << 20, SEED)),
        Arc::clone(&device),
        cfg(2, 64 * KIB),
    )
    .unwrap();
    (dev, gate, device, engine)
}

/// Opens the gate from another thread once the copy thread waits at it.
fn open_when_held(gate: &Arc<CopyGate>) -> thread::JoinHandle<()> {
    let g = Arc::clone(gate);
    thread::spawn(move || {
        assert!(
            g.wait_until_held(HELD),
            "copy thread never reached the gate"
        );
        g.open();
    })
}

#[test]
fn pinned_buffer_waits_for_its_copy_before_host_writes() {
    let (dev, gate) = gated(false);
    let mut pin = dev.alloc_pinned(4096).unwrap();
    assert_eq!(pin.as_mut_slice().unwrap().as_ptr() as usize % 4096, 0);
    pin.as_mut_slice().unwrap().fill(0xAA);
    let dst = Arc::new(dev.alloc(4096).unwrap());
    assert!(!dst.host_visible());
    dev.copy_h2d_async(&mut pin, 0, &dst, 0, 4096).unwrap();
    assert!(gate.wait_until_held(HELD));
    assert!(!pin.is_idle().unwrap(), "the copy is held at the gate");
    let opener = open_when_held(&gate);
    // Mutable access waits for the copy, so the copy saw 0xAA, not 0x55.
    pin.as_mut_slice().unwrap().fill(0x55);
    assert!(pin.is_idle().unwrap());
    opener.join().unwrap();
    let got = read_back(dev.as_ref(), &dst, 0, 4096);
    assert!(got.iter().all(|&b| b == 0xAA));
}

#[test]
fn dropping_a_pinned_buffer_waits_for_its_copy() {
    let (dev, gate) = gated(false);
    let dst = Arc::new(dev.alloc(3 * 4096).unwrap());
    let opener = open_when_held(&gate);
    for i in 0..3u8 {
        let mut pin = dev.alloc_pinned(4096).unwrap();
        pin.as_mut_slice().unwrap().fill(i + 1);
        dev.copy_h2d_async(&mut pin, 0, &dst, i as usize * 4096, 4096)
            .unwrap();
        drop(pin); // must not free memory the copy thread is about to read
    }
    opener.join().unwrap();
    dev.synchronize().unwrap();
    let got = read_back(dev.as_ref(), &dst, 0, 3 * 4096);
    for i in 0..3 {
        assert!(got[i * 4096..(i + 1) * 4096]
            .iter()
            .all(|&b| b == i as u8 + 1));
    }
}

#[test]
fn copies_run_in_issue_order_and_keep_their_destination_alive() {
    let dev = HostDevice::discrete(Duration::ZERO).unwrap();
    let mut a = dev.alloc_pinned(8192).unwrap();
    let mut b = dev.alloc_pinned(8192).unwrap();
    a.as_mut_slice().unwrap().fill(1);
    b.as_mut_slice().unwrap().fill(2);
    let dst = Arc::new(dev.alloc(200).unwrap());
    dev.copy_h2d_async(&mut a, 10, &dst, 0, 100).unwrap();
    dev.copy_h2d_async(&mut b, 20, &dst, 100, 100).unwrap();
    b.event().unwrap().wait().unwrap();
    assert!(
        a.event().unwrap().query().unwrap(),
        "earlier copy done first"
    );
    let got = read_back(&dev, &dst, 0, 200);
    assert!(got[..100].iter().all(|&x| x == 1) && got[100..].iter().all(|&x| x == 2));
    // A destination dropped by the caller right after issuing is kept alive by the device.
    let tmp = Arc::new(dev.alloc(4096).unwrap());
    dev.copy_h2d_async(&mut a, 0, &tmp, 0, 4096).unwrap();
    drop(tmp);
    dev.synchronize().unwrap();
}

/// A copy holds a write lease on its destination range until it has run: an engine request, a
/// second copy and a read-back of those bytes are refused meanwhile (before leases, the engine
/// request was accepted and raced the copy thread on the same bytes).
#[test]
fn a_queued_copy_leases_its_destination_until_it_ran() {
    let (dev, gate, device, engine) = gated_engine();
    let dst = Arc::new(dev.alloc(8192).unwrap());
    let mut pin = dev.alloc_pinned(4096).unwrap();
    pin.as_mut_slice().unwrap().fill(7);
    dev.copy_h2d_async(&mut pin, 0, &dst, 0, 4096).unwrap();
    assert!(gate.wait_until_held(HELD));

    let e = engine
        .submit(vec![ReadRequest::new(0, 100, Arc::clone(&dst), 4000)])
        .unwrap_err();
    assert!(matches!(e, EngineError::DestinationBusy { .. }), "{e}");
    let mut other = dev.alloc_pinned(4096).unwrap();
    let e = dev
        .copy_h2d_async(&mut other, 0, &dst, 2048, 4096)
        .unwrap_err();
    assert!(matches!(e, DeviceError::Busy { .. }), "{e}");
    let mut v = [0u8; 16];
    let e = dev.read_d2h(&dst, 4090, &mut v).unwrap_err();
    assert!(matches!(e, DeviceError::Busy { .. }), "{e}");
    // The rest of the buffer is free.
    engine
        .submit(vec![ReadRequest::new(0, 4096, Arc::clone(&dst), 4096)])
        .unwrap()
        .wait()
        .unwrap();

    gate.open();
    pin.wait().unwrap();
    // The copy is over: its range can be written and read again.
    engine
        .submit(vec![ReadRequest::new(0, 4096, Arc::clone(&dst), 0)])
        .unwrap()
        .wait()
        .unwrap();
    assert_pattern(device.as_ref(), &dst, 0, 0, 4096);
}

/// A read-back holds a read lease for its whole duration: a request that would write the same
/// bytes while the read is queued behind the gate is refused, not raced.
#[test]
fn a_read_back_leases_its_range_until_it_returns() {
    let (dev, gate, device, engine) = gated_engine();
    let dst = Arc::new(dev.alloc(4096).unwrap());
    let reader = {
        let (dev, dst) = (Arc::clone(&dev), Arc::clone(&dst));
        thread::spawn(move || {
            let mut v = vec![1u8; 4096];
            dev.read_d2h(&dst, 0, &mut v).unwrap();
            v
        })
    };
    assert!(gate.wait_until_held(HELD));
    let e = engine
        .submit(vec![ReadRequest::new(0, 10, Arc::clone(&dst), 100)])
        .unwrap_err();
    assert!(matches!(e, EngineError::DestinationBusy { .. }), "{e}");
    let mut pin = dev.alloc_pinned(4096).unwrap();
    let e = dev.copy_h2d_async(&mut pin, 0, &dst, 0, 1).unwrap_err();
    assert!(matches!(e, DeviceError::Busy { .. }), "{e}");
    // Other readers may share the range.
    gate.open();
    assert!(
        reader.join().unwrap().iter().all(|&b| b == 0),
        "fresh memory is zeroed"
    );
    engine
        .submit(vec![ReadRequest::new(0, 10, Arc::clone(&dst), 100)])
        .unwrap()
        .wait()
        .unwrap();
    assert_pattern(device.as_ref(), &dst, 100, 0, 10);
}

/// A copy that failed while nobody waited for it (its staging buffer was dropped) is not lost:
/// the next `synchronize` returns it, once.
#[test]
fn an_unwaited_copy_error_reaches_the_next_synchronize() {
    let (dev, gate) = gated(false);
    gate.open();
    gate.fail_next(2);
    let dst = Arc::new(dev.alloc(8192).unwrap());
    for i in 0..2 {
        let mut pin = dev.alloc_pinned(4096).unwrap();
        dev.copy_h2d_async(&mut pin, 0, &dst, i * 4096, 4096)
            .unwrap();
        drop(pin); // waits for the copy, which fails: the error goes to the device
    }
    match dev.synchronize() {
        Err(DeviceError::Deferred { more: 1, first }) => {
            assert!(first.to_string().contains("injected"), "{first}");
        }
        other => panic!("expected the deferred copy errors, got {other:?}"),
    }
    dev.synchronize().unwrap();
    // A failed copy releases its lease like a successful one.
    let mut pin = dev.alloc_pinned(4096).unwrap();
    dev.copy_h2d_async(&mut pin, 0, &dst, 0, 4096).unwrap();
    pin.wait().unwrap();
}

#[test]
fn ranges_are_checked_and_errors_typed() {
    let dev = HostDevice::new(HostConfig::default()).unwrap();
    let mut pin = dev.alloc_pinned(4096).unwrap();
    let dst = Arc::new(dev.alloc(100).unwrap());
    let e = dev.copy_h2d_async(&mut pin, 4000, &dst, 0, 97).unwrap_err();
    assert!(
        matches!(
            e,
            DeviceError::OutOfRange {
                what: "pinned buffer",
                ..
            }
        ),
        "{e}"
    );
    let e = dev
        .copy_h2d_async(&mut pin, 0, &dst, usize::MAX, 2)
        .unwrap_err();
    assert!(
        matches!(
            e,
            DeviceError::OutOfRange {
                what: "device buffer",
                ..
            }
        ),
        "{e}"
    );
    // A copy outside the lease it is given is refused too.
    let lease = Arc::new(dst.lease_write(0, 10).unwrap());
    let e = dev.copy_h2d_leased(&mut pin, 0, &lease, 5, 10).unwrap_err();
    assert!(
        matches!(
            e,
            DeviceError::OutOfRange {
                what: "write lease",
                ..
            }
        ),
        "{e}"
    );
    drop(lease);
    let mut v = [0u8; 10];
    let e = dev.read_d2h(&dst, 95, &mut v).unwrap_err();
    assert!(
        matches!(
            e,
            DeviceError::OutOfRange {
                offset: 95,
                len: 10,
                size: 100,
                ..
            }
        ),
        "{e}"
    );
    dev.read_d2h(&dst, 100, &mut []).unwrap();
    // Allocations the allocator cannot serve fail with their size instead of aborting.
    let huge = usize::MAX - 4095;
    let e = dev.alloc(huge).unwrap_err();
    assert!(
        matches!(e, DeviceError::OutOfMemory { bytes, .. } if bytes == huge as u64),
        "{e}"
    );
    assert!(dev.alloc_pinned(huge).is_err());
    assert!(DeviceBuffer::host(huge).is_err());
    // Zero-length allocations are valid and empty.
    assert!(dev.alloc(0).unwrap().is_empty());
}

#[test]
fn unified_memory_is_host_visible() {
    let dev = unified();
    assert!(dev.unified_memory());
    let buf = dev.alloc(10).unwrap();
    assert!(buf.host_visible());
    assert!(!discrete(Duration::ZERO).alloc(10).unwrap().host_visible());
}
