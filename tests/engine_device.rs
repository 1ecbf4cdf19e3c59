//! The device layer on its own (host backend): events order copies, a `PinnedBuf` cannot be
//! rewritten or freed under a running copy, ranges are checked, failures are typed.

mod engine_util;

use ds4_stream::device::{Device, DeviceBuffer, DeviceError, HostConfig, HostDevice};
use engine_util::*;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn pinned_buffer_waits_for_its_copy_before_host_writes() {
    // Long enough that the copy is still queued when the next lines run, even on a busy box.
    let dev = HostDevice::discrete(Duration::from_millis(300));
    let mut pin = dev.alloc_pinned(4096).unwrap();
    assert_eq!(pin.as_mut_slice().unwrap().as_ptr() as usize % 4096, 0);
    pin.as_mut_slice().unwrap().fill(0xAA);
    let dst = Arc::new(dev.alloc(4096).unwrap());
    assert!(!dst.host_visible());
    dev.copy_h2d_async(&mut pin, 0, &dst, 0, 4096).unwrap();
    assert!(
        !pin.is_idle().unwrap(),
        "copy is asynchronous and still delayed"
    );
    // Mutable access waits for the copy, so the copy saw 0xAA, not 0x55.
    pin.as_mut_slice().unwrap().fill(0x55);
    assert!(pin.is_idle().unwrap());
    let got = read_back(&dev, &dst, 0, 4096);
    assert!(got.iter().all(|&b| b == 0xAA));
}

#[test]
fn dropping_a_pinned_buffer_waits_for_its_copy() {
    let dev = HostDevice::discrete(Duration::from_millis(30));
    let dst = Arc::new(dev.alloc(3 * 4096).unwrap());
    for i in 0..3u8 {
        let mut pin = dev.alloc_pinned(4096).unwrap();
        pin.as_mut_slice().unwrap().fill(i + 1);
        dev.copy_h2d_async(&mut pin, 0, &dst, i as usize * 4096, 4096)
            .unwrap();
        drop(pin); // must not free memory the copy thread is about to read
    }
    drop(dst.clone());
    dev.synchronize().unwrap();
    let got = read_back(&dev, &dst, 0, 3 * 4096);
    for i in 0..3 {
        assert!(got[i * 4096..(i + 1) * 4096]
            .iter()
            .all(|&b| b == i as u8 + 1));
    }
}

#[test]
fn copies_run_in_issue_order_and_keep_their_destination_alive() {
    let dev = HostDevice::discrete(Duration::from_millis(5));
    let mut a = dev.alloc_pinned(8192).unwrap();
    let mut b = dev.alloc_pinned(8192).unwrap();
    a.as_mut_slice().unwrap().fill(1);
    b.as_mut_slice().unwrap().fill(2);
    let dst = Arc::new(dev.alloc(100).unwrap());
    // Same range twice: the later copy wins.
    dev.copy_h2d_async(&mut a, 10, &dst, 0, 100).unwrap();
    dev.copy_h2d_async(&mut b, 20, &dst, 0, 100).unwrap();
    b.event().unwrap().wait().unwrap();
    assert!(
        a.event().unwrap().query().unwrap(),
        "earlier copy done first"
    );
    assert!(read_back(&dev, &dst, 0, 100).iter().all(|&x| x == 2));
    // A destination dropped by the caller right after issuing is kept alive by the device.
    let tmp = Arc::new(dev.alloc(4096).unwrap());
    dev.copy_h2d_async(&mut a, 0, &tmp, 0, 4096).unwrap();
    drop(tmp);
    dev.synchronize().unwrap();
}

#[test]
fn ranges_are_checked_and_errors_typed() {
    let dev = HostDevice::new(HostConfig::default());
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
