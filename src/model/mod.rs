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

mod build;
mod error;
mod summary;

pub use error::{ModelError, ModelOpenError};

use crate::gguf::{parse_file, Caps, GgmlType, GgufFile, TensorInfo};
use build::{byte_totals, check_arch, check_expert_bytes, index_tensors, read_shape, Ctx};
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
        check_arch(f)?;
        let shape = read_shape(f)?;
        let ctx = Ctx {
            by_name: index_tensors(f, shape.n_layer.into())?,
            shape: &shape,
        };
        let layers = (0..shape.n_layer)
            .map(|l| ctx.layer(l))
            .collect::<Result<Vec<_>, _>>()?;
        let totals = byte_totals(f)?;
        check_expert_bytes(&layers)?;
        Ok(Self {
            shape,
            layers,
            resident: totals.resident,
            routed_bytes: totals.routed_bytes,
            resident_bytes: totals.resident_bytes,
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
