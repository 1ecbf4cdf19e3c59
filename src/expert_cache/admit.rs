//! `lfu-admit`: decayed LFU with an admission test — a newcomer must beat the coldest resident.
//!
//! Plain `lfu-decay` forgets an expert's count when it is evicted, so every newcomer starts at
//! 1, is the coldest entry at once, and evicts the previous newcomer's neighbour in the bottom
//! bucket: under recency-shaped routing that thrashes. Here every key's decayed access count is
//! remembered whether resident or not (a `HashMap` of at most one entry per distinct key seen:
//! 11,008 for Flash), halved every `period` accesses (lazily, per key, by epoch stamps), and:
//!
//! - a newcomer whose count beats the coldest *main* resident's is **admitted** to the main
//!   area, a `lfu-decay` bucket structure ordered by the same remembered counts;
//! - otherwise it still has to be cached (a demand-filled cache loads every miss) but goes to
//!   **probation**, an LRU list evicted first: the next newcomer that does not beat the main
//!   area's coldest takes a probation slot, so cold experts cycle through probation without
//!   pushing out the hot set. A probation entry that is hit while resident moves to main.
//! - Until the cache has been full once, everything is admitted (there is room).
//!
//! O(1) amortised per access: a hash lookup and update, the `lfu-decay` buckets' O(1) moves
//! (their decay is O(64) every `period` accesses) and O(1) list moves.

use super::lfu::LfuDecay;
use super::list::{Arena, List};
use super::policy::Policy;
use super::ExpertKey;
use std::collections::HashMap;

const MAX_COUNT: u32 = u16::MAX as u32;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Area {
    Main,
    Probation,
}

/// Decayed LFU with admission (see the module docs).
pub struct LfuAdmit {
    main: LfuDecay,
    arena: Arena,
    probation: List,
    area: Vec<Area>,
    key: Vec<ExpertKey>,
    /// Every key seen: (count, epoch of the count).
    hist: HashMap<ExpertKey, (u16, u64)>,
    epoch: u64,
    accesses: u64,
    period: u64,
    /// Slots holding a key; `warm` once every slot has held one.
    tracked: usize,
    warm: bool,
    /// The key of the current lookup (the newcomer when `evict` is called).
    last: Option<ExpertKey>,
}

impl LfuAdmit {
    /// Counts halve every `period` accesses (at least 1).
    pub fn new(slots: usize, period: u64) -> Self {
        LfuAdmit {
            main: LfuDecay::new(slots, period),
            arena: Arena::new(slots),
            probation: List::default(),
            area: vec![Area::Main; slots],
            key: vec![ExpertKey::new(0, 0); slots],
            hist: HashMap::new(),
            epoch: 0,
            accesses: 0,
            period: period.max(1),
            tracked: 0,
            warm: false,
            last: None,
        }
    }

    /// `key`'s remembered count, decayed to now. O(1).
    fn count(&self, key: ExpertKey) -> u32 {
        self.hist.get(&key).map_or(0, |&(c, stamp)| {
            let age = self.epoch - stamp;
            if age >= 16 {
                0
            } else {
                (c as u32) >> age
            }
        })
    }

    /// Whether `key` beats the main area's coldest evictable resident (or there is none).
    fn beats_coldest(&self, key: ExpertKey) -> bool {
        match self.main.peek() {
            Some(v) => self.count(key) > self.count(self.key[v as usize]),
            None => true,
        }
    }
}

impl Policy for LfuAdmit {
    fn name(&self) -> &'static str {
        "lfu-admit"
    }
    fn on_access(&mut self, key: ExpertKey) {
        self.main.on_access(key);
        self.accesses += 1;
        if self.accesses % self.period == 0 {
            self.epoch += 1;
        }
        let c = (self.count(key) + 1).min(MAX_COUNT) as u16;
        self.hist.insert(key, (c, self.epoch));
        self.last = Some(key);
    }
    fn on_hit(&mut self, slot: u32) {
        self.main.on_hit(slot);
        // Reused while resident: it has earned a main place.
        self.area[slot as usize] = Area::Main;
    }
    fn on_insert(&mut self, slot: u32, key: ExpertKey) {
        let admit = !self.warm || self.beats_coldest(key);
        self.key[slot as usize] = key;
        self.area[slot as usize] = if admit { Area::Main } else { Area::Probation };
        self.main.insert_with_count(slot, self.count(key));
        self.tracked += 1;
        if self.tracked >= self.area.len() {
            self.warm = true;
        }
    }
    fn detach(&mut self, slot: u32) {
        match self.area[slot as usize] {
            Area::Main => self.main.detach(slot),
            Area::Probation => self.arena.remove(&mut self.probation, slot),
        }
    }
    fn attach(&mut self, slot: u32) {
        match self.area[slot as usize] {
            Area::Main => self.main.attach(slot),
            Area::Probation => self.arena.push_front(&mut self.probation, slot),
        }
    }
    fn evict(&mut self) -> Option<u32> {
        let newcomer_loses = self.last.is_some_and(|k| !self.beats_coldest(k));
        let s = if !self.probation.is_empty() && (newcomer_loses || self.main.peek().is_none()) {
            self.arena.pop_back(&mut self.probation)
        } else {
            self.main
                .evict()
                .or_else(|| self.arena.pop_back(&mut self.probation))
        }?;
        self.tracked -= 1;
        Some(s)
    }
    fn on_remove(&mut self, _slot: u32) {
        self.tracked = self.tracked.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(p: &mut LfuAdmit, slot: u32, key: ExpertKey) {
        p.on_access(key);
        p.detach(slot);
        p.on_hit(slot);
        p.attach(slot);
    }

    #[test]
    fn cold_newcomers_cycle_through_probation() {
        let mut p = LfuAdmit::new(3, 1000);
        let keys: Vec<ExpertKey> = (0..6).map(|e| ExpertKey::new(0, e)).collect();
        for (s, &k) in keys.iter().take(3).enumerate() {
            p.on_access(k);
            p.on_insert(s as u32, k);
            p.attach(s as u32);
        }
        // Keys 0 and 1 are hot (3 uses), key 2 is not (1 use).
        for _ in 0..2 {
            access(&mut p, 0, keys[0]);
            access(&mut p, 1, keys[1]);
        }
        // A one-use newcomer does not beat key 2 (count 1): it is cached in probation...
        p.on_access(keys[3]);
        assert_eq!(p.evict(), Some(2));
        p.on_insert(2, keys[3]);
        p.attach(2);
        // ...and the next cold newcomer takes the probation slot, not a hot one.
        p.on_access(keys[4]);
        assert_eq!(p.evict(), Some(2));
        p.on_insert(2, keys[4]);
        p.attach(2);
        // A key seen often before (while not resident) beats the coldest main entry, which goes
        // (keys 0 and 1 tie at 3: the least recently used of them).
        for _ in 0..5 {
            p.on_access(keys[5]);
        }
        assert_eq!(p.evict(), Some(0));
    }
}
