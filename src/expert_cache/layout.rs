//! The one slot layout every expert loader uses (the GPU stack's slab, the RAM tier, the C
//! engine's pattern, `expert_store` and so the C ABI): gate at 0, up and down each at the next
//! multiple of [`SLICE_ALIGN`], slots [`SLOT_ALIGN`]-aligned, one slot size for every layer
//! (the largest). Pure arithmetic on the model's map: no memory here.
//!
//! DS4 Flash's slices (2,359,296 B each) are already 4096-aligned, so a Flash slot is exactly
//! its expert's 7,077,888 bytes; a model with odd slice sizes pays at most 255 B per slice and
//! 4095 B per slot.

use crate::gguf::GgmlType;
use crate::model::{Ds4Model, ExpertKind, ModelError, RoutedTensor};

use super::ExpertKey;

/// Alignment of each slice inside a slot (enough for any GPU kernel's vector loads).
pub const SLICE_ALIGN: u64 = 256;
/// Alignment of slots in a slab.
pub const SLOT_ALIGN: u64 = 4096;

/// The three slices of an expert in the order they are read and used.
pub const KINDS: [ExpertKind; 3] = [ExpertKind::Gate, ExpertKind::Up, ExpertKind::Down];

/// Where one slice sits inside a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlicePlace {
    /// Offset inside the slot.
    pub at: usize,
    pub len: usize,
    pub ty: GgmlType,
}

/// One slice to read: the file range and its place inside the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SliceRead {
    pub offset: u64,
    pub place: SlicePlace,
}

impl SliceRead {
    /// Its offset in a slab whose slot starts at `base`.
    pub fn at(&self, base: usize) -> usize {
        base + self.place.at
    }
    pub fn len(&self) -> usize {
        self.place.len
    }
    pub fn is_empty(&self) -> bool {
        self.place.len == 0
    }
}

/// Why a model's experts do not fit a slot layout.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("the model has no layers")]
    NoLayers,
    #[error("expert sizes overflow")]
    Overflow,
    #[error("layer {0} is not in the slot layout")]
    NoSuchLayer(u16),
    #[error("expert {expert} of layer {layer}")]
    Slice {
        layer: u16,
        expert: u16,
        #[source]
        source: ModelError,
    },
}

/// See the module docs.
#[derive(Clone, Debug, PartialEq)]
pub struct SlotLayout {
    layers: Vec<[SlicePlace; 3]>,
    /// Per layer gate, up and down as the model maps them (the file ranges of each expert).
    routed: Vec<[RoutedTensor; 3]>,
    slot_bytes: usize,
}

fn align_up(v: u64, a: u64) -> Option<u64> {
    v.checked_add(a - 1).map(|x| x / a * a)
}

impl SlotLayout {
    pub fn new(model: &Ds4Model) -> Result<Self, LayoutError> {
        let mut layers = Vec::with_capacity(model.layers.len());
        let mut routed = Vec::with_capacity(model.layers.len());
        let mut slot = 0u64;
        for l in &model.layers {
            let mut at = 0u64;
            let mut places = [SlicePlace {
                at: 0,
                len: 0,
                ty: GgmlType::F32,
            }; 3];
            for (p, kind) in places.iter_mut().zip(KINDS) {
                let r = l.routed(kind);
                at = align_up(at, SLICE_ALIGN).ok_or(LayoutError::Overflow)?;
                *p = SlicePlace {
                    at: usize::try_from(at).map_err(|_| LayoutError::Overflow)?,
                    len: usize::try_from(r.expert_bytes).map_err(|_| LayoutError::Overflow)?,
                    ty: r.tensor.ggml_type,
                };
                at = at
                    .checked_add(r.expert_bytes)
                    .ok_or(LayoutError::Overflow)?;
            }
            slot = slot.max(align_up(at, SLOT_ALIGN).ok_or(LayoutError::Overflow)?);
            layers.push(places);
            routed.push(KINDS.map(|k| l.routed(k).clone()));
        }
        if layers.is_empty() {
            return Err(LayoutError::NoLayers);
        }
        let slot_bytes = usize::try_from(slot).map_err(|_| LayoutError::Overflow)?;
        Ok(Self {
            layers,
            routed,
            slot_bytes,
        })
    }

    /// Bytes per slot (a slab holds its slots back to back).
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// Gate, up and down of `layer`'s experts inside a slot.
    pub fn places(&self, layer: usize) -> &[SlicePlace; 3] {
        &self.layers[layer]
    }

    /// `slots` slots in bytes, if that fits a `usize`.
    pub fn slab_bytes(&self, slots: usize) -> Option<usize> {
        slots.checked_mul(self.slot_bytes)
    }

    /// The three reads of `key` (gate, up, down): file ranges as the model maps them, places
    /// inside the slot.
    pub fn reads(&self, key: ExpertKey) -> Result<[SliceRead; 3], LayoutError> {
        let places = self
            .layers
            .get(key.layer as usize)
            .ok_or(LayoutError::NoSuchLayer(key.layer))?;
        let mut out = [SliceRead {
            offset: 0,
            place: places[0],
        }; 3];
        let routed = &self.routed[key.layer as usize];
        for ((o, rt), place) in out.iter_mut().zip(routed).zip(places) {
            let s = rt
                .slice(key.expert.into())
                .map_err(|source| LayoutError::Slice {
                    layer: key.layer,
                    expert: key.expert,
                    source,
                })?;
            *o = SliceRead {
                offset: s.offset,
                place: SlicePlace {
                    len: s.len as usize,
                    ..*place
                },
            };
        }
        Ok(out)
    }
}
