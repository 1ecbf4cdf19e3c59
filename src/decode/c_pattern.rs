//! The C DS4 engine's expert-streaming pattern, **re-implemented** here for same-run
//! comparisons (`ds4 --ssd-streaming --ssd-streaming-c-engine-pattern`). It is not the C
//! engine: it is what DS4_FACTS.md describes its ROCm streaming path doing, on our device
//! layer, so that both patterns read the same file into the same GPU in one run.
//!
//! The pattern: 18 persistent read workers (6 experts × 3 tensors: one job per slice); each
//! worker owns a file handle and a pinned buffer and, per job, does a buffered `pread` into
//! the buffer → an async copy to the destination → waits for that copy (the C engine's
//! stream synchronize) → `posix_fadvise(DONTNEED)` on the range read. Read and copy never
//! overlap inside a worker, and the layer waits for all of its jobs before it computes (one
//! rendezvous per layer). The cache around it is the C engine's: LRU, no lookahead, no
//! prefetch of hash-layer experts at token start, no hits-first compute.

use super::experts::{resident, ExpertData, ExpertProvider, Fetch, FetchStats};
use super::slots::{Ask, Landing, Miss, SlotLoader, Started};
use super::DecodeError;
use crate::decode::LoadError;
use crate::device::{Device, DeviceBuffer, PinnedBuf};
use crate::expert_cache::{PolicyKind, SliceRead, SlotId};
use crate::model::Ds4Model;
use bytes::Bytes;
use crossbeam_channel::{unbounded, Receiver, Sender};
use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

/// The C engine's number of read workers (6 experts × 3 tensors).
pub const C_ENGINE_WORKERS: usize = 18;

/// One slice to read: file range → `dst[at..at + len]`.
pub struct Job {
    pub offset: u64,
    pub len: usize,
    pub dst: Arc<DeviceBuffer>,
    pub at: usize,
}

type Done = Result<(), String>;

/// The worker pool. Dropping it stops and joins the workers.
pub struct CPatternLoader {
    jobs: Option<Sender<(Job, Sender<Done>)>>,
    workers: Vec<JoinHandle<()>>,
}

impl CPatternLoader {
    /// `workers` threads, each with its own handle on `path` and a pinned buffer of
    /// `max_slice` bytes from `dev`.
    pub fn new(
        path: &Path,
        dev: Arc<dyn Device>,
        workers: usize,
        max_slice: usize,
    ) -> Result<Self, DecodeError> {
        let (tx, rx) = unbounded::<(Job, Sender<Done>)>();
        let mut handles = Vec::with_capacity(workers);
        for i in 0..workers.max(1) {
            let file = File::open(path).map_err(LoadError::io(format!(
                "c-engine pattern: open {}",
                path.display()
            )))?;
            let buf = dev
                .alloc_pinned(max_slice.max(1))
                .map_err(LoadError::device("c-engine pattern: pinned buffer"))?;
            let (rx, dev) = (rx.clone(), dev.clone());
            let h = std::thread::Builder::new()
                .name(format!("c-pattern-{i}"))
                .spawn(move || worker(file, buf, dev.as_ref(), rx))
                .map_err(LoadError::io("c-engine pattern: spawn a worker"))?;
            handles.push(h);
        }
        Ok(Self {
            jobs: Some(tx),
            workers: handles,
        })
    }

    /// Runs `jobs` on the workers and waits for every one (the per-layer rendezvous). The
    /// first failure is returned after all jobs have finished (none is left writing).
    pub fn load(&self, jobs: Vec<Job>) -> Result<(), DecodeError> {
        let tx = self.jobs.as_ref().expect("jobs sender lives until drop");
        let (dtx, drx) = unbounded();
        let n = jobs.len();
        for j in jobs {
            tx.send((j, dtx.clone()))
                .map_err(|_| LoadError::Internal("c-engine pattern: workers gone".into()))?;
        }
        drop(dtx);
        let mut first = None;
        for _ in 0..n {
            match drx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first.get_or_insert(e);
                }
                Err(_) => {
                    first.get_or_insert("c-engine pattern: a worker died".into());
                    break;
                }
            }
        }
        match first {
            None => Ok(()),
            Some(e) => Err(LoadError::Read(e).into()),
        }
    }
}

impl Drop for CPatternLoader {
    fn drop(&mut self) {
        self.jobs = None;
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

fn worker(file: File, mut buf: PinnedBuf, dev: &dyn Device, rx: Receiver<(Job, Sender<Done>)>) {
    while let Ok((job, done)) = rx.recv() {
        let r = one(&file, &mut buf, dev, &job);
        let _ = done.send(r);
    }
}

/// pread → async copy → wait for it → drop the range from the page cache.
fn one(file: &File, buf: &mut PinnedBuf, dev: &dyn Device, j: &Job) -> Done {
    if j.len > buf.len() {
        return Err(format!(
            "c-engine pattern: slice of {} bytes > buffer {}",
            j.len,
            buf.len()
        ));
    }
    let dst = buf.as_mut_slice().map_err(|e| e.to_string())?;
    read_at(file, &mut dst[..j.len], j.offset)
        .map_err(|e| format!("c-engine pattern: read {} at {}: {e}", j.len, j.offset))?;
    dev.copy_h2d_async(buf, 0, &j.dst, j.at, j.len)
        .map_err(|e| format!("c-engine pattern: copy: {e}"))?;
    buf.wait()
        .map_err(|e| format!("c-engine pattern: copy: {e}"))?;
    drop_cached(file, j.offset, j.len);
    Ok(())
}

#[cfg(unix)]
fn read_at(f: &File, dst: &mut [u8], off: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(f, dst, off)
}

#[cfg(windows)]
fn read_at(f: &File, mut dst: &mut [u8], mut off: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !dst.is_empty() {
        match f.seek_read(dst, off)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => {
                dst = &mut std::mem::take(&mut dst)[n..];
                off += n as u64;
            }
        }
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn drop_cached(f: &File, off: u64, len: usize) {
    use std::os::fd::AsRawFd;
    // SAFETY: a live descriptor; advice only, no memory is touched.
    unsafe {
        libc::posix_fadvise(
            f.as_raw_fd(),
            off as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn drop_cached(_f: &File, _off: u64, _len: usize) {}

/// The jobs of `misses` into `slab`, whose slots are `slot_bytes` apart: one per slice.
pub(crate) fn jobs(misses: &[Miss], slab: &Arc<DeviceBuffer>, slot_bytes: usize) -> Vec<Job> {
    misses
        .iter()
        .flat_map(|m| {
            let base = m.slot as usize * slot_bytes;
            m.reads.iter().map(move |r| Job {
                offset: r.offset,
                len: r.len(),
                dst: slab.clone(),
                at: r.at(base),
            })
        })
        .collect()
}

/// The host backend's provider with the C engine's pattern (`ds4 --backend host
/// --ssd-streaming --ssd-streaming-c-engine-pattern`): an LRU-or-chosen cache (`SlotLoader`)
/// whose misses are read by a [`CPatternLoader`] into a host "device" slab (pread → the host
/// backend's copy thread → wait → fadvise), the layer waiting for all of them; then each
/// loaded expert is copied out of the slab into its own buffers for the stack (one memcpy per
/// miss the C engine does not make: a small bias against this pattern, stated in
/// docs/BENCHMARKS.md). No hash-layer prefetch, nothing pending: every fetch is ready.
pub struct CPatternExperts {
    slots: SlotLoader<HostBatch>,
}

/// The landing of [`CPatternExperts`]: batches only.
pub(crate) struct HostBatch {
    loader: CPatternLoader,
    dev: Arc<dyn Device>,
    slab: Arc<DeviceBuffer>,
    slot_bytes: usize,
    slots: Vec<Option<Arc<ExpertData>>>,
}

impl Landing for HostBatch {
    type Fill = ();
    fn start(&mut self, m: &Miss) -> Result<Started<()>, DecodeError> {
        Err(LoadError::Internal(format!(
            "the c-engine pattern reads demand requests only (expert {} of layer {})",
            m.key.expert, m.key.layer
        ))
        .into())
    }
    fn queue_down(&mut self, _f: &mut ()) -> Result<(), DecodeError> {
        Ok(())
    }
    fn poll(&mut self, _f: &mut ()) -> bool {
        true
    }
    fn finish(&mut self, _slot: SlotId, _f: ()) -> Result<(), DecodeError> {
        Ok(())
    }
    fn abandon(&mut self, _f: ()) {}
    fn batches(&self) -> bool {
        true
    }
    fn load_batch(&mut self, misses: &[Miss]) -> Result<(), DecodeError> {
        self.loader
            .load(jobs(misses, &self.slab, self.slot_bytes))?;
        for m in misses {
            let base = m.slot as usize * self.slot_bytes;
            let part = |r: &SliceRead| {
                let mut v = vec![0u8; r.len()];
                self.dev
                    .read_d2h(&self.slab, r.at(base), &mut v)
                    .map(|()| (r.place.ty, Bytes::from(v)))
                    .map_err(LoadError::device("c-engine pattern: slab to host"))
            };
            let data = ExpertData {
                gate: part(&m.reads[0])?,
                up: part(&m.reads[1])?,
                down: part(&m.reads[2])?,
            };
            self.slots[m.slot as usize] = Some(Arc::new(data));
        }
        Ok(())
    }
}

impl CPatternExperts {
    /// `slots` experts (at least one layer's K) of `model` read from `path`.
    pub fn new(
        path: &Path,
        model: &Ds4Model,
        dev: Arc<dyn Device>,
        slots: usize,
        policy: PolicyKind,
    ) -> Result<Self, DecodeError> {
        let layout = super::slots::layout_of(model)?;
        let max_slice = (0..model.layers.len())
            .flat_map(|l| layout.places(l).iter().map(|p| p.len))
            .max()
            .unwrap_or(0);
        let slot_bytes = layout.slot_bytes();
        let len = layout
            .slab_bytes(slots)
            .ok_or_else(|| LoadError::layout("expert slab size overflows"))?;
        let slab = Arc::new(
            dev.alloc(len)
                .map_err(LoadError::device("c-engine pattern slab"))?,
        );
        let landing = HostBatch {
            loader: CPatternLoader::new(path, dev.clone(), C_ENGINE_WORKERS, max_slice)?,
            dev,
            slab,
            slot_bytes,
            slots: vec![None; slots],
        };
        Ok(Self {
            slots: SlotLoader::new(model, slots, policy, landing)?,
        })
    }
}

impl ExpertProvider for CPatternExperts {
    fn request(&mut self, layer: usize, ids: &[u32]) -> Result<Vec<Fetch>, DecodeError> {
        let got = self.slots.request(layer, ids, Ask::Demand)?;
        got.into_iter()
            .map(|s| resident(&self.slots.landing.slots, s).map(Fetch::Ready))
            .collect()
    }

    fn wait(&mut self, slot: SlotId) -> Result<Arc<ExpertData>, DecodeError> {
        Err(LoadError::Internal(format!("the c-engine pattern has no pending slot {slot}")).into())
    }

    fn end_layer(&mut self, _layer: usize) {
        self.slots.end_layer();
    }

    fn stats(&self) -> FetchStats {
        FetchStats {
            prefetched: 0,
            ..self.slots.stats()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{BackendKind, DeviceError};
    use std::io::Write;

    #[test]
    fn every_job_lands_and_errors_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.bin");
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&data)
            .unwrap();
        let dev = BackendKind::Host.open_default().unwrap();
        let loader = CPatternLoader::new(&path, dev.clone(), 5, 64 * 1024).unwrap();
        let dst = Arc::new(dev.alloc(40 * 30_000).unwrap());
        let jobs = (0..40)
            .map(|i| Job {
                offset: (i * 24_001) as u64,
                len: 30_000,
                dst: dst.clone(),
                at: i * 30_000,
            })
            .collect();
        loader.load(jobs).unwrap();
        let mut got = vec![0u8; 40 * 30_000];
        dev.read_d2h(&dst, 0, &mut got).unwrap();
        for i in 0..40 {
            let o = i * 24_001;
            assert_eq!(
                &got[i * 30_000..(i + 1) * 30_000],
                &data[o..o + 30_000],
                "job {i}"
            );
        }
        // Past the end of the file, and a slice bigger than the buffer: errors, no hang.
        let bad = |offset, len| Job {
            offset,
            len,
            dst: dst.clone(),
            at: 0,
        };
        let e = loader.load(vec![bad(999_000, 30_000)]).unwrap_err();
        assert!(e.to_string().contains("read 30000 at 999000"), "{e}");
        // A failed read is a runtime error (exit 1), not bad input.
        assert!(matches!(e, DecodeError::Load(LoadError::Read(_))), "{e:?}");
        assert!(!e.is_bad_input());
        let e = loader.load(vec![bad(0, 100_000)]).unwrap_err();
        assert!(e.to_string().contains("> buffer"), "{e}");
        // Still serving after the errors.
        loader.load(Vec::new()).unwrap();
    }

    #[test]
    fn a_pinned_allocation_failure_is_a_runtime_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.bin");
        std::fs::write(&path, [0u8; 4096]).unwrap();
        let host = BackendKind::Host.open_default().unwrap();
        // The third worker's staging buffer cannot be had.
        let dev: Arc<dyn Device> =
            Arc::new(crate::device::testing::CountingDevice::new(host).fail_pinned_after(2));
        let e = match CPatternLoader::new(&path, dev, 5, 4096) {
            Ok(_) => panic!("the loader started without its third staging buffer"),
            Err(e) => e,
        };
        assert!(
            matches!(
                &e,
                DecodeError::Load(LoadError::Device {
                    source: DeviceError::OutOfMemory { .. },
                    ..
                })
            ),
            "{e:?}"
        );
        assert!(!e.is_bad_input(), "{e}");
        // A file that is not there: an OS error, also not bad input of the loader's own.
        let e = match CPatternLoader::new(&dir.path().join("gone"), host_dev(), 1, 4096) {
            Ok(_) => panic!("opened a missing file"),
            Err(e) => e,
        };
        assert!(
            matches!(&e, DecodeError::Load(LoadError::Io { .. })),
            "{e:?}"
        );
    }

    fn host_dev() -> Arc<dyn Device> {
        BackendKind::Host.open_default().unwrap()
    }
}
