//! Hostile headers, built in memory field by field: one test per cap and check. Each must
//! produce the typed error (with the right offset) and never panic, hang or allocate from a
//! lying count. Truncation, random corruption and `parse_file` are in gguf_corrupt.rs.

mod gguf_common;

use ds4_stream::gguf::{parse_bytes, Caps, GgmlType, GgufError, Value};
use gguf_common::*;

fn parse(b: &[u8]) -> Result<ds4_stream::gguf::GgufFile, GgufError> {
    parse_bytes(b, &Caps::default())
}

/// The error, or a panic naming what parsed when it should not have.
fn err(b: &[u8]) -> GgufError {
    err_caps(b, &Caps::default())
}

fn err_caps(b: &[u8], caps: &Caps) -> GgufError {
    match parse_bytes(b, caps) {
        Ok(f) => panic!("expected an error, parsed {f:?}"),
        Err(e) => {
            // Every error must render as one line.
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "multi-line error: {msg}");
            e
        }
    }
}

/// A header with no metadata and one tensor info, then data.
fn one_tensor(name: &str, dims: &[u64], ty: u32, off: u64, data: usize) -> Vec<u8> {
    let mut b = B::new();
    b.header(3, 1, 0)
        .tensor(name, dims, ty, off)
        .pad(32)
        .data(data);
    b.build()
}

#[test]
fn small_valid_file_parses_exactly() {
    let bytes = small_valid();
    let f = parse(&bytes).unwrap();
    assert_eq!(f.version, 3);
    assert_eq!(f.alignment, 32);
    assert_eq!(f.file_size, bytes.len() as u64);
    assert_eq!(f.data_offset, bytes.len() as u64 - 160);
    assert_eq!(f.data_offset % 32, 0);
    assert_eq!(f.metadata.len(), 16);
    assert_eq!(f.get("u8"), Some(&Value::U8(200)));
    assert_eq!(f.get("i8"), Some(&Value::I8(-5)));
    assert_eq!(f.get("u16"), Some(&Value::U16(60000)));
    assert_eq!(f.get("i16"), Some(&Value::I16(-300)));
    assert_eq!(f.get("u32"), Some(&Value::U32(4_000_000_000)));
    assert_eq!(f.get("i32"), Some(&Value::I32(-70000)));
    assert_eq!(f.get("f32"), Some(&Value::F32(1.5)));
    assert_eq!(f.get("bool"), Some(&Value::Bool(true)));
    assert_eq!(f.get("u64"), Some(&Value::U64(1 << 40)));
    assert_eq!(f.get("i64"), Some(&Value::I64(-(1 << 40))));
    assert_eq!(f.get("f64"), Some(&Value::F64(-2.25)));
    assert_eq!(f.get("unicode").and_then(Value::as_str), Some("déjà vu ✓"));
    let s = |x: &str| Value::String(x.into());
    assert_eq!(
        f.get("strs"),
        Some(&Value::Array(vec![s("a"), s(""), s("ccc")]))
    );
    assert_eq!(
        f.get("nested"),
        Some(&Value::Array(vec![
            Value::Array(vec![Value::I32(1), Value::I32(2)]),
            Value::Array(vec![Value::I32(3)]),
        ]))
    );
    // File order is kept.
    assert_eq!(f.metadata[0].0, "general.architecture");
    assert_eq!(f.metadata[15].0, "unicode");
    let t: Vec<_> = f
        .tensors
        .iter()
        .map(|t| {
            (
                t.name.as_str(),
                t.ggml_type,
                t.dims.clone(),
                t.offset - f.data_offset,
                t.nbytes,
            )
        })
        .collect();
    assert_eq!(
        t,
        vec![
            ("a.f32", GgmlType::F32, vec![8], 0, 32),
            ("b.q8", GgmlType::Q8_0, vec![32, 2], 32, 68),
            ("c.f16", GgmlType::F16, vec![4, 2, 2], 128, 32),
        ]
    );
    assert_eq!(f.tensors[2].end(), f.file_size);
}

#[test]
fn v2_is_accepted_with_the_same_layout() {
    let mut bytes = small_valid();
    bytes[4] = 2;
    let f = parse(&bytes).unwrap();
    assert_eq!(f.version, 2);
    assert_eq!(f.tensors.len(), 3);
}

// ---- magic and version ----

#[test]
fn bad_magic() {
    let mut b = small_valid();
    b[0] = b'X';
    let e = err(&b);
    assert!(
        matches!(e, GgufError::BadMagic { found } if &found == b"XGUF"),
        "{e}"
    );
    assert!(e.to_string().contains("at byte 0"));
}

#[test]
fn version_1_is_rejected_clearly() {
    let mut b = small_valid();
    b[4] = 1;
    let e = err(&b);
    assert!(matches!(e, GgufError::Version1), "{e}");
    assert!(e.to_string().contains("v1"));
}

#[test]
fn unknown_versions() {
    for v in [0u32, 4, 0xffff_ffff] {
        let mut b = small_valid();
        b[4..8].copy_from_slice(&v.to_le_bytes());
        let e = err(&b);
        assert!(
            matches!(e, GgufError::UnsupportedVersion { version } if version == v),
            "{e}"
        );
    }
}

#[test]
fn big_endian_is_rejected_clearly() {
    let mut b = small_valid();
    b[4..8].copy_from_slice(&3u32.to_be_bytes());
    let e = err(&b);
    assert!(matches!(e, GgufError::BigEndian { swapped: 3, .. }), "{e}");
    assert!(e.to_string().contains("big-endian"));
}

// ---- counts ----

#[test]
fn huge_tensor_count_fails_before_allocating() {
    let mut b = small_valid();
    b[8..16].copy_from_slice(&(1u64 << 62).to_le_bytes());
    let caps = Caps {
        max_tensors: u64::MAX,
        ..Caps::default()
    };
    let e = err_caps(&b, &caps);
    assert!(
        matches!(e, GgufError::CountOverFile { what: "tensor count", count, at: 8, .. } if count == 1 << 62),
        "{e}"
    );
    assert!(e.to_string().contains("at byte 8"), "{e}");
    // With default caps the cap speaks first.
    let e = err(&b);
    assert!(
        matches!(
            e,
            GgufError::CountOverCap {
                cap_name: "max_tensors",
                at: 8,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn tensor_count_over_cap() {
    let caps = Caps {
        max_tensors: 2,
        ..Caps::default()
    };
    let e = err_caps(&small_valid(), &caps);
    assert!(
        matches!(
            e,
            GgufError::CountOverCap {
                count: 3,
                cap: 2,
                at: 8,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn huge_kv_count_fails_before_allocating() {
    let mut b = small_valid();
    b[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    let caps = Caps {
        max_kv: u64::MAX,
        ..Caps::default()
    };
    let e = err_caps(&b, &caps);
    assert!(
        matches!(
            e,
            GgufError::CountOverFile {
                what: "metadata kv count",
                at: 16,
                ..
            }
        ),
        "{e}"
    );
    let e = err(&b);
    assert!(
        matches!(
            e,
            GgufError::CountOverCap {
                cap_name: "max_kv",
                at: 16,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn kv_count_that_only_fits_without_the_tensor_table_fails() {
    // 2 tensors claim 64 bytes; 4 kv pairs would need 52 more; the file has 24 + 100 bytes.
    let mut b = B::new();
    b.header(3, 2, 4).data(100);
    let e = err(&b.0);
    assert!(
        matches!(
            e,
            GgufError::CountOverFile {
                what: "metadata kv count",
                remaining: 36,
                ..
            }
        ),
        "{e}"
    );
}

// ---- strings ----

#[test]
fn huge_string_over_cap() {
    let mut b = B::new();
    b.header(3, 0, 1).u64(1 << 40).data(64);
    let e = err(&b.0);
    assert!(
        matches!(e, GgufError::StringOverCap { len, at: 24, .. } if len == 1 << 40),
        "{e}"
    );
    assert!(e.to_string().contains("metadata key #0"), "{e}");
}

#[test]
fn string_longer_than_the_file() {
    let mut b = B::new();
    b.header(3, 0, 1).key("k", STRING).u64(1000).data(64);
    let e = err(&b.0);
    assert!(
        matches!(
            e,
            GgufError::StringOverFile {
                len: 1000,
                remaining: 64,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn tensor_name_over_cap() {
    let caps = Caps {
        max_string: 4,
        ..Caps::default()
    };
    let e = err_caps(&one_tensor("longname", &[32], 0, 0, 128), &caps);
    assert!(
        matches!(e, GgufError::StringOverCap { len: 8, cap: 4, .. }),
        "{e}"
    );
}

/// Strings are kept in memory: their total is capped, whatever the file size (a sparse file
/// makes size free). Keys, string values (in arrays too) and tensor names all count.
#[test]
fn total_string_bytes_over_cap() {
    let caps = Caps {
        max_string_bytes: 20,
        ..Caps::default()
    };
    // Key "k" (1) + 3 strings of 6 = 19 bytes: fits.
    let mut b = B::new();
    b.header(3, 0, 1).key("k", ARRAY).u32(STRING).u64(3);
    b.str("aaaaaa").str("bbbbbb").str("cccccc");
    parse_bytes(&b.0, &caps).unwrap();
    // A fourth string crosses the cap: the error names the string, the bytes left and where.
    let mut b = B::new();
    b.header(3, 0, 1).key("k", ARRAY).u32(STRING).u64(4);
    b.str("aaaaaa").str("bbbbbb").str("cccccc");
    let at = b.len() as u64;
    b.str("dddddd");
    let e = err_caps(&b.0, &caps);
    assert!(
        matches!(
            e,
            GgufError::StringBytesOverCap { len: 6, left: 1, cap: 20, at: a, .. } if a == at
        ),
        "{e}"
    );
    assert!(e.to_string().contains("max_string_bytes=20"), "{e}");
    // Tensor names share the same budget as metadata.
    let mut b = B::new();
    b.header(3, 1, 1).key("kkkkkkkkkkkkkkkk", UINT8).u8(0);
    b.tensor("tensor_name", &[8], 0, 0).pad(32).data(32);
    let e = err_caps(&b.0, &caps);
    assert!(
        matches!(e, GgufError::StringBytesOverCap { len: 11, left: 4, ref what, .. } if what.contains("tensor #0")),
        "{e}"
    );
}

#[test]
fn invalid_utf8_names_are_errors_and_values_are_lossy() {
    let mut b = B::new();
    b.header(3, 0, 1).bytes_str(b"k\xff").u32(UINT8).u8(0);
    let e = err(&b.0);
    assert!(matches!(e, GgufError::InvalidUtf8 { at: 24, .. }), "{e}");

    let mut b = B::new();
    b.header(3, 1, 0)
        .bytes_str(b"t\xc3")
        .u32(1)
        .u64(32)
        .u32(0)
        .u64(0)
        .pad(32)
        .data(128);
    let e = err(&b.0);
    assert!(
        matches!(e, GgufError::InvalidUtf8 { ref what, .. } if what.contains("tensor")),
        "{e}"
    );

    let mut b = B::new();
    b.header(3, 0, 1).key("k", STRING).bytes_str(b"a\xffb");
    let f = parse(&b.0).unwrap();
    assert_eq!(f.get("k").and_then(Value::as_str), Some("a\u{fffd}b"));
}

// ---- arrays ----

#[test]
fn huge_array_over_cap() {
    let mut b = B::new();
    b.header(3, 0, 1)
        .key("arr", ARRAY)
        .u32(UINT8)
        .u64(u64::MAX)
        .data(64);
    let e = err(&b.0);
    let at = 24 + 8 + 3 + 4 + 4;
    assert!(
        matches!(e, GgufError::ArrayOverCap { len: u64::MAX, at: a, .. } if a == at),
        "{e}"
    );
}

#[test]
fn array_longer_than_the_file_can_hold() {
    // 100 UINT64 need 800 bytes; 500 are left.
    let mut b = B::new();
    b.header(3, 0, 1)
        .key("arr", ARRAY)
        .u32(UINT64)
        .u64(100)
        .data(500);
    let e = err(&b.0);
    assert!(
        matches!(
            e,
            GgufError::ArrayOverFile {
                len: 100,
                elem: "UINT64",
                min_each: 8,
                remaining: 500,
                ..
            }
        ),
        "{e}"
    );
    // Strings are at least 8 bytes, arrays 12: 50 empty arrays need 600.
    let mut b = B::new();
    b.header(3, 0, 1)
        .key("arr", ARRAY)
        .u32(ARRAY)
        .u64(50)
        .data(500);
    let e = err(&b.0);
    assert!(
        matches!(
            e,
            GgufError::ArrayOverFile {
                elem: "ARRAY",
                min_each: 12,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn total_metadata_values_over_cap() {
    let caps = Caps {
        max_metadata_values: 10,
        ..Caps::default()
    };
    let mut b = B::new();
    b.header(3, 0, 2)
        .key("a", ARRAY)
        .u32(UINT8)
        .u64(6)
        .raw(&[0; 6]);
    b.key("b", ARRAY).u32(UINT8).u64(6).raw(&[0; 6]);
    let e = err_caps(&b.0, &caps);
    assert!(
        matches!(e, GgufError::TooManyValues { ref key, cap: 10, .. } if key == "b"),
        "{e}"
    );
    // Nested empty arrays count too.
    let mut b = B::new();
    b.header(3, 0, 1).key("n", ARRAY).u32(ARRAY).u64(20);
    for _ in 0..20 {
        b.u32(UINT8).u64(0);
    }
    let e = err_caps(&b.0, &caps);
    assert!(matches!(e, GgufError::TooManyValues { .. }), "{e}");
}

fn nested(depth: u32) -> Vec<u8> {
    let mut b = B::new();
    b.header(3, 0, 1).key("deep", ARRAY);
    for _ in 1..depth {
        b.u32(ARRAY).u64(1);
    }
    b.u32(UINT8).u64(1).u8(7);
    b.build()
}

#[test]
fn nesting_deeper_than_cap() {
    let caps = Caps::default();
    let ok = parse(&nested(caps.max_depth)).unwrap();
    let mut v = ok.get("deep").unwrap();
    for _ in 0..caps.max_depth {
        v = &v.as_array().unwrap()[0];
    }
    assert_eq!(v, &Value::U8(7));
    let e = err(&nested(caps.max_depth + 1));
    assert!(matches!(e, GgufError::TooDeep { cap: 8, .. }), "{e}");
}

#[test]
fn very_deep_nesting_uses_no_stack() {
    // With the cap lifted, 200,000 levels parse without recursion (and drop without it).
    let caps = Caps {
        max_depth: u32::MAX,
        max_metadata_values: u64::MAX,
        ..Caps::default()
    };
    let f = parse_bytes(&nested(200_000), &caps).unwrap();
    // Value's Drop is recursive; take the nest apart iteratively so the test checks the parser.
    let (_, mut v) = f.metadata.into_iter().next().unwrap();
    let mut depth = 0;
    while let Value::Array(mut items) = v {
        depth += 1;
        v = items.pop().unwrap();
    }
    assert_eq!((depth, v), (200_000, Value::U8(7)));
}

#[test]
fn unknown_value_types() {
    let mut b = B::new();
    b.header(3, 0, 1).key("k", 13).u8(0);
    let e = err(&b.0);
    assert!(
        matches!(e, GgufError::UnknownValueType { id: 13, at: 33, .. }),
        "{e}"
    );
    let mut b = B::new();
    b.header(3, 0, 1).key("k", ARRAY).u32(99).u64(0);
    let e = err(&b.0);
    assert!(
        matches!(e, GgufError::UnknownValueType { id: 99, .. }),
        "{e}"
    );
}

#[test]
fn duplicate_metadata_key() {
    let mut b = B::new();
    b.header(3, 0, 2).kv_u32("k", 1).kv_u32("k", 2);
    let e = err(&b.0);
    assert!(
        matches!(
            e,
            GgufError::DuplicateKey {
                at: 41,
                first_at: 24,
                ..
            }
        ),
        "{e}"
    );
}

// ---- alignment ----

#[test]
fn bad_alignment_values() {
    for a in [0u32, 3, 48, 0x8000_0001] {
        let mut b = B::new();
        b.header(3, 0, 1).kv_u32("general.alignment", a);
        let e = err(&b.0);
        assert!(
            matches!(e, GgufError::BadAlignment { value, .. } if value == u64::from(a)),
            "{e}"
        );
    }
}

#[test]
fn alignment_of_the_wrong_type() {
    let mut b = B::new();
    b.header(3, 0, 1).key("general.alignment", UINT64).u64(64);
    let e = err(&b.0);
    assert!(
        matches!(
            e,
            GgufError::AlignmentType {
                found: "UINT64",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn custom_alignment_sets_the_data_offset() {
    for a in [1u32, 8, 64, 4096] {
        let mut b = B::new();
        b.header(3, 2, 1)
            .kv_u32("general.alignment", a)
            .tensor("x", &[3], 0, 0)
            .tensor(
                "y",
                &[1],
                0,
                u64::from(a).max(12).next_multiple_of(a.into()),
            );
        let header_end = b.len() as u64;
        b.pad(a as usize).data(2 * a.max(12) as usize);
        let f = parse(&b.0).unwrap();
        assert_eq!(f.alignment, u64::from(a));
        assert_eq!(f.data_offset, header_end.next_multiple_of(a.into()));
        assert_eq!(f.tensors[0].offset, f.data_offset);
        assert_eq!(
            f.tensors[1].offset,
            f.data_offset + u64::from(a).max(12).next_multiple_of(a.into())
        );
    }
}

#[test]
fn misaligned_tensor_offset() {
    let b = one_tensor("t", &[8], 0, 16, 64);
    let e = err(&b);
    assert!(
        matches!(
            e,
            GgufError::MisalignedTensor {
                offset: 16,
                alignment: 32,
                ..
            }
        ),
        "{e}"
    );
}

// ---- tensor infos ----

#[test]
fn n_dims_out_of_range() {
    for (dims, n) in [(&[1u64, 1, 1, 1, 1][..], 5), (&[][..], 0)] {
        let e = err(&one_tensor("t", dims, 0, 0, 64));
        assert!(
            matches!(e, GgufError::BadDimCount { n_dims, max: 4, at: 33, .. } if n_dims == n),
            "{e}"
        );
    }
    // And a lying n_dims never drives an allocation.
    let mut b = B::new();
    b.header(3, 1, 0).str("t").u32(u32::MAX).data(64);
    let caps = Caps {
        max_dims: u32::MAX,
        ..Caps::default()
    };
    assert!(matches!(err_caps(&b.0, &caps), GgufError::Truncated { .. }));
}

#[test]
fn zero_dim() {
    let e = err(&one_tensor("t", &[4, 0, 2], 0, 0, 64));
    assert!(
        matches!(
            e,
            GgufError::ZeroDim {
                index: 1,
                at: 45,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn element_count_overflow() {
    let e = err(&one_tensor("t", &[1 << 32, 1 << 32, 2], 0, 0, 64));
    assert!(
        matches!(e, GgufError::ElemCountOverflow { ref dims, .. } if dims.len() == 3),
        "{e}"
    );
}

#[test]
fn nbytes_overflow() {
    // 2^62 F32 elements fit a u64 count but not a u64 byte size.
    let e = err(&one_tensor("t", &[1 << 62], 0, 0, 64));
    assert!(
        matches!(e, GgufError::NBytesOverflow { n_elems, .. } if n_elems == 1 << 62),
        "{e}"
    );
}

#[test]
fn dim0_not_a_multiple_of_the_block() {
    let e = err(&one_tensor("t", &[33, 2], 8, 0, 128));
    assert!(
        matches!(
            e,
            GgufError::NotBlockMultiple {
                ty: "Q8_0",
                dim0: 33,
                block: 32,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn unknown_tensor_type() {
    for id in [4u32, 31, 42, u32::MAX] {
        let e = err(&one_tensor("t", &[256], id, 0, 1024));
        assert!(
            matches!(e, GgufError::UnknownTensorType { id: i, .. } if i == id),
            "{e}"
        );
    }
}

#[test]
fn tensor_past_eof() {
    // 8 F32 = 32 bytes, only 31 present.
    let e = err(&one_tensor("t", &[8], 0, 0, 31));
    assert!(
        matches!(e, GgufError::TensorPastEof { nbytes: 32, .. }),
        "{e}"
    );
    // Exactly at EOF is fine.
    assert!(parse(&one_tensor("t", &[8], 0, 0, 32)).is_ok());
    // A relative offset that overflows when added to the data offset.
    let e = err(&one_tensor("t", &[8], 0, u64::MAX - 31, 32));
    assert!(
        matches!(
            e,
            GgufError::TensorPastEof {
                start: u64::MAX,
                ..
            }
        ),
        "{e}"
    );
    // A size that overflows the end.
    let e = err(&one_tensor("t", &[1 << 61], 0, 0, 32));
    assert!(matches!(e, GgufError::TensorPastEof { .. }), "{e}");
}

#[test]
fn duplicate_tensor_names() {
    let mut b = B::new();
    b.header(3, 2, 0)
        .tensor("t", &[8], 0, 0)
        .tensor("t", &[8], 0, 32)
        .pad(32)
        .data(64);
    let e = err(&b.0);
    assert!(
        matches!(
            e,
            GgufError::DuplicateTensor {
                at: 57,
                first_at: 24,
                ..
            }
        ),
        "{e}"
    );
}
