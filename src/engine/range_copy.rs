//! Copying a range of the engine's file to a writer, in order, with a window of requests in
//! flight: what `ds4 cat` does on the host backend and `ds4-bench io`'s `cat` case measures.
//!
//! The engine is opened on the host backend ([`open_engine`]): each chunk is read straight into
//! recycled page-aligned memory by the reader pool, from the page cache when it holds the bytes,
//! O_DIRECT otherwise. [`copy_range`] keeps up to `window` requests of at most `chunk` bytes in
//! flight while earlier ones are written out: bounded memory whatever the range's size. Readers
//! and window follow the bytes' page-cache residency ([`shape_for`], [`shape_of`]): deep queues
//! for cold bytes (how deep measured by [`DepthTuner`]), one reader per core for cached ones.
//!
//! Limits: host memory only (a GPU round trip is `ds4 cat --backend`'s own loop); a failed
//! request stops the copy with the bytes before it already written.

use crate::device::BackendKind;
use crate::engine::depth_tuner::DepthTuner;
use crate::engine::{BytesTicket, Engine, EngineConfig, EngineError};
use std::collections::VecDeque;
use std::io::{self, Write};
use std::path::Path;

/// Bytes per engine request.
pub const CHUNK: usize = 4 << 20;
/// How many reader workers a copy starts, how many requests it keeps in flight ahead of the
/// writer and how large they are (host backend), chosen by [`shape_for`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyShape {
    pub workers: usize,
    pub window: usize,
    /// Bytes per request (a multiple of 4096).
    pub chunk: usize,
    /// Measure the disk: `workers` and `window` are then the most readers and requests tried,
    /// and the copy runs at the step [`DepthTuner`] picks (cold bytes, where disks disagree on
    /// how many reads in flight are best).
    pub tune: bool,
}

/// Cold bytes (or unknown): unbuffered reads cost no CPU; how many reads in flight the disk
/// wants is measured ([`DepthTuner`]: the dev machine's virtio disk wants one reader with the
/// next requests queued, NVMe drives deep queues), up to 16 readers and 24 requests.
pub const COLD: CopyShape = CopyShape {
    workers: 16,
    window: 24,
    chunk: CHUNK,
    tune: true,
};

/// What a copy did: the readers and requests in flight it ended at and, when tuned, each
/// reader count measured (readers, bytes/s).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CopyReport {
    pub readers: usize,
    pub window: usize,
    pub probes: Vec<(usize, f64)>,
}

/// The shape for a range of which `cached` (0..=1) is in the page cache, on a machine with
/// `cores` CPUs. Mostly cached (≥ half): reads are copies out of the page cache, so one reader
/// per core (2..=8) and two requests more than readers; more threads than cores only contend
/// (a 2-core machine read a hot 672 MiB tensor at 4.5 GB/s with 8 readers and 6-8 GB/s with
/// 2). Otherwise, or when the OS cannot say: [`COLD`].
pub fn shape_for(cached: Option<f64>, cores: usize) -> CopyShape {
    match cached {
        Some(f) if f >= 0.5 => {
            let workers = cores.clamp(2, 8);
            CopyShape {
                workers,
                window: workers + 2,
                chunk: CHUNK,
                tune: false,
            }
        }
        _ => COLD,
    }
}

/// [`shape_for`] the bytes `[offset, offset + len)` of `path` on this machine (one `cachestat`
/// call on Linux; [`COLD`] where the OS cannot say).
pub fn shape_of(path: &Path, offset: u64, len: u64) -> CopyShape {
    let cached = std::fs::File::open(path)
        .ok()
        .and_then(|f| ds4_io::cached_fraction(&f, offset, len));
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    shape_for(cached, cores)
}

/// Why a copy stopped.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("reading the file")]
    Read(#[source] EngineError),
    #[error("writing the bytes out")]
    Write(#[source] io::Error),
}

/// Copies `len` bytes at absolute `offset` of the engine's file to `out`, in order, with up to
/// `shape.window` requests of at most `shape.chunk` bytes in flight (with `shape.tune`, the
/// readers and requests [`DepthTuner`] finds fastest, measured over epochs of 1/16 of the copy,
/// 32..=64 MiB; the reader count needs an engine opened with
/// [`EngineConfig::active_readers`], as [`open_engine`] does for tuned shapes, and is left
/// alone otherwise).
/// Requests after the first start on multiples of the chunk in the file, so only the first and
/// the last are widened for the unbuffered path (the engine reads 4096-aligned ranges).
pub fn copy_range(
    engine: &Engine,
    shape: CopyShape,
    offset: u64,
    len: u64,
    out: &mut dyn Write,
) -> Result<CopyReport, CopyError> {
    let max = shape.window.max(1);
    let mut tuner = shape
        .tune
        .then(|| DepthTuner::new(shape.workers, max, (len / 16).clamp(32 << 20, 64 << 20)));
    // The reader count last asked of the engine.
    let mut asked = None;
    let t0 = std::time::Instant::now();
    let mut queued: VecDeque<BytesTicket> = VecDeque::with_capacity(max);
    let mut next = 0u64;
    let c = shape.chunk.max(4096) as u64;
    loop {
        let (window, want) = tuner
            .as_ref()
            .map_or((max, shape.workers), |t| (t.window(), t.readers()));
        if asked != Some(want) {
            asked = Some(want);
            engine.set_active_readers(want);
        }
        while next < len && queued.len() < window {
            let at = offset + next;
            let to_grid = c - at % c;
            let n = (len - next).min(to_grid) as usize;
            queued.push_back(
                engine
                    .submit_bytes(offset + next, n)
                    .map_err(CopyError::Read)?,
            );
            next += n as u64;
        }
        let Some(t) = queued.pop_front() else { break };
        let bytes = t.wait().map_err(CopyError::Read)?;
        out.write_all(&bytes).map_err(CopyError::Write)?;
        if let Some(t) = tuner.as_mut() {
            t.written(bytes.len() as u64, t0.elapsed());
        }
    }
    out.flush().map_err(CopyError::Write)?;
    // What the engine runs (every worker when it has no limit).
    let readers = engine.active_readers().unwrap_or(shape.workers);
    Ok(match tuner {
        Some(t) => CopyReport {
            readers,
            window: t.window(),
            probes: t.probes().to_vec(),
        },
        None => CopyReport {
            readers,
            window: max,
            probes: Vec::new(),
        },
    })
}

/// The engine `ds4 cat` reads through (also `ds4-bench io`'s `cat` case): host backend, reads
/// land straight in pooled host memory; cache-first reads (hot bytes from the page cache, cold
/// ones unbuffered). A tuned shape's engine starts with one active reader, which the copy then
/// raises as [`DepthTuner`] climbs.
pub fn open_engine(path: &Path, shape: CopyShape) -> Result<Engine, EngineError> {
    let device = BackendKind::Host
        .open_default()
        .map_err(|source| EngineError::Device {
            offset: 0,
            len: 0,
            label: None,
            source,
        })?;
    let cfg = EngineConfig {
        workers: shape.workers,
        slots: 1, // host-visible reads take no staging slot
        slot_bytes: shape.chunk,
        host_pool_bytes: (shape.window + 2) * (shape.chunk + (64 << 10)),
        active_readers: shape.tune.then_some(1),
        ..EngineConfig::default()
    };
    Engine::open(path, device, cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    // Whole files through the engine's threads: minutes per test under Miri (CI's miri step
    // runs `engine::`); the pipeline and ring underneath have their own Miri tests.
    #[cfg_attr(miri, ignore)]
    fn shape_follows_residency_and_cores() {
        // Cold or unknown: the deep queue, whatever the cores.
        assert_eq!(shape_for(None, 2), COLD);
        assert_eq!(shape_for(Some(0.0), 64), COLD);
        assert_eq!(shape_for(Some(0.49), 16), COLD);
        // Cached: one reader per core, 2..=8, window two more.
        let hot = |c| shape_for(Some(1.0), c);
        assert_eq!(
            hot(1),
            CopyShape {
                workers: 2,
                window: 4,
                chunk: CHUNK,
                tune: false
            }
        );
        assert_eq!(
            hot(2),
            CopyShape {
                workers: 2,
                window: 4,
                chunk: CHUNK,
                tune: false
            }
        );
        assert_eq!(
            hot(6),
            CopyShape {
                workers: 6,
                window: 8,
                chunk: CHUNK,
                tune: false
            }
        );
        assert_eq!(
            hot(128),
            CopyShape {
                workers: 8,
                window: 10,
                chunk: CHUNK,
                tune: false
            }
        );
        assert_eq!(shape_for(Some(0.5), 4).workers, 4);
    }
    use ds4_io::pattern::{self, PatternSource};
    use std::sync::Arc;

    const T12: CopyShape = CopyShape {
        workers: 2,
        window: 12,
        chunk: CHUNK,
        tune: false,
    };

    fn engine(len: u64, seed: u64) -> Engine {
        let device = BackendKind::Host.open_default().unwrap();
        let cfg = EngineConfig {
            workers: 2,
            slots: 2,
            slot_bytes: CHUNK,
            ..EngineConfig::default()
        };
        Engine::new(Arc::new(PatternSource::new(len, seed)), device, cfg).unwrap()
    }

    #[test]
    // Whole files through the engine's threads: minutes per test under Miri (CI's miri step
    // runs `engine::`); the pipeline and ring underneath have their own Miri tests.
    #[cfg_attr(miri, ignore)]
    fn copies_across_chunk_boundaries() {
        let e = engine(80 << 20, 99);
        for &(off, len) in &[
            (0u64, 0u64),
            (3, 17),
            (5, CHUNK as u64 + 11),
            (7 << 20, 15 * CHUNK as u64 + 5),
        ] {
            // The default requests, and smaller ones in a shallow window.
            let small = CopyShape {
                workers: 2,
                window: 3,
                chunk: 1 << 20,
                tune: false,
            };
            for shape in [T12, small] {
                let mut out = Vec::new();
                copy_range(&e, shape, off, len, &mut out).unwrap();
                assert_eq!(out.len() as u64, len, "{shape:?}");
                pattern::verify(99, off, &out).unwrap();
            }
        }
    }

    /// A disk where every read takes `latency` and at most `lanes` reads proceed at once (the
    /// rest wait their turn): it reads `lanes` times faster with `lanes` readers than with
    /// one. With one lane, a read that finds another already running takes twice as long (the
    /// dev machine's disk, slower with more reads in flight). Records how many reads were
    /// running as each one started. It delivers no bytes (the buffer keeps what it held), so
    /// the copy's rate is the lanes' and not the CPU's: under Wine, in a debug build, making
    /// the pattern bytes bounded the rate at 4 readers (other tests check the bytes).
    struct Disk {
        inner: Arc<PatternSource>,
        lanes: Arc<Lanes>,
    }

    /// What every handle of a [`Disk`] shares.
    struct Lanes {
        latency: std::time::Duration,
        lanes: usize,
        /// Reads running now, and how many were running as each one started.
        running: std::sync::Mutex<(usize, Vec<usize>)>,
        /// Lanes busy.
        busy: std::sync::Mutex<usize>,
        freed: std::sync::Condvar,
    }

    struct DiskHandle {
        inner: Box<dyn ds4_io::ReadAt>,
        lanes: Arc<Lanes>,
    }

    impl ds4_io::Source for Disk {
        fn path(&self) -> &Path {
            self.inner.path()
        }
        fn len(&self) -> u64 {
            self.inner.len()
        }
        fn open_handle(&self) -> io::Result<Box<dyn ds4_io::ReadAt>> {
            Ok(Box::new(DiskHandle {
                inner: self.inner.open_handle()?,
                lanes: Arc::clone(&self.lanes),
            }))
        }
    }

    impl ds4_io::ReadAt for DiskHandle {
        fn read_exact_at(&mut self, _buf: &mut [u8], _offset: u64) -> io::Result<()> {
            let l = &*self.lanes;
            let crowd = {
                let mut r = l.running.lock().unwrap();
                r.0 += 1;
                let now = r.0;
                r.1.push(now);
                now
            };
            let mut busy = l.busy.lock().unwrap();
            while *busy >= l.lanes {
                busy = l.freed.wait(busy).unwrap();
            }
            *busy += 1;
            drop(busy);
            let slow = if l.lanes == 1 && crowd > 1 { 2 } else { 1 };
            std::thread::sleep(l.latency * slow);
            *l.busy.lock().unwrap() -= 1;
            l.freed.notify_all();
            l.running.lock().unwrap().0 -= 1;
            Ok(())
        }
        ds4_io::forward_read_at!(inner);
    }

    /// Counts what it is given (the [`Disk`] delivers no bytes worth checking).
    struct Check {
        pos: u64,
    }

    impl Write for Check {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.pos += b.len() as u64;
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A tuned copy of `len` bytes (up to 4 readers, 1 MiB requests) through an engine with an
    /// active limit, on a [`Disk`] of `lanes` lanes and 5 ms reads; the copy's report and the
    /// running counts seen.
    fn tuned_copy(lanes: usize, len: u64) -> (CopyReport, Vec<usize>) {
        let shared = Arc::new(Lanes {
            latency: std::time::Duration::from_millis(5),
            lanes,
            running: std::sync::Mutex::new((0, Vec::new())),
            busy: std::sync::Mutex::new(0),
            freed: std::sync::Condvar::new(),
        });
        let disk = Disk {
            inner: Arc::new(PatternSource::new(len, 7)),
            lanes: Arc::clone(&shared),
        };
        let shape = CopyShape {
            workers: 4,
            window: 6,
            chunk: 1 << 20,
            tune: true,
        };
        let cfg = EngineConfig {
            workers: shape.workers,
            slots: 1,
            slot_bytes: shape.chunk,
            active_readers: Some(1),
            ..EngineConfig::default()
        };
        let device = BackendKind::Host.open_default().unwrap();
        let e = Engine::new(Arc::new(disk), device, cfg).unwrap();
        let mut out = Check { pos: 0 };
        let rep = copy_range(&e, shape, 0, len, &mut out).unwrap();
        assert_eq!(out.pos, len);
        let seen = shared.running.lock().unwrap().1.clone();
        (rep, seen)
    }

    #[test]
    // Threads and sleeps: minutes under Miri.
    #[cfg_attr(miri, ignore)]
    fn a_tuned_copy_sets_the_engines_readers_as_it_climbs() {
        // A deep-queue disk (4 lanes): every step is faster, the copy ends at 4 readers. Epochs
        // of 32 MiB (the floor): 32 reads each.
        let (rep, seen) = tuned_copy(4, 112 << 20);
        let steps: Vec<usize> = rep.probes.iter().map(|p| p.0).collect();
        assert_eq!(steps, vec![1, 2, 4], "{rep:?}");
        assert_eq!((rep.readers, rep.window), (4, 6), "{rep:?}");
        assert!(seen.contains(&4), "4 readers never ran at once: {seen:?}");
        // The first epoch is read by one reader with the next requests queued: no read
        // starts beside another.
        assert!(seen[..30].iter().all(|&n| n == 1), "{seen:?}");

        // A one-lane disk that slows when crowded: two readers are slower, back to one.
        let (rep, seen) = tuned_copy(1, 80 << 20);
        let steps: Vec<usize> = rep.probes.iter().map(|p| p.0).collect();
        assert_eq!(steps, vec![1, 2], "{rep:?}");
        assert_eq!((rep.readers, rep.window), (1, 3), "{rep:?}");
        // Two readers ran during the probe of two (three once, if the reader above the
        // lowered limit was already waiting for a request), never more.
        assert!(seen.iter().all(|&n| n <= 3), "{seen:?}");
    }

    #[test]
    // Whole files through the engine's threads: minutes per test under Miri (CI's miri step
    // runs `engine::`); the pipeline and ring underneath have their own Miri tests.
    #[cfg_attr(miri, ignore)]
    fn read_and_write_errors_are_told_apart() {
        let e = engine(1 << 20, 1);
        match copy_range(&e, T12, (1 << 20) - 10, 20, &mut Vec::new()) {
            Err(CopyError::Read(EngineError::OutOfFile { offset, len, .. })) => {
                assert_eq!((offset, len), ((1 << 20) - 10, 20))
            }
            other => panic!("{other:?}"),
        }
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        match copy_range(&e, T12, 0, 100, &mut Closed) {
            Err(CopyError::Write(err)) => assert_eq!(err.kind(), io::ErrorKind::BrokenPipe),
            other => panic!("{other:?}"),
        }
    }
}
