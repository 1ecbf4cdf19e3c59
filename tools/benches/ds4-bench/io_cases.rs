//! `ds4-bench io`'s cases: the read paths a block compares, and the fio ceiling configurations.

use super::args::{CaseArg, IoArgs, OnOff};
use super::file::DestPtr;
use super::plan::{Pattern, Plan, EXPERT_BYTES};
use super::report::Mode;
use super::{baselines, BenchError};
use std::io::Write;
use std::path::Path;

/// The fio configurations added to every cold block so that "best fio" is the disk's ceiling:
/// psync with 1, 4 and 18 jobs and libaio at depth 4, 8, 16 and 32, with 4 and 8 MiB blocks
/// (seq) or one expert per IO (expert); those the sweep runs anyway are left out.
pub(super) fn ceiling_fio(
    pattern: Pattern,
    swept_workers: &[usize],
    swept_chunks: &[u64],
) -> Vec<Case> {
    let chunks: &[u64] = match pattern {
        Pattern::Seq => &[4 << 20, 8 << 20],
        Pattern::Expert => &[EXPERT_BYTES],
    };
    let mut v = Vec::new();
    for &chunk in chunks {
        for w in [1, 4, 18] {
            let swept = swept_workers.contains(&w)
                && (pattern == Pattern::Expert || swept_chunks.contains(&chunk));
            if !swept {
                v.push(Case::Fio {
                    workers: w,
                    chunk,
                    aio: None,
                });
            }
        }
        for d in [4, 8, 16, 32] {
            v.push(Case::Fio {
                workers: 1,
                chunk,
                aio: Some(d),
            });
        }
    }
    v
}

/// `ds4 cat`'s path on the plan (seq): per batch, `copy_range` of its one request into a
/// writer that lays the bytes into the destination ring, so the usual verifier checks them.
/// The copy into the ring is the one cost `cat > /dev/null` does not pay. Also returns, for
/// the row's `extra`, the readers and window each batch ended at and what the depth tuner
/// measured (`{"readers": [..], "windows": [..], "probes": [[readers, GB/s], ..]}`, probes of
/// the first batch).
pub(super) fn run_cat(
    path: &Path,
    plan: &Plan,
    dest: DestPtr<'_>,
) -> Result<(super::threads::RunOut, serde_json::Value), BenchError> {
    // The shape `ds4 cat` would choose for these bytes now (after the run's cache preparation).
    let shape = ds4_tools::cli::cat::shape_of(path, 0, plan.file_len).map_err(BenchError::Usage)?;
    let engine = ds4_stream::engine::range_copy::open_engine(path, shape)
        .map_err(|e| BenchError::Runtime(ds4_tools::cli::chain(&e)))?;
    let cpu0 = super::cache::cpu_seconds(false);
    let t0 = std::time::Instant::now();
    let mut reports = Vec::new();
    for batch in &plan.batches {
        for r in batch {
            let mut w = RingWriter {
                dest,
                pos: r.dest_off,
            };
            let rep = ds4_stream::engine::range_copy::copy_range(
                &engine, shape, r.file_off, r.len, &mut w,
            )
            .map_err(|e| match e {
                ds4_stream::engine::range_copy::CopyError::Read(e) => {
                    BenchError::Runtime(ds4_tools::cli::chain(&e))
                }
                ds4_stream::engine::range_copy::CopyError::Write(e) => {
                    BenchError::Runtime(format!("cat case: {e}"))
                }
            })?;
            reports.push(rep);
        }
    }
    let elapsed = t0.elapsed();
    let cpu_secs = super::cache::cpu_seconds(false)
        .zip(cpu0)
        .map(|(a, b)| a - b);
    let s = engine.stats();
    let read = s.direct_chunks + s.buffered_chunks;
    let depth = serde_json::json!({
        "readers": reports.iter().map(|r| r.readers).collect::<Vec<_>>(),
        "windows": reports.iter().map(|r| r.window).collect::<Vec<_>>(),
        "probes": reports.first().map_or(Vec::new(), |r| r
            .probes
            .iter()
            .map(|&(d, bps)| serde_json::json!([d, (bps / 1e6).round() / 1e3]))
            .collect()),
    });
    let out = super::threads::RunOut {
        elapsed,
        cpu_secs,
        direct_fraction: (read > 0).then(|| s.direct_chunks as f64 / read as f64),
    };
    Ok((out, depth))
}

/// Writes a byte stream into the destination from `pos` on (one thread, in order).
struct RingWriter<'d> {
    dest: DestPtr<'d>,
    pos: u64,
}

impl Write for RingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // SAFETY: this writer is the only user of the destination during the cat case (one
        // thread writes the plan's one request per batch, in order), and the slice is dropped
        // before the next write.
        let d = unsafe { self.dest.slice_mut(self.pos, buf.len() as u64) }
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        d.copy_from_slice(buf);
        self.pos += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One configuration to measure.
#[derive(Clone, Debug)]
pub(super) enum Case {
    /// psync fio with `workers` jobs, or (`aio: Some(depth)`) one libaio job at that depth.
    Fio {
        workers: usize,
        chunk: u64,
        aio: Option<usize>,
    },
    /// `ds4 cat`'s exact path (seq only): its engine, `copy_range` in 4 MiB requests on the
    /// file grid, each `Bytes` written to a sink that copies it into the destination ring.
    Cat,
    Engine {
        host: bool,
        workers: usize,
        chunk: u64,
        direct: bool,
    },
    Threads {
        workers: usize,
        chunk: u64,
        direct: bool,
    },
    CStream,
    Mmap,
    CLoad {
        direct: bool,
    },
    /// Pinned → device copies only (the link's ceiling), through the staged engine's device.
    Copy,
}

impl Case {
    pub(super) fn name(&self) -> &'static str {
        match self {
            Case::Fio { aio: None, .. } => "fio",
            Case::Fio { aio: Some(_), .. } => "fio-aio",
            Case::Cat => "cat",
            Case::Engine { host: false, .. } => "engine",
            Case::Engine { host: true, .. } => "engine-host",
            Case::Threads { .. } => "io-threads",
            Case::CStream => "c-stream",
            Case::Mmap => "mmap",
            Case::CLoad { .. } => "c-load",
            Case::Copy => "copy",
        }
    }

    /// (workers, chunk, direct) as reported; chunk `u64::MAX` = one read per slice.
    pub(super) fn params(&self, pattern: Pattern, mode: Mode) -> (usize, u64, bool) {
        match *self {
            Case::Fio {
                workers,
                chunk,
                aio,
            } => (
                aio.unwrap_or(workers),
                if pattern == Pattern::Expert {
                    EXPERT_BYTES
                } else {
                    chunk
                },
                mode == Mode::Cold,
            ),
            Case::Engine {
                workers,
                chunk,
                direct,
                ..
            }
            | Case::Threads {
                workers,
                chunk,
                direct,
            } => (workers, chunk, direct),
            // cat always opens with direct on, but reads cached bytes from the page cache:
            // in hot runs nothing goes unbuffered (direct_fraction shows it).
            // Its readers follow the bytes' residency (`cat::shape_for`): the shape it picks
            // for a cold or a fully cached file here.
            Case::Cat => (
                ds4_stream::engine::range_copy::shape_for(
                    Some(if mode == Mode::Cold { 0.0 } else { 1.0 }),
                    std::thread::available_parallelism().map_or(2, |n| n.get()),
                )
                .workers,
                ds4_stream::engine::range_copy::CHUNK as u64,
                mode == Mode::Cold,
            ),
            Case::CStream => (18, u64::MAX, false),
            Case::Mmap => (1, 0, false),
            Case::CLoad { direct } => (1, baselines::C_LOAD_SLOT_BYTES, direct),
            Case::Copy => (1, super::engine_case::COPY_BYTES as u64, false),
        }
    }
}

/// One (pattern, mode) block: its plan and the cases compared in it.
pub(super) struct Block<'p> {
    pub plan: &'p Plan,
    pub mode: Mode,
    pub cases: Vec<Case>,
}

/// Every (pattern, mode) block of the benchmark, in run order.
pub(super) fn blocks<'p>(
    args: &IoArgs,
    plans: &'p [Plan],
    modes: &[Mode],
    workers: &[usize],
    fio: bool,
) -> Vec<Block<'p>> {
    let mut blocks = Vec::new();
    for plan in plans {
        for &mode in modes {
            let mut cases = baseline_cases(args, plan, mode, workers, fio);
            sweep_cases(args, plan, mode, workers, fio, &mut cases);
            blocks.push(Block { plan, mode, cases });
        }
    }
    blocks
}

/// Cases that are compared run next to each other in every repetition: first the baselines
/// (and, cold, fio's ceiling configurations).
fn baseline_cases(
    args: &IoArgs,
    plan: &Plan,
    mode: Mode,
    workers: &[usize],
    fio: bool,
) -> Vec<Case> {
    let has = |c: CaseArg| args.cases.contains(&c);
    let mut cases = Vec::new();
    if has(CaseArg::Mmap) {
        cases.push(Case::Mmap);
    }
    if has(CaseArg::CLoad) {
        cases.push(Case::CLoad {
            direct: mode == Mode::Cold,
        });
    }
    if has(CaseArg::CStream) && plan.pattern == Pattern::Expert {
        cases.push(Case::CStream);
    }
    if has(CaseArg::Cat) && plan.pattern == Pattern::Seq {
        cases.push(Case::Cat);
    }
    if has(CaseArg::Copy) && mode == Mode::Hot {
        cases.push(Case::Copy);
    }
    if fio && has(CaseArg::Fio) && mode == Mode::Cold {
        // The disk's ceiling: the best of several fio configurations, not one.
        for c in ceiling_fio(plan.pattern, workers, &args.chunk) {
            cases.push(c);
        }
    }
    cases
}

/// Then per (workers, chunk): fio, then engine, engine-host and io-threads for each direct
/// setting (hot blocks skip direct=on).
fn sweep_cases(
    args: &IoArgs,
    plan: &Plan,
    mode: Mode,
    workers: &[usize],
    fio: bool,
    cases: &mut Vec<Case>,
) {
    let has = |c: CaseArg| args.cases.contains(&c);
    let directs: Vec<bool> = args
        .direct
        .iter()
        .map(|d| *d == OnOff::On)
        .filter(|&d| mode == Mode::Cold || !d)
        .collect();
    for &w in workers {
        if fio && plan.pattern == Pattern::Expert {
            cases.push(Case::Fio {
                workers: w,
                chunk: EXPERT_BYTES,
                aio: None,
            });
        }
        for &c in &args.chunk {
            if fio && plan.pattern == Pattern::Seq {
                cases.push(Case::Fio {
                    workers: w,
                    chunk: c,
                    aio: None,
                });
            }
            for &d in &directs {
                for (arg, host) in [(CaseArg::Engine, false), (CaseArg::EngineHost, true)] {
                    if has(arg) {
                        cases.push(Case::Engine {
                            host,
                            workers: w,
                            chunk: c,
                            direct: d,
                        });
                    }
                }
                if has(CaseArg::IoThreads) {
                    cases.push(Case::Threads {
                        workers: w,
                        chunk: c,
                        direct: d,
                    });
                }
            }
        }
    }
}
