//! The expert RAM tier of [`super::GpuMoe`] (`--ram-streaming-cache-experts N|<n>GB`): a
//! second cache of whole experts in pinned host memory, under the device cache.
//!
//! Inclusive, and the RAM slot is the staging of the read: a device miss that also misses
//! here is read from the file straight into a RAM slot (host-visible mapped memory: the
//! engine's direct path, no staging ring), then copied RAM slot → device slot at link speed;
//! a device miss that hits here is only that copy. So a RAM miss costs what a plain miss
//! costs (one file read, one host→device transfer), and a RAM hit skips the file.
//!
//! Ordering: a RAM slot may be the source of a copy still in flight when the cache evicts it;
//! [`RamTier::before_write`] waits for that copy before anything is read into the slot (the
//! copy also holds a lease on the range, so a write that skipped the wait would fail `Busy`,
//! never race). Off on unified-memory devices (device memory is host memory there).

use crate::decode::LoadError;
use crate::decode::{DecodeError, RamTierStats};
use crate::device::{DeviceBuffer, Event, GpuDevice};
use crate::expert_cache::{ExpertCache, PolicyKind, SlotId};
use std::collections::HashMap;
use std::sync::Arc;

pub(super) struct RamTier {
    pub slab: Arc<DeviceBuffer>,
    pub cache: ExpertCache,
    expert_bytes: usize,
    /// The last copy out of each RAM slot (waited for before the slot is written again).
    copies: HashMap<SlotId, Event>,
    n_copies: u64,
}

impl RamTier {
    pub fn new(
        dev: &impl GpuDevice,
        slots: usize,
        k: usize,
        expert_bytes: usize,
        policy: PolicyKind,
    ) -> Result<Self, DecodeError> {
        let cache = ExpertCache::new(slots, k, expert_bytes as u64, policy)
            .map_err(LoadError::cache("RAM tier"))?;
        let len = slots
            .checked_mul(expert_bytes)
            .ok_or_else(|| LoadError::layout("RAM tier size overflows"))?;
        let slab = Arc::new(
            dev.alloc_mapped(len)
                .map_err(LoadError::device(format!("RAM tier ({len} B pinned)")))?,
        );
        Ok(Self {
            slab,
            cache,
            expert_bytes,
            copies: HashMap::new(),
            n_copies: 0,
        })
    }

    /// Offset of RAM slot `s` in the slab.
    pub fn at(&self, s: SlotId) -> usize {
        s as usize * self.expert_bytes
    }

    /// Waits until no copy reads RAM slot `s` any more (before reading new bytes into it).
    pub fn before_write(&mut self, s: SlotId) -> Result<(), DecodeError> {
        match self.copies.remove(&s) {
            Some(ev) => ev
                .wait()
                .map_err(|e| LoadError::device("RAM tier copy")(e).into()),
            None => Ok(()),
        }
    }

    /// Queues the copy of RAM slot `s` into `dst[at..]` (one whole expert).
    pub fn copy_out(
        &mut self,
        dev: &impl GpuDevice,
        s: SlotId,
        dst: &Arc<DeviceBuffer>,
        at: usize,
    ) -> Result<Event, DecodeError> {
        let ev = dev
            .copy_d2d_async(&self.slab, self.at(s), dst, at, self.expert_bytes)
            .map_err(LoadError::device("RAM tier copy"))?;
        self.copies.insert(s, ev.clone());
        self.n_copies += 1;
        Ok(ev)
    }

    pub fn stats(&self) -> RamTierStats {
        RamTierStats {
            experts: self.cache.capacity(),
            bytes: self.slab.len() as u64,
            cache: self.cache.stats(),
            copies: self.n_copies,
        }
    }
}
