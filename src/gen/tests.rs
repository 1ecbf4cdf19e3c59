use super::*;
use std::io::Cursor;

fn write_tiny(plan: &FillPlan, seed: u64) -> (Vec<u8>, GenSummary, Generator) {
    let gen = Generator::new(&Shape::tiny(), seed).unwrap();
    let (out, s) = write_model(Cursor::new(Vec::new()), &gen, plan, 4096, &mut |_| {}).unwrap();
    (out.into_inner(), s, gen)
}

#[test]
fn tiny_file_holds_generator_bytes_at_planned_offsets() {
    let (file, s, gen) = write_tiny(&FillPlan::full(), 42);
    let layout = plan_layout(&Shape::tiny(), 42).unwrap();
    assert_eq!(file.len() as u64, layout.total_len);
    assert_eq!(s.file_len, layout.total_len);
    assert_eq!(s.hole_bytes, 0);
    assert_eq!(s.written_bytes, layout.tensor_bytes());
    assert!(
        s.file_len > (2 << 20) && s.file_len < (8 << 20),
        "{}",
        s.file_len
    );
    assert_eq!(&file[..layout.header_bytes().len()], layout.header_bytes());
    for t in &layout.tensors {
        let mut want = vec![0u8; t.nbytes as usize];
        gen.tensor_bytes(&t.name, 0, &mut want).unwrap();
        let at = t.offset as usize;
        assert_eq!(&file[at..at + want.len()], &want[..], "{}", t.name);
        assert!(want.iter().any(|&b| b != 0), "{} is all zeros", t.name);
    }
}

#[test]
fn any_subrange_matches_the_whole_tensor() {
    let gen = Generator::new(&Shape::tiny(), 3).unwrap();
    for name in [
        "blk.1.ffn_gate_exps.weight",
        "blk.3.ffn_down_exps.weight",
        "output.weight",
        "token_embd.weight",
        "blk.0.ffn_gate_tid2eid.weight",
        "blk.2.attn_norm.weight",
    ] {
        let n = gen.tensor_len(name).unwrap() as usize;
        let mut whole = vec![0u8; n];
        gen.tensor_bytes(name, 0, &mut whole).unwrap();
        let mut h = 12345u64;
        for _ in 0..50 {
            h = mix64(h);
            let start = (h % n as u64) as usize;
            let len = (mix64(h) % 300).min((n - start) as u64) as usize;
            let mut part = vec![0u8; len];
            gen.tensor_bytes(name, start as u64, &mut part).unwrap();
            assert_eq!(
                &part[..],
                &whole[start..start + len],
                "{name} {start}+{len}"
            );
        }
    }
    assert!(matches!(
        gen.tensor_bytes("nope", 0, &mut [0u8; 1]),
        Err(GenError::UnknownTensor { .. })
    ));
    let n = gen.tensor_len("output.weight").unwrap();
    assert!(matches!(
        gen.tensor_bytes("output.weight", n - 1, &mut [0u8; 2]),
        Err(GenError::Range { .. })
    ));
    assert!(gen
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
    let (file, s, gen) = write_tiny(&plan, 9);
    let layout = plan_layout(&Shape::tiny(), 9).unwrap();
    assert_eq!(file.len() as u64, layout.total_len);
    let eb: u64 = ExpertKind::ALL.iter().map(|&k| gen.expert_bytes(k)).sum();
    assert_eq!(s.written_bytes, 3 * eb);
    for t in &layout.tensors {
        let mut want = vec![0u8; t.nbytes as usize];
        plan.file_bytes(&gen, &t.name, 0, &mut want).unwrap();
        let at = t.offset as usize;
        assert_eq!(&file[at..at + want.len()], &want[..], "{}", t.name);
    }
    // Expert 5 of layer 3 is real data; expert 4 and every resident tensor are zeros.
    let down = layout.tensors[layout.index_of("blk.3.ffn_down_exps.weight").unwrap()].clone();
    let deb = gen.expert_bytes(ExpertKind::Down);
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
    let gen = Generator::new(&Shape::tiny(), 0).unwrap();
    let plan = FillPlan {
        holes: Holes::Experts,
        fill_layers: vec![4],
        fill_experts: None,
    };
    let e = write_model(Cursor::new(Vec::new()), &gen, &plan, 4096, &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("fill layer 4 does not exist"), "{e}");
    let plan = FillPlan {
        holes: Holes::Experts,
        fill_layers: vec![0],
        fill_experts: Some(vec![16]),
    };
    let e = write_model(Cursor::new(Vec::new()), &gen, &plan, 4096, &mut |_| {}).unwrap_err();
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
    let gen = Generator::new(&shape, 0).unwrap();
    assert_eq!(gen.expert_bytes(ExpertKind::Gate), 2_162_688);
    assert_eq!(gen.expert_bytes(ExpertKind::Up), 2_162_688);
    assert_eq!(gen.expert_bytes(ExpertKind::Down), 2_752_512);
    assert_eq!(
        Generator::new(&Shape::flash().with_q4k(), 0)
            .unwrap()
            .expert_bytes(ExpertKind::Gate)
            * 3,
        14_155_776 // 13.5 MiB per expert
    );
    let layout = plan_layout(&shape, 0).unwrap();
    assert_eq!(layout.tensors.len(), inv.len());
    assert_eq!(layout.alignment, 32);
    assert!(layout.total_len > 86_000_000_000 && layout.total_len < 86_800_000_000);
}

#[test]
fn demo_is_big_enough_to_stream() {
    let s = Shape::demo();
    let gen = Generator::new(&s, 0).unwrap();
    let eb: u64 = ExpertKind::ALL.iter().map(|&k| gen.expert_bytes(k)).sum();
    let experts = eb * s.n_expert * u64::from(s.n_layer);
    assert!(experts > 300 << 20 && experts < 1 << 30, "{experts}");
}
