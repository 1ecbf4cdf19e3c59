//! One token through the MoE stack (docs/MOE_STACK.md), on the host reference kernels.

use super::experts::{ExpertData, ExpertProvider, Fetch};
use super::{DecodeError, MoeWeights};
use crate::compute::{self, f16::f16_to_f32, ops, ComputeError};
use crate::engine::Engine;
use crate::gguf::GgmlType;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// What one layer chose for one token (the `--record-trace` row).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenTrace {
    pub layer: usize,
    pub experts: Vec<u32>,
    /// Final weights (after normalisation and scale).
    pub weights: Vec<f32>,
}

/// The MoE stack over one file's weights.
pub struct MoeStack<'a> {
    pub weights: &'a MoeWeights,
    engine: &'a Engine,
    /// Speculative lookahead: guess the next layer's experts before computing this one's.
    lookahead: bool,
}

fn comp(what: &str) -> impl FnOnce(ComputeError) -> DecodeError + '_ {
    move |source| DecodeError::Compute {
        what: what.to_string(),
        source,
    }
}

impl<'a> MoeStack<'a> {
    pub fn new(weights: &'a MoeWeights, engine: &'a Engine) -> Self {
        Self {
            weights,
            engine,
            lookahead: false,
        }
    }

    /// Speculative lookahead (`--ssd-streaming-lookahead`): once a layer's experts are
    /// requested, the next (router-routed) layer's router runs on this layer's input (the
    /// residual stream changes by this layer's output only) and the experts it picks are handed
    /// to [`ExpertProvider::speculate`], so their reads overlap this layer's compute. Results
    /// do not change: the guess only starts reads.
    pub fn with_lookahead(mut self, on: bool) -> Self {
        self.lookahead = on;
        self
    }

    /// Row `t` of token_embd as f32 (read from the file: E × 2 bytes).
    fn embed(&self, t: u32) -> Result<Vec<f32>, DecodeError> {
        let p = &self.weights.params;
        if u64::from(t) >= p.vocab {
            return Err(DecodeError::Token {
                id: t.into(),
                vocab: p.vocab,
            });
        }
        let row = p.n_embd * 2;
        let te = &self.weights.token_embd;
        let b = self
            .engine
            .read_bytes(te.offset + u64::from(t) * row as u64, row)
            .map_err(|source| DecodeError::Read {
                what: format!("{} row {t}", te.name),
                source,
            })?;
        Ok(b.chunks_exact(2)
            .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
            .collect())
    }

    /// Token `t` through every layer: returns h (E values) and, per layer, the routing.
    /// `forced`: replay this routing (one entry per layer, validated by the caller) instead of
    /// the router's (`--routing-trace`, for IO studies; the router still runs).
    pub fn token(
        &self,
        t: u32,
        experts: &mut dyn ExpertProvider,
        forced: Option<&[TokenTrace]>,
    ) -> Result<(Vec<f32>, Vec<TokenTrace>), DecodeError> {
        let w = self.weights;
        let p = &w.params;
        let e = p.n_embd;
        let mut h = self.embed(t)?;
        experts.begin_token(t, w)?;
        let mut trace = Vec::with_capacity(w.layers.len());
        let mut x = vec![0f32; e];
        let mut z = vec![0f32; p.n_expert];
        let mut pr = vec![0f32; p.n_expert];
        // The lookahead's own router buffers (next layer's x, z, p).
        let (mut xn, mut zn, mut prn) = (
            vec![0f32; e],
            vec![0f32; p.n_expert],
            vec![0f32; p.n_expert],
        );
        for (l, lw) in w.layers.iter().enumerate() {
            ops::rms_norm(&h, &lw.ffn_norm, p.eps, &mut x).map_err(comp("ffn_norm"))?;
            compute::matvec(GgmlType::F16, &lw.router, p.n_expert, e, &x, &mut z)
                .map_err(comp("router"))?;
            ops::sqrt_softplus_slice(&z, &mut pr).map_err(comp("sqrt(softplus)"))?;
            let (ids, wts) = match forced {
                Some(r) => (r[l].experts.clone(), r[l].weights.clone()),
                None => route(p, lw, t, &pr)?,
            };
            let clamp = p.clamp[l];
            // Hits first, misses as they land; the sum below is in router order regardless.
            let fetches = experts.request(l, &ids)?;
            if let Some(next) = w
                .layers
                .get(l + 1)
                .filter(|n| self.lookahead && n.tid2eid.is_none())
            {
                ops::rms_norm(&h, &next.ffn_norm, p.eps, &mut xn)
                    .map_err(comp("lookahead norm"))?;
                compute::matvec(GgmlType::F16, &next.router, p.n_expert, e, &xn, &mut zn)
                    .map_err(comp("lookahead router"))?;
                ops::sqrt_softplus_slice(&zn, &mut prn)
                    .map_err(comp("lookahead sqrt(softplus)"))?;
                let (guess, _) = route(p, next, t, &prn)?;
                experts.speculate(l + 1, &guess)?;
            }
            let mut outs: Vec<Option<Vec<f32>>> = vec![None; ids.len()];
            let ffn = |d: &ExpertData| {
                compute::expert_ffn(
                    (d.gate.0, &d.gate.1),
                    (d.up.0, &d.up.1),
                    (d.down.0, &d.down.1),
                    &x,
                    clamp,
                )
                .map_err(comp("routed expert"))
            };
            for (j, f) in fetches.iter().enumerate() {
                if let Fetch::Ready(d) = f {
                    outs[j] = Some(ffn(d)?);
                }
            }
            for (j, f) in fetches.iter().enumerate() {
                if let Fetch::Pending(slot) = f {
                    let d: Arc<ExpertData> = experts.wait(*slot)?;
                    outs[j] = Some(ffn(&d)?);
                }
            }
            let mut y = vec![0f32; e];
            for (j, o) in outs.iter().enumerate() {
                let o = o.as_ref().expect("every expert was computed above");
                ops::weighted_add(&mut y, wts[j], o).map_err(comp("weighted sum"))?;
            }
            experts.end_layer(l);
            if let Some([g, u, d]) = &lw.shared {
                let s = compute::expert_ffn((g.0, &g.1), (u.0, &u.1), (d.0, &d.1), &x, clamp)
                    .map_err(comp("shared expert"))?;
                for (yi, si) in y.iter_mut().zip(&s) {
                    *yi += si;
                }
            }
            for (hi, yi) in h.iter_mut().zip(&y) {
                *hi += yi;
            }
            trace.push(TokenTrace {
                layer: l,
                experts: ids,
                weights: wts,
            });
        }
        Ok((h, trace))
    }
}

/// The experts of token `t` at one layer and their final weights, from the router's
/// probabilities `pr` (docs/MOE_STACK.md: hash layers take `tid2eid[t]`, others the top-k of p + bias;
/// weights from p, normalised when `norm`, then scaled). Shared by every backend: the routing is
/// computed on the host everywhere.
pub(crate) fn route(
    p: &super::MoeParams,
    lw: &super::weights::LayerWeights,
    t: u32,
    pr: &[f32],
) -> Result<(Vec<u32>, Vec<f32>), DecodeError> {
    let k = p.n_used;
    let ids: Vec<u32> = match &lw.tid2eid {
        Some(tid) => tid[t as usize * k..(t as usize + 1) * k].to_vec(),
        None => ops::top_k(pr, lw.bias.as_deref(), k)
            .map_err(comp("top-k"))?
            .into_iter()
            .map(|i| i as u32)
            .collect(),
    };
    let mut wts: Vec<f32> = ids.iter().map(|&i| pr[i as usize]).collect();
    if p.norm {
        let sum: f32 = wts.iter().sum();
        for v in &mut wts {
            *v /= sum;
        }
    }
    for v in &mut wts {
        *v *= p.scale;
    }
    Ok((ids, wts))
}

/// SHA-256 (hex) of hidden states as dumped: token-major little-endian f32.
pub fn digest_hex<'h>(states: impl IntoIterator<Item = &'h [f32]>) -> String {
    let mut d = Sha256::new();
    for h in states {
        for v in h {
            d.update(v.to_le_bytes());
        }
    }
    d.finalize().iter().map(|b| format!("{b:02x}")).collect()
}
