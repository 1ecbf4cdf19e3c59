//! Replays the fuzz corpus (fuzz/corpus/gguf_parse, the committed seeds plus any crash inputs
//! kept as regressions) and fuzz/artifacts/gguf_parse if present through `parse_bytes`: no input
//! may panic, and a header that parses must keep the parser's promises. The same checks as the
//! fuzz target, so a crash found by `cargo fuzz` stays fixed in the normal test run.
//!
//! The seeds are written by the ignored test `write_seed_corpus` (see docs/TESTING.md).

mod gguf_common;

use ds4_stream::gguf::{parse_bytes, Caps, GgufFile};
use gguf_common::*;
use std::path::{Path, PathBuf};

fn fuzz_dir(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(sub)
        .join("gguf_parse")
}

fn tiny_caps() -> Caps {
    Caps {
        max_tensors: 4,
        max_kv: 8,
        max_string: 64,
        max_string_bytes: 256,
        max_array: 16,
        max_metadata_values: 64,
        max_depth: 2,
        max_dims: 4,
    }
}

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
        assert!(t
            .offset
            .checked_add(t.nbytes)
            .is_some_and(|e| e <= f.file_size));
    }
}

/// Parses one input under both cap sets; true if the default caps accepted it.
fn replay(data: &[u8]) -> bool {
    let ok = match parse_bytes(data, &Caps::default()) {
        Ok(f) => {
            check(&f, &Caps::default(), data.len());
            true
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            false
        }
    };
    if let Ok(f) = parse_bytes(data, &tiny_caps()) {
        check(&f, &tiny_caps(), data.len());
    }
    ok
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

#[test]
fn corpus_and_artifacts_replay_without_panic() {
    let corpus = files(&fuzz_dir("corpus"));
    assert!(
        corpus.len() >= 10,
        "seed corpus missing: {:?}",
        fuzz_dir("corpus")
    );
    let artifacts = files(&fuzz_dir("artifacts"));
    let (mut ok, mut failed) = (0, Vec::new());
    for p in corpus.iter().chain(&artifacts) {
        let data = std::fs::read(p).unwrap();
        match std::panic::catch_unwind(|| replay(&data)) {
            Ok(true) => ok += 1,
            Ok(false) => {}
            Err(_) => failed.push(p.display().to_string()),
        }
    }
    assert!(failed.is_empty(), "inputs that panicked: {failed:?}");
    // The corpus holds both valid and hostile inputs, or it exercises too little.
    assert!(
        ok >= 3 && ok < corpus.len(),
        "{ok} of {} parsed",
        corpus.len()
    );
}

/// The seed inputs: small valid files and one hostile header per check.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let valid = small_valid();
    let mut v2 = valid.clone();
    v2[4] = 2;
    let with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = valid.clone();
        f(&mut b);
        b
    };
    let one = |name: &str, dims: &[u64], ty: u32, off: u64, data: usize| {
        let mut b = B::new();
        b.header(3, 1, 1)
            .kv_u32("general.alignment", 64)
            .tensor(name, dims, ty, off)
            .pad(64)
            .data(data);
        b.build()
    };
    let mut quants = B::new();
    quants
        .header(3, 3, 0)
        .tensor("iq2", &[256, 2, 1, 2], 16, 0)
        .tensor("q2k", &[512, 3], 10, 288)
        .tensor("q4k", &[256, 4, 2], 12, 800)
        .pad(32)
        .data(800 + 1152);
    let mut deep = B::new();
    deep.header(3, 0, 1).key("deep", ARRAY);
    for _ in 0..3 {
        deep.u32(ARRAY).u64(1);
    }
    deep.u32(STRING).u64(2).str("x").str("yz");
    let mut huge_str = B::new();
    huge_str.header(3, 0, 1).u64(u64::MAX).data(16);
    let mut huge_arr = B::new();
    huge_arr
        .header(3, 0, 1)
        .key("a", ARRAY)
        .u32(UINT8)
        .u64(1 << 40)
        .data(16);
    let mut dup = B::new();
    dup.header(3, 2, 0)
        .tensor("t", &[8], 0, 0)
        .tensor("t", &[8], 0, 32)
        .pad(32)
        .data(64);
    vec![
        ("valid_small_v3", valid.clone()),
        ("valid_small_v2", v2),
        ("valid_align64_q8", one("q8", &[64, 2], 8, 0, 136)),
        ("valid_quants_4d", quants.build()),
        ("valid_nested_strings", deep.build()),
        (
            "hostile_truncated_header",
            valid[..valid.len() / 2].to_vec(),
        ),
        (
            "hostile_huge_tensor_count",
            with(&|b| b[8..16].copy_from_slice(&(1u64 << 62).to_le_bytes())),
        ),
        (
            "hostile_huge_kv_count",
            with(&|b| b[16..24].copy_from_slice(&u64::MAX.to_le_bytes())),
        ),
        (
            "hostile_big_endian",
            with(&|b| b[4..8].copy_from_slice(&3u32.to_be_bytes())),
        ),
        ("hostile_v1", with(&|b| b[4] = 1)),
        ("hostile_huge_string", huge_str.build()),
        ("hostile_huge_array", huge_arr.build()),
        ("hostile_ndims5", one("t", &[32, 1, 1, 1, 1], 0, 0, 128)),
        ("hostile_zero_dim", one("t", &[32, 0], 0, 0, 128)),
        (
            "hostile_elem_overflow",
            one("t", &[1 << 32, 1 << 32, 4], 0, 0, 128),
        ),
        ("hostile_past_eof", one("t", &[64], 0, 0, 255)),
        ("hostile_misaligned", one("t", &[8], 0, 32, 128)),
        ("hostile_bad_block", one("t", &[48], 8, 0, 128)),
        ("hostile_unknown_type", one("t", &[32], 99, 0, 128)),
        ("hostile_dup_tensor", dup.build()),
    ]
}

#[test]
fn seeds_parse_as_their_names_say() {
    for (name, data) in seeds() {
        let ok = replay(&data);
        assert_eq!(ok, name.starts_with("valid_"), "{name}");
    }
}

/// Writes the seed corpus: `cargo test --test gguf_corpus -- --ignored write_seed_corpus`.
#[test]
#[ignore]
fn write_seed_corpus() {
    let dir = fuzz_dir("corpus");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, data) in seeds() {
        std::fs::write(dir.join(name), data).unwrap();
    }
}
