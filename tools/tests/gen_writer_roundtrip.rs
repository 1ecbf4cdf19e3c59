//! The streaming GGUF writer against two readers: our parser (every value type, nested and
//! empty arrays, every ggml type, several alignments, data written in odd-sized chunks and
//! holes) and gguf-py (same metadata values and types, same tensor table).

mod gen_util;

use ds4_stream::gguf::writer::{plan, GgufWriter, TensorSpec};
use ds4_stream::gguf::{parse_bytes, Caps, GgmlType, Value};
use gen_util::*;
use serde_json::{json, Value as Json};

fn metadata(alignment: u32) -> Vec<(String, Value)> {
    let s = |x: &str| Value::String(x.to_string());
    vec![
        ("general.architecture".into(), s("deepseek4")),
        ("general.alignment".into(), Value::U32(alignment)),
        ("t.u8".into(), Value::U8(250)),
        ("t.i8".into(), Value::I8(-100)),
        ("t.u16".into(), Value::U16(65_000)),
        ("t.i16".into(), Value::I16(-30_000)),
        ("t.u32".into(), Value::U32(4_000_000_000)),
        ("t.i32".into(), Value::I32(-2_000_000_000)),
        ("t.f32".into(), Value::F32(1.5)),
        ("t.bool".into(), Value::Bool(true)),
        ("t.string".into(), s("héllo wörld ✓")),
        ("t.u64".into(), Value::U64(u64::MAX - 1)),
        ("t.i64".into(), Value::I64(i64::MIN + 1)),
        ("t.f64".into(), Value::F64(-0.25)),
        (
            "t.arr_u32".into(),
            Value::Array(vec![Value::U32(1), Value::U32(2), Value::U32(3)]),
        ),
        (
            "t.arr_str".into(),
            Value::Array(vec![s("a"), s(""), s("ccc")]),
        ),
        (
            "t.arr_nested".into(),
            Value::Array(vec![
                Value::Array(vec![Value::I16(-1), Value::I16(2)]),
                Value::Array(vec![Value::I16(3)]),
            ]),
        ),
        ("t.arr_empty".into(), Value::Array(vec![])),
    ]
}

fn tensors() -> Vec<TensorSpec> {
    GgmlType::all()
        .enumerate()
        .map(|(i, t)| TensorSpec::new(format!("t{i}.{}", t.name()), t, &[t.block_elems() * 2, 3]))
        .collect()
}

/// Writes the file; tensors with an odd index are data (chunk of 7 bytes), even ones holes.
fn write(alignment: u32) -> (Vec<u8>, ds4_stream::gguf::writer::Layout) {
    let layout = plan(&metadata(alignment), &tensors()).unwrap();
    let mut w = GgufWriter::new(std::io::Cursor::new(Vec::new()), layout.clone(), 7).unwrap();
    for i in (1..layout.tensors.len()).step_by(2) {
        w.write_tensor(i, &mut |off, buf| {
            for (j, b) in buf.iter_mut().enumerate() {
                *b = (off as usize + j + i) as u8 | 1;
            }
            Ok(())
        })
        .unwrap();
    }
    (w.finish().unwrap().into_inner(), layout)
}

#[test]
fn our_parser_reads_what_the_writer_planned() {
    for alignment in [1u32, 8, 32, 64, 4096] {
        let (bytes, layout) = write(alignment);
        assert_eq!(bytes.len() as u64, layout.total_len);
        let f = parse_bytes(&bytes, &Caps::default()).unwrap();
        assert_eq!(f, layout.expected_file(), "alignment {alignment}");
        for (i, t) in f.tensors.iter().enumerate() {
            assert_eq!(t.offset % u64::from(alignment), 0);
            let data = &bytes[t.offset as usize..t.end() as usize];
            if i % 2 == 1 {
                assert!(data.iter().all(|&b| b & 1 == 1), "{}", t.name);
            } else {
                assert!(data.iter().all(|&b| b == 0), "{} should be a hole", t.name);
            }
        }
    }
}

#[test]
fn gguf_py_reads_the_same_values_and_table() {
    let dir = tempfile::tempdir().unwrap();
    for alignment in [32u32, 4096] {
        let (bytes, layout) = write(alignment);
        let p = dir.path().join(format!("w{alignment}.gguf"));
        std::fs::write(&p, &bytes).unwrap();
        let out = run_py(
            "gen_readback.py",
            &[p.to_str().unwrap(), dir.path().to_str().unwrap(), "", "0"],
        );
        let j: Json = serde_json::from_str(&out).unwrap();
        assert_eq!(j["alignment"], alignment);
        assert_eq!(j["data_offset"], layout.data_offset);
        let f = &j["fields"];
        let expect = [
            ("t.u8", json!(["UINT8"]), json!(250)),
            ("t.i8", json!(["INT8"]), json!(-100)),
            ("t.u16", json!(["UINT16"]), json!(65000)),
            ("t.i16", json!(["INT16"]), json!(-30000)),
            ("t.u32", json!(["UINT32"]), json!(4_000_000_000u32)),
            ("t.i32", json!(["INT32"]), json!(-2_000_000_000)),
            ("t.f32", json!(["FLOAT32"]), json!(1.5)),
            ("t.bool", json!(["BOOL"]), json!(true)),
            ("t.string", json!(["STRING"]), json!("héllo wörld ✓")),
            ("t.u64", json!(["UINT64"]), json!(u64::MAX - 1)),
            ("t.i64", json!(["INT64"]), json!(i64::MIN + 1)),
            ("t.f64", json!(["FLOAT64"]), json!(-0.25)),
            ("t.arr_u32", json!(["ARRAY", "UINT32"]), json!([1, 2, 3])),
            (
                "t.arr_str",
                json!(["ARRAY", "STRING"]),
                json!(["a", "", "ccc"]),
            ),
        ];
        for (k, types, value) in expect {
            assert_eq!(f[k]["types"], types, "{k}");
            assert_eq!(f[k]["value"], value, "{k}");
        }
        assert_eq!(f["t.arr_nested"]["types"][0], "ARRAY");
        assert_eq!(f["t.arr_nested"]["types"][1], "ARRAY");
        assert_eq!(f["t.arr_empty"]["types"][0], "ARRAY");
        let py = j["tensors"].as_array().unwrap();
        assert_eq!(py.len(), layout.tensors.len());
        for (a, t) in py.iter().zip(&layout.tensors) {
            assert_eq!(a["name"], t.name.as_str());
            assert_eq!(a["type"], t.ggml_type.name());
            assert_eq!(a["offset"], t.offset);
            assert_eq!(a["nbytes"], t.nbytes);
            assert_eq!(a["shape"], json!(t.dims));
        }
    }
}
