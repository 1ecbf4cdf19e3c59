//! The DS4 tensor map: from a parsed GGUF header, per layer the three routed expert tensors
//! (gate / up / down) with the slice of any one expert, the router / selection bias / tid2eid /
//! shared-expert tensors, and the list of resident (non-routed) tensors with their bytes.
//!
//! Why it exists: the streaming engine moves experts, not tensors. Every routed tensor is 3-D
//! with the expert outermost, so expert `e` is one contiguous slice at
//! `tensor_offset + e * expert_bytes`; this module validates that layout once (fail early
//! against one known family) so that everything above it can trust the slices.
//!
//! Accepts the exact DeepSeek V4 Flash shape and smaller shapes of the same family (fewer
//! layers, experts, narrower dims) as declared by the `deepseek4.*` metadata. Limits: only the
//! tensors the streaming path needs are checked in detail (routed, router, bias, tid2eid,
//! shared expert); attention tensors are taken as resident bytes without shape checks.

mod error;
mod summary;

pub use error::{ModelError, ModelOpenError};

use crate::gguf::{parse_file, Caps, GgmlType, GgufFile, TensorInfo, Value};
use std::collections::HashMap;
use std::path::Path;

/// `general.architecture` of a DS4 file.
pub const ARCH: &str = "deepseek4";
/// Types a routed expert tensor may have.
pub const ROUTED_TYPES: [GgmlType; 3] = [GgmlType::IQ2_XXS, GgmlType::Q2_K, GgmlType::Q4_K];
/// Caps on the shape keys (Flash: 43 layers, 256 experts, 129,280 vocab): a lying header must
/// not make us build millions of layer records.
pub const MAX_LAYERS: u64 = 4096;
pub const MAX_EXPERTS: u64 = 1 << 16;

/// One of the three routed tensors of a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExpertKind {
    Gate,
    Up,
    Down,
}

impl ExpertKind {
    pub const ALL: [ExpertKind; 3] = [ExpertKind::Gate, ExpertKind::Up, ExpertKind::Down];

    /// "gate", "up" or "down".
    pub fn as_str(self) -> &'static str {
        match self {
            ExpertKind::Gate => "gate",
            ExpertKind::Up => "up",
            ExpertKind::Down => "down",
        }
    }

    /// The GGUF tensor name of this kind in `layer`: `blk.{layer}.ffn_{kind}_exps.weight`.
    pub fn tensor_name(self, layer: u32) -> String {
        format!("blk.{layer}.ffn_{}_exps.weight", self.as_str())
    }

    /// Parses a routed tensor name back into (layer, kind).
    pub fn parse_tensor_name(name: &str) -> Option<(u32, ExpertKind)> {
        let (layer, rest) = split_layer(name)?;
        let kind = match rest {
            "ffn_gate_exps.weight" => ExpertKind::Gate,
            "ffn_up_exps.weight" => ExpertKind::Up,
            "ffn_down_exps.weight" => ExpertKind::Down,
            _ => return None,
        };
        Some((u32::try_from(layer).ok()?, kind))
    }
}

/// Splits `blk.N.rest` into (N, rest).
pub fn split_layer(name: &str) -> Option<(u64, &str)> {
    let tail = name.strip_prefix("blk.")?;
    let dot = tail.find('.')?;
    let num = &tail[..dot];
    if num.is_empty() || num.len() > 19 || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((num.parse().ok()?, &tail[dot + 1..]))
}

/// A tensor of the file, by value (name, type, dims, absolute offset, bytes).
#[derive(Clone, Debug, PartialEq)]
pub struct TensorRef {
    pub name: String,
    pub ggml_type: GgmlType,
    pub dims: Vec<u64>,
    /// Absolute file offset.
    pub offset: u64,
    pub nbytes: u64,
}

impl From<&TensorInfo> for TensorRef {
    fn from(t: &TensorInfo) -> Self {
        Self {
            name: t.name.clone(),
            ggml_type: t.ggml_type,
            dims: t.dims.clone(),
            offset: t.offset,
            nbytes: t.nbytes,
        }
    }
}

/// A contiguous byte range of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    /// Absolute file offset.
    pub offset: u64,
    pub len: u64,
}

/// A routed expert tensor: `[dim0, dim1, n_expert]`, expert outermost.
#[derive(Clone, Debug, PartialEq)]
pub struct RoutedTensor {
    pub tensor: TensorRef,
    pub kind: ExpertKind,
    /// Bytes of one row (dim0 elements).
    pub row_bytes: u64,
    /// Bytes of one expert (dim1 rows).
    pub expert_bytes: u64,
    pub n_expert: u64,
}

impl RoutedTensor {
    /// The slice of expert `e`: `offset + e * expert_bytes`, `expert_bytes` long.
    pub fn slice(&self, e: u64) -> Result<Slice, ModelError> {
        if e >= self.n_expert {
            return Err(ModelError::NoSuchExpert {
                name: self.tensor.name.clone(),
                expert: e,
                n_expert: self.n_expert,
            });
        }
        let offset = e
            .checked_mul(self.expert_bytes)
            .and_then(|o| o.checked_add(self.tensor.offset))
            .ok_or_else(|| ModelError::Overflow {
                what: format!("offset of expert {e} in {}", self.tensor.name),
            })?;
        Ok(Slice {
            offset,
            len: self.expert_bytes,
        })
    }
}

/// The shared (always active) expert of a layer.
#[derive(Clone, Debug, PartialEq)]
pub struct SharedExpert {
    pub gate: TensorRef,
    pub up: TensorRef,
    pub down: TensorRef,
}

/// One transformer layer's MoE part.
#[derive(Clone, Debug, PartialEq)]
pub struct Layer {
    pub index: u32,
    /// Hash layer: experts come from `tid2eid[token]` instead of the router's top-k.
    pub hash: bool,
    pub gate: RoutedTensor,
    pub up: RoutedTensor,
    pub down: RoutedTensor,
    /// `ffn_gate_inp.weight`, `[n_embd, n_expert]`.
    pub router: TensorRef,
    /// `exp_probs_b.bias`, `[n_expert]` F32 (optional; selection only).
    pub probs_bias: Option<TensorRef>,
    /// `ffn_gate_tid2eid.weight`, I32 `[n_expert_used, vocab]` (hash layers only).
    pub tid2eid: Option<TensorRef>,
    /// Present when `expert_shared_count` > 0.
    pub shared: Option<SharedExpert>,
}

impl Layer {
    pub fn routed(&self, kind: ExpertKind) -> &RoutedTensor {
        match kind {
            ExpertKind::Gate => &self.gate,
            ExpertKind::Up => &self.up,
            ExpertKind::Down => &self.down,
        }
    }

    /// Bytes of one expert (gate + up + down). Checked at load.
    pub fn expert_bytes(&self) -> u64 {
        self.gate.expert_bytes + self.up.expert_bytes + self.down.expert_bytes
    }
}

/// The shape keys (`deepseek4.*`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Ds4Shape {
    pub n_layer: u32,
    pub n_embd: u64,
    pub vocab: u64,
    pub n_expert: u64,
    pub n_expert_used: u64,
    pub expert_ff: u64,
    pub n_shared: u64,
    pub n_hash_layer: u32,
}

/// The validated DS4 map of one file.
#[derive(Clone, Debug, PartialEq)]
pub struct Ds4Model {
    pub shape: Ds4Shape,
    pub layers: Vec<Layer>,
    /// Every tensor that is not a routed expert tensor, in file order.
    pub resident: Vec<TensorRef>,
    /// Bytes of all routed expert tensors.
    pub routed_bytes: u64,
    /// Bytes of all resident tensors.
    pub resident_bytes: u64,
}

/// A non-negative integer key, at most `max`.
fn key_uint(f: &GgufFile, key: &str, max: u64) -> Result<Option<u64>, ModelError> {
    let Some(v) = f.get(key) else {
        return Ok(None);
    };
    let is_int = matches!(
        v,
        Value::U8(_)
            | Value::I8(_)
            | Value::U16(_)
            | Value::I16(_)
            | Value::U32(_)
            | Value::I32(_)
            | Value::U64(_)
            | Value::I64(_)
    );
    if !is_int {
        return Err(ModelError::KeyType {
            key: key.to_string(),
            expected: "an unsigned integer",
            found: v.type_name().to_string(),
        });
    }
    let n = v.as_u64().ok_or_else(|| ModelError::BadValue {
        key: key.to_string(),
        value: format!("{v:?}"),
        why: "negative".to_string(),
    })?;
    if n > max {
        return Err(ModelError::BadValue {
            key: key.to_string(),
            value: n.to_string(),
            why: format!("exceeds the cap {max}"),
        });
    }
    Ok(Some(n))
}

fn req_uint(f: &GgufFile, key: &str, max: u64) -> Result<u64, ModelError> {
    key_uint(f, key, max)?.ok_or_else(|| ModelError::MissingKey {
        key: key.to_string(),
    })
}

/// Checks `dims == expected`.
fn want_dims(t: &TensorInfo, expected: &[u64], why: &'static str) -> Result<(), ModelError> {
    if t.dims != expected {
        return Err(ModelError::BadShape {
            name: t.name.clone(),
            found: t.dims.clone(),
            expected: expected.to_vec(),
            why,
        });
    }
    Ok(())
}

/// Checks the table's `nbytes` against type and dims, and that the end does not overflow.
fn check_size(t: &TensorInfo) -> Result<(), ModelError> {
    let be = t.ggml_type.block_elems();
    if t.dims.first().is_some_and(|d0| d0 % be != 0) {
        return Err(ModelError::PartialBlock {
            name: t.name.clone(),
            dim0: t.dims[0],
            ggml_type: t.ggml_type,
            block: be,
        });
    }
    let computed = t
        .dims
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .and_then(|n| t.ggml_type.bytes_for(n))
        .ok_or_else(|| ModelError::Overflow {
            what: format!("byte size of tensor {}", t.name),
        })?;
    if computed != t.nbytes {
        return Err(ModelError::SizeMismatch {
            name: t.name.clone(),
            nbytes: t.nbytes,
            computed,
        });
    }
    t.offset
        .checked_add(t.nbytes)
        .ok_or_else(|| ModelError::Overflow {
            what: format!("end offset of tensor {}", t.name),
        })?;
    Ok(())
}

struct Ctx<'a> {
    by_name: HashMap<&'a str, &'a TensorInfo>,
    shape: &'a Ds4Shape,
}

impl<'a> Ctx<'a> {
    fn get(&self, name: &str) -> Option<&'a TensorInfo> {
        self.by_name.get(name).copied()
    }

    fn need(&self, name: &str) -> Result<&'a TensorInfo, ModelError> {
        self.get(name).ok_or_else(|| ModelError::MissingTensor {
            name: name.to_string(),
        })
    }

    fn routed(&self, layer: u32, kind: ExpertKind) -> Result<RoutedTensor, ModelError> {
        let s = self.shape;
        let t = self.need(&kind.tensor_name(layer))?;
        if !ROUTED_TYPES.contains(&t.ggml_type) {
            return Err(ModelError::RoutedType {
                name: t.name.clone(),
                found: t.ggml_type,
            });
        }
        let expected = match kind {
            ExpertKind::Gate | ExpertKind::Up => [s.n_embd, s.expert_ff, s.n_expert],
            ExpertKind::Down => [s.expert_ff, s.n_embd, s.n_expert],
        };
        let why = match kind {
            ExpertKind::Down => "[expert_feed_forward_length, embedding_length, expert_count]",
            _ => "[embedding_length, expert_feed_forward_length, expert_count]",
        };
        want_dims(t, &expected, why)?;
        check_size(t)?;
        let row_bytes = t
            .ggml_type
            .bytes_for(t.dims[0])
            .ok_or_else(|| ModelError::Overflow {
                what: format!("row bytes of {}", t.name),
            })?;
        let expert_bytes =
            row_bytes
                .checked_mul(t.dims[1])
                .ok_or_else(|| ModelError::Overflow {
                    what: format!("expert bytes of {}", t.name),
                })?;
        Ok(RoutedTensor {
            tensor: t.into(),
            kind,
            row_bytes,
            expert_bytes,
            n_expert: s.n_expert,
        })
    }

    fn layer(&self, l: u32) -> Result<Layer, ModelError> {
        let s = self.shape;
        let gate = self.routed(l, ExpertKind::Gate)?;
        let up = self.routed(l, ExpertKind::Up)?;
        let down = self.routed(l, ExpertKind::Down)?;
        if gate.tensor.ggml_type != up.tensor.ggml_type {
            return Err(ModelError::GateUpMismatch {
                layer: l,
                gate: gate.tensor.ggml_type,
                up: up.tensor.ggml_type,
            });
        }
        let p = format!("blk.{l}.");
        let router = self.need(&format!("{p}ffn_gate_inp.weight"))?;
        if !matches!(
            router.ggml_type,
            GgmlType::F16 | GgmlType::F32 | GgmlType::BF16
        ) {
            return Err(ModelError::WrongType {
                name: router.name.clone(),
                found: router.ggml_type,
                expected: "F16, BF16 or F32",
            });
        }
        want_dims(
            router,
            &[s.n_embd, s.n_expert],
            "[embedding_length, expert_count]",
        )?;
        let probs_bias = match self.get(&format!("{p}exp_probs_b.bias")) {
            Some(b) => {
                if b.ggml_type != GgmlType::F32 {
                    return Err(ModelError::WrongType {
                        name: b.name.clone(),
                        found: b.ggml_type,
                        expected: "F32",
                    });
                }
                want_dims(b, &[s.n_expert], "[expert_count]")?;
                Some(b.into())
            }
            None => None,
        };
        let hash = l < s.n_hash_layer;
        let tid2eid = if hash {
            let t = self.need(&format!("{p}ffn_gate_tid2eid.weight"))?;
            if t.ggml_type != GgmlType::I32 {
                return Err(ModelError::WrongType {
                    name: t.name.clone(),
                    found: t.ggml_type,
                    expected: "I32",
                });
            }
            want_dims(
                t,
                &[s.n_expert_used, s.vocab],
                "[expert_used_count, vocab_size]",
            )?;
            Some(t.into())
        } else {
            None
        };
        let shared = if s.n_shared > 0 {
            let g = self.need(&format!("{p}ffn_gate_shexp.weight"))?;
            let u = self.need(&format!("{p}ffn_up_shexp.weight"))?;
            let d = self.need(&format!("{p}ffn_down_shexp.weight"))?;
            let why = "shared expert: gate/up [embedding_length, F], down [F, embedding_length]";
            for t in [g, u, d] {
                if t.dims.len() != 2 {
                    return Err(ModelError::BadShape {
                        name: t.name.clone(),
                        found: t.dims.clone(),
                        expected: vec![s.n_embd, s.expert_ff.saturating_mul(s.n_shared)],
                        why,
                    });
                }
            }
            let ff = g.dims[1];
            want_dims(g, &[s.n_embd, ff], why)?;
            want_dims(u, &[s.n_embd, ff], why)?;
            want_dims(d, &[ff, s.n_embd], why)?;
            Some(SharedExpert {
                gate: g.into(),
                up: u.into(),
                down: d.into(),
            })
        } else {
            None
        };
        Ok(Layer {
            index: l,
            hash,
            gate,
            up,
            down,
            router: router.into(),
            probs_bias,
            tid2eid,
            shared,
        })
    }
}

impl Ds4Model {
    /// Reads `path`'s GGUF header (the hostile-safe parser, default caps; tensor data is not
    /// read) and builds the DS4 map: the file and its map. Errors name the path.
    pub fn open(path: impl AsRef<Path>) -> Result<(GgufFile, Ds4Model), ModelOpenError> {
        let path = path.as_ref();
        let file =
            parse_file(path, &Caps::default()).map_err(|e| ModelOpenError::from_gguf(path, e))?;
        let model = Ds4Model::from_gguf(&file).map_err(|source| ModelOpenError::Layout {
            path: path.to_path_buf(),
            source,
        })?;
        Ok((file, model))
    }

    /// Builds and validates the map from a parsed header.
    pub fn from_gguf(f: &GgufFile) -> Result<Self, ModelError> {
        match f.get("general.architecture") {
            None => {
                return Err(ModelError::MissingKey {
                    key: "general.architecture".to_string(),
                })
            }
            Some(Value::String(a)) if a == ARCH => {}
            Some(Value::String(a)) => {
                return Err(ModelError::WrongArch {
                    found: format!("{a:?}"),
                })
            }
            Some(v) => {
                return Err(ModelError::KeyType {
                    key: "general.architecture".to_string(),
                    expected: "a string",
                    found: v.type_name().to_string(),
                })
            }
        }
        let k = |s: &str| format!("{ARCH}.{s}");
        let n_layer = req_uint(f, &k("block_count"), MAX_LAYERS)?;
        let n_embd = req_uint(f, &k("embedding_length"), u32::MAX.into())?;
        let vocab = req_uint(f, &k("vocab_size"), u32::MAX.into())?;
        let n_expert = req_uint(f, &k("expert_count"), MAX_EXPERTS)?;
        let n_expert_used = req_uint(f, &k("expert_used_count"), MAX_EXPERTS)?;
        let expert_ff = req_uint(f, &k("expert_feed_forward_length"), u32::MAX.into())?;
        let n_shared = key_uint(f, &k("expert_shared_count"), 16)?.unwrap_or(0);
        let n_hash = key_uint(f, &k("hash_layer_count"), MAX_LAYERS)?.unwrap_or(0);
        for (key, v) in [
            ("block_count", n_layer),
            ("embedding_length", n_embd),
            ("vocab_size", vocab),
            ("expert_count", n_expert),
            ("expert_used_count", n_expert_used),
            ("expert_feed_forward_length", expert_ff),
        ] {
            if v == 0 {
                return Err(ModelError::BadValue {
                    key: k(key),
                    value: "0".to_string(),
                    why: "must be positive".to_string(),
                });
            }
        }
        if n_expert_used > n_expert {
            return Err(ModelError::BadValue {
                key: k("expert_used_count"),
                value: n_expert_used.to_string(),
                why: format!("exceeds expert_count {n_expert}"),
            });
        }
        if n_hash > n_layer {
            return Err(ModelError::BadValue {
                key: k("hash_layer_count"),
                value: n_hash.to_string(),
                why: format!("exceeds block_count {n_layer}"),
            });
        }
        // Both fit u32: capped by MAX_LAYERS above.
        let shape = Ds4Shape {
            n_layer: n_layer as u32,
            n_embd,
            vocab,
            n_expert,
            n_expert_used,
            expert_ff,
            n_shared,
            n_hash_layer: n_hash as u32,
        };

        let mut by_name = HashMap::with_capacity(f.tensors.len());
        for t in &f.tensors {
            if by_name.insert(t.name.as_str(), t).is_some() {
                return Err(ModelError::DuplicateTensor {
                    name: t.name.clone(),
                });
            }
            // A routed tensor past block_count means the metadata lies about the layers. Other
            // `blk.N.*` tensors past it (e.g. a multi-token-prediction block a converter kept)
            // are not streamed and are kept as resident bytes.
            if let Some((l, rest)) = split_layer(&t.name) {
                let routed = matches!(
                    rest,
                    "ffn_gate_exps.weight" | "ffn_up_exps.weight" | "ffn_down_exps.weight"
                );
                if routed && l >= n_layer {
                    return Err(ModelError::StrayTensor {
                        name: t.name.clone(),
                        layer: l,
                        n_layer,
                    });
                }
            }
            check_size(t)?;
        }
        let ctx = Ctx {
            by_name,
            shape: &shape,
        };
        let layers = (0..shape.n_layer)
            .map(|l| ctx.layer(l))
            .collect::<Result<Vec<_>, _>>()?;

        let mut routed_bytes = 0u64;
        let mut resident_bytes = 0u64;
        let mut resident = Vec::new();
        let overflow = || ModelError::Overflow {
            what: "total tensor bytes".to_string(),
        };
        for t in &f.tensors {
            if ExpertKind::parse_tensor_name(&t.name).is_some() {
                routed_bytes = routed_bytes.checked_add(t.nbytes).ok_or_else(overflow)?;
            } else {
                resident_bytes = resident_bytes.checked_add(t.nbytes).ok_or_else(overflow)?;
                resident.push(t.into());
            }
        }
        for l in &layers {
            l.gate
                .expert_bytes
                .checked_add(l.up.expert_bytes)
                .and_then(|x| x.checked_add(l.down.expert_bytes))
                .ok_or_else(|| ModelError::Overflow {
                    what: format!("bytes per expert of layer {}", l.index),
                })?;
        }
        Ok(Self {
            shape,
            layers,
            resident,
            routed_bytes,
            resident_bytes,
        })
    }

    pub fn layer(&self, layer: u64) -> Result<&Layer, ModelError> {
        usize::try_from(layer)
            .ok()
            .and_then(|i| self.layers.get(i))
            .ok_or(ModelError::NoSuchLayer {
                layer,
                n_layer: self.shape.n_layer,
            })
    }

    /// The absolute slice of expert `e` of `kind` in `layer`.
    pub fn expert_slice(&self, layer: u64, kind: ExpertKind, e: u64) -> Result<Slice, ModelError> {
        self.layer(layer)?.routed(kind).slice(e)
    }

    /// The routed tensor called `name`, if it is one.
    pub fn routed_tensor(&self, name: &str) -> Option<&RoutedTensor> {
        let (l, kind) = ExpertKind::parse_tensor_name(name)?;
        self.layers.get(l as usize).map(|layer| layer.routed(kind))
    }

    /// Number of routed experts in the file (layers × experts per layer).
    pub fn n_routed_experts(&self) -> u64 {
        u64::from(self.shape.n_layer) * self.shape.n_expert
    }
}

#[cfg(test)]
mod tests;
