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

use super::admit::LfuAdmit;
use super::policy::{Lru, Policy, LFU_DECAY_PERIOD};
use super::{ExpertCache, ExpertKey, Lookup};

/// The score's window, in multiples of the slot count: an expert lives about `slots` accesses
/// under LRU, so a few lifetimes of evidence decide. Chosen on the synthetic traces.
pub const WINDOW: f64 = 2.0;

/// The adaptive policy (see the module docs).
pub struct Adaptive {
    shadow_lru: ExpertCache,
    shadow_lfu: ExpertCache,
    /// The layer of the previous access: a new layer ends the shadows' step.
    layer: Option<u16>,
    /// > 0: the LFU shadow has had more hits lately.
    score: f64,
    decay: f64,
    lru: Lru,
    lfu: LfuAdmit,
}

impl Adaptive {
    pub fn new(slots: usize) -> Self {
        let slots = slots.max(1);
        let period = LFU_DECAY_PERIOD * slots as u64;
        let shadow = |p: Box<dyn Policy>| {
            ExpertCache::with_policy_checked(slots, 1, 0, p).expect("slots ≥ 1 and checked")
        };
        Adaptive {
            shadow_lru: shadow(Box::new(Lru::new(slots))),
            shadow_lfu: shadow(Box::new(LfuAdmit::new(slots, period))),
            layer: None,
            score: 0.0,
            decay: 1.0 - 1.0 / (WINDOW * slots as f64),
            lru: Lru::new(slots),
            lfu: LfuAdmit::new(slots, period),
        }
    }

    /// Whether the frequency rule is the one being followed now.
    pub fn follows_lfu(&self) -> bool {
        self.score > 0.0
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
        if self.layer != Some(key.layer) {
            self.shadow_lru.unpin_all();
            self.shadow_lfu.unpin_all();
            self.layer = Some(key.layer);
        }
        let a = Self::shadow_hit(&mut self.shadow_lru, key) as i32;
        let b = Self::shadow_hit(&mut self.shadow_lfu, key) as i32;
        self.score = self.score * self.decay + (b - a) as f64;
        self.lru.on_access(key);
        self.lfu.on_access(key);
    }
    fn on_hit(&mut self, slot: u32) {
        self.lru.on_hit(slot);
        self.lfu.on_hit(slot);
    }
    fn on_insert(&mut self, slot: u32, key: ExpertKey) {
        self.lru.on_insert(slot, key);
        self.lfu.on_insert(slot, key);
    }
    fn detach(&mut self, slot: u32) {
        self.lru.detach(slot);
        self.lfu.detach(slot);
    }
    fn attach(&mut self, slot: u32) {
        self.lru.attach(slot);
        self.lfu.attach(slot);
    }
    fn evict(&mut self) -> Option<u32> {
        let (win, other): (&mut dyn Policy, &mut dyn Policy) = if self.follows_lfu() {
            (&mut self.lfu, &mut self.lru)
        } else {
            (&mut self.lru, &mut self.lfu)
        };
        let s = win.evict()?;
        other.detach(s);
        other.on_remove(s);
        Some(s)
    }
    fn on_remove(&mut self, slot: u32) {
        self.lru.on_remove(slot);
        self.lfu.on_remove(slot);
    }
}
