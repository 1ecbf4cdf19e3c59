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
//! three slices as `Bytes` from the engine's pool. Limits: no GPU slab yet; no speculative
//! lookahead.

use super::{DecodeError, MoeWeights};
use crate::decode::LoadError;
use crate::engine::{BytesTicket, Engine, EngineError};
use crate::expert_cache::{
    CacheError, CacheStats, ExpertCache, ExpertKey, Lookup, PolicyKind, SlotId,
};
use crate::gguf::GgmlType;
use crate::model::{Ds4Model, ExpertKind};
use bytes::Bytes;
use hdrhistogram::Histogram;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

fn slice_of(
    model: &Ds4Model,
    layer: usize,
    kind: ExpertKind,
    e: u32,
) -> Result<(u64, usize, GgmlType), DecodeError> {
    let l = &model.layers[layer];
    let s = model
        .expert_slice(layer as u64, kind, e as u64)
        .map_err(|err| DecodeError::Tensor {
            name: l.routed(kind).tensor.name.clone(),
            why: err.to_string(),
        })?;
    Ok((s.offset, s.len as usize, l.routed(kind).tensor.ggml_type))
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

/// A read in flight into one slot.
struct Pending {
    key: ExpertKey,
    gate: BytesTicket,
    up: BytesTicket,
    down: Option<BytesTicket>,
    down_at: (u64, usize),
    types: [GgmlType; 3],
    since: Instant,
}

/// Experts through a bounded cache, read by the engine on a miss.
pub struct StreamedExperts<'a> {
    engine: &'a Engine,
    model: &'a Ds4Model,
    /// The first layers' experts, all resident (`--ssd-streaming-full-layers`).
    full: ResidentExperts,
    cache: ExpertCache,
    slots: Vec<Option<Arc<ExpertData>>>,
    pending: HashMap<SlotId, Pending>,
    bytes_streamed: u64,
    stall: Duration,
    prefetched: u64,
    hist: Histogram<u64>,
    /// The last speculative guess: (layer, experts).
    guess: Option<(usize, Vec<u32>)>,
    lookahead: [u64; 3],
    /// The cache lookups the guesses made: kept out of the reported hit rate, which counts
    /// the layers' own requests.
    spec_lookups: SpecLookups,
}

impl<'a> StreamedExperts<'a> {
    /// A cache of `slots` experts with `policy`. Refuses fewer slots than one layer's K.
    pub fn new(
        engine: &'a Engine,
        model: &'a Ds4Model,
        slots: usize,
        policy: PolicyKind,
    ) -> Result<Self, DecodeError> {
        let k = model.shape.n_expert_used as usize;
        let eb = model.layers.first().map_or(0, |l| l.expert_bytes());
        let cache =
            ExpertCache::new(slots, k, eb, policy).map_err(LoadError::cache("expert cache"))?;
        Ok(Self {
            engine,
            model,
            full: ResidentExperts {
                experts: Vec::new(),
            },
            cache,
            slots: vec![None; slots],
            pending: HashMap::new(),
            bytes_streamed: 0,
            stall: Duration::ZERO,
            prefetched: 0,
            hist: Histogram::new(3).expect("3 significant figures is valid"),
            guess: None,
            lookahead: [0; 3],
            spec_lookups: SpecLookups::default(),
        })
    }

    /// Looks up one expert; on a miss queues its gate and up reads (down comes later, see
    /// [`Self::queue_downs`]). `Ok(None)`: every slot is pinned or loading.
    fn lookup(
        &mut self,
        layer: usize,
        e: u32,
    ) -> Result<Option<(Fetch, Option<SlotId>)>, DecodeError> {
        let key = ExpertKey::new(layer as u16, e as u16);
        match self.cache.lookup(key) {
            Ok(Lookup::Hit(s)) => match &self.slots[s as usize] {
                Some(d) => Ok(Some((Fetch::Ready(d.clone()), None))),
                None => Err(LoadError::Internal(format!("slot {s} resident but empty")).into()),
            },
            Ok(Lookup::Loading(s)) => Ok(Some((Fetch::Pending(s), None))),
            Ok(Lookup::Miss { slot, .. }) => {
                self.slots[slot as usize] = None;
                let (go, gl, gt) = slice_of(self.model, layer, ExpertKind::Gate, e)?;
                let (uo, ul, ut) = slice_of(self.model, layer, ExpertKind::Up, e)?;
                let (d_o, dl, dt) = slice_of(self.model, layer, ExpertKind::Down, e)?;
                let what = || format!("expert {e} of layer {layer}");
                let submit = |o, l| self.engine.submit_bytes(o, l).map_err(read_err(what()));
                let p = Pending {
                    key,
                    gate: submit(go, gl)?,
                    up: submit(uo, ul)?,
                    down: None,
                    down_at: (d_o, dl),
                    types: [gt, ut, dt],
                    since: Instant::now(),
                };
                self.bytes_streamed += (gl + ul + dl) as u64;
                self.pending.insert(slot, p);
                Ok(Some((Fetch::Pending(slot), Some(slot))))
            }
            Err(CacheError::Full { .. }) => Ok(None),
            Err(e) => Err(LoadError::cache("expert cache")(e).into()),
        }
    }

    /// Queues the down slices of the misses just queued (after all their gates and ups).
    fn queue_downs(&mut self, slots: &[SlotId]) -> Result<(), DecodeError> {
        for s in slots {
            if let Some(p) = self.pending.get_mut(s) {
                let (o, l) = p.down_at;
                let what = format!("expert {} of layer {}", p.key.expert, p.key.layer);
                p.down = Some(self.engine.submit_bytes(o, l).map_err(read_err(what))?);
            }
        }
        Ok(())
    }

    /// Makes the first `n` layers' experts resident (read now, whole tensors), outside the cache.
    pub fn with_full_layers(mut self, n: usize) -> Result<Self, DecodeError> {
        self.full = ResidentExperts::load_layers(self.model, self.engine, n)?;
        Ok(self)
    }

    /// Reads `keys` into the cache before the first token (most important first; stops when
    /// the cache is full). Returns how many were read.
    pub fn preload(&mut self, keys: &[ExpertKey]) -> Result<usize, DecodeError> {
        let mut n = 0;
        let mut stopped = false;
        for chunk in keys.chunks(64) {
            let mut queued = Vec::new();
            for k in chunk {
                if (k.layer as usize) < self.full.experts.len() {
                    continue;
                }
                match self.lookup(k.layer as usize, k.expert as u32)? {
                    Some((_, Some(slot))) => queued.push(slot),
                    Some(_) => {}
                    None => {
                        stopped = true;
                        break;
                    }
                }
            }
            self.queue_downs(&queued)?;
            for s in queued {
                self.wait(s)?;
                n += 1;
            }
            self.cache.unpin_all();
            if stopped {
                break;
            }
        }
        self.bytes_streamed = 0;
        self.hist.reset();
        Ok(n)
    }

    /// Looks up `ids`. A demand request (`prefetch == false`) that finds every slot pinned or
    /// loading first lets the reads already in flight land (which frees their slots for
    /// eviction), then retries; a prefetch just stops there (it is only worth what fits).
    fn request_many(
        &mut self,
        layer: usize,
        ids: &[u32],
        prefetch: bool,
    ) -> Result<Vec<Fetch>, DecodeError> {
        if let Some(l) = self.full.experts.get(layer) {
            return Ok(ids
                .iter()
                .map(|&e| Fetch::Ready(l[e as usize].clone()))
                .collect());
        }
        let mut out = Vec::with_capacity(ids.len());
        let mut missed = Vec::new();
        for &e in ids {
            let found = match self.lookup(layer, e)? {
                Some(x) => Some(x),
                None if prefetch => break,
                None => {
                    self.settle(&missed)?;
                    self.lookup(layer, e)?
                }
            };
            let (f, m) = found.ok_or_else(|| {
                DecodeError::from(LoadError::Held {
                    layer,
                    slots: self.cache.capacity(),
                    inflight: " and reads in flight",
                })
            })?;
            out.push(f);
            missed.extend(m);
        }
        self.queue_downs(&missed)?;
        Ok(out)
    }

    /// Completes the reads in flight whose bytes have all arrived (no waiting): their slots
    /// become resident instead of loading (a failed one is dropped from the cache: its layer
    /// will read it again if it asks).
    fn harvest(&mut self) {
        let done: Vec<SlotId> = self
            .pending
            .iter()
            .filter(|(_, p)| {
                p.gate.is_done() && p.up.is_done() && p.down.as_ref().is_some_and(|d| d.is_done())
            })
            .map(|(s, _)| *s)
            .collect();
        for s in done {
            let _ = self.wait(s);
        }
    }

    /// Waits for every read in flight except `keep`'s (those of the request being built).
    fn settle(&mut self, keep: &[SlotId]) -> Result<(), DecodeError> {
        let others: Vec<SlotId> = self
            .pending
            .keys()
            .copied()
            .filter(|s| !keep.contains(s))
            .collect();
        for s in others {
            self.wait(s)?;
        }
        Ok(())
    }
}

impl ExpertProvider for StreamedExperts<'_> {
    fn begin_token(&mut self, token: u32, w: &MoeWeights) -> Result<(), DecodeError> {
        // Hash layers route by token id: their experts are known now. Fetch all of them.
        let k = w.params.n_used;
        for (l, lw) in w.layers.iter().enumerate().skip(self.full.experts.len()) {
            if let Some(t) = &lw.tid2eid {
                let ids = t[token as usize * k..(token as usize + 1) * k].to_vec();
                let before = self.pending.len();
                self.request_many(l, &ids, true)?;
                self.prefetched += (self.pending.len() - before) as u64;
            }
        }
        Ok(())
    }

    fn request(&mut self, layer: usize, ids: &[u32]) -> Result<Vec<Fetch>, DecodeError> {
        if let Some((l, g)) = self.guess.take() {
            if l == layer {
                self.lookahead[1] += ids.iter().filter(|e| g.contains(e)).count() as u64;
            }
        }
        self.request_many(layer, ids, false)
    }

    fn speculate(&mut self, layer: usize, ids: &[u32]) -> Result<(), DecodeError> {
        if layer < self.full.experts.len() {
            return Ok(()); // resident
        }
        let before = self.pending.len();
        let c0 = self.cache.stats();
        self.request_many(layer, ids, true)?;
        let c1 = self.cache.stats();
        self.spec_lookups.add(&c0, &c1);
        self.lookahead[0] += ids.len() as u64;
        self.lookahead[2] += (self.pending.len() - before) as u64;
        self.guess = Some((layer, ids.to_vec()));
        Ok(())
    }

    fn wait(&mut self, slot: SlotId) -> Result<Arc<ExpertData>, DecodeError> {
        if let Some(d) = &self.slots[slot as usize] {
            return Ok(d.clone());
        }
        let p = self.pending.remove(&slot).ok_or_else(|| {
            DecodeError::from(LoadError::Internal(format!(
                "slot {slot} is neither ready nor loading"
            )))
        })?;
        let t0 = Instant::now();
        let what = format!("expert {} of layer {}", p.key.expert, p.key.layer);
        let res = (|| {
            let down = match p.down {
                Some(d) => d,
                None => self
                    .engine
                    .submit_bytes(p.down_at.0, p.down_at.1)
                    .map_err(read_err(what.clone()))?,
            };
            let g = p.gate.wait().map_err(read_err(what.clone()))?;
            let u = p.up.wait().map_err(read_err(what.clone()))?;
            let d = down.wait().map_err(read_err(what.clone()))?;
            Ok::<_, DecodeError>(ExpertData {
                gate: (p.types[0], g),
                up: (p.types[1], u),
                down: (p.types[2], d),
            })
        })();
        self.stall += t0.elapsed();
        match res {
            Ok(data) => {
                let data = Arc::new(data);
                self.slots[slot as usize] = Some(data.clone());
                self.cache
                    .fill_done(slot)
                    .map_err(LoadError::cache("expert cache"))?;
                let us = p.since.elapsed().as_micros() as u64;
                let _ = self.hist.record(us.max(1));
                Ok(data)
            }
            Err(e) => {
                let _ = self.cache.fill_failed(slot);
                Err(e)
            }
        }
    }

    fn end_layer(&mut self, _layer: usize) {
        // Reads that already landed (prefetches and guesses nobody has asked for yet) become
        // resident now, so their slots stop counting as loading.
        self.harvest();
        // Unpins everything not loading: hash-layer prefetches of later layers that already
        // landed become evictable too (at worst re-read), never a slot being written.
        self.cache.unpin_all();
    }

    fn stats(&self) -> FetchStats {
        let cache = self.spec_lookups.demand(self.cache.stats());
        FetchStats {
            cache,
            bytes_streamed: self.bytes_streamed,
            stall: self.stall,
            fetch_p50_us: self.hist.value_at_quantile(0.5),
            fetch_p99_us: self.hist.value_at_quantile(0.99),
            fetch_max_us: self.hist.max(),
            prefetched: self.prefetched,
            lookahead_predicted: self.lookahead[0],
            lookahead_used: self.lookahead[1],
            lookahead_reads: self.lookahead[2],
            ram: None,
        }
    }
}
