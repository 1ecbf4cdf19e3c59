//! The cache's contract (pins, dedup, failed fills, Full, stats) and its policies against
//! references: Belady bounds every policy, LRU equals a naive LRU, hand-checked sequences.

use super::reference::{belady, oracle_static, simulate};
use super::trace::{synthetic, Shape, Synth, Trace};
use super::*;

fn key(l: u16, e: u16) -> ExpertKey {
    ExpertKey::new(l, e)
}

fn cache(slots: usize, kind: PolicyKind) -> ExpertCache {
    ExpertCache::new(slots, 2, 100, kind).unwrap()
}

/// Looks up and fills at once; returns whether it hit.
fn access(c: &mut ExpertCache, k: ExpertKey) -> bool {
    match c.lookup(k).unwrap() {
        Lookup::Hit(_) => true,
        Lookup::Loading(_) => panic!("nothing is loading"),
        Lookup::Miss { slot, .. } => {
            c.fill_done(slot).unwrap();
            false
        }
    }
}

#[test]
fn refuses_fewer_slots_than_k() {
    let e = ExpertCache::new(5, 6, 1, PolicyKind::Lru).err().unwrap();
    assert_eq!(e, CacheError::TooSmall { slots: 5, k: 6 });
    assert!(e.to_string().contains("minimum working set"), "{e}");
    assert!(ExpertCache::new(6, 6, 1, PolicyKind::Lru).is_ok());
}

#[test]
fn pinned_never_evicted_under_pressure() {
    for kind in PolicyKind::ALL {
        let mut c = cache(4, kind);
        // Pin two experts of the "current token".
        let a = access(&mut c, key(0, 0));
        let b = access(&mut c, key(0, 1));
        assert!(!a && !b);
        let (sa, sb) = (c.slot_of(key(0, 0)).unwrap(), c.slot_of(key(0, 1)).unwrap());
        // Stream many others through the 2 unpinned slots, unpinning only them.
        for e in 2..200u16 {
            match c.lookup(key(1, e)).unwrap() {
                Lookup::Miss { slot, evicted } => {
                    assert!(slot != sa && slot != sb, "{kind}: pinned slot reused");
                    assert!(evicted != Some(key(0, 0)) && evicted != Some(key(0, 1)));
                    c.fill_done(slot).unwrap();
                }
                other => panic!("{kind}: {other:?}"),
            }
            assert!(
                c.is_resident(key(0, 0)) && c.is_resident(key(0, 1)),
                "{kind}"
            );
            assert!(c.is_pinned(sa) && c.is_pinned(sb));
            // Unpin everything, then re-pin the token's two (hits).
            c.unpin_all();
            assert!(
                access(&mut c, key(0, 0)) && access(&mut c, key(0, 1)),
                "{kind}"
            );
        }
    }
}

#[test]
fn in_flight_lookup_is_deduplicated() {
    let mut c = cache(4, PolicyKind::DEFAULT);
    let Lookup::Miss { slot, evicted } = c.lookup(key(2, 9)).unwrap() else {
        panic!("first lookup misses");
    };
    assert_eq!(evicted, None);
    assert_eq!(c.lookup(key(2, 9)).unwrap(), Lookup::Loading(slot));
    assert_eq!(c.lookup(key(2, 9)).unwrap(), Lookup::Loading(slot));
    assert_eq!(c.loading_count(), 1);
    c.fill_done(slot).unwrap();
    assert_eq!(c.lookup(key(2, 9)).unwrap(), Lookup::Hit(slot));
    let s = c.stats();
    assert_eq!((s.misses, s.dedup_hits, s.hits, s.fills_done), (1, 2, 1, 1));
    assert_eq!(s.bytes_filled, 100);
    assert_eq!(c.fill_done(slot), Err(CacheError::NotLoading { slot }));
}

#[test]
fn failed_fill_frees_the_slot() {
    let mut c = cache(2, PolicyKind::Lru);
    let Lookup::Miss { slot, .. } = c.lookup(key(0, 1)).unwrap() else {
        panic!()
    };
    c.fill_failed(slot).unwrap();
    assert_eq!(c.len(), 0);
    assert_eq!(c.slot_of(key(0, 1)), None);
    assert!(!c.is_pinned(slot));
    assert_eq!(c.fill_failed(slot), Err(CacheError::NotLoading { slot }));
    // The key misses again (nothing stale), and the freed slot is reused.
    assert!(
        matches!(c.lookup(key(0, 1)).unwrap(), Lookup::Miss { slot: s, evicted: None } if s == slot)
    );
    assert_eq!(c.pinned_count(), 1);
    c.unpin_all();
    assert_eq!(c.pinned_count(), 0);
    let s = c.stats();
    assert_eq!((s.misses, s.fills_failed, s.fills_done), (2, 1, 0));
}

#[test]
fn full_when_everything_is_pinned_or_loading() {
    let mut c = cache(3, PolicyKind::DEFAULT);
    access(&mut c, key(0, 0));
    access(&mut c, key(0, 1));
    let Lookup::Miss { slot, .. } = c.lookup(key(0, 2)).unwrap() else {
        panic!()
    };
    let e = c.lookup(key(0, 3)).unwrap_err();
    assert_eq!(
        e,
        CacheError::Full {
            slots: 3,
            pinned: 3,
            loading: 1
        }
    );
    assert!(e.to_string().contains("full"));
    // Unpinning frees the two loaded ones; the loading one stays unevictable.
    c.unpin_all();
    assert!(matches!(
        c.lookup(key(0, 3)),
        Ok(Lookup::Miss {
            evicted: Some(_),
            ..
        })
    ));
    assert!(matches!(
        c.lookup(key(0, 4)),
        Ok(Lookup::Miss {
            evicted: Some(_),
            ..
        })
    ));
    assert!(matches!(c.lookup(key(0, 5)), Err(CacheError::Full { .. })));
    assert_eq!(c.key_of(slot), Some(key(0, 2)));
    assert_eq!(c.stats().full, 2);
}

#[test]
fn stats_add_up_on_a_random_workload() {
    let mut rng = 12345u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for kind in PolicyKind::ALL {
        let mut c = cache(8, kind);
        let mut loading = Vec::new();
        for _ in 0..5000 {
            let r = next();
            match r % 10 {
                0 => c.unpin_all(),
                1 | 2 if !loading.is_empty() => {
                    let s = loading.swap_remove((r as usize / 10) % loading.len());
                    if r % 10 == 1 {
                        c.fill_done(s).unwrap();
                    } else {
                        c.fill_failed(s).unwrap();
                    }
                }
                _ => match c.lookup(key(0, (r >> 8) as u16 % 20)) {
                    Ok(Lookup::Miss { slot, .. }) => loading.push(slot),
                    Ok(_) => {}
                    Err(CacheError::Full { .. }) => c.unpin_all(),
                    Err(e) => panic!("{e}"),
                },
            }
            assert!(c.len() <= 8);
        }
        let s = c.stats();
        assert_eq!(
            s.misses,
            s.fills_done + s.fills_failed + loading.len() as u64
        );
        assert!(s.evictions <= s.misses);
        assert_eq!(s.lookups(), s.hits + s.dedup_hits + s.misses);
        assert_eq!(s.bytes_filled, 100 * s.fills_done);
        assert_eq!(c.loading_count(), loading.len());
        assert_eq!(c.len() as u64, s.misses - s.fills_failed - s.evictions);
    }
}

/// A trace of single-expert steps (layer 0) from a list of expert ids.
fn seq_trace(ids: &[u16]) -> Trace {
    let mut t = Trace {
        n_layers: 1,
        n_experts: ids.iter().copied().max().unwrap_or(0) + 1,
        k: 1,
        tokens: ids.len(),
        starts: vec![0],
        ..Trace::default()
    };
    for &e in ids {
        t.keys.push(key(0, e));
        t.starts.push(t.keys.len());
    }
    t
}

#[test]
fn policies_on_a_hand_checked_sequence() {
    // 3 slots. A and B are used often, then a scan of one-off experts C..G, then A and B.
    let (a, b) = (0u16, 1u16);
    let ids = [a, b, a, b, a, b, 2, 3, 4, 5, 6, a, b];
    let t = seq_trace(&ids);
    let hits = |k| simulate(&t, 3, k).unwrap().hits;
    // LRU: hits at positions 2..5 (4); the scan flushes A and B.
    assert_eq!(hits(PolicyKind::Lru), 4);
    // Decayed LFU (no decay within 13 < 8 × 3 accesses): A and B count 3, each one-off 1, so
    // the scan only churns the third slot and A and B hit at the end.
    assert_eq!(hits(PolicyKind::LfuDecay), 6);
    // ARC: A and B reach T2 on their second use; the scan cycles through T1 (p stays 0).
    assert_eq!(hits(PolicyKind::Arc), 6);
    // lfu-admit: each one-off newcomer (count 1) loses to A and B (3) and cycles through
    // probation, the third slot.
    assert_eq!(hits(PolicyKind::LfuAdmit), 6);
    // W-TinyLFU (window 1): A moves to main when B enters, B when C does; D..G each lose the
    // admission contest (sketch count 1 against B's 3) and churn the window slot.
    assert_eq!(hits(PolicyKind::WTinyLfu), 6);
    // Belady: 4 hits in the prefix, and keeping A and B through the scan gives 2 more.
    assert_eq!(belady(&t, 3).hits, 6);
    // Static oracle: 3 − K = 2 pinned (A and B, 4 uses each, preloaded).
    assert_eq!(oracle_static(&t, 3).hits, 8);
}

#[test]
fn lru_equals_a_naive_lru() {
    let mut rng = 99u64;
    for round in 0..20 {
        let slots = 3 + round % 7;
        let n_ids = slots as u64 + 1 + (round as u64 * 3) % 20;
        let ids: Vec<u16> = (0..2000)
            .map(|_| {
                rng = rng
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((rng >> 33) % n_ids) as u16
            })
            .collect();
        let t = seq_trace(&ids);
        // Naive LRU: a Vec, most recent last.
        let mut v: Vec<u16> = Vec::new();
        let mut naive_hits = 0;
        for &e in &ids {
            if let Some(p) = v.iter().position(|&x| x == e) {
                naive_hits += 1;
                v.remove(p);
            } else if v.len() == slots {
                v.remove(0);
            }
            v.push(e);
        }
        assert_eq!(
            simulate(&t, slots, PolicyKind::Lru).unwrap().hits,
            naive_hits
        );
    }
}

#[test]
fn belady_bounds_every_policy() {
    for (i, shape) in Shape::ALL.into_iter().enumerate() {
        let mut p = Synth::flash(shape, 60, i as u64 + 3);
        p.layers = 6;
        p.experts = 32;
        p.hash_layers = 1;
        p.vocab = 500;
        let t = synthetic(&p);
        for slots in [6, 20, 50, 120] {
            let best = belady(&t, slots).hits;
            for kind in PolicyKind::ALL {
                let h = simulate(&t, slots, kind).unwrap().hits;
                assert!(h <= best, "{shape} {slots} {kind}: {h} > belady {best}");
            }
        }
    }
}

#[test]
fn unpin_releases_one_slot_and_keeps_the_others_pinned() {
    let mut c = cache(2, PolicyKind::Lru);
    let (a, b) = (key(0, 1), key(0, 2));
    let sa = match c.lookup(a).unwrap() {
        Lookup::Miss { slot, .. } => slot,
        other => panic!("{other:?}"),
    };
    c.fill_done(sa).unwrap();
    let sb = match c.lookup(b).unwrap() {
        Lookup::Miss { slot, .. } => slot,
        other => panic!("{other:?}"),
    };
    c.fill_done(sb).unwrap();
    // Both pinned: a third key finds no slot.
    assert!(matches!(c.lookup(key(0, 3)), Err(CacheError::Full { .. })));
    c.unpin(sa);
    assert!(!c.is_pinned(sa) && c.is_pinned(sb));
    assert_eq!(c.pinned_count(), 1);
    // Only the unpinned slot can be evicted.
    match c.lookup(key(0, 3)).unwrap() {
        Lookup::Miss { slot, evicted } => {
            assert_eq!((slot, evicted), (sa, Some(a)));
            c.fill_done(slot).unwrap();
        }
        other => panic!("{other:?}"),
    }
    c.unpin(sa);
    c.unpin(sa); // not pinned any more: no effect
    assert_eq!(c.pinned_count(), 1);
    // Many pin/unpin rounds on one slot keep the pin list bounded and unpin_all consistent.
    for _ in 0..1000 {
        assert!(matches!(c.lookup(key(0, 3)).unwrap(), Lookup::Hit(_)));
        c.unpin(sa);
    }
    assert!(c.pinned.len() <= 2 * c.pinned_count() + 65);
    c.unpin_all();
    assert_eq!(c.pinned_count(), 0);
    assert!(!c.is_pinned(sb));
}

/// The rule the engine relies on, for every policy: a miss never evicts an expert the step
/// (layer) has already looked up, and `adaptive` stays within 3 points of the better of `lru` and
/// `lfu-admit` at one token's worth to 40 % of the experts, on every synthetic shape.
#[test]
fn misses_spare_the_current_step_and_adaptive_tracks_the_best() {
    for (i, shape) in Shape::ALL.into_iter().enumerate() {
        let mut p = Synth::flash(shape, 400, i as u64 + 11);
        p.layers = 8;
        p.experts = 64;
        p.hash_layers = 1;
        p.vocab = 2000;
        let t = synthetic(&p);
        for slots in [48, 100, 200] {
            for kind in PolicyKind::ALL {
                let mut c = cache(slots, kind);
                for step in t.steps() {
                    for (j, &k) in step.iter().enumerate() {
                        if let Lookup::Miss { slot, evicted } = c.lookup(k).unwrap() {
                            // Not one already looked up (pinned); a later one may go.
                            let own = evicted.is_some_and(|e| step[..j].contains(&e));
                            assert!(!own, "{kind}");
                            c.fill_done(slot).unwrap();
                        }
                    }
                    c.unpin_all();
                }
                let (a, b) = (c.stats(), simulate(&t, slots, kind).unwrap());
                assert_eq!(
                    (a.hits, a.misses, a.evictions),
                    (b.hits, b.misses, b.evictions)
                );
            }
            let rate = |k| simulate(&t, slots, k).unwrap().hit_rate();
            let best = rate(PolicyKind::Lru).max(rate(PolicyKind::LfuAdmit));
            let a = rate(PolicyKind::Adaptive);
            assert!(a >= best - 0.03, "{shape} {slots}: adaptive {a} vs {best}");
        }
    }
}
