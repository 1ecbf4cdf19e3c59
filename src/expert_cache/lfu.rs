//! `lfu-decay`: evict the entry with the lowest decayed hit count, least recently used among
//! equals — the Metal engine's "hotness (hits, halved every 16 tokens), then LRU", in O(1).
//!
//! Counts live in 64 frequency buckets (counts saturate at 63), each an LRU list, with a bitmask
//! of non-empty buckets, so the victim is `mask.trailing_zeros()`'s tail: O(1). Decay: every
//! `period` accesses a global epoch advances and *every* count is halved at once by splicing
//! buckets 2j and 2j+1 into bucket j (32 O(1) splices: O(1) per epoch, whatever the number of
//! entries). An entry's own stored count is aged lazily when next touched:
//! `count >> (epoch - stamp)`, which is exactly the bucket the splices moved it to, because
//! `(2j) >> 1 = (2j + 1) >> 1 = j`. Detached (pinned or loading) entries are in no bucket and
//! age the same lazy way. Within a merged bucket the former odd (higher) bucket sits on the MRU
//! side, so ties break toward recency only approximately after a decay.
//!
//! Counts are of accesses while resident (a new entry starts at 1): no history survives an
//! eviction. That is what makes pure LFU slow to follow a topic change; the decay bounds it.

use super::list::{Arena, List};
use super::policy::Policy;
use super::ExpertKey;

const BUCKETS: usize = 64;
const MAX_COUNT: u8 = (BUCKETS - 1) as u8;

pub struct LfuDecay {
    arena: Arena,
    buckets: [List; BUCKETS],
    nonempty: u64,
    count: Vec<u8>,
    stamp: Vec<u64>,
    epoch: u64,
    accesses: u64,
    period: u64,
}

impl LfuDecay {
    /// Counts halve every `period` accesses (at least 1); [`super::PolicyKind::LfuDecay`] uses
    /// 8 × slots, the best of 1–32 × slots on the synthetic frequency trace.
    pub fn new(slots: usize, period: u64) -> Self {
        LfuDecay {
            arena: Arena::new(slots),
            buckets: [List::default(); BUCKETS],
            nonempty: 0,
            count: vec![0; slots],
            stamp: vec![0; slots],
            epoch: 0,
            accesses: 0,
            period: period.max(1),
        }
    }

    fn effective(&self, slot: u32) -> u8 {
        let age = self.epoch - self.stamp[slot as usize];
        if age >= 8 {
            0
        } else {
            self.count[slot as usize] >> age
        }
    }

    fn halve_all(&mut self) {
        let old = std::mem::replace(&mut self.buckets, [List::default(); BUCKETS]);
        let mut mask = 0u64;
        for j in 0..BUCKETS / 2 {
            let (mut hi, mut lo) = (old[2 * j + 1], old[2 * j]);
            self.arena.append_back(&mut hi, &mut lo);
            if !hi.is_empty() {
                mask |= 1 << j;
            }
            self.buckets[j] = hi;
        }
        self.nonempty = mask;
        self.epoch += 1;
    }

    /// The slot [`Policy::evict`] would return next, without removing it. O(1).
    pub(crate) fn peek(&self) -> Option<u32> {
        if self.nonempty == 0 {
            return None;
        }
        self.buckets[self.nonempty.trailing_zeros() as usize].back()
    }

    /// Like [`Policy::on_insert`], with the entry's starting count given (saturated at 63)
    /// instead of 1: for a policy that remembers counts across evictions. O(1).
    pub(crate) fn insert_with_count(&mut self, slot: u32, count: u32) {
        self.count[slot as usize] = count.clamp(1, MAX_COUNT as u32) as u8;
        self.stamp[slot as usize] = self.epoch;
    }

    fn bucket_push(&mut self, slot: u32) {
        let b = self.effective(slot) as usize;
        self.count[slot as usize] = b as u8;
        self.stamp[slot as usize] = self.epoch;
        self.arena.push_front(&mut self.buckets[b], slot);
        self.nonempty |= 1 << b;
    }
}

impl Policy for LfuDecay {
    fn name(&self) -> &'static str {
        "lfu-decay"
    }
    /// O(1); every `period` accesses O(64) for the decay.
    fn on_access(&mut self, _key: ExpertKey) {
        self.accesses += 1;
        if self.accesses % self.period == 0 {
            self.halve_all();
        }
    }
    fn on_hit(&mut self, slot: u32) {
        let c = self.effective(slot).saturating_add(1).min(MAX_COUNT);
        self.count[slot as usize] = c;
        self.stamp[slot as usize] = self.epoch;
    }
    fn on_insert(&mut self, slot: u32, _key: ExpertKey) {
        self.count[slot as usize] = 1;
        self.stamp[slot as usize] = self.epoch;
    }
    fn detach(&mut self, slot: u32) {
        let b = self.effective(slot) as usize;
        self.arena.remove(&mut self.buckets[b], slot);
        if self.buckets[b].is_empty() {
            self.nonempty &= !(1 << b);
        }
    }
    fn attach(&mut self, slot: u32) {
        self.bucket_push(slot);
    }
    fn evict(&mut self) -> Option<u32> {
        if self.nonempty == 0 {
            return None;
        }
        let b = self.nonempty.trailing_zeros() as usize;
        let s = self.arena.pop_back(&mut self.buckets[b]);
        if self.buckets[b].is_empty() {
            self.nonempty &= !(1 << b);
        }
        s
    }
    fn on_remove(&mut self, _slot: u32) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_lowest_count_then_lru_and_decays() {
        let k = ExpertKey::new(0, 0);
        let mut p = LfuDecay::new(4, 1000);
        for s in 0..3 {
            p.on_access(k);
            p.on_insert(s, k);
            p.attach(s);
        }
        // Slot 0 hit twice, slot 2 once: counts 3, 1, 2.
        for s in [0, 0, 2] {
            p.on_access(k);
            p.detach(s);
            p.on_hit(s);
            p.attach(s);
        }
        assert_eq!(p.evict(), Some(1));
        assert_eq!(p.evict(), Some(2));
        assert_eq!(p.evict(), Some(0));
        assert_eq!(p.evict(), None);
    }

    #[test]
    fn halving_merges_buckets_lazily() {
        let k = ExpertKey::new(0, 0);
        let mut p = LfuDecay::new(3, 4);
        // Slot 0: count 3; slot 1: count 2 (both → 1 after one halving); slot 2: count 1 (→ 0).
        for s in 0..3 {
            p.on_insert(s, k);
            p.attach(s);
        }
        for s in [0, 0, 1] {
            p.detach(s);
            p.on_hit(s);
            p.attach(s);
        }
        for _ in 0..4 {
            p.on_access(k);
        }
        assert_eq!(p.epoch, 1);
        assert_eq!((p.effective(0), p.effective(1), p.effective(2)), (1, 1, 0));
        assert_eq!(p.evict(), Some(2));
        // Slot 0 (old bucket 3) sits on the MRU side of slot 1 (old bucket 2).
        assert_eq!(p.evict(), Some(1));
        assert_eq!(p.evict(), Some(0));
    }
}
