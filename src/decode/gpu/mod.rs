//! The MoE stack on a GPU (CUDA or HIP: generic over [`GpuDevice`]): the same arithmetic as
//! [`super::MoeStack`], on the kernels of `kernels/ds4_kernels.cu`, with the routed experts in a
//! device slab of cache slots that the engine reads into (staged: file → pinned ring → async
//! copy → slot; unified devices: straight into the slot).
//!
//! Per layer: rms_norm, router matvec and sqrt(softplus) on the GPU; the X router
//! probabilities come back to the host (one small read-back per layer, which also orders every
//! earlier kernel before this layer's reads into evicted slots) for top-k and the weights; then
//! for each expert gate/up matvecs, SwiGLU-clamp, down matvec and the weighted add; the shared
//! expert; h += y. Experts that are cached are computed while the misses are read (hits first);
//! the sum runs in router order, so the result does not depend on what was cached.
//!
//! Resident mode is the same slab with a slot for every expert, all read before the first token:
//! resident and streamed runs use the same kernels in the same order and give bit-identical
//! hidden states. Against the host reference they agree within the kernels' rounding bounds
//! (kernels/README.md), not bit for bit.
//!
//! Reads: hash-layer experts at token start (their ids come from the token); a layer's misses
//! queue every gate and up slice before any down slice (the first kernels of an expert need
//! gate and up only); with [`GpuMoe::with_lookahead`] the next layer's router also runs on
//! this layer's input and its guesses are read while this layer computes (MoeStack's
//! lookahead, the same accounting).
//!
//! RAM tier: [`GpuMoe::with_ram_tier`] (`ram_tier.rs`). The C engine's read pattern:
//! [`GpuMoe::with_c_engine_pattern`].
//!
//! Limits: one host round trip per layer (the router probabilities; two with the lookahead);
//! every kernel waits on the GPU for the copies issued before its launch (the device's
//! ordering contract), not only for its own expert's.

mod fetch;
mod layer;
mod ram_tier;

use super::slots::{layout_of, Ask, SlotLoader};
use super::{DecodeError, FetchStats, MoeWeights, TokenTrace};
use crate::decode::LoadError;
use crate::device::{DeviceBuffer, DeviceError, GpuDevice, PinnedBuf};
use crate::engine::{Engine, ReadRequest};
use crate::expert_cache::{ExpertKey, PolicyKind, SlotId};
use crate::gguf::GgmlType;
use crate::model::Ds4Model;
use fetch::SlabLanding;
use ram_tier::RamTier;
use std::sync::Arc;

fn dev_err(what: &str) -> impl FnOnce(DeviceError) -> DecodeError + '_ {
    move |e| LoadError::device(format!("gpu {what}"))(e).into()
}

/// One layer's resident weights on the GPU.
struct GpuLayer {
    norm: Arc<DeviceBuffer>,
    router: Arc<DeviceBuffer>,
    /// (type, weights, rows) of gate, up, down.
    shared: Option<[(GgmlType, Arc<DeviceBuffer>, usize); 3]>,
}

/// Working vectors of one token (device memory, reused).
struct Scratch {
    h: Arc<DeviceBuffer>,
    x: Arc<DeviceBuffer>,
    z: Arc<DeviceBuffer>,
    p: Arc<DeviceBuffer>,
    g: Arc<DeviceBuffer>,
    u: Arc<DeviceBuffer>,
    a: Arc<DeviceBuffer>,
    /// One output per routed expert of a layer, then the shared one.
    o: Vec<Arc<DeviceBuffer>>,
    y: Arc<DeviceBuffer>,
    /// The lookahead's router vectors (the next layer's x, z, p).
    xn: Arc<DeviceBuffer>,
    zn: Arc<DeviceBuffer>,
    pn: Arc<DeviceBuffer>,
    /// Pinned host staging of the embedding row.
    up_h: PinnedBuf,
}

/// The stack on one GPU.
pub struct GpuMoe<'a, D: GpuDevice> {
    dev: Arc<D>,
    engine: &'a Engine,
    model: &'a Ds4Model,
    w: &'a MoeWeights,
    layers: Vec<GpuLayer>,
    s: Scratch,
    /// The expert cache: its slots in a device slab (`SlotLayout`: gate | up | down), filled
    /// through the engine, the RAM tier or the C engine's pattern.
    slots: SlotLoader<SlabLanding<'a, D>>,
    /// `--ssd-streaming-full-layers`: a slab with every expert of the first n layers (the same
    /// slot layout).
    full: Option<(Arc<DeviceBuffer>, usize)>,
    ff: usize,
    /// What each allocation step asked for and what it took from the device's free memory.
    alloc_steps: Vec<AllocStep>,
    /// Speculative lookahead (`--ssd-streaming-lookahead`).
    lookahead: bool,
}

/// One allocation step of [`GpuMoe`], measured: the bytes asked for and the drop of the
/// device's free memory (`cuMemGetInfo`) across the step, which also shows the driver's
/// rounding and anything else allocated meanwhile (the memory plan's check: docs/PLANNER.md).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AllocStep {
    pub what: &'static str,
    pub requested: u64,
    /// Free memory before minus after (`None` where the device cannot say).
    pub free_drop: Option<u64>,
}

/// Free device memory now, if the device can say.
fn free_now(dev: &impl GpuDevice) -> Option<u64> {
    dev.memory_info().ok().flatten().map(|m| m.free)
}

fn step(what: &'static str, requested: u64, before: Option<u64>, after: Option<u64>) -> AllocStep {
    AllocStep {
        what,
        requested,
        free_drop: before.zip(after).map(|(b, a)| b.saturating_sub(a)),
    }
}

fn upload(dev: &impl GpuDevice, bytes: &[u8]) -> Result<Arc<DeviceBuffer>, DecodeError> {
    let buf = Arc::new(dev.alloc(bytes.len().max(4)).map_err(dev_err("alloc"))?);
    if !bytes.is_empty() {
        let mut p = dev
            .alloc_pinned(bytes.len())
            .map_err(dev_err("alloc pinned"))?;
        p.as_mut_slice().map_err(dev_err("pinned"))?[..bytes.len()].copy_from_slice(bytes);
        dev.copy_h2d_async(&mut p, 0, &buf, 0, bytes.len())
            .map_err(dev_err("upload"))?;
        p.wait().map_err(dev_err("upload"))?;
    }
    Ok(buf)
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The layers' resident MoE weights on the device, and their bytes.
fn upload_layers(
    dev: &impl GpuDevice,
    w: &MoeWeights,
) -> Result<(Vec<GpuLayer>, u64), DecodeError> {
    let e = w.params.n_embd;
    let mut weight_bytes = 0u64;
    let mut layers = Vec::with_capacity(w.layers.len());
    for lw in &w.layers {
        weight_bytes += (lw.ffn_norm.len() * 4 + lw.router.len()) as u64;
        let shared = match &lw.shared {
            Some([g, u, d]) => {
                weight_bytes += (g.1.len() + u.1.len() + d.1.len()) as u64;
                let rows = g.1.len()
                    / crate::compute::row_bytes(g.0, e).map_err(|err| DecodeError::Compute {
                        what: "shared expert".into(),
                        source: err,
                    })?;
                Some([
                    (g.0, upload(dev, &g.1)?, rows),
                    (u.0, upload(dev, &u.1)?, rows),
                    (d.0, upload(dev, &d.1)?, e),
                ])
            }
            None => None,
        };
        layers.push(GpuLayer {
            norm: upload(dev, &f32_bytes(&lw.ffn_norm))?,
            router: upload(dev, &lw.router)?,
            shared,
        });
    }
    Ok((layers, weight_bytes))
}

impl Scratch {
    /// The vectors of one token for width `e`, `x` experts, FFN width `ff` and K = `k`; and
    /// their bytes.
    fn new(
        dev: &impl GpuDevice,
        e: usize,
        x: usize,
        ff: usize,
        k: usize,
    ) -> Result<(Self, u64), DecodeError> {
        let vec = |n: usize| -> Result<Arc<DeviceBuffer>, DecodeError> {
            Ok(Arc::new(dev.alloc(n.max(1) * 4).map_err(dev_err("alloc"))?))
        };
        let s = Scratch {
            h: vec(e)?,
            x: vec(e)?,
            z: vec(x)?,
            p: vec(x)?,
            g: vec(ff)?,
            u: vec(ff)?,
            a: vec(ff)?,
            o: (0..=k).map(|_| vec(e)).collect::<Result<_, _>>()?,
            y: vec(e)?,
            xn: vec(e)?,
            zn: vec(x)?,
            pn: vec(x)?,
            up_h: dev.alloc_pinned(e * 4).map_err(dev_err("alloc pinned"))?,
        };
        let scratch_bytes = 4 * (3 * e + 4 * x + 3 * ff + (k + 2) * e) as u64;
        Ok((s, scratch_bytes))
    }
}

impl<'a, D: GpuDevice> GpuMoe<'a, D> {
    /// Uploads the resident weights and makes a slab of `slots` experts (`None`: one slot per
    /// expert, all read now: the resident run).
    pub fn new(
        dev: Arc<D>,
        engine: &'a Engine,
        model: &'a Ds4Model,
        w: &'a MoeWeights,
        slots: Option<usize>,
        policy: PolicyKind,
    ) -> Result<Self, DecodeError> {
        let p = &w.params;
        let (e, x) = (p.n_embd, p.n_expert);
        let mut alloc_steps = Vec::new();
        let free0 = free_now(&*dev);
        let (layers, weight_bytes) = upload_layers(&*dev, w)?;
        let free1 = free_now(&*dev);
        alloc_steps.push(step(
            "resident weights (MoE part: norms, routers, shared experts)",
            weight_bytes,
            free0,
            free1,
        ));
        let layout = layout_of(model)?;
        let slot_bytes = layout.slot_bytes();
        let ff = model.shape.expert_ff as usize;
        let shared_ff = layers
            .iter()
            .filter_map(|l| l.shared.as_ref().map(|s| s[0].2))
            .max()
            .unwrap_or(0);
        let k = p.n_used;
        let (s, scratch_bytes) = Scratch::new(&*dev, e, x, ff.max(shared_ff), k)?;
        let free2 = free_now(&*dev);
        alloc_steps.push(step("decode scratch vectors", scratch_bytes, free1, free2));
        let total = model.n_routed_experts() as usize;
        let n_slots = slots.unwrap_or(total).min(total);
        let slab_len = layout
            .slab_bytes(n_slots)
            .ok_or_else(|| LoadError::layout("expert slab size overflows"))?;
        let slab = Arc::new(dev.alloc(slab_len).map_err(dev_err("expert slab"))?);
        alloc_steps.push(step(
            "expert cache slab",
            slab_len as u64,
            free2,
            free_now(&*dev),
        ));
        let landing = SlabLanding {
            engine,
            dev: dev.clone(),
            slab,
            slot_bytes,
            ram: None,
            c_pattern: None,
        };
        let mut me = Self {
            dev,
            engine,
            model,
            w,
            layers,
            s,
            slots: SlotLoader::new(model, n_slots, policy, landing)?,
            full: None,
            ff,
            alloc_steps,
            lookahead: false,
        };
        if slots.is_none() {
            me.read_every_expert()?;
        }
        Ok(me)
    }

    /// Resident: every expert read now, layer by layer, K at a time.
    fn read_every_expert(&mut self) -> Result<(), DecodeError> {
        let k = self.w.params.n_used;
        for l in 0..self.model.layers.len() {
            let ids: Vec<u32> = (0..self.model.shape.n_expert as u32).collect();
            for chunk in ids.chunks(k) {
                let got = self.slots.request(l, chunk, Ask::Demand)?;
                for s in got {
                    self.slots.ready(s)?;
                }
                self.slots.cache.unpin_all();
            }
        }
        self.slots.reset_counters();
        Ok(())
    }

    /// gate/up matvecs, SwiGLU-clamp, down matvec of layer `l`'s expert in `slot` into `out`.
    fn expert(
        &self,
        l: usize,
        slot: SlotId,
        out: &Arc<DeviceBuffer>,
        clamp: f32,
    ) -> Result<(), DeviceError> {
        let base = slot as usize * self.slots.layout.slot_bytes();
        self.expert_at(&self.slots.landing.slab, l, base, out, clamp)
    }

    /// The same for layer `l`'s expert whose slot starts at `buf[base..]`.
    fn expert_at(
        &self,
        buf: &Arc<DeviceBuffer>,
        l: usize,
        base: usize,
        out: &Arc<DeviceBuffer>,
        clamp: f32,
    ) -> Result<(), DeviceError> {
        let (e, ff, s) = (self.w.params.n_embd, self.ff, &self.s);
        let [g, u, d] = *self.slots.layout.places(l);
        self.dev.matvec(g.ty, buf, base + g.at, &s.x, &s.g, ff, e)?;
        self.dev.matvec(u.ty, buf, base + u.at, &s.x, &s.u, ff, e)?;
        self.dev.swiglu_clamp(&s.g, &s.u, &s.a, ff, clamp)?;
        self.dev.matvec(d.ty, buf, base + d.at, &s.a, out, e, ff)
    }

    /// The allocation steps so far, each with the bytes asked for and the drop of free device
    /// memory it caused.
    pub fn alloc_steps(&self) -> &[AllocStep] {
        &self.alloc_steps
    }

    /// Makes the first `n` layers' experts resident in a slab of their own (read now), outside
    /// the cache (`--ssd-streaming-full-layers`).
    pub fn with_full_layers(mut self, n: usize) -> Result<Self, DecodeError> {
        let n = n.min(self.model.layers.len());
        let x = self.model.shape.n_expert as usize;
        let sb = self.slots.layout.slot_bytes();
        let len = n * x * sb;
        let before = free_now(&*self.dev);
        let slab = Arc::new(self.dev.alloc(len).map_err(dev_err("full-layer slab"))?);
        self.alloc_steps.push(step(
            "full-layer slab",
            len as u64,
            before,
            free_now(&*self.dev),
        ));
        for l in 0..n {
            let mut reqs = Vec::with_capacity(3 * x);
            for e in 0..x {
                let key = ExpertKey::new(l as u16, e as u16);
                let reads = self
                    .slots
                    .layout
                    .reads(key)
                    .map_err(|err| crate::decode::slots::slice_err(key, err))?;
                for r in reads {
                    let at = r.at((l * x + e) * sb);
                    reqs.push(ReadRequest::new(r.offset, r.len(), slab.clone(), at));
                }
            }
            self.engine
                .submit(reqs)
                .and_then(|t| t.wait())
                .map_err(|source| DecodeError::Read {
                    what: format!("the experts of layer {l}"),
                    source,
                })?;
        }
        self.full = Some((slab, n));
        Ok(self)
    }

    /// Reads `keys` into the cache before the first token (stops when the cache is full).
    /// Returns how many were read.
    pub fn preload(&mut self, keys: &[ExpertKey]) -> Result<usize, DecodeError> {
        let skip = self.full.as_ref().map_or(0, |f| f.1);
        self.slots.preload(keys, skip)
    }

    /// Token `t` through every layer on the GPU: h (read back) and the routing.
    pub fn token(
        &mut self,
        t: u32,
        forced: Option<&[TokenTrace]>,
    ) -> Result<(Vec<f32>, Vec<TokenTrace>), DecodeError> {
        let p = &self.w.params;
        if u64::from(t) >= p.vocab {
            return Err(DecodeError::Token {
                id: t.into(),
                vocab: p.vocab,
            });
        }
        self.upload_embedding(t)?;
        let n_full = self.full.as_ref().map_or(0, |f| f.1);
        // Hash layers: their experts are known from the token id; read them now (the C
        // engine's pattern reads a layer's misses when it gets there).
        if self.slots.landing.c_pattern.is_none() {
            self.prefetch_hash_layers(t, n_full)?;
        }
        let mut trace = Vec::with_capacity(self.w.layers.len());
        for l in 0..self.w.layers.len() {
            let r = self.route_layer(l, t, forced)?;
            let clamp = self.w.params.clamp[l];
            self.routed_experts(l, n_full, &r, clamp)?;
            self.combine(l, &r.weights, clamp)?;
            // Reads that landed (prefetches, guesses) become resident; then everything not
            // loading is evictable again.
            self.slots.end_layer();
            if let Some(r) = self.slots.landing.ram.as_mut() {
                r.cache.unpin_all();
            }
            trace.push(TokenTrace {
                layer: l,
                experts: r.ids,
                weights: r.weights,
            });
        }
        let mut hb = vec![0u8; self.w.params.n_embd * 4];
        self.dev
            .read_d2h(&self.s.h, 0, &mut hb)
            .map_err(dev_err("read back h"))?;
        Ok((f32s(&hb), trace))
    }

    pub fn stats(&self) -> FetchStats {
        FetchStats {
            ram: self.slots.landing.ram.as_ref().map(RamTier::stats),
            ..self.slots.stats()
        }
    }
}
