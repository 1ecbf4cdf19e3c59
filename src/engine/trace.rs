//! An optional per-chunk timeline of the staged path (`DS4_STAGE_TRACE=PREFIX`), for finding
//! where a batch's time goes when the histograms (`stats.rs`) only say how long each stage took.
//!
//! Off unless the variable is set: then every staged chunk's stage times (slot taken, read
//! started, read ended, copy queued, copy handed to the completion thread, its
//! event seen over, completion seen by the engine) and every request's chunk count, submit and
//! finish times are kept in memory (one small record each) and written when the engine is dropped, as
//! JSON lines to `PREFIX.<pid>.<n>.jsonl` (`n` counts the engines of the process). Times are
//! microseconds since the first engine of the process opened, so several engines' files line
//! up. The file is created new: an existing one is never overwritten (the trace is skipped with
//! a one-line note on stderr instead). `docs/bench/stage-trace.py` summarises a file.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// The environment variable naming the trace files' prefix.
pub const TRACE_ENV: &str = "DS4_STAGE_TRACE";

/// Records kept at most per engine (80 bytes each: at most 80 MiB); later ones are counted in
/// a closing `{"dropped":N}` line, not kept.
const MAX_RECORDS: usize = 1 << 20;

static EPOCH: OnceLock<Instant> = OnceLock::new();
static ENGINES: AtomicU64 = AtomicU64::new(0);

fn us(t: Instant) -> u64 {
    let e = *EPOCH.get_or_init(Instant::now);
    u64::try_from(t.saturating_duration_since(e).as_micros()).unwrap_or(u64::MAX)
}

/// One staged chunk's stage times.
pub(crate) struct ChunkTimes {
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) taken: Instant,
    pub(crate) started: Instant,
    /// Time inside the copy calls (part of `started..issued`).
    pub(crate) issue: Duration,
    pub(crate) issued: Instant,
    /// When the copy's event went to the device's completion thread (after the copy thread, or
    /// the reader, issued it) and when that thread saw it over; where the backend keeps them.
    pub(crate) handed: Option<Instant>,
    pub(crate) seen: Option<Instant>,
    pub(crate) done: Instant,
}

/// "No time" in a record.
const NONE: u64 = u64::MAX;

enum Rec {
    Chunk([u64; 9]),
    Request([u64; 3]),
}

/// The trace of one engine: `None` inside when tracing is off (then every call is one branch).
pub(crate) struct StageTrace {
    on: Option<(PathBuf, Mutex<Vec<Rec>>)>,
    dropped: AtomicU64,
}

impl StageTrace {
    /// Tracing as `DS4_STAGE_TRACE` says.
    pub(crate) fn from_env() -> Self {
        let on = std::env::var_os(TRACE_ENV)
            .filter(|v| !v.is_empty())
            .map(|prefix| {
                let _ = us(Instant::now()); // the epoch: the first engine's opening
                crate::device::stamp_copy_times();
                let n = ENGINES.fetch_add(1, Ordering::Relaxed);
                let mut name = prefix;
                name.push(format!(".{}.{n}.jsonl", std::process::id()));
                (PathBuf::from(name), Mutex::new(Vec::new()))
            });
        Self {
            on,
            dropped: AtomicU64::new(0),
        }
    }

    fn push(&self, r: Rec) {
        if let Some((_, v)) = &self.on {
            let mut v = v.lock().unwrap_or_else(PoisonError::into_inner);
            if v.len() < MAX_RECORDS {
                v.push(r);
            } else {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn on(&self) -> bool {
        self.on.is_some()
    }

    pub(crate) fn chunk(&self, c: &ChunkTimes) {
        if self.on() {
            let read_end = c.issued.checked_sub(c.issue).unwrap_or(c.issued);
            self.push(Rec::Chunk([
                c.offset,
                c.len,
                us(c.taken),
                us(c.started),
                us(read_end),
                us(c.issued),
                c.handed.map_or(NONE, us),
                c.seen.map_or(NONE, us),
                us(c.done),
            ]));
        }
    }

    /// A request of `chunks` chunks submitted at `started` finished now.
    pub(crate) fn request(&self, started: Instant, chunks: u64) {
        if self.on() {
            self.push(Rec::Request([chunks, us(started), us(Instant::now())]));
        }
    }

    fn write(path: &PathBuf, recs: &[Rec], dropped: u64) -> std::io::Result<()> {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)?;
        let mut w = std::io::BufWriter::new(f);
        for r in recs {
            match r {
                Rec::Chunk([o, l, t, s, re, i, h, g, d]) => {
                    let opt = |v: &u64| match *v {
                        NONE => "null".to_string(),
                        v => v.to_string(),
                    };
                    let (h, g) = (opt(h), opt(g));
                    writeln!(
                        w,
                        r#"{{"chunk":{o},"len":{l},"taken":{t},"started":{s},"read_end":{re},"issued":{i},"handed":{h},"seen":{g},"done":{d}}}"#
                    )?
                }
                Rec::Request([n, s, e]) => {
                    writeln!(w, r#"{{"request":{n},"submitted":{s},"finished":{e}}}"#)?
                }
            }
        }
        if dropped > 0 {
            writeln!(w, r#"{{"dropped":{dropped}}}"#)?;
        }
        w.flush()
    }
}

impl Drop for StageTrace {
    fn drop(&mut self) {
        if let Some((path, v)) = self.on.take() {
            let recs = v.into_inner().unwrap_or_else(PoisonError::into_inner);
            let dropped = *self.dropped.get_mut();
            if let Err(e) = Self::write(&path, &recs, dropped) {
                eprintln!(
                    "ds4-stream: {TRACE_ENV}: cannot write {}: {e}",
                    path.display()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Files: Miri's isolation has no file system (CI's miri step runs `engine::`).
    #[test]
    #[cfg_attr(miri, ignore)]
    fn off_records_nothing_and_on_writes_new_files_only() {
        let off = StageTrace {
            on: None,
            dropped: AtomicU64::new(0),
        };
        off.request(Instant::now(), 1);
        assert!(!off.on());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let t0 = Instant::now();
        let on = StageTrace {
            on: Some((path.clone(), Mutex::new(Vec::new()))),
            dropped: AtomicU64::new(0),
        };
        on.chunk(&ChunkTimes {
            offset: 4096,
            len: 10,
            taken: t0,
            started: t0,
            issue: Duration::from_micros(5),
            issued: t0 + Duration::from_micros(50),
            handed: None,
            seen: Some(t0 + Duration::from_micros(80)),
            done: t0 + Duration::from_micros(90),
        });
        on.request(t0, 10);
        drop(on);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["chunk"], 4096);
        let (s, re, i, d) = (
            lines[0]["started"].as_u64().unwrap(),
            lines[0]["read_end"].as_u64().unwrap(),
            lines[0]["issued"].as_u64().unwrap(),
            lines[0]["done"].as_u64().unwrap(),
        );
        assert!(s <= re && re + 5 == i && i + 40 == d, "{s} {re} {i} {d}");
        assert!(lines[0]["handed"].is_null());
        assert_eq!(lines[0]["seen"].as_u64().unwrap() + 10, d);
        assert_eq!(lines[1]["request"], 10);
        // An existing file is left alone.
        let again = StageTrace {
            on: Some((path.clone(), Mutex::new(vec![Rec::Request([1, 2, 3])]))),
            dropped: AtomicU64::new(0),
        };
        drop(again);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }
}
