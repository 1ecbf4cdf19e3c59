//! `w-tinylfu`: Caffeine's design, small. New entries enter an LRU *window*; an entry pushed
//! out of the window competes with the main area's LRU victim and is admitted only if a
//! count-min sketch says it was used more often (TinyLFU admission). The main area is a
//! segmented LRU (probation, then protected, 80 % of main, on a second hit). The window starts at
//! 1 % and is resized by hill climbing on the hit rate of each sample of `slots` accesses (step
//! 5 % of the slots, shrinking), so a recency-heavy trace grows it and a frequency-heavy one
//! shrinks it.
//!
//! O(1): the sketch has 4 rows of 4-bit-saturating u8 counters, `width = next_pow2(4 × slots)`;
//! every `10 × slots` accesses all counters are halved (O(width) each `10 × slots` accesses, so
//! O(1) amortised) — the "periodic halving of a bounded structure" form of decay. Window
//! resizing moves entries lazily: [`Policy::evict`] first drains a window over its target.
//!
//! Limits: no doorkeeper (the key space, 43 × 256, is small); the sketch only counts, so two
//! experts colliding in all four rows look alike; the climber needs a few samples to settle.

use super::list::{Arena, List};
use super::policy::Policy;
use super::ExpertKey;

const WINDOW: u8 = 0;
const PROBATION: u8 = 1;
const PROTECTED: u8 = 2;
/// The climber samples the hit rate over this many × slots accesses.
pub(crate) const CLIMB_SAMPLE: u64 = 2;

/// A count-min sketch of 4 rows with counters saturating at 15, halved every `sample` adds.
struct Sketch {
    table: Vec<u8>,
    mask: usize,
    adds: u64,
    sample: u64,
}

impl Sketch {
    fn new(slots: usize) -> Self {
        let width = (4 * slots).next_power_of_two().max(64);
        Sketch {
            table: vec![0; 4 * width],
            mask: width - 1,
            adds: 0,
            sample: 10 * slots as u64,
        }
    }
    fn index(&self, h: u64, row: usize) -> usize {
        let r = h.rotate_left(16 * row as u32) ^ (h >> 32).wrapping_mul(row as u64 + 1);
        row * (self.mask + 1) + (r as usize & self.mask)
    }
    fn add(&mut self, key: ExpertKey) {
        let h = key.hash64();
        for row in 0..4 {
            let i = self.index(h, row);
            if self.table[i] < 15 {
                self.table[i] += 1;
            }
        }
        self.adds += 1;
        if self.adds >= self.sample {
            self.adds = 0;
            self.table.iter_mut().for_each(|c| *c >>= 1);
        }
    }
    fn estimate(&self, key: ExpertKey) -> u8 {
        let h = key.hash64();
        (0..4)
            .map(|row| self.table[self.index(h, row)])
            .min()
            .unwrap_or(0)
    }
}

pub struct WTinyLfu {
    arena: Arena,
    lists: [List; 3],
    /// Entries per segment, attached or not.
    count: [usize; 3],
    seg: Vec<u8>,
    key: Vec<ExpertKey>,
    sketch: Sketch,
    slots: usize,
    /// The window's target size (fractional: the climber's steps may be small).
    window: f64,
    // Hill climber.
    sample_hits: u64,
    sample_accesses: u64,
    prev_rate: f64,
    step: f64,
    sample: u64,
}

impl WTinyLfu {
    pub fn new(slots: usize) -> Self {
        Self::with_sample(slots, CLIMB_SAMPLE)
    }

    pub(crate) fn with_sample(slots: usize, sample: u64) -> Self {
        WTinyLfu {
            arena: Arena::new(slots),
            lists: [List::default(); 3],
            count: [0; 3],
            seg: vec![WINDOW; slots],
            key: vec![ExpertKey::new(0, 0); slots],
            sketch: Sketch::new(slots),
            slots,
            window: (slots as f64 / 100.0).max(1.0),
            sample_hits: 0,
            sample_accesses: 0,
            prev_rate: 0.0,
            step: slots as f64 * 0.0625,
            sample: sample * slots as u64,
        }
    }

    fn window_cap(&self) -> usize {
        self.window.round() as usize
    }
    fn main_cap(&self) -> usize {
        self.slots - self.window_cap().min(self.slots)
    }
    fn main_count(&self) -> usize {
        self.count[PROBATION as usize] + self.count[PROTECTED as usize]
    }
    fn protected_cap(&self) -> usize {
        self.main_cap() * 8 / 10
    }

    /// Moves attached `slot` to segment `to` (MRU end).
    fn move_to(&mut self, slot: u32, to: u8) {
        let from = self.seg[slot as usize];
        self.arena.remove(&mut self.lists[from as usize], slot);
        self.arena.push_front(&mut self.lists[to as usize], slot);
        self.count[from as usize] -= 1;
        self.count[to as usize] += 1;
        self.seg[slot as usize] = to;
    }

    fn take(&mut self, seg: u8) -> Option<u32> {
        let s = self.arena.pop_back(&mut self.lists[seg as usize])?;
        self.count[seg as usize] -= 1;
        Some(s)
    }

    /// One hill-climbing step (Caffeine's): keep going while the hit rate improves, else turn
    /// around; the step decays by 2 % a sample and restarts at 6.25 % of the slots when the hit
    /// rate jumps by 5 points (the trace changed character).
    fn climb(&mut self) {
        let rate = self.sample_hits as f64 / self.sample_accesses.max(1) as f64;
        let change = rate - self.prev_rate;
        let dir = if change >= 0.0 { 1.0 } else { -1.0 } * self.step.signum();
        self.step = if change.abs() >= 0.05 {
            dir * 0.0625 * self.slots as f64
        } else {
            dir * self.step.abs() * 0.98
        };
        self.prev_rate = rate;
        let hi = (self.slots as f64 * 0.8).max(1.0);
        self.window = (self.window + self.step).clamp(1.0, hi);
        self.sample_hits = 0;
        self.sample_accesses = 0;
    }
}

impl Policy for WTinyLfu {
    fn name(&self) -> &'static str {
        "w-tinylfu"
    }
    fn on_access(&mut self, key: ExpertKey) {
        self.sketch.add(key);
        self.sample_accesses += 1;
        if self.sample_accesses >= self.sample {
            self.climb();
        }
    }
    fn on_hit(&mut self, slot: u32) {
        self.sample_hits += 1;
        let s = slot as usize;
        if self.seg[s] == PROBATION {
            self.seg[s] = PROTECTED;
            self.count[PROBATION as usize] -= 1;
            self.count[PROTECTED as usize] += 1;
            // Protected over its share: its LRU falls back to probation.
            if self.count[PROTECTED as usize] > self.protected_cap() {
                if let Some(d) = self.lists[PROTECTED as usize].back() {
                    self.move_to(d, PROBATION);
                }
            }
        }
    }
    /// While the cache fills, window overflow moves to probation (main has room).
    fn on_insert(&mut self, slot: u32, key: ExpertKey) {
        self.seg[slot as usize] = WINDOW;
        self.key[slot as usize] = key;
        self.count[WINDOW as usize] += 1;
        while self.count[WINDOW as usize] > self.window_cap() && self.main_count() < self.main_cap()
        {
            let Some(oldest) = self.lists[WINDOW as usize].back() else {
                break;
            };
            self.move_to(oldest, PROBATION);
        }
    }
    fn detach(&mut self, slot: u32) {
        let seg = self.seg[slot as usize] as usize;
        self.arena.remove(&mut self.lists[seg], slot);
    }
    fn attach(&mut self, slot: u32) {
        let seg = self.seg[slot as usize] as usize;
        self.arena.push_front(&mut self.lists[seg], slot);
    }
    /// Called when the cache is full and a new entry is about to enter the window: if the
    /// window is at its target, its LRU entry (the candidate) moves to main, or — main being
    /// full — competes with main's victim (probation LRU, else protected LRU): the one the
    /// sketch counts less often goes. Otherwise main's victim goes.
    fn evict(&mut self) -> Option<u32> {
        let w = WINDOW as usize;
        while self.count[w] >= self.window_cap() {
            let Some(cand) = self.lists[w].back() else {
                break;
            };
            if self.main_count() < self.main_cap() {
                self.move_to(cand, PROBATION);
                continue;
            }
            let victim = self.lists[PROBATION as usize]
                .back()
                .or(self.lists[PROTECTED as usize].back());
            let Some(victim) = victim else {
                return self.take(WINDOW);
            };
            let (fc, fv) = (
                self.sketch.estimate(self.key[cand as usize]),
                self.sketch.estimate(self.key[victim as usize]),
            );
            if fc > fv {
                let vseg = self.seg[victim as usize];
                self.move_to(cand, PROBATION);
                self.arena.remove(&mut self.lists[vseg as usize], victim);
                self.count[vseg as usize] -= 1;
                return Some(victim);
            }
            return self.take(WINDOW);
        }
        self.take(PROBATION)
            .or_else(|| self.take(PROTECTED))
            .or_else(|| self.take(WINDOW))
    }
    fn on_remove(&mut self, slot: u32) {
        self.count[self.seg[slot as usize] as usize] -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(e: u16) -> ExpertKey {
        ExpertKey::new(3, e)
    }

    #[test]
    fn sketch_counts_and_halves() {
        let mut s = Sketch::new(4);
        for _ in 0..5 {
            s.add(key(1));
        }
        assert_eq!(s.estimate(key(1)), 5);
        assert!(s.estimate(key(2)) <= 1);
        for _ in 0..40 {
            s.add(key(2));
        }
        // 45 adds ≥ sample 40: halved once at the 40th.
        assert!(s.estimate(key(2)) <= 15);
        assert!(s.estimate(key(1)) <= 2);
    }

    #[test]
    fn admission_keeps_the_more_frequent() {
        for (uses_of_2, victim) in [(1, 2), (9, 0)] {
            // 3 slots: window 1, main 2. Key 0 used 5 times, keys 1 and 2 as given.
            let mut p = WTinyLfu::new(3);
            for (slot, uses) in [(0u32, 5), (1, 1), (2, uses_of_2)] {
                for _ in 0..uses {
                    p.on_access(key(slot as u16));
                }
                p.on_insert(slot, key(slot as u16));
                p.attach(slot);
            }
            // Keys 0 and 1 drained into probation as the cache filled; 2 is in the window.
            assert_eq!(p.count, [1, 2, 0]);
            // Candidate 2 against probation's LRU, key 0 (count 5): the less used one goes.
            assert_eq!(p.evict(), Some(victim));
        }
    }
}
