//! `ds4 demo`: the main job on the embedded default. Generates the demo model (a DS4-layout GGUF,
//! deterministic; the one `ds4 --demo` uses, in the user's cache directory) if it is not there
//! yet or not the current generator's, shows its DS4 layout, then streams the routed experts
//! of a run of simulated tokens through the engine into device memory and checks every byte
//! against the generator.
//!
//! Limits, stated in its output too: routing is synthetic (6 distinct experts per layer drawn from
//! a seeded hash, not a router), and there is no expert cache here (every expert of every token
//! is streamed: the raw IO path; `ds4 --ssd-streaming` runs the cache). The device is
//! `--backend` (default auto: a GPU when one opens, which the bytes stream into and are read
//! back from to verify; without one the host backend emulating a discrete GPU with a staging
//! ring and a copy thread, so the numbers show the SSD/page-cache side of the path).

use super::{chain, CliError, CliResult};
use ds4_stream::device::{BackendArg, BackendKind, Device, OpenOptions};
use ds4_stream::engine::{Engine, EngineConfig, ReadRequest};
use ds4_stream::generate::{FillPlan, Generator, Options, Scale, Shape, FILL_KEY};
use ds4_stream::gguf::{GgmlType, GgufFile};
use ds4_stream::model::{Ds4Model, ExpertKind};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A DS4 GGUF written by `ds4 gen-model` (its bytes are verified against the generator)
    /// [default: the demo model in the user's cache directory, `~/.cache/ds4-stream/`,
    /// generated once and shared with `ds4 --demo` and `ds4 plan --demo`].
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// Seed of the synthetic routing (which experts each simulated token reads).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Simulated tokens to stream (each: every layer's 6 experts), 1 to 1,000,000: a count, as
    /// `ds4 -n`. (The hidden alias `tokens` is the old name.)
    #[arg(short = 'n', long = "n-tokens", alias = "tokens", value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=MAX_TOKENS))]
    pub tokens: u64,
    /// IO workers, each with its own file handle (1 to 1024).
    #[arg(long, default_value_t = 18, value_parser = parse_workers)]
    pub workers: usize,
    /// Skip checking the streamed bytes against the generator.
    #[arg(long)]
    pub no_verify: bool,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Device the experts stream to: host (a discrete GPU emulated on the CPU: staging ring +
    /// copy thread), cuda, hip, or auto (the first GPU present, else host).
    #[arg(long, default_value = "auto")]
    pub backend: BackendArg,
    /// Unified mode: the reader fills device memory directly (mapped pinned memory on a GPU,
    /// host-visible memory on the host backend). Default: on for integrated GPUs only.
    #[arg(long)]
    pub unified: bool,
}

/// Most simulated tokens: the run keeps one latency per layer and token.
pub const MAX_TOKENS: u64 = 1_000_000;
/// Largest device buffer for one layer's experts (Flash: 6 x 6.75 MiB = 40.5 MiB): a file that
/// declares more (huge expert_used_count x huge experts) is refused, not allocated.
pub const MAX_LAYER_BATCH: u64 = 4 << 30;

/// `--workers`: 1..=the engine's cap, checked as a usage error (exit 2), not at engine start.
fn parse_workers(s: &str) -> Result<usize, String> {
    let max = ds4_stream::engine::MAX_WORKERS;
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("expected a number of workers in 1..={max}")),
    }
}

/// splitmix64: the synthetic router's hash.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `used` distinct experts of `n` for (token, layer). A bitmap of `n` (at most
/// [`ds4_stream::model::MAX_EXPERTS`]) keeps each draw O(1), so a file declaring thousands of used
/// experts costs milliseconds, not a quadratic scan.
fn route(seed: u64, token: u64, layer: u64, n: u64, used: u64) -> Vec<u64> {
    let want = used.min(n) as usize;
    let mut taken = vec![false; n as usize];
    let mut out = Vec::with_capacity(want);
    let mut i = 0u64;
    while out.len() < want {
        let e = mix(seed ^ mix(token << 20 ^ layer << 8 ^ i)) % n;
        if let Some(t) = taken.get_mut(e as usize).filter(|t| !**t) {
            *t = true;
            out.push(e);
        }
        i += 1;
    }
    out
}

/// Writes the demo model (scale demo, seed 0) to `path`, creating its directory.
fn generate_demo_model(path: &std::path::Path) -> CliResult {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            CliError::runtime(format!("cannot create directory {}: {e}", dir.display()))
        })?;
    }
    // Progress note, not an error; a failing stderr must not stop the demo.
    let _ = writeln!(
        std::io::stderr(),
        "generating the demo model at {} ...",
        path.display()
    );
    super::gen_model::check_out(path, false)?;
    super::gen_model::write(path, &demo_options(0))
}

fn demo_options(seed: u64) -> Options {
    Options {
        scale: Scale::Demo,
        seed,
        ..Options::default()
    }
}

/// Whether `path` is the demo model this generator writes: its length and its header (every
/// metadata key, the tokenizer included, and every tensor offset) are the ones it would write
/// now. A file from an older generator (e.g. before the C engine's special tokens, issue 17) or
/// a damaged one is not, and `--demo` writes it again instead of using it.
fn demo_is_current(path: &std::path::Path) -> bool {
    let opts = demo_options(0);
    let Ok(layout) = opts
        .shape()
        .and_then(|shape| ds4_stream::generate::plan_layout(&shape, 0, &opts.fill_plan()))
    else {
        return false;
    };
    let want = layout.header_bytes();
    let mut got = vec![0u8; want.len()];
    let read = std::fs::File::open(path).and_then(|mut f| {
        let len = f.metadata()?.len();
        std::io::Read::read_exact(&mut f, &mut got)?;
        Ok(len)
    });
    matches!(read, Ok(len) if len == layout.total_len && got == want)
}

/// The generator that wrote `file` (scale, seed and quant from its `ds4stream.gen.*` keys and
/// routed types), checked against the file's routed tensors, and the fill plan it was written
/// with (which parts are holes; files written before the plan was recorded were full).
fn generator_for(file: &GgufFile, model: &Ds4Model) -> Result<(Generator, FillPlan), String> {
    let seed = file
        .get("ds4stream.gen.seed")
        .and_then(|v| v.as_u64())
        .ok_or("no ds4stream.gen.seed key: not written by `ds4 gen-model`")?;
    let scale = match file.get("ds4stream.gen.shape").and_then(|v| v.as_str()) {
        Some("tiny") => Scale::Tiny,
        Some("demo") => Scale::Demo,
        Some("flash") => Scale::Flash,
        other => return Err(format!("unknown ds4stream.gen.shape {other:?}")),
    };
    let mut shape = Shape::for_scale(scale);
    if model
        .layers
        .first()
        .map(|l| l.routed(ExpertKind::Down).tensor.ggml_type)
        == Some(GgmlType::Q4_K)
    {
        shape = shape.with_q4k();
    }
    let g = Generator::new(&shape, seed).map_err(|e| chain(&e))?;
    for layer in &model.layers {
        for kind in [ExpertKind::Gate, ExpertKind::Up, ExpertKind::Down] {
            let t = &layer.routed(kind).tensor;
            if g.tensor_len(&t.name).ok() != Some(t.nbytes) {
                return Err(format!("tensor {} does not match the generator's", t.name));
            }
        }
    }
    let plan = match file.get(FILL_KEY) {
        None => FillPlan::full(),
        Some(v) => {
            let spec = v
                .as_str()
                .ok_or_else(|| format!("{FILL_KEY} is {}, not a string", v.type_name()))?;
            FillPlan::from_spec(spec).map_err(|e| format!("{FILL_KEY}: {e}"))?
        }
    };
    Ok((g, plan))
}

pub fn run(a: Args) -> CliResult {
    let path = &match &a.model {
        Some(m) => model_path(false, m)?,
        None => model_path(true, std::path::Path::new(""))?,
    };
    let (model, generator) = open_model(path, a.no_verify)?;
    // A closed stdout (`ds4 demo | head -3`) is success: stop there, as `head` asked.
    if !a.json && !super::out(&format!("{}\n", model.summary_text()))? {
        return Ok(());
    }
    let device = open_device(&a)?;
    let cfg = EngineConfig {
        workers: a.workers,
        ..EngineConfig::default()
    };
    let engine =
        Engine::open(path, Arc::clone(&device), cfg).map_err(|e| CliError::runtime(chain(&e)))?;
    let layer_bytes = layer_batch_bytes(&model, path)?;
    let dst = Arc::new(
        device
            .alloc(layer_bytes)
            .map_err(|e| CliError::runtime(chain(&e)))?,
    );
    let mut s = Streaming {
        model: &model,
        device: device.as_ref(),
        engine: &engine,
        dst: &dst,
        verify: generator.as_ref(),
        check: Vec::new(),
        want: Vec::new(),
        tally: Tally::default(),
    };
    for t in 0..a.tokens {
        for l in 0..model.layers.len() as u64 {
            s.stream_layer(a.seed, t, l)?;
        }
    }
    let tally = s.tally;
    let stats = engine.stats();
    drop(engine);
    let result = DemoResult {
        path,
        model: &model,
        device: device.as_ref(),
        verified_run: generator.is_some(),
        tally,
        stats,
    };
    result.print(&a)
}

/// The generator that wrote a demo file and the fill plan it was written with.
type Verifier = (Generator, FillPlan);

/// Opens `path` as a DS4 model and, unless `no_verify`, the generator its bytes are checked
/// against.
fn open_model(
    path: &std::path::Path,
    no_verify: bool,
) -> Result<(Ds4Model, Option<Verifier>), CliError> {
    // Malformed, unopenable or not DS4: 2; an IO error while reading the header: 1.
    let (file, model) = Ds4Model::open(path).map_err(|e| match e.is_bad_input() {
        true => CliError::bad_input(chain(&e)),
        false => CliError::runtime(chain(&e)),
    })?;
    let generator = generator_for(&file, &model).map_err(|m| {
        CliError::bad_input(format!(
            "{}: {m}; the demo verifies bytes against `ds4 gen-model`'s generator (delete the \
             file to regenerate the demo model, or pass --no-verify)",
            path.display()
        ))
    });
    let generator = match (generator, no_verify) {
        (_, true) => None,
        (Ok(g), false) => Some(g),
        (Err(e), false) => return Err(e),
    };
    Ok((model, generator))
}

/// A GPU: unified when it is integrated or --unified forces it. The host backend (asked for,
/// or `auto`'s fallback): a discrete-GPU emulation unless --unified, so every byte goes
/// through the pinned staging ring and the copy thread.
fn open_device(a: &Args) -> Result<Arc<dyn Device>, CliError> {
    let unified = a.unified.then_some(true);
    a.backend
        .open(OpenOptions {
            ordinal: 0,
            unified,
            host_unified: Some(a.unified),
        })
        .map_err(|e| CliError::runtime(super::chain(&e)))
}

/// One layer's worth of expert slots on the device: `used` experts x 3 tensors, sized for the
/// largest layer (routed types may differ between layers), at most [`MAX_LAYER_BATCH`].
fn layer_batch_bytes(model: &Ds4Model, path: &std::path::Path) -> Result<usize, CliError> {
    let used = model.shape.n_expert_used;
    let max_expert = model
        .layers
        .iter()
        .map(|l| l.expert_bytes())
        .max()
        .unwrap_or(0);
    max_expert
        .checked_mul(used)
        .filter(|&b| b <= MAX_LAYER_BATCH)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| {
            CliError::bad_input(format!(
                "{}: {used} experts of {max_expert} bytes per layer exceed the demo's limit of \
                 {MAX_LAYER_BATCH} bytes per layer",
                path.display()
            ))
        })
}

/// What the run streamed: IO time, one fetch latency per layer and token, bytes.
#[derive(Default)]
struct Tally {
    io_time: Duration,
    fetch_us: Vec<u64>,
    streamed: u64,
    verified: u64,
}

/// One expert slice placed in the layer buffer.
struct Placed {
    name: String,
    expert: u64,
    len: u64,
    at: usize,
}

/// The streaming loop's state: the engine, the device buffer and the verify scratch.
struct Streaming<'a> {
    model: &'a Ds4Model,
    device: &'a dyn Device,
    engine: &'a Engine,
    dst: &'a Arc<ds4_stream::device::DeviceBuffer>,
    verify: Option<&'a Verifier>,
    check: Vec<u8>,
    want: Vec<u8>,
    tally: Tally,
}

impl Streaming<'_> {
    /// Streams layer `l`'s routed experts for token `t` in one batch, then verifies them.
    fn stream_layer(&mut self, seed: u64, t: u64, l: u64) -> CliResult {
        let model = self.model;
        let layer = model.layer(l).map_err(|e| CliError::runtime(chain(&e)))?;
        let experts = route(seed, t, l, model.shape.n_expert, model.shape.n_expert_used);
        let mut reqs = Vec::with_capacity(experts.len() * 3);
        let mut placed = Vec::with_capacity(experts.len() * 3);
        let mut at = 0usize;
        for &e in &experts {
            for kind in [ExpertKind::Gate, ExpertKind::Up, ExpertKind::Down] {
                let s = layer
                    .routed(kind)
                    .slice(e)
                    .map_err(|e| CliError::runtime(chain(&e)))?;
                let name = kind.tensor_name(l as u32);
                reqs.push(
                    ReadRequest::new(s.offset, s.len as usize, Arc::clone(self.dst), at)
                        .with_label(format!("{name} expert {e}")),
                );
                placed.push(Placed {
                    name,
                    expert: e,
                    len: s.len,
                    at,
                });
                at += s.len as usize;
            }
        }
        let start = Instant::now();
        self.engine
            .submit(reqs)
            .and_then(|tk| tk.wait())
            .map_err(|e| CliError::runtime(chain(&e)))?;
        let took = start.elapsed();
        self.tally.io_time += took;
        self.tally.fetch_us.push(took.as_micros() as u64);
        self.tally.streamed += at as u64;
        if let Some(verify) = self.verify {
            self.verify_layer(verify, placed)?;
        }
        Ok(())
    }

    /// Reads each placed slice back from the device and checks it against what the file holds.
    fn verify_layer(&mut self, (generator, plan): &Verifier, placed: Vec<Placed>) -> CliResult {
        for p in placed {
            let len = p.len as usize;
            self.check.resize(len, 0);
            self.want.resize(len, 0);
            self.device
                .read_d2h(self.dst, p.at, &mut self.check)
                .map_err(|e| CliError::runtime(chain(&e)))?;
            // What the file holds: generator bytes, or zeros where it has holes.
            plan.file_bytes(generator, &p.name, p.expert * len as u64, &mut self.want)
                .map_err(|e| CliError::runtime(chain(&e)))?;
            if self.check != self.want {
                let i = self.check.iter().zip(&self.want).position(|(x, y)| x != y);
                return Err(CliError::runtime(format!(
                    "{} expert {}: streamed bytes differ from the generator at byte {}",
                    p.name,
                    p.expert,
                    i.unwrap_or(0)
                )));
            }
            self.tally.verified += len as u64;
        }
        Ok(())
    }
}

/// The run's outcome, printed as text or JSON.
struct DemoResult<'a> {
    path: &'a std::path::Path,
    model: &'a Ds4Model,
    device: &'a dyn Device,
    verified_run: bool,
    tally: Tally,
    stats: ds4_stream::engine::StatsSnapshot,
}

impl DemoResult<'_> {
    fn print(mut self, a: &Args) -> CliResult {
        let layers = self.model.layers.len() as u64;
        let used = self.model.shape.n_expert_used;
        let fetch_us = &mut self.tally.fetch_us;
        fetch_us.sort_unstable();
        let fetch_us = &*fetch_us;
        let pct = |p: f64| -> u64 {
            if fetch_us.is_empty() {
                return 0;
            }
            fetch_us[((fetch_us.len() - 1) as f64 * p).round() as usize]
        };
        let streamed = self.tally.streamed;
        let verified = self.tally.verified;
        let stats = &self.stats;
        let device = self.device;
        let secs = self.tally.io_time.as_secs_f64().max(1e-9);
        let gbps = streamed as f64 / secs / 1e9;
        let mib_per_token = streamed as f64 / a.tokens.max(1) as f64 / (1 << 20) as f64;
        if a.json {
            let v = serde_json::json!({
                "model": self.path.display().to_string(),
                "device": device.name(),
                "tokens": a.tokens,
                "layers": layers,
                "experts_per_layer": used,
                "bytes_streamed": streamed,
                "bytes_verified": verified,
                "io_seconds": secs,
                "gb_per_s": gbps,
                "mib_per_token": mib_per_token,
                "layer_fetch_us": {"p50": pct(0.5), "p99": pct(0.99), "max": pct(1.0)},
                "engine": stats,
            });
            super::out(&format!("{v}\n"))?;
            return Ok(());
        }
        let mut t = String::new();
        let _ = writeln!(
            t,
            "streamed {} tokens x {layers} layers x {used} experts: {:.1} MiB in {:.3} s of IO \
             = {gbps:.2} GB/s, {mib_per_token:.1} MiB/token",
            a.tokens,
            streamed as f64 / (1 << 20) as f64,
            secs
        );
        let _ = writeln!(
            t,
            "layer fetch ({used} experts x 3 slices, one batch): p50 {} us, p99 {} us, max {} \
             us; staging stalls {} us total",
            pct(0.5),
            pct(0.99),
            pct(1.0),
            stats.stall_total_us
        );
        if !self.verified_run {
            t.push_str("bytes not verified (--no-verify)\n");
        } else {
            let _ = writeln!(
                t,
                "verified {verified} bytes against the generator: all correct"
            );
        }
        let mode = match (device.kind(), device.unified_memory()) {
            (BackendKind::Host, false) => "the host backend emulating a discrete GPU",
            (BackendKind::Host, true) => "the host backend reading straight into memory",
            (_, false) => "staged: pinned ring + async copies",
            (_, true) => "unified: the reader fills mapped device memory",
        };
        let _ = writeln!(
            t,
            "note: synthetic routing, no expert cache (every expert streamed; `ds4 \
             --ssd-streaming` runs the expert cache); device: {} ({mode})",
            device.name()
        );
        super::out(&t)?;
        Ok(())
    }
}

/// Where `--demo` keeps its model: the user's cache directory.
fn demo_path() -> Result<PathBuf, CliError> {
    let base = if cfg!(windows) {
        std::env::var_os("LOCALAPPDATA").map(PathBuf::from)
    } else {
        std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
    };
    let base = base.ok_or_else(|| {
        CliError::runtime(
            "no cache directory (set XDG_CACHE_HOME or HOME; LOCALAPPDATA on Windows)",
        )
    })?;
    Ok(base.join("ds4-stream").join("ds4-demo.gguf"))
}

/// `-m/--model FILE` or `--demo`: the model a command works on (the main run, `ds4 plan`).
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// DS4 GGUF file.
    #[arg(
        short = 'm',
        long = "model",
        default_value = "ds4flash.gguf",
        conflicts_with = "demo"
    )]
    pub model: PathBuf,
    /// Use the demo model (generated once into the user's cache directory, then reused).
    #[arg(long)]
    pub demo: bool,
}

impl ModelArgs {
    /// The model file: `-m FILE`, or with `--demo` the demo model (generated first if
    /// missing).
    pub fn path(&self) -> Result<PathBuf, CliError> {
        model_path(self.demo, &self.model)
    }
}

fn model_path(demo: bool, model: &std::path::Path) -> Result<PathBuf, CliError> {
    let path = if demo {
        let p = demo_path()?;
        if p.exists() && !demo_is_current(&p) {
            let _ = writeln!(
                std::io::stderr(),
                "note: {} is not the demo model this generator writes (an older version's, or \
                 damaged); writing it again",
                p.display()
            );
            std::fs::remove_file(&p).map_err(|e| {
                CliError::runtime(format!("cannot remove the old {}: {e}", p.display()))
            })?;
        }
        if !p.exists() {
            generate_demo_model(&p)?;
        }
        p
    } else {
        model.to_path_buf()
    };
    if !path.exists() {
        return Err(CliError::bad_input(format!(
            "{}: no such file; pass -m FILE with a DS4 Flash GGUF (ds4flash.gguf, 81 GiB), or \
             --demo to run on the generated demo model",
            path.display()
        )));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::{demo_is_current, demo_options, route};

    /// A cached demo model is used only when its header and length are what the generator
    /// writes now; an older generator's file (another tokenizer) is written again.
    #[test]
    fn demo_is_current_compares_header_and_length() {
        let opts = demo_options(0);
        let layout =
            ds4_stream::generate::plan_layout(&opts.shape().unwrap(), 0, &opts.fill_plan())
                .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ds4-demo.gguf");
        assert!(!demo_is_current(&p), "missing");
        // The header, then holes to the full length: the check reads no tensor bytes.
        let write = |header: &[u8], len: u64| {
            std::fs::write(&p, header).unwrap();
            std::fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .unwrap()
                .set_len(len)
                .unwrap();
        };
        let header = layout.header_bytes().to_vec();
        write(&header, layout.total_len);
        assert!(demo_is_current(&p));
        write(&header, layout.total_len - 1);
        assert!(!demo_is_current(&p), "short");
        // Another first token text (the old generator's was `<|begin_of_sentence|>`).
        let bos = ds4_stream::generate::SPECIAL_TOKENS[0].as_bytes();
        let at = header.windows(bos.len()).position(|w| w == bos).unwrap();
        let mut old = header.clone();
        old[at + 1] ^= 1;
        write(&old, layout.total_len);
        assert!(!demo_is_current(&p), "another tokenizer");
        std::fs::write(&p, b"GGUF").unwrap();
        assert!(!demo_is_current(&p), "damaged");
    }

    #[test]
    fn route_gives_distinct_in_range_experts() {
        for t in 0..50 {
            let r = route(3, t, 7, 16, 6);
            assert_eq!(r.len(), 6);
            assert!(r.iter().all(|&e| e < 16));
            let mut s = r.clone();
            s.sort_unstable();
            s.dedup();
            assert_eq!(s.len(), 6);
        }
        assert_eq!(route(1, 0, 0, 4, 6).len(), 4);
    }
}
