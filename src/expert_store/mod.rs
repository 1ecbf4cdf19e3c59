//! A thread-safe expert cache with device memory behind it: N slots of one slab, filled through
//! the [`Engine`], each expert pinned per lease until its holder lets go. What the C ABI's
//! `ds4s_experts_acquire` / `_release` / `_prefetch` run on, and the shape any caller that wants
//! "make experts (layer, ids) resident and give me their bytes" can reuse, on any backend.
//!
//! - [`ExpertStore::acquire`] looks every expert up in an [`ExpertCache`], starts one engine
//!   request per miss (gate, up, down into the slot), waits until all of them are resident (or a
//!   deadline), and returns [`ExpertPins`]: per expert its slot and the byte ranges of its three
//!   slices in [`ExpertStore::slab`]. The slots stay pinned (never evicted or overwritten) until
//!   the `ExpertPins` is dropped. Several holders may pin one expert; it is unpinned when the
//!   last one lets go.
//! - [`ExpertStore::prefetch`] starts reads without pinning (a hint: it stops when no slot can
//!   be evicted).
//! - A completer thread waits for the reads in the order they were started, marks slots
//!   resident (or frees them on failure: the error goes to every holder waiting on that read, a
//!   later acquire reads again) and wakes the waiters.
//!
//! Slot layout: gate at 0, up and down each at the next multiple of [`SLICE_ALIGN`], slots
//! [`SLOT_ALIGN`]-aligned in one allocation from `engine.device()`. On GPU backends the slots are
//! device memory (reads staged through the engine's pinned ring); on the host backend they are
//! host memory the engine reads straight into.
//!
//! Limits: one slab for all layers (a slot fits the largest expert); reads complete in the
//! order they were started (a fast read waits behind a slow one for its completion); a full
//! cache (every slot pinned by holders) is an error, not a wait. `decode::StreamedExperts` and
//! `decode::GpuMoe` keep their own slot loaders; they could move onto this module.

use crate::device::{DeviceBuffer, DeviceError};
use crate::engine::{Engine, EngineError, ReadRequest};
use crate::expert_cache::{
    CacheError, CacheStats, ExpertCache, ExpertKey, Lookup, PolicyKind, SlotId,
};
use crate::model::{Ds4Model, ExpertKind};
use crossbeam_channel::{unbounded, Sender};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod state;
#[cfg(test)]
mod tests;

pub use state::ExpertPins;
use state::{completer, release, Held, Load, Shared, SlotInfo, State};

/// Alignment of each slice inside a slot (enough for any GPU kernel's vector loads).
pub const SLICE_ALIGN: u64 = 256;
/// Alignment of slots in the slab.
pub const SLOT_ALIGN: u64 = 4096;

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

/// Where each slice of a layer's experts goes inside a slot: (offset, len).
#[derive(Clone, Copy, Debug)]
struct SlotLayout {
    gate: (u64, u64),
    up: (u64, u64),
    down: (u64, u64),
}

fn align_up(v: u64, a: u64) -> Option<u64> {
    v.checked_add(a - 1).map(|x| x / a * a)
}

/// See the module docs.
pub struct ExpertStore {
    engine: Arc<Engine>,
    model: Arc<Ds4Model>,
    slab: Arc<DeviceBuffer>,
    slot_bytes: u64,
    layouts: Vec<SlotLayout>,
    shared: Arc<Shared>,
    loads: Option<Sender<Load>>,
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
        let mut layouts = Vec::with_capacity(model.layers.len());
        let mut slot_bytes = 0u64;
        let bad = || StoreError::Layout("expert sizes overflow".into());
        for l in &model.layers {
            let g = l.gate.expert_bytes;
            let up_at = align_up(g, SLICE_ALIGN).ok_or_else(bad)?;
            let down_at = up_at
                .checked_add(l.up.expert_bytes)
                .and_then(|v| align_up(v, SLICE_ALIGN))
                .ok_or_else(bad)?;
            let end = down_at.checked_add(l.down.expert_bytes).ok_or_else(bad)?;
            slot_bytes = slot_bytes.max(align_up(end, SLOT_ALIGN).ok_or_else(bad)?);
            layouts.push(SlotLayout {
                gate: (0, g),
                up: (up_at, l.up.expert_bytes),
                down: (down_at, l.down.expert_bytes),
            });
        }
        if layouts.is_empty() {
            return Err(StoreError::Layout("the model has no layers".into()));
        }
        let k = model.shape.n_expert_used as usize;
        let cache = ExpertCache::new(slots, k, slot_bytes, policy)?;
        let total = (slots as u64)
            .checked_mul(slot_bytes)
            .and_then(|t| usize::try_from(t).ok())
            .ok_or_else(|| {
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
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                cache,
                info: vec![SlotInfo::default(); slots],
                failed: HashMap::new(),
                in_flight: 0,
                bytes_streamed: 0,
            }),
            cv: Condvar::new(),
        });
        let (tx, rx) = unbounded();
        let sh = Arc::clone(&shared);
        let completer = std::thread::Builder::new()
            .name("ds4-experts".into())
            .spawn(move || completer(sh, rx))
            .map_err(|e| StoreError::Layout(format!("cannot start the completer thread: {e}")))?;
        Ok(Self {
            engine,
            model,
            slab: Arc::new(slab),
            slot_bytes,
            layouts,
            shared,
            loads: Some(tx),
            completer: Some(completer),
        })
    }

    /// The device memory the slots live in (pointers for callers: `memory().host_ptr()` or
    /// `memory().device_addr()` plus an [`ExpertLoc`]'s offsets).
    pub fn slab(&self) -> &Arc<DeviceBuffer> {
        &self.slab
    }

    /// Bytes per slot (the slab holds `capacity()` of them back to back).
    pub fn slot_bytes(&self) -> u64 {
        self.slot_bytes
    }

    pub fn capacity(&self) -> usize {
        self.shared.lock().cache.capacity()
    }

    pub fn stats(&self) -> StoreStats {
        let st = self.shared.lock();
        StoreStats {
            cache: st.cache.stats(),
            bytes_streamed: st.bytes_streamed,
            loads_in_flight: st.in_flight,
            pinned_slots: st.cache.pinned_count() as u64,
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
        let base = slot as u64 * self.slot_bytes;
        let lay = self.layouts[key.layer as usize];
        let r = |(o, l): (u64, u64)| (base + o) as usize..(base + o + l) as usize;
        ExpertLoc {
            key,
            slot,
            gate: r(lay.gate),
            up: r(lay.up),
            down: r(lay.down),
        }
    }

    /// The three read requests of `key` into `slot`, and their bytes.
    fn requests(
        &self,
        key: ExpertKey,
        slot: SlotId,
    ) -> Result<(Vec<ReadRequest>, u64), StoreError> {
        let loc = self.loc(key, slot);
        let (layer, e) = (key.layer as u64, key.expert as u64);
        let mut reqs = Vec::with_capacity(3);
        let mut bytes = 0;
        for (kind, dst) in [
            (ExpertKind::Gate, &loc.gate),
            (ExpertKind::Up, &loc.up),
            (ExpertKind::Down, &loc.down),
        ] {
            let s = self
                .model
                .expert_slice(layer, kind, e)
                .map_err(|m| StoreError::Layout(m.to_string()))?;
            bytes += s.len;
            let label = format!("blk.{layer}.ffn_{}_exps expert {e}", kind.as_str());
            reqs.push(
                ReadRequest::new(s.offset, dst.len(), Arc::clone(&self.slab), dst.start)
                    .with_label(label),
            );
        }
        Ok((reqs, bytes))
    }

    /// Starts the read of `key` into `slot` (a fresh miss): returns the fill's generation. On
    /// an error the slot is freed again.
    fn start_load(&self, st: &mut State, key: ExpertKey, slot: SlotId) -> Result<u64, StoreError> {
        let info = &mut st.info[slot as usize];
        info.gen += 1;
        info.refs = 0;
        let gen = info.gen;
        let read_err = |source| StoreError::Read {
            layer: key.layer.into(),
            expert: key.expert.into(),
            source: Arc::new(source),
        };
        let submitted = match &self.loads {
            None => Err(read_err(EngineError::Shutdown {
                offset: 0,
                len: 0,
                label: None,
            })),
            Some(tx) => self.requests(key, slot).and_then(|(reqs, bytes)| {
                let ticket = self.engine.submit(reqs).map_err(read_err)?;
                Ok((tx, ticket, bytes))
            }),
        };
        match submitted {
            Ok((tx, ticket, bytes)) => {
                st.in_flight += 1;
                // The completer lives as long as `loads` (joined in Drop after it is closed).
                let _ = tx.send(Load {
                    slot,
                    bytes,
                    ticket,
                });
                Ok(gen)
            }
            Err(e) => {
                let _ = st.cache.fill_failed(slot);
                st.info[slot as usize].gen += 1;
                Err(e)
            }
        }
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
        for &e in ids {
            let key = ExpertKey::new(layer as u16, e as u16);
            loop {
                match g.cache.lookup(key) {
                    Ok(Lookup::Hit(slot) | Lookup::Loading(slot)) => {
                        let info = &mut g.info[slot as usize];
                        info.refs += 1;
                        held.push(Held {
                            slot,
                            gen: info.gen,
                            key,
                        });
                        locs.push(self.loc(key, slot));
                        break;
                    }
                    Ok(Lookup::Miss { slot, .. }) => {
                        match self.start_load(&mut g, key, slot) {
                            Ok(gen) => {
                                g.info[slot as usize].refs = 1;
                                held.push(Held { slot, gen, key });
                                locs.push(self.loc(key, slot));
                            }
                            Err(e) => return (g, Err(e)),
                        }
                        break;
                    }
                    Err(CacheError::Full { .. }) if g.in_flight > 0 => {
                        let (g2, r) = self.wait_until(g, deadline, layer);
                        g = g2;
                        if let Err(e) = r {
                            return (g, Err(e));
                        }
                    }
                    Err(e) => return (g, Err(e.into())),
                }
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
                if !(g.cache.slot_of(h.key) == Some(h.slot) && g.cache.is_resident(h.key)) {
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
        let mut started = 0;
        for &e in ids {
            let key = ExpertKey::new(layer as u16, e as u16);
            match g.cache.lookup(key) {
                Ok(Lookup::Hit(slot) | Lookup::Loading(slot)) => {
                    // The lookup pinned it; keep it pinned only if a holder has it.
                    if g.info[slot as usize].refs == 0 {
                        g.cache.unpin(slot);
                    }
                }
                Ok(Lookup::Miss { slot, .. }) => {
                    self.start_load(&mut g, key, slot)?;
                    g.cache.unpin(slot);
                    started += 1;
                }
                Err(CacheError::Full { .. }) => break,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(started)
    }
}

impl Drop for ExpertStore {
    fn drop(&mut self) {
        // Closing the channel lets the completer drain the reads in flight and exit; the
        // engine (held by `self.engine`) is still alive, so every ticket completes.
        self.loads = None;
        if let Some(t) = self.completer.take() {
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for ExpertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExpertStore")
            .field("slot_bytes", &self.slot_bytes)
            .field("stats", &self.stats())
            .finish()
    }
}
