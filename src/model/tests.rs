use super::*;
use crate::generate::{plan_layout, Shape};
use crate::gguf::Value;

fn file_for(shape: &Shape) -> GgufFile {
    plan_layout(shape, 0, &crate::generate::FillPlan::full())
        .unwrap()
        .expected_file()
}

fn tensor_mut<'a>(f: &'a mut GgufFile, name: &str) -> &'a mut TensorInfo {
    f.tensors.iter_mut().find(|t| t.name == name).unwrap()
}

/// Changes a tensor's type and dims, keeping nbytes consistent.
fn retype(f: &mut GgufFile, name: &str, ty: GgmlType, dims: &[u64]) {
    let t = tensor_mut(f, name);
    t.ggml_type = ty;
    t.dims = dims.to_vec();
    t.nbytes = ty.bytes_for(dims.iter().product()).unwrap();
}

fn set_key(f: &mut GgufFile, key: &str, v: Value) {
    match f.metadata.iter_mut().find(|(k, _)| k == key) {
        Some((_, old)) => *old = v,
        None => f.metadata.push((key.to_string(), v)),
    }
}

fn err(f: &GgufFile) -> ModelError {
    Ds4Model::from_gguf(f).unwrap_err()
}

#[test]
fn flash_map_matches_the_formula() {
    let f = file_for(&Shape::flash());
    let m = Ds4Model::from_gguf(&f).unwrap();
    assert_eq!(m.shape.n_layer, 43);
    assert_eq!(m.shape.n_hash_layer, 3);
    assert_eq!(m.shape.n_expert, 256);
    assert_eq!(m.routed_bytes, 77_913_391_104);
    assert_eq!(m.resident_bytes, 8_801_384_796);
    assert_eq!(m.resident.len(), f.tensors.len() - 3 * 43);
    assert_eq!(m.n_routed_experts(), 11_008);
    let mut past_4g = 0;
    for l in &m.layers {
        assert_eq!(l.gate.expert_bytes, 2_162_688);
        assert_eq!(l.up.expert_bytes, 2_162_688);
        assert_eq!(l.down.expert_bytes, 2_752_512);
        assert_eq!(l.expert_bytes(), 7_077_888);
        assert_eq!(l.hash, l.index < 3);
        assert_eq!(l.tid2eid.is_some(), l.hash);
        assert_eq!(l.probs_bias.is_some(), !l.hash);
        assert!(l.shared.is_some());
        for kind in ExpertKind::ALL {
            let t = f.tensor(&kind.tensor_name(l.index)).unwrap();
            for e in 0..256 {
                let s = m.expert_slice(l.index.into(), kind, e).unwrap();
                assert_eq!(s.offset, t.offset + e * l.routed(kind).expert_bytes);
                assert_eq!(s.len, l.routed(kind).expert_bytes);
                if s.offset > 1 << 32 {
                    past_4g += 1;
                }
            }
            let last = m.expert_slice(l.index.into(), kind, 255).unwrap();
            assert_eq!(last.offset + last.len, t.offset + t.nbytes);
        }
    }
    assert!(past_4g > 30_000, "{past_4g}");
    assert!(matches!(
        m.expert_slice(43, ExpertKind::Gate, 0),
        Err(ModelError::NoSuchLayer { layer: 43, .. })
    ));
    assert!(matches!(
        m.expert_slice(0, ExpertKind::Down, 256),
        Err(ModelError::NoSuchExpert { expert: 256, .. })
    ));
    assert!(m
        .routed_tensor("blk.42.ffn_down_exps.weight")
        .is_some_and(|r| r.kind == ExpertKind::Down));
    assert!(m.routed_tensor("blk.42.ffn_down_shexp.weight").is_none());
    let text = m.summary_text();
    assert!(
        text.contains("43 layers (3 hash), 256 experts per layer"),
        "{text}"
    );
    assert!(
        text.contains("= 7,077,888 B (6.75 MiB) per expert"),
        "{text}"
    );
    assert!(
        text.contains("11,008 experts, 77,913,391,104 B (72.56 GiB)"),
        "{text}"
    );
}

#[test]
fn small_shapes_and_q4k_are_accepted() {
    for shape in [Shape::tiny(), Shape::demo(), Shape::tiny().with_q4k()] {
        let m = Ds4Model::from_gguf(&file_for(&shape)).unwrap();
        assert_eq!(m.layers.len() as u32, shape.n_layer);
        assert_eq!(m.shape.n_expert, shape.n_expert);
        assert_eq!(m.shape.expert_ff, shape.expert_ff);
    }
}

#[test]
fn mixed_layer_types_are_reported_per_layer() {
    let mut f = file_for(&Shape::tiny());
    retype(
        &mut f,
        "blk.3.ffn_down_exps.weight",
        GgmlType::Q4_K,
        &[256, 256, 16],
    );
    let m = Ds4Model::from_gguf(&f).unwrap();
    assert!(!m.is_uniform());
    assert!(m.summary_text().contains("layer 3: "));
    assert_eq!(m.layers[3].down.expert_bytes, 144 * 256);
}

#[test]
fn rejects_metadata_errors() {
    let base = file_for(&Shape::tiny());

    let mut f = base.clone();
    set_key(
        &mut f,
        "general.architecture",
        Value::String("llama".into()),
    );
    assert!(matches!(err(&f), ModelError::WrongArch { .. }));

    let mut f = base.clone();
    f.metadata.retain(|(k, _)| k != "general.architecture");
    assert!(matches!(err(&f), ModelError::MissingKey { key } if key == "general.architecture"));

    let mut f = base.clone();
    f.metadata.retain(|(k, _)| k != "deepseek4.expert_count");
    let e = err(&f);
    assert!(matches!(&e, ModelError::MissingKey { key } if key == "deepseek4.expert_count"));
    assert_eq!(
        e.to_string(),
        "metadata key deepseek4.expert_count is missing"
    );

    let mut f = base.clone();
    set_key(&mut f, "deepseek4.block_count", Value::F32(4.0));
    let e = err(&f);
    assert!(matches!(e, ModelError::KeyType { .. }), "{e}");
    assert!(
        e.to_string().contains("deepseek4.block_count is FLOAT32"),
        "{e}"
    );

    let mut f = base.clone();
    set_key(
        &mut f,
        "deepseek4.embedding_length",
        Value::String("256".into()),
    );
    assert!(matches!(err(&f), ModelError::KeyType { .. }));

    let mut f = base.clone();
    set_key(&mut f, "deepseek4.vocab_size", Value::I32(-1));
    assert!(err(&f).to_string().contains("negative"));

    let mut f = base.clone();
    set_key(&mut f, "deepseek4.expert_used_count", Value::U32(17));
    assert!(err(&f).to_string().contains("exceeds expert_count 16"));

    let mut f = base.clone();
    set_key(&mut f, "deepseek4.block_count", Value::U64(1 << 40));
    assert!(err(&f).to_string().contains("exceeds the cap"));

    let mut f = base.clone();
    set_key(&mut f, "deepseek4.expert_count", Value::U32(0));
    assert!(matches!(err(&f), ModelError::BadValue { .. }));

    let mut f = base.clone();
    set_key(&mut f, "deepseek4.hash_layer_count", Value::U32(7));
    assert!(err(&f).to_string().contains("exceeds block_count 6"));
}

#[test]
fn rejects_missing_duplicate_and_stray_tensors() {
    let base = file_for(&Shape::tiny());

    let mut f = base.clone();
    f.tensors.retain(|t| t.name != "blk.1.ffn_up_exps.weight");
    assert_eq!(
        err(&f),
        ModelError::MissingTensor {
            name: "blk.1.ffn_up_exps.weight".into()
        }
    );

    for name in [
        "blk.0.ffn_gate_tid2eid.weight",
        "blk.3.ffn_gate_inp.weight",
        "blk.2.ffn_down_shexp.weight",
    ] {
        let mut f = base.clone();
        f.tensors.retain(|t| t.name != name);
        assert_eq!(err(&f), ModelError::MissingTensor { name: name.into() });
    }

    // The selection bias is optional.
    let mut f = base.clone();
    f.tensors.retain(|t| t.name != "blk.3.exp_probs_b.bias");
    assert!(Ds4Model::from_gguf(&f).unwrap().layers[3]
        .probs_bias
        .is_none());

    let mut f = base.clone();
    let dup = f.tensors[0].clone();
    f.tensors.push(dup);
    assert!(matches!(err(&f), ModelError::DuplicateTensor { .. }));

    let mut f = base.clone();
    tensor_mut(&mut f, "output_norm.weight").name = "blk.6.ffn_gate_exps.weight".into();
    let e = err(&f);
    assert!(
        matches!(
            e,
            ModelError::StrayTensor {
                layer: 6,
                n_layer: 6,
                ..
            }
        ),
        "{e}"
    );

    // A non-routed tensor of a layer past block_count is kept as resident.
    let mut f = base.clone();
    tensor_mut(&mut f, "output_norm.weight").name = "blk.6.attn_norm.weight".into();
    let m = Ds4Model::from_gguf(&f).unwrap();
    assert!(m
        .resident
        .iter()
        .any(|t| t.name == "blk.6.attn_norm.weight"));
    assert_eq!(
        m.resident_bytes,
        Ds4Model::from_gguf(&base).unwrap().resident_bytes
    );
}

#[test]
fn rejects_bad_routed_tensors() {
    let base = file_for(&Shape::tiny());
    let g = "blk.2.ffn_gate_exps.weight";

    // Not 3-D.
    let mut f = base.clone();
    retype(&mut f, g, GgmlType::IQ2_XXS, &[256, 256 * 16]);
    let e = err(&f);
    assert!(
        matches!(&e, ModelError::BadShape { name, .. } if name == g),
        "{e}"
    );

    // Expert not outermost.
    let mut f = base.clone();
    retype(&mut f, g, GgmlType::IQ2_XXS, &[256, 16, 256]);
    assert!(matches!(err(&f), ModelError::BadShape { .. }));

    // Down with gate's dims (inconsistent with FF / embedding): use a shape where they differ.
    let mut f = file_for(&Shape::demo());
    retype(
        &mut f,
        "blk.5.ffn_down_exps.weight",
        GgmlType::Q2_K,
        &[1024, 512, 128],
    );
    let e = err(&f);
    assert!(e.to_string().contains("expected [512, 1024, 128]"), "{e}");

    // Wrong routed type.
    let mut f = base.clone();
    retype(&mut f, g, GgmlType::Q8_0, &[256, 256, 16]);
    assert!(matches!(
        err(&f),
        ModelError::RoutedType {
            found: GgmlType::Q8_0,
            ..
        }
    ));

    // Gate and up differ.
    let mut f = base.clone();
    retype(&mut f, g, GgmlType::Q4_K, &[256, 256, 16]);
    assert_eq!(
        err(&f),
        ModelError::GateUpMismatch {
            layer: 2,
            gate: GgmlType::Q4_K,
            up: GgmlType::IQ2_XXS
        }
    );

    // nbytes in the table disagrees with type and dims.
    let mut f = base.clone();
    tensor_mut(&mut f, g).nbytes -= 66;
    assert!(matches!(err(&f), ModelError::SizeMismatch { .. }));

    // A row that is not whole blocks.
    let mut f = base.clone();
    let t = tensor_mut(&mut f, "output.weight");
    t.dims = vec![33, 1];
    assert!(matches!(err(&f), ModelError::PartialBlock { dim0: 33, .. }));

    // Offsets that overflow.
    let mut f = base.clone();
    tensor_mut(&mut f, g).offset = u64::MAX - 10;
    assert!(matches!(err(&f), ModelError::Overflow { .. }));
}

#[test]
fn rejects_bad_router_bias_tid2eid_shared() {
    let base = file_for(&Shape::tiny());

    let mut f = base.clone();
    retype(
        &mut f,
        "blk.0.ffn_gate_tid2eid.weight",
        GgmlType::F32,
        &[6, 512],
    );
    assert!(matches!(
        err(&f),
        ModelError::WrongType {
            expected: "I32",
            ..
        }
    ));

    let mut f = base.clone();
    retype(
        &mut f,
        "blk.0.ffn_gate_tid2eid.weight",
        GgmlType::I32,
        &[512, 6],
    );
    let e = err(&f);
    assert!(
        e.to_string().contains("expert_used_count, vocab_size"),
        "{e}"
    );

    let mut f = base.clone();
    retype(&mut f, "blk.3.exp_probs_b.bias", GgmlType::F16, &[16]);
    assert!(matches!(
        err(&f),
        ModelError::WrongType {
            expected: "F32",
            ..
        }
    ));

    let mut f = base.clone();
    retype(&mut f, "blk.3.exp_probs_b.bias", GgmlType::F32, &[15]);
    assert!(matches!(err(&f), ModelError::BadShape { .. }));

    let mut f = base.clone();
    retype(
        &mut f,
        "blk.1.ffn_gate_inp.weight",
        GgmlType::Q8_0,
        &[256, 16],
    );
    assert!(matches!(err(&f), ModelError::WrongType { .. }));

    let mut f = base.clone();
    retype(
        &mut f,
        "blk.1.ffn_gate_inp.weight",
        GgmlType::F16,
        &[256, 8],
    );
    assert!(matches!(err(&f), ModelError::BadShape { .. }));

    let mut f = base.clone();
    retype(
        &mut f,
        "blk.1.ffn_down_shexp.weight",
        GgmlType::Q8_0,
        &[256, 128],
    );
    assert!(matches!(err(&f), ModelError::BadShape { .. }));

    let mut f = base.clone();
    retype(
        &mut f,
        "blk.1.ffn_up_shexp.weight",
        GgmlType::Q8_0,
        &[256 * 256],
    );
    assert!(matches!(err(&f), ModelError::BadShape { .. }));
}

#[test]
fn parses_routed_names() {
    assert_eq!(
        ExpertKind::parse_tensor_name("blk.42.ffn_up_exps.weight"),
        Some((42, ExpertKind::Up))
    );
    assert_eq!(
        ExpertKind::parse_tensor_name("blk.x.ffn_up_exps.weight"),
        None
    );
    assert_eq!(
        ExpertKind::parse_tensor_name("blk..ffn_up_exps.weight"),
        None
    );
    assert_eq!(
        ExpertKind::parse_tensor_name("blk.1.ffn_up_exps.bias"),
        None
    );
    assert_eq!(
        ExpertKind::parse_tensor_name("blk.99999999999.ffn_up_exps.weight"),
        None
    );
    assert_eq!(
        split_layer("blk.7.attn_norm.weight"),
        Some((7, "attn_norm.weight"))
    );
    for k in ExpertKind::ALL {
        assert_eq!(
            ExpertKind::parse_tensor_name(&k.tensor_name(3)),
            Some((3, k))
        );
    }
}

#[test]
fn open_reads_a_written_file_and_names_the_path_on_errors() {
    use crate::generate::{write_file, Options};
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny.gguf");
    write_file(&p, &Options::default(), &mut |_| {}).unwrap();
    let (file, model) = Ds4Model::open(&p).unwrap();
    assert_eq!(model, Ds4Model::from_gguf(&file).unwrap());
    assert_eq!(model.layers.len() as u32, Shape::tiny().n_layer);

    let missing = dir.path().join("missing.gguf");
    let e = Ds4Model::open(&missing).unwrap_err();
    assert!(e.is_bad_input() && e.path() == missing, "{e:?}");
    assert!(e.to_string().contains("missing.gguf"), "{e}");

    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"not a gguf file at all").unwrap();
    let e = Ds4Model::open(&junk).unwrap_err();
    assert!(
        matches!(e, ModelOpenError::Header { .. }) && e.is_bad_input(),
        "{e:?}"
    );
    assert_eq!(e.path(), junk);
}
