//! Running a trace through the cache, and the two references a policy is judged against.
//!
//! - [`simulate`]: an [`ExpertCache`] driven as the engine drives it: per step (token, layer)
//!   look up its K experts (each lookup pins), every miss's read succeeds at once, then unpin.
//!   Pinning per layer is the minimum the MoE stack needs (a layer's experts together); the cache
//!   starts empty, so cold misses count.
//! - [`belady`]: Belady's MIN, the optimum for a demand-filled cache of the same size (every
//!   miss is loaded, the resident entry used furthest in the future is evicted). It ignores
//!   pins, which only constrain, so no online policy can beat it. O(log n) per access: a
//!   precomputed next-use array and a `BTreeSet` ordered by next use.
//! - [`oracle_static`]: the `slots − K` most used experts of the whole trace pinned from the
//!   start (preloaded: no cold misses), K slots left to stream the rest, which never hit — what
//!   "frequency pinning" with a perfect popularity list would get.

use super::trace::Trace;
use super::{CacheError, CacheStats, ExpertCache, Lookup, Policy, PolicyKind};
use std::collections::BTreeSet;

/// Hits and misses of a reference.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RefStats {
    pub hits: u64,
    pub misses: u64,
}

impl RefStats {
    pub fn hit_rate(&self) -> f64 {
        let n = self.hits + self.misses;
        if n == 0 {
            0.0
        } else {
            self.hits as f64 / n as f64
        }
    }
}

/// Runs `trace` through a cache of `slots` slots with policy `kind` (see the module docs).
pub fn simulate(trace: &Trace, slots: usize, kind: PolicyKind) -> Result<CacheStats, CacheError> {
    simulate_with(trace, slots, kind.build(slots))
}

/// [`simulate`] with a policy built elsewhere (tests, experiments).
pub fn simulate_with(
    trace: &Trace,
    slots: usize,
    policy: Box<dyn Policy>,
) -> Result<CacheStats, CacheError> {
    let mut c = ExpertCache::with_policy_checked(slots, trace.k, 1, policy)?;
    for step in trace.steps() {
        for &key in step {
            if let Lookup::Miss { slot, .. } = c.lookup(key)? {
                c.fill_done(slot)?;
            }
        }
        c.unpin_all();
    }
    Ok(c.stats())
}

/// Belady's MIN over `trace` with `slots` slots (see the module docs).
pub fn belady(trace: &Trace, slots: usize) -> RefStats {
    let ids: Vec<usize> = trace.keys.iter().map(|&k| trace.index(k)).collect();
    let n = ids.len();
    let mut next = vec![usize::MAX; n];
    let mut last = vec![usize::MAX; trace.total_experts()];
    for i in (0..n).rev() {
        next[i] = last[ids[i]];
        last[ids[i]] = i;
    }
    // For each resident id: its next use; the set orders residents by next use.
    let mut resident_next = vec![None::<usize>; trace.total_experts()];
    let mut by_next: BTreeSet<(usize, usize)> = BTreeSet::new();
    let mut r = RefStats::default();
    for i in 0..n {
        let id = ids[i];
        if let Some(nu) = resident_next[id] {
            r.hits += 1;
            by_next.remove(&(nu, id));
        } else {
            r.misses += 1;
            if by_next.len() >= slots {
                if let Some((_, victim)) = by_next.pop_last() {
                    resident_next[victim] = None;
                }
            }
        }
        // `next[i]` may be usize::MAX for several ids: the id breaks the tie.
        resident_next[id] = Some(next[i]);
        by_next.insert((next[i], id));
    }
    r
}

/// The static frequency oracle over `trace` with `slots` slots (see the module docs).
pub fn oracle_static(trace: &Trace, slots: usize) -> RefStats {
    let mut counts = vec![0u64; trace.total_experts()];
    for &k in &trace.keys {
        counts[trace.index(k)] += 1;
    }
    let pinned = slots.saturating_sub(trace.k);
    let mut sorted = counts.clone();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let hits: u64 = sorted.iter().take(pinned).sum();
    RefStats {
        hits,
        misses: trace.keys.len() as u64 - hits,
    }
}
