//! The store's shared state and the part that runs without the store: the pins' release (an
//! [`ExpertPins`] may outlive its store).

use super::landing::StoreLanding;
use super::ExpertLoc;
use crate::decode::slots::SlotLoader;
use crate::engine::EngineError;
use crate::expert_cache::{ExpertKey, SlotId};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// One pin: slot, and the fill generation it was taken on.
#[derive(Clone, Copy, Debug)]
pub(super) struct Held {
    pub(super) slot: SlotId,
    pub(super) gen: u64,
    pub(super) key: ExpertKey,
}

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SlotInfo {
    /// Bumped at every new fill and at a failed one: a stale release cannot touch a reused slot.
    pub(super) gen: u64,
    /// Holders of this fill.
    pub(super) refs: u32,
    /// The expert of this fill (a slot the loader gives for another key is a new fill).
    pub(super) key: Option<ExpertKey>,
}

pub(super) struct State {
    /// The slots, their cache and the reads in flight.
    pub(super) loader: SlotLoader<StoreLanding>,
    pub(super) info: Vec<SlotInfo>,
    /// Failed fills that holders still wait on: error and holders left.
    pub(super) failed: HashMap<(SlotId, u64), (Arc<EngineError>, u32)>,
}

pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    pub(super) cv: Condvar,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Releases `held`'s pins (under the lock).
pub(super) fn release(st: &mut State, held: &[Held]) {
    for h in held {
        if let Some((_, left)) = st.failed.get_mut(&(h.slot, h.gen)) {
            *left -= 1;
            if *left == 0 {
                st.failed.remove(&(h.slot, h.gen));
            }
            continue;
        }
        let info = &mut st.info[h.slot as usize];
        if info.gen != h.gen || info.refs == 0 {
            continue;
        }
        info.refs -= 1;
        if info.refs == 0 {
            st.loader.cache.unpin(h.slot);
        }
    }
}

/// Experts pinned by [`ExpertStore::acquire`](super::ExpertStore::acquire), in the order asked for; unpinned on drop.
/// Holds no reference to the store: dropping it after the store is harmless.
pub struct ExpertPins {
    pub(super) shared: Arc<Shared>,
    pub(super) held: Vec<Held>,
    pub(super) locs: Vec<ExpertLoc>,
}

impl ExpertPins {
    /// Per expert asked for: its slot and slices in [`ExpertStore::slab`](super::ExpertStore::slab).
    pub fn locations(&self) -> &[ExpertLoc] {
        &self.locs
    }
}

impl std::fmt::Debug for ExpertPins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.locs).finish()
    }
}

impl Drop for ExpertPins {
    fn drop(&mut self) {
        release(&mut self.shared.lock(), &self.held);
        // A slot unpinned may be what a waiting acquire needs.
        self.shared.cv.notify_all();
    }
}
