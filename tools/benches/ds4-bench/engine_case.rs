//! The engine under test: `Engine` on the host backend, reading a plan batch by batch.
//!
//! Two destinations, both allocated once through the device and reused by every run:
//! - `engine`: host-backend device memory that is NOT host-visible (`HostConfig { host_visible:
//!   false }`), so every chunk takes the real discrete-GPU path: file -> reader worker -> pinned
//!   staging slot -> async copy on the device's copy thread -> event -> slot recycled.
//! - `engine-host`: host-visible device memory (unified-memory APU / host straight-read path):
//!   workers read straight into the destination, no slot, no copy.
//!
//! Each batch is one `submit` + `Ticket::wait` (for the expert pattern: one token of 18 slices).
//! Only submission to the last completion is timed; `Engine::open` (staging ring, handles,
//! threads) happens before. The engine's own stats (stall time, chunk-read and copy latency,
//! direct vs buffered chunks) go into the row's `extra`.
//!
//! Limits: the host backend's "device copy" is a memcpy on one thread, so on a 2-core machine the
//! staged path competes with the readers for CPU; on a GPU it is a DMA engine.

use super::plan::Plan;
use super::threads::{Clock, RunOut};
use super::BenchError;
use ds4_stream::device::{
    BackendArg, Device, DeviceBuffer, DeviceError, OpenOptions, PinnedBuf, PINNED_ALIGN,
};
use ds4_stream::engine::{Engine, EngineConfig, EngineError, ReadRequest, StatsSnapshot};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Bytes of the pinned buffer used to poison the destination between runs.
const POISON_BYTES: usize = 16 << 20;

/// Size of each of the `copy` case's pinned buffers (4 of them, round robin).
pub const COPY_BYTES: usize = 64 << 20;

/// One engine destination (staged or host-visible) and its device.
pub struct EngineBench {
    device: Arc<dyn Device>,
    dest: Arc<DeviceBuffer>,
    host_visible: bool,
    /// The `copy` case's pinned buffers, allocated on first use (pinning is slow).
    copy_bufs: Mutex<Vec<PinnedBuf>>,
}

/// Engine knobs swept or fixed by the benchmark.
#[derive(Clone, Copy, Debug)]
pub struct EngineRun {
    pub workers: usize,
    pub chunk: u64,
    pub direct: bool,
    pub slots: usize,
    /// Bytes per staged read piece (`EngineConfig::copy_piece`).
    pub copy_piece: usize,
}

fn engine_err(e: EngineError) -> BenchError {
    match e {
        EngineError::Config(m) => BenchError::Usage(format!("engine configuration: {m}")),
        other => BenchError::Runtime(ds4_tools::cli::chain(&other)),
    }
}

fn device_err(what: &str, e: DeviceError) -> BenchError {
    BenchError::Runtime(format!("{what}: {e}"))
}

impl EngineBench {
    /// A device of `backend` (staged when `host_visible` is false, unified mode when true)
    /// with `dest_len` bytes of device memory.
    pub fn new(
        backend: BackendArg,
        host_visible: bool,
        dest_len: u64,
    ) -> Result<EngineBench, BenchError> {
        let device = backend
            .open(OpenOptions {
                ordinal: 0,
                unified: Some(host_visible),
                host_unified: None,
            })
            .map_err(|e| device_err(&format!("opening the {backend} device"), e))?;
        let len = usize::try_from(dest_len)
            .map_err(|_| BenchError::usage(format!("destination of {dest_len} bytes too large")))?;
        let dest = Arc::new(
            device
                .alloc(len)
                .map_err(|e| device_err("allocating the engine's destination", e))?,
        );
        Ok(EngineBench {
            device,
            dest,
            host_visible,
            copy_bufs: Mutex::new(Vec::new()),
        })
    }

    /// The device's name (for the log and rows).
    pub fn device_name(&self) -> String {
        self.device.name()
    }

    /// The `copy` case: the plan's bytes copied from 4 pinned buffers of [`COPY_BYTES`] (round
    /// robin, so a buffer is reused only after its previous copy) into the destination ring.
    /// What a reader could reach at best if reading cost nothing.
    pub fn copy_ceiling(&self, plan: &Plan) -> Result<RunOut, BenchError> {
        let mut bufs = self.copy_bufs.lock().unwrap_or_else(|p| p.into_inner());
        while bufs.len() < 4 {
            let b = self
                .device
                .alloc_pinned(COPY_BYTES)
                .map_err(|e| device_err("allocating the copy buffers", e))?;
            bufs.push(b);
        }
        let ring = self.dest.len().min(plan.dest_len.max(1) as usize);
        let per = COPY_BYTES.min(ring);
        let clock = Clock::start();
        let (mut done, mut at, mut i) = (0u64, 0usize, 0usize);
        while done < plan.bytes {
            let n = per.min((plan.bytes - done) as usize);
            if at + n > ring {
                at = 0;
            }
            let mut r = self
                .device
                .copy_h2d_async(&mut bufs[i % 4], 0, &self.dest, at, n);
            if matches!(r, Err(DeviceError::Busy { .. })) {
                // A small ring: an earlier copy still holds this range. Let them all land.
                for b in bufs.iter_mut() {
                    b.wait().map_err(|e| device_err("copy ceiling", e))?;
                }
                r = self
                    .device
                    .copy_h2d_async(&mut bufs[i % 4], 0, &self.dest, at, n);
            }
            r.map_err(|e| device_err("copy ceiling", e))?;
            done += n as u64;
            at += n;
            i += 1;
        }
        self.device
            .synchronize()
            .map_err(|e| device_err("copy ceiling", e))?;
        let (elapsed, cpu_secs) = clock.stop();
        Ok(RunOut {
            elapsed,
            direct_fraction: None,
            cpu_secs,
        })
    }

    /// The old path onto this device (the `mmap` case on a GPU): the file mapped with
    /// memmap2, each request copied from the mapping into the destination by the backend's
    /// blocking pageable copy ([`Device::copy_pageable_blocking`]), one after another on one
    /// thread, as the C engine's mmap fallback does. Mapping the file is not timed.
    pub fn old_path(&self, path: &Path, plan: &Plan) -> Result<RunOut, BenchError> {
        let io = |what: &'static str, e: std::io::Error| BenchError::Io {
            what,
            path: path.to_path_buf(),
            offset: 0,
            len: plan.file_len,
            source: e,
        };
        let f = std::fs::File::open(path).map_err(|e| io("open for mmap", e))?;
        // SAFETY: read-only mapping of a file the benchmark does not modify while it runs
        // (as in `baselines::run_mmap`; a truncation meanwhile would SIGBUS).
        let map = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| io("mmap", e))?;
        if (map.len() as u64) < plan.file_len {
            return Err(BenchError::Runtime(format!(
                "{} shrank to {} bytes during the benchmark",
                path.display(),
                map.len()
            )));
        }
        let clock = Clock::start();
        for batch in &plan.batches {
            for r in batch {
                let s = r.file_off as usize;
                self.device
                    .copy_pageable_blocking(
                        &map[s..s + r.len as usize],
                        &self.dest,
                        r.dest_off as usize,
                    )
                    .map_err(|e| device_err("old path (pageable copy from the mapping)", e))?;
            }
        }
        let (elapsed, cpu_secs) = clock.stop();
        Ok(RunOut {
            elapsed,
            direct_fraction: None,
            cpu_secs,
        })
    }

    /// The case name in rows (verification messages).
    pub fn name(&self) -> &'static str {
        if self.host_visible {
            "engine-host"
        } else {
            "engine"
        }
    }

    /// Fills `[0, len)` of the destination with a poison byte through the device (so it also
    /// works for memory the host cannot see), and touches every page before timing.
    pub fn poison(&self, len: u64) -> Result<(), BenchError> {
        let len = (len as usize).min(self.dest.len());
        let mut src = self
            .device
            .alloc_pinned(POISON_BYTES)
            .map_err(|e| device_err("allocating poison buffer", e))?;
        src.as_mut_slice()
            .map_err(|e| device_err("poison buffer", e))?
            .fill(0xa5);
        let mut off = 0;
        while off < len {
            let n = (len - off).min(POISON_BYTES);
            self.device
                .copy_h2d_async(&mut src, 0, &self.dest, off, n)
                .map_err(|e| device_err("poisoning the destination", e))?;
            off += n;
        }
        self.device
            .synchronize()
            .map_err(|e| device_err("poisoning the destination", e))
    }

    /// Reads the plan through a fresh engine; returns the timing and the engine's stats.
    pub fn run(
        &self,
        path: &Path,
        plan: &Plan,
        cfg: EngineRun,
    ) -> Result<(RunOut, StatsSnapshot), BenchError> {
        let slot_bytes = usize::try_from(cfg.chunk)
            .map_err(|_| BenchError::usage(format!("chunk {} too large", cfg.chunk)))?;
        let engine = Engine::open(
            path,
            Arc::clone(&self.device),
            EngineConfig {
                workers: cfg.workers,
                slots: cfg.slots,
                copy_piece: cfg.copy_piece,
                slot_bytes,
                direct: cfg.direct,
                // Cold runs drop the file's pages before each repetition instead.
                cold: false,
                queue_depth: (2 * cfg.workers).max(64),
                ..EngineConfig::default()
            },
        )
        .map_err(engine_err)?;
        let mut batches = Vec::with_capacity(plan.batches.len());
        for b in &plan.batches {
            let mut reqs = Vec::with_capacity(b.len());
            for r in b {
                let len = usize::try_from(r.len)
                    .map_err(|_| BenchError::Runtime(format!("request of {} bytes", r.len)))?;
                reqs.push(ReadRequest::new(
                    r.file_off,
                    len,
                    Arc::clone(&self.dest),
                    r.dest_off as usize,
                ));
            }
            batches.push(reqs);
        }
        let clock = Clock::start();
        for reqs in batches {
            engine
                .submit(reqs)
                .map_err(engine_err)?
                .wait()
                .map_err(engine_err)?;
        }
        let (elapsed, cpu_secs) = clock.stop();
        let stats = engine.stats();
        drop(engine);
        let read = stats.direct_chunks + stats.buffered_chunks;
        let direct_fraction = (read > 0).then(|| stats.direct_chunks as f64 / read as f64);
        Ok((
            RunOut {
                elapsed,
                direct_fraction,
                cpu_secs,
            },
            stats,
        ))
    }

    /// Copies destination bytes out (for verification).
    pub fn read(&self, off: u64, out: &mut [u8]) -> Result<(), BenchError> {
        self.device
            .read_d2h(&self.dest, off as usize, out)
            .map_err(|e| device_err("reading the destination back", e))
    }

    /// Flips the first byte of the first final segment (the `--inject-corruption` self-test).
    pub fn corrupt_one_byte(&self, plan: &Plan) -> Result<(), BenchError> {
        let Some(s) = plan.final_segments().first().copied() else {
            return Ok(());
        };
        let mut b = [0u8; 1];
        self.read(s.dest_off, &mut b)?;
        let mut src = self
            .device
            .alloc_pinned(PINNED_ALIGN)
            .map_err(|e| device_err("allocating", e))?;
        src.as_mut_slice().map_err(|e| device_err("corrupt", e))?[0] = b[0] ^ 1;
        self.device
            .copy_h2d_async(&mut src, 0, &self.dest, s.dest_off as usize, 1)
            .map_err(|e| device_err("corrupt", e))?;
        self.device
            .synchronize()
            .map_err(|e| device_err("corrupt", e))
    }
}
