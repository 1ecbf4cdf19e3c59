//! Cases that read with plain `ds4_io` handles on N threads (no engine in between).
//!
//! - `io-threads` (raw): N workers, each with its own handle, read pieces of at most `chunk`
//!   bytes straight into the destination (O_DIRECT when aligned and asked for). This is the
//!   floor the engine must not fall below: the same reads with no staging, copies or bookkeeping.
//! - `c-stream`: the C engine's streaming path, rebuilt: 18 workers, one job per expert slice,
//!   buffered pread into the worker's own staging buffer, copy to the destination, and (cold
//!   runs) `posix_fadvise(DONTNEED)` after each job; reading and copying never overlap inside a
//!   worker. The C engine drops the range in hot runs too; we do not, or "hot" would not be hot.
//!
//! Both submit a plan's batches one at a time and wait for every piece of a batch (for the expert
//! pattern a batch is one token: 6 experts x 3 slices), as a decoder would.

use super::file::DestPtr;
use super::plan::{Plan, Request};
use super::BenchError;
use crossbeam_channel::unbounded;
use ds4_io::{AlignedBuf, FileSource, OpenConfig, ReadAt, Source};
use std::path::Path;
use std::time::{Duration, Instant};

/// How a threads case reads.
#[derive(Clone, Copy, Debug)]
pub struct ThreadsCfg {
    pub workers: usize,
    /// Largest piece one worker reads at once.
    pub chunk: u64,
    /// Ask for O_DIRECT (used only where offset, length and buffer are aligned).
    pub direct: bool,
    /// Read into a per-worker staging buffer, then copy to the destination.
    pub bounce: bool,
    /// Drop each range from the page cache after reading it.
    pub drop_after: bool,
}

/// What one timed run measured.
#[derive(Clone, Copy, Debug)]
pub struct RunOut {
    pub elapsed: Duration,
    /// Share of the bytes (engine: of the chunks) read through the unbuffered path (None: not
    /// applicable, e.g. mmap).
    pub direct_fraction: Option<f64>,
    /// CPU seconds this process used during the timed part (all its threads).
    pub cpu_secs: Option<f64>,
}

/// Wall time and process CPU time of a timed section.
pub(crate) struct Clock {
    start: Instant,
    cpu0: Option<f64>,
}

impl Clock {
    pub(crate) fn start() -> Clock {
        Clock {
            cpu0: super::cache::cpu_seconds(false),
            start: Instant::now(),
        }
    }

    /// (elapsed wall time, CPU seconds used by this process since `start`).
    pub(crate) fn stop(&self) -> (Duration, Option<f64>) {
        let elapsed = self.start.elapsed();
        let cpu = super::cache::cpu_seconds(false)
            .zip(self.cpu0)
            .map(|(b, a)| (b - a).max(0.0));
        (elapsed, cpu)
    }
}

/// `direct / (direct + buffered)`, None when nothing was read.
pub(crate) fn direct_fraction(direct: u64, buffered: u64) -> Option<f64> {
    let all = direct + buffered;
    (all > 0).then(|| direct as f64 / all as f64)
}

pub(crate) fn io_err(
    path: &Path,
    what: &'static str,
    r: &Request,
    e: std::io::Error,
) -> BenchError {
    BenchError::Io {
        what,
        path: path.to_path_buf(),
        offset: r.file_off,
        len: r.len,
        source: e,
    }
}

/// Runs `plan` on `cfg.workers` threads with their own handles; only submission to the last
/// completion is timed (opening handles and allocating staging are not).
pub fn run_threads(
    path: &Path,
    plan: &Plan,
    dest: DestPtr<'_>,
    cfg: ThreadsCfg,
) -> Result<RunOut, BenchError> {
    if cfg.workers == 0 || cfg.chunk == 0 {
        return Err(BenchError::usage("workers and chunk must be > 0"));
    }
    let src = FileSource::open(
        path,
        OpenConfig {
            direct: cfg.direct,
            drop_cache: cfg.drop_after,
            use_cache: false,
        },
    )
    .map_err(|e| BenchError::Io {
        what: "open",
        path: path.to_path_buf(),
        offset: 0,
        len: 0,
        source: e,
    })?;
    let mut handles = Vec::with_capacity(cfg.workers);
    for _ in 0..cfg.workers {
        handles.push(src.open_handle().map_err(|e| BenchError::Io {
            what: "open worker handle",
            path: path.to_path_buf(),
            offset: 0,
            len: 0,
            source: e,
        })?);
    }
    let max_piece = plan
        .batches
        .iter()
        .flatten()
        .map(|r| r.len)
        .max()
        .unwrap_or(0)
        .min(cfg.chunk);
    let staging_len = usize::try_from(max_piece.next_multiple_of(4096))
        .map_err(|_| BenchError::usage("chunk too large"))?;

    let (job_tx, job_rx) = unbounded::<Request>();
    let (done_tx, done_rx) = unbounded::<Result<(), BenchError>>();
    std::thread::scope(|s| {
        let mut workers = Vec::with_capacity(handles.len());
        for mut h in handles {
            let job_rx = job_rx.clone();
            let done_tx = done_tx.clone();
            workers.push(s.spawn(move || {
                let mut staging = if cfg.bounce {
                    match AlignedBuf::new(staging_len, 4096) {
                        Some(b) => Some(b),
                        None => {
                            let _ = done_tx.send(Err(BenchError::Runtime(format!(
                                "cannot allocate {staging_len} bytes of staging"
                            ))));
                            return h.stats();
                        }
                    }
                } else {
                    None
                };
                for p in job_rx.iter() {
                    let r = read_piece(path, h.as_mut(), p, dest, staging.as_mut(), cfg.drop_after);
                    if done_tx.send(r).is_err() {
                        break;
                    }
                }
                h.stats()
            }));
        }
        drop(job_rx);
        drop(done_tx);
        let clock = Clock::start();
        let mut first_err = None;
        for batch in &plan.batches {
            let mut n = 0usize;
            for r in batch {
                for p in r.pieces(cfg.chunk) {
                    // Unbounded: never blocks; workers hold the receiving ends until job_tx drops.
                    let _ = job_tx.send(p);
                    n += 1;
                }
            }
            for _ in 0..n {
                match done_rx.recv() {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        first_err.get_or_insert(e);
                    }
                    Err(_) => {
                        first_err.get_or_insert(BenchError::Runtime(
                            "every reader thread exited early".into(),
                        ));
                        break;
                    }
                }
            }
            if first_err.is_some() {
                break;
            }
        }
        let (elapsed, cpu_secs) = clock.stop();
        drop(job_tx); // workers drain and exit
        let (mut direct, mut buffered) = (0u64, 0u64);
        for w in workers {
            match w.join() {
                Ok(st) => {
                    direct += st.counters.direct_bytes;
                    buffered += st.counters.buffered_bytes;
                }
                Err(_) => {
                    first_err.get_or_insert(BenchError::Runtime("a reader thread panicked".into()));
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(RunOut {
                elapsed,
                direct_fraction: direct_fraction(direct, buffered),
                cpu_secs,
            }),
        }
    })
}

fn read_piece(
    path: &Path,
    h: &mut dyn ReadAt,
    p: Request,
    dest: DestPtr<'_>,
    staging: Option<&mut AlignedBuf>,
    drop_after: bool,
) -> Result<(), BenchError> {
    // SAFETY: pieces of one batch cover disjoint destination ranges (Plan::check), and the
    // submitter waits for a whole batch before sending the next, so this range is ours alone.
    let d = unsafe { dest.slice_mut(p.dest_off, p.len)? };
    match staging {
        None => h
            .read_exact_at(d, p.file_off)
            .map_err(|e| io_err(path, "read", &p, e))?,
        Some(buf) => {
            let b = &mut buf[..p.len as usize];
            h.read_exact_at(b, p.file_off)
                .map_err(|e| io_err(path, "read", &p, e))?;
            d.copy_from_slice(b);
        }
    }
    if drop_after {
        h.drop_cache(p.file_off, p.len);
    }
    Ok(())
}
