//! The exact Flash shape as a sparse file: resident tensors and most experts are holes, a few
//! experts of layers 41 and 42 (offsets past 80 GiB) hold real data. Checks the parsed tensor
//! table against the writer's plan and gguf-py, the model map's expert slices against the
//! formula of DS4_FACTS.md, the tensor-span numbers of DS4_TENSORS.md, and `ds4 cat` of experts
//! past 4 GiB against the generator. Writes ~40 MiB of real data.

mod gen_util;

use ds4_stream::generate::{plan_layout, FillPlan, Generator, Holes, Shape, FILL_KEY};
use ds4_stream::gguf::{self, Caps};
use ds4_stream::model::{Ds4Model, ExpertKind};
use gen_util::*;
use serde_json::Value as Json;

const SEED: u64 = 11;

#[test]
fn flash_sparse_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("flash.gguf");
    let line = gen_model(
        &p,
        &[
            "--scale",
            "flash",
            "--seed",
            "11",
            "--holes",
            "all",
            "--fill-layers",
            "41,42",
            "--fill-experts",
            "0,200,255",
        ],
    );
    assert!(line.contains("1328 tensors"), "{line}");
    assert!(
        line.contains("43 layers x 256 experts of 7,077,888 B"),
        "{line}"
    );
    // 2 layers x 3 experts x 7,077,888 + 3 hash layers' tid2eid (129,280 tokens x 6 x 4 B).
    assert!(line.contains(" 51,775,488 B written"), "{line}");

    let shape = Shape::flash();
    let plan = FillPlan {
        holes: Holes::All,
        fill_layers: vec![41, 42],
        fill_experts: Some(vec![0, 200, 255]),
    };
    let layout = plan_layout(&shape, SEED, &plan).unwrap();
    let len = std::fs::metadata(&p).unwrap().len();
    assert_eq!(len, layout.total_len);
    assert!(len > 86_000_000_000);
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let on_disk = std::fs::metadata(&p).unwrap().blocks() * 512;
        assert!(on_disk < 256 << 20, "not sparse: {on_disk} bytes on disk");
    }

    // Our parser reads exactly what the writer planned.
    let f = gguf::parse_file(&p, &Caps::default()).unwrap();
    assert_eq!(f, layout.expected_file());

    // The model map: every slice at tensor_offset + e * expert_bytes.
    let m = Ds4Model::from_gguf(&f).unwrap();
    assert_eq!(m.routed_bytes, 77_913_391_104);
    assert_eq!(m.resident_bytes, 8_801_384_796);
    let gib = |n: u64| format!("{:.3}", n as f64 / (1u64 << 30) as f64);
    assert_eq!(gib(m.routed_bytes), "72.562");
    assert_eq!(gib(m.resident_bytes), "8.197");
    assert_eq!(gib(m.routed_bytes + m.resident_bytes), "80.759");
    let want_eb = [2_162_688u64, 2_162_688, 2_752_512];
    let mut past_4g = 0u32;
    for l in &m.layers {
        for (kind, eb) in ExpertKind::ALL.into_iter().zip(want_eb) {
            let t = f.tensor(&kind.tensor_name(l.index)).unwrap();
            for e in 0..256u64 {
                let s = m.expert_slice(l.index.into(), kind, e).unwrap();
                assert_eq!((s.offset, s.len), (t.offset + e * eb, eb));
                past_4g += u32::from(s.offset >= 1 << 32);
            }
        }
        assert_eq!(l.expert_bytes(), 7_077_888);
    }
    assert!(past_4g > 30_000, "{past_4g} of 33,024 slices past 4 GiB");

    // The parser reads only the header of the 81 GiB file: counted by this thread's read
    // bytes (/proc/thread-self/io `rchar`: every read system call of this thread, cached or
    // not), not by a timer.
    #[cfg(target_os = "linux")]
    {
        let rchar = || -> u64 {
            let io = std::fs::read_to_string("/proc/thread-self/io").unwrap();
            io.lines()
                .find_map(|l| l.strip_prefix("rchar: "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap()
        };
        let before = rchar();
        let again = gguf::parse_file(&p, &Caps::default()).unwrap();
        let read = rchar() - before;
        assert!(
            read <= again.data_offset + (1 << 20),
            "parsing read {read} bytes; the header is {} bytes",
            again.data_offset
        );
    }
    // `ds4 inspect --json` gives the same table and DS4 view.
    let o = run_ds4(&["inspect", p.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: Json = serde_json::from_slice(&o.stdout).unwrap();
    let tj = j["tensors"].as_array().unwrap();
    assert_eq!(tj.len(), f.tensors.len());
    for (a, b) in tj.iter().zip(&f.tensors) {
        assert_eq!(
            a,
            &serde_json::json!({"name": b.name, "type": b.ggml_type.name(), "shape": b.dims,
                                "offset": b.offset, "nbytes": b.nbytes})
        );
    }
    assert_eq!(j["ds4"]["routed_bytes"], m.routed_bytes);
    assert_eq!(j["ds4"]["resident_bytes"], m.resident_bytes);
    assert_eq!(j["ds4"]["bytes_per_expert"]["total"], 7_077_888);
    assert_eq!(j["ds4"]["layers"], 43);

    // gguf-py sees the same table (absolute offsets past 4 GiB included).
    let out = run_py(
        "gen_readback.py",
        &[p.to_str().unwrap(), dir.path().to_str().unwrap(), "", "0"],
    );
    let j: Json = serde_json::from_str(&out).unwrap();
    let py = j["tensors"].as_array().unwrap();
    assert_eq!(py.len(), f.tensors.len());
    for (a, b) in py.iter().zip(&f.tensors) {
        assert_eq!(a["name"], b.name.as_str());
        assert_eq!(a["offset"], b.offset, "{}", b.name);
        assert_eq!(a["nbytes"], b.nbytes, "{}", b.name);
        assert_eq!(a["shape"], serde_json::json!(b.dims), "{}", b.name);
    }

    // `ds4 cat` past 4 GiB returns what the file holds: generator bytes for filled experts,
    // zeros in holes.
    let generator = Generator::new(&shape, SEED).unwrap();
    // The file records its plan, in the format `ds4 demo` reads back.
    assert_eq!(
        f.get(FILL_KEY).and_then(|v| v.as_str()),
        Some("holes=all;layers=41-42;experts=0,200,255")
    );
    assert_eq!(
        FillPlan::from_spec("holes=all;layers=41-42;experts=0,200,255").unwrap(),
        plan
    );
    let cases: &[(u32, ExpertKind, u64, bool)] = &[
        (42, ExpertKind::Down, 255, true),
        (41, ExpertKind::Gate, 200, true),
        (42, ExpertKind::Up, 0, true),
        (42, ExpertKind::Down, 254, false),
        (3, ExpertKind::Gate, 17, false),
    ];
    for &(l, kind, e, filled) in cases {
        let name = kind.tensor_name(l);
        let s = m.expert_slice(l.into(), kind, e).unwrap();
        assert!(s.offset > 1 << 32);
        let o = run_ds4(&[
            "cat",
            p.to_str().unwrap(),
            &name,
            "--expert",
            &e.to_string(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(o.stdout.len() as u64, s.len);
        let off_in_tensor = s.offset - f.tensor(&name).unwrap().offset;
        let mut want = vec![0u8; s.len as usize];
        plan.file_bytes(&generator, &name, off_in_tensor, &mut want)
            .unwrap();
        assert!(o.stdout == want, "{name} expert {e}");
        assert_eq!(want.iter().any(|&b| b != 0), filled, "{name} expert {e}");
    }
    // A range that straddles a filled expert and a hole.
    let name = ExpertKind::Down.tensor_name(42);
    let eb = want_eb[2];
    let start = 200 * eb - 1000;
    let o = run_ds4(&[
        "cat",
        p.to_str().unwrap(),
        &name,
        "--range",
        &format!("{start}:3000"),
    ]);
    let mut want = vec![0u8; 3000];
    plan.file_bytes(&generator, &name, start, &mut want)
        .unwrap();
    assert!(o.stdout == want);
    assert!(want[..1000].iter().all(|&b| b == 0) && want[1000..].iter().any(|&b| b != 0));
}
