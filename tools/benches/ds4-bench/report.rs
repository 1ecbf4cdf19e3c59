//! Result rows, the ratios between cases, and the three text outputs (table, JSON lines, CSV).
//!
//! Every ratio compares rows of the SAME run (same file, pattern and cold/hot mode):
//! absolute numbers drift on shared machines, ratios much less.
//! - `vs_fio`: against psync fio with the same workers (and chunk, for `seq`); null when fio
//!   did not run with those parameters. `vs_fio_best`: against the fastest fio row of the
//!   pattern/mode, psync or libaio (`fio-aio`); `fio_best` names it.
//! - `vs_mmap`: against the old path (mmap + copy). `vs_c`: against the C engine's path for that
//!   pattern (`c-load` for seq, `c-stream` for expert, `c-load` if c-stream did not run).

use super::plan::Pattern;
use super::size::Size;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Cold or hot page cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Cold,
    Hot,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Cold => "cold",
            Mode::Hot => "hot",
        }
    }
}

/// One measured configuration (median of `reps` repetitions).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    pub machine: String,
    pub case: String,
    pub pattern: Pattern,
    pub mode: Mode,
    /// How the cache state was made: `o_direct`, `fadvise+drop_caches`, `warmed`, ...
    pub cache: String,
    /// Fraction of the file in the page cache just before the (last) timed repetition.
    pub resident_before: Option<f64>,
    pub workers: usize,
    pub chunk: u64,
    /// O_DIRECT asked for.
    pub direct: bool,
    /// Share of bytes (engine: of chunks) really read with O_DIRECT (null where not
    /// applicable: mmap, fio).
    pub direct_fraction: Option<f64>,
    pub bytes: u64,
    pub reps: u32,
    pub secs: f64,
    pub secs_min: f64,
    pub secs_max: f64,
    /// 10^9 bytes per second (median).
    pub gbps: f64,
    /// 2^30 bytes per second (median).
    pub gibps: f64,
    /// CPU seconds used by this process per wall second over all repetitions (null for fio): 1.0 = one core busy. Includes opening handles and starting threads.
    pub cpu_util: Option<f64>,
    pub vs_fio: Option<f64>,
    pub vs_fio_best: Option<f64>,
    /// The fio configuration `vs_fio_best` is against ("fio-aio w=8 chunk=4MiB").
    #[serde(default)]
    pub fio_best: Option<String>,
    pub vs_mmap: Option<f64>,
    pub vs_c: Option<f64>,
    /// Destination bytes compared with the file after the last repetition (0 for fio).
    pub verified_bytes: u64,
    pub file: String,
    pub file_len: u64,
    /// The exact command, for fio rows.
    pub command: Option<String>,
    /// Case-specific figures (the engine's stats: stall time, chunk latency percentiles).
    pub extra: Option<serde_json::Value>,
}

impl Row {
    fn key_matches(&self, other: &Row) -> bool {
        self.pattern == other.pattern && self.mode == other.mode
    }
}

/// Orders rows for reading: pattern, mode, case (fio, engine, engine-host, io-threads, then
/// the baselines), workers, chunk, direct on before off.
pub fn sort_rows(rows: &mut [Row]) {
    const ORDER: [&str; 9] = [
        "fio",
        "fio-aio",
        "engine",
        "engine-host",
        "cat",
        "io-threads",
        "mmap",
        "c-load",
        "c-stream",
    ];
    let rank = |c: &str| ORDER.iter().position(|&o| o == c).unwrap_or(ORDER.len());
    rows.sort_by(|a, b| {
        (a.pattern != Pattern::Seq)
            .cmp(&(b.pattern != Pattern::Seq))
            .then((a.mode != Mode::Cold).cmp(&(b.mode != Mode::Cold)))
            .then(rank(&a.case).cmp(&rank(&b.case)))
            .then(a.workers.cmp(&b.workers))
            .then(a.chunk.cmp(&b.chunk))
            .then(b.direct.cmp(&a.direct))
    });
}

/// Fills the ratio columns of every row from the other rows of the same run.
pub fn compute_ratios(rows: &mut [Row]) {
    let snapshot = rows.to_vec();
    for r in rows.iter_mut() {
        let same: Vec<&Row> = snapshot.iter().filter(|o| o.key_matches(r)).collect();
        let ratio = |o: Option<&&Row>| o.filter(|o| o.gbps > 0.0).map(|o| r.gbps / o.gbps);
        let fio_match = same.iter().find(|o| {
            o.case == "fio"
                && !r.case.starts_with("fio-")
                && o.workers == r.workers
                && (r.pattern == Pattern::Expert || o.chunk == r.chunk)
        });
        let fio_best = same
            .iter()
            .filter(|o| o.case.starts_with("fio"))
            .max_by(|a, b| a.gbps.total_cmp(&b.gbps));
        let mmap = same.iter().find(|o| o.case == "mmap");
        let c = match r.pattern {
            Pattern::Seq => same.iter().find(|o| o.case == "c-load"),
            Pattern::Expert => same
                .iter()
                .find(|o| o.case == "c-stream")
                .or_else(|| same.iter().find(|o| o.case == "c-load")),
        };
        r.vs_fio = ratio(fio_match);
        r.vs_fio_best = ratio(fio_best);
        r.fio_best =
            fio_best.map(|o| format!("{} w={} chunk={}", o.case, o.workers, chunk_text(o.chunk)));
        r.vs_mmap = ratio(mmap);
        r.vs_c = ratio(c);
    }
}

/// A chunk size for display; 0 means "not applicable" (mmap, one job per slice).
pub fn chunk_text(c: u64) -> String {
    if c == 0 {
        "-".into()
    } else {
        Size(c).to_string()
    }
}

fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

/// The human table.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<11} {:<7} {:<4} {:>3} {:>8} {:<6} {:>7} {:>7} {:>5} {:>6} {:>6} {:>6} {:>6}  cache",
        "case",
        "pattern",
        "mode",
        "w",
        "chunk",
        "direct",
        "GB/s",
        "GiB/s",
        "cpu",
        "xfio",
        "xfio*",
        "xmmap",
        "xC"
    );
    for r in rows {
        let direct = match (r.direct, r.direct_fraction) {
            (true, Some(f)) if f < 0.995 => format!("on{:.0}%", f * 100.0),
            (true, _) => "on".to_string(),
            (false, _) => "off".to_string(),
        };
        let _ = writeln!(
            s,
            "{:<11} {:<7} {:<4} {:>3} {:>8} {:<6} {:>7.3} {:>7.3} {:>5} {:>6} {:>6} {:>6} {:>6}  {}{}",
            r.case,
            r.pattern.name(),
            r.mode.name(),
            r.workers,
            chunk_text(r.chunk),
            direct,
            r.gbps,
            r.gibps,
            r.cpu_util.map_or_else(|| "-".into(), |c| format!("{c:.2}")),
            opt(r.vs_fio),
            opt(r.vs_fio_best),
            opt(r.vs_mmap),
            opt(r.vs_c),
            r.cache,
            r.resident_before
                .map_or_else(String::new, |f| format!(" (resident {:.0}%)", f * 100.0)),
        );
    }
    s.push_str(
        "cpu: cores busy (CPU s / wall s); xfio: vs fio with the same workers/chunk; xfio*: vs the best fio row; xmmap: vs mmap+copy; \
         xC: vs the C engine's path (c-load seq, c-stream expert); onN%: O_DIRECT asked, only N% of bytes read that way\n",
    );
    s
}

const CSV_FIELDS: [&str; 26] = [
    "machine",
    "case",
    "pattern",
    "mode",
    "cache",
    "resident_before",
    "workers",
    "chunk",
    "direct",
    "direct_fraction",
    "bytes",
    "reps",
    "secs",
    "secs_min",
    "secs_max",
    "gbps",
    "gibps",
    "cpu_util",
    "vs_fio",
    "vs_fio_best",
    "vs_mmap",
    "vs_c",
    "verified_bytes",
    "file",
    "file_len",
    "command",
];

fn csv_field(v: &serde_json::Value) -> String {
    let s = match v {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

/// CSV with a header line; one line per row, the same fields as the JSON.
pub fn csv(rows: &[Row]) -> String {
    let fields = CSV_FIELDS;
    let mut s = fields.join(",");
    s.push('\n');
    for r in rows {
        let v = serde_json::to_value(r).unwrap_or(serde_json::Value::Null);
        let line: Vec<String> = fields
            .iter()
            .map(|f| csv_field(v.get(*f).unwrap_or(&serde_json::Value::Null)))
            .collect();
        s.push_str(&line.join(","));
        s.push('\n');
    }
    s
}

/// One JSON object per line.
pub fn json_lines(rows: &[Row]) -> Result<String, serde_json::Error> {
    let mut s = String::new();
    for r in rows {
        s.push_str(&serde_json::to_string(r)?);
        s.push('\n');
    }
    Ok(s)
}

#[cfg(test)]
pub(crate) fn sample_row(case: &str, workers: usize, chunk: u64, gbps: f64) -> Row {
    Row {
        machine: "m".into(),
        case: case.into(),
        pattern: Pattern::Seq,
        mode: Mode::Cold,
        cache: "o_direct".into(),
        resident_before: Some(0.0),
        workers,
        chunk,
        direct: true,
        direct_fraction: Some(1.0),
        bytes: 1 << 30,
        reps: 1,
        secs: 1.0,
        secs_min: 1.0,
        secs_max: 1.0,
        gbps,
        gibps: gbps * 1e9 / (1u64 << 30) as f64,
        cpu_util: Some(0.5),
        vs_fio: None,
        vs_fio_best: None,
        fio_best: None,
        vs_mmap: None,
        vs_c: None,
        verified_bytes: 1,
        file: "f".into(),
        file_len: 1 << 30,
        command: None,
        extra: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_match_parameters() {
        let mut rows = vec![
            sample_row("fio", 4, 1 << 20, 2.0),
            sample_row("fio", 4, 4 << 20, 4.0),
            sample_row("mmap", 1, 1 << 20, 0.5),
            sample_row("c-load", 1, 64 << 20, 1.0),
            sample_row("engine", 4, 4 << 20, 3.0),
            sample_row("engine", 8, 4 << 20, 3.0),
        ];
        compute_ratios(&mut rows);
        let e = &rows[4];
        assert_eq!(e.vs_fio, Some(0.75));
        assert_eq!(e.vs_fio_best, Some(0.75));
        assert_eq!(e.vs_mmap, Some(6.0));
        assert_eq!(e.vs_c, Some(3.0));
        assert_eq!(rows[5].vs_fio, None); // no fio with 8 jobs
        let t = table(&rows);
        assert!(t.contains("engine"));
        let c = csv(&rows);
        assert_eq!(c.lines().count(), 7);
        assert!(c.starts_with("machine,case,pattern"));
        let j = json_lines(&rows).unwrap();
        let v: serde_json::Value = serde_json::from_str(j.lines().nth(4).unwrap()).unwrap();
        assert_eq!(v["case"], "engine");
        assert_eq!(v["vs_mmap"], 6.0);
    }

    /// Every heading sits over its own value (issue 21: without a `cpu` heading, every ratio
    /// column sat under the wrong name), checked by column position.
    #[test]
    fn headings_sit_over_their_values() {
        let mut r = sample_row("engine", 4, 4 << 20, 3.0);
        r.cpu_util = Some(0.25);
        r.vs_fio = Some(1.5);
        r.vs_fio_best = Some(0.75);
        r.vs_mmap = Some(6.0);
        r.vs_c = Some(3.0);
        let t = table(&[r]);
        let mut lines = t.lines();
        let (head, row) = (lines.next().unwrap(), lines.next().unwrap());
        // Right-aligned columns: a heading and its value end at the same byte.
        for (heading, value) in [
            ("GiB/s", "2.794"),
            ("cpu", "0.25"),
            ("xfio", "1.50"),
            ("xfio*", "0.75"),
            ("xmmap", "6.00"),
            ("xC", "3.00"),
        ] {
            let h_end = head.find(&format!(" {heading} ")).unwrap() + 1 + heading.len();
            let v_end = row.find(&format!(" {value} ")).unwrap() + 1 + value.len();
            assert_eq!(h_end, v_end, "{heading} over {value}:\n{head}\n{row}");
        }
    }
}
