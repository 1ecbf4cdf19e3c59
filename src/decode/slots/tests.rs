//! The loader's rules on a recording landing (no memory, no engine): the gate/up-before-down
//! order, hits and dedup, a failed fill leaving the cache, a full cache (prefetch stops, demand
//! lets the fills in flight land first, then `Held`), batches, guesses out of the hit rate.

use super::*;
use crate::generate::{write_file, Options, Quant, Scale};
use std::collections::HashSet;

fn tiny() -> (tempfile::TempDir, Ds4Model) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    let opts = Options {
        scale: Scale::Tiny,
        seed: 5,
        holes: None,
        fill_layers: Vec::new(),
        fill_experts: None,
        quant: Quant::Q2,
        layers: None,
    };
    write_file(&path, &opts, &mut |_| {}).unwrap();
    let (_, model) = Ds4Model::open(&path).unwrap();
    (dir, model)
}

/// Logs every call; `landed` says what `poll` answers; `bad` fills fail in `finish`.
#[derive(Default)]
struct Rec {
    log: Vec<String>,
    landed: bool,
    bad: HashSet<u16>,
    batch: bool,
}

impl Landing for Rec {
    type Fill = (ExpertKey, bool);
    fn start(&mut self, m: &Miss) -> Result<Started<Self::Fill>, DecodeError> {
        assert_eq!(m.reads[0].place.at, 0, "gate first in the slot");
        assert!(m.reads[1].place.at >= m.reads[0].len() && m.reads[1].place.at % 256 == 0);
        self.log.push(format!("gate+up {}", m.key.expert));
        Ok(Started {
            fill: (m.key, false),
            read_bytes: read_bytes(m),
        })
    }
    fn queue_down(&mut self, f: &mut Self::Fill) -> Result<(), DecodeError> {
        if !f.1 {
            self.log.push(format!("down {}", f.0.expert));
            f.1 = true;
        }
        Ok(())
    }
    fn poll(&mut self, _f: &mut Self::Fill) -> bool {
        self.landed
    }
    fn finish(&mut self, slot: SlotId, f: Self::Fill) -> Result<(), DecodeError> {
        self.log.push(format!("finish {} in {slot}", f.0.expert));
        match self.bad.contains(&f.0.expert) {
            true => Err(LoadError::Read(format!("expert {} failed", f.0.expert)).into()),
            false => Ok(()),
        }
    }
    fn abandon(&mut self, _f: Self::Fill) {}
    fn batches(&self) -> bool {
        self.batch
    }
    fn load_batch(&mut self, misses: &[Miss]) -> Result<(), DecodeError> {
        let ids: Vec<String> = misses.iter().map(|m| m.key.expert.to_string()).collect();
        self.log.push(format!("batch {}", ids.join(",")));
        Ok(())
    }
}

fn loader(model: &Ds4Model, slots: usize, rec: Rec) -> SlotLoader<Rec> {
    SlotLoader::new(model, slots, PolicyKind::Lru, rec).unwrap()
}

#[test]
fn every_gate_and_up_before_any_down_and_a_second_ask_hits() {
    let (_d, model) = tiny();
    let mut l = loader(&model, 12, Rec::default());
    let got = l.request(1, &[3, 5, 3, 7], Ask::Demand).unwrap();
    assert_eq!(got[0], got[2], "a repeated id shares its slot");
    assert_eq!(
        l.landing.log,
        [
            "gate+up 3",
            "gate+up 5",
            "gate+up 7",
            "down 3",
            "down 5",
            "down 7"
        ]
    );
    let eb = model.layers[1].expert_bytes();
    assert_eq!(l.stats().bytes_streamed, 3 * eb);
    for s in &got {
        l.ready(*s).unwrap();
    }
    assert!(got.iter().all(|s| !l.is_pending(*s)));
    l.end_layer();
    l.landing.log.clear();
    let again = l.request(1, &[7, 3], Ask::Demand).unwrap();
    assert_eq!(again, [got[3], got[0]]);
    assert!(l.landing.log.is_empty(), "{:?}", l.landing.log);
    let st = l.stats();
    assert_eq!((st.cache.hits, st.cache.misses), (2, 3));
    assert_eq!(st.cache.dedup_hits, 1);
}

#[test]
fn a_failed_fill_leaves_the_cache_and_is_read_again() {
    let (_d, model) = tiny();
    let mut rec = Rec::default();
    rec.bad.insert(4);
    let mut l = loader(&model, 12, rec);
    let s = l.request(0, &[4], Ask::Demand).unwrap()[0];
    let e = l.ready(s).unwrap_err();
    assert!(e.to_string().contains("expert 4 failed"), "{e}");
    assert!(!e.is_bad_input());
    l.end_layer();
    l.landing.bad.clear();
    l.landing.log.clear();
    let s = l.request(0, &[4], Ask::Demand).unwrap()[0];
    assert!(l.is_pending(s), "read again, not a hit");
    assert_eq!(l.landing.log, ["gate+up 4", "down 4"]);
    l.ready(s).unwrap();
}

#[test]
fn a_full_cache_stops_a_prefetch_and_a_demand_lets_reads_land_first() {
    let (_d, model) = tiny();
    let k = model.shape.n_expert_used as usize;
    let mut l = loader(&model, k, Rec::default());
    let first: Vec<u32> = (0..k as u32).collect();
    let held = l.request(0, &first, Ask::Demand).unwrap();
    // Every slot pinned by layer 0: a prefetch of layer 1 gets nothing and waits for nothing.
    assert!(l.request(1, &[0], Ask::Prefetch).unwrap().is_empty());
    // A demand of layer 1 lets layer 0's fills land; they stay pinned: Held, bad input.
    let e = l.request(1, &[0], Ask::Demand).unwrap_err();
    assert!(
        matches!(e, DecodeError::Load(LoadError::Held { layer: 1, .. })),
        "{e:?}"
    );
    assert!(e.is_bad_input());
    assert!(
        held.iter().all(|s| !l.is_pending(*s)),
        "the reads in flight landed"
    );
    // Once the layer is done its slots are evictable: the same demand now succeeds.
    l.end_layer();
    let s = l.request(1, &[0], Ask::Demand).unwrap();
    assert_eq!(s.len(), 1);
}

#[test]
fn harvest_completes_only_what_landed_and_guesses_stay_out_of_the_hit_rate() {
    let (_d, model) = tiny();
    let mut l = loader(&model, 24, Rec::default());
    l.speculate(2, &[1, 2]).unwrap();
    l.harvest();
    assert_eq!(l.stats().lookahead_reads, 2);
    assert!(!l.landing.log.iter().any(|s| s.starts_with("finish")));
    l.landing.landed = true;
    l.harvest();
    assert_eq!(
        l.landing
            .log
            .iter()
            .filter(|s| s.starts_with("finish"))
            .count(),
        2
    );
    l.end_layer();
    l.note_demand(2, &[2, 9]);
    l.request(2, &[2, 9], Ask::Demand).unwrap();
    let st = l.stats();
    assert_eq!((st.lookahead_predicted, st.lookahead_used), (2, 1));
    // The guesses' two misses are not in the hit rate: the demand's hit (2) and miss (9) are.
    assert_eq!((st.cache.hits, st.cache.misses), (1, 1));
    l.prefetch(3, &[4, 5]).unwrap();
    assert_eq!(l.stats().prefetched, 2);
}

#[test]
fn a_batch_landing_loads_a_demand_request_at_once() {
    let (_d, model) = tiny();
    let rec = Rec {
        batch: true,
        ..Rec::default()
    };
    let mut l = loader(&model, 12, rec);
    let got = l.request(0, &[1, 2, 1], Ask::Demand).unwrap();
    assert_eq!(l.landing.log, ["batch 1,2"]);
    assert!(got.iter().all(|s| !l.is_pending(*s)), "nothing pending");
    assert_eq!(l.stats().cache.misses, 2);
    // Preload goes through fills, not batches.
    l.end_layer();
    let n = l
        .preload(&[ExpertKey::new(1, 0), ExpertKey::new(1, 1)], 0)
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(
        l.stats().bytes_streamed,
        0,
        "counters start after the preload"
    );
}
