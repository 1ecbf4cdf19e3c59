//! The flags of `ds4-bench io` (clap derive) and their value parsers.
//!
//! Sizes are typed (`4GiB`, `32GB`, see [`super::size`]); a bad value is a clap error, so the
//! binary exits 2 with one line naming the flag and the text.

use super::size::parse_size;
use clap::ValueEnum;
use std::path::PathBuf;

/// Which patterns to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PatternArg {
    Seq,
    Expert,
    Both,
}

/// A boolean sweep value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

/// The cases `--cases` can pick.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CaseArg {
    /// The engine, staged: file -> pinned slot -> copy thread -> device memory (swept).
    Engine,
    /// The engine reading straight into host-visible device memory (swept).
    EngineHost,
    /// Raw ds4_io threads, straight into the destination (swept).
    IoThreads,
    /// The old path: memmap2 mapping + copy (on a GPU backend: a blocking copy from the mapping
    /// to device memory, the path that crashed on Windows ROCm).
    Mmap,
    /// The C engine's load path: 1 reader, 4 x 64 MiB staging, copy thread.
    CLoad,
    /// The C engine's streaming path: 18 workers, one job per slice (expert pattern only).
    CStream,
    /// fio with matching parameters, plus (cold) a ceiling set of psync and libaio
    /// configurations (skipped with a note when fio is not on PATH).
    Fio,
    /// `ds4 cat`'s exact path: its engine and request loop (seq pattern only).
    Cat,
    /// The link's ceiling: pinned host memory copied to device memory by the backend (4 × 64 MiB
    /// buffers round robin, the plan's bytes); no file read. The "pinned copy ceiling" on a GPU.
    Copy,
}

fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

fn fio_secs_arg(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.1..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?}: seconds between 0.1 and 3600")),
    }
}

fn chunk_arg(s: &str) -> Result<u64, String> {
    let v = size_arg(s)?;
    if !(4096..=1 << 30).contains(&v) || v % 4096 != 0 {
        return Err(format!(
            "chunk {v} bytes: must be a multiple of 4KiB between 4KiB and 1GiB"
        ));
    }
    Ok(v)
}

fn piece_arg(s: &str) -> Result<u64, String> {
    let v = size_arg(s)?;
    if v % 4096 != 0 || v > 1 << 30 {
        return Err(format!(
            "copy piece {v} bytes: must be 0 or a multiple of 4KiB up to 1GiB"
        ));
    }
    Ok(v)
}

/// Arguments of `ds4-bench io`.
#[derive(clap::Args, Debug)]
pub struct IoArgs {
    /// Read this existing file (never modified). A file written by ds4-bench is checked against
    /// its pattern; any other file against plain positional reads of itself.
    #[arg(long, conflicts_with = "size")]
    pub file: Option<PathBuf>,
    /// Size of the patterned temp file created in --dir when --file is not given (removed at
    /// the end). Units: KiB/MiB/GiB/TiB (1024) or KB/MB/GB/TB (1000). [default: 4GiB]
    #[arg(long, value_parser = size_arg)]
    pub size: Option<u64>,
    /// Directory for the temp file (must not be tmpfs for O_DIRECT and cold runs to mean much).
    #[arg(long, default_value = "/var/tmp")]
    pub dir: PathBuf,
    /// Access pattern: seq (whole file in order), expert (random 7,077,888-byte experts as 3
    /// slices, 6 per token), or both.
    #[arg(long, value_enum, default_value = "both")]
    pub pattern: PatternArg,
    /// Only cold runs (page cache dropped before each repetition; O_DIRECT where swept).
    #[arg(long, conflicts_with = "hot")]
    pub cold: bool,
    /// Only hot runs (file read once into the page cache first). Neither flag: both.
    #[arg(long)]
    pub hot: bool,
    /// Worker counts to sweep (engine and io-threads; fio --numjobs).
    #[arg(long, value_delimiter = ',', default_value = "1,4,8,18",
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers: Vec<u16>,
    /// Chunk sizes to sweep (largest read one worker issues; fio --bs for seq), 4KiB..1GiB.
    #[arg(long, value_delimiter = ',', default_value = "1MiB,4MiB,8MiB", value_parser = chunk_arg)]
    pub chunk: Vec<u64>,
    /// O_DIRECT settings to sweep (hot runs use only `off`).
    #[arg(long, value_delimiter = ',', value_enum, default_value = "on,off")]
    pub direct: Vec<OnOff>,
    /// Bytes read per run (seq: the first TOTAL bytes; expert: TOTAL / 40.5 MiB tokens of 6 experts of
    /// 6.75 MiB, no expert twice). [default: the whole file]
    #[arg(long, value_parser = size_arg)]
    pub total: Option<u64>,
    /// Repetitions per configuration; the median is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub reps: u32,
    /// Destination memory the reads land in (a ring; at most TOTAL is used).
    #[arg(long, default_value = "1GiB", value_parser = size_arg)]
    pub dest: u64,
    /// Cases to run.
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        default_value = "engine,engine-host,io-threads,cat,mmap,c-load,c-stream,fio"
    )]
    pub cases: Vec<CaseArg>,
    /// Seconds each fio run lasts (fio --time_based --runtime).
    #[arg(long, default_value_t = 3.0, value_parser = fio_secs_arg)]
    pub fio_secs: f64,
    /// Staging slots of the engine's ring (slot size = chunk).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub slots: u32,
    /// Staged chunks are read in pieces of this size, each piece's copy issued as soon as it is
    /// read (a multiple of 4KiB; 0 = one read and one copy per chunk). [default: the engine's]
    #[arg(long, value_parser = piece_arg)]
    pub copy_piece: Option<u64>,
    /// Print one JSON object per run on stdout (the table then goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Let --csv and --plot replace existing files.
    #[arg(long)]
    pub force: bool,
    /// Also write the rows as CSV to this file (it must not exist; see --force).
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Write an SVG plot of the sweep (GB/s vs workers, one line per chunk) to this file; a
    /// name ending in .png also writes FILE.svg and renders it with rsvg-convert.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Device backend of the engine cases (and `copy`): host, cuda, hip, or auto (the first
    /// GPU backend present, else host). On a GPU, `engine` is staged (pinned ring + async
    /// copies) and `engine-host` is unified mode (mapped pinned memory the reader fills).
    #[arg(long, default_value = "auto")]
    pub backend: ds4_stream::device::BackendArg,
    /// Machine name written in every row. [default: hostname (N cpus)]
    #[arg(long)]
    pub machine: Option<String>,
    /// Seed of the random expert order.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// No progress output on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Self-test of the byte check: flip one destination byte after each run (must exit 1).
    #[arg(long, hide = true)]
    pub inject_corruption: bool,
}
