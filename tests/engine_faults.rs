//! Faults and real files: an EIO on the Nth read reaches the caller as a typed error naming
//! path, offset, length and label, leaves other requests and the engine unharmed; a real
//! pattern-filled file reads back exactly through FileSource, direct IO on and off.

mod engine_util;

use ds4_io::fault::{injected, FaultPlan, FaultySource, InjectedFault};
use ds4_io::pattern::{fill, verify, PatternSource};
use ds4_io::Source;
use ds4_stream::engine::{Engine, EngineConfig, EngineError, ReadRequest};
use engine_util::*;
use std::io::Write;
use std::sync::Arc;

#[test]
fn eio_on_the_nth_read_fails_only_its_request_with_a_typed_error() {
    for (name, dev) in devices() {
        // Read 3 fails (reads are counted from 1 across all workers).
        let src = Arc::new(FaultySource::new(
            Arc::new(PatternSource::new(4 * MIB as u64, SEED)),
            FaultPlan {
                eio_at_op: Some(3),
                ..FaultPlan::default()
            },
        ));
        let e = Engine::new(src.clone(), Arc::clone(&dev), cfg(2, 4 * KIB)).unwrap();
        let buf = Arc::new(dev.alloc(3 * 4096).unwrap());
        let ok1 = e
            .submit(vec![ReadRequest::new(0, 4096, Arc::clone(&buf), 0)])
            .unwrap();
        ok1.wait().unwrap();
        let ok2 = e
            .submit(vec![ReadRequest::new(4096, 4096, Arc::clone(&buf), 4096)])
            .unwrap();
        ok2.wait().unwrap();
        let bad = e
            .submit(vec![ReadRequest::new(
                81_920 + 5,
                100,
                Arc::clone(&buf),
                8192,
            )
            .with_label("blk.7.ffn_down_exps[42]")])
            .unwrap();
        let err = bad.wait().unwrap_err();
        match &err {
            EngineError::Read {
                path,
                offset,
                len,
                label,
                source,
            } => {
                assert_eq!(*offset, 81_925, "{name}");
                assert_eq!(*len, 100, "{name}");
                assert_eq!(label.as_deref(), Some("blk.7.ffn_down_exps[42]"));
                assert_eq!(path, src.path());
                assert_eq!(injected(source), Some(&InjectedFault::Eio { op: 3 }));
            }
            other => panic!("{name}: expected Read, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(
            msg.contains("blk.7.ffn_down_exps[42]") && msg.contains("81925"),
            "{msg}"
        );
        // The engine keeps working, the failed range's lease was released, and slots were
        // returned: more chunks than slots go through now.
        e.submit(vec![ReadRequest::new(81_925, 100, Arc::clone(&buf), 8192)])
            .unwrap()
            .wait()
            .unwrap();
        assert_pattern(dev.as_ref(), &buf, 8192, 81_925, 100);
        let b = e.read_bytes(1, 10 * 4096).unwrap();
        verify(SEED, 1, &b).unwrap();
        let s = e.stats();
        assert_eq!(s.failed_requests, 1, "{name}");
        assert_eq!(s.requests, 5, "{name}");
    }
}

#[test]
fn a_failing_chunk_among_concurrent_requests_fails_exactly_one() {
    for (name, dev) in devices() {
        let src = Arc::new(FaultySource::new(
            Arc::new(PatternSource::new(4 * MIB as u64, SEED)),
            FaultPlan {
                eio_at_op: Some(17),
                ..FaultPlan::default()
            },
        ));
        let e = Engine::new(src, Arc::clone(&dev), cfg(3, 4 * KIB)).unwrap();
        // 20 requests x 2 chunks each = 40 reads; exactly one read fails.
        let mut tickets = Vec::new();
        for i in 0..20u64 {
            let buf = Arc::new(dev.alloc(8192).unwrap());
            let off = i * 8192;
            let t = e
                .submit(vec![
                    ReadRequest::new(off, 8192, Arc::clone(&buf), 0).with_label(format!("r{i}"))
                ])
                .unwrap();
            tickets.push((t, buf, off));
        }
        let mut failed = 0;
        for (t, buf, off) in tickets {
            match t.wait() {
                Ok(()) => assert_pattern(dev.as_ref(), &buf, 0, off, 8192),
                Err(EngineError::Read { label, offset, .. }) => {
                    failed += 1;
                    assert_eq!(label.as_deref(), Some(format!("r{}", off / 8192).as_str()));
                    assert!(offset == off || offset == off + 4096, "{name}: {offset}");
                }
                Err(other) => panic!("{name}: {other}"),
            }
        }
        assert_eq!(failed, 1, "{name}");
    }
}

/// A temp file of `len` pattern bytes.
fn pattern_file(len: usize) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    let mut chunk = vec![0u8; MIB];
    let mut off = 0;
    while off < len {
        let n = (len - off).min(MIB);
        fill(SEED, off as u64, &mut chunk[..n]);
        f.write_all(&chunk[..n]).unwrap();
        off += n;
    }
    f.flush().unwrap();
    f
}

#[test]
fn real_file_through_file_source_direct_on_and_off() {
    const LEN: usize = 9 * MIB + 4321; // ends unaligned
    let f = pattern_file(LEN);
    for direct in [true, false] {
        for cold in [false, true] {
            for (name, dev) in devices() {
                let c = EngineConfig {
                    direct,
                    cold,
                    ..cfg(4, 256 * KIB)
                };
                let e = Engine::open(f.path(), Arc::clone(&dev), c).unwrap();
                assert_eq!(e.file_len(), LEN as u64);
                let ctx = format!("{name} direct={direct} cold={cold}");
                for (off, len) in [
                    (0u64, LEN),
                    (4096, 2 * MIB),
                    (3, 1_000_000),
                    (LEN as u64 - 4321, 4321),
                    (LEN as u64 - 1, 1),
                ] {
                    let buf = Arc::new(dev.alloc(len).unwrap());
                    e.submit(vec![ReadRequest::new(off, len, Arc::clone(&buf), 0)])
                        .unwrap()
                        .wait()
                        .unwrap_or_else(|err| panic!("{ctx}: {err}"));
                    assert_pattern(dev.as_ref(), &buf, 0, off, len);
                    let b = e.read_bytes(off, len).unwrap();
                    verify(SEED, off, &b).unwrap_or_else(|m| panic!("{ctx}: {m}"));
                }
                let s = e.stats();
                assert_eq!(s.direct_chunks + s.buffered_chunks, s.chunks, "{ctx}");
                // Where the file system offers O_DIRECT, staged chunks are widened to its
                // alignment and take it when the reads are cold; a hot run may serve them from
                // the page cache instead (the file was just written), if the handle can tell;
                // with direct off, none go unbuffered.
                let align = e.source().open_handle().unwrap().direct_alignment();
                match (direct, cold, align) {
                    (true, true, Some(_)) => {
                        assert!(s.direct_chunks > 0, "{ctx}: {s:?}");
                        assert_eq!(s.cache_hit_chunks + s.cache_miss_chunks, 0, "{ctx}: {s:?}");
                    }
                    (true, false, Some(_)) => {
                        assert!(s.direct_chunks + s.cache_hit_chunks > 0, "{ctx}: {s:?}")
                    }
                    (false, _, _) => {
                        assert_eq!(s.direct_chunks, 0, "{ctx}: {s:?}");
                        assert_eq!(s.cache_hit_chunks + s.cache_miss_chunks, 0, "{ctx}: {s:?}");
                    }
                    (true, _, None) => eprintln!("{ctx}: no O_DIRECT on this file system"),
                }
                assert_eq!(s.failed_requests, 0, "{ctx}");
            }
        }
    }
}

#[test]
fn opening_a_missing_file_names_it() {
    let err = Engine::open("/nonexistent/ds4/model.gguf", unified(), cfg(1, 4096)).unwrap_err();
    assert!(matches!(err, EngineError::Open { .. }), "{err}");
    assert!(
        err.to_string().contains("/nonexistent/ds4/model.gguf"),
        "{err}"
    );
}
