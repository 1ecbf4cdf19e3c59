use super::*;
use std::io::Cursor;

fn write_tiny(plan: &FillPlan, seed: u64) -> (Vec<u8>, GenSummary, Generator) {
    let generator = Generator::new(&Shape::tiny(), seed).unwrap();
    let (out, s) =
        write_model(Cursor::new(Vec::new()), &generator, plan, 4096, &mut |_| {}).unwrap();
    (out.into_inner(), s, generator)
}

#[test]
fn tiny_file_holds_generator_bytes_at_planned_offsets() {
    let (file, s, generator) = write_tiny(&FillPlan::full(), 42);
    let layout = plan_layout(&Shape::tiny(), 42, &FillPlan::full()).unwrap();
    assert_eq!(file.len() as u64, layout.total_len);
    assert_eq!(s.file_len, layout.total_len);
    assert_eq!(s.hole_bytes, 0);
    assert_eq!(s.written_bytes, layout.tensor_bytes());
    assert!(
        s.file_len > (2 << 20) && s.file_len < (12 << 20),
        "{}",
        s.file_len
    );
    assert_eq!(&file[..layout.header_bytes().len()], layout.header_bytes());
    for t in &layout.tensors {
        let mut want = vec![0u8; t.nbytes as usize];
        generator.tensor_bytes(&t.name, 0, &mut want).unwrap();
        let at = t.offset as usize;
        assert_eq!(&file[at..at + want.len()], &want[..], "{}", t.name);
        assert!(want.iter().any(|&b| b != 0), "{} is all zeros", t.name);
    }
}

#[test]
fn any_subrange_matches_the_whole_tensor() {
    let generator = Generator::new(&Shape::tiny(), 3).unwrap();
    for name in [
        "blk.1.ffn_gate_exps.weight",
        "blk.3.ffn_down_exps.weight",
        "output.weight",
        "token_embd.weight",
        "blk.0.ffn_gate_tid2eid.weight",
        "blk.2.attn_norm.weight",
    ] {
        let n = generator.tensor_len(name).unwrap() as usize;
        let mut whole = vec![0u8; n];
        generator.tensor_bytes(name, 0, &mut whole).unwrap();
        let mut h = 12345u64;
        for _ in 0..50 {
            h = mix64(h);
            let start = (h % n as u64) as usize;
            let len = (mix64(h) % 300).min((n - start) as u64) as usize;
            let mut part = vec![0u8; len];
            generator
                .tensor_bytes(name, start as u64, &mut part)
                .unwrap();
            assert_eq!(
                &part[..],
                &whole[start..start + len],
                "{name} {start}+{len}"
            );
        }
    }
    assert!(matches!(
        generator.tensor_bytes("nope", 0, &mut [0u8; 1]),
        Err(GenError::UnknownTensor { .. })
    ));
    let n = generator.tensor_len("output.weight").unwrap();
    assert!(matches!(
        generator.tensor_bytes("output.weight", n - 1, &mut [0u8; 2]),
        Err(GenError::Range { .. })
    ));
    assert!(generator
        .tensor_bytes("output.weight", u64::MAX, &mut [0u8; 2])
        .is_err());
}

#[test]
fn seeds_change_bytes() {
    let a = Generator::new(&Shape::tiny(), 1).unwrap();
    let b = Generator::new(&Shape::tiny(), 2).unwrap();
    let (mut x, mut y) = ([0u8; 256], [0u8; 256]);
    a.tensor_bytes("blk.0.ffn_up_exps.weight", 0, &mut x)
        .unwrap();
    b.tensor_bytes("blk.0.ffn_up_exps.weight", 0, &mut y)
        .unwrap();
    assert_ne!(x, y);
}

#[test]
fn holes_and_partial_experts_match_file_bytes() {
    let plan = FillPlan {
        holes: Holes::All,
        fill_layers: vec![3],
        fill_experts: Some(vec![1, 5, 15]),
    };
    let (file, s, generator) = write_tiny(&plan, 9);
    let layout = plan_layout(&Shape::tiny(), 9, &plan).unwrap();
    assert_eq!(file.len() as u64, layout.total_len);
    let eb: u64 = ExpertKind::ALL
        .iter()
        .map(|&k| generator.expert_bytes(k))
        .sum();
    // The hash layers' tid2eid tables are written under `holes=all` too (routing needs them).
    let tid2eid: u64 = layout
        .tensors
        .iter()
        .filter(|t| t.name.ends_with("ffn_gate_tid2eid.weight"))
        .map(|t| t.nbytes)
        .sum();
    assert!(tid2eid > 0);
    assert_eq!(s.written_bytes, 3 * eb + tid2eid);
    for t in &layout.tensors {
        let mut want = vec![0u8; t.nbytes as usize];
        plan.file_bytes(&generator, &t.name, 0, &mut want).unwrap();
        let at = t.offset as usize;
        assert_eq!(&file[at..at + want.len()], &want[..], "{}", t.name);
    }
    // Expert 5 of layer 3 is real data; expert 4 and every resident tensor are zeros.
    let down = layout.tensors[layout.index_of("blk.3.ffn_down_exps.weight").unwrap()].clone();
    let deb = generator.expert_bytes(ExpertKind::Down);
    let e5 = &file[(down.offset + 5 * deb) as usize..][..deb as usize];
    let e4 = &file[(down.offset + 4 * deb) as usize..][..deb as usize];
    assert!(e5.iter().any(|&b| b != 0));
    assert!(e4.iter().all(|&b| b == 0));
    let out = &layout.tensors[layout.index_of("output.weight").unwrap()];
    assert!(file[out.offset as usize..][..out.nbytes as usize]
        .iter()
        .all(|&b| b == 0));
    assert_eq!(
        plan.region("blk.2.ffn_up_exps.weight"),
        Region::Hole,
        "layer 2 is not filled"
    );
}

#[test]
fn bad_fill_lists_are_rejected() {
    let generator = Generator::new(&Shape::tiny(), 0).unwrap();
    let plan = FillPlan {
        holes: Holes::Experts,
        fill_layers: vec![6],
        fill_experts: None,
    };
    let e = write_model(
        Cursor::new(Vec::new()),
        &generator,
        &plan,
        4096,
        &mut |_| {},
    )
    .unwrap_err();
    assert!(e.to_string().contains("fill layer 6 does not exist"), "{e}");
    let plan = FillPlan {
        holes: Holes::Experts,
        fill_layers: vec![0],
        fill_experts: Some(vec![16]),
    };
    let e = write_model(
        Cursor::new(Vec::new()),
        &generator,
        &plan,
        4096,
        &mut |_| {},
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("fill expert 16 does not exist"),
        "{e}"
    );
}

#[test]
fn parse_lists() {
    assert_eq!(parse_list("41,42").unwrap(), vec![41, 42]);
    assert_eq!(parse_list("5-7, 1,6").unwrap(), vec![1, 5, 6, 7]);
    assert!(parse_list("").is_err());
    assert!(parse_list("7-5").is_err());
    assert!(parse_list("x").is_err());
    assert!(parse_list("0-18446744073709551615").is_err());
}

/// The Flash inventory reproduces the numbers of DS4_TENSORS.md / DS4_FACTS.md.
#[test]
fn flash_inventory_matches_the_published_numbers() {
    let shape = Shape::flash();
    let inv = shape.inventory();
    let mut routed = 0u64;
    let mut by_type = std::collections::BTreeMap::new();
    for t in &inv {
        let n = t.nbytes().unwrap();
        if ExpertKind::parse_tensor_name(&t.name).is_some() {
            routed += n;
        } else {
            *by_type.entry(t.ggml_type.name()).or_insert(0u64) += n;
        }
    }
    let resident: u64 = by_type.values().sum();
    assert_eq!(routed, 77_913_391_104); // 43 * 256 * 7,077,888 = 72.5625 GiB
    assert_eq!(routed, 43 * 256 * 7_077_888);
    assert_eq!(resident, 8_801_384_796); // 8.197 GiB
    let gib = |n: u64| n as f64 / (1u64 << 30) as f64;
    assert_eq!(format!("{:.3}", gib(resident)), "8.197");
    assert_eq!(format!("{:.3}", gib(by_type["F16"])), "2.041");
    assert_eq!(format!("{:.3}", gib(by_type["Q8_0"])), "6.146");
    assert_eq!(format!("{:.3}", gib(by_type["I32"])), "0.009");
    assert_eq!(format!("{:.3}", gib(by_type["F32"])), "0.002");
    assert_eq!(format!("{:.3}", gib(routed + resident)), "80.759");
    let generator = Generator::new(&shape, 0).unwrap();
    assert_eq!(generator.expert_bytes(ExpertKind::Gate), 2_162_688);
    assert_eq!(generator.expert_bytes(ExpertKind::Up), 2_162_688);
    assert_eq!(generator.expert_bytes(ExpertKind::Down), 2_752_512);
    assert_eq!(
        Generator::new(&Shape::flash().with_q4k(), 0)
            .unwrap()
            .expert_bytes(ExpertKind::Gate)
            * 3,
        14_155_776 // 13.5 MiB per expert
    );
    let layout = plan_layout(&shape, 0, &FillPlan::full()).unwrap();
    assert_eq!(layout.tensors.len(), inv.len());
    assert_eq!(layout.alignment, 32);
    assert!(layout.total_len > 86_000_000_000 && layout.total_len < 86_800_000_000);
}

#[test]
fn demo_is_big_enough_to_stream() {
    let s = Shape::demo();
    let generator = Generator::new(&s, 0).unwrap();
    let eb: u64 = ExpertKind::ALL
        .iter()
        .map(|&k| generator.expert_bytes(k))
        .sum();
    let experts = eb * s.n_expert * u64::from(s.n_layer);
    assert!(experts > 300 << 20 && experts < 1 << 30, "{experts}");
}

#[test]
fn fill_spec_round_trips() {
    for plan in [
        FillPlan::full(),
        FillPlan::with_holes(Holes::Experts),
        FillPlan {
            holes: Holes::All,
            fill_layers: vec![0, 1, 2, 5, 7, 8],
            fill_experts: Some(vec![3]),
        },
        FillPlan {
            holes: Holes::Experts,
            fill_layers: vec![],
            fill_experts: Some((0..256).collect()),
        },
    ] {
        let spec = plan.spec();
        assert_eq!(FillPlan::from_spec(&spec).unwrap(), plan, "{spec}");
    }
    assert_eq!(
        FillPlan {
            holes: Holes::All,
            fill_layers: vec![0, 1, 2, 5, 7, 8],
            fill_experts: Some((0..256).collect()),
        }
        .spec(),
        "holes=all;layers=0-2,5,7-8;experts=0-255"
    );
    for bad in [
        "",
        "holes=maybe;layers=",
        "layers=1",
        "holes=all;layers=x",
        "holes=all;x=1",
    ] {
        assert!(FillPlan::from_spec(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn metadata_records_the_fill_plan() {
    let plan = FillPlan::with_holes(Holes::Experts);
    let md = Shape::tiny().metadata(3, &plan);
    let v = md.iter().find(|(k, _)| k == FILL_KEY).map(|(_, v)| v);
    assert_eq!(v.and_then(|v| v.as_str()), Some("holes=experts;layers="));
    // The plan is part of the header, so it moves the data section.
    let a = plan_layout(&Shape::tiny(), 3, &FillPlan::full()).unwrap();
    let b = plan_layout(&Shape::tiny(), 3, &plan).unwrap();
    assert_eq!(
        a.header_bytes().len() + "experts".len() - "none".len(),
        b.header_bytes().len()
    );
}

/// The Flash inventory, tensor by tensor, against DS4_TENSORS.md transcribed here with the
/// Flash constants substituted by hand (so a swapped pair of dims, which keeps every byte
/// total above intact, still fails): name, type, GGUF dims, and each `when` condition.
#[test]
fn flash_inventory_is_the_published_table() {
    use crate::gguf::GgmlType::{F16, F32, I32, IQ2_XXS, Q2_K, Q8_0};
    let mut want: std::collections::BTreeMap<String, (GgmlType, Vec<u64>)> = [
        ("token_embd.weight", F16, vec![4096, 129_280]),
        ("output_hc_base.weight", F32, vec![4]),
        ("output_hc_fn.weight", F16, vec![16_384, 4]),
        ("output_hc_scale.weight", F32, vec![1]),
        ("output_norm.weight", F32, vec![4096]),
        ("output.weight", Q8_0, vec![4096, 129_280]),
    ]
    .into_iter()
    .map(|(n, t, d)| (n.to_string(), (t, d)))
    .collect();
    for l in 0..43u32 {
        let r: u64 = if l < 2 {
            0
        } else if l % 2 == 0 {
            4
        } else {
            128
        };
        let mut rows: Vec<(&str, GgmlType, Vec<u64>)> = vec![
            ("hc_attn_fn.weight", F16, vec![16_384, 24]),
            ("hc_attn_scale.weight", F32, vec![3]),
            ("hc_attn_base.weight", F32, vec![24]),
            ("attn_norm.weight", F32, vec![4096]),
            ("attn_q_a.weight", Q8_0, vec![4096, 1024]),
            ("attn_q_a_norm.weight", F32, vec![1024]),
            ("attn_q_b.weight", Q8_0, vec![1024, 32_768]),
            ("attn_kv.weight", Q8_0, vec![4096, 512]),
            ("attn_kv_a_norm.weight", F32, vec![512]),
            ("attn_sinks.weight", F32, vec![64]),
            ("attn_output_a.weight", Q8_0, vec![4096, 8192]),
            ("attn_output_b.weight", Q8_0, vec![8192, 4096]),
            ("hc_ffn_fn.weight", F16, vec![16_384, 24]),
            ("hc_ffn_scale.weight", F32, vec![3]),
            ("hc_ffn_base.weight", F32, vec![24]),
            ("ffn_norm.weight", F32, vec![4096]),
            ("ffn_gate_inp.weight", F16, vec![4096, 256]),
            ("ffn_gate_exps.weight", IQ2_XXS, vec![4096, 2048, 256]),
            ("ffn_up_exps.weight", IQ2_XXS, vec![4096, 2048, 256]),
            ("ffn_down_exps.weight", Q2_K, vec![2048, 4096, 256]),
            ("ffn_gate_shexp.weight", Q8_0, vec![4096, 2048]),
            ("ffn_up_shexp.weight", Q8_0, vec![4096, 2048]),
            ("ffn_down_shexp.weight", Q8_0, vec![2048, 4096]),
        ];
        if r == 4 {
            rows.extend([
                ("attn_compressor_ape.weight", F16, vec![1024, 4]),
                ("attn_compressor_kv.weight", F16, vec![4096, 1024]),
                ("attn_compressor_gate.weight", F16, vec![4096, 1024]),
                ("attn_compressor_norm.weight", F32, vec![512]),
                ("indexer.attn_q_b.weight", F16, vec![1024, 8192]),
                ("indexer.proj.weight", F16, vec![4096, 64]),
                ("indexer_compressor_ape.weight", F16, vec![256, 4]),
                ("indexer_compressor_kv.weight", F16, vec![4096, 256]),
                ("indexer_compressor_gate.weight", F16, vec![4096, 256]),
                ("indexer_compressor_norm.weight", F32, vec![128]),
            ]);
        }
        if r == 128 {
            rows.extend([
                ("attn_compressor_ape.weight", F16, vec![512, 128]),
                ("attn_compressor_kv.weight", F16, vec![4096, 512]),
                ("attn_compressor_gate.weight", F16, vec![4096, 512]),
                ("attn_compressor_norm.weight", F32, vec![512]),
            ]);
        }
        if l < 3 {
            rows.push(("ffn_gate_tid2eid.weight", I32, vec![6, 129_280]));
        } else {
            // "optional" in the table; the generator writes the selection bias where the
            // router selects (not on the hash layers, whose experts come from tid2eid).
            rows.push(("exp_probs_b.bias", F32, vec![256]));
        }
        for (n, t, d) in rows {
            assert!(want.insert(format!("blk.{l}.{n}"), (t, d)).is_none());
        }
    }
    let inv = Shape::flash().inventory();
    let got: std::collections::BTreeMap<String, (GgmlType, Vec<u64>)> = inv
        .iter()
        .map(|t| (t.name.clone(), (t.ggml_type, t.dims.clone())))
        .collect();
    assert_eq!(got.len(), inv.len(), "duplicate names");
    for (name, w) in &want {
        assert_eq!(got.get(name), Some(w), "{name}");
    }
    for name in got.keys() {
        assert!(want.contains_key(name), "{name} is not in the table");
    }
    assert_eq!(inv.len(), 1328);
}

/// The metadata keys the C engine reads (DS4_TENSORS.md / DS4_FACTS.md), with their Flash
/// values and types, all present in the generated header.
#[test]
fn flash_metadata_is_the_published_list() {
    use crate::gguf::Value::{self, Bool, F32, U32};
    let md = Shape::flash().metadata(0, &FillPlan::full());
    let get = |k: &str| {
        md.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{k} missing"))
    };
    let ratios: Vec<Value> = (0..43u32)
        .map(|l| {
            U32(if l < 2 {
                0
            } else if l % 2 == 0 {
                4
            } else {
                128
            })
        })
        .collect();
    for (k, v) in [
        ("block_count", U32(43)),
        ("embedding_length", U32(4096)),
        ("vocab_size", U32(129_280)),
        ("attention.head_count", U32(64)),
        ("attention.head_count_kv", U32(1)),
        ("attention.key_length", U32(512)),
        ("attention.value_length", U32(512)),
        ("rope.dimension_count", U32(64)),
        ("attention.q_lora_rank", U32(1024)),
        ("attention.output_lora_rank", U32(1024)),
        ("attention.output_group_count", U32(8)),
        ("expert_count", U32(256)),
        ("expert_used_count", U32(6)),
        ("expert_feed_forward_length", U32(2048)),
        ("expert_shared_count", U32(1)),
        ("hash_layer_count", U32(3)),
        ("expert_group_count", U32(0)),
        ("expert_group_used_count", U32(0)),
        ("attention.sliding_window", U32(128)),
        ("attention.indexer.head_count", U32(64)),
        ("attention.indexer.key_length", U32(128)),
        ("attention.indexer.top_k", U32(512)),
        ("hyper_connection.count", U32(4)),
        ("hyper_connection.sinkhorn_iterations", U32(20)),
        ("hyper_connection.epsilon", F32(1e-6)),
        ("attention.compress_ratios", Value::Array(ratios)),
        ("swiglu_clamp_exp", Value::Array(vec![F32(10.0); 43])),
        ("rope.freq_base", F32(10000.0)),
        ("rope.scaling.original_context_length", U32(65536)),
        ("rope.scaling.factor", F32(16.0)),
        ("rope.scaling.yarn_beta_fast", F32(32.0)),
        ("rope.scaling.yarn_beta_slow", F32(1.0)),
        ("attention.compress_rope_freq_base", F32(160_000.0)),
        ("expert_weights_scale", F32(1.5)),
        ("expert_weights_norm", Bool(true)),
        ("attention.layer_norm_rms_epsilon", F32(1e-6)),
    ] {
        assert_eq!(get(&format!("deepseek4.{k}")), v, "deepseek4.{k}");
    }
    assert!(matches!(get("deepseek4.context_length"), U32(n) if n > 0));
    assert_eq!(
        get("general.architecture"),
        Value::String("deepseek4".into())
    );
    assert_eq!(get("general.alignment"), U32(32));
    assert!(matches!(get("general.name"), Value::String(_)));
    let Value::Array(tokens) = get("tokenizer.ggml.tokens") else {
        panic!("tokens")
    };
    assert_eq!(tokens.len(), 129_280);
    let Value::Array(merges) = get("tokenizer.ggml.merges") else {
        panic!("merges")
    };
    assert_eq!(merges.len(), 129_280 - 263);
    assert_eq!(merges[0], Value::String("tok26 3".into()));
    // With the tokenizer the header is the real file's size to within 1 %: the published file
    // is 86,720,111,488 bytes.
    let layout = plan_layout(&Shape::flash(), 0, &FillPlan::with_holes(Holes::Experts)).unwrap();
    let real = 86_720_111_488f64;
    assert!(
        (layout.total_len as f64 - real).abs() / real < 1e-4,
        "{}",
        layout.total_len
    );
}

/// Every scale's vocabulary holds the seven special tokens the DS4 C engine looks up by text
/// (ds4.c `vocab_load`), BOS at 0 and EOS at 1 as the header's ids say, then GPT-2's 256
/// byte-level characters; no text twice (the engine maps text to id).
#[test]
fn every_vocabulary_has_the_c_engines_special_tokens() {
    use crate::gguf::Value;
    let wanted = [
        "<\u{ff5c}begin\u{2581}of\u{2581}sentence\u{ff5c}>",
        "<\u{ff5c}end\u{2581}of\u{2581}sentence\u{ff5c}>",
        "<\u{ff5c}User\u{ff5c}>",
        "<\u{ff5c}Assistant\u{ff5c}>",
        "<think>",
        "</think>",
        "\u{ff5c}DSML\u{ff5c}",
    ];
    assert_eq!(SPECIAL_TOKENS, wanted);
    // The exact bytes of ds4.c's first lookup.
    assert_eq!(
        SPECIAL_TOKENS[0].as_bytes(),
        b"<\xef\xbd\x9cbegin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
    );
    for scale in [Scale::Tiny, Scale::Demo, Scale::Flash] {
        let shape = Shape::for_scale(scale);
        let md = shape.metadata(0, &FillPlan::full());
        let get = |k: &str| md.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
        let Some(Value::Array(tokens)) = get("tokenizer.ggml.tokens") else {
            panic!("{scale:?}: no token list")
        };
        let text: Vec<&str> = tokens.iter().map(|v| v.as_str().unwrap()).collect();
        assert_eq!(text.len() as u64, shape.vocab);
        assert_eq!(&text[..7], &wanted, "{scale:?}");
        assert_eq!(get("tokenizer.ggml.bos_token_id"), Some(Value::U32(0)));
        assert_eq!(get("tokenizer.ggml.eos_token_id"), Some(Value::U32(1)));
        assert_eq!(
            get("tokenizer.ggml.model"),
            Some(Value::String("gpt2".into()))
        );
        // Byte tokens: printable ASCII is itself, space is U+0120 ("Ġ"), newline U+010A.
        assert_eq!(text[7 + usize::from(b'h')], "h");
        assert_eq!(text[7 + usize::from(b' ')], "\u{120}");
        assert_eq!(text[7 + usize::from(b'\n')], "\u{10a}");
        assert_eq!(text[7 + 255], "\u{ff}");
        assert_eq!(text[7 + 256], "tok263");
        let mut seen = std::collections::HashSet::new();
        assert!(
            text.iter().all(|t| seen.insert(*t)),
            "{scale:?}: a text twice"
        );
        assert!(matches!(get("tokenizer.ggml.merges"), Some(Value::Array(m)) if !m.is_empty()));
    }
}

fn with_layers(scale: Scale, layers: Option<u32>) -> Options {
    Options {
        scale,
        layers,
        holes: Some(Holes::None),
        ..Options::default()
    }
}

fn write_opts(opts: &Options) -> Vec<u8> {
    let generator = opts.generator().unwrap();
    let plan = opts.fill_plan();
    let (out, s) = write_model(
        Cursor::new(Vec::new()),
        &generator,
        &plan,
        4096,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(s.n_layer, generator.shape().n_layer);
    out.into_inner()
}

/// `layers: Some(n)` keeps the scale's first n layers: the tensor list is a prefix of the full
/// one (globals, then layers 0..n), every per-layer metadata array is n long, and the file is
/// the header plus exactly those tensors.
#[test]
fn truncated_shapes_keep_the_first_layers() {
    for scale in [Scale::Tiny, Scale::Demo, Scale::Flash] {
        let full = Shape::for_scale(scale);
        let full_inv = full.inventory();
        let globals = full_inv
            .iter()
            .take_while(|t| !t.name.starts_with("blk."))
            .count();
        for n in [1, 2, 3, full.n_layer - 1] {
            let opts = with_layers(scale, Some(n));
            let shape = opts.shape().unwrap();
            assert_eq!(shape.n_layer, n);
            assert_eq!(shape.n_hash_layer, full.n_hash_layer.min(n));
            let inv = shape.inventory();
            let per_layer = |l: u32| {
                let p = format!("blk.{l}.");
                full_inv.iter().filter(|t| t.name.starts_with(&p)).count()
            };
            let want = globals + (0..n).map(per_layer).sum::<usize>();
            assert_eq!(inv.len(), want, "{scale:?} {n}");
            assert_eq!(&inv[..], &full_inv[..want], "{scale:?} {n}");

            let md = shape.metadata(0, &opts.fill_plan());
            let get = |k: &str| {
                md.iter()
                    .find(|(key, _)| key == &format!("deepseek4.{k}"))
                    .map(|(_, v)| v.clone())
                    .unwrap()
            };
            assert_eq!(get("block_count").as_u64(), Some(u64::from(n)));
            assert_eq!(
                get("hash_layer_count").as_u64(),
                Some(u64::from(full.n_hash_layer.min(n)))
            );
            for k in ["attention.compress_ratios", "swiglu_clamp_exp"] {
                assert_eq!(get(k).as_array().map(|a| a.len()), Some(n as usize), "{k}");
            }

            let layout = plan_layout(&shape, 0, &opts.fill_plan()).unwrap();
            assert_eq!(opts.file_len().unwrap(), layout.total_len);
            assert_eq!(layout.tensors.len(), want);
            let last = layout.tensors.last().unwrap();
            assert_eq!(
                layout.total_len,
                last.offset + last.nbytes,
                "the file ends with layer {}'s last tensor",
                n - 1
            );
        }
        // All the scale's layers: exactly the scale's shape and file.
        let all = with_layers(scale, Some(full.n_layer));
        assert_eq!(all.shape().unwrap(), full);
        assert_eq!(
            all.file_len().unwrap(),
            with_layers(scale, None).file_len().unwrap()
        );
    }
}

/// The same options write the same bytes; `layers: None` writes the file the scale always
/// wrote (so recorded digests hold); a truncated file's tensors hold the full model's bytes
/// (so `ds4 demo` verifies it with the scale's generator).
#[test]
fn truncated_files_are_deterministic_and_hold_the_full_models_bytes() {
    let opts = with_layers(Scale::Tiny, Some(2));
    let file = write_opts(&opts);
    assert!(file == write_opts(&opts), "same options, different bytes");
    assert_eq!(file.len() as u64, opts.file_len().unwrap());

    let old = Generator::new(&Shape::tiny(), 0).unwrap();
    let (old_file, _) = write_model(
        Cursor::new(Vec::new()),
        &old,
        &FillPlan::full(),
        4096,
        &mut |_| {},
    )
    .unwrap();
    assert!(
        write_opts(&with_layers(Scale::Tiny, None)) == old_file.into_inner(),
        "layers: None changed the file"
    );

    let shape = opts.shape().unwrap();
    let layout = plan_layout(&shape, 0, &FillPlan::full()).unwrap();
    for t in &layout.tensors {
        let mut want = vec![0u8; t.nbytes as usize];
        old.tensor_bytes(&t.name, 0, &mut want).unwrap();
        let at = t.offset as usize;
        assert_eq!(&file[at..at + want.len()], &want[..], "{}", t.name);
    }
    assert!(layout.index_of("blk.2.attn_norm.weight").is_none());
}

#[test]
fn bad_layer_counts_and_fill_layers_past_them_are_refused() {
    for (scale, n, msg) in [
        (
            Scale::Tiny,
            0,
            "--layers 0 is outside 1..=6 (scale tiny has 6 layers)",
        ),
        (Scale::Tiny, 7, "--layers 7 is outside 1..=6"),
        (Scale::Demo, 11, "--layers 11 is outside 1..=10"),
        (Scale::Flash, 44, "--layers 44 is outside 1..=43"),
    ] {
        let opts = with_layers(scale, Some(n));
        for e in [
            opts.check().unwrap_err(),
            opts.shape().unwrap_err(),
            opts.file_len().unwrap_err(),
        ] {
            assert!(e.is_bad_input(), "{e}");
            assert!(e.to_string().contains(msg), "{e}");
        }
    }
    let opts = Options {
        holes: Some(Holes::All),
        fill_layers: vec![1, 2],
        ..with_layers(Scale::Tiny, Some(2))
    };
    let e = opts.check().unwrap_err();
    assert!(e.is_bad_input());
    assert!(
        e.to_string()
            .contains("fill layer 2 does not exist (the model has 2 layers"),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.gguf");
    assert!(write_file(&out, &opts, &mut |_| {}).is_err());
    assert!(!out.exists());
    assert!(Options {
        fill_layers: vec![1],
        ..opts
    }
    .check()
    .is_ok());
}

/// `--scale flash --layers 12 --fill`: 12 layers of 256 experts of 6.75 MiB (1.6875 GiB of
/// experts a layer) plus the global tensors and the layers' resident tensors. The numbers
/// README.md quotes.
#[test]
fn flash_twelve_layers_file_length() {
    let opts = with_layers(Scale::Flash, Some(12));
    let (mut routed, mut layer_resident, mut globals) = (0u64, 0u64, 0u64);
    for t in opts.shape().unwrap().inventory() {
        let n = t.nbytes().unwrap();
        match ExpertKind::parse_tensor_name(&t.name) {
            Some(_) => routed += n,
            None if t.name.starts_with("blk.") => layer_resident += n,
            None => globals += n,
        }
    }
    let len = opts.file_len().unwrap();
    eprintln!(
        "flash --layers 12 --fill: {len} B file, routed {routed} B, layers' resident \
         {layer_resident} B, globals {globals} B"
    );
    assert_eq!(routed, 12 * 256 * 7_077_888);
    assert_eq!(globals, 1_621_835_796); // token_embd F16 + output Q8_0: 1.510 GiB
    assert_eq!(layer_resident, 1_972_405_280); // 1.837 GiB, 157 MiB a layer on average
                                               // 23.601 GiB: the rest is the header (tokenizer) and alignment, 4.1 MiB.
    let header = len - routed - globals - layer_resident;
    assert_eq!(header, 4_323_948);
    assert_eq!(len, 25_341_836_960);
}
