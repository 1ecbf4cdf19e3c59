//! How [`GpuMoe`] brings experts into its slab: cache lookups, reads through the engine
//! (every gate/up of a request before any down), the RAM tier, the C engine's pattern,
//! speculative lookahead, and completion (`ready` waits, `harvest` does not).

use super::ram_tier::RamTier;
use super::GpuMoe;
use crate::decode::c_pattern::{CPatternLoader, Job, C_ENGINE_WORKERS};
use crate::decode::DecodeError;
use crate::decode::LoadError;
use crate::device::{Device, DeviceBuffer, Event, GpuDevice};
use crate::engine::{EngineError, ReadRequest, Ticket};
use crate::expert_cache::{CacheError, ExpertKey, Lookup, PolicyKind, SlotId};
use crate::model::ExpertKind;
use std::sync::Arc;
use std::time::Instant;

/// One slice of an expert: file offset, length, offset in the destination.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SliceAt {
    pub offset: u64,
    pub len: usize,
    pub at: usize,
}

impl SliceAt {
    /// The same slice landing `base` bytes further into the destination.
    fn shifted(self, base: usize) -> Self {
        Self {
            at: base + self.at,
            ..self
        }
    }
    fn request(self, dst: &Arc<DeviceBuffer>) -> ReadRequest {
        ReadRequest::new(self.offset, self.len, dst.clone(), self.at)
    }
}

/// A device slot being filled. Reads from the file: gate and up in one ticket, down in a
/// second one queued after every gate/up of the same request (`down_at`, for when queueing it
/// failed and [`GpuMoe::ready`] must). Through the RAM tier: the reads land in RAM slot
/// `ram` (`dst` is the RAM slab), then `copy` brings the expert to the device slot; a RAM
/// hit is the copy alone (no tickets).
pub(super) struct Pending {
    gate_up: Option<Ticket>,
    down: Option<Ticket>,
    down_at: SliceAt,
    dst: Arc<DeviceBuffer>,
    ram: Option<SlotId>,
    copy: Option<Event>,
    key: ExpertKey,
    since: Instant,
}

impl Pending {
    fn reads_done(&self) -> bool {
        match &self.gate_up {
            None => true,
            Some(g) => g.is_done() && self.down.as_ref().is_some_and(Ticket::is_done),
        }
    }

    /// Reads landed in the RAM tier, the copy to the device not queued yet.
    fn needs_copy(&self) -> bool {
        self.ram.is_some() && self.copy.is_none() && self.gate_up.is_some()
    }

    fn is_done(&self) -> bool {
        self.reads_done()
            && !self.needs_copy()
            && self
                .copy
                .as_ref()
                .is_none_or(|e| matches!(e.query(), Ok(true)))
    }
}

pub(super) fn read_err(key: ExpertKey) -> impl FnOnce(EngineError) -> DecodeError {
    move |source| DecodeError::Read {
        what: format!("expert {} of layer {}", key.expert, key.layer),
        source,
    }
}

impl<'a, D: GpuDevice> GpuMoe<'a, D> {
    /// Looks up experts `ids` of `layer`, queueing reads for the misses (into their slots).
    /// Returns the slots in order. A prefetch stops when the cache is full.
    pub(super) fn request(
        &mut self,
        layer: usize,
        ids: &[u32],
        prefetch: bool,
    ) -> Result<Vec<SlotId>, DecodeError> {
        let mut out = Vec::with_capacity(ids.len());
        let mut missed = Vec::new();
        let mut c_jobs = Vec::new();
        for &e in ids {
            let key = ExpertKey::new(layer as u16, e as u16);
            let Some(found) = self.lookup(key, &out, prefetch)? else {
                break;
            };
            let slot = match found {
                Lookup::Hit(s) | Lookup::Loading(s) => {
                    out.push(s);
                    continue;
                }
                Lookup::Miss { slot, .. } => slot,
            };
            out.push(slot);
            let at = self.slices(key, slot)?;
            let base = slot as usize * self.expert_bytes;
            if self.c_pattern.is_some() && !prefetch {
                c_jobs.push((slot, at.map(|a| a.shifted(base))));
                self.bytes_streamed += self.expert_bytes as u64;
            } else if self.miss(key, slot, at)? {
                missed.push(slot);
            }
        }
        // Every miss's gate and up are queued; now the downs (needed last by each expert).
        for s in missed {
            self.queue_down(s)?;
        }
        if !c_jobs.is_empty() {
            self.c_load(c_jobs)?;
        }
        Ok(out)
    }

    /// The device cache's answer for `key`. A full cache (every slot pinned or loading): a
    /// prefetch stops (`None`); a demand waits for the reads in flight other than this
    /// request's own (`keep`) and asks again.
    fn lookup(
        &mut self,
        key: ExpertKey,
        keep: &[SlotId],
        prefetch: bool,
    ) -> Result<Option<Lookup>, DecodeError> {
        let found = match self.cache.lookup(key) {
            Err(CacheError::Full { .. }) if prefetch => return Ok(None),
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
                self.cache.lookup(key)
            }
            r => r,
        };
        Ok(Some(found.map_err(LoadError::cache("expert cache"))?))
    }

    /// The gate, up and down slices of `key`, placed inside one slot; on a bad slice the slot
    /// is given back (nothing will fill it).
    fn slices(&mut self, key: ExpertKey, slot: SlotId) -> Result<[SliceAt; 3], DecodeError> {
        let (layer, e) = (u64::from(key.layer), u64::from(key.expert));
        let mut at = [SliceAt::default(); 3];
        for (i, kind) in [ExpertKind::Gate, ExpertKind::Up, ExpertKind::Down]
            .into_iter()
            .enumerate()
        {
            match self.model.expert_slice(layer, kind, e) {
                Ok(sl) => {
                    at[i] = SliceAt {
                        offset: sl.offset,
                        len: sl.len as usize,
                        at: self.parts[i].0,
                    }
                }
                Err(err) => {
                    let _ = self.cache.fill_failed(slot);
                    return Err(
                        LoadError::slice(format!("expert {e} of layer {layer}"))(err).into(),
                    );
                }
            }
        }
        Ok(at)
    }

    /// A device-cache miss into `slot`: through the RAM tier (a RAM hit is a copy; a RAM miss
    /// reads into a RAM slot, then copies), else read straight into the slot. Gate and up are
    /// submitted now; true when the down read is still to queue.
    fn miss(
        &mut self,
        key: ExpertKey,
        slot: SlotId,
        at: [SliceAt; 3],
    ) -> Result<bool, DecodeError> {
        let base = slot as usize * self.expert_bytes;
        let mut via: Option<(SlotId, usize)> = None;
        if let Some(ram) = self.ram.as_mut() {
            match ram.cache.lookup(key) {
                Ok(Lookup::Hit(rs)) => {
                    let ev = match ram.copy_out(&*self.dev, rs, &self.slab, base) {
                        Ok(ev) => ev,
                        Err(e) => {
                            // Nothing will fill the device slot: free it.
                            let _ = self.cache.fill_failed(slot);
                            return Err(e);
                        }
                    };
                    self.pending.insert(
                        slot,
                        Pending {
                            gate_up: None,
                            down: None,
                            down_at: SliceAt::default(),
                            dst: self.slab.clone(),
                            ram: Some(rs),
                            copy: Some(ev),
                            key,
                            since: Instant::now(),
                        },
                    );
                    return Ok(false);
                }
                Ok(Lookup::Miss { slot: rs, .. }) => {
                    if let Err(e) = ram.before_write(rs) {
                        let _ = ram.cache.fill_failed(rs);
                        let _ = self.cache.fill_failed(slot);
                        return Err(e);
                    }
                    via = Some((rs, ram.at(rs)));
                }
                // Loading elsewhere cannot be (the device cache dedups first) and a full
                // RAM tier (every slot pinned): read straight to the device.
                Ok(Lookup::Loading(_)) | Err(_) => {}
            }
        }
        let (dst, dbase) = match (via, self.ram.as_ref()) {
            (Some((_, rbase)), Some(ram)) => (ram.slab.clone(), rbase),
            _ => (self.slab.clone(), base),
        };
        let at = at.map(|a| a.shifted(dbase));
        let gate_up = match self
            .engine
            .submit(vec![at[0].request(&dst), at[1].request(&dst)])
        {
            Ok(t) => t,
            Err(e) => {
                let _ = self.cache.fill_failed(slot);
                if let (Some((rs, _)), Some(ram)) = (via, self.ram.as_mut()) {
                    let _ = ram.cache.fill_failed(rs);
                }
                return Err(read_err(key)(e));
            }
        };
        self.bytes_streamed += self.expert_bytes as u64;
        self.pending.insert(
            slot,
            Pending {
                gate_up: Some(gate_up),
                down: None,
                down_at: at[2],
                dst,
                ram: via.map(|v| v.0),
                copy: None,
                key,
                since: Instant::now(),
            },
        );
        Ok(true)
    }

    /// The C engine's pattern: one job per slice on its 18 workers, and the layer waits for
    /// all of them before anything computes.
    fn c_load(&mut self, misses: Vec<(SlotId, [SliceAt; 3])>) -> Result<(), DecodeError> {
        let Some(loader) = &self.c_pattern else {
            return Ok(());
        };
        let jobs = misses
            .iter()
            .flat_map(|(_, at)| at.iter())
            .map(|a| Job {
                offset: a.offset,
                len: a.len,
                dst: self.slab.clone(),
                at: a.at,
            })
            .collect();
        let t0 = Instant::now();
        let r = loader.load(jobs);
        let took = t0.elapsed();
        self.stall += took;
        for (slot, _) in &misses {
            if r.is_ok() {
                self.cache
                    .fill_done(*slot)
                    .map_err(LoadError::cache("expert cache"))?;
                let _ = self.hist.record((took.as_micros() as u64).max(1));
            } else {
                let _ = self.cache.fill_failed(*slot);
            }
        }
        r
    }

    /// Misses are read with the C engine's streaming pattern, re-implemented
    /// ([`crate::decode::c_pattern`]): 18 workers, one job per slice, buffered pread → copy →
    /// sync → fadvise(DONTNEED), a rendezvous per layer; no hash-layer prefetch at token start
    /// (the caller also picks LRU and no lookahead). For same-run comparisons only.
    pub fn with_c_engine_pattern(mut self, path: &std::path::Path) -> Result<Self, DecodeError> {
        let max = self.parts.iter().map(|p| p.1).max().unwrap_or(0);
        let dev: Arc<dyn Device> = self.dev.clone();
        self.c_pattern = Some(CPatternLoader::new(path, dev, C_ENGINE_WORKERS, max)?);
        Ok(self)
    }

    /// A RAM tier of `slots` experts in pinned host memory under the device cache
    /// (`--ram-streaming-cache-experts`; [`super::ram_tier`]). Call before any token.
    pub fn with_ram_tier(mut self, slots: usize, policy: PolicyKind) -> Result<Self, DecodeError> {
        let k = self.w.params.n_used;
        self.ram = Some(RamTier::new(
            &*self.dev,
            slots,
            k,
            self.expert_bytes,
            policy,
        )?);
        Ok(self)
    }

    /// Queues the down read of pending `slot` (if it reads and has not queued it yet).
    fn queue_down(&mut self, slot: SlotId) -> Result<(), DecodeError> {
        let engine = self.engine;
        if let Some(p) = self
            .pending
            .get_mut(&slot)
            .filter(|p| p.gate_up.is_some() && p.down.is_none())
        {
            let t = engine
                .submit(vec![p.down_at.request(&p.dst)])
                .map_err(read_err(p.key))?;
            p.down = Some(t);
        }
        Ok(())
    }

    /// Drops pending `slot` after a failure: out of the device cache, and its RAM slot out of
    /// the RAM tier when the failed reads were filling it.
    fn fail(&mut self, slot: SlotId) {
        if let Some(p) = self.pending.remove(&slot) {
            if let (Some(rs), true, Some(ram)) = (p.ram, p.gate_up.is_some(), self.ram.as_mut()) {
                let _ = ram.cache.fill_failed(rs);
            }
        }
        let _ = self.cache.fill_failed(slot);
    }

    /// Waits for the reads of a RAM-tier fill, then queues its copy RAM → device slot.
    fn start_copy(&mut self, slot: SlotId) -> Result<(), DecodeError> {
        let Some(p) = self.pending.get_mut(&slot) else {
            return Ok(());
        };
        let key = p.key;
        let r = match (p.gate_up.take(), p.down.take()) {
            (Some(g), Some(d)) => g.wait().and(d.wait()),
            (Some(g), None) => g.wait(),
            _ => Ok(()),
        };
        let rs = p.ram;
        if let Err(e) = r {
            // The tickets are gone: `fail` must still drop the RAM slot.
            if let (Some(rs), Some(ram)) = (rs, self.ram.as_mut()) {
                let _ = ram.cache.fill_failed(rs);
            }
            self.pending.remove(&slot);
            let _ = self.cache.fill_failed(slot);
            return Err(read_err(key)(e));
        }
        let (Some(rs), Some(ram)) = (rs, self.ram.as_mut()) else {
            return Ok(());
        };
        let base = slot as usize * self.expert_bytes;
        let copied = ram
            .cache
            .fill_done(rs)
            .map_err(|e| LoadError::cache("RAM tier")(e).into())
            .and_then(|()| ram.copy_out(&*self.dev, rs, &self.slab, base));
        match copied {
            Ok(ev) => {
                if let Some(p) = self.pending.get_mut(&slot) {
                    p.copy = Some(ev);
                }
                Ok(())
            }
            Err(e) => {
                self.pending.remove(&slot);
                let _ = self.cache.fill_failed(slot);
                Err(e)
            }
        }
    }

    /// Waits until `slot`'s bytes are in device memory (no-op for a resident slot).
    pub(super) fn ready(&mut self, slot: SlotId) -> Result<(), DecodeError> {
        let t0 = Instant::now();
        let r = self.ready_inner(slot);
        self.stall += t0.elapsed();
        r
    }

    fn ready_inner(&mut self, slot: SlotId) -> Result<(), DecodeError> {
        if !self.pending.contains_key(&slot) {
            return Ok(());
        }
        if let Err(e) = self.queue_down(slot) {
            self.fail(slot);
            return Err(e);
        }
        if self.pending.get(&slot).is_some_and(Pending::needs_copy) {
            self.start_copy(slot)?;
        }
        let Some(p) = self.pending.remove(&slot) else {
            return Ok(());
        };
        let key = p.key;
        let reads = match (p.gate_up, p.down) {
            (Some(g), Some(d)) => g.wait().and(d.wait()),
            (Some(g), None) => g.wait(),
            _ => Ok(()),
        };
        let r = reads.map_err(read_err(key)).and_then(|()| match &p.copy {
            Some(ev) => ev
                .wait()
                .map_err(|e| LoadError::device("RAM tier copy")(e).into()),
            None => Ok(()),
        });
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

    pub(super) fn is_pending(&self, slot: SlotId) -> bool {
        self.pending.contains_key(&slot)
    }

    /// Moves landed reads on without waiting: RAM-tier fills whose reads are in get their copy
    /// queued, and slots whose bytes are all in become resident instead of loading. A failed
    /// one is dropped from the cache (read again if asked for); the error belongs to the layer
    /// that asks.
    pub(super) fn harvest(&mut self) {
        let stall = self.stall; // nothing here waits for anything not already over
        let landed: Vec<SlotId> = self
            .pending
            .iter()
            .filter(|(_, p)| p.reads_done() && p.needs_copy())
            .map(|(s, _)| *s)
            .collect();
        for s in landed {
            let _ = self.start_copy(s);
        }
        let done: Vec<SlotId> = self
            .pending
            .iter()
            .filter(|(_, p)| p.is_done())
            .map(|(s, _)| *s)
            .collect();
        for s in done {
            let _ = self.ready(s);
        }
        self.stall = stall;
    }

    /// Speculative lookahead (`--ssd-streaming-lookahead`), as on the host stack
    /// ([`crate::decode::MoeStack::with_lookahead`]): the next router-routed layer's router
    /// runs on this layer's input, and the experts it picks start reading (after this layer's
    /// demand reads, into free slots only) while this layer computes. Results do not change.
    pub fn with_lookahead(mut self, on: bool) -> Self {
        self.lookahead = on;
        self
    }

    /// Starts reads of the guessed experts of `layer` (a prefetch: stops at a full cache); its
    /// lookups stay out of the reported hit rate.
    pub(super) fn speculate(&mut self, layer: usize, ids: &[u32]) -> Result<(), DecodeError> {
        if self.full.as_ref().is_some_and(|f| layer < f.1) {
            return Ok(());
        }
        let before = self.pending.len();
        let c0 = self.cache.stats();
        self.request(layer, ids, true)?;
        let c1 = self.cache.stats();
        self.spec_lookups.add(&c0, &c1);
        self.spec[0] += ids.len() as u64;
        self.spec[2] += self.pending.len().saturating_sub(before) as u64;
        self.guess = Some((layer, ids.to_vec()));
        Ok(())
    }
}
