//! The C ABI on a GPU backend (built with `--features cuda` or `hip`; skipped with a note when
//! no GPU is there, a failure when `DS4_GPU_TESTS` names the backend): `ds4s_read` into caller
//! device memory (`DS4S_MEM_DEVICE`, allocated here through the same primary context a C
//! program's `cuMemAlloc` would use), and `ds4s_experts_acquire` returning device addresses;
//! both read back through the device and compared with the file.
#![cfg(any(feature = "cuda", feature = "hip"))]

use ds4_stream::device::{BackendKind, Device, DeviceBuffer};
use ds4_stream::generate::{write_file, Options, Quant, Scale};
use ds4stream::error::*;
use ds4stream::*;
use std::ffi::CString;
use std::sync::Arc;

fn backends() -> Vec<(BackendKind, i32, Arc<dyn Device>)> {
    let want = std::env::var("DS4_GPU_TESTS").unwrap_or_default();
    let mut v = Vec::new();
    for (kind, code) in [
        (BackendKind::Cuda, DS4S_BACKEND_CUDA),
        (BackendKind::Hip, DS4S_BACKEND_HIP),
    ] {
        match kind.open_default() {
            Ok(d) => v.push((kind, code, d)),
            Err(e) if want.split(',').any(|b| b == kind.as_str()) => {
                panic!("DS4_GPU_TESTS={want}: {e}")
            }
            Err(e) => eprintln!("note: {kind} skipped: {e}"),
        }
    }
    v
}

/// `n` bytes at device address `addr` of `dev`, copied to the host.
fn read_device(dev: &dyn Device, addr: u64, n: usize) -> Vec<u8> {
    // SAFETY: `addr..addr + n` is live device memory of this device (the caller's allocation or
    // a pinned expert slot), not written while we read it back.
    let b: DeviceBuffer = unsafe { dev.wrap_device_memory(addr, n) }.unwrap();
    let mut out = vec![0u8; n];
    dev.read_d2h(&b, 0, &mut out).unwrap();
    out
}

#[test]
fn device_destinations_and_expert_pointers_hold_the_files_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    let opts = Options {
        scale: Scale::Tiny,
        seed: 5,
        holes: None,
        fill_layers: Vec::new(),
        fill_experts: None,
        quant: Quant::Q2,
        layers: None,
    };
    write_file(&path, &opts, &mut |_| {}).unwrap();
    let file = std::fs::read(&path).unwrap();
    let cpath = CString::new(path.to_str().unwrap()).unwrap();
    for (kind, code, dev) in backends() {
        let mut o = Ds4sOptions::default();
        // SAFETY: a valid options struct.
        unsafe { ds4s_options_init(&mut o) };
        o.backend = code;
        o.expert_cache_slots = 12;
        o.staging_slot_bytes = 256 << 10;
        let mut h = 0;
        // SAFETY: valid path, options, out-parameter.
        let rc = unsafe { ds4s_open(cpath.as_ptr(), &o, &mut h) };
        assert_eq!(rc, DS4S_OK, "{kind}");

        // Caller device memory, two ranges into one allocation.
        let n = file.len();
        let mem = dev.alloc(n).unwrap();
        let base = mem.memory().device_addr().unwrap();
        let ranges = [
            Ds4sRange {
                file_offset: 0,
                len: 1000,
                dst: base as usize as *mut _,
            },
            Ds4sRange {
                file_offset: 1000,
                len: (n - 1000) as u64,
                dst: (base as usize + 1000) as *mut _,
            },
        ];
        let mut c = 0;
        // SAFETY: device ranges of `mem`, alive until after the wait.
        let rc = unsafe { ds4s_read(h, ranges.as_ptr(), 2, DS4S_MEM_DEVICE, &mut c) };
        assert_eq!(rc, DS4S_OK, "{kind}");
        assert_eq!(ds4s_wait(h, c, 60_000), DS4S_OK, "{kind}");
        let mut got = vec![0u8; n];
        dev.read_d2h(&mem, 0, &mut got).unwrap();
        assert!(got == file, "{kind}: device read differs from the file");

        // Experts: device addresses of the slab.
        let mut l = Ds4sLayout {
            struct_size: std::mem::size_of::<Ds4sLayout>() as u32,
            ..Default::default()
        };
        // SAFETY: a valid layout struct.
        assert_eq!(unsafe { ds4s_get_layout(h, &mut l) }, DS4S_OK);
        assert_eq!(l.expert_memory, DS4S_MEM_DEVICE, "{kind}");
        for layer in 0..4u32 {
            let ids = [layer, 3, 5, 7, 11, 15];
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
                    60_000,
                    out.as_mut_ptr(),
                    &mut lease,
                )
            };
            assert_eq!(rc, DS4S_OK, "{kind}");
            for (e, p) in ids.iter().zip(&out) {
                for (k, ptr, bytes) in [
                    (DS4S_GATE, p.gate, p.gate_bytes),
                    (DS4S_UP, p.up, p.up_bytes),
                    (DS4S_DOWN, p.down, p.down_bytes),
                ] {
                    let (mut off, mut len) = (0, 0);
                    // SAFETY: valid out-parameters.
                    let rc = unsafe { ds4s_expert_slice(h, layer, *e, k, &mut off, &mut len) };
                    assert_eq!(rc, DS4S_OK);
                    assert_eq!(len, bytes);
                    let got = read_device(dev.as_ref(), ptr as usize as u64, len as usize);
                    assert!(
                        got == file[off as usize..(off + len) as usize],
                        "{kind}: expert {e} of layer {layer}"
                    );
                }
            }
            assert_eq!(ds4s_experts_release(h, lease), DS4S_OK);
        }
        assert_eq!(ds4s_completion_free(h, c), DS4S_OK);
        assert_eq!(ds4s_close(h), DS4S_OK);
        drop(mem);
        eprintln!("{kind}: device reads and expert pointers verified");
    }
}
