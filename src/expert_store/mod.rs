//! A thread-safe expert cache with device memory behind it: N slots of one slab, filled through
//! the [`Engine`], each expert pinned per lease until its holder lets go. What the C ABI's
//! `ds4s_experts_acquire` / `_release` / `_prefetch` run on, and the shape any caller that wants
//! "make experts (layer, ids) resident and give me their bytes" can reuse, on any backend.
//!
//! - [`ExpertStore::acquire`] looks every expert up in an [`ExpertCache`](crate::expert_cache::ExpertCache), starts one engine
//!   request per miss (gate, up, down into the slot), waits until all of them are resident (or a
//!   deadline), and returns [`ExpertPins`]: per expert its slot and the byte ranges of its three
//!   slices in [`ExpertStore::slab`]. The slots stay pinned (never evicted or overwritten) until
//!   the `ExpertPins` is dropped. Several holders may pin one expert; it is unpinned when the
//!   last one lets go.
//! - [`ExpertStore::prefetch`] starts reads without pinning (a hint: it stops when no slot can
//!   be evicted).
//! - The slots are filled by the decode path's loader (`decode::slots::SlotLoader`, behind the
//!   store's lock, over `landing::StoreLanding`): the same lookups, the same gate/up-before-down
//!   order, the same counters as `ds4 --ssd-streaming` on the host and the GPU. A completer
//!   thread waits for each read's ticket (outside the lock), then lets the loader harvest: slots
//!   whose reads are all in become resident; a failed one leaves the cache, its error goes to
//!   every holder waiting on it, and a later acquire reads it again.
//!
//! Slot layout: [`SlotLayout`] (gate at 0, up and down each at the next multiple of
//! [`SLICE_ALIGN`], slots [`SLOT_ALIGN`]-aligned), one allocation from `engine.device()`. On GPU
//! backends the slots are device memory (reads staged through the engine's pinned ring); on the
//! host backend they are host memory the engine reads straight into.
//!
//! Limits: one slab for all layers (a slot fits the largest expert); a full cache (every slot
//! pinned by holders, nothing in flight) is an error, not a wait.

use crate::decode::slots::{Ask, SlotLoader};
use crate::decode::{DecodeError, LoadError};
use crate::device::{DeviceBuffer, DeviceError};
use crate::engine::{Engine, EngineError, TicketWatch};
pub use crate::expert_cache::layout::{SLICE_ALIGN, SLOT_ALIGN};
use crate::expert_cache::{CacheError, CacheStats, ExpertKey, PolicyKind, SlotId, SlotLayout};
use crate::model::Ds4Model;
use crossbeam_channel::{unbounded, Receiver};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod landing;
mod state;
#[cfg(test)]
mod tests;

use landing::StoreLanding;
pub use state::ExpertPins;
use state::{release, Held, Shared, SlotInfo, State};

/// Why the store refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("layer {layer} is out of range: the model has {n_layer} layers")]
    NoSuchLayer { layer: u32, n_layer: u32 },
    #[error("expert {expert} of layer {layer} is out of range: {n_expert} experts per layer")]
    NoSuchExpert {
        layer: u32,
        expert: u32,
        n_expert: u64,
    },
    #[error("expert cache")]
    Cache(#[from] CacheError),
    #[error("reading expert {expert} of layer {layer}")]
    Read {
        layer: u32,
        expert: u32,
        #[source]
        source: Arc<EngineError>,
    },
    #[error("allocating the expert slab ({slots} slots of {slot_bytes} bytes)")]
    Alloc {
        slots: usize,
        slot_bytes: u64,
        #[source]
        source: DeviceError,
    },
    #[error("the model's expert layout cannot be cached: {0}")]
    Layout(String),
    #[error("experts of layer {layer} not resident after {waited:?} (reads continue)")]
    Timeout { layer: u32, waited: Duration },
}

/// Byte ranges of one expert's slices inside the slab.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpertLoc {
    pub key: ExpertKey,
    pub slot: SlotId,
    pub gate: Range<usize>,
    pub up: Range<usize>,
    pub down: Range<usize>,
}

/// Counters of the store.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct StoreStats {
    pub cache: CacheStats,
    /// Bytes of experts read into slots (successful reads only).
    pub bytes_streamed: u64,
    pub loads_in_flight: u64,
    pub pinned_slots: u64,
}

/// See the module docs.
pub struct ExpertStore {
    engine: Arc<Engine>,
    model: Arc<Ds4Model>,
    slab: Arc<DeviceBuffer>,
    layout: SlotLayout,
    shared: Arc<Shared>,
    completer: Option<JoinHandle<()>>,
}

impl ExpertStore {
    /// A store of `slots` slots (at least one layer's K experts) with `policy`, allocating the
    /// slab from `engine.device()` now.
    pub fn new(
        engine: Arc<Engine>,
        model: Arc<Ds4Model>,
        slots: usize,
        policy: PolicyKind,
    ) -> Result<Self, StoreError> {
        let layout = SlotLayout::new(&model).map_err(|e| StoreError::Layout(e.to_string()))?;
        let slot_bytes = layout.slot_bytes() as u64;
        let k = model.shape.n_expert_used as usize;
        // The cache's own checks (fewer slots than K) before the slab is allocated.
        crate::expert_cache::ExpertCache::new(slots, k, slot_bytes, policy)?;
        let total = layout.slab_bytes(slots).ok_or_else(|| {
            StoreError::Layout(format!("{slots} slots of {slot_bytes} bytes overflow"))
        })?;
        let slab = engine
            .device()
            .alloc(total)
            .map_err(|source| StoreError::Alloc {
                slots,
                slot_bytes,
                source,
            })?;
        let slab = Arc::new(slab);
        let (tx, rx) = unbounded();
        let landing = StoreLanding {
            engine: Arc::clone(&engine),
            slab: Arc::clone(&slab),
            slot_bytes: layout.slot_bytes(),
            watches: Some(tx),
            failures: Vec::new(),
            start_error: None,
        };
        let loader = SlotLoader::new(&model, slots, policy, landing).map_err(|e| match e {
            DecodeError::Load(LoadError::Cache { source, .. }) => StoreError::Cache(source),
            other => StoreError::Layout(other.to_string()),
        })?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                loader,
                info: vec![SlotInfo::default(); slots],
                failed: HashMap::new(),
            }),
            cv: Condvar::new(),
        });
        let sh = Arc::clone(&shared);
        let completer = std::thread::Builder::new()
            .name("ds4-experts".into())
            .spawn(move || completer(sh, rx))
            .map_err(|e| StoreError::Layout(format!("cannot start the completer thread: {e}")))?;
        Ok(Self {
            engine,
            model,
            slab,
            layout,
            shared,
            completer: Some(completer),
        })
    }

    /// The device memory the slots live in (pointers for callers: `memory().host_ptr()` or
    /// `memory().device_addr()` plus an [`ExpertLoc`]'s offsets).
    pub fn slab(&self) -> &Arc<DeviceBuffer> {
        &self.slab
    }

    /// The engine the slots are read through (its device holds the slab).
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Bytes per slot (the slab holds `capacity()` of them back to back).
    pub fn slot_bytes(&self) -> u64 {
        self.layout.slot_bytes() as u64
    }

    pub fn capacity(&self) -> usize {
        self.shared.lock().loader.cache.capacity()
    }

    pub fn stats(&self) -> StoreStats {
        let st = self.shared.lock();
        let l = &st.loader;
        StoreStats {
            cache: l.cache.stats(),
            bytes_streamed: l.stats().bytes_streamed,
            loads_in_flight: l.pending_len() as u64,
            pinned_slots: l.cache.pinned_count() as u64,
        }
    }

    fn check(&self, layer: u32, ids: &[u32]) -> Result<(), StoreError> {
        let n_layer = self.model.shape.n_layer;
        let l = self
            .model
            .layers
            .get(layer as usize)
            .ok_or(StoreError::NoSuchLayer { layer, n_layer })?;
        let n_expert = l.gate.n_expert;
        match ids
            .iter()
            .find(|&&e| u64::from(e) >= n_expert || e > u16::MAX as u32)
        {
            Some(&expert) => Err(StoreError::NoSuchExpert {
                layer,
                expert,
                n_expert,
            }),
            None if layer > u16::MAX as u32 => Err(StoreError::NoSuchLayer { layer, n_layer }),
            None => Ok(()),
        }
    }

    /// Where `key`'s slices are in the slab when it sits in `slot`.
    fn loc(&self, key: ExpertKey, slot: SlotId) -> ExpertLoc {
        let base = slot as usize * self.layout.slot_bytes();
        let [g, u, d] = self
            .layout
            .places(key.layer as usize)
            .map(|p| base + p.at..base + p.at + p.len);
        ExpertLoc {
            key,
            slot,
            gate: g,
            up: u,
            down: d,
        }
    }

    /// The loader's answer for `ids` (a prefix of them when the cache is full), as store
    /// errors; each slot a new fill took starts a new generation with no holders.
    fn request(&self, st: &mut State, layer: u32, ids: &[u32]) -> Result<Vec<SlotId>, StoreError> {
        let got = st
            .loader
            .request(layer as usize, ids, Ask::Prefetch)
            .map_err(|e| store_err(st, layer, ids, e))?;
        for (&slot, &e) in got.iter().zip(ids) {
            let key = ExpertKey::new(layer as u16, e as u16);
            let info = &mut st.info[slot as usize];
            if info.key != Some(key) {
                info.key = Some(key);
                info.gen += 1;
                info.refs = 0;
            }
        }
        Ok(got)
    }

    /// Makes experts `ids` of `layer` resident and pins them until the returned [`ExpertPins`]
    /// is dropped; blocks until every read has landed, or `timeout` passed (then
    /// [`StoreError::Timeout`]; the reads continue, as if prefetched). Misses are read in the
    /// order of `ids`; repeated ids share one slot. On any error nothing stays pinned.
    pub fn acquire(
        &self,
        layer: u32,
        ids: &[u32],
        timeout: Option<Duration>,
    ) -> Result<ExpertPins, StoreError> {
        self.check(layer, ids)?;
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut held: Vec<Held> = Vec::with_capacity(ids.len());
        let mut locs = Vec::with_capacity(ids.len());
        let g = self.shared.lock();
        let (g, r) = self.pin_all(g, layer, ids, deadline, &mut held, &mut locs);
        let (mut g, r) = match r {
            Ok(()) => self.wait_resident(g, layer, &held, deadline),
            Err(e) => (g, Err(e)),
        };
        match r {
            Ok(()) => Ok(ExpertPins {
                shared: Arc::clone(&self.shared),
                held,
                locs,
            }),
            Err(e) => {
                release(&mut g, &held);
                drop(g);
                self.shared.cv.notify_all();
                Err(e)
            }
        }
    }

    /// Pins every expert of `ids` (starting reads for misses); when every slot is pinned or
    /// loading, waits for reads in flight (they unpin their prefetched slots). `held` and `locs`
    /// get each pin as it is taken.
    fn pin_all<'a>(
        &'a self,
        mut g: MutexGuard<'a, State>,
        layer: u32,
        ids: &[u32],
        deadline: Option<Instant>,
        held: &mut Vec<Held>,
        locs: &mut Vec<ExpertLoc>,
    ) -> (MutexGuard<'a, State>, Result<(), StoreError>) {
        let mut rest = ids;
        while !rest.is_empty() {
            let got = match self.request(&mut g, layer, rest) {
                Ok(got) => got,
                Err(e) => return (g, Err(e)),
            };
            for (&slot, &e) in got.iter().zip(rest) {
                let key = ExpertKey::new(layer as u16, e as u16);
                let info = &mut g.info[slot as usize];
                info.refs += 1;
                held.push(Held {
                    slot,
                    gen: info.gen,
                    key,
                });
                locs.push(self.loc(key, slot));
            }
            rest = &rest[got.len()..];
            if rest.is_empty() {
                break;
            }
            if g.loader.pending_len() == 0 {
                let e = StoreError::Cache(full(&g));
                return (g, Err(e));
            }
            let (g2, r) = self.wait_until(g, deadline, layer);
            g = g2;
            if let Err(e) = r {
                return (g, Err(e));
            }
        }
        (g, Ok(()))
    }

    /// Waits for a completion (or the deadline: [`StoreError::Timeout`]).
    fn wait_until<'a>(
        &self,
        g: MutexGuard<'a, State>,
        deadline: Option<Instant>,
        layer: u32,
    ) -> (MutexGuard<'a, State>, Result<(), StoreError>) {
        let cv = &self.shared.cv;
        match deadline {
            None => (cv.wait(g).unwrap_or_else(PoisonError::into_inner), Ok(())),
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    let waited = Duration::ZERO;
                    return (g, Err(StoreError::Timeout { layer, waited }));
                }
                let (g, _) = cv
                    .wait_timeout(g, d - now)
                    .unwrap_or_else(PoisonError::into_inner);
                (g, Ok(()))
            }
        }
    }

    /// Waits until every pin of `held` is resident, or one of their reads failed.
    fn wait_resident<'a>(
        &self,
        mut g: MutexGuard<'a, State>,
        layer: u32,
        held: &[Held],
        deadline: Option<Instant>,
    ) -> (MutexGuard<'a, State>, Result<(), StoreError>) {
        let started = Instant::now();
        loop {
            let mut pending = false;
            for h in held {
                if let Some((err, _)) = g.failed.get(&(h.slot, h.gen)) {
                    let e = StoreError::Read {
                        layer,
                        expert: h.key.expert.into(),
                        source: Arc::clone(err),
                    };
                    return (g, Err(e));
                }
                let c = &g.loader.cache;
                if !(c.slot_of(h.key) == Some(h.slot) && c.is_resident(h.key)) {
                    pending = true;
                }
            }
            if !pending {
                return (g, Ok(()));
            }
            let (g2, r) = self.wait_until(g, deadline, layer);
            g = g2;
            if let Err(StoreError::Timeout { layer, .. }) = r {
                let waited = started.elapsed();
                return (g, Err(StoreError::Timeout { layer, waited }));
            }
        }
    }

    /// Starts reads of the experts of `ids` that are neither resident nor loading, without
    /// pinning anything; stops at the first that finds no evictable slot. Returns how many
    /// reads it started. Counts as an access in the cache's policy and stats.
    pub fn prefetch(&self, layer: u32, ids: &[u32]) -> Result<usize, StoreError> {
        self.check(layer, ids)?;
        let mut g = self.shared.lock();
        let before = g.loader.pending_len();
        let got = self.request(&mut g, layer, ids)?;
        for slot in got {
            // The lookup pinned it; keep it pinned only if a holder has it.
            if g.info[slot as usize].refs == 0 {
                g.loader.cache.unpin(slot);
            }
        }
        Ok(g.loader.pending_len().saturating_sub(before))
    }
}

/// The cache's `Full` error as it stands.
fn full(st: &State) -> CacheError {
    let c = &st.loader.cache;
    CacheError::Full {
        slots: c.capacity(),
        pinned: c.pinned_count(),
        loading: c.loading_count(),
    }
}

/// A loader error as the store's: the read that could not start names its expert.
fn store_err(st: &mut State, layer: u32, ids: &[u32], e: DecodeError) -> StoreError {
    match e {
        DecodeError::Load(LoadError::Cache { source, .. }) => StoreError::Cache(source),
        DecodeError::Load(LoadError::Read(_)) => match st.loader.landing.start_error.take() {
            Some(source) => StoreError::Read {
                layer,
                expert: ids.first().copied().unwrap_or(0),
                source,
            },
            None => StoreError::Layout(e.to_string()),
        },
        other => StoreError::Layout(crate::errors::chain(&other)),
    }
}

/// Waits for each read the landing hands over, then lets the loader harvest (outside the
/// waits, under the lock) and gives failed reads to their holders.
fn completer(shared: Arc<Shared>, rx: Receiver<TicketWatch>) {
    for w in rx {
        w.wait();
        let mut st = shared.lock();
        st.loader.harvest();
        let failures = std::mem::take(&mut st.loader.landing.failures);
        for (slot, err) in failures {
            let info = &mut st.info[slot as usize];
            let (gen, refs) = (info.gen, std::mem::take(&mut info.refs));
            info.gen += 1;
            info.key = None;
            if refs > 0 {
                st.failed.insert((slot, gen), (err, refs));
            }
        }
        drop(st);
        shared.cv.notify_all();
    }
}

impl Drop for ExpertStore {
    fn drop(&mut self) {
        // Closing the channel lets the completer drain the reads in flight and exit; the
        // engine (held by `self.engine`) is still alive, so every ticket completes.
        self.shared.lock().loader.landing.watches = None;
        if let Some(t) = self.completer.take() {
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for ExpertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExpertStore")
            .field("slot_bytes", &self.layout.slot_bytes())
            .field("stats", &self.stats())
            .finish()
    }
}
