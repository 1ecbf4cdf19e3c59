//! Fuzz target: `parse_bytes` on arbitrary bytes must return Ok or Err, never panic, hang or
//! allocate unboundedly, and an Ok header must satisfy the parser's promises. Run twice per
//! input: with the default caps and with tiny caps, so the cap paths are reached as well.
#![no_main]

use ds4_stream::gguf::{parse_bytes, Caps, GgufFile};
use libfuzzer_sys::fuzz_target;

fn check(f: &GgufFile, caps: &Caps, len: usize) {
    assert_eq!(f.file_size, len as u64);
    assert!(f.alignment.is_power_of_two());
    assert_eq!(f.data_offset % f.alignment, 0);
    assert!(f.tensors.len() as u64 <= caps.max_tensors);
    assert!(f.metadata.len() as u64 <= caps.max_kv);
    let mut names = std::collections::HashSet::new();
    for t in &f.tensors {
        assert!(names.insert(t.name.as_str()), "duplicate tensor {}", t.name);
        assert!(!t.dims.is_empty() && t.dims.len() as u32 <= caps.max_dims);
        assert!(t.dims.iter().all(|&d| d > 0));
        assert!(t.offset >= f.data_offset);
        assert_eq!((t.offset - f.data_offset) % f.alignment, 0);
        assert_eq!(Some(t.nbytes), t.ggml_type.bytes_for(t.n_elems()));
        assert!(t.offset.checked_add(t.nbytes).is_some_and(|e| e <= f.file_size));
    }
}

fuzz_target!(|data: &[u8]| {
    let default = Caps::default();
    match parse_bytes(data, &default) {
        Ok(f) => check(&f, &default, data.len()),
        // Rendering the error must not panic either.
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    let tiny = Caps {
        max_tensors: 4,
        max_kv: 8,
        max_string: 64,
        max_string_bytes: 256,
        max_array: 16,
        max_metadata_values: 64,
        max_depth: 2,
        max_dims: 4,
    };
    if let Ok(f) = parse_bytes(data, &tiny) {
        check(&f, &tiny, data.len());
    }
});
