//! Where [`GpuMoe`]'s experts land: [`SlabLanding`], the [`Landing`] of its [`SlotLoader`] —
//! reads through the engine into the device slab (staged or straight into the slot), through
//! the RAM tier (reads into a RAM slot, then a copy to the device slot; a RAM hit is the copy
//! alone), or the C engine's batch pattern. The loader does the lookups, the gate/up-before-down
//! order, completion and the counters.

use super::ram_tier::RamTier;
use super::GpuMoe;
use crate::decode::c_pattern::{jobs, CPatternLoader, C_ENGINE_WORKERS};
use crate::decode::slots::{read_bytes, Landing, Miss, Started};
use crate::decode::DecodeError;
use crate::decode::LoadError;
use crate::device::{Device, DeviceBuffer, Event, GpuDevice};
use crate::engine::{Engine, EngineError, ReadRequest, Ticket};
use crate::expert_cache::{ExpertKey, Lookup, PolicyKind, SliceRead, SlotId};
use std::sync::Arc;

/// The device slab of slots `slot_bytes` apart, and what feeds it.
pub(super) struct SlabLanding<'a, D: GpuDevice> {
    pub engine: &'a Engine,
    pub dev: Arc<D>,
    pub slab: Arc<DeviceBuffer>,
    pub slot_bytes: usize,
    /// `--ram-streaming-cache-experts`: experts in pinned host RAM under the device cache.
    pub ram: Option<RamTier>,
    /// `--ssd-streaming-c-engine-pattern`: demand misses read by the C engine's pattern.
    pub c_pattern: Option<CPatternLoader>,
}

/// A device slot being filled. Reads from the file: gate and up in one ticket, down in a
/// second one queued after every gate/up of the same request. Through the RAM tier: the reads
/// land in RAM slot `ram` (`dst` is the RAM slab), then `copy` brings the expert to the device
/// slot; a RAM hit is the copy alone (no tickets).
pub(super) struct SlabFill {
    key: ExpertKey,
    gate_up: Option<Ticket>,
    down: Option<Ticket>,
    down_at: SliceRead,
    dst: Arc<DeviceBuffer>,
    /// Where the slot starts in `dst`, and in the device slab.
    dst_base: usize,
    slot_base: usize,
    ram: Option<SlotId>,
    copy: Option<Event>,
    /// A failure `poll` met (the RAM tier's copy could not start): `finish` reports it.
    err: Option<DecodeError>,
}

impl SlabFill {
    fn reads_done(&self) -> bool {
        match &self.gate_up {
            None => true,
            Some(g) => g.is_done() && self.down.as_ref().is_some_and(Ticket::is_done),
        }
    }

    /// Reads landing in the RAM tier, the copy to the device not queued yet.
    fn needs_copy(&self) -> bool {
        self.ram.is_some() && self.copy.is_none() && self.gate_up.is_some()
    }
}

pub(super) fn read_err(key: ExpertKey) -> impl FnOnce(EngineError) -> DecodeError {
    move |source| DecodeError::Read {
        what: format!("expert {} of layer {}", key.expert, key.layer),
        source,
    }
}

impl<D: GpuDevice> SlabLanding<'_, D> {
    /// A RAM-tier hit: the copy RAM slot → device slot is the whole fill.
    fn ram_hit(&mut self, m: &Miss, rs: SlotId) -> Result<Started<SlabFill>, DecodeError> {
        let base = m.slot as usize * self.slot_bytes;
        let Some(ram) = self.ram.as_mut() else {
            return Err(LoadError::Internal("RAM hit without a RAM tier".into()).into());
        };
        let ev = ram.copy_out(&*self.dev, rs, &self.slab, base)?;
        let fill = SlabFill {
            key: m.key,
            gate_up: None,
            down: None,
            down_at: m.reads[2],
            dst: self.slab.clone(),
            dst_base: base,
            slot_base: base,
            ram: Some(rs),
            copy: Some(ev),
            err: None,
        };
        Ok(Started {
            fill,
            read_bytes: 0,
        })
    }

    /// Waits for the reads of a RAM-tier fill, then queues its copy RAM → device slot.
    fn start_copy(&mut self, f: &mut SlabFill) -> Result<(), DecodeError> {
        let r = match (f.gate_up.take(), f.down.take()) {
            (Some(g), Some(d)) => g.wait().and(d.wait()),
            (Some(g), None) => g.wait(),
            _ => Ok(()),
        };
        let (Some(rs), Some(ram)) = (f.ram.take(), self.ram.as_mut()) else {
            return r.map_err(read_err(f.key));
        };
        if let Err(e) = r {
            let _ = ram.cache.fill_failed(rs);
            return Err(read_err(f.key)(e));
        }
        let copied = ram
            .cache
            .fill_done(rs)
            .map_err(|e| LoadError::cache("RAM tier")(e).into())
            .and_then(|()| ram.copy_out(&*self.dev, rs, &self.slab, f.slot_base));
        f.ram = Some(rs);
        f.copy = Some(copied?);
        Ok(())
    }
}

impl<D: GpuDevice> Landing for SlabLanding<'_, D> {
    type Fill = SlabFill;

    fn start(&mut self, m: &Miss) -> Result<Started<SlabFill>, DecodeError> {
        let base = m.slot as usize * self.slot_bytes;
        let mut via: Option<SlotId> = None;
        if let Some(ram) = self.ram.as_mut() {
            match ram.cache.lookup(m.key) {
                Ok(Lookup::Hit(rs)) => return self.ram_hit(m, rs),
                Ok(Lookup::Miss { slot: rs, .. }) => {
                    if let Err(e) = ram.before_write(rs) {
                        let _ = ram.cache.fill_failed(rs);
                        return Err(e);
                    }
                    via = Some(rs);
                }
                // Loading elsewhere cannot be (the device cache dedups first) and a full RAM
                // tier (every slot pinned): read straight to the device.
                Ok(Lookup::Loading(_)) | Err(_) => {}
            }
        }
        let (dst, dst_base) = match (via, self.ram.as_ref()) {
            (Some(rs), Some(ram)) => (ram.slab.clone(), ram.at(rs)),
            _ => (self.slab.clone(), base),
        };
        let req = |r: &SliceRead| ReadRequest::new(r.offset, r.len(), dst.clone(), r.at(dst_base));
        let gate_up = match self.engine.submit(vec![req(&m.reads[0]), req(&m.reads[1])]) {
            Ok(t) => t,
            Err(e) => {
                if let (Some(rs), Some(ram)) = (via, self.ram.as_mut()) {
                    let _ = ram.cache.fill_failed(rs);
                }
                return Err(read_err(m.key)(e));
            }
        };
        let fill = SlabFill {
            key: m.key,
            gate_up: Some(gate_up),
            down: None,
            down_at: m.reads[2],
            dst,
            dst_base,
            slot_base: base,
            ram: via,
            copy: None,
            err: None,
        };
        Ok(Started {
            fill,
            read_bytes: read_bytes(m),
        })
    }

    fn queue_down(&mut self, f: &mut SlabFill) -> Result<(), DecodeError> {
        if f.gate_up.is_some() && f.down.is_none() {
            let r = f.down_at;
            let req = ReadRequest::new(r.offset, r.len(), f.dst.clone(), r.at(f.dst_base));
            f.down = Some(self.engine.submit(vec![req]).map_err(read_err(f.key))?);
        }
        Ok(())
    }

    fn poll(&mut self, f: &mut SlabFill) -> bool {
        if f.err.is_some() {
            return true;
        }
        if !f.reads_done() {
            return false;
        }
        if f.needs_copy() {
            if let Err(e) = self.start_copy(f) {
                f.err = Some(e);
                return true;
            }
        }
        f.copy
            .as_ref()
            .is_none_or(|e| matches!(e.query(), Ok(true)))
    }

    fn finish(&mut self, _slot: SlotId, mut f: SlabFill) -> Result<(), DecodeError> {
        if let Some(e) = f.err.take() {
            return Err(e);
        }
        if f.needs_copy() {
            self.start_copy(&mut f)?;
        }
        let reads = match (f.gate_up.take(), f.down.take()) {
            (Some(g), Some(d)) => g.wait().and(d.wait()),
            (Some(g), None) => g.wait(),
            _ => Ok(()),
        };
        reads.map_err(read_err(f.key))?;
        match &f.copy {
            Some(ev) => ev
                .wait()
                .map_err(|e| LoadError::device("RAM tier copy")(e).into()),
            None => Ok(()),
        }
    }

    fn abandon(&mut self, f: SlabFill) {
        // The failed reads were filling a RAM slot: it leaves the RAM tier too.
        if let (Some(rs), true, Some(ram)) = (f.ram, f.gate_up.is_some(), self.ram.as_mut()) {
            let _ = ram.cache.fill_failed(rs);
        }
    }

    fn batches(&self) -> bool {
        self.c_pattern.is_some()
    }

    fn load_batch(&mut self, misses: &[Miss]) -> Result<(), DecodeError> {
        match &self.c_pattern {
            Some(loader) => loader.load(jobs(misses, &self.slab, self.slot_bytes)),
            None => Err(LoadError::Internal("no c-engine pattern loader".into()).into()),
        }
    }
}

impl<'a, D: GpuDevice> GpuMoe<'a, D> {
    /// Misses are read with the C engine's streaming pattern, re-implemented
    /// ([`crate::decode::c_pattern`]): 18 workers, one job per slice, buffered pread → copy →
    /// sync → fadvise(DONTNEED), a rendezvous per layer; no hash-layer prefetch at token start
    /// (the caller also picks LRU and no lookahead). For same-run comparisons only.
    pub fn with_c_engine_pattern(mut self, path: &std::path::Path) -> Result<Self, DecodeError> {
        let lay = &self.slots.layout;
        let max = (0..self.model.layers.len())
            .flat_map(|l| lay.places(l).iter().map(|p| p.len))
            .max()
            .unwrap_or(0);
        let dev: Arc<dyn Device> = self.dev.clone();
        self.slots.landing.c_pattern = Some(CPatternLoader::new(path, dev, C_ENGINE_WORKERS, max)?);
        Ok(self)
    }

    /// A RAM tier of `slots` experts in pinned host memory under the device cache
    /// (`--ram-streaming-cache-experts`; `decode::gpu::ram_tier`). Call before any token.
    pub fn with_ram_tier(mut self, slots: usize, policy: PolicyKind) -> Result<Self, DecodeError> {
        let k = self.w.params.n_used;
        let slot_bytes = self.slots.layout.slot_bytes();
        self.slots.landing.ram = Some(RamTier::new(&*self.dev, slots, k, slot_bytes, policy)?);
        Ok(self)
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
        self.slots.speculate(layer, ids)
    }
}
