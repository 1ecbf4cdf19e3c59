//! The one expert-slot loader: [`SlotLoader`] fills the slots of an [`ExpertCache`] with the
//! same steps for every provider — cache lookup (hit / loading / miss / full), the three reads
//! of the [`SlotLayout`], every miss's gate and up queued before any down (the FFN needs gate
//! and up first), the pending map, completion without waiting (`harvest`) or with it
//! (`ready`), fill done / failed, and the counters (bytes, stall, latency, hash-layer
//! prefetches, speculative guesses and their lookups kept out of the hit rate).
//!
//! Where the bytes land is a [`Landing`]: host bytes from the engine's pool
//! (`StreamedExperts`), a device slab (the GPU stack, with the RAM tier under it), or the C
//! engine's batch pattern (a demand request's misses loaded together, synchronously). The
//! loader never touches memory itself.
//!
//! Requests: [`Ask::Demand`] (a layer computing now: a full cache first lets the reads in flight
//! land, then is [`LoadError::Held`]) and [`Ask::Prefetch`] (hash layers at token start,
//! speculative guesses, preload: stops at a full cache; never batched).

use super::experts::{FetchStats, SpecLookups};
use super::{DecodeError, LoadError};
use crate::expert_cache::layout::LayoutError;
use crate::expert_cache::{
    CacheError, ExpertCache, ExpertKey, Lookup, PolicyKind, SliceRead, SlotId, SlotLayout,
};
use crate::model::Ds4Model;
use hdrhistogram::Histogram;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What a request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ask {
    Demand,
    Prefetch,
}

/// The reads of one miss: the expert, its slot, gate / up / down.
pub(crate) struct Miss {
    pub key: ExpertKey,
    pub slot: SlotId,
    pub reads: [SliceRead; 3],
}

/// A fill the landing started, and the bytes it reads from the file (0 when it reads none: a
/// RAM-tier hit is a copy).
pub(crate) struct Started<F> {
    pub fill: F,
    pub read_bytes: u64,
}

/// Where a loader's bytes land. Every method that fails leaves the landing's own state clean
/// (a RAM slot it reserved given back); the loader frees the cache slot.
pub(crate) trait Landing {
    /// One slot being filled.
    type Fill;
    /// Starts filling `m.slot` with `m.key`: queues gate and up (down comes in `queue_down`).
    fn start(&mut self, m: &Miss) -> Result<Started<Self::Fill>, DecodeError>;
    /// Queues the down read (called after every gate/up of the request; again before a wait,
    /// so it must do nothing the second time).
    fn queue_down(&mut self, fill: &mut Self::Fill) -> Result<(), DecodeError>;
    /// Moves the fill on without waiting (a RAM-tier fill whose reads landed gets its copy);
    /// true when [`Self::finish`] would not block.
    fn poll(&mut self, fill: &mut Self::Fill) -> bool;
    /// Waits until the bytes are in the slot.
    fn finish(&mut self, slot: SlotId, fill: Self::Fill) -> Result<(), DecodeError>;
    /// Drops a fill that will never finish (its down could not be queued).
    fn abandon(&mut self, fill: Self::Fill);
    /// True when a demand request's misses are loaded together by [`Self::load_batch`].
    fn batches(&self) -> bool {
        false
    }
    /// Loads `misses` and returns when every one is in its slot (the C engine's pattern).
    fn load_batch(&mut self, _misses: &[Miss]) -> Result<(), DecodeError> {
        Err(LoadError::Internal("this landing loads no batches".into()).into())
    }
}

struct Pending<F> {
    since: Instant,
    fill: F,
}

/// See the module docs.
pub(crate) struct SlotLoader<L: Landing> {
    pub(crate) cache: ExpertCache,
    pub(crate) layout: SlotLayout,
    pub(crate) landing: L,
    pending: HashMap<SlotId, Pending<L::Fill>>,
    bytes_streamed: u64,
    stall: Duration,
    prefetched: u64,
    hist: Histogram<u64>,
    /// The last speculative guess (layer, experts); guessed, used by their layer, reads the
    /// guesses started.
    guess: Option<(usize, Vec<u32>)>,
    spec: [u64; 3],
    spec_lookups: SpecLookups,
}

impl<L: Landing> SlotLoader<L> {
    /// A cache of `slots` experts with `policy` (at least one layer's K) over `landing`.
    pub fn new(
        model: &Ds4Model,
        slots: usize,
        policy: PolicyKind,
        landing: L,
    ) -> Result<Self, DecodeError> {
        let layout = layout_of(model)?;
        let k = model.shape.n_expert_used as usize;
        let cache = ExpertCache::new(slots, k, layout.slot_bytes() as u64, policy)
            .map_err(LoadError::cache("expert cache"))?;
        Ok(Self {
            cache,
            layout,
            landing,
            pending: HashMap::new(),
            bytes_streamed: 0,
            stall: Duration::ZERO,
            prefetched: 0,
            hist: Histogram::new(3).expect("3 significant figures is valid"),
            guess: None,
            spec: [0; 3],
            spec_lookups: SpecLookups::default(),
        })
    }

    /// Looks up experts `ids` of `layer`, starting fills for the misses. Returns their slots in
    /// order; a prefetch stops (a shorter list) when no slot can be evicted.
    pub fn request(
        &mut self,
        layer: usize,
        ids: &[u32],
        ask: Ask,
    ) -> Result<Vec<SlotId>, DecodeError> {
        let batch = ask == Ask::Demand && self.landing.batches();
        let mut out = Vec::with_capacity(ids.len());
        let mut started = Vec::new();
        let mut batched: Vec<Miss> = Vec::new();
        let mut failed = None;
        for &e in ids {
            let key = ExpertKey::new(layer as u16, e as u16);
            let slot = match self.lookup(key, &out, ask) {
                Ok(None) => break,
                Ok(Some(Lookup::Hit(s) | Lookup::Loading(s))) => {
                    out.push(s);
                    continue;
                }
                Ok(Some(Lookup::Miss { slot, .. })) => slot,
                Err(err) => {
                    failed = Some(err);
                    break;
                }
            };
            out.push(slot);
            let reads = match self.layout.reads(key) {
                Ok(r) => r,
                Err(err) => {
                    let _ = self.cache.fill_failed(slot);
                    failed = Some(slice_err(key, err));
                    break;
                }
            };
            let miss = Miss { key, slot, reads };
            if batch {
                batched.push(miss);
                continue;
            }
            match self.landing.start(&miss) {
                Ok(s) => {
                    self.bytes_streamed += s.read_bytes;
                    let p = Pending {
                        since: Instant::now(),
                        fill: s.fill,
                    };
                    self.pending.insert(slot, p);
                    started.push(slot);
                }
                Err(err) => {
                    let _ = self.cache.fill_failed(slot);
                    failed = Some(err);
                    break;
                }
            }
        }
        // Every miss's gate and up are queued; now the downs (needed last by each expert), also
        // those of the fills started before a failure. A failed one stays pending: `ready`
        // queues the down again (or fails the slot).
        let mut down_err = None;
        for s in started {
            if let Some(p) = self.pending.get_mut(&s) {
                if let Err(e) = self.landing.queue_down(&mut p.fill) {
                    down_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failed.or(down_err) {
            self.free(&batched);
            return Err(e);
        }
        if !batched.is_empty() {
            self.load_batch(batched)?;
        }
        Ok(out)
    }

    /// Frees the slots of misses that will not be loaded.
    fn free(&mut self, misses: &[Miss]) {
        for m in misses {
            let _ = self.cache.fill_failed(m.slot);
        }
    }

    /// The cache's answer for `key`. A full cache (every slot pinned or loading): a prefetch
    /// stops (`None`); a demand waits for the fills in flight other than this request's own
    /// (`keep`) and asks again.
    fn lookup(
        &mut self,
        key: ExpertKey,
        keep: &[SlotId],
        ask: Ask,
    ) -> Result<Option<Lookup>, DecodeError> {
        let found = match self.cache.lookup(key) {
            Err(CacheError::Full { .. }) if ask == Ask::Prefetch => return Ok(None),
            Err(CacheError::Full { .. }) => {
                let others: Vec<SlotId> = self
                    .pending
                    .keys()
                    .copied()
                    .filter(|s| !keep.contains(s))
                    .collect();
                for s in others {
                    self.ready(s)?;
                }
                match self.cache.lookup(key) {
                    Err(CacheError::Full { .. }) => {
                        let inflight = if self.pending.is_empty() {
                            ""
                        } else {
                            " and reads in flight"
                        };
                        return Err(LoadError::Held {
                            layer: key.layer.into(),
                            slots: self.cache.capacity(),
                            inflight,
                        }
                        .into());
                    }
                    r => r,
                }
            }
            r => r,
        };
        Ok(Some(found.map_err(LoadError::cache("expert cache"))?))
    }

    /// A batch of demand misses through [`Landing::load_batch`]; the time is stall.
    fn load_batch(&mut self, misses: Vec<Miss>) -> Result<(), DecodeError> {
        self.bytes_streamed += misses.iter().map(read_bytes).sum::<u64>();
        let t0 = Instant::now();
        let r = self.landing.load_batch(&misses);
        let took = t0.elapsed();
        self.stall += took;
        if r.is_err() {
            self.free(&misses);
            return r;
        }
        for m in &misses {
            self.cache
                .fill_done(m.slot)
                .map_err(LoadError::cache("expert cache"))?;
            let _ = self.hist.record((took.as_micros() as u64).max(1));
        }
        Ok(())
    }

    pub fn is_pending(&self, slot: SlotId) -> bool {
        self.pending.contains_key(&slot)
    }

    /// Fills in flight.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Waits until `slot`'s bytes are in place (no-op when it is not being filled); the wait
    /// is stall. A failed fill leaves the cache (a later request reads it again).
    pub fn ready(&mut self, slot: SlotId) -> Result<(), DecodeError> {
        let Some(mut p) = self.pending.remove(&slot) else {
            return Ok(());
        };
        let t0 = Instant::now();
        let r = match self.landing.queue_down(&mut p.fill) {
            Ok(()) => self.landing.finish(slot, p.fill),
            Err(e) => {
                self.landing.abandon(p.fill);
                Err(e)
            }
        };
        self.stall += t0.elapsed();
        match r {
            Ok(()) => {
                let us = p.since.elapsed().as_micros() as u64;
                let _ = self.hist.record(us.max(1));
                self.cache
                    .fill_done(slot)
                    .map_err(|e| LoadError::cache("expert cache")(e).into())
            }
            Err(e) => {
                let _ = self.cache.fill_failed(slot);
                Err(e)
            }
        }
    }

    /// Completes the fills that have landed, without waiting (a failed one leaves the cache;
    /// the error belongs to the layer that asks for it again).
    pub fn harvest(&mut self) {
        let landing = &mut self.landing;
        let done: Vec<SlotId> = self
            .pending
            .iter_mut()
            .filter_map(|(s, p)| landing.poll(&mut p.fill).then_some(*s))
            .collect();
        let stall = self.stall; // nothing here waits for anything not already over
        for s in done {
            let _ = self.ready(s);
        }
        self.stall = stall;
    }

    /// A layer is done: landed fills become resident, everything not loading evictable.
    pub fn end_layer(&mut self) {
        self.harvest();
        self.cache.unpin_all();
    }

    /// Hash-layer experts known at token start: read them now (a prefetch).
    pub fn prefetch(&mut self, layer: usize, ids: &[u32]) -> Result<(), DecodeError> {
        let before = self.pending.len();
        self.request(layer, ids, Ask::Prefetch)?;
        self.prefetched += self.pending.len().saturating_sub(before) as u64;
        Ok(())
    }

    /// A speculative guess of `layer`'s experts: a prefetch whose lookups stay out of the
    /// reported hit rate.
    pub fn speculate(&mut self, layer: usize, ids: &[u32]) -> Result<(), DecodeError> {
        let before = self.pending.len();
        let c0 = self.cache.stats();
        self.request(layer, ids, Ask::Prefetch)?;
        let c1 = self.cache.stats();
        self.spec_lookups.add(&c0, &c1);
        self.spec[0] += ids.len() as u64;
        self.spec[2] += self.pending.len().saturating_sub(before) as u64;
        self.guess = Some((layer, ids.to_vec()));
        Ok(())
    }

    /// `layer` asks for `ids` now: counts how many the last guess got right.
    pub fn note_demand(&mut self, layer: usize, ids: &[u32]) {
        if let Some((l, g)) = self.guess.take() {
            if l == layer {
                self.spec[1] += ids.iter().filter(|e| g.contains(e)).count() as u64;
            }
        }
    }

    /// Reads `keys` (of layers `skip..`) before the first token, most important first; stops
    /// when the cache is full. Returns how many were read; the byte and latency counters
    /// start again from zero.
    pub fn preload(&mut self, keys: &[ExpertKey], skip: usize) -> Result<usize, DecodeError> {
        let mut n = 0;
        for chunk in keys.chunks(64) {
            let mut slots = Vec::new();
            let mut stopped = false;
            for k in chunk.iter().filter(|k| k.layer as usize >= skip) {
                let got = self.request(k.layer as usize, &[k.expert as u32], Ask::Prefetch)?;
                if got.is_empty() {
                    stopped = true;
                    break;
                }
                slots.extend(got);
            }
            for s in slots {
                if self.is_pending(s) {
                    self.ready(s)?;
                    n += 1;
                }
            }
            self.cache.unpin_all();
            if stopped {
                break;
            }
        }
        self.reset_counters();
        Ok(n)
    }

    /// Bytes and latency from zero (after a preload or the resident load).
    pub fn reset_counters(&mut self) {
        self.bytes_streamed = 0;
        self.hist.reset();
    }

    /// The counters (the RAM tier's are the provider's to add).
    pub fn stats(&self) -> FetchStats {
        FetchStats {
            cache: self.spec_lookups.demand(self.cache.stats()),
            bytes_streamed: self.bytes_streamed,
            stall: self.stall,
            fetch_p50_us: self.hist.value_at_quantile(0.5),
            fetch_p99_us: self.hist.value_at_quantile(0.99),
            fetch_max_us: self.hist.max(),
            prefetched: self.prefetched,
            lookahead_predicted: self.spec[0],
            lookahead_used: self.spec[1],
            lookahead_reads: self.spec[2],
            ram: None,
        }
    }
}

/// The model's slot layout, as a load error when it has none.
pub(crate) fn layout_of(model: &Ds4Model) -> Result<SlotLayout, DecodeError> {
    SlotLayout::new(model).map_err(|e| {
        LoadError::Layout {
            what: format!("expert slot layout: {e}"),
            source: None,
        }
        .into()
    })
}

/// A slice of `key` the model cannot give (outside its tensor, a layer the layout lacks).
pub(crate) fn slice_err(key: ExpertKey, err: LayoutError) -> DecodeError {
    let what = format!("expert {} of layer {}", key.expert, key.layer);
    match err {
        LayoutError::Slice { source, .. } => LoadError::slice(what)(source).into(),
        other => LoadError::layout(format!("{what}: {other}")).into(),
    }
}

/// Bytes a miss reads from the file.
pub(crate) fn read_bytes(m: &Miss) -> u64 {
    m.reads.iter().map(|r| r.len() as u64).sum()
}

#[cfg(test)]
mod tests;
