//! The model map on files written by gguf-py's own GGUFWriter (not by our writer): a tiny
//! DS4-layout file at several alignments parses, validates, and every expert slice matches the
//! offsets gguf-py reports; `ds4 cat --expert` returns the bytes gguf-py wrote there.

mod gen_util;

use ds4_stream::generate::{FillPlan, Shape};
use ds4_stream::gguf::{self, Caps, Value};
use ds4_stream::model::{Ds4Model, ExpertKind};
use gen_util::*;
use serde_json::{json, Value as Json};

fn meta_json(k: &str, v: &Value) -> Json {
    let (ty, val) = match v {
        Value::U32(x) => ("u32".to_string(), json!(x)),
        Value::U64(x) => ("u64".to_string(), json!(x)),
        Value::F32(x) => ("f32".to_string(), json!(x)),
        Value::Bool(x) => ("bool".to_string(), json!(x)),
        Value::String(x) => ("str".to_string(), json!(x)),
        Value::Array(items) => {
            let inner: Vec<Json> = items.iter().map(|i| meta_json(k, i)).collect();
            let elem = inner[0][1].as_str().unwrap().to_string();
            (
                format!("arr:{elem}"),
                inner.iter().map(|i| i[2].clone()).collect(),
            )
        }
        other => panic!("{k}: no mapping for {other:?}"),
    };
    json!([k, ty, val])
}

#[test]
fn gguf_py_written_ds4_files_map_correctly() {
    let shape = Shape::tiny();
    let metadata: Vec<Json> = shape
        .metadata(0, &FillPlan::full())
        .iter()
        .filter(|(k, _)| k != "general.architecture" && k != "general.alignment")
        .map(|(k, v)| meta_json(k, v))
        .collect();
    let tensors: Vec<Json> = shape
        .inventory()
        .iter()
        .map(|t| json!([t.name, t.ggml_type.name(), t.dims]))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.json");
    std::fs::write(
        &spec,
        serde_json::to_vec(&json!({"metadata": metadata, "tensors": tensors})).unwrap(),
    )
    .unwrap();

    for (alignment, layer, kind, expert) in [
        (32u64, 3u32, ExpertKind::Down, 15u64),
        (64, 0, ExpertKind::Gate, 3),
        (4096, 2, ExpertKind::Up, 9),
    ] {
        let path = dir.path().join(format!("py-{alignment}.gguf"));
        let dump = dir.path().join(format!("expert-{alignment}.bin"));
        let name = kind.tensor_name(layer);
        let out = run_py(
            "model_write_ds4.py",
            &[
                spec.to_str().unwrap(),
                path.to_str().unwrap(),
                &alignment.to_string(),
                &name,
                &expert.to_string(),
                dump.to_str().unwrap(),
            ],
        );
        let j: Json = serde_json::from_str(&out).unwrap();
        assert_eq!(j["alignment"], alignment);

        let f = gguf::parse_file(&path, &Caps::default()).unwrap();
        assert_eq!(f.alignment, alignment);
        let m = Ds4Model::from_gguf(&f).unwrap();
        assert_eq!(m.layers.len(), 6);
        let py: std::collections::HashMap<&str, &Json> = j["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["name"].as_str().unwrap(), t))
            .collect();
        assert_eq!(py.len(), f.tensors.len());
        for l in &m.layers {
            for k in ExpertKind::ALL {
                let r = l.routed(k);
                let p = py[r.tensor.name.as_str()];
                assert_eq!(p["offset"], r.tensor.offset);
                assert_eq!(p["offset"].as_u64().unwrap() % alignment, 0);
                let eb = p["nbytes"].as_u64().unwrap() / 16;
                assert_eq!(r.expert_bytes, eb);
                for e in 0..16 {
                    let s = r.slice(e).unwrap();
                    assert_eq!(s.offset, p["offset"].as_u64().unwrap() + e * eb);
                }
            }
        }
        let resident: u64 = f
            .tensors
            .iter()
            .filter(|t| ExpertKind::parse_tensor_name(&t.name).is_none())
            .map(|t| py[t.name.as_str()]["nbytes"].as_u64().unwrap())
            .sum();
        assert_eq!(m.resident_bytes, resident);

        let o = run_ds4(&[
            "cat",
            path.to_str().unwrap(),
            &name,
            "--expert",
            &expert.to_string(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let want = std::fs::read(&dump).unwrap();
        assert_eq!(
            want.len() as u64,
            m.layers[layer as usize].routed(kind).expert_bytes
        );
        assert!(
            o.stdout == want,
            "{name} expert {expert} at alignment {alignment}"
        );
    }
}
