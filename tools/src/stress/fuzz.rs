//! The checks behind the `ds4_map` and `plan_chunks` fuzz targets, shared with the tests that
//! replay their corpora (`tests/stress_fuzz_corpus.rs`), so a crash found by `cargo fuzz` stays
//! fixed in the ordinary test run.
//!
//! These functions *panic* when a property does not hold: that is how libFuzzer learns about a
//! failure. They never panic on a merely hostile input: an input the code under test rejects
//! with a typed error is a pass.
//!
//! - [`check_ds4_map`]: bytes -> `parse_bytes` -> [`Ds4Model::from_gguf`]. First byte picks a
//!   mode: raw bytes as the whole file; bytes padded with zeros to [`PAD_LEN`] (so a header
//!   whose tensors lie past its own end still parses and reaches the model map); or a list of
//!   edits applied to a small valid DS4 file (metadata values and types, tensor dims, types,
//!   names, additions, removals), re-planned through the GGUF writer, which keeps the header
//!   consistent so the edits test the model map rather than the parser. A map that builds
//!   must keep its promises (slices inside their tensors and the file, byte totals add up).
//! - [`check_plan_chunks`]: random (offset, length, chunk) -> the engine's planner must tile
//!   the range exactly (no gap, no overlap, every chunk at most `chunk` and inside one
//!   chunk-aligned window) and agree with `plan_chunk_count`.
//! - [`check_plan_chunks_engine`]: the same ranges through real engines (slot sizes 4 KiB to
//!   1 MiB, handles claiming direct-IO alignments 512 B to 64 KiB, staged and direct
//!   destinations, a file whose end is not aligned): every byte must arrive, and no read may
//!   cross the end of the file (the widening of staged reads to the alignment is clamped).

use ds4_io::pattern::{verify, PatternSource};
use ds4_io::{ReadAt, Source};
use ds4_stream::device::{Device, DeviceBuffer, HostDevice};
use ds4_stream::engine::{plan_chunk_count, plan_chunks, Engine, EngineConfig, ReadRequest};
use ds4_stream::generate::{plan_layout, FillPlan, Shape};
use ds4_stream::gguf::writer::{self, TensorSpec};
use ds4_stream::gguf::{parse_bytes, Caps, GgmlType, GgufFile, Value};
use ds4_stream::model::{Ds4Model, ExpertKind};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// Mode-1 inputs are padded with zeros to this many bytes.
pub const PAD_LEN: usize = 1 << 20;

/// Reads little-endian integers from fuzz bytes; past the end it yields zeros.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u64(&mut self) -> u64 {
        let mut v = 0u64;
        for i in 0..8 {
            v |= u64::from(self.u8()) << (8 * i);
        }
        v
    }
    fn u32(&mut self) -> u32 {
        self.u64() as u32
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The small valid DS4 shape the structured mode edits: 2 layers (1 hash), 4 experts of
/// 256 x 256, 8-token vocabulary. Its file is about 930 KiB (under [`PAD_LEN`]).
pub fn micro_shape() -> Shape {
    Shape {
        name: "micro",
        n_layer: 2,
        n_hash_layer: 1,
        n_embd: 256,
        n_hc: 1,
        q_lora: 32,
        n_head: 2,
        head_dim: 32,
        o_lora: 32,
        o_groups: 1,
        n_expert: 4,
        n_expert_used: 2,
        expert_ff: 256,
        vocab: 8,
        idx_heads: 1,
        idx_head_dim: 32,
        context_length: 64,
        ..Shape::tiny()
    }
}

/// Metadata and tensor list of a GGUF file to be planned.
type Table = (Vec<(String, Value)>, Vec<TensorSpec>);

/// Metadata and tensor list of [`micro_shape`] (built once).
fn micro() -> &'static Table {
    static M: OnceLock<Table> = OnceLock::new();
    M.get_or_init(|| {
        let s = micro_shape();
        (s.metadata(1, &FillPlan::full()), s.inventory())
    })
}

/// A whole valid micro DS4 file (header, then zeros for the tensor data).
pub fn micro_file() -> Vec<u8> {
    let layout = match plan_layout(&micro_shape(), 1, &FillPlan::full()) {
        Ok(l) => l,
        Err(e) => panic!("the micro shape must plan: {e}"),
    };
    let mut v = layout.header_bytes().to_vec();
    v.resize(layout.total_len as usize, 0);
    v
}

/// Fuzz entry: see the module docs. Panics only when a promise is broken.
pub fn check_ds4_map(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => parse_and_map(rest),
        1 => {
            let mut v = rest.to_vec();
            if v.len() < PAD_LEN {
                v.resize(PAD_LEN, 0);
            }
            parse_and_map(&v);
        }
        _ => edited_micro(rest),
    }
}

fn parse_and_map(bytes: &[u8]) {
    match parse_bytes(bytes, &Caps::default()) {
        Ok(f) => check_model(&f),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

/// Applies fuzz-chosen edits to the micro file's metadata and tensor list, re-plans the header
/// with the writer (which refuses inconsistent tables), checks the parser reads back what the
/// writer planned, and maps the result.
fn edited_micro(rest: &[u8]) {
    let (meta0, tensors0) = micro();
    let mut meta = meta0.clone();
    let mut tensors = tensors0.clone();
    let mut b = Bytes(rest);
    let mut edits = 0;
    while !b.is_empty() && edits < 16 {
        edits += 1;
        edit(&mut b, &mut meta, &mut tensors);
    }
    let Ok(layout) = writer::plan(&meta, &tensors) else {
        return;
    };
    let f = layout.expected_file();
    // Writer and parser must agree on every header the writer accepts (small ones only: the
    // parser needs the whole file in memory).
    if layout.total_len <= 4 << 20 {
        let mut file = layout.header_bytes().to_vec();
        file.resize(layout.total_len as usize, 0);
        match parse_bytes(&file, &Caps::default()) {
            Ok(parsed) => {
                // Debug text, not ==: a NaN metadata value is never equal to itself.
                if parsed != f {
                    assert_eq!(
                        format!("{parsed:?}"),
                        format!("{f:?}"),
                        "parser disagrees with the writer's plan"
                    );
                }
            }
            Err(e) => panic!("the parser rejects a header the writer planned: {e}"),
        }
    }
    check_model(&f);
}

const KEYS: [&str; 8] = [
    "block_count",
    "embedding_length",
    "vocab_size",
    "expert_count",
    "expert_used_count",
    "expert_feed_forward_length",
    "expert_shared_count",
    "hash_layer_count",
];

fn some_int(b: &mut Bytes<'_>) -> Value {
    let v = b.u64();
    match b.u8() % 8 {
        0 => Value::U32(v as u32 % 1024),
        1 => Value::U32(v as u32),
        2 => Value::U64(v),
        3 => Value::I32(v as i32),
        4 => Value::I64(v as i64),
        5 => Value::U8(v as u8),
        6 => Value::U64(v % 5),
        _ => Value::I16(-((v % 3) as i16)),
    }
}

fn some_value(b: &mut Bytes<'_>) -> Value {
    match b.u8() % 6 {
        0 => Value::String(format!("deepseek{}", b.u8())),
        1 => Value::F32(f32::from_bits(b.u32())),
        2 => Value::Bool(b.u8() & 1 == 1),
        3 => Value::Array(vec![Value::U32(b.u32() % 300); (b.u8() % 4) as usize]),
        4 => Value::String("deepseek4".into()),
        _ => some_int(b),
    }
}

fn some_dim(b: &mut Bytes<'_>) -> u64 {
    match b.u8() % 6 {
        0 => 256 * (1 + u64::from(b.u8() % 4)),
        1 => u64::from(b.u8() % 9),
        2 => 1 << (b.u8() % 40),
        3 => b.u64() % (1 << 20),
        4 => b.u64(),
        _ => 4 * u64::from(b.u8() % 3),
    }
}

fn some_name(b: &mut Bytes<'_>, tensors: &[TensorSpec]) -> String {
    let kinds = [
        "ffn_gate_exps.weight",
        "ffn_up_exps.weight",
        "ffn_down_exps.weight",
        "ffn_gate_inp.weight",
        "exp_probs_b.bias",
        "ffn_gate_tid2eid.weight",
        "ffn_gate_shexp.weight",
        "ffn_down_shexp.weight",
    ];
    match b.u8() % 4 {
        0 if !tensors.is_empty() => tensors[b.u8() as usize % tensors.len()].name.clone(),
        1 => format!(
            "blk.{}.{}",
            b.u64() % 5,
            kinds[b.u8() as usize % kinds.len()]
        ),
        2 => format!("blk.{}.{}", b.u64(), kinds[b.u8() as usize % kinds.len()]),
        _ => format!("blk.{}x.ffn_gate_exps.weight", b.u8()),
    }
}

fn edit(b: &mut Bytes<'_>, meta: &mut Vec<(String, Value)>, tensors: &mut Vec<TensorSpec>) {
    let types: Vec<GgmlType> = GgmlType::all().collect();
    match b.u8() % 10 {
        0 | 1 => {
            // A shape key gets another integer (any width, negative, huge, zero).
            let key = format!("deepseek4.{}", KEYS[b.u8() as usize % KEYS.len()]);
            let v = some_int(b);
            set_key(meta, key, v);
        }
        2 => {
            // Any key (shape keys most often) gets a value of another type.
            let key = if b.u8() % 4 == 0 {
                "general.architecture".to_string()
            } else {
                format!("deepseek4.{}", KEYS[b.u8() as usize % KEYS.len()])
            };
            let v = some_value(b);
            set_key(meta, key, v);
        }
        3 if !meta.is_empty() => {
            let i = b.u8() as usize % meta.len();
            meta.remove(i);
        }
        4 if !tensors.is_empty() => {
            let i = b.u8() as usize % tensors.len();
            let t = &mut tensors[i];
            if t.dims.is_empty() {
                t.dims.push(some_dim(b));
            } else {
                let d = b.u8() as usize % t.dims.len();
                t.dims[d] = some_dim(b);
            }
        }
        5 if !tensors.is_empty() => {
            let i = b.u8() as usize % tensors.len();
            tensors[i].ggml_type = types[b.u8() as usize % types.len()];
        }
        6 if !tensors.is_empty() => {
            let i = b.u8() as usize % tensors.len();
            tensors.remove(i);
        }
        7 if !tensors.is_empty() => {
            let i = b.u8() as usize % tensors.len();
            let name = some_name(b, tensors);
            tensors[i].name = name;
        }
        8 if !tensors.is_empty() => {
            let i = b.u8() as usize % tensors.len();
            let mut t = tensors[i].clone();
            t.name = some_name(b, tensors);
            tensors.push(t);
        }
        9 if !tensors.is_empty() => {
            let i = b.u8() as usize % tensors.len();
            let t = &mut tensors[i];
            if b.u8() & 1 == 0 {
                t.dims.push(some_dim(b));
            } else {
                t.dims.pop();
            }
        }
        _ => {}
    }
}

fn set_key(meta: &mut Vec<(String, Value)>, key: String, v: Value) {
    match meta.iter_mut().find(|(k, _)| *k == key) {
        Some(slot) => slot.1 = v,
        None => meta.push((key, v)),
    }
}

/// Checks the promises of a model map built from `f` (or that its error renders).
pub fn check_model(f: &GgufFile) {
    let m = match Ds4Model::from_gguf(f) {
        Ok(m) => m,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let s = &m.shape;
    assert_eq!(m.layers.len(), s.n_layer as usize);
    assert!(s.n_expert_used <= s.n_expert && s.n_expert > 0);
    assert!(s.n_hash_layer <= s.n_layer);
    let total: u128 = f.tensors.iter().map(|t| u128::from(t.nbytes)).sum();
    assert_eq!(
        u128::from(m.routed_bytes) + u128::from(m.resident_bytes),
        total,
        "routed + resident bytes must add up to every tensor's bytes"
    );
    assert_eq!(m.resident.len() + 3 * m.layers.len(), f.tensors.len());
    for (i, l) in m.layers.iter().enumerate() {
        assert_eq!(l.index as usize, i);
        assert_eq!(l.hash, l.index < s.n_hash_layer);
        assert_eq!(l.tid2eid.is_some(), l.hash);
        for kind in ExpertKind::ALL {
            let r = l.routed(kind);
            assert_eq!(r.kind, kind);
            let t = f
                .tensor(&r.tensor.name)
                .expect("a routed tensor comes from the table");
            assert_eq!((t.offset, t.nbytes), (r.tensor.offset, r.tensor.nbytes));
            assert_eq!(r.n_expert, s.n_expert);
            assert_eq!(
                u128::from(r.expert_bytes) * u128::from(r.n_expert),
                u128::from(t.nbytes),
                "{}: experts must tile the tensor",
                t.name
            );
            let first = r.slice(0).expect("expert 0 exists");
            assert_eq!(first.offset, t.offset);
            let last = r.slice(r.n_expert - 1).expect("the last expert exists");
            assert_eq!(last.offset + last.len, t.end());
            assert!(t.end() <= f.file_size);
            assert!(r.slice(r.n_expert).is_err());
            let via_model = m
                .expert_slice(i as u64, kind, r.n_expert - 1)
                .expect("slice through the model");
            assert_eq!(via_model, last);
        }
        assert_eq!(
            l.expert_bytes(),
            l.gate.expert_bytes + l.up.expert_bytes + l.down.expert_bytes
        );
    }
    assert!(m.layer(u64::from(s.n_layer)).is_err());
    assert!(m.expert_slice(u64::MAX, ExpertKind::Gate, 0).is_err());
}

/// Decodes (offset, len, chunk) from fuzz bytes, biased towards the interesting places: around
/// 2 GiB, 4 GiB, the end of the 64-bit range; chunk sizes that are valid slot sizes, powers of
/// two, anything, or tiny.
fn plan_input(b: &mut Bytes<'_>) -> (u64, usize, usize) {
    let (mode, cmode) = (b.u8(), b.u8());
    let (v, l, c) = (b.u64(), b.u64(), b.u64());
    let chunk = match cmode % 4 {
        0 => 4096 * (1 + (c % 256) as usize),
        1 => 1usize << (c % 31),
        2 => 1 + (c % (1 << 30)) as usize,
        _ => 1 + (c % 16) as usize,
    };
    let len = match mode / 8 % 4 {
        0 => l % 64,
        1 => l % (1 << 24),
        2 => l % (1 << 33),
        _ => l,
    };
    let offset = match mode % 8 {
        0 => v,
        1 => (1u64 << 31).wrapping_add(v % 8192).wrapping_sub(4096),
        2 => (1u64 << 32).wrapping_add(v % 8192).wrapping_sub(4096),
        3 => u64::MAX - len - (v % 4096).min(u64::MAX - len),
        4 => v % (1 << 20),
        5 => (v % 64) * chunk as u64,
        6 => (v % 64) * chunk as u64 + 1,
        _ => u64::MAX - (v % 65536),
    };
    // The planner's precondition (the engine validated it): the range ends inside u64.
    let len = len.min(u64::MAX - offset);
    (offset, len as usize, chunk)
}

/// Fuzz entry for the pure planner. Panics when the chunks do not tile the range.
pub fn check_plan_chunks(data: &[u8]) {
    let (offset, len, chunk) = plan_input(&mut Bytes(data));
    check_plan(offset, len, chunk);
}

/// The grid alignment the checks pair with a chunk size: 4096 (the engine's) for multiples of
/// 4096, else the chunk's largest power-of-two factor (1 for odd chunks).
pub fn plan_align(chunk: usize) -> u64 {
    1u64 << chunk.trailing_zeros().min(12)
}

/// The tiling properties of `plan_chunks(offset, len, chunk, align)`: windows of `chunk` bytes
/// on a grid anchored at `offset` rounded down to `align`.
pub fn check_plan(offset: u64, len: usize, chunk: usize) {
    let c = chunk as u128;
    let align = plan_align(chunk);
    let base = u128::from(offset - offset % align);
    let count = plan_chunk_count(offset, len, chunk, align);
    let expected = if len == 0 {
        0
    } else {
        let last = u128::from(offset) + len as u128 - 1;
        (last - base) / c + 1
    };
    assert_eq!(
        u128::from(count),
        expected,
        "chunk count of ({offset}, {len}, {chunk})"
    );
    if count > 200_000 {
        return; // the closed form is checked; walking millions of chunks is a slow fuzz exec
    }
    let end = u128::from(offset) + len as u128;
    let mut pos = u128::from(offset);
    let mut n = 0u64;
    for (o, l, rel) in plan_chunks(offset, len, chunk, align) {
        n += 1;
        assert!(n <= count, "more chunks than plan_chunk_count said");
        let o128 = u128::from(o);
        assert_eq!(
            o128, pos,
            "gap or overlap at {pos} ({offset}, {len}, {chunk})"
        );
        assert!(l > 0 && l <= chunk, "chunk length {l} not in 1..={chunk}");
        assert_eq!(
            rel as u128,
            o128 - u128::from(offset),
            "offset into the item"
        );
        assert!(
            o128 == u128::from(offset) || (o128 - base) % c == 0,
            "only the first chunk may start off the grid"
        );
        assert_eq!(
            (o128 - base) / c,
            (o128 + l as u128 - 1 - base) / c,
            "chunk crosses a window of the grid"
        );
        pos = o128 + l as u128;
        assert!(pos <= end, "chunk past the end of the range");
    }
    assert_eq!(pos, end, "the chunks stop short");
    assert_eq!(n, count, "chunk count");
}

/// Length of the virtual file the engine stage reads: past 5 GiB, end not 4 KiB-aligned.
pub const ENGINE_FILE_LEN: u64 = (5 << 30) + 4093;
const ENGINE_SEED: u64 = 0x0f0f_1e57_5eed;
/// Slot sizes of the engines of [`check_plan_chunks_engine`].
pub const ENGINE_SLOTS: [usize; 4] = [4096, 12288, 65536, 1 << 20];
/// Alignments the probe handles claim (0 = no direct path).
pub const ENGINE_ALIGNS: [usize; 6] = [0, 512, 4096, 8192, 16384, 65536];

/// A virtual pattern file whose handles claim the direct-IO alignment stored in `align` (read
/// at every call, so one engine serves every alignment) and count reads that cross the end.
struct ProbeSource {
    inner: PatternSource,
    align: Arc<AtomicUsize>,
    past_end: Arc<AtomicU64>,
}

struct ProbeHandle {
    inner: Box<dyn ReadAt>,
    len: u64,
    align: Arc<AtomicUsize>,
    past_end: Arc<AtomicU64>,
}

impl ReadAt for ProbeHandle {
    fn read_exact_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if offset
            .checked_add(buf.len() as u64)
            .is_none_or(|e| e > self.len)
        {
            self.past_end.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.read_exact_at(buf, offset)
    }
    fn direct_alignment(&self) -> Option<usize> {
        match self.align.load(Ordering::SeqCst) {
            0 => None,
            a => Some(a),
        }
    }
}

impl Source for ProbeSource {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn open_handle(&self) -> io::Result<Box<dyn ReadAt>> {
        Ok(Box::new(ProbeHandle {
            inner: self.inner.open_handle()?,
            len: self.inner.len(),
            align: Arc::clone(&self.align),
            past_end: Arc::clone(&self.past_end),
        }))
    }
}

struct Rig {
    device: Arc<dyn Device>,
    engines: Vec<Engine>,
    align: Arc<AtomicUsize>,
    past_end: Arc<AtomicU64>,
}

/// The engines of the engine stage (one per slot size), started once per process. The mutex
/// serialises inputs: the claimed alignment is shared by all handles.
fn rig() -> &'static Mutex<Rig> {
    static RIG: OnceLock<Mutex<Rig>> = OnceLock::new();
    RIG.get_or_init(|| {
        let device: Arc<dyn Device> = Arc::new(
            HostDevice::discrete(Default::default()).expect("the host device starts its thread"),
        );
        let align = Arc::new(AtomicUsize::new(0));
        let past_end = Arc::new(AtomicU64::new(0));
        let src: Arc<dyn Source> = Arc::new(ProbeSource {
            inner: PatternSource::new(ENGINE_FILE_LEN, ENGINE_SEED),
            align: Arc::clone(&align),
            past_end: Arc::clone(&past_end),
        });
        let engines = ENGINE_SLOTS
            .iter()
            .map(|&slot_bytes| {
                let cfg = EngineConfig {
                    workers: 2,
                    slots: 3,
                    slot_bytes,
                    queue_depth: 4,
                    ..EngineConfig::default()
                };
                Engine::new(Arc::clone(&src), Arc::clone(&device), cfg)
                    .unwrap_or_else(|e| panic!("engine with {slot_bytes}-byte slots: {e}"))
            })
            .collect();
        Mutex::new(Rig {
            device,
            engines,
            align,
            past_end,
        })
    })
}

/// Fuzz entry for planner + engine: one read of up to 1 MiB + 8 KiB, from a fuzz-chosen place, through
/// an engine with a fuzz-chosen slot size and claimed alignment, into device memory (staged) or
/// host memory (direct). Every byte must arrive; no read may cross the end of the file.
pub fn check_plan_chunks_engine(data: &[u8]) {
    let mut b = Bytes(data);
    let (slot_i, align_i, mode, host) = (b.u8(), b.u8(), b.u8(), b.u8() & 1 == 1);
    let (v, l, d) = (b.u64(), b.u64(), b.u64());
    let len = (l % ((1 << 20) + 8192)) as usize;
    let max_off = ENGINE_FILE_LEN - len as u64;
    let offset = match mode % 5 {
        0 => v % (max_off + 1),
        1 => ((1u64 << 31) + (v % 16384))
            .saturating_sub(8192)
            .min(max_off),
        2 => ((1u64 << 32) + (v % 16384))
            .saturating_sub(8192)
            .min(max_off),
        3 => max_off - (v % 8192).min(max_off),
        _ => v % 65536,
    };
    let dst_offset = (d % 8192) as usize;
    let rig = rig().lock().unwrap_or_else(PoisonError::into_inner);
    rig.align.store(
        ENGINE_ALIGNS[align_i as usize % ENGINE_ALIGNS.len()],
        Ordering::SeqCst,
    );
    let engine = &rig.engines[slot_i as usize % ENGINE_SLOTS.len()];
    let before = rig.past_end.load(Ordering::SeqCst);
    let dst = if host {
        DeviceBuffer::host(dst_offset + len)
    } else {
        rig.device.alloc(dst_offset + len)
    };
    let dst = Arc::new(dst.unwrap_or_else(|e| panic!("destination of {len} bytes: {e}")));
    let t = engine
        .submit(vec![ReadRequest::new(
            offset,
            len,
            Arc::clone(&dst),
            dst_offset,
        )])
        .unwrap_or_else(|e| panic!("submit ({offset}, {len}): {e}"));
    if let Err(e) = t.wait() {
        panic!("read ({offset}, {len}) failed: {e}");
    }
    let mut got = vec![0u8; len];
    rig.device
        .read_d2h(&dst, dst_offset, &mut got)
        .unwrap_or_else(|e| panic!("read back: {e}"));
    if let Err(m) = verify(ENGINE_SEED, offset, &got) {
        panic!(
            "engine read ({offset}, {len}) slot {} align {}: {m}",
            engine.config().slot_bytes,
            rig.align.load(Ordering::SeqCst)
        );
    }
    assert_eq!(
        rig.past_end.load(Ordering::SeqCst),
        before,
        "a read crossed the end of the file ({offset}, {len})"
    );
}
