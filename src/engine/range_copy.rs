//! Copying a range of the engine's file to a writer, in order, with a window of requests in
//! flight: what `ds4 cat` does on the host backend and `ds4-bench io`'s `cat` case measures.
//!
//! The engine is opened on the host backend ([`open_engine`]): each chunk is read straight into
//! recycled page-aligned memory by the reader pool, from the page cache when it holds the bytes,
//! O_DIRECT otherwise. [`copy_range`] keeps up to `window` requests of at most `chunk` bytes in
//! flight while earlier ones are written out: bounded memory whatever the range's size. Readers
//! and window follow the bytes' page-cache residency ([`shape_for`], [`shape_of`]): deep queues
//! for cold bytes, one reader per core for cached ones.
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
    /// Measure the disk: `window` is then the deepest queue tried, and the copy runs at the
    /// depth [`DepthTuner`] picks (cold bytes, where disks disagree on the best depth).
    pub tune: bool,
}

/// Cold bytes (or unknown): unbuffered reads cost no CPU; how deep a queue the disk wants is
/// measured ([`DepthTuner`]: the H200 machine's virtio disk wants 16-32 requests in flight,
/// the dev machine's two), up to 24 requests on 16 readers.
pub const COLD: CopyShape = CopyShape {
    workers: 16,
    window: 24,
    chunk: CHUNK,
    tune: true,
};

/// What a copy did: the depth it ended at and, when tuned, each depth measured (bytes/s).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CopyReport {
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
/// `shape.window` requests of at most `shape.chunk` bytes in flight (with `shape.tune`, as many
/// as [`DepthTuner`] finds fastest, measured over epochs of 1/16 of the copy, 32..=64 MiB).
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
        .then(|| DepthTuner::new(max, (len / 16).clamp(32 << 20, 64 << 20)));
    let t0 = std::time::Instant::now();
    let mut queued: VecDeque<BytesTicket> = VecDeque::with_capacity(max);
    let mut next = 0u64;
    let c = shape.chunk.max(4096) as u64;
    loop {
        let window = tuner.as_ref().map_or(max, DepthTuner::window);
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
    Ok(match tuner {
        Some(t) => CopyReport {
            window: t.window(),
            probes: t.probes().to_vec(),
        },
        None => CopyReport {
            window: max,
            probes: Vec::new(),
        },
    })
}

/// The engine `ds4 cat` reads through (also `ds4-bench io`'s `cat` case): host backend, reads
/// land straight in pooled host memory; cache-first reads (hot bytes from the page cache, cold
/// ones unbuffered).
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
