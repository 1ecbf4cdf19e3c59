//! The store on a generated tiny model (4 layers, 16 experts, K = 6): bytes against the file,
//! hits and dedup, pins that hold against eviction, prefetch, failed reads, bad arguments.

use super::*;
use crate::device::{BackendKind, Device, OpenOptions};
use crate::engine::EngineConfig;
use crate::generate::{write_file, Options, Quant, Scale};
use crate::model::ExpertKind;
use ds4_io::fault::{FaultPlan, FaultySource};
use ds4_io::{FileSource, OpenConfig};
use std::path::{Path, PathBuf};

fn tiny() -> (tempfile::TempDir, PathBuf, Arc<Ds4Model>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    let opts = Options {
        scale: Scale::Tiny,
        seed: 11,
        holes: None,
        fill_layers: Vec::new(),
        fill_experts: None,
        quant: Quant::Q2,
        layers: None,
    };
    write_file(&path, &opts, &mut |_| {}).unwrap();
    let (_, model) = Ds4Model::open(&path).unwrap();
    (dir, path, Arc::new(model))
}

fn cfg() -> EngineConfig {
    EngineConfig {
        workers: 3,
        slots: 4,
        slot_bytes: 64 << 10,
        ..EngineConfig::default()
    }
}

/// Host devices (reading straight into the slab, and staged: an emulated discrete GPU), then
/// every GPU backend compiled in whose device is present. `DS4_GPU_TESTS=cuda` (or `hip`) turns
/// a missing GPU into a failure (the GPU machine's run).
fn devices() -> Vec<Arc<dyn Device>> {
    let mut v: Vec<Arc<dyn Device>> = [Some(true), Some(false)]
        .into_iter()
        .map(|unified| {
            BackendKind::Host
                .open(OpenOptions {
                    ordinal: 0,
                    unified,
                    host_unified: None,
                })
                .unwrap()
        })
        .collect();
    let want = std::env::var("DS4_GPU_TESTS").unwrap_or_default();
    for kind in [BackendKind::Cuda, BackendKind::Hip] {
        match kind.open(OpenOptions::default()) {
            Ok(d) => v.push(d),
            Err(e) if want == kind.as_str() => panic!("DS4_GPU_TESTS={want}: {e}"),
            Err(_) => {}
        }
    }
    v
}

fn store(path: &Path, model: &Arc<Ds4Model>, dev: Arc<dyn Device>, slots: usize) -> ExpertStore {
    let engine = Arc::new(Engine::open(path, dev, cfg()).unwrap());
    ExpertStore::new(engine, Arc::clone(model), slots, PolicyKind::Lru).unwrap()
}

/// Checks every slice of `pins` against the file.
fn verify(s: &ExpertStore, model: &Ds4Model, file: &[u8], pins: &ExpertPins) {
    for loc in pins.locations() {
        for (kind, r) in [
            (ExpertKind::Gate, &loc.gate),
            (ExpertKind::Up, &loc.up),
            (ExpertKind::Down, &loc.down),
        ] {
            let sl = model
                .expert_slice(loc.key.layer.into(), kind, loc.key.expert.into())
                .unwrap();
            let mut got = vec![0u8; r.len()];
            s.engine
                .device()
                .read_d2h(s.slab(), r.start, &mut got)
                .unwrap();
            let want = &file[sl.offset as usize..(sl.offset + sl.len) as usize];
            assert!(got == want, "{:?} {kind:?} differs from the file", loc.key);
        }
    }
}

#[test]
fn acquired_experts_hold_the_files_bytes_and_hit_the_second_time() {
    let (_d, path, model) = tiny();
    let file = std::fs::read(&path).unwrap();
    for dev in devices() {
        let gpu = dev.kind() != BackendKind::Host;
        let s = store(&path, &model, dev, 12);
        // GPU slabs give kernels a device address (what the C ABI hands out).
        assert_eq!(s.slab().memory().device_addr().is_some(), gpu);
        let p = s.acquire(3, &[0, 5, 9, 15, 2, 7], None).unwrap();
        assert_eq!(p.locations().len(), 6);
        verify(&s, &model, &file, &p);
        let st = s.stats();
        assert_eq!((st.cache.misses, st.cache.hits), (6, 0));
        assert_eq!(st.bytes_streamed, 6 * model.layers[3].expert_bytes());
        assert_eq!(st.pinned_slots, 6);
        // Some cached, some not, one repeated: the C engine's pattern.
        let q = s.acquire(3, &[5, 9, 1, 1, 3, 4], None).unwrap();
        verify(&s, &model, &file, &q);
        assert_eq!(q.locations()[2].slot, q.locations()[3].slot);
        let st = s.stats();
        assert_eq!(st.cache.misses, 6 + 3);
        assert_eq!(st.pinned_slots, 9);
        drop(p);
        drop(q);
        assert_eq!(s.stats().pinned_slots, 0);
        assert_eq!(s.stats().loads_in_flight, 0);
    }
}

#[test]
fn pinned_experts_are_never_evicted_and_a_full_cache_pins_nothing() {
    let (_d, path, model) = tiny();
    let file = std::fs::read(&path).unwrap();
    for dev in devices().into_iter().skip(1) {
        let s = store(&path, &model, dev, 6);
        let p = s.acquire(1, &[0, 1, 2, 3, 4, 5], None).unwrap();
        // Every slot is pinned: another expert cannot come in, and the failed call leaves no pin.
        let e = s.acquire(1, &[0, 6], None).unwrap_err();
        assert!(
            matches!(e, StoreError::Cache(CacheError::Full { .. })),
            "{e}"
        );
        assert_eq!(s.stats().pinned_slots, 6);
        verify(&s, &model, &file, &p);
        drop(p);
        let q = s.acquire(2, &[6, 7, 8, 9, 10, 11], None).unwrap();
        verify(&s, &model, &file, &q);
        assert_eq!(s.stats().cache.evictions, 6);
    }
}

#[test]
fn prefetch_reads_once_and_pins_nothing() {
    let (_d, path, model) = tiny();
    let file = std::fs::read(&path).unwrap();
    let s = store(&path, &model, devices().remove(0), 8);
    assert_eq!(s.prefetch(0, &[1, 2, 3]).unwrap(), 3);
    assert_eq!(
        s.prefetch(0, &[1, 2, 3]).unwrap(),
        0,
        "already loading or resident"
    );
    assert_eq!(s.stats().pinned_slots, 0);
    let p = s.acquire(0, &[1, 2, 3, 4, 5, 6], None).unwrap();
    verify(&s, &model, &file, &p);
    let st = s.stats();
    assert_eq!(st.cache.misses, 6, "3 prefetched + 3 new, never twice");
    assert_eq!(st.bytes_streamed, 6 * model.layers[0].expert_bytes());
    drop(p);
    // A prefetch into a cache whose slots are all pinned stops instead of failing.
    let p = s.acquire(1, &[0, 1, 2, 3, 4, 5], None).unwrap();
    let q = s.acquire(1, &[6, 7], None).unwrap();
    assert_eq!(s.prefetch(2, &[0, 1, 2]).unwrap(), 0);
    drop((p, q));
}

#[test]
fn a_failed_read_fails_its_holders_and_a_later_acquire_reads_again() {
    let (_d, path, model) = tiny();
    let file = std::fs::read(&path).unwrap();
    let src = FileSource::open(&path, OpenConfig::default()).unwrap();
    let faulty = Arc::new(FaultySource::new(
        src,
        FaultPlan {
            eio_at_op: Some(2),
            ..FaultPlan::default()
        },
    ));
    let engine = Arc::new(Engine::new(faulty, devices().remove(0), cfg()).unwrap());
    let s = ExpertStore::new(engine, Arc::clone(&model), 8, PolicyKind::Arc).unwrap();
    let e = s.acquire(3, &[4], None).unwrap_err();
    let msg = crate::engine::EngineError::to_string(match &e {
        StoreError::Read { source, .. } => source,
        other => panic!("{other}"),
    });
    assert!(msg.contains("blk.3.ffn_"), "{msg}");
    assert!(e.to_string().contains("expert 4 of layer 3"), "{e}");
    let st = s.stats();
    assert_eq!((st.pinned_slots, st.cache.fills_failed), (0, 1));
    let p = s.acquire(3, &[4], None).unwrap();
    verify(&s, &model, &file, &p);
}

#[test]
fn bad_layers_and_experts_are_named() {
    let (_d, path, model) = tiny();
    let s = store(&path, &model, devices().remove(0), 6);
    let e = s.acquire(6, &[0], None).unwrap_err().to_string();
    assert!(e.contains("layer 6") && e.contains("6 layers"), "{e}");
    let e = s.acquire(0, &[1, 16], None).unwrap_err().to_string();
    assert!(e.contains("expert 16") && e.contains("16 experts"), "{e}");
    let e = s.prefetch(0, &[u32::MAX]).unwrap_err().to_string();
    assert!(e.contains("expert 4294967295"), "{e}");
    let too_few = ExpertStore::new(
        Arc::new(Engine::open(&path, devices().remove(0), cfg()).unwrap()),
        Arc::clone(&model),
        5,
        PolicyKind::Lru,
    );
    assert!(matches!(
        too_few,
        Err(StoreError::Cache(CacheError::TooSmall { slots: 5, k: 6 }))
    ));
    assert_eq!(s.stats().cache.lookups(), 0);
}

#[test]
fn concurrent_holders_share_slots_and_release_independently() {
    let (_d, path, model) = tiny();
    let file = std::fs::read(&path).unwrap();
    for dev in devices().into_iter().skip(1) {
        let s = store(&path, &model, dev, 16);
        std::thread::scope(|sc| {
            for t in 0..4u32 {
                let (s, model, file) = (&s, &model, &file);
                sc.spawn(move || {
                    for i in 0..20u32 {
                        let layer = (i + t) % 4;
                        let ids: Vec<u32> = (0..6).map(|k| (i * 3 + k * 5 + t) % 16).collect();
                        match s.acquire(layer, &ids, Some(Duration::from_secs(30))) {
                            Ok(p) => verify(s, model, file, &p),
                            // 4 threads x 6 pins can exceed 16 slots: a clean refusal is fine.
                            Err(StoreError::Cache(CacheError::Full { .. })) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                });
            }
        });
        let st = s.stats();
        assert_eq!((st.pinned_slots, st.loads_in_flight), (0, 0));
        assert!(st.cache.hits + st.cache.dedup_hits > 0);
    }
}
