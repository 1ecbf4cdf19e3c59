//! Human and machine summaries of a [`Ds4Model`] (what `ds4 inspect` shows as the DS4 view).

use super::{Ds4Model, ExpertKind, Layer};
use crate::units::{group_digits, human_bytes};

/// The per-expert signature of a layer: (type, expert bytes) of gate, up, down.
fn signature(l: &Layer) -> [(crate::gguf::GgmlType, u64); 3] {
    ExpertKind::ALL.map(|k| (l.routed(k).tensor.ggml_type, l.routed(k).expert_bytes))
}

fn expert_line(l: &Layer) -> String {
    let parts: Vec<String> = ExpertKind::ALL
        .iter()
        .map(|&k| {
            let r = l.routed(k);
            format!(
                "{} {} {} B",
                k.as_str(),
                r.tensor.ggml_type,
                group_digits(r.expert_bytes)
            )
        })
        .collect();
    format!(
        "{} = {} B ({}) per expert",
        parts.join(", "),
        group_digits(l.expert_bytes()),
        human_bytes(l.expert_bytes())
    )
}

impl Ds4Model {
    /// True when every layer has the same routed types and expert sizes.
    pub fn is_uniform(&self) -> bool {
        let first = self.layers.first().map(signature);
        self.layers.iter().all(|l| Some(signature(l)) == first)
    }

    /// A few lines for humans.
    pub fn summary_text(&self) -> String {
        let s = &self.shape;
        let mut out = format!(
            "DS4 layout: {} layers ({} hash), {} experts per layer, {} used per token, {} shared\n",
            s.n_layer, s.n_hash_layer, s.n_expert, s.n_expert_used, s.n_shared
        );
        if self.is_uniform() {
            if let Some(l) = self.layers.first() {
                out.push_str(&format!("experts: {}\n", expert_line(l)));
            }
        } else {
            for l in &self.layers {
                out.push_str(&format!("layer {}: {}\n", l.index, expert_line(l)));
            }
        }
        out.push_str(&format!(
            "routed: {} experts, {} B ({}); resident: {} tensors, {} B ({})\n",
            group_digits(self.n_routed_experts()),
            group_digits(self.routed_bytes),
            human_bytes(self.routed_bytes),
            self.resident.len(),
            group_digits(self.resident_bytes),
            human_bytes(self.resident_bytes),
        ));
        out
    }
}
