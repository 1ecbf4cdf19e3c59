//! `arc`: Adaptive Replacement Cache (Megiddo & Modha, FAST 2003). T1 holds entries seen once
//! recently, T2 entries seen at least twice; ghost lists B1 and B2 remember the keys last evicted
//! from each. A miss that hits ghost B1 says "T1 was too small": the target size `p` of T1 grows;
//! a B2 ghost hit shrinks it. So the balance between recency and frequency follows the trace,
//! with no tuning constant.
//!
//! O(1): T1/T2 are index-linked lists of slots, B1/B2 index-linked lists over a ghost arena of
//! 2 × slots nodes with a `HashMap` from key to ghost node; ghosts are trimmed as ARC's case IV
//! says (|T1| + |B1| ≤ c, everything ≤ 2c), each ghost removed at most once. The sizes ARC
//! compares (|T1|, |T2|) include pinned and loading entries, which sit in no list until they
//! are evictable (see [`super::policy`]).

use super::list::{Arena, List};
use super::policy::Policy;
use super::ExpertKey;
use std::collections::HashMap;

const T1: u8 = 0;
const T2: u8 = 1;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Ghost {
    None,
    B1,
    B2,
}

/// The ARC policy (named so as not to shadow `std::sync::Arc` where both are in scope).
pub struct ArcPolicy {
    arena: Arena,
    t: [List; 2],
    /// |T1|, |T2| including detached entries.
    size: [usize; 2],
    seg: Vec<u8>,
    key: Vec<ExpertKey>,
    c: usize,
    p: usize,
    // Ghosts.
    g_arena: Arena,
    b: [List; 2],
    g_key: Vec<ExpertKey>,
    g_which: Vec<u8>,
    g_free: Vec<u32>,
    g_map: HashMap<ExpertKey, u32>,
    /// What the current miss's key was (set by `on_access`).
    pending: Ghost,
}

impl ArcPolicy {
    pub fn new(slots: usize) -> Self {
        let g = 2 * slots;
        ArcPolicy {
            arena: Arena::new(slots),
            t: [List::default(); 2],
            size: [0; 2],
            seg: vec![T1; slots],
            key: vec![ExpertKey::new(0, 0); slots],
            c: slots,
            p: 0,
            g_arena: Arena::new(g),
            b: [List::default(); 2],
            g_key: vec![ExpertKey::new(0, 0); g],
            g_which: vec![0; g],
            g_free: (0..g as u32).rev().collect(),
            g_map: HashMap::with_capacity(g),
            pending: Ghost::None,
        }
    }

    fn ghost_push(&mut self, which: u8, key: ExpertKey) {
        let Some(n) = self.g_free.pop() else {
            return; // cannot happen: ghosts are trimmed to ≤ 2c − |T1| − |T2|
        };
        self.g_key[n as usize] = key;
        self.g_which[n as usize] = which;
        self.g_arena.push_front(&mut self.b[which as usize], n);
        self.g_map.insert(key, n);
    }

    fn ghost_pop(&mut self, which: u8) {
        if let Some(n) = self.g_arena.pop_back(&mut self.b[which as usize]) {
            self.g_map.remove(&self.g_key[n as usize]);
            self.g_free.push(n);
        }
    }

    fn take(&mut self, seg: u8) -> Option<u32> {
        let s = self.arena.pop_back(&mut self.t[seg as usize])?;
        self.size[seg as usize] -= 1;
        self.ghost_push(seg, self.key[s as usize]);
        Some(s)
    }
}

impl Policy for ArcPolicy {
    fn name(&self) -> &'static str {
        "arc"
    }
    /// Ghost hit: adapt `p` and forget the ghost (the key is about to be inserted).
    fn on_access(&mut self, key: ExpertKey) {
        self.pending = Ghost::None;
        let Some(n) = self.g_map.remove(&key) else {
            return;
        };
        let which = self.g_which[n as usize];
        self.g_arena.remove(&mut self.b[which as usize], n);
        self.g_free.push(n);
        let (b1, b2) = (self.b[0].len(), self.b[1].len());
        if which == 0 {
            // b1 counted before the removal, as in the paper.
            let delta = (b2 / (b1 + 1)).max(1);
            self.p = (self.p + delta).min(self.c);
            self.pending = Ghost::B1;
        } else {
            let delta = (b1 / (b2 + 1)).max(1);
            self.p = self.p.saturating_sub(delta);
            self.pending = Ghost::B2;
        }
    }
    fn on_hit(&mut self, slot: u32) {
        let s = slot as usize;
        if self.seg[s] == T1 {
            self.seg[s] = T2;
            self.size[T1 as usize] -= 1;
            self.size[T2 as usize] += 1;
        }
    }
    fn on_insert(&mut self, slot: u32, key: ExpertKey) {
        let seg = if self.pending == Ghost::None { T1 } else { T2 };
        self.pending = Ghost::None;
        self.seg[slot as usize] = seg;
        self.key[slot as usize] = key;
        self.size[seg as usize] += 1;
        // Case IV bookkeeping: |T1| + |B1| ≤ c and |T1| + |T2| + |B1| + |B2| ≤ 2c.
        while self.size[0] + self.b[0].len() > self.c && !self.b[0].is_empty() {
            self.ghost_pop(0);
        }
        while self.size[0] + self.size[1] + self.b[0].len() + self.b[1].len() > 2 * self.c {
            if !self.b[1].is_empty() {
                self.ghost_pop(1);
            } else if !self.b[0].is_empty() {
                self.ghost_pop(0);
            } else {
                break;
            }
        }
    }
    fn detach(&mut self, slot: u32) {
        let seg = self.seg[slot as usize] as usize;
        self.arena.remove(&mut self.t[seg], slot);
    }
    fn attach(&mut self, slot: u32) {
        let seg = self.seg[slot as usize] as usize;
        self.arena.push_front(&mut self.t[seg], slot);
    }
    /// REPLACE: from T1 if it is over its target `p` (or at it on a B2 ghost hit), else T2;
    /// the other list when the chosen one has nothing evictable.
    fn evict(&mut self) -> Option<u32> {
        let t1 = self.size[0];
        let from_t1 = t1 > 0 && (t1 > self.p || (self.pending == Ghost::B2 && t1 == self.p));
        let (first, second) = if from_t1 { (T1, T2) } else { (T2, T1) };
        self.take(first).or_else(|| self.take(second))
    }
    fn on_remove(&mut self, slot: u32) {
        self.size[self.seg[slot as usize] as usize] -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(e: u16) -> ExpertKey {
        ExpertKey::new(5, e)
    }

    fn insert(p: &mut ArcPolicy, slot: u32, e: u16) {
        p.on_access(key(e));
        p.on_insert(slot, key(e));
        p.attach(slot);
    }

    #[test]
    fn second_use_protects_and_ghost_hit_grows_t1() {
        let mut p = ArcPolicy::new(2);
        insert(&mut p, 0, 0);
        insert(&mut p, 1, 1);
        // Hit key 0: it moves to T2. T1 = {1}.
        p.on_access(key(0));
        p.detach(0);
        p.on_hit(0);
        p.attach(0);
        assert_eq!(p.size, [1, 1]);
        // Miss on key 2: p = 0 < |T1| = 1, so T1's key 1 goes (to ghost B1), not key 0.
        p.on_access(key(2));
        assert_eq!(p.evict(), Some(1));
        p.on_insert(1, key(2));
        p.attach(1);
        assert!(p.g_map.contains_key(&key(1)));
        // Key 1 again: a B1 ghost hit raises p and the key enters T2.
        p.on_access(key(1));
        assert_eq!(p.p, 1);
        // |T1| = 1 is at its target p = 1: T2's LRU (key 0) goes, to ghost B2.
        assert_eq!(p.evict(), Some(0));
        p.on_insert(0, key(1));
        assert_eq!(p.seg[0], T2);
        assert!(p.g_map.contains_key(&key(0)));
        assert!(!p.g_map.contains_key(&key(1)));
    }
}
