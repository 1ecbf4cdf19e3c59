//! Writing a generated model through the streaming GGUF writer, following a [`FillPlan`].
//! Memory stays bounded by one chunk whatever the file size.

use super::{FillPlan, GenError, Generator, Region, Shape};
use crate::gguf::writer::{self, GgufWriter, Layout, Sink};
use crate::model::ExpertKind;

/// The header layout of `shape` written with `seed` and `plan` (tensor offsets, data offset,
/// file length). The plan is part of the metadata, so it moves the data offset.
pub fn plan_layout(shape: &Shape, seed: u64, plan: &FillPlan) -> Result<Layout, GenError> {
    Ok(writer::plan(
        &shape.metadata(seed, plan),
        &shape.inventory(),
    )?)
}

/// What a generation run produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenSummary {
    pub tensors: usize,
    /// Logical file length.
    pub file_len: u64,
    /// Tensor bytes actually written.
    pub written_bytes: u64,
    /// Tensor bytes left as holes (read as zeros).
    pub hole_bytes: u64,
    pub n_layer: u32,
    pub n_expert: u64,
    /// Bytes of one expert (gate + up + down).
    pub expert_bytes: u64,
    /// Bytes of all routed expert tensors.
    pub routed_bytes: u64,
    /// Bytes of all other tensors.
    pub resident_bytes: u64,
}

impl GenSummary {
    /// One line for the CLI.
    pub fn line(&self) -> String {
        use crate::units::{group_digits, human_bytes};
        format!(
            "{} tensors, {} B ({}) file, {} B written, {} B holes; {} layers x {} experts of {} B \
             (routed {}, resident {})",
            self.tensors,
            group_digits(self.file_len),
            human_bytes(self.file_len),
            group_digits(self.written_bytes),
            group_digits(self.hole_bytes),
            self.n_layer,
            self.n_expert,
            group_digits(self.expert_bytes),
            human_bytes(self.routed_bytes),
            human_bytes(self.resident_bytes),
        )
    }
}

pub(crate) fn check_plan(shape: &Shape, plan: &FillPlan) -> Result<(), GenError> {
    if let Some(&l) = plan
        .fill_layers
        .iter()
        .find(|&&l| l >= u64::from(shape.n_layer))
    {
        return Err(GenError::BadPlan {
            why: format!(
                "fill layer {l} does not exist (the model has {} layers, numbered from 0)",
                shape.n_layer
            ),
        });
    }
    if let Some(list) = &plan.fill_experts {
        if let Some(&e) = list.iter().find(|&&e| e >= shape.n_expert) {
            return Err(GenError::BadPlan {
                why: format!(
                    "fill expert {e} does not exist ({} experts)",
                    shape.n_expert
                ),
            });
        }
    }
    Ok(())
}

/// Writes the whole model into `out` (which should be empty: holes are never written, so old
/// bytes would survive in them). `progress(pos)` is called with the file position reached.
pub fn write_model<W: Sink>(
    out: W,
    generator: &Generator,
    plan: &FillPlan,
    chunk: usize,
    progress: &mut dyn FnMut(u64),
) -> Result<(W, GenSummary), GenError> {
    let shape = generator.shape();
    check_plan(shape, plan)?;
    let layout = plan_layout(shape, generator.seed(), plan)?;
    let mut summary = GenSummary {
        tensors: layout.tensors.len(),
        file_len: layout.total_len,
        written_bytes: 0,
        hole_bytes: 0,
        n_layer: shape.n_layer,
        n_expert: shape.n_expert,
        expert_bytes: ExpertKind::ALL
            .iter()
            .map(|&k| generator.expert_bytes(k))
            .sum(),
        routed_bytes: 0,
        resident_bytes: 0,
    };
    let tensors = layout.tensors.clone();
    let mut w = GgufWriter::new(out, layout, chunk)?;
    for (i, t) in tensors.iter().enumerate() {
        if ExpertKind::parse_tensor_name(&t.name).is_some() {
            summary.routed_bytes += t.nbytes;
        } else {
            summary.resident_bytes += t.nbytes;
        }
        let mut write = |start: u64, len: u64| -> Result<(), GenError> {
            let mut fill = |off: u64, buf: &mut [u8]| -> Result<(), writer::FillError> {
                generator.tensor_bytes(&t.name, off, buf)?;
                progress(t.offset + off + buf.len() as u64);
                Ok(())
            };
            w.write_tensor_range(i, start, len, &mut fill)?;
            Ok(())
        };
        match plan.region(&t.name) {
            Region::Whole => {
                write(0, t.nbytes)?;
                summary.written_bytes += t.nbytes;
            }
            Region::Hole => summary.hole_bytes += t.nbytes,
            Region::Experts(list) => {
                let eb = t.nbytes / shape.n_expert;
                for &e in &list {
                    write(e * eb, eb)?;
                }
                let written = eb * list.len() as u64;
                summary.written_bytes += written;
                summary.hole_bytes += t.nbytes - written;
            }
        }
        progress(t.offset + t.nbytes);
    }
    let out = w.finish()?;
    progress(summary.file_len);
    Ok((out, summary))
}
