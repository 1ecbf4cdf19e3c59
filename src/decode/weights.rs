//! The MoE stack's metadata and resident (non-routed) weights, read and validated before any
//! token runs: a missing key, a tensor of the wrong type or shape, a `tid2eid` id outside
//! 0..X or repeated within a token → an error naming the key or tensor.

use super::DecodeError;
use crate::engine::Engine;
use crate::gguf::{GgmlType, GgufFile, Value};
use crate::model::{Ds4Model, TensorRef};
use bytes::Bytes;

/// The numbers of docs/MOE_STACK.md's notation.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeParams {
    /// E
    pub n_embd: usize,
    /// X
    pub n_expert: usize,
    /// K
    pub n_used: usize,
    /// H
    pub n_hash: usize,
    pub vocab: u64,
    pub eps: f32,
    /// s
    pub scale: f32,
    pub norm: bool,
    /// c_l per layer (0 = no clamp).
    pub clamp: Vec<f32>,
}

fn key<'a>(f: &'a GgufFile, k: &str) -> Result<&'a Value, DecodeError> {
    let full = format!("deepseek4.{k}");
    f.get(&full).ok_or(DecodeError::Key {
        key: full,
        why: "missing (the MoE stack needs it)".into(),
    })
}

fn key_f32(f: &GgufFile, k: &str) -> Result<f32, DecodeError> {
    key(f, k)?
        .as_f64()
        .map(|v| v as f32)
        .filter(|v| v.is_finite())
        .ok_or(DecodeError::Key {
            key: format!("deepseek4.{k}"),
            why: "not a finite number".into(),
        })
}

impl MoeParams {
    pub fn from_gguf(f: &GgufFile, m: &Ds4Model) -> Result<Self, DecodeError> {
        let s = &m.shape;
        let n_layer = s.n_layer as usize;
        let eps = key_f32(f, "attention.layer_norm_rms_epsilon")?;
        let scale = key_f32(f, "expert_weights_scale")?;
        let norm = match key(f, "expert_weights_norm")? {
            Value::Bool(b) => *b,
            v => v.as_u64().map(|x| x != 0).ok_or(DecodeError::Key {
                key: "deepseek4.expert_weights_norm".into(),
                why: "not a boolean".into(),
            })?,
        };
        let clamp = match f.get("deepseek4.swiglu_clamp_exp") {
            None => vec![0.0; n_layer],
            Some(v) => {
                let bad = |why: String| DecodeError::Key {
                    key: "deepseek4.swiglu_clamp_exp".into(),
                    why,
                };
                let a = v.as_array().ok_or_else(|| bad("not an array".into()))?;
                if a.len() != n_layer {
                    return Err(bad(format!("{} values for {n_layer} layers", a.len())));
                }
                a.iter()
                    .map(|x| x.as_f64().map(|c| c as f32).filter(|c| c.is_finite()))
                    .collect::<Option<Vec<f32>>>()
                    .ok_or_else(|| bad("not all finite numbers".into()))?
            }
        };
        let usize_of = |v: u64, what: &str| {
            usize::try_from(v).map_err(|_| DecodeError::Key {
                key: format!("deepseek4.{what}"),
                why: format!("{v} is too large"),
            })
        };
        Ok(Self {
            n_embd: usize_of(s.n_embd, "embedding_length")?,
            n_expert: usize_of(s.n_expert, "expert_count")?,
            n_used: usize_of(s.n_expert_used, "expert_used_count")?,
            n_hash: s.n_hash_layer as usize,
            vocab: s.vocab,
            eps,
            scale,
            norm,
            clamp,
        })
    }
}

/// One layer's resident weights.
pub struct LayerWeights {
    pub ffn_norm: Vec<f32>,
    /// Router, F16 [E, X]: X rows of E values.
    pub router: Bytes,
    pub bias: Option<Vec<f32>>,
    /// Hash layers: `tid2eid`, K ids per token, validated.
    pub tid2eid: Option<Vec<u32>>,
    /// Shared expert (gate, up, down) as stored.
    pub shared: Option<[(GgmlType, Bytes); 3]>,
}

/// Everything of the MoE stack except the routed experts.
pub struct MoeWeights {
    pub params: MoeParams,
    pub layers: Vec<LayerWeights>,
    /// `token_embd.weight` (F16 [E, vocab]): read one row per token, never whole.
    pub token_embd: TensorRef,
}

fn bad(name: &str, why: impl Into<String>) -> DecodeError {
    DecodeError::Tensor {
        name: name.to_string(),
        why: why.into(),
    }
}

fn expect(t: &TensorRef, ty: &[GgmlType], dims: &[u64]) -> Result<(), DecodeError> {
    if !ty.contains(&t.ggml_type) {
        return Err(bad(
            &t.name,
            format!("type {}, expected {:?}", t.ggml_type, ty),
        ));
    }
    if t.dims != dims {
        return Err(bad(
            &t.name,
            format!("dims {:?}, expected {dims:?}", t.dims),
        ));
    }
    Ok(())
}

fn read(engine: &Engine, t: &TensorRef) -> Result<Bytes, DecodeError> {
    let len = usize::try_from(t.nbytes).map_err(|_| bad(&t.name, "too large to load"))?;
    engine
        .read_bytes(t.offset, len)
        .map_err(|source| DecodeError::Read {
            what: t.name.clone(),
            source,
        })
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A tensor of the GGUF table as a [`TensorRef`] (for tensors the DS4 map does not type).
fn tensor_ref(f: &GgufFile, name: &str) -> Result<TensorRef, DecodeError> {
    f.tensor(name)
        .map(TensorRef::from)
        .ok_or_else(|| bad(name, "missing (the MoE stack needs it)"))
}

impl MoeWeights {
    /// Validates and reads every resident tensor of the MoE stack through `engine`.
    pub fn load(f: &GgufFile, m: &Ds4Model, engine: &Engine) -> Result<Self, DecodeError> {
        let params = MoeParams::from_gguf(f, m)?;
        let (e, x, k) = (params.n_embd as u64, params.n_expert as u64, params.n_used);
        let token_embd = tensor_ref(f, "token_embd.weight")?;
        expect(&token_embd, &[GgmlType::F16], &[e, params.vocab])?;
        let mut layers = Vec::with_capacity(m.layers.len());
        for (l, layer) in m.layers.iter().enumerate() {
            let norm = tensor_ref(f, &format!("blk.{l}.ffn_norm.weight"))?;
            expect(&norm, &[GgmlType::F32], &[e])?;
            let ffn_norm = f32s(&read(engine, &norm)?);
            expect(&layer.router, &[GgmlType::F16], &[e, x])?;
            let router = read(engine, &layer.router)?;
            let bias = match &layer.probs_bias {
                Some(b) => {
                    expect(b, &[GgmlType::F32], &[x])?;
                    let v = f32s(&read(engine, b)?);
                    if let Some(i) = v.iter().position(|b| !b.is_finite()) {
                        return Err(bad(&b.name, format!("value {i} is not finite")));
                    }
                    Some(v)
                }
                None => None,
            };
            let tid2eid = match (&layer.tid2eid, l < params.n_hash) {
                (Some(t), true) => Some(load_tid2eid(engine, t, k, x, params.vocab)?),
                (None, true) => {
                    return Err(bad(
                        &format!("blk.{l}.ffn_gate_tid2eid.weight"),
                        "missing on a hash layer",
                    ))
                }
                (_, false) => None,
            };
            let shared = match &layer.shared {
                Some(s) => {
                    let rows = s.gate.dims.get(1).copied().unwrap_or(0);
                    let ok = [
                        GgmlType::Q8_0,
                        GgmlType::Q4_K,
                        GgmlType::Q2_K,
                        GgmlType::F16,
                    ];
                    expect(&s.gate, &ok, &[e, rows])?;
                    expect(&s.up, &ok, &[e, rows])?;
                    expect(&s.down, &ok, &[rows, e])?;
                    Some([
                        (s.gate.ggml_type, read(engine, &s.gate)?),
                        (s.up.ggml_type, read(engine, &s.up)?),
                        (s.down.ggml_type, read(engine, &s.down)?),
                    ])
                }
                None => None,
            };
            for kind in [&layer.gate, &layer.up, &layer.down] {
                if !crate::compute::is_supported(kind.tensor.ggml_type) {
                    return Err(bad(
                        &kind.tensor.name,
                        format!("type {} has no compute kernel", kind.tensor.ggml_type),
                    ));
                }
            }
            layers.push(LayerWeights {
                ffn_norm,
                router,
                bias,
                tid2eid,
                shared,
            });
        }
        Ok(Self {
            params,
            layers,
            token_embd,
        })
    }
}

/// Reads and checks `tid2eid` (I32 [K, vocab]): every id in 0..X, no id twice for one token.
fn load_tid2eid(
    engine: &Engine,
    t: &TensorRef,
    k: usize,
    x: u64,
    vocab: u64,
) -> Result<Vec<u32>, DecodeError> {
    expect(t, &[GgmlType::I32], &[k as u64, vocab])?;
    let raw = read(engine, t)?;
    let ids: Vec<i32> = raw
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let mut out = Vec::with_capacity(ids.len());
    for (tok, row) in ids.chunks_exact(k).enumerate() {
        for (j, &id) in row.iter().enumerate() {
            if id < 0 || id as u64 >= x {
                return Err(bad(
                    &t.name,
                    format!("token {tok}: expert id {id} outside 0..{x}"),
                ));
            }
            if row[..j].contains(&id) {
                return Err(bad(&t.name, format!("token {tok}: expert id {id} twice")));
            }
            out.push(id as u32);
        }
    }
    Ok(out)
}
