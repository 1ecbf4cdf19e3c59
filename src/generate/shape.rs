//! The DS4 family of shapes (`tiny`, `demo`, exact `flash`) and, for any shape, the complete
//! tensor inventory and metadata of /work/shared/DS4_TENSORS.md.
//!
//! Small shapes keep every tensor and key of the real file with smaller values; quantized rows
//! need dim0 divisible by the block size (256 for IQ2_XXS / Q2_K / Q4_K, 32 for Q8_0), which is
//! why `tiny` has FF 256, not less.

use crate::gguf::writer::TensorSpec;
use crate::gguf::{GgmlType, Value};
use crate::model::{ExpertKind, ARCH};

use super::FillPlan;

/// The metadata key holding the fill plan ([`FillPlan::spec`]) of a generated file.
pub const FILL_KEY: &str = "ds4stream.gen.fill";

/// A preset size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scale {
    /// A few MiB: 6 layers (3 hash), embedding 256, 16 experts, FF 256, vocab 512.
    #[default]
    Tiny,
    /// 540 MiB of experts: 10 layers (3 hash), embedding 1024, 128 experts, FF 512.
    Demo,
    /// The exact DeepSeek V4 Flash shapes (~81 GiB; experts as holes by default).
    Flash,
}

impl Scale {
    pub fn as_str(self) -> &'static str {
        match self {
            Scale::Tiny => "tiny",
            Scale::Demo => "demo",
            Scale::Flash => "flash",
        }
    }
}

/// Every dimension of the family (names follow DS4_TENSORS.md).
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    pub name: &'static str,
    pub n_layer: u32,
    pub n_hash_layer: u32,
    /// E
    pub n_embd: u64,
    /// HC (hyper-connections)
    pub n_hc: u64,
    /// LQ
    pub q_lora: u64,
    /// H
    pub n_head: u64,
    /// HD
    pub head_dim: u64,
    /// LO
    pub o_lora: u64,
    /// OG
    pub o_groups: u64,
    /// X
    pub n_expert: u64,
    /// U
    pub n_expert_used: u64,
    /// FF
    pub expert_ff: u64,
    /// V
    pub vocab: u64,
    /// IH
    pub idx_heads: u64,
    /// IHD
    pub idx_head_dim: u64,
    pub context_length: u64,
    /// Routed gate/up type (IQ2_XXS in the q2 file).
    pub gate_up_type: GgmlType,
    /// Routed down type (Q2_K in the q2 file).
    pub down_type: GgmlType,
    /// `exp_probs_b.bias` on the non-hash layers.
    pub probs_bias: bool,
    /// `swiglu_clamp_exp` of every layer: 10.0 as in the real file; the tiny model's is lower
    /// (3.0) so that its random weights reach it (~0.5 % of gate/up values) and the tests
    /// exercise the clamp.
    pub swiglu_clamp: f32,
}

impl Shape {
    pub fn for_scale(scale: Scale) -> Self {
        match scale {
            Scale::Tiny => Self::tiny(),
            Scale::Demo => Self::demo(),
            Scale::Flash => Self::flash(),
        }
    }

    /// The exact DeepSeek V4 Flash shape of the q2 imatrix file.
    pub fn flash() -> Self {
        Self {
            name: "flash",
            n_layer: 43,
            n_hash_layer: 3,
            n_embd: 4096,
            n_hc: 4,
            q_lora: 1024,
            n_head: 64,
            head_dim: 512,
            o_lora: 1024,
            o_groups: 8,
            n_expert: 256,
            n_expert_used: 6,
            expert_ff: 2048,
            vocab: 129_280,
            idx_heads: 64,
            idx_head_dim: 128,
            context_length: 1 << 20,
            gate_up_type: GgmlType::IQ2_XXS,
            down_type: GgmlType::Q2_K,
            probs_bias: true,
            swiglu_clamp: 10.0,
        }
    }

    pub fn tiny() -> Self {
        Self {
            name: "tiny",
            // 3 hash layers like the real file, then 3 router-routed ones (the lookahead, the
            // bias and top-k get layers of their own to run on).
            n_layer: 6,
            n_hash_layer: 3,
            n_embd: 256,
            n_hc: 4,
            q_lora: 64,
            n_head: 4,
            head_dim: 64,
            o_lora: 64,
            o_groups: 2,
            n_expert: 16,
            n_expert_used: 6,
            expert_ff: 256,
            vocab: 512,
            idx_heads: 4,
            idx_head_dim: 32,
            context_length: 4096,
            swiglu_clamp: 3.0,
            ..Self::flash()
        }
    }

    pub fn demo() -> Self {
        Self {
            name: "demo",
            n_layer: 10,
            n_hash_layer: 3,
            n_embd: 1024,
            n_hc: 4,
            q_lora: 256,
            n_head: 8,
            head_dim: 128,
            o_lora: 256,
            o_groups: 4,
            n_expert: 128,
            n_expert_used: 6,
            expert_ff: 512,
            vocab: 8192,
            idx_heads: 8,
            idx_head_dim: 64,
            context_length: 16384,
            ..Self::flash()
        }
    }

    /// The Q4_K variant (every routed tensor Q4_K, 13.5 MiB per expert at Flash size).
    pub fn with_q4k(mut self) -> Self {
        self.gate_up_type = GgmlType::Q4_K;
        self.down_type = GgmlType::Q4_K;
        self
    }

    /// The first `n` layers of this shape (`n_hash_layer` cut to `n` too): the same tensors,
    /// names and bytes for those layers, and every per-layer metadata array `n` long. `n` is
    /// not checked here; [`super::Options::shape`] takes 1..=the scale's layers.
    pub fn with_layers(mut self, n: u32) -> Self {
        self.n_layer = n;
        self.n_hash_layer = self.n_hash_layer.min(n);
        self
    }

    /// Compression ratio of layer `l`: 0 for l < 2, 4 for even l, 128 for odd l.
    pub fn compress_ratio(l: u32) -> u64 {
        if l < 2 {
            0
        } else if l % 2 == 0 {
            4
        } else {
            128
        }
    }

    /// The routed type of `kind`.
    pub fn routed_type(&self, kind: ExpertKind) -> GgmlType {
        match kind {
            ExpertKind::Gate | ExpertKind::Up => self.gate_up_type,
            ExpertKind::Down => self.down_type,
        }
    }

    /// Every tensor of the file, in file order: the globals, then layer by layer.
    pub fn inventory(&self) -> Vec<TensorSpec> {
        use GgmlType::{F16, F32, I32, Q8_0};
        let (e, hc_n, x, ff, v) = (
            self.n_embd,
            self.n_hc,
            self.n_expert,
            self.expert_ff,
            self.vocab,
        );
        let hc = e * hc_n;
        let mix = 2 * hc_n + hc_n * hc_n;
        let (lq, h, hd, lo, og) = (
            self.q_lora,
            self.n_head,
            self.head_dim,
            self.o_lora,
            self.o_groups,
        );
        let (ih, ihd) = (self.idx_heads, self.idx_head_dim);
        let mut t = vec![
            TensorSpec::new("token_embd.weight", F16, &[e, v]),
            TensorSpec::new("output_hc_base.weight", F32, &[hc_n]),
            TensorSpec::new("output_hc_fn.weight", F16, &[hc, hc_n]),
            TensorSpec::new("output_hc_scale.weight", F32, &[1]),
            TensorSpec::new("output_norm.weight", F32, &[e]),
            TensorSpec::new("output.weight", Q8_0, &[e, v]),
        ];
        for l in 0..self.n_layer {
            let p = |s: &str| format!("blk.{l}.{s}");
            let mut add =
                |s: &str, ty: GgmlType, dims: &[u64]| t.push(TensorSpec::new(p(s), ty, dims));
            let r = Self::compress_ratio(l);
            add("hc_attn_fn.weight", F16, &[hc, mix]);
            add("hc_attn_scale.weight", F32, &[3]);
            add("hc_attn_base.weight", F32, &[mix]);
            add("attn_norm.weight", F32, &[e]);
            add("attn_q_a.weight", Q8_0, &[e, lq]);
            add("attn_q_a_norm.weight", F32, &[lq]);
            add("attn_q_b.weight", Q8_0, &[lq, h * hd]);
            add("attn_kv.weight", Q8_0, &[e, hd]);
            add("attn_kv_a_norm.weight", F32, &[hd]);
            add("attn_sinks.weight", F32, &[h]);
            add("attn_output_a.weight", Q8_0, &[hd * h / og, og * lo]);
            add("attn_output_b.weight", Q8_0, &[og * lo, e]);
            if r != 0 {
                let c = if r == 4 { 2 } else { 1 };
                add("attn_compressor_ape.weight", F16, &[c * hd, r]);
                add("attn_compressor_kv.weight", F16, &[e, c * hd]);
                add("attn_compressor_gate.weight", F16, &[e, c * hd]);
                add("attn_compressor_norm.weight", F32, &[hd]);
            }
            if r == 4 {
                add("indexer.attn_q_b.weight", F16, &[lq, ih * ihd]);
                add("indexer.proj.weight", F16, &[e, ih]);
                add("indexer_compressor_ape.weight", F16, &[2 * ihd, 4]);
                add("indexer_compressor_kv.weight", F16, &[e, 2 * ihd]);
                add("indexer_compressor_gate.weight", F16, &[e, 2 * ihd]);
                add("indexer_compressor_norm.weight", F32, &[ihd]);
            }
            add("hc_ffn_fn.weight", F16, &[hc, mix]);
            add("hc_ffn_scale.weight", F32, &[3]);
            add("hc_ffn_base.weight", F32, &[mix]);
            add("ffn_norm.weight", F32, &[e]);
            add("ffn_gate_inp.weight", F16, &[e, x]);
            if self.probs_bias && l >= self.n_hash_layer {
                add("exp_probs_b.bias", F32, &[x]);
            }
            add("ffn_gate_exps.weight", self.gate_up_type, &[e, ff, x]);
            add("ffn_up_exps.weight", self.gate_up_type, &[e, ff, x]);
            add("ffn_down_exps.weight", self.down_type, &[ff, e, x]);
            add("ffn_gate_shexp.weight", Q8_0, &[e, ff]);
            add("ffn_up_shexp.weight", Q8_0, &[e, ff]);
            add("ffn_down_shexp.weight", Q8_0, &[ff, e]);
            if l < self.n_hash_layer {
                add("ffn_gate_tid2eid.weight", I32, &[self.n_expert_used, v]);
            }
        }
        t
    }

    /// The metadata, in file order: general.*, deepseek4.*, a generated token list, and the
    /// generator's own `ds4stream.gen.*` keys (seed, scale and fill plan, so a file says how to
    /// recompute its bytes and which of them are holes).
    pub fn metadata(&self, seed: u64, plan: &FillPlan) -> Vec<(String, Value)> {
        let u = |x: u64| Value::U32(x as u32);
        let f = Value::F32;
        let k = |s: &str| format!("{ARCH}.{s}");
        let n = u64::from(self.n_layer);
        let mut md = vec![
            (
                "general.architecture".to_string(),
                Value::String(ARCH.to_string()),
            ),
            (
                "general.name".to_string(),
                Value::String(format!("DS4 synthetic ({})", self.name)),
            ),
            ("general.alignment".to_string(), Value::U32(32)),
        ];
        let shape_keys: Vec<(&str, Value)> = vec![
            ("block_count", u(n)),
            ("context_length", u(self.context_length)),
            ("embedding_length", u(self.n_embd)),
            ("vocab_size", u(self.vocab)),
            ("attention.head_count", u(self.n_head)),
            ("attention.head_count_kv", u(1)),
            ("attention.key_length", u(self.head_dim)),
            ("attention.value_length", u(self.head_dim)),
            ("rope.dimension_count", u(64.min(self.head_dim))),
            ("attention.q_lora_rank", u(self.q_lora)),
            ("attention.output_lora_rank", u(self.o_lora)),
            ("attention.output_group_count", u(self.o_groups)),
            ("expert_count", u(self.n_expert)),
            ("expert_used_count", u(self.n_expert_used)),
            ("expert_feed_forward_length", u(self.expert_ff)),
            ("expert_shared_count", u(1)),
            ("hash_layer_count", u(self.n_hash_layer.into())),
            ("expert_group_count", u(0)),
            ("expert_group_used_count", u(0)),
            ("attention.sliding_window", u(128)),
            ("attention.indexer.head_count", u(self.idx_heads)),
            ("attention.indexer.key_length", u(self.idx_head_dim)),
            ("attention.indexer.top_k", u(512)),
            ("hyper_connection.count", u(self.n_hc)),
            ("hyper_connection.sinkhorn_iterations", u(20)),
            ("hyper_connection.epsilon", f(1e-6)),
            (
                "attention.compress_ratios",
                Value::Array(
                    (0..self.n_layer)
                        .map(|l| u(Self::compress_ratio(l)))
                        .collect(),
                ),
            ),
            (
                "swiglu_clamp_exp",
                Value::Array((0..self.n_layer).map(|_| f(self.swiglu_clamp)).collect()),
            ),
            ("rope.freq_base", f(10000.0)),
            ("rope.scaling.original_context_length", u(65536)),
            ("rope.scaling.factor", f(16.0)),
            ("rope.scaling.yarn_beta_fast", f(32.0)),
            ("rope.scaling.yarn_beta_slow", f(1.0)),
            ("attention.compress_rope_freq_base", f(160000.0)),
            ("expert_weights_scale", f(1.5)),
            ("expert_weights_norm", Value::Bool(true)),
            ("attention.layer_norm_rms_epsilon", f(1e-6)),
        ];
        md.extend(shape_keys.into_iter().map(|(key, v)| (k(key), v)));
        md.push((
            "tokenizer.ggml.model".to_string(),
            Value::String("gpt2".to_string()),
        ));
        md.push((
            "tokenizer.ggml.tokens".to_string(),
            Value::Array(
                (0..self.vocab)
                    .map(|i| Value::String(token_text(i)))
                    .collect(),
            ),
        ));
        // BPE merges, one per word token ("tok12 3" makes tok123), as the real file carries
        // (~129k): with them the Flash header, and so every offset, is close to the real size.
        md.push((
            "tokenizer.ggml.merges".to_string(),
            Value::Array(
                (FIRST_WORD_TOKEN..self.vocab)
                    .map(|i| Value::String(format!("tok{} {}", i / 10, i % 10)))
                    .collect(),
            ),
        ));
        md.push(("tokenizer.ggml.bos_token_id".to_string(), Value::U32(0)));
        md.push(("tokenizer.ggml.eos_token_id".to_string(), Value::U32(1)));
        md.push(("ds4stream.gen.seed".to_string(), Value::U64(seed)));
        md.push((
            "ds4stream.gen.shape".to_string(),
            Value::String(self.name.to_string()),
        ));
        md.push((FILL_KEY.to_string(), Value::String(plan.spec())));
        md
    }
}

/// The special tokens the DS4 C engine looks up by their exact text (`vocab_load` in ds4.c),
/// at the start of the vocabulary: BOS id 0 and EOS id 1 as in the real file, then user,
/// assistant, think start, think end and DSML. `｜` is U+FF5C (fullwidth vertical line), `▁` is
/// U+2581.
pub const SPECIAL_TOKENS: [&str; 7] = [
    "<\u{FF5C}begin\u{2581}of\u{2581}sentence\u{FF5C}>",
    "<\u{FF5C}end\u{2581}of\u{2581}sentence\u{FF5C}>",
    "<\u{FF5C}User\u{FF5C}>",
    "<\u{FF5C}Assistant\u{FF5C}>",
    "<think>",
    "</think>",
    "\u{FF5C}DSML\u{FF5C}",
];

/// The first byte token (after the special tokens).
const FIRST_BYTE_TOKEN: u64 = SPECIAL_TOKENS.len() as u64;

/// The first generated token that is a plain word (after the special and 256 byte tokens).
pub(super) const FIRST_WORD_TOKEN: u64 = FIRST_BYTE_TOKEN + 256;

/// The text of generated token `i`: special tokens first, then the 256 byte tokens (GPT-2's
/// byte-level alphabet, as the real file's `gpt2` tokenizer has, so the C engine's BPE turns any
/// prompt into tokens of this vocabulary), then plain words.
fn token_text(i: u64) -> String {
    match i {
        0..FIRST_BYTE_TOKEN => SPECIAL_TOKENS[i as usize].to_string(),
        FIRST_BYTE_TOKEN..FIRST_WORD_TOKEN => byte_char((i - FIRST_BYTE_TOKEN) as u8).to_string(),
        _ => format!("tok{i}"),
    }
}

/// GPT-2's byte-level BPE alphabet: printable bytes stand for themselves, the other 68 bytes
/// (controls, space, 0x7F..0xA0, 0xAD) map in order to U+0100 onwards.
fn byte_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let below = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(0x100 + below).expect("U+0100..U+0143 are chars")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::choice::Choice;

    /// `gen-model --help` states each scale's layers and, for tiny and demo, its other sizes:
    /// the text is checked against the shape it describes (it said 4 layers when tiny had 6).
    #[test]
    fn scale_help_states_the_shape() {
        for scale in [Scale::Tiny, Scale::Demo] {
            let sh = Shape::for_scale(scale);
            let help = scale.help().unwrap();
            let want = format!(
                "{} layers ({} hash), embedding {}, {} experts, FF {}",
                sh.n_layer, sh.n_hash_layer, sh.n_embd, sh.n_expert, sh.expert_ff
            );
            assert!(help.contains(&want), "{scale:?}: {help:?} lacks {want:?}");
        }
        let help = Scale::Tiny.help().unwrap();
        assert!(
            help.ends_with(&format!("vocab {}", Shape::tiny().vocab)),
            "{help}"
        );
    }
}
