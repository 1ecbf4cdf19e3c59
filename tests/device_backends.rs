//! One test body, every backend (STYLE.md item 11): the device contract checked on the host
//! backend (both modes) and on every GPU backend compiled in (`--features cuda`), through the
//! device trait alone. On a machine without the GPU the GPU rows are skipped with a note unless
//! `DS4_GPU_TESTS=cuda` demands them (the GPU machine's run sets it).
//!
//! What a GPU run shows that the host backend cannot: real async copies on a real stream,
//! events, leases released before an event completes, and staging reuse against copies that
//! are genuinely still running.

mod engine_util;

use ds4_io::pattern::{byte_at, verify};
use ds4_stream::device::{BackendKind, DeviceError};
use engine_util::*;
use std::sync::Arc;

const SEED: u64 = 0x0dec_0de5_0000_0007;

fn fill(buf: &mut [u8], base: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = byte_at(SEED, base + i as u64);
    }
}

/// Pinned → device in uneven pieces, then read back: every byte where it belongs, the rest zero.
#[test]
fn copies_land_where_asked_and_read_back_exactly() {
    for (name, dev) in devices() {
        let len = 8 * MIB + 123;
        let mut src = dev.alloc_pinned(len).unwrap();
        assert!(src.len() == len, "{name}");
        fill(src.as_mut_slice().unwrap(), 0);
        let dst = Arc::new(dev.alloc(len + 4096).unwrap());
        let mut at = 0;
        for piece in [1usize, 4095, 65_536, 3 * MIB, 5 * MIB] {
            let n = piece.min(len - at);
            dev.copy_h2d_async(&mut src, at, &dst, at + 7, n).unwrap();
            at += n;
        }
        let rest = len - at;
        dev.copy_h2d_async(&mut src, at, &dst, at + 7, rest)
            .unwrap();
        src.wait().unwrap();
        let mut back = vec![0u8; len + 4096];
        dev.read_d2h(&dst, 0, &mut back).unwrap();
        assert!(back[..7].iter().all(|&b| b == 0), "{name}: bytes before");
        verify(SEED, 0, &back[7..7 + len]).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            back[7 + len..].iter().all(|&b| b == 0),
            "{name}: bytes after"
        );
        dev.synchronize().unwrap();
    }
}

/// A staging buffer reused at once: each host write must wait for the copy still reading it.
/// 64 rounds of 4 MiB through one pinned buffer into one device buffer, no waits of our own.
#[test]
fn staging_reuse_never_overwrites_a_copy_in_flight() {
    for (name, dev) in devices() {
        let piece = 4 * MIB;
        let rounds = 64;
        let mut src = dev.alloc_pinned(piece).unwrap();
        let dst = Arc::new(dev.alloc(piece * rounds).unwrap());
        for r in 0..rounds {
            let base = (r * piece) as u64;
            fill(src.as_mut_slice().unwrap(), base); // waits for round r-1's copy
            dev.copy_h2d_async(&mut src, 0, &dst, r * piece, piece)
                .unwrap();
        }
        dev.synchronize().unwrap();
        drop(src);
        let back = read_back(dev.as_ref(), &dst, 0, piece * rounds);
        verify(SEED, 0, &back).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// The lease of a copy is gone by the time its event completes: a read-back right after the
/// wait is never `Busy` (1,000 times, so a late release on a real GPU shows).
#[test]
fn a_copy_lease_is_released_before_its_event_completes() {
    for (name, dev) in devices() {
        let mut src = dev.alloc_pinned(64 * KIB).unwrap();
        fill(src.as_mut_slice().unwrap(), 0);
        let dst = Arc::new(dev.alloc(64 * KIB).unwrap());
        let mut back = vec![0u8; 64 * KIB];
        for i in 0..1000 {
            dev.copy_h2d_async(&mut src, 0, &dst, 0, 64 * KIB).unwrap();
            src.wait().unwrap();
            dev.read_d2h(&dst, 0, &mut back)
                .unwrap_or_else(|e| panic!("{name}: round {i}: {e}"));
        }
        verify(SEED, 0, &back).unwrap();
    }
}

/// While a copy holds its range, a second writer of an overlapping range is refused.
#[test]
fn overlapping_writers_are_refused_while_a_lease_is_held() {
    for (name, dev) in devices() {
        let dst = Arc::new(dev.alloc(MIB).unwrap());
        let lease = dst.lease_write(0, 4096).unwrap();
        let mut src = dev.alloc_pinned(4096).unwrap();
        let r = dev.copy_h2d_async(&mut src, 0, &dst, 100, 10);
        assert!(matches!(r, Err(DeviceError::Busy { .. })), "{name}: {r:?}");
        let mut b = [0u8; 8];
        let r = dev.read_d2h(&dst, 0, &mut b);
        assert!(matches!(r, Err(DeviceError::Busy { .. })), "{name}: {r:?}");
        drop(lease);
        dev.copy_h2d_async(&mut src, 0, &dst, 100, 10).unwrap();
        dev.synchronize().unwrap();
    }
}

/// Ranges are checked on every backend, before anything is queued.
#[test]
fn out_of_range_copies_and_reads_are_typed_errors() {
    for (name, dev) in devices() {
        let dst = Arc::new(dev.alloc(4096).unwrap());
        let mut src = dev.alloc_pinned(4096).unwrap();
        for (so, d, n) in [(0, 4000, 200), (4000, 0, 200), (0, usize::MAX, 2)] {
            let r = dev.copy_h2d_async(&mut src, so, &dst, d, n);
            assert!(
                matches!(r, Err(DeviceError::OutOfRange { .. })),
                "{name}: {r:?}"
            );
        }
        let mut b = vec![0u8; 10];
        let r = dev.read_d2h(&dst, 4090, &mut b);
        assert!(
            matches!(r, Err(DeviceError::OutOfRange { .. })),
            "{name}: {r:?}"
        );
        dev.synchronize().unwrap();
    }
}

/// A GPU backend copies only from memory it pinned itself (a pageable or foreign source would
/// turn the async copy into a hidden synchronous one), and writes only its own memory.
#[test]
fn gpu_backends_refuse_foreign_memory() {
    let host = unified();
    for (name, dev) in gpu_devices() {
        let mut foreign = host.alloc_pinned(4096).unwrap();
        let dst = Arc::new(dev.alloc(4096).unwrap());
        let r = dev.copy_h2d_async(&mut foreign, 0, &dst, 0, 16);
        assert!(
            matches!(
                r,
                Err(DeviceError::WrongBackend {
                    found: BackendKind::Host,
                    ..
                })
            ),
            "{name}: {r:?}"
        );
        let mut ours = dev.alloc_pinned(4096).unwrap();
        let host_dst = Arc::new(host.alloc(4096).unwrap());
        let r = dev.copy_h2d_async(&mut ours, 0, &host_dst, 0, 16);
        assert!(
            matches!(r, Err(DeviceError::WrongBackend { .. })),
            "{name}: {r:?}"
        );
    }
}

/// Pinned staging is aligned for unbuffered reads on every backend.
#[test]
fn pinned_memory_is_page_aligned() {
    for (name, dev) in devices() {
        for len in [1usize, 4096, 3 * MIB + 5] {
            let mut p = dev.alloc_pinned(len).unwrap();
            let addr = p.as_mut_slice().unwrap().as_ptr() as usize;
            assert_eq!(addr % ds4_stream::device::PINNED_ALIGN, 0, "{name} {len}");
        }
    }
}

/// GPU backends report device memory; the numbers are plausible.
#[test]
fn gpu_backends_report_memory() {
    for (name, dev) in gpu_devices() {
        let m = dev.memory_info().unwrap().expect("GPU reports memory");
        assert!(m.total > 0 && m.free <= m.total, "{name}: {m:?}");
    }
}

/// Without the backend's driver or device, opening it is a clean `NoDevice` (never a panic);
/// a backend not compiled in says so.
#[test]
fn an_absent_backend_is_a_clean_error() {
    for kind in [BackendKind::Cuda, BackendKind::Hip] {
        match kind.open_default() {
            Ok(d) => eprintln!("{kind}: present ({})", d.name()),
            Err(DeviceError::NoDevice { detail, .. }) => assert!(!detail.is_empty()),
            Err(e @ DeviceError::NotCompiled(_)) => {
                assert!(e.to_string().contains(&format!("--features {kind}")), "{e}")
            }
            Err(e) => panic!("{kind}: unexpected error {e}"),
        }
    }
}
