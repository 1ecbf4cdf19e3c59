//! `adaptive` (the default): follow whichever of `lru`, `lfu-admit` and `arc` has had the most
//! hits lately on this very stream — set dueling between whole policies.
//!
//! Three **shadow caches** of the same capacity run beside the real one on metadata only (keys,
//! no expert bytes): one [`ExpertCache`] per candidate in [`CANDIDATES`], driven the way the
//! engine drives the real cache — every lookup pins, a change of layer ends the step and unpins
//! (so no shadow evicts an expert the current layer has looked up), every miss is filled at
//! once. Each candidate's score is its shadow's hits, exponentially decayed with a window of
//! `WINDOW × slots` accesses; the highest score is the rule followed now (ties: LRU first).
//!
//! The real cache keeps every candidate's ordering over its own evictable slots (each candidate
//! policy is fed every event) and evicts with the current winner; the others forget the victim
//! as if its load had failed (`detach` + `on_remove`). Switching is free (nothing to rebuild), and
//! because every shadow always runs, the choice follows a trace that shifts between recency- and
//! frequency-shaped phases.
//!
//! Why this: recency (LRU) wins on token-to-token reuse, a frequency rule with admission on
//! stable skew, and at one token's worth of slots (K × layers) `arc`/`w-tinylfu` beat both
//! simple rules on the frequency-shaped trace by 11 points while `arc` falls 9 points under LRU
//! on the recency-shaped one (docs/BENCHMARKS.md). No single rule was within 3 points of the
//! best everywhere; judging whole rules on the quantity that matters (hits in a same-size
//! shadow) gets the best of them at each size and shape, with one constant and no per-trace
//! tuning. ARC alone adapts only the split between its two lists, which is not enough there.
//!
//! Cost: O(1) amortised per access — three shadow lookups (hash map + O(1) policy work each)
//! and three real orderings' O(1) updates, about 6× the bookkeeping of one policy (a few hundred
//! bytes per slot, nothing per expert byte; `ds4-bench cache` runs 1 M lookups in about 2 s).
//! Limits: the shadows see the real cache's key stream, so a caller that pins per lease rather
//! than per layer (`expert_store`) gets shadows that still unpin at each change of layer.

use super::policy::{Policy, PolicyKind};
use super::{ExpertCache, ExpertKey, Lookup};

/// The score's window, in multiples of the slot count: an expert lives about `slots` accesses
/// under LRU, so a couple of lifetimes of evidence decide. The first value tried, not tuned.
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
