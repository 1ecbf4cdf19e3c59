//! The header's struct_size contract, from Rust through the `extern "C"` functions: a caller
//! built against an older header (a smaller struct) or a newer one (a larger struct) gets
//! exactly struct_size bytes read or written, for every struct that carries a size
//! (ds4s_options in, ds4s_layout / ds4s_tensor / ds4s_stats out), and sizes outside
//! 4..=DS4S_STRUCT_SIZE_MAX are refused.

mod common;
use ds4stream::error::*;
use ds4stream::*;
use std::ffi::{CStr, CString};
use std::mem::size_of;
use std::path::Path;

fn last_error() -> String {
    // SAFETY: ds4s_last_error never returns NULL and the string lives until this thread's next
    // failing call.
    unsafe { CStr::from_ptr(ds4s_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// A caller's struct of `size` bytes (8-aligned), every byte `fill`, struct_size = `size`.
fn caller_struct(size: usize, fill: u8) -> Vec<u64> {
    let mut v = vec![u64::from_ne_bytes([fill; 8]); size.div_ceil(8) + 1];
    bytes_mut(&mut v)[..4].copy_from_slice(&(size as u32).to_ne_bytes());
    v
}

fn bytes_mut(v: &mut [u64]) -> &mut [u8] {
    // SAFETY: a u64 slice reinterpreted as its bytes (any byte is a valid u8).
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), v.len() * 8) }
}

fn options() -> Ds4sOptions {
    let mut o = Ds4sOptions::default();
    // SAFETY: `o` is a valid ds4s_options.
    unsafe { ds4s_options_init(&mut o) };
    o.workers = 2;
    o.staging_slots = 4;
    o.staging_slot_bytes = 64 << 10;
    o.backend = DS4S_BACKEND_HOST;
    o.expert_cache_slots = 8;
    o
}

/// ds4s_open with `size` bytes of `o` (then zeros, up to `size`), struct_size = `size`;
/// `tail` is written at byte `tail.0` past our struct when given.
fn open_with(path: &Path, o: &Ds4sOptions, size: usize, tail: Option<(usize, u8)>) -> (i32, u64) {
    let mut buf = caller_struct(size.max(size_of::<Ds4sOptions>()), 0);
    let b = bytes_mut(&mut buf);
    // SAFETY: `o` is a plain integer struct: its bytes are readable.
    let ob = unsafe {
        std::slice::from_raw_parts((o as *const Ds4sOptions).cast::<u8>(), size_of_val(o))
    };
    b[..ob.len()].copy_from_slice(ob);
    b[..4].copy_from_slice(&(size as u32).to_ne_bytes());
    if let Some((at, v)) = tail {
        b[size_of::<Ds4sOptions>() + at] = v;
    }
    let c = CString::new(path.to_str().unwrap()).unwrap();
    let mut h = 0;
    // SAFETY: `buf` holds at least `size` readable bytes.
    let rc = unsafe { ds4s_open(c.as_ptr(), buf.as_ptr().cast::<Ds4sOptions>(), &mut h) };
    (rc, h)
}

#[test]
fn options_smaller_read_missing_fields_as_default_larger_need_zero_tails() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::tiny(dir.path(), 5);
    let ours = size_of::<Ds4sOptions>();

    // Fields past struct_size are not read: a bad `reserved` (the last field) and a bad
    // backend behind a short struct_size do not matter.
    let mut o = options();
    o.reserved = 5;
    let (rc, h) = open_with(&path, &o, ours - 4, None);
    assert_eq!(rc, DS4S_OK, "{}", last_error());
    let mut l = Ds4sLayout {
        struct_size: size_of::<Ds4sLayout>() as u32,
        ..Default::default()
    };
    // SAFETY: a valid layout struct.
    assert_eq!(unsafe { ds4s_get_layout(h, &mut l) }, DS4S_OK);
    assert_eq!(
        l.expert_cache_slots, 8,
        "fields before struct_size are read"
    );
    assert_eq!(ds4s_close(h), DS4S_OK);
    // The same `reserved` inside struct_size is read and refused.
    let (rc, _) = open_with(&path, &o, ours, None);
    assert_eq!(rc, DS4S_ERR_INVALID_ARGUMENT);
    assert!(
        last_error().contains("reserved must be 0"),
        "{}",
        last_error()
    );

    // Only struct_size (an older header's minimum): every field is its default (no cache, the
    // auto backend; the host one here when no GPU backend is compiled in).
    let mut o = options();
    o.backend = 99;
    o.expert_cache_slots = 3; // would be refused: fewer than K = 6
    let (rc, h) = open_with(&path, &o, 4, None);
    if rc == DS4S_OK {
        // SAFETY: a valid layout struct.
        assert_eq!(unsafe { ds4s_get_layout(h, &mut l) }, DS4S_OK);
        assert_eq!(l.expert_cache_slots, 0);
        assert_eq!(ds4s_close(h), DS4S_OK);
    } else {
        // auto found a GPU backend compiled in but no device: still not the refused fields.
        let e = last_error();
        assert!(
            !e.contains("backend 99") && !e.contains("expert_cache_slots"),
            "{e}"
        );
    }

    // Larger (a newer header): zero tails are accepted, a non-zero byte is named by offset.
    let o = options();
    let (rc, h) = open_with(&path, &o, ours + 24, None);
    assert_eq!(rc, DS4S_OK, "{}", last_error());
    assert_eq!(ds4s_close(h), DS4S_OK);
    let (rc, _) = open_with(&path, &o, ours + 24, Some((17, 0x5a)));
    assert_eq!(rc, DS4S_ERR_INVALID_ARGUMENT);
    let e = last_error();
    let want = format!("byte {} of {} is 0x5a", ours + 17, ours + 24);
    assert!(e.contains(&want) && e.contains("ds4s_options"), "{e}");

    // Bounds.
    for bad in [0usize, 3, STRUCT_SIZE_MAX as usize + 1] {
        let (rc, _) = open_with(&path, &o, bad, None);
        assert_eq!(rc, DS4S_ERR_INVALID_ARGUMENT, "struct_size {bad}");
        let e = last_error();
        assert!(e.contains(&format!("struct_size is {bad}")), "{e}");
    }
}

/// Calls `f` with a caller struct of `size` bytes pre-filled with 0xab and returns the bytes
/// after the call (and its status).
fn out_call(size: usize, f: impl FnOnce(*mut u8) -> i32) -> (i32, Vec<u8>) {
    let mut buf = caller_struct(size, 0xab);
    let rc = f(buf.as_mut_ptr().cast::<u8>());
    (rc, bytes_mut(&mut buf).to_vec())
}

/// The output contract for one struct of `ours` bytes whose full answer is `full`.
fn check_out(name: &str, ours: usize, full: &[u8], f: &dyn Fn(*mut u8) -> i32) {
    assert_eq!(full.len(), ours);
    for size in [4usize, 8, 12, ours - 8, ours] {
        let (rc, got) = out_call(size, f);
        assert_eq!(rc, DS4S_OK, "{name} {size}: {}", last_error());
        assert_eq!(
            &got[..4],
            &(size as u32).to_ne_bytes(),
            "{name}: struct_size kept"
        );
        assert_eq!(
            &got[4..size],
            &full[4..size],
            "{name} {size}: our first bytes"
        );
        assert!(
            got[size..].iter().all(|&b| b == 0xab),
            "{name} {size}: a byte past struct_size was written"
        );
    }
    for extra in [8usize, 100] {
        let size = ours + extra;
        let (rc, got) = out_call(size, f);
        assert_eq!(rc, DS4S_OK, "{name} {size}: {}", last_error());
        assert_eq!(
            &got[..4],
            &(size as u32).to_ne_bytes(),
            "{name}: struct_size kept"
        );
        assert_eq!(&got[4..ours], &full[4..ours], "{name} {size}");
        assert!(
            got[ours..size].iter().all(|&b| b == 0),
            "{name}: tail zeroed"
        );
        assert!(
            got[size..].iter().all(|&b| b == 0xab),
            "{name}: past struct_size"
        );
    }
    for bad in [
        0usize,
        2,
        3,
        STRUCT_SIZE_MAX as usize + 1,
        u32::MAX as usize,
    ] {
        let mut buf = caller_struct(8, 0xab);
        bytes_mut(&mut buf)[..4].copy_from_slice(&(bad as u32).to_ne_bytes());
        let before = buf.clone();
        assert_eq!(
            f(buf.as_mut_ptr().cast::<u8>()),
            DS4S_ERR_INVALID_ARGUMENT,
            "{name} {bad}"
        );
        let e = last_error();
        assert!(
            e.contains(&format!("struct_size is {bad}")) && e.contains(name),
            "{e}"
        );
        assert_eq!(buf, before, "{name}: a refused struct was written");
    }
}

#[test]
fn output_structs_get_exactly_struct_size_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::tiny(dir.path(), 5);
    let (rc, h) = open_with(&path, &options(), size_of::<Ds4sOptions>(), None);
    assert_eq!(rc, DS4S_OK, "{}", last_error());
    let name = CString::new("blk.3.ffn_down_exps.weight").unwrap();

    let full = |size: usize, f: &dyn Fn(*mut u8) -> i32| {
        let (rc, got) = out_call(size, f);
        assert_eq!(rc, DS4S_OK, "{}", last_error());
        got[..size].to_vec()
    };
    // SAFETY: `p` is a caller_struct buffer of at least struct_size bytes (the three below).
    let layout = |p: *mut u8| unsafe { ds4s_get_layout(h, p.cast()) };
    // SAFETY: as above; `name` is NUL-terminated.
    let tensor = |p: *mut u8| unsafe { ds4s_tensor_info(h, name.as_ptr(), p.cast()) };
    // SAFETY: as above.
    let stats = |p: *mut u8| unsafe { ds4s_get_stats(h, p.cast()) };

    let n = size_of::<Ds4sLayout>();
    let l = full(n, &layout);
    assert_eq!(
        u32::from_ne_bytes(l[4..8].try_into().unwrap()),
        6,
        "n_layer"
    );
    check_out("ds4s_layout", n, &l, &layout);
    let n = size_of::<Ds4sTensor>();
    let t = full(n, &tensor);
    assert_eq!(
        u32::from_ne_bytes(t[8..12].try_into().unwrap()),
        3,
        "n_dims"
    );
    check_out("ds4s_tensor", n, &t, &tensor);
    // No reads run between the calls: the counters stay put.
    let n = size_of::<Ds4sStats>();
    let s = full(n, &stats);
    check_out("ds4s_stats", n, &s, &stats);
    assert_eq!(ds4s_close(h), DS4S_OK);
}
