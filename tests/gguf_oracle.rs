//! gguf-py as the oracle: files written by gguf-py's GGUFWriter (alignments 1 to 4096, every
//! metadata value type, nested arrays, F32/F16/Q8_0/IQ2_XXS/Q2_K/Q4_K tensors of 1-4 dims) must
//! parse to exactly what gguf-py's GGUFReader sees: version, alignment, data offset, every
//! metadata value with its type (floats compared bit for bit), and the tensor table (name, type,
//! GGUF-order shape, absolute offset, bytes).

mod gguf_common;

use ds4_stream::gguf::{parse_bytes, parse_file, Caps, GgufFile, Value};
use gguf_common::oracle;
use serde_json::{json, Value as J};
use std::ffi::OsStr;
use std::path::PathBuf;

/// A metadata value in the oracle's typed JSON form.
fn typed(v: &Value) -> J {
    match v {
        Value::F32(x) => json!({"type": "FLOAT32", "bits": x.to_bits()}),
        Value::F64(x) => json!({"type": "FLOAT64", "bits": x.to_bits()}),
        Value::String(s) => json!({"type": "STRING", "value": s}),
        Value::Bool(b) => json!({"type": "BOOL", "value": b}),
        Value::Array(items) => json!({
            "type": "ARRAY",
            "elem": v.elem_type_name().unwrap_or("<empty>"),
            "items": items.iter().map(typed).collect::<Vec<_>>(),
        }),
        Value::U8(x) => json!({"type": "UINT8", "value": x}),
        Value::I8(x) => json!({"type": "INT8", "value": x}),
        Value::U16(x) => json!({"type": "UINT16", "value": x}),
        Value::I16(x) => json!({"type": "INT16", "value": x}),
        Value::U32(x) => json!({"type": "UINT32", "value": x}),
        Value::I32(x) => json!({"type": "INT32", "value": x}),
        Value::U64(x) => json!({"type": "UINT64", "value": x}),
        Value::I64(x) => json!({"type": "INT64", "value": x}),
    }
}

fn ours(path: &str, f: &GgufFile) -> J {
    json!({
        "path": path,
        "version": f.version,
        "alignment": f.alignment,
        "data_offset": f.data_offset,
        "file_size": f.file_size,
        "metadata": f.metadata.iter().map(|(k, v)| json!([k, typed(v)])).collect::<Vec<_>>(),
        "tensors": f.tensors.iter().map(|t| json!({
            "name": t.name,
            "type": t.ggml_type.name(),
            "shape": t.dims,
            "offset": t.offset,
            "nbytes": t.nbytes,
        })).collect::<Vec<_>>(),
    })
}

/// Compares key by key so a failure names the first differing field.
fn assert_same(ours: &J, theirs: &J) {
    let path = theirs["path"].as_str().unwrap_or("?");
    for key in ["version", "alignment", "data_offset", "file_size"] {
        assert_eq!(ours[key], theirs[key], "{path}: {key}");
    }
    let (om, tm) = (
        ours["metadata"].as_array().unwrap(),
        theirs["metadata"].as_array().unwrap(),
    );
    for (o, t) in om.iter().zip(tm) {
        assert_eq!(o, t, "{path}: metadata");
    }
    assert_eq!(om.len(), tm.len(), "{path}: metadata count");
    let (ot, tt) = (
        ours["tensors"].as_array().unwrap(),
        theirs["tensors"].as_array().unwrap(),
    );
    for (o, t) in ot.iter().zip(tt) {
        assert_eq!(o, t, "{path}: tensor");
    }
    assert_eq!(ot.len(), tt.len(), "{path}: tensor count");
    assert_eq!(ours, theirs, "{path}");
}

#[test]
fn gguf_py_files_parse_identically() {
    let dir = tempfile::tempdir().unwrap();
    let listed = oracle(&["write".as_ref(), dir.path().as_os_str()]);
    let paths: Vec<PathBuf> = listed.lines().map(PathBuf::from).collect();
    assert!(paths.len() >= 6, "oracle wrote {paths:?}");
    let mut args: Vec<&OsStr> = vec!["read".as_ref()];
    args.extend(paths.iter().map(|p| p.as_os_str()));
    let theirs: J = serde_json::from_str(&oracle(&args)).expect("oracle JSON");
    let theirs = theirs.as_array().unwrap();
    assert_eq!(theirs.len(), paths.len());

    let mut alignments = Vec::new();
    let mut types = std::collections::BTreeSet::new();
    let mut ndims = std::collections::BTreeSet::new();
    for (p, t) in paths.iter().zip(theirs) {
        let f = parse_file(p, &Caps::default()).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let bytes = std::fs::read(p).unwrap();
        assert_eq!(parse_bytes(&bytes, &Caps::default()).unwrap(), f);
        assert_same(&ours(&p.to_string_lossy(), &f), t);

        alignments.push(f.alignment);
        for ti in &f.tensors {
            types.insert(ti.ggml_type.name());
            ndims.insert(ti.dims.len());
            // Absolute offsets land inside the file, aligned.
            assert_eq!((ti.offset - f.data_offset) % f.alignment, 0);
            assert!(ti.end() <= f.file_size);
        }
    }
    // The oracle files cover what this test promises.
    for a in [1, 8, 32, 64, 1024, 4096] {
        assert!(
            alignments.contains(&a),
            "no file with alignment {a}: {alignments:?}"
        );
    }
    for t in ["F32", "F16", "Q8_0", "IQ2_XXS", "Q2_K", "Q4_K"] {
        assert!(types.contains(t), "no {t} tensor");
    }
    assert_eq!(ndims.into_iter().collect::<Vec<_>>(), vec![1, 2, 3, 4]);
}

#[test]
fn gguf_py_file_metadata_values_decode_as_written() {
    // Spot checks against the values the script wrote, independent of GGUFReader.
    let dir = tempfile::tempdir().unwrap();
    let listed = oracle(&["write".as_ref(), dir.path().as_os_str()]);
    let p = listed
        .lines()
        .find(|l| l.ends_with("oracle_a64.gguf"))
        .unwrap();
    let f = parse_file(p.as_ref(), &Caps::default()).unwrap();
    assert_eq!(
        f.get("general.architecture").and_then(Value::as_str),
        Some("oracle")
    );
    assert_eq!(f.get("t.u64"), Some(&Value::U64(u64::MAX)));
    assert_eq!(f.get("t.i64"), Some(&Value::I64(i64::MIN)));
    assert_eq!(f.get("t.f32"), Some(&Value::F32(0.1)));
    assert_eq!(f.get("t.f64"), Some(&Value::F64(1.0 / 3.0)));
    assert_eq!(f.get("t.false"), Some(&Value::Bool(false)));
    assert_eq!(
        f.get("t.str").and_then(Value::as_str),
        Some("déjà vu ✓ \0 nul inside")
    );
    let tokens = f
        .get("tokenizer.ggml.tokens")
        .and_then(Value::as_array)
        .unwrap();
    assert_eq!(tokens.len(), 3000);
    assert_eq!(tokens[2999].as_str(), Some("tok2999"));
    let n3 = f.get("t.nested3").unwrap();
    assert_eq!(
        n3,
        &Value::Array(vec![
            Value::Array(vec![
                Value::Array(vec![Value::F32(1.5)]),
                Value::Array(vec![Value::F32(2.5), Value::F32(3.5)])
            ]),
            Value::Array(vec![Value::Array(vec![Value::F32(4.5)])]),
        ])
    );
    let q = f.tensor("iq2_xxs.4d").unwrap();
    assert_eq!(
        (q.dims.as_slice(), q.nbytes),
        (&[256u64, 2, 1, 2][..], 4 * 66)
    );
}
