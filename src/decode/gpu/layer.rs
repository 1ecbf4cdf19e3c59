//! One token's steps on the GPU, in the order [`GpuMoe::token`] runs them: the embedding row,
//! the hash layers' reads, and per layer the routing (router on the GPU, top-k on the host, the
//! lookahead's guess), the routed experts (hits while the misses are read, then the misses) and
//! the weighted sum with the shared expert into h.

use super::{dev_err, f32s, GpuMoe};
use crate::compute::f16::f16_to_f32;
use crate::decode::slots::Ask;
use crate::decode::{DecodeError, TokenTrace};
use crate::device::GpuDevice;
use crate::gguf::GgmlType;

/// A layer's routing: the experts and their weights, and the lookahead's guess of the next
/// layer's experts (when it ran).
pub(super) struct Routing {
    pub ids: Vec<u32>,
    pub weights: Vec<f32>,
    pub guess: Option<Vec<u32>>,
}

impl<D: GpuDevice> GpuMoe<'_, D> {
    /// The embedding row of token `t` (F16) to f32 on the host, uploaded into h.
    pub(super) fn upload_embedding(&mut self, t: u32) -> Result<(), DecodeError> {
        let e = self.w.params.n_embd;
        let te = &self.w.token_embd;
        let row = self
            .engine
            .read_bytes(te.offset + u64::from(t) * (e as u64 * 2), e * 2)
            .map_err(|source| DecodeError::Read {
                what: format!("{} row {t}", te.name),
                source,
            })?;
        {
            let dst = self.s.up_h.as_mut_slice().map_err(dev_err("pinned"))?;
            for (i, c) in row.chunks_exact(2).enumerate() {
                let v = f16_to_f32(u16::from_le_bytes([c[0], c[1]]));
                dst[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        self.dev
            .copy_h2d_async(&mut self.s.up_h, 0, &self.s.h, 0, e * 4)
            .map_err(dev_err("upload h"))?;
        self.s.up_h.wait().map_err(dev_err("upload h"))
    }

    /// Queues the reads of the hash layers' experts (their ids come from the token), past the
    /// first `n_full` layers (all resident).
    pub(super) fn prefetch_hash_layers(
        &mut self,
        t: u32,
        n_full: usize,
    ) -> Result<(), DecodeError> {
        let w = self.w;
        let k = w.params.n_used;
        for (l, lw) in w.layers.iter().enumerate().skip(n_full) {
            if let Some(tid) = &lw.tid2eid {
                let ids = &tid[t as usize * k..(t as usize + 1) * k];
                self.slots.prefetch(l, ids)?;
            }
        }
        Ok(())
    }

    /// Layer `l`'s router on the GPU and top-k on the host (or the `forced` routing); with the
    /// lookahead, also the next router-routed layer's router on this layer's input.
    pub(super) fn route_layer(
        &mut self,
        l: usize,
        t: u32,
        forced: Option<&[TokenTrace]>,
    ) -> Result<Routing, DecodeError> {
        let w = self.w;
        let p = &w.params;
        let (e, lw) = (p.n_embd, &w.layers[l]);
        let gl = &self.layers[l];
        let d = &self.dev;
        d.rms_norm(&self.s.h, &gl.norm, &self.s.x, e, p.eps)
            .map_err(dev_err("rms_norm"))?;
        d.matvec(
            GgmlType::F16,
            &gl.router,
            0,
            &self.s.x,
            &self.s.z,
            p.n_expert,
            e,
        )
        .map_err(dev_err("router"))?;
        d.sqrt_softplus(&self.s.z, &self.s.p, p.n_expert)
            .map_err(dev_err("sqrt_softplus"))?;
        // The lookahead: the next router-routed layer's router on this layer's input.
        let next = w
            .layers
            .get(l + 1)
            .filter(|n| self.lookahead && n.tid2eid.is_none());
        if next.is_some() {
            let nl = &self.layers[l + 1];
            d.rms_norm(&self.s.h, &nl.norm, &self.s.xn, e, p.eps)
                .map_err(dev_err("lookahead rms_norm"))?;
            d.matvec(
                GgmlType::F16,
                &nl.router,
                0,
                &self.s.xn,
                &self.s.zn,
                p.n_expert,
                e,
            )
            .map_err(dev_err("lookahead router"))?;
            d.sqrt_softplus(&self.s.zn, &self.s.pn, p.n_expert)
                .map_err(dev_err("lookahead sqrt_softplus"))?;
        }
        // Waits for every kernel so far: nothing reads a slot the reads below may reuse.
        let mut probs = vec![0u8; p.n_expert * 4];
        d.read_d2h(&self.s.p, 0, &mut probs)
            .map_err(dev_err("read back router probabilities"))?;
        let pr = f32s(&probs);
        let guess = match next {
            Some(n) => {
                d.read_d2h(&self.s.pn, 0, &mut probs)
                    .map_err(dev_err("read back lookahead probabilities"))?;
                Some(crate::decode::stack::route(p, n, t, &f32s(&probs))?.0)
            }
            None => None,
        };
        let (ids, weights) = match forced {
            Some(r) => (r[l].experts.clone(), r[l].weights.clone()),
            None => crate::decode::stack::route(p, lw, t, &pr)?,
        };
        self.slots.note_demand(l, &ids);
        Ok(Routing {
            ids,
            weights,
            guess,
        })
    }

    /// Layer `l`'s routed experts into `s.o[j]`: from the full-layer slab for the first
    /// `n_full` layers; else the cache's hits first (their kernels run while the misses are
    /// read), then each miss once it has landed. The lookahead's guesses queue behind this
    /// layer's demand reads.
    pub(super) fn routed_experts(
        &mut self,
        l: usize,
        n_full: usize,
        r: &Routing,
        clamp: f32,
    ) -> Result<(), DecodeError> {
        if let Some((full, _)) = self.full.as_ref().filter(|f| l < f.1) {
            let x = self.w.params.n_expert;
            for (j, &id) in r.ids.iter().enumerate() {
                let base = (l * x + id as usize) * self.slots.layout.slot_bytes();
                self.expert_at(full, l, base, &self.s.o[j], clamp)
                    .map_err(dev_err("routed expert"))?;
            }
        }
        let slots = if l < n_full {
            Vec::new()
        } else {
            self.slots.request(l, &r.ids, Ask::Demand)?
        };
        if let Some(g) = &r.guess {
            self.speculate(l + 1, g)?;
        }
        for (j, &slot) in slots.iter().enumerate() {
            if !self.slots.is_pending(slot) {
                self.expert(l, slot, &self.s.o[j], clamp)
                    .map_err(dev_err("routed expert"))?;
            }
        }
        for (j, &slot) in slots.iter().enumerate() {
            if self.slots.is_pending(slot) {
                self.slots.ready(slot)?;
                self.expert(l, slot, &self.s.o[j], clamp)
                    .map_err(dev_err("routed expert"))?;
            }
        }
        Ok(())
    }

    /// y = Σ weights[j] · o[j] in router order, plus the shared expert; then h += y.
    pub(super) fn combine(
        &mut self,
        l: usize,
        weights: &[f32],
        clamp: f32,
    ) -> Result<(), DecodeError> {
        let (e, k) = (self.w.params.n_embd, self.w.params.n_used);
        let s = &self.s;
        let d = &self.dev;
        d.zero(&s.y, 0, e * 4).map_err(dev_err("zero y"))?;
        for (j, &wj) in weights.iter().enumerate() {
            d.weighted_add(&s.y, &s.o[j], wj, e)
                .map_err(dev_err("weighted sum"))?;
        }
        if let Some([(gt, g, rows), (ut, u, _), (dt, dw, _)]) = &self.layers[l].shared {
            d.matvec(*gt, g, 0, &s.x, &s.g, *rows, e)
                .map_err(dev_err("shared"))?;
            d.matvec(*ut, u, 0, &s.x, &s.u, *rows, e)
                .map_err(dev_err("shared"))?;
            d.swiglu_clamp(&s.g, &s.u, &s.a, *rows, clamp)
                .map_err(dev_err("shared"))?;
            d.matvec(*dt, dw, 0, &s.a, &s.o[k], e, *rows)
                .map_err(dev_err("shared"))?;
            d.weighted_add(&s.y, &s.o[k], 1.0, e)
                .map_err(dev_err("shared"))?;
        }
        d.weighted_add(&s.h, &s.y, 1.0, e)
            .map_err(dev_err("residual"))
    }
}
