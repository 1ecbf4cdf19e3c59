//! Building the DS4 map from a parsed header: the architecture and shape keys, the tensor
//! index (duplicates, stray routed layers, sizes), the per-layer tensors with their expected
//! types and dims, and the byte totals. Split from `mod.rs` so that the map's types read apart
//! from the checks that produce them; every check returns a [`ModelError`] naming the key or
//! tensor at fault.

use super::{
    split_layer, Ds4Shape, ExpertKind, Layer, ModelError, RoutedTensor, SharedExpert, TensorRef,
    ARCH, MAX_EXPERTS, MAX_LAYERS, ROUTED_TYPES,
};
use crate::gguf::{GgmlType, GgufFile, TensorInfo, Value};
use std::collections::HashMap;

/// `general.architecture` must be the string [`ARCH`].
pub(super) fn check_arch(f: &GgufFile) -> Result<(), ModelError> {
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
    Ok(())
}

/// The `deepseek4.*` shape keys, each capped, positive where it must be, and consistent.
pub(super) fn read_shape(f: &GgufFile) -> Result<Ds4Shape, ModelError> {
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
    Ok(Ds4Shape {
        n_layer: n_layer as u32,
        n_embd,
        vocab,
        n_expert,
        n_expert_used,
        expert_ff,
        n_shared,
        n_hash_layer: n_hash as u32,
    })
}

/// The tensors by name: no duplicates, no routed tensor past `n_layer`, every size consistent.
pub(super) fn index_tensors(
    f: &GgufFile,
    n_layer: u64,
) -> Result<HashMap<&str, &TensorInfo>, ModelError> {
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
    Ok(by_name)
}

/// Routed and resident byte totals, and the resident tensors in file order.
pub(super) struct Totals {
    pub routed_bytes: u64,
    pub resident_bytes: u64,
    pub resident: Vec<TensorRef>,
}

pub(super) fn byte_totals(f: &GgufFile) -> Result<Totals, ModelError> {
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
    Ok(Totals {
        routed_bytes,
        resident_bytes,
        resident,
    })
}

/// One expert's three slices must add up without overflow (callers sum them freely).
pub(super) fn check_expert_bytes(layers: &[Layer]) -> Result<(), ModelError> {
    for l in layers {
        l.gate
            .expert_bytes
            .checked_add(l.up.expert_bytes)
            .and_then(|x| x.checked_add(l.down.expert_bytes))
            .ok_or_else(|| ModelError::Overflow {
                what: format!("bytes per expert of layer {}", l.index),
            })?;
    }
    Ok(())
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

pub(super) struct Ctx<'a> {
    pub by_name: HashMap<&'a str, &'a TensorInfo>,
    pub shape: &'a Ds4Shape,
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

    pub(super) fn layer(&self, l: u32) -> Result<Layer, ModelError> {
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
        let router = self.router(&p)?;
        let probs_bias = self.probs_bias(&p)?;
        let hash = l < self.shape.n_hash_layer;
        let tid2eid = if hash { Some(self.tid2eid(&p)?) } else { None };
        let shared = if self.shape.n_shared > 0 {
            Some(self.shared(&p)?)
        } else {
            None
        };
        Ok(Layer {
            index: l,
            hash,
            gate,
            up,
            down,
            router,
            probs_bias,
            tid2eid,
            shared,
        })
    }

    /// `ffn_gate_inp`: F16, BF16 or F32, `[embedding_length, expert_count]`.
    fn router(&self, p: &str) -> Result<TensorRef, ModelError> {
        let s = self.shape;
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
        Ok(router.into())
    }

    /// The optional selection bias `exp_probs_b`: F32, `[expert_count]`.
    fn probs_bias(&self, p: &str) -> Result<Option<TensorRef>, ModelError> {
        let Some(b) = self.get(&format!("{p}exp_probs_b.bias")) else {
            return Ok(None);
        };
        if b.ggml_type != GgmlType::F32 {
            return Err(ModelError::WrongType {
                name: b.name.clone(),
                found: b.ggml_type,
                expected: "F32",
            });
        }
        want_dims(b, &[self.shape.n_expert], "[expert_count]")?;
        Ok(Some(b.into()))
    }

    /// A hash layer's token → expert table: I32, `[expert_used_count, vocab_size]`.
    fn tid2eid(&self, p: &str) -> Result<TensorRef, ModelError> {
        let s = self.shape;
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
        Ok(t.into())
    }

    /// The shared expert's three 2-D tensors, gate/up `[embedding_length, F]`, down the reverse.
    fn shared(&self, p: &str) -> Result<SharedExpert, ModelError> {
        let s = self.shape;
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
        Ok(SharedExpert {
            gate: g.into(),
            up: u.into(),
            down: d.into(),
        })
    }
}
