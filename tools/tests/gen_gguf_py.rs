//! `ds4 gen-model` files read back by gguf-py (the independent oracle): the same tensor table
//! (names, types, shapes, absolute offsets, sizes), the same metadata, the generator's bytes,
//! and blocks that gguf-py's dequantizers turn into finite, bounded values.

mod gen_util;

use ds4_stream::generate::{plan_layout, FillPlan, Generator, Scale, Shape, SPECIAL_TOKENS};
use ds4_stream::gguf::Value;
use gen_util::*;
use serde_json::Value as Json;

fn check_scale(scale: Scale, extra: &[&str], shape: Shape, dumps: &[&str], max_deq: u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let seed = 7u64;
    let mut args = vec!["--scale", scale.as_str(), "--seed", "7"];
    args.extend_from_slice(extra);
    gen_model(&path, &args);

    let dump = dir.path().join("dump");
    std::fs::create_dir(&dump).unwrap();
    let out = run_py(
        "gen_readback.py",
        &[
            path.to_str().unwrap(),
            dump.to_str().unwrap(),
            &dumps.join(","),
            &max_deq.to_string(),
        ],
    );
    let j: Json = serde_json::from_str(&out).unwrap();

    // Tensor table.
    let layout = plan_layout(&shape, seed, &FillPlan::full()).unwrap();
    assert_eq!(j["alignment"], 32);
    assert_eq!(j["data_offset"], layout.data_offset);
    let py = j["tensors"].as_array().unwrap();
    assert_eq!(py.len(), layout.tensors.len());
    for (p, t) in py.iter().zip(&layout.tensors) {
        assert_eq!(p["name"], t.name.as_str());
        assert_eq!(p["type"], t.ggml_type.name(), "{}", t.name);
        assert_eq!(p["shape"], serde_json::json!(t.dims), "{}", t.name);
        assert_eq!(p["offset"], t.offset, "{}", t.name);
        assert_eq!(p["nbytes"], t.nbytes, "{}", t.name);
    }
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        layout.total_len,
        "file length"
    );

    // Metadata: every key, with its type; a few values.
    let md = shape.metadata(seed, &FillPlan::full());
    let fields = j["fields"].as_object().unwrap();
    assert_eq!(fields.len(), md.len());
    for (k, v) in &md {
        let f = &fields[k.as_str()];
        let want_type = match v {
            Value::U32(_) => "UINT32",
            Value::U64(_) => "UINT64",
            Value::F32(_) => "FLOAT32",
            Value::Bool(_) => "BOOL",
            Value::String(_) => "STRING",
            Value::Array(_) => "ARRAY",
            other => panic!("unexpected type {other:?}"),
        };
        assert_eq!(f["types"][0], want_type, "{k}");
    }
    assert_eq!(fields["general.architecture"]["value"], "deepseek4");
    assert_eq!(
        fields["deepseek4.block_count"]["value"],
        u64::from(shape.n_layer)
    );
    assert_eq!(fields["deepseek4.expert_count"]["value"], shape.n_expert);
    assert_eq!(fields["deepseek4.expert_weights_scale"]["value"], 1.5);
    assert_eq!(fields["deepseek4.expert_weights_norm"]["value"], true);
    let ratios: Vec<u64> = (0..shape.n_layer)
        .map(|l| match l {
            0 | 1 => 0,
            l if l % 2 == 0 => 4,
            _ => 128,
        })
        .collect();
    assert_eq!(
        fields["deepseek4.attention.compress_ratios"]["value"],
        serde_json::json!(ratios)
    );
    assert_eq!(
        fields["deepseek4.attention.compress_ratios"]["types"],
        serde_json::json!(["ARRAY", "UINT32"])
    );
    assert_eq!(
        fields["tokenizer.ggml.tokens"]["value"]["count"],
        shape.vocab
    );
    // The DS4 C engine finds its special tokens by exact text: gguf-py decodes the same.
    assert_eq!(
        fields["tokenizer.ggml.tokens"]["value"]["first"],
        serde_json::json!(SPECIAL_TOKENS[..3])
    );
    assert_eq!(fields["ds4stream.gen.seed"]["value"], seed);

    // Bytes.
    let generator = Generator::new(&shape, seed).unwrap();
    for name in dumps {
        let got = std::fs::read(dump.join(format!("{name}.bin"))).unwrap();
        let mut want = vec![0u8; generator.tensor_len(name).unwrap() as usize];
        generator.tensor_bytes(name, 0, &mut want).unwrap();
        assert!(got == want, "bytes of {name} differ");
    }

    // Dequantized values.
    let deq = j["dequant"].as_object().unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for t in &layout.tensors {
        let Some(d) = deq.get(&t.name) else { continue };
        let ty = d["type"].as_str().unwrap();
        seen.insert(ty.to_string());
        assert_eq!(d["finite"], true, "{} has non-finite values", t.name);
        let max = d["max_abs"].as_f64().unwrap();
        let bound = if ty == "F32" { 1.2 } else { 0.5 };
        assert!(max < bound, "{}: max |w| {max} >= {bound}", t.name);
        assert!(
            d["mean_abs"].as_f64().unwrap() > 1e-4,
            "{} is ~all zeros",
            t.name
        );
    }
    for ty in [
        shape.gate_up_type.name(),
        shape.down_type.name(),
        "Q8_0",
        "F16",
        "F32",
    ] {
        assert!(
            seen.contains(ty),
            "no {ty} tensor was dequantized: {seen:?}"
        );
    }
}

#[test]
fn tiny_reads_back_in_gguf_py() {
    check_scale(
        Scale::Tiny,
        &[],
        Shape::tiny(),
        &[
            "token_embd.weight",
            "output.weight",
            "blk.0.ffn_gate_tid2eid.weight",
            "blk.1.ffn_gate_exps.weight",
            "blk.3.ffn_down_exps.weight",
            "blk.3.exp_probs_b.bias",
            "blk.2.indexer.attn_q_b.weight",
            "output_norm.weight",
        ],
        1 << 30,
    );
}

#[test]
fn tiny_q4k_reads_back_in_gguf_py() {
    check_scale(
        Scale::Tiny,
        &["--quant", "q4"],
        Shape::tiny().with_q4k(),
        &["blk.3.ffn_up_exps.weight", "blk.0.ffn_down_exps.weight"],
        1 << 30,
    );
}

#[test]
fn demo_reads_back_in_gguf_py() {
    check_scale(
        Scale::Demo,
        &[],
        Shape::demo(),
        &[
            "token_embd.weight",
            "blk.9.ffn_gate_exps.weight",
            "blk.4.ffn_down_exps.weight",
            "blk.2.ffn_gate_tid2eid.weight",
            "blk.7.attn_q_b.weight",
        ],
        256 << 10,
    );
}
