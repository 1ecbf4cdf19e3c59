//! The two paths the engine replaces, rebuilt as baselines.
//!
//! - `mmap` (the old path): map the whole file with memmap2 and copy each request from the
//!   mapping into the destination on one thread. This is the C engine's fallback that crashed on
//!   Windows ROCm (copying to the device from demand-paged file memory); here the destination is
//!   host memory, so it measures the page-fault-driven read and the copy, not the crash.
//! - `c-load` (the C engine's model-load path): one reader thread, 4 staging buffers of 64 MiB
//!   rotated through a copy thread (the stand-in for async copies with events), pread with
//!   O_DIRECT when aligned (fallback to buffered), each buffer copied to the destination. Reading
//!   the next buffer overlaps the copy of the previous one, as with the C engine's events.

use super::file::DestPtr;
use super::plan::{Plan, Request};
use super::threads::{direct_fraction, io_err, Clock, RunOut};
use super::BenchError;
use crossbeam_channel::bounded;
use ds4_io::{AlignedBuf, FileSource, OpenConfig, Source};
use std::fs::File;
use std::path::Path;

/// Staging buffers of the C engine's load path.
pub const C_LOAD_SLOTS: usize = 4;
/// Bytes per staging buffer of the C engine's load path.
pub const C_LOAD_SLOT_BYTES: u64 = 64 << 20;

/// The old path: copy from a memmap2 mapping of the file.
pub fn run_mmap(path: &Path, plan: &Plan, dest: DestPtr<'_>) -> Result<RunOut, BenchError> {
    let f = File::open(path).map_err(|e| BenchError::Io {
        what: "open for mmap",
        path: path.to_path_buf(),
        offset: 0,
        len: 0,
        source: e,
    })?;
    // SAFETY: the mapping is read-only and the benchmark's file is not modified while it runs
    // (we created it, or `--file` documents that it must stay unchanged); a truncation during the
    // run would SIGBUS, as it would have in the C engine.
    let map = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| BenchError::Io {
        what: "mmap",
        path: path.to_path_buf(),
        offset: 0,
        len: plan.file_len,
        source: e,
    })?;
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
            // SAFETY: one thread; requests were checked to lie inside the destination.
            let d = unsafe { dest.slice_mut(r.dest_off, r.len)? };
            let s = r.file_off as usize;
            d.copy_from_slice(&map[s..s + r.len as usize]);
        }
    }
    let (elapsed, cpu_secs) = clock.stop();
    Ok(RunOut {
        elapsed,
        cpu_secs,
        direct_fraction: None,
    })
}

/// The C engine's load path: 1 reader, 4 x 64 MiB staging buffers, a copy thread.
pub fn run_c_load(
    path: &Path,
    plan: &Plan,
    dest: DestPtr<'_>,
    direct: bool,
) -> Result<RunOut, BenchError> {
    let src = FileSource::open(
        path,
        OpenConfig {
            direct,
            drop_cache: false,
            // The C engine's load path reads O_DIRECT whatever the page cache holds.
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
    let mut h = src.open_handle().map_err(|e| BenchError::Io {
        what: "open handle",
        path: path.to_path_buf(),
        offset: 0,
        len: 0,
        source: e,
    })?;
    let (free_tx, free_rx) = bounded::<AlignedBuf>(C_LOAD_SLOTS);
    for _ in 0..C_LOAD_SLOTS {
        let b = AlignedBuf::new(C_LOAD_SLOT_BYTES as usize, 4096)
            .ok_or_else(|| BenchError::Runtime("cannot allocate 4 x 64 MiB of staging".into()))?;
        let _ = free_tx.send(b);
    }
    let (fill_tx, fill_rx) = bounded::<(AlignedBuf, Request)>(C_LOAD_SLOTS);
    std::thread::scope(|s| {
        let copier_free = free_tx.clone();
        s.spawn(move || {
            for (buf, p) in fill_rx.iter() {
                // SAFETY: within a batch the pieces' destination ranges are disjoint, and only
                // this thread writes the destination.
                if let Ok(d) = unsafe { dest.slice_mut(p.dest_off, p.len) } {
                    d.copy_from_slice(&buf[..p.len as usize]);
                }
                if copier_free.send(buf).is_err() {
                    return;
                }
            }
        });
        let clock = Clock::start();
        let mut result = Ok(());
        'run: for batch in &plan.batches {
            for r in batch {
                for p in r.pieces(C_LOAD_SLOT_BYTES) {
                    let Ok(mut buf) = free_rx.recv() else {
                        result = Err(BenchError::Runtime("copy thread exited".into()));
                        break 'run;
                    };
                    if let Err(e) = h.read_exact_at(&mut buf[..p.len as usize], p.file_off) {
                        result = Err(io_err(path, "read", &p, e));
                        break 'run;
                    }
                    if fill_tx.send((buf, p)).is_err() {
                        result = Err(BenchError::Runtime("copy thread exited".into()));
                        break 'run;
                    }
                }
            }
            // Batch barrier: all 4 buffers back means every copy of this batch is done.
            let mut back = Vec::with_capacity(C_LOAD_SLOTS);
            for _ in 0..C_LOAD_SLOTS {
                match free_rx.recv() {
                    Ok(b) => back.push(b),
                    Err(_) => {
                        result = Err(BenchError::Runtime("copy thread exited".into()));
                        break 'run;
                    }
                }
            }
            for b in back {
                let _ = free_tx.send(b);
            }
        }
        let (elapsed, cpu_secs) = clock.stop();
        drop(fill_tx);
        let st = h.stats();
        result.map(|()| RunOut {
            elapsed,
            direct_fraction: direct_fraction(st.counters.direct_bytes, st.counters.buffered_bytes),
            cpu_secs,
        })
    })
}
