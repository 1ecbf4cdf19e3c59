//! `ds4-bench report ROWS.jsonl`: the table, CSV and plot again from saved JSON rows, without
//! measuring anything (to re-render a long run, or to compare runs by concatenating files).
//!
//! Ratios are recomputed from the rows given, so rows of different runs should not be mixed in
//! one file unless that is the point.

use super::report::{self, Row};
use super::BenchError;
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `ds4-bench report`.
#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// JSON lines written by `ds4-bench io --json` (one row object per line).
    pub rows: PathBuf,
    /// Write the rows as CSV to this file.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Write an SVG plot (a .png name also renders it with rsvg-convert).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Let --csv and --plot replace existing files.
    #[arg(long)]
    pub force: bool,
    /// Plot title. [default: the machine and file of the first row]
    #[arg(long)]
    pub title: Option<String>,
}

/// Most rows accepted (a full sweep is a few hundred).
const MAX_ROWS: usize = 100_000;

/// Runs `ds4-bench report`.
pub fn run(args: ReportArgs) -> Result<(), BenchError> {
    let outs = super::io::OutFiles::create(args.csv.as_ref(), args.plot.as_ref(), args.force)?;
    let text = std::fs::read_to_string(&args.rows)
        .map_err(|e| BenchError::BadInput(format!("cannot read {}: {e}", args.rows.display())))?;
    let mut rows: Vec<Row> = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        if rows.len() == MAX_ROWS {
            return Err(BenchError::BadInput(format!(
                "{}: more than {MAX_ROWS} rows",
                args.rows.display()
            )));
        }
        rows.push(serde_json::from_str(line).map_err(|e| {
            BenchError::BadInput(format!(
                "{} line {}: not a ds4-bench row: {e}",
                args.rows.display(),
                i + 1
            ))
        })?);
    }
    if rows.is_empty() {
        return Err(BenchError::BadInput(format!(
            "{} holds no rows",
            args.rows.display()
        )));
    }
    report::sort_rows(&mut rows);
    report::compute_ratios(&mut rows);
    let title = args.title.clone().unwrap_or_else(|| {
        format!(
            "ds4-bench io — {} — {} ({}, {} per run)",
            rows[0].machine,
            rows[0].file,
            ds4_stream::units::human_bytes(rows[0].file_len),
            ds4_stream::units::human_bytes(rows[0].bytes)
        )
    });
    if let Err(e) = std::io::stdout().write_all(report::table(&rows).as_bytes()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(BenchError::Runtime(format!("writing stdout: {e}")));
        }
    }
    outs.write(&rows, &title)
}
