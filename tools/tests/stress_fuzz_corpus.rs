//! Replays the corpora of the `ds4_map` and `plan_chunks` fuzz targets (the committed seeds in
//! fuzz/corpus/<target>/ plus crash inputs kept as regressions there or in
//! fuzz/artifacts/<target>/) through the same checks the targets run, so a crash found by
//! `cargo fuzz` stays fixed in the ordinary test run. Also: the micro DS4 file the structured
//! mode edits maps cleanly, seeded random inputs for both checks, and the seed writer
//! (`cargo test --test stress_fuzz_corpus -- --ignored write_seed_corpora`).

use ds4_stream::gguf::{parse_bytes, Caps};
use ds4_stream::model::Ds4Model;
use ds4_tools::stress::fuzz::{
    check_ds4_map, check_plan, check_plan_chunks, check_plan_chunks_engine, micro_file,
    ENGINE_FILE_LEN,
};
use std::path::{Path, PathBuf};

fn dir(kind: &str, target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz")
        .join(kind)
        .join(target)
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

/// Every input of both directories of `target`; returns how many there were.
fn replay(target: &str, check: impl Fn(&[u8])) -> usize {
    let mut n = 0;
    for d in [dir("corpus", target), dir("artifacts", target)] {
        for p in files(&d) {
            let data = std::fs::read(&p).unwrap();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&data)));
            if let Err(e) = r {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                panic!("{}: {msg}", p.display());
            }
            n += 1;
        }
    }
    n
}

#[test]
fn ds4_map_corpus_replays() {
    let n = replay("ds4_map", check_ds4_map);
    assert!(n >= 10, "expected the committed seeds, found {n} inputs");
}

#[test]
fn plan_chunks_corpus_replays() {
    let n = replay("plan_chunks", |d| {
        check_plan_chunks(d);
        check_plan_chunks_engine(d);
    });
    assert!(n >= 10, "expected the committed seeds, found {n} inputs");
}

#[test]
fn micro_file_is_a_valid_ds4_map() {
    let file = micro_file();
    assert!(
        file.len() < ds4_tools::stress::fuzz::PAD_LEN,
        "micro file is {} bytes",
        file.len()
    );
    let f = parse_bytes(&file, &Caps::default()).unwrap();
    let m = Ds4Model::from_gguf(&f).unwrap();
    assert_eq!(m.layers.len(), 2);
    assert_eq!(m.shape.n_expert, 4);
    // All three modes accept it: raw file, header padded, no edits.
    let mut raw = vec![0u8];
    raw.extend_from_slice(&file);
    check_ds4_map(&raw);
    check_ds4_map(&[2]);
}

/// splitmix64 for seeded random inputs.
fn rng(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[test]
fn seeded_random_inputs_keep_the_promises() {
    let mut s = 0x5eed_u64;
    for i in 0..3000 {
        let n = (rng(&mut s) % 64) as usize;
        let mut data: Vec<u8> = (0..n).map(|_| rng(&mut s) as u8).collect();
        check_plan_chunks(&data);
        if i % 10 == 0 {
            check_plan_chunks_engine(&data);
        }
        // Structured mode: edits of the micro file.
        data.insert(0, 2);
        check_ds4_map(&data);
    }
}

#[test]
fn planner_edge_cases_tile() {
    let g = 1u64 << 30;
    for (off, len, chunk) in [
        (0u64, 0usize, 4096usize),
        (u64::MAX - 1, 1, 4096),
        (u64::MAX - 10, 10, 1),
        (u64::MAX - 4096, 4096, 4096),
        (2 * g - 1, 2, 4096),
        (4 * g - 1, 2, 1 << 30),
        (4 * g - 5, 3 << 30, 1 << 30),
        (7, 1, 1),
        (0, 1 << 20, 3),
    ] {
        check_plan(off, len, chunk);
    }
    // The engine stage at its extremes: the file's unaligned end, 0 bytes, 2 and 4 GiB.
    let mut last = vec![0u8, 3, 3, 0];
    last.extend_from_slice(&0u64.to_le_bytes());
    last.extend_from_slice(&((1u64 << 20) + 8191).to_le_bytes());
    check_plan_chunks_engine(&last);
    const { assert!(ENGINE_FILE_LEN % 4096 != 0) };
}

/// Writes the seed corpora (run by hand; see docs/TESTING.md).
#[test]
#[ignore]
fn write_seed_corpora() {
    let write = |target: &str, name: &str, data: &[u8]| {
        let d = dir("corpus", target);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(name), data).unwrap();
    };
    let file = micro_file();
    let header_len = {
        let f = parse_bytes(&file, &Caps::default()).unwrap();
        f.data_offset as usize
    };
    let mut raw = vec![0u8];
    raw.extend_from_slice(&file);
    write("ds4_map", "raw_micro_file", &raw);
    let mut padded = vec![1u8];
    padded.extend_from_slice(&file[..header_len]);
    write("ds4_map", "padded_micro_header", &padded);
    // Structured edits: op byte (see stress::fuzz::edit), then its arguments.
    let edits: &[(&str, &[u8])] = &[
        ("edit_none", &[]),
        ("edit_block_count_zero", &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6]),
        (
            "edit_expert_count_huge",
            &[0, 3, 255, 255, 255, 255, 255, 255, 255, 127, 2],
        ),
        ("edit_used_gt_count", &[0, 4, 9, 0, 0, 0, 0, 0, 0, 0, 0]),
        ("edit_hash_gt_layers", &[0, 7, 9, 0, 0, 0, 0, 0, 0, 0, 0]),
        ("edit_negative_key", &[0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 7]),
        ("edit_arch_wrong", &[2, 0, 0, 1]),
        ("edit_arch_float", &[2, 0, 1, 1, 0, 0, 0, 0]),
        ("edit_remove_first_key", &[3, 0]),
        ("edit_dims", &[4, 60, 0, 1, 3]),
        ("edit_type", &[5, 61, 3]),
        ("edit_remove_tensor", &[6, 62]),
        ("edit_rename_stray", &[7, 5, 2, 200, 0, 0, 0, 0, 0, 0, 0, 0]),
        (
            "edit_duplicate_routed",
            &[8, 62, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ),
        ("edit_push_dim", &[9, 62, 0, 0, 4]),
        ("edit_pop_dim", &[9, 62, 1]),
    ];
    for (name, e) in edits {
        let mut v = vec![2u8];
        v.extend_from_slice(e);
        write("ds4_map", name, &v);
    }
    // plan_chunks: mode, chunk mode, offset word, len word, chunk word (see plan_input), and
    // the engine stage reads the same bytes as slot, align, mode, host, offset, len, dst.
    let le = |x: u64| x.to_le_bytes();
    let plan = |mode: u8, cmode: u8, v: u64, l: u64, c: u64| {
        let mut d = vec![mode, cmode];
        d.extend_from_slice(&le(v));
        d.extend_from_slice(&le(l));
        d.extend_from_slice(&le(c));
        d
    };
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        ("zero_len", plan(0, 0, 0, 0, 0)),
        ("one_byte_at_2g", plan(1, 0, 4095, 1, 0)),
        ("across_2g", plan(9, 0, 100, 1 << 20, 3)),
        ("across_4g", plan(10, 1, 4000, 3 << 20, 12)),
        ("near_u64_end", plan(3, 3, 7, 5, 4)),
        ("top_of_range", plan(31, 2, 5, u64::MAX, 1 << 29)),
        ("aligned_multi_slot", plan(13, 0, 3, 5 << 20, 255)),
        ("unaligned_multi_slot", plan(14, 0, 3, 5 << 20, 0)),
        ("huge_len", plan(16, 1, 12345, 1 << 32, 30)),
        ("tiny_chunks", plan(12, 3, 77, 1000, 2)),
        (
            "file_end_host",
            vec![
                1, 2, 3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 47, 0, 0, 0, 0, 0,
            ],
        ),
        (
            "file_end_staged_64k",
            vec![3, 5, 3, 0, 9, 0, 0, 0, 0, 0, 0, 0, 1, 0, 16, 0, 0, 0, 0, 0],
        ),
    ];
    for (name, d) in seeds {
        write("plan_chunks", name, &d);
    }
}

#[test]
fn writer_refuses_what_the_parser_rejects() {
    // Found by the structured mode: the writer used to plan a zero dim the parser rejects.
    use ds4_stream::gguf::writer::TensorSpec;
    use ds4_stream::gguf::GgmlType;
    let e = TensorSpec::new("t", GgmlType::F32, &[4, 0])
        .nbytes()
        .unwrap_err();
    assert!(e.to_string().contains("dim 1 is 0"), "{e}");
}
