//! Damaged and on-disk inputs: truncation at every byte of a small valid file, seeded random
//! corruption (Ok or Err, never a panic), and `parse_file` itself (same answers as
//! `parse_bytes`, offsets past 4 GiB in a sparse file, missing paths and directories).

mod gguf_common;

use ds4_stream::gguf::{parse_bytes, parse_file, Caps, GgufError};
use gguf_common::*;

fn parse(b: &[u8]) -> Result<ds4_stream::gguf::GgufFile, GgufError> {
    parse_bytes(b, &Caps::default())
}

#[test]
fn parse_file_matches_parse_bytes() {
    let bytes = small_valid();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("small.gguf");
    std::fs::write(&p, &bytes).unwrap();
    assert_eq!(
        parse_file(&p, &Caps::default()).unwrap(),
        parse(&bytes).unwrap()
    );
    // And the same error for the same malformed content.
    let bad = &bytes[..bytes.len() - 1];
    std::fs::write(&p, bad).unwrap();
    let (a, b) = (
        parse_file(&p, &Caps::default()).unwrap_err(),
        parse(bad).unwrap_err(),
    );
    assert_eq!(a.to_string(), b.to_string());
}

#[test]
fn parse_file_offsets_past_4_gib_in_a_sparse_file() {
    // A tensor 5 GiB into the data section of a sparse 6 GiB file: offsets are u64 throughout and
    // the parser reads only the header (the holes are never touched).
    let rel: u64 = 5 << 30;
    let mut b = B::new();
    b.header(3, 2, 0)
        .tensor("low", &[256], 16, 0)
        .tensor("high", &[256, 4], 10, rel)
        .pad(32);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("sparse.gguf");
    let f = std::fs::File::create(&p).unwrap();
    std::io::Write::write_all(&mut &f, &b.0).unwrap();
    f.set_len(6 << 30).unwrap();
    drop(f);
    let g = parse_file(&p, &Caps::default()).unwrap();
    assert_eq!(g.file_size, 6 << 30);
    let high = g.tensor("high").unwrap();
    assert_eq!(high.offset, g.data_offset + rel);
    assert!(high.offset > 4 << 30);
    assert_eq!(high.nbytes, 4 * 84);
    assert_eq!(g.tensor("low").unwrap().nbytes, 66);
}

#[test]
fn parse_file_rejects_missing_and_non_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.gguf");
    let e = parse_file(&missing, &Caps::default()).unwrap_err();
    assert!(matches!(e, GgufError::Open { .. }), "{e}");
    assert_eq!(e.path(), Some(missing.as_path()));
    let e = parse_file(dir.path(), &Caps::default()).unwrap_err();
    assert!(matches!(e, GgufError::NotAFile { .. }), "{e}");
}

#[test]
fn truncation_at_every_byte_is_an_error() {
    let full = small_valid();
    for n in 0..full.len() {
        let e = match parse(&full[..n]) {
            Ok(_) => panic!("prefix of {n} bytes parsed"),
            Err(e) => e,
        };
        // Cut inside the header: a truncation; inside the data: the last tensor is past EOF.
        // (A cut inside a string's length can also read as a too-long string.)
        assert!(
            matches!(
                e,
                GgufError::Truncated { .. }
                    | GgufError::TensorPastEof { .. }
                    | GgufError::StringOverFile { .. }
                    | GgufError::CountOverFile { .. }
                    | GgufError::ArrayOverFile { .. }
            ),
            "prefix {n}: {e}"
        );
    }
    assert!(parse(&full).is_ok());
}

#[test]
fn random_byte_flips_never_panic() {
    let base = small_valid();
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let (mut ok, mut bad) = (0u32, 0u32);
    for _ in 0..20_000 {
        let mut b = base.clone();
        let flips = 1 + rng.below(4);
        for _ in 0..flips {
            let i = rng.below(b.len() as u64) as usize;
            b[i] = match rng.below(4) {
                0 => 0xff,
                1 => 0,
                _ => b[i] ^ (1 << rng.below(8)),
            };
        }
        // Sometimes also cut the file.
        if rng.below(8) == 0 {
            let n = rng.below(b.len() as u64) as usize;
            b.truncate(n);
        }
        match parse(&b) {
            Ok(_) => ok += 1,
            Err(e) => {
                assert!(!e.to_string().is_empty());
                bad += 1;
            }
        }
    }
    // The loop must exercise both outcomes, or it is not testing much.
    assert!(ok > 100 && bad > 1000, "ok {ok} bad {bad}");
}
