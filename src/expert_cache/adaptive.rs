//! `adaptive`: follow whichever of LRU and `lfu-admit` has been winning on this very stream.
//!
//! Two **shadow caches** of the same capacity run beside the real one on metadata only (keys,
//! no expert bytes): an [`ExpertCache`] with [`Lru`] and one with [`LfuAdmit`], driven the way
//! the engine drives the real cache — every lookup pins, a change of layer ends the step and
//! unpins (so neither shadow evicts the experts of the layer being computed), every miss is
//! filled at once. A score, an exponentially decayed sum of (LFU shadow hit − LRU shadow hit)
//! with a window of `WINDOW × slots` accesses, says which rule has been better lately.
//!
//! The real cache keeps both rules' orderings over its own evictable slots (an `Lru` and an
//! `LfuAdmit` fed every event) and evicts with the current winner, removing the victim from the
//! other. Switching is free (no state to rebuild), and because both shadows always run, the
//! choice follows the trace when it shifts between recency- and frequency-shaped phases.
//!
//! Why this and not ARC's ghost lists: ARC adapts the *split* between a recency and a
//! frequency list, and on the synthetic traces it stayed 6–23 points under the better simple
//! policy at one token's worth of slots (docs/BENCHMARKS.md); dueling whole policies is judged on
//! the exact quantity that matters (hits), with one constant (`WINDOW`) and no per-trace tuning.
//!
//! Cost: O(1) amortised per access — two shadow lookups (hash map + O(1) policy work each) and
//! both real orderings' O(1) updates, about 3× the work of one policy; memory 3× the
//! bookkeeping (a few dozen bytes per slot, nothing per expert byte).

use super::policy::{Policy, PolicyKind};
use super::{ExpertCache, ExpertKey, Lookup};

/// The score's window, in multiples of the slot count: an expert lives about `slots` accesses
/// under LRU, so a few lifetimes of evidence decide. Chosen on the synthetic traces.
pub const WINDOW: f64 = 2.0;

/// The rules it chooses between, in tie-break order (a tie keeps the first).
pub const CANDIDATES: [PolicyKind; 3] = [PolicyKind::Lru, PolicyKind::LfuAdmit, PolicyKind::Arc];

/// The adaptive policy (see the module docs).
pub struct Adaptive {
    /// One metadata-only cache per candidate, driven like the real one.
    shadows: Vec<ExpertCache>,
    /// Each candidate's decayed shadow hits.
    score: [f64; CANDIDATES.len()],
    decay: f64,
    /// The layer of the previous access: a new layer ends the shadows' step.
    layer: Option<u16>,
    /// Each candidate's ordering of the real cache's slots.
    real: Vec<Box<dyn Policy>>,
}

impl Adaptive {
    pub fn new(slots: usize) -> Self {
        let slots = slots.max(1);
        let shadows = CANDIDATES
            .iter()
            .map(|k| {
                ExpertCache::with_policy_checked(slots, 1, 0, k.build(slots))
                    .expect("slots ≥ 1 and checked")
            })
            .collect();
        Adaptive {
            shadows,
            score: [0.0; CANDIDATES.len()],
            decay: 1.0 - 1.0 / (WINDOW * slots as f64),
            layer: None,
            real: CANDIDATES.iter().map(|k| k.build(slots)).collect(),
        }
    }

    /// The index in [`CANDIDATES`] of the rule being followed now.
    pub fn winner(&self) -> usize {
        let mut w = 0;
        for (i, &s) in self.score.iter().enumerate() {
            if s > self.score[w] {
                w = i;
            }
        }
        w
    }

    /// One lookup in a shadow: whether it hit. A shadow whose every slot is pinned (a step
    /// longer than the cache) unpins and retries, which cannot fail with ≥ 1 slot.
    fn shadow_hit(c: &mut ExpertCache, key: ExpertKey) -> bool {
        let r = match c.lookup(key) {
            Ok(r) => Ok(r),
            Err(_) => {
                c.unpin_all();
                c.lookup(key)
            }
        };
        match r {
            Ok(Lookup::Miss { slot, .. }) => {
                // The slot was just reserved: filling it cannot fail.
                let _ = c.fill_done(slot);
                false
            }
            Ok(_) => true,
            Err(_) => false,
        }
    }
}

impl Policy for Adaptive {
    fn name(&self) -> &'static str {
        "adaptive"
    }
    fn on_access(&mut self, key: ExpertKey) {
        let new_step = self.layer != Some(key.layer);
        self.layer = Some(key.layer);
        for (c, score) in self.shadows.iter_mut().zip(self.score.iter_mut()) {
            if new_step {
                c.unpin_all();
            }
            let hit = Self::shadow_hit(c, key);
            *score = *score * self.decay + hit as u32 as f64;
        }
        self.real.iter_mut().for_each(|p| p.on_access(key));
    }
    fn on_hit(&mut self, slot: u32) {
        self.real.iter_mut().for_each(|p| p.on_hit(slot));
    }
    fn on_insert(&mut self, slot: u32, key: ExpertKey) {
        self.real.iter_mut().for_each(|p| p.on_insert(slot, key));
    }
    fn detach(&mut self, slot: u32) {
        self.real.iter_mut().for_each(|p| p.detach(slot));
    }
    fn attach(&mut self, slot: u32) {
        self.real.iter_mut().for_each(|p| p.attach(slot));
    }
    /// The winner chooses; the others forget the slot as if its load had failed.
    fn evict(&mut self) -> Option<u32> {
        let w = self.winner();
        let s = self.real[w].evict()?;
        for (i, p) in self.real.iter_mut().enumerate() {
            if i != w {
                p.detach(s);
                p.on_remove(s);
            }
        }
        Some(s)
    }
    fn on_remove(&mut self, slot: u32) {
        self.real.iter_mut().for_each(|p| p.on_remove(slot));
    }
}
