//! Where a layer's routed experts come from: [`ResidentExperts`] (every expert read before the
//! first token: the resident run) or [`StreamedExperts`] (an [`ExpertCache`] of N slots; misses
//! read through the engine; hash-layer experts fetched at token start).
//!
//! The streamed provider is asynchronous where it pays: [`ExpertProvider::request`] answers at
//! once with the experts that are there ([`Fetch::Ready`]) and queues reads for the rest
//! ([`Fetch::Pending`]) — every miss's gate and up before any down, since the FFN needs gate and
//! up first — so the stack computes the hits while the misses arrive. Results do not depend on
//! any of this: the stack accumulates in the router's order whatever arrives first.
//!
//! Memory here is host memory (the host backend's "device memory"): a slot holds the expert's
//! three slices as `Bytes` from the engine's pool ([`BytesLanding`] under the one
//! [`SlotLoader`]; the GPU stack's is a device slab).

use super::slots::{Ask, Landing, Miss, SlotLoader, Started};
use super::{DecodeError, MoeWeights};
use crate::decode::LoadError;
use crate::engine::{BytesTicket, Engine, EngineError};
use crate::expert_cache::{CacheStats, ExpertKey, PolicyKind, SliceRead, SlotId};
use crate::gguf::GgmlType;
use crate::model::{Ds4Model, ExpertKind};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;

/// One expert's three matrices as stored (gate [E, FF], up [E, FF], down [FF, E]).
#[derive(Clone, Debug)]
pub struct ExpertData {
    pub gate: (GgmlType, Bytes),
    pub up: (GgmlType, Bytes),
    pub down: (GgmlType, Bytes),
}

/// An expert asked for: there now, or being read into a cache slot.
#[derive(Clone, Debug)]
pub enum Fetch {
    Ready(Arc<ExpertData>),
    Pending(SlotId),
}

/// Counters of a provider (zero for the resident one, which reads everything up front).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FetchStats {
    pub cache: CacheStats,
    /// Bytes read for misses.
    pub bytes_streamed: u64,
    /// Time the stack waited for experts that were not there yet.
    pub stall: Duration,
    /// Miss latency, submit → bytes there (µs): p50, p99, max.
    pub fetch_p50_us: u64,
    pub fetch_p99_us: u64,
    pub fetch_max_us: u64,
    /// Hash-layer experts read at token start (before their layer asked).
    pub prefetched: u64,
    /// Speculative lookahead (`--ssd-streaming-lookahead`): experts predicted for the next
    /// layer, how many of those the next layer then used, and how many reads the predictions
    /// started (predicted experts that were neither cached nor loading). The guesses' own cache
    /// lookups are not in `cache`'s hits and misses (its evictions include theirs).
    pub lookahead_predicted: u64,
    pub lookahead_used: u64,
    pub lookahead_reads: u64,
    /// The RAM tier under the device cache (`--ram-streaming-cache-experts`), when there is one.
    pub ram: Option<RamTierStats>,
}

/// The cache lookups of speculative guesses (hits, dedup hits, misses, full), kept out of the
/// reported hit rate, which counts the layers' own requests (evictions stay in: they happened).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SpecLookups([u64; 4]);

impl SpecLookups {
    /// Adds the lookups made between two snapshots of a cache's counters.
    pub(crate) fn add(&mut self, before: &CacheStats, after: &CacheStats) {
        for (acc, (a, b)) in self.0.iter_mut().zip([
            (after.hits, before.hits),
            (after.dedup_hits, before.dedup_hits),
            (after.misses, before.misses),
            (after.full, before.full),
        ]) {
            *acc += a - b;
        }
    }

    /// `cache` without the guesses' lookups.
    pub(crate) fn demand(&self, mut cache: CacheStats) -> CacheStats {
        let [h, d, m, f] = self.0;
        cache.hits -= h;
        cache.dedup_hits -= d;
        cache.misses -= m;
        cache.full -= f;
        cache
    }
}

/// What a run reports about the RAM tier.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct RamTierStats {
    pub experts: usize,
    pub bytes: u64,
    /// Its lookups, one per device miss: hits (copied from RAM), misses (read from the file
    /// into RAM, then copied).
    pub cache: CacheStats,
    /// Experts copied RAM → device.
    pub copies: u64,
}

/// Gives the stack each layer's experts.
pub trait ExpertProvider {
    /// A new token starts (the streamed provider reads its hash-layer experts now).
    fn begin_token(&mut self, _token: u32, _w: &MoeWeights) -> Result<(), DecodeError> {
        Ok(())
    }
    /// Experts `ids` of `layer`, in order: ready ones, or pending reads.
    fn request(&mut self, layer: usize, ids: &[u32]) -> Result<Vec<Fetch>, DecodeError>;
    /// Waits for a pending expert.
    fn wait(&mut self, slot: SlotId) -> Result<Arc<ExpertData>, DecodeError>;
    /// A guess of the experts `layer` will ask for (speculative lookahead): start reading the
    /// ones that are not there, pin nothing beyond the reads themselves, never wait. A wrong
    /// guess costs reads and cache space, never a result.
    fn speculate(&mut self, _layer: usize, _ids: &[u32]) -> Result<(), DecodeError> {
        Ok(())
    }
    /// The layer's experts are no longer in use (they may be evicted from now on).
    fn end_layer(&mut self, _layer: usize) {}
    fn stats(&self) -> FetchStats {
        FetchStats::default()
    }
}

fn read_err(what: String) -> impl FnOnce(EngineError) -> DecodeError {
    move |source| DecodeError::Read { what, source }
}

/// Every routed expert read before the first token.
pub struct ResidentExperts {
    /// Per layer, per expert.
    experts: Vec<Vec<Arc<ExpertData>>>,
}

impl ResidentExperts {
    /// Reads the three routed tensors of every layer whole (views per expert, no copies).
    pub fn load(model: &Ds4Model, engine: &Engine) -> Result<Self, DecodeError> {
        Self::load_layers(model, engine, model.layers.len())
    }

    /// The same for the first `n` layers only (`--ssd-streaming-full-layers`).
    pub fn load_layers(model: &Ds4Model, engine: &Engine, n: usize) -> Result<Self, DecodeError> {
        let mut experts = Vec::with_capacity(n);
        for layer in model.layers.iter().take(n) {
            let whole = |kind: ExpertKind| -> Result<Bytes, DecodeError> {
                let t = &layer.routed(kind).tensor;
                engine
                    .read_bytes(t.offset, t.nbytes as usize)
                    .map_err(read_err(t.name.clone()))
            };
            let (g, u, d) = (
                whole(ExpertKind::Gate)?,
                whole(ExpertKind::Up)?,
                whole(ExpertKind::Down)?,
            );
            let per = |kind: ExpertKind, b: &Bytes, e: u64| {
                let rt = layer.routed(kind);
                let at = (e * rt.expert_bytes) as usize;
                (
                    rt.tensor.ggml_type,
                    b.slice(at..at + rt.expert_bytes as usize),
                )
            };
            let n = layer.gate.n_expert;
            experts.push(
                (0..n)
                    .map(|e| {
                        Arc::new(ExpertData {
                            gate: per(ExpertKind::Gate, &g, e),
                            up: per(ExpertKind::Up, &u, e),
                            down: per(ExpertKind::Down, &d, e),
                        })
                    })
                    .collect(),
            );
        }
        Ok(Self { experts })
    }
}

impl ExpertProvider for ResidentExperts {
    fn request(&mut self, layer: usize, ids: &[u32]) -> Result<Vec<Fetch>, DecodeError> {
        Ok(ids
            .iter()
            .map(|&e| Fetch::Ready(self.experts[layer][e as usize].clone()))
            .collect())
    }
    fn wait(&mut self, slot: SlotId) -> Result<Arc<ExpertData>, DecodeError> {
        Err(LoadError::Internal(format!("resident experts have no pending slot {slot}")).into())
    }
}

/// Host bytes from the engine's pool: each slice of a miss is one `submit_bytes`, and the
/// slot holds the expert as three `Bytes` views (no slab on the host backend).
pub(crate) struct BytesLanding<'a> {
    engine: &'a Engine,
    slots: Vec<Option<Arc<ExpertData>>>,
}

/// A host fill: gate and up in flight, down once queued.
pub(crate) struct BytesFill {
    key: ExpertKey,
    gate: BytesTicket,
    up: BytesTicket,
    down: Option<BytesTicket>,
    down_at: SliceRead,
    types: [GgmlType; 3],
}

impl Landing for BytesLanding<'_> {
    type Fill = BytesFill;

    fn start(&mut self, m: &Miss) -> Result<Started<BytesFill>, DecodeError> {
        self.slots[m.slot as usize] = None;
        let submit = |r: &SliceRead| {
            self.engine
                .submit_bytes(r.offset, r.len())
                .map_err(read_err(what(m.key)))
        };
        let fill = BytesFill {
            key: m.key,
            gate: submit(&m.reads[0])?,
            up: submit(&m.reads[1])?,
            down: None,
            down_at: m.reads[2],
            types: m.reads.map(|r| r.place.ty),
        };
        Ok(Started {
            fill,
            read_bytes: super::slots::read_bytes(m),
        })
    }

    fn queue_down(&mut self, f: &mut BytesFill) -> Result<(), DecodeError> {
        if f.down.is_none() {
            let r = f.down_at;
            let t = self.engine.submit_bytes(r.offset, r.len());
            f.down = Some(t.map_err(read_err(what(f.key)))?);
        }
        Ok(())
    }

    fn poll(&mut self, f: &mut BytesFill) -> bool {
        f.gate.is_done() && f.up.is_done() && f.down.as_ref().is_some_and(|d| d.is_done())
    }

    fn finish(&mut self, slot: SlotId, f: BytesFill) -> Result<(), DecodeError> {
        let w = what(f.key);
        let down = f
            .down
            .ok_or_else(|| LoadError::Internal(format!("{w}: down not queued")))?;
        let g = f.gate.wait().map_err(read_err(w.clone()))?;
        let u = f.up.wait().map_err(read_err(w.clone()))?;
        let d = down.wait().map_err(read_err(w))?;
        self.slots[slot as usize] = Some(Arc::new(ExpertData {
            gate: (f.types[0], g),
            up: (f.types[1], u),
            down: (f.types[2], d),
        }));
        Ok(())
    }

    fn abandon(&mut self, _f: BytesFill) {}
}

fn what(key: ExpertKey) -> String {
    format!("expert {} of layer {}", key.expert, key.layer)
}

/// The expert in `slot` once it is resident.
pub(crate) fn resident(
    slots: &[Option<Arc<ExpertData>>],
    slot: SlotId,
) -> Result<Arc<ExpertData>, DecodeError> {
    match &slots[slot as usize] {
        Some(d) => Ok(d.clone()),
        None => Err(LoadError::Internal(format!("slot {slot} resident but empty")).into()),
    }
}

/// Experts through a bounded cache, read by the engine on a miss (`SlotLoader` over host
/// bytes).
pub struct StreamedExperts<'a> {
    engine: &'a Engine,
    model: &'a Ds4Model,
    /// The first layers' experts, all resident (`--ssd-streaming-full-layers`).
    full: ResidentExperts,
    slots: SlotLoader<BytesLanding<'a>>,
}

impl<'a> StreamedExperts<'a> {
    /// A cache of `slots` experts with `policy`. Refuses fewer slots than one layer's K.
    pub fn new(
        engine: &'a Engine,
        model: &'a Ds4Model,
        slots: usize,
        policy: PolicyKind,
    ) -> Result<Self, DecodeError> {
        let landing = BytesLanding {
            engine,
            slots: vec![None; slots],
        };
        Ok(Self {
            engine,
            model,
            full: ResidentExperts {
                experts: Vec::new(),
            },
            slots: SlotLoader::new(model, slots, policy, landing)?,
        })
    }

    /// Makes the first `n` layers' experts resident (read now, whole tensors), outside the cache.
    pub fn with_full_layers(mut self, n: usize) -> Result<Self, DecodeError> {
        self.full = ResidentExperts::load_layers(self.model, self.engine, n)?;
        Ok(self)
    }

    /// Reads `keys` into the cache before the first token (most important first; stops when
    /// the cache is full). Returns how many were read.
    pub fn preload(&mut self, keys: &[ExpertKey]) -> Result<usize, DecodeError> {
        self.slots.preload(keys, self.full.experts.len())
    }

    /// `ids` of `layer` as fetches: resident ones ready, the rest pending.
    fn fetches(&mut self, layer: usize, ids: &[u32], ask: Ask) -> Result<Vec<Fetch>, DecodeError> {
        if let Some(l) = self.full.experts.get(layer) {
            return Ok(ids
                .iter()
                .map(|&e| Fetch::Ready(l[e as usize].clone()))
                .collect());
        }
        let got = self.slots.request(layer, ids, ask)?;
        got.into_iter()
            .map(|s| match self.slots.is_pending(s) {
                true => Ok(Fetch::Pending(s)),
                false => resident(&self.slots.landing.slots, s).map(Fetch::Ready),
            })
            .collect()
    }
}

impl ExpertProvider for StreamedExperts<'_> {
    fn begin_token(&mut self, token: u32, w: &MoeWeights) -> Result<(), DecodeError> {
        // Hash layers route by token id: their experts are known now. Fetch all of them.
        let k = w.params.n_used;
        for (l, lw) in w.layers.iter().enumerate().skip(self.full.experts.len()) {
            if let Some(t) = &lw.tid2eid {
                let ids = &t[token as usize * k..(token as usize + 1) * k];
                self.slots.prefetch(l, ids)?;
            }
        }
        Ok(())
    }

    fn request(&mut self, layer: usize, ids: &[u32]) -> Result<Vec<Fetch>, DecodeError> {
        self.slots.note_demand(layer, ids);
        self.fetches(layer, ids, Ask::Demand)
    }

    fn speculate(&mut self, layer: usize, ids: &[u32]) -> Result<(), DecodeError> {
        if layer < self.full.experts.len() {
            return Ok(()); // resident
        }
        self.slots.speculate(layer, ids)
    }

    fn wait(&mut self, slot: SlotId) -> Result<Arc<ExpertData>, DecodeError> {
        self.slots.ready(slot)?;
        resident(&self.slots.landing.slots, slot)
    }

    fn end_layer(&mut self, _layer: usize) {
        // Reads that already landed (prefetches and guesses nobody has asked for yet) become
        // resident; then everything not loading is evictable (hash-layer prefetches of later
        // layers too: at worst re-read), never a slot being written.
        self.slots.end_layer();
    }

    fn stats(&self) -> FetchStats {
        self.slots.stats()
    }
}
