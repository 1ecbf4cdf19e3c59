//! The C ABI called from several threads at once, through its `extern "C"` functions: reads and
//! expert acquires on one handle verified byte for byte, and a close while other threads wait
//! on completions (they must return, never hang or touch freed memory).

mod common;
use ds4stream::error::*;
use ds4stream::*;
use std::ffi::CString;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

fn open(path: &Path, slots: u32) -> u64 {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    let mut o = Ds4sOptions::default();
    // SAFETY: `o` is a valid ds4s_options.
    unsafe { ds4s_options_init(&mut o) };
    o.workers = 4;
    o.staging_slots = 4;
    o.staging_slot_bytes = 64 << 10;
    o.backend = DS4S_BACKEND_HOST;
    o.expert_cache_slots = slots;
    let mut h = 0;
    // SAFETY: valid string, options and out-parameter.
    assert_eq!(unsafe { ds4s_open(c.as_ptr(), &o, &mut h) }, DS4S_OK);
    h
}

fn slice(h: u64, layer: u32, e: u32, kind: i32) -> (u64, u64) {
    let (mut off, mut len) = (0, 0);
    // SAFETY: valid out-parameters.
    let rc = unsafe { ds4s_expert_slice(h, layer, e, kind, &mut off, &mut len) };
    assert_eq!(rc, DS4S_OK);
    (off, len)
}

#[test]
fn reads_and_acquires_from_four_threads_see_the_files_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::tiny(dir.path(), 3);
    let file = std::fs::read(&path).unwrap();
    let h = open(&path, 30);
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let file = &file;
            s.spawn(move || {
                for i in 0..25u32 {
                    // A read of 3 ranges.
                    let mut bufs = [vec![0u8; 5000], vec![0u8; 70_000], vec![0u8; 1]];
                    let offs = [(t * 7919 + i * 131) as u64, (i * 65_537) as u64, 4095];
                    let ranges: Vec<Ds4sRange> = bufs
                        .iter_mut()
                        .zip(offs)
                        .map(|(b, o)| Ds4sRange {
                            file_offset: o,
                            len: b.len() as u64,
                            dst: b.as_mut_ptr().cast(),
                        })
                        .collect();
                    let mut c = 0;
                    // SAFETY: 3 valid ranges over live buffers, waited for below.
                    let rc = unsafe { ds4s_read(h, ranges.as_ptr(), 3, DS4S_MEM_HOST, &mut c) };
                    assert_eq!(rc, DS4S_OK);
                    assert_eq!(ds4s_wait(h, c, 30_000), DS4S_OK);
                    assert_eq!(ds4s_completion_free(h, c), DS4S_OK);
                    for (b, o) in bufs.iter().zip(offs) {
                        assert!(b[..] == file[o as usize..o as usize + b.len()]);
                    }
                    // The decode pattern: 6 experts of one layer, verified, released.
                    let layer = (i + t) % 4;
                    let ids: Vec<u32> = (0..6).map(|k| (i * 5 + k * 3 + t) % 16).collect();
                    let mut out = [Ds4sExpertPtrs {
                        gate: std::ptr::null_mut(),
                        up: std::ptr::null_mut(),
                        down: std::ptr::null_mut(),
                        gate_bytes: 0,
                        up_bytes: 0,
                        down_bytes: 0,
                        slot: 0,
                        reserved: 0,
                    }; 6];
                    let mut lease = 0;
                    // SAFETY: 6 ids, room for 6 results and a lease.
                    let rc = unsafe {
                        ds4s_experts_acquire(
                            h,
                            layer,
                            ids.as_ptr(),
                            6,
                            30_000,
                            out.as_mut_ptr(),
                            &mut lease,
                        )
                    };
                    assert_eq!(rc, DS4S_OK);
                    for (e, p) in ids.iter().zip(&out) {
                        for (kind, ptr, n) in [
                            (DS4S_GATE, p.gate, p.gate_bytes),
                            (DS4S_UP, p.up, p.up_bytes),
                            (DS4S_DOWN, p.down, p.down_bytes),
                        ] {
                            let (off, len) = slice(h, layer, *e, kind);
                            assert_eq!(len, n);
                            // SAFETY: host backend: `ptr` is host memory of `n` bytes, pinned
                            // by `lease` until the release below.
                            let got =
                                unsafe { std::slice::from_raw_parts(ptr as *const u8, n as usize) };
                            assert!(got == &file[off as usize..(off + len) as usize]);
                        }
                    }
                    assert_eq!(ds4s_experts_release(h, lease), DS4S_OK);
                }
            });
        }
    });
    let mut st = Ds4sStats {
        struct_size: std::mem::size_of::<Ds4sStats>() as u32,
        ..Ds4sStats::default()
    };
    // SAFETY: a valid stats struct.
    assert_eq!(unsafe { ds4s_get_stats(h, &mut st) }, DS4S_OK);
    assert_eq!((st.expert_pinned_slots, st.failed_requests), (0, 0));
    assert_eq!(
        st.expert_hits + st.expert_dedup_hits + st.expert_misses,
        4 * 25 * 6
    );
    assert_eq!(ds4s_close(h), DS4S_OK);
    assert_eq!(ds4s_close(h), DS4S_ERR_BAD_HANDLE);
}

#[test]
fn close_while_other_threads_wait_returns_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::tiny(dir.path(), 3);
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    let h = open(&path, 0);
    let (tx, rx) = mpsc::channel();
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; len];
                let r = Ds4sRange {
                    file_offset: 0,
                    len: len as u64,
                    dst: buf.as_mut_ptr().cast(),
                };
                let mut c = 0;
                // SAFETY: one valid range over `buf`, which lives until the wait returned.
                let rc = unsafe { ds4s_read(h, &r, 1, DS4S_MEM_HOST, &mut c) };
                tx.send(()).unwrap();
                if rc != DS4S_OK {
                    return rc; // the close got there first
                }
                // Either the read finished, or the close completed it, or the completion is
                // already gone with the handle: never a hang.
                let w = ds4s_wait(h, c, 60_000);
                assert!(
                    [DS4S_OK, DS4S_ERR_SHUTDOWN, DS4S_ERR_BAD_HANDLE].contains(&w),
                    "wait returned {w}"
                );
                drop(buf);
                w
            })
        })
        .collect();
    for _ in 0..3 {
        rx.recv_timeout(Duration::from_secs(30)).unwrap();
    }
    assert_eq!(ds4s_close(h), DS4S_OK);
    for w in waiters {
        let rc = w.join().unwrap();
        assert_ne!(rc, DS4S_TIMEOUT);
    }
    assert_eq!(ds4s_poll(h, 1), DS4S_ERR_BAD_HANDLE);
}
