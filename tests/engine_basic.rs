//! Engine basics on the host backend: every byte verified against the offset pattern, through
//! both paths (unified memory: read straight into the destination; discrete emulation: staging
//! ring + copy thread).

mod engine_util;

use ds4_io::pattern::verify;
use ds4_stream::device::testing::CountingDevice;
use ds4_stream::device::Device;
use ds4_stream::device::{BackendKind, DeviceBuffer, DeviceError};
use ds4_stream::engine::{EngineConfig, EngineError, ReadRequest};
use engine_util::*;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn small_and_multi_chunk_ranges_with_unaligned_edges() {
    const FILE: u64 = 3 * MIB as u64 + 777;
    for (name, dev) in devices() {
        let e = pattern_engine(FILE, Arc::clone(&dev), cfg(4, 64 * KIB));
        let cases: &[(u64, usize, usize)] = &[
            (0, 1, 0),
            (0, 4096, 0),
            (1, 4095, 3),
            (4095, 2, 1),
            (65_536 - 5, 10, 7),         // crosses one chunk boundary
            (12_345, 1_000_000, 4096),   // many chunks, unaligned head and tail
            (0, FILE as usize, 0),       // the whole file, ends unaligned
            (FILE - 3, 3, 11),           // the last bytes
            (2 * 65_536, 3 * 65_536, 9), // aligned, exactly 3 chunks
        ];
        for &(off, len, dst_off) in cases {
            let buf = Arc::new(dev.alloc(dst_off + len + 5).unwrap());
            let t = e
                .submit(vec![ReadRequest::new(off, len, Arc::clone(&buf), dst_off)])
                .unwrap();
            t.wait()
                .unwrap_or_else(|err| panic!("{name} {off}+{len}: {err}"));
            assert_pattern(dev.as_ref(), &buf, dst_off, off, len);
            // Bytes around the destination range are untouched.
            let before = read_back(dev.as_ref(), &buf, 0, dst_off);
            assert!(before.iter().all(|&b| b == 0), "{name}: wrote before dst");
            let after = read_back(dev.as_ref(), &buf, dst_off + len, 5);
            assert!(after.iter().all(|&b| b == 0), "{name}: wrote after dst");
        }
    }
}

#[test]
fn one_batch_many_ranges_one_buffer() {
    for (name, dev) in devices() {
        let e = pattern_engine(8 * MIB as u64, Arc::clone(&dev), cfg(3, 16 * KIB));
        let buf = Arc::new(dev.alloc(MIB).unwrap());
        // 3 slices like an expert (gate, up, down) at odd offsets, packed into one buffer.
        let parts = [
            (1_000_003u64, 70_001usize),
            (5_000_000, 1),
            (7_000_000, 123_456),
        ];
        let mut reqs = Vec::new();
        let mut at = 0;
        for (i, &(off, len)) in parts.iter().enumerate() {
            reqs.push(ReadRequest::new(off, len, Arc::clone(&buf), at).with_label(format!("p{i}")));
            at += len;
        }
        e.submit(reqs).unwrap().wait().unwrap();
        let mut at = 0;
        for &(off, len) in &parts {
            assert_pattern(dev.as_ref(), &buf, at, off, len);
            at += len;
        }
        let s = e.stats();
        assert_eq!(s.requests, 1, "{name}");
        assert_eq!(s.bytes, (70_001 + 1 + 123_456) as u64, "{name}");
    }
}

#[test]
fn ranges_crossing_4_gib_of_a_6_gib_file() {
    const GIB: u64 = 1 << 30;
    for (name, dev) in devices() {
        let e = pattern_engine(6 * GIB, Arc::clone(&dev), cfg(4, 256 * KIB));
        for (off, len) in [
            (4 * GIB - 3 * MIB as u64 - 5, 7 * MIB + 13),
            (4 * GIB - 1, 2),
            (2 * GIB - 4096, 8192),
            (6 * GIB - 1_000_001, 1_000_001), // to the very end
        ] {
            let buf = Arc::new(dev.alloc(len).unwrap());
            e.submit(vec![ReadRequest::new(off, len, Arc::clone(&buf), 0)])
                .unwrap()
                .wait()
                .unwrap_or_else(|err| panic!("{name}: {err}"));
            assert_pattern(dev.as_ref(), &buf, 0, off, len);
            let b = e.read_bytes(off, len).unwrap();
            verify(SEED, off, &b).unwrap_or_else(|m| panic!("{name} read_bytes: {m}"));
        }
    }
}

#[test]
fn one_byte_reads_everywhere_in_a_chunk() {
    for (_, dev) in devices() {
        let e = pattern_engine(200_000, Arc::clone(&dev), cfg(2, 4 * KIB));
        let buf = Arc::new(dev.alloc(300).unwrap());
        let reqs = (0..300)
            .map(|i| ReadRequest::new(i as u64 * 613 + 4090, 1, Arc::clone(&buf), i))
            .collect();
        e.submit(reqs).unwrap().wait().unwrap();
        let got = read_back(dev.as_ref(), &buf, 0, 300);
        for (i, &b) in got.iter().enumerate() {
            let off = i as u64 * 613 + 4090;
            assert_eq!(b, ds4_io::pattern::byte_at(SEED, off), "byte at {off}");
        }
    }
}

#[test]
fn zero_length_and_empty_batches_complete_at_once() {
    let dev = unified();
    let e = pattern_engine(1000, Arc::clone(&dev), cfg(2, 4 * KIB));
    let buf = Arc::new(dev.alloc(10).unwrap());
    e.submit(vec![]).unwrap().wait().unwrap();
    // A 0-byte read at the very end of the file and of the buffer is fine.
    e.submit(vec![ReadRequest::new(1000, 0, Arc::clone(&buf), 10)])
        .unwrap()
        .wait()
        .unwrap();
    assert!(e.read_bytes(1000, 0).unwrap().is_empty());
    assert_eq!(e.stats().requests, 3);
    assert_eq!(e.stats().chunks, 0);
}

#[test]
fn validation_errors_say_what_and_read_nothing() {
    let dev = unified();
    let e = pattern_engine(1000, Arc::clone(&dev), cfg(2, 4 * KIB));
    let buf = Arc::new(dev.alloc(100).unwrap());
    let req = |off, len, dst_off| ReadRequest::new(off, len, Arc::clone(&buf), dst_off);

    let err = e
        .submit(vec![req(990, 11, 0).with_label("blk.0.attn")])
        .unwrap_err();
    assert!(matches!(
        err,
        EngineError::OutOfFile {
            offset: 990,
            len: 11,
            file_len: 1000,
            ..
        }
    ));
    assert!(err.to_string().contains("blk.0.attn"), "{err}");
    // offset + len overflows u64.
    let err = e.submit(vec![req(u64::MAX - 1, 2, 0)]).unwrap_err();
    assert!(matches!(err, EngineError::OutOfFile { .. }), "{err}");
    // Destination too small / offset overflow.
    let err = e.submit(vec![req(0, 60, 41)]).unwrap_err();
    assert!(matches!(
        err,
        EngineError::OutOfBuffer {
            dst_offset: 41,
            len: 60,
            dst_len: 100,
            ..
        }
    ));
    let err = e.submit(vec![req(0, 2, usize::MAX)]).unwrap_err();
    assert!(matches!(err, EngineError::OutOfBuffer { .. }), "{err}");
    // Two ranges of one batch writing the same bytes.
    let err = e.submit(vec![req(0, 10, 0), req(100, 10, 5)]).unwrap_err();
    assert!(
        matches!(err, EngineError::DestinationBusy { dst_offset: 5, .. }),
        "{err}"
    );
    // A hostile read_bytes length is refused before anything is allocated.
    let err = e.read_bytes(1, usize::MAX).unwrap_err();
    assert!(matches!(err, EngineError::OutOfFile { .. }), "{err}");
    // The failed batches released their leases: the same ranges work now.
    e.submit(vec![req(0, 10, 0), req(100, 10, 10)])
        .unwrap()
        .wait()
        .unwrap();
    assert_pattern(dev.as_ref(), &buf, 0, 0, 10);
    assert_pattern(dev.as_ref(), &buf, 10, 100, 10);
    assert_eq!(e.stats().chunks, 2, "rejected batches read nothing");
}

#[test]
fn busy_destination_and_reads_of_busy_ranges_are_refused_while_in_flight() {
    for (name, dev) in devices() {
        // Reads block until the gate opens: the first request is in flight, deterministically.
        let gate = Gate::default();
        let src = ProbeSource::new(Arc::new(ds4_io::pattern::PatternSource::new(
            MIB as u64, SEED,
        )))
        .with_gate(gate.clone());
        let e = ds4_stream::engine::Engine::new(Arc::new(src), Arc::clone(&dev), cfg(2, 4 * KIB))
            .unwrap();
        let buf = Arc::new(dev.alloc(8192).unwrap());
        let t = e
            .submit(vec![ReadRequest::new(0, 4096, Arc::clone(&buf), 0)])
            .unwrap();
        let err = e
            .submit(vec![ReadRequest::new(0, 10, Arc::clone(&buf), 4090)])
            .unwrap_err();
        assert!(
            matches!(err, EngineError::DestinationBusy { .. }),
            "{name}: {err}"
        );
        let t = t.wait_timeout(Duration::from_millis(5)).unwrap_err(); // still reading
        assert!(!t.is_done());
        let mut v = [0u8; 1];
        let err = dev.read_d2h(&buf, 4095, &mut v).unwrap_err();
        assert!(matches!(err, DeviceError::Busy { .. }), "{name}: {err}");
        // A disjoint range is fine meanwhile.
        let t2 = e
            .submit(vec![ReadRequest::new(4096, 4096, Arc::clone(&buf), 4096)])
            .unwrap();
        gate.open();
        t.wait().unwrap();
        t2.wait().unwrap();
        assert_pattern(dev.as_ref(), &buf, 0, 0, 8192);
    }
}

#[test]
fn read_bytes_sync_and_async() {
    let dev = discrete(Duration::ZERO);
    let e = pattern_engine(10 * MIB as u64, dev, cfg(4, 64 * KIB));
    let b = e.read_bytes(123, 3 * MIB).unwrap();
    assert_eq!(b.len(), 3 * MIB);
    verify(SEED, 123, &b).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let b2 = rt
        .block_on(e.read_bytes_async(5 * MIB as u64 + 1, 777))
        .unwrap();
    verify(SEED, 5 * MIB as u64 + 1, &b2).unwrap();
    // read_bytes reads straight into the final allocation: no staging slot used.
    assert_eq!(e.stats().staged_chunks, 0);
}

#[test]
fn stats_count_and_reset() {
    let dev = discrete(Duration::ZERO);
    let e = pattern_engine(4 * MIB as u64, Arc::clone(&dev), cfg(2, 64 * KIB));
    let buf = Arc::new(dev.alloc(MIB).unwrap());
    e.submit(vec![ReadRequest::new(0, MIB, Arc::clone(&buf), 0)])
        .unwrap()
        .wait()
        .unwrap();
    let s = e.stats();
    assert_eq!(s.bytes, MIB as u64);
    assert_eq!(s.requests, 1);
    assert_eq!(s.failed_requests, 0);
    assert_eq!(s.chunks, 16);
    assert_eq!(s.staged_chunks, 16);
    assert_eq!(s.zero_copy_chunks, 0);
    assert_eq!(s.direct_chunks + s.buffered_chunks, 16);
    assert_eq!(s.chunk_read.count, 16);
    assert_eq!(s.copy.count, 16);
    assert_eq!(s.request.count, 1);
    assert!(s.request.max_us >= s.request.p50_us);
    let json = serde_json::to_string(&s).unwrap();
    assert!(json.contains("\"stall_total_us\""), "{json}");
    e.reset_stats();
    assert_eq!(e.stats(), Default::default());
}

#[test]
fn bad_configs_are_refused() {
    let bad = [
        EngineConfig {
            workers: 0,
            ..cfg(2, 4096)
        },
        EngineConfig {
            slots: 0,
            ..cfg(2, 4096)
        },
        cfg(2, 4097),
        cfg(2, 0),
        cfg(2, 2 << 30),
        EngineConfig {
            slots: 1 << 20,
            ..cfg(2, 1 << 30)
        },
        EngineConfig {
            queue_depth: 0,
            ..cfg(2, 4096)
        },
    ];
    for c in bad {
        let r = ds4_stream::engine::Engine::new(
            Arc::new(ds4_io::pattern::PatternSource::new(10, 1)),
            unified(),
            c.clone(),
        );
        assert!(matches!(r, Err(EngineError::Config(_))), "{c:?}");
    }
}

#[test]
fn staging_allocation_failure_is_a_typed_error() {
    let dev = CountingDevice::new(discrete(Duration::ZERO)).fail_pinned_after(3);
    let r = ds4_stream::engine::Engine::new(
        Arc::new(ds4_io::pattern::PatternSource::new(10, 1)),
        Arc::new(dev),
        cfg(8, 4096),
    );
    let err = r.unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::Staging {
                slots: 8,
                slot_bytes: 4096,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("staging ring"), "{err}");
    // A wrapper device built on the public trait drives the engine like any backend.
    let dev = Arc::new(CountingDevice::new(discrete(Duration::ZERO)).fail_pinned_after(2));
    let e = pattern_engine(MIB as u64, dev.clone(), cfg(2, 4096));
    let buf = Arc::new(dev.alloc(50_000).unwrap());
    e.submit(vec![ReadRequest::new(7, 50_000, Arc::clone(&buf), 0)])
        .unwrap()
        .wait()
        .unwrap();
    assert_pattern(dev.as_ref(), &buf, 0, 7, 50_000);
}

#[test]
fn backends_not_compiled_in_say_so() {
    let built = [
        (BackendKind::Cuda, cfg!(feature = "cuda")),
        (BackendKind::Hip, cfg!(feature = "hip")),
    ];
    for (k, _) in built.into_iter().filter(|(_, built)| !built) {
        let e = k.open_default().unwrap_err();
        assert!(e.to_string().contains("has no"), "{e}");
    }
    assert_eq!("host".parse::<BackendKind>().unwrap(), BackendKind::Host);
    assert!("tpu".parse::<BackendKind>().is_err());
    let d = BackendKind::Host.open_default().unwrap();
    assert!(d.unified_memory());
    assert!(d.name().contains("host"));
}

#[test]
fn host_buffers_work_as_destinations_with_a_discrete_device() {
    let dev = discrete(Duration::ZERO);
    let e = pattern_engine(MIB as u64, Arc::clone(&dev), cfg(2, 16 * KIB));
    let host = Arc::new(DeviceBuffer::host(100_000).unwrap());
    assert!(host.host_visible());
    e.submit(vec![ReadRequest::new(333, 100_000, Arc::clone(&host), 0)])
        .unwrap()
        .wait()
        .unwrap();
    assert_pattern(dev.as_ref(), &host, 0, 333, 100_000);
    assert_eq!(e.stats().staged_chunks, 0);
}

#[test]
fn staged_reads_are_widened_to_the_direct_alignment() {
    const FILE: u64 = 2 * MIB as u64 + 100; // the last 100 bytes cannot be read aligned
    for direct in [true, false] {
        let src = Arc::new(
            ProbeSource::new(Arc::new(ds4_io::pattern::PatternSource::new(FILE, SEED)))
                .with_alignment(4096),
        );
        let dev = discrete(Duration::ZERO);
        let c = EngineConfig {
            direct,
            ..cfg(3, 64 * KIB)
        };
        let e = ds4_stream::engine::Engine::new(src.clone(), Arc::clone(&dev), c).unwrap();
        // Unaligned head and tail, many chunks: every staged read is widened to 4096.
        for (off, len) in [(5u64, 300_001usize), (4095, 2), (65_535, 65_538), (1, 1)] {
            let buf = Arc::new(dev.alloc(len).unwrap());
            e.submit(vec![ReadRequest::new(off, len, Arc::clone(&buf), 0)])
                .unwrap()
                .wait()
                .unwrap();
            assert_pattern(dev.as_ref(), &buf, 0, off, len);
        }
        let s = e.stats();
        if direct {
            assert_eq!(src.unaligned_reads(), 0, "{s:?}");
            assert_eq!(s.buffered_chunks, 0, "{s:?}");
        } else {
            assert!(src.unaligned_reads() > 0);
        }
        // At the end of the file the read cannot be widened past EOF: buffered, still right.
        let before = src.unaligned_reads();
        let buf = Arc::new(dev.alloc(90).unwrap());
        e.submit(vec![ReadRequest::new(FILE - 90, 90, Arc::clone(&buf), 0)])
            .unwrap()
            .wait()
            .unwrap();
        assert_pattern(dev.as_ref(), &buf, 0, FILE - 90, 90);
        assert_eq!(src.unaligned_reads(), before + 1);
    }
}

#[test]
fn staged_chunks_read_in_pieces_land_every_byte_and_stay_aligned() {
    const FILE: u64 = 2 * MIB as u64 + 100;
    for piece in [0usize, 4096, 12_288, 64 * KIB, 4 * MIB] {
        let src = Arc::new(
            ProbeSource::new(Arc::new(ds4_io::pattern::PatternSource::new(FILE, SEED)))
                .with_alignment(4096),
        );
        // Slow copies: later pieces are read while earlier ones are still being copied.
        let dev = discrete(Duration::from_micros(200));
        let c = EngineConfig {
            copy_piece: piece,
            ..cfg(3, 64 * KIB)
        };
        let e = ds4_stream::engine::Engine::new(src.clone(), Arc::clone(&dev), c).unwrap();
        let mut chunks = 0;
        for (off, len) in [
            (5u64, 300_001usize),
            (4095, 2),
            (65_535, 65_538),
            (0, 131_072),
        ] {
            let buf = Arc::new(dev.alloc(len + 7).unwrap());
            e.submit(vec![ReadRequest::new(off, len, Arc::clone(&buf), 7)])
                .unwrap()
                .wait()
                .unwrap_or_else(|err| panic!("piece {piece}, {off}+{len}: {err}"));
            assert_pattern(dev.as_ref(), &buf, 7, off, len);
            assert!(read_back(dev.as_ref(), &buf, 0, 7).iter().all(|&b| b == 0));
            chunks += ds4_stream::engine::plan_chunk_count(off, len, 64 * KIB, 4096);
        }
        let s = e.stats();
        assert_eq!(src.unaligned_reads(), 0, "piece {piece}: {s:?}");
        assert_eq!(s.staged_chunks, chunks);
        // One copy per piece holding chunk bytes: more pieces than chunks once pieces are
        // smaller than the 64 KiB chunks.
        if piece == 4096 {
            assert!(s.copy_pieces >= 4 * chunks, "{s:?}");
        } else if piece == 0 || piece >= 64 * KIB {
            assert_eq!(s.copy_pieces, chunks, "piece {piece}: {s:?}");
        }
        assert_eq!(s.queued.count, chunks);
        assert_eq!(s.issue.count, chunks);
        assert_eq!(s.slot_held.count, chunks);
    }
}

#[test]
fn the_ramp_cuts_the_first_round_of_each_burst_and_lands_every_byte() {
    // 4 workers; 6 chunks of 200 KiB per batch. The first 4 dispatched of each batch find at
    // most 3 chunks in flight, so each is read as a head piece and the rest: at least 10 copies
    // per batch, at most 12. The second batch cuts as many: the in-flight count went back to 0.
    const CH: usize = 200 * KIB;
    const FILE: u64 = 64 * MIB as u64;
    for ramp in [Some(false), Some(true)] {
        let src = Arc::new(
            ProbeSource::new(Arc::new(ds4_io::pattern::PatternSource::new(FILE, SEED)))
                .with_alignment(4096),
        );
        let dev = discrete(Duration::from_micros(300));
        let c = EngineConfig {
            ramp,
            ..cfg(8, 256 * KIB)
        };
        assert_eq!(c.ramp_on(), ramp == Some(true));
        let e = ds4_stream::engine::Engine::new(src.clone(), Arc::clone(&dev), c).unwrap();
        let mut pieces = vec![];
        for batch in 0..2u64 {
            let buf = Arc::new(dev.alloc(6 * CH).unwrap());
            let reqs = (0..6u64)
                .map(|k| {
                    let off = (batch * 7 + k * 9) * MIB as u64;
                    ReadRequest::new(off, CH, Arc::clone(&buf), k as usize * CH)
                })
                .collect();
            let before = e.stats().copy_pieces;
            e.submit(reqs).unwrap().wait().unwrap();
            pieces.push(e.stats().copy_pieces - before);
            for k in 0..6u64 {
                let off = (batch * 7 + k * 9) * MIB as u64;
                assert_pattern(dev.as_ref(), &buf, k as usize * CH, off, CH);
            }
        }
        assert_eq!(src.unaligned_reads(), 0, "{ramp:?}");
        assert_eq!(e.stats().staged_chunks, 12);
        if ramp == Some(true) {
            assert!(pieces.iter().all(|&p| (10..=12).contains(&p)), "{pieces:?}");
        } else {
            assert_eq!(pieces, [6, 6]);
        }
    }
}

#[test]
fn a_copy_piece_off_the_4k_grid_is_refused() {
    let c = EngineConfig {
        copy_piece: 1000,
        ..cfg(2, 64 * KIB)
    };
    match c.validate() {
        Err(EngineError::Config(m)) => assert!(m.contains("copy_piece 1000"), "{m}"),
        other => panic!("{other:?}"),
    }
}
