//! `ds4` with no subcommand: the MoE stack of docs/MOE_STACK.md over a DS4 file's real weights, for
//! a sequence of tokens, resident (every expert read first) or `--ssd-streaming` (experts
//! through a bounded cache, misses read by the engine). Prints throughput, cache and IO
//! figures and the SHA-256 digest of every hidden state (equal for resident and streamed runs).
//!
//! Limits, said in the output too: attention and hyper-connections are not computed (only the
//! MoE half streams, and tokens are independent). Compute runs on the host's reference kernels
//! (`--backend host`) or the GPU kernels (`--backend cuda|hip`, one generic stack: `gpu.rs`).
//! Outputs (report, dump, trace) are in [`report`].

use super::{chain, CliError, CliResult};
use ds4_stream::decode::{
    digest_hex, ExpertProvider, MoeStack, MoeWeights, ResidentExperts, StreamedExperts, TokenTrace,
};
use ds4_stream::device::{BackendArg, BackendKind, Device};
use ds4_stream::engine::{Engine, EngineConfig};
use ds4_stream::expert_cache::PolicyKind;
use ds4_stream::model::Ds4Model;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

mod gpu;
mod host_mem;
mod report;
use crate::cli::files::Output;
use gpu::GpuRunner;
use report::{device_memory, dump_bytes, free_memory, report, trace_text};

/// The main job's flags (also accepted as `ds4 run ...`).
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    pub model: crate::cli::demo::ModelArgs,
    /// Stream the routed experts through a bounded expert cache instead of loading them all.
    #[arg(long)]
    pub ssd_streaming: bool,
    /// Expert cache size: a number of experts, or a byte budget (`32GB`, `512MiB`: floor(bytes /
    /// expert bytes); GB means GiB here, as in the C engine's flag). Default: on a GPU, the
    /// memory plan's size (`ds4 plan`); on the host, a quarter of the routed experts, at most
    /// what a quarter of the available memory holds.
    #[arg(long, value_name = "N|SIZE", requires = "ssd_streaming")]
    pub ssd_streaming_cache_experts: Option<String>,
    /// RAM tier: experts kept in pinned host RAM under the device cache (N experts, or a
    /// budget like 32GB); a device miss that hits it is copied at link speed instead of read
    /// from the file. GPU backends with their own memory; off (with a note) on the host
    /// backend and unified-memory devices, where device memory is RAM.
    #[arg(
        long,
        value_name = "N|SIZE",
        requires = "ssd_streaming",
        conflicts_with = "ssd_streaming_c_engine_pattern"
    )]
    pub ram_streaming_cache_experts: Option<String>,
    /// Cold streaming: unbuffered reads (no page cache), no preload.
    #[arg(long)]
    pub ssd_streaming_cold: bool,
    /// Where preloading learns which experts are hot: a popularity file (`layer expert hits`
    /// per line) or a routing trace written by --record-trace.
    #[arg(long, value_name = "FILE", requires = "ssd_streaming")]
    pub ssd_streaming_popularity: Option<PathBuf>,
    /// Experts read into the cache before the first token, most used first (needs
    /// --ssd-streaming-popularity). Default: min(cache size, 4096).
    #[arg(long, value_name = "N", requires = "ssd_streaming")]
    pub ssd_streaming_preload_experts: Option<usize>,
    /// Keep every expert of the first N layers resident (outside the cache).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        requires = "ssd_streaming"
    )]
    pub ssd_streaming_full_layers: usize,
    /// Speculative lookahead: guess each next layer's experts from this layer's input (the
    /// next router on the current hidden state) and start their reads before computing this
    /// layer. Results do not change. Every backend.
    #[arg(long, requires = "ssd_streaming")]
    pub ssd_streaming_lookahead: bool,
    /// Read misses with the C DS4 engine's streaming pattern, re-implemented for same-run
    /// comparisons: 18 workers, one job per slice (buffered pread, copy, sync, fadvise
    /// DONTNEED), the layer waits for all of them; LRU unless --cache-policy; no hash-layer
    /// prefetch. On the host backend the copy is the copy thread's, plus one memcpy per miss.
    #[arg(
        long,
        requires = "ssd_streaming",
        conflicts_with = "ssd_streaming_lookahead"
    )]
    pub ssd_streaming_c_engine_pattern: bool,
    /// Expert cache policy: lru, lfu-decay, lfu-admit, w-tinylfu, arc or adaptive (default:
    /// adaptive, never far behind the best of the others on the measured traces).
    #[arg(long, requires = "ssd_streaming")]
    pub cache_policy: Option<String>,
    /// Tokens to run when --tokens is not given (a seeded sequence), 1 to 1,000,000.
    #[arg(short = 'n', default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub n_tokens: u64,
    /// Token ids, comma-separated (`171,318,11`).
    #[arg(long, value_delimiter = ',', conflicts_with = "tokens_file")]
    pub tokens: Option<Vec<u64>>,
    /// Token ids from a file (comma- or whitespace-separated).
    #[arg(long)]
    pub tokens_file: Option<PathBuf>,
    /// Seed of the token sequence (without --tokens).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write every hidden state: n_tokens × E little-endian f32, token-major. The file must
    /// not exist (see --force); it appears only when complete.
    #[arg(long)]
    pub dump_hidden: Option<PathBuf>,
    /// Write the routing of every (token, layer) as JSON Lines (one object per line: token,
    /// id, layer, experts, weights; --routing-trace reads it back). The file must not exist
    /// (see --force); it appears only when complete.
    #[arg(long)]
    pub record_trace: Option<PathBuf>,
    /// Let --dump-hidden and --record-trace replace existing files.
    #[arg(long)]
    pub force: bool,
    /// Replay a routing written by --record-trace instead of the router's (for IO studies: the
    /// same experts and weights, token by token; the tokens are the trace's).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["tokens", "tokens_file"])]
    pub routing_trace: Option<PathBuf>,
    /// IO workers, each with its own file handle.
    #[arg(long, default_value_t = 18)]
    pub workers: usize,
    /// Largest single read (= staging slot) of the run, 64KiB to 64MiB in 4 KiB steps; the
    /// staging ring keeps at least 128 MiB. 4MiB (an expert slice is one read) measured best on
    /// the H200, hot and cold; smaller reads spread a layer's misses over more workers but pay
    /// a fixed cost each (docs/BENCHMARKS.md): measure before changing it.
    #[arg(long, value_name = "SIZE", default_value = "4MiB")]
    pub read_chunk: String,
    /// Staged reads (a discrete GPU) go in pieces of this size, each piece's copy issued once
    /// it is read; 0 (the default) = one read and one copy per chunk. A multiple of 4KiB.
    #[arg(long, value_name = "SIZE", default_value = "0")]
    pub copy_piece: String,
    /// Where the MoE stack runs: host (reference kernels), cuda or hip (the GPU kernels, NVRTC /
    /// hipRTC at run time; experts in a device slab the engine reads into), or auto (the first
    /// of cuda, hip, host that opens; without a GPU, host).
    #[arg(long, default_value = "auto")]
    pub backend: BackendArg,
    /// Hold this much device memory for the whole run (GPU backends), so the plan and every
    /// allocation after it see a smaller machine (`24GB`). On a unified-memory device it is
    /// pinned (locked) host memory, as the C engine locks host memory for this flag.
    #[arg(long, value_name = "SIZE")]
    pub simulate_used_memory: Option<String>,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `--simulate-used-memory`: takes that much device memory (None without the flag).
fn simulate_used(
    a: &Args,
    device: &dyn Device,
) -> Result<Option<ds4_stream::device::DeviceBuffer>, CliError> {
    let Some(text) = a.simulate_used_memory.as_deref() else {
        return Ok(None);
    };
    let bad = |why: String| CliError::bad_input(format!("--simulate-used-memory {text:?}: {why}"));
    let n = ds4_stream::units::parse_size(text).map_err(|e| bad(e.to_string()))?;
    if n == 0 {
        return Err(bad("must be more than 0".into()));
    }
    let n = usize::try_from(n).map_err(|_| bad("too large for this machine".into()))?;
    if device.memory_info().ok().flatten().is_none() {
        return Err(bad(format!(
            "needs a GPU backend: the {} backend has no device memory of its own",
            device.kind().as_str()
        )));
    }
    let buf = device.alloc(n).map_err(|e| {
        CliError::runtime(format!(
            "--simulate-used-memory {text}: taking {n} B of device memory failed: {}",
            chain(&e)
        ))
    })?;
    if !a.json {
        let _ = writeln!(
            std::io::stderr(),
            "note: --simulate-used-memory: holding {n} B of {} memory for the run (in the plan's \"in use before the run\")",
            device.name()
        );
    }
    Ok(Some(buf))
}

/// `--read-chunk`: a size, a multiple of 4 KiB, 64 KiB ..= 64 MiB.
fn read_chunk(text: &str) -> Result<usize, CliError> {
    let bad = |why: String| CliError::bad_input(format!("--read-chunk {text:?}: {why}"));
    let n = ds4_stream::units::parse_size(text).map_err(|e| bad(e.to_string()))?;
    if !(64 << 10..=64 << 20).contains(&n) || n % 4096 != 0 {
        return Err(bad("must be a multiple of 4KiB from 64KiB to 64MiB".into()));
    }
    Ok(n as usize)
}

fn parse_ids(text: &str) -> Result<Vec<u64>, CliError> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u64>()
                .map_err(|_| CliError::bad_input(format!("token id {s:?} is not a number")))
        })
        .collect()
}

fn tokens(a: &Args, vocab: u64) -> Result<Vec<u32>, CliError> {
    let ids = match (&a.tokens, &a.tokens_file) {
        (Some(t), _) => t.clone(),
        (None, Some(f)) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| CliError::bad_input(format!("{}: {e}", f.display())))?;
            parse_ids(&text)?
        }
        (None, None) => {
            let mut s = a.seed;
            (0..a.n_tokens)
                .map(|_| {
                    s = ds4_stream::generate::blocks::mix64(s.wrapping_add(0x9e37_79b9_7f4a_7c15));
                    s % vocab
                })
                .collect()
        }
    };
    if ids.is_empty() {
        return Err(CliError::bad_input("no token ids given"));
    }
    ids.iter()
        .map(|&t| {
            if t < vocab {
                Ok(t as u32)
            } else {
                Err(CliError::bad_input(format!(
                    "token id {t} is outside the vocabulary (0..{vocab})"
                )))
            }
        })
        .collect()
}

/// Reads a `--record-trace` file for replay: the token ids and, per token, one routing per
/// layer in order. Anything that does not fit the model is bad input naming the line.
fn read_routing(f: &Path, model: &Ds4Model) -> Result<(Vec<u32>, Vec<Vec<TokenTrace>>), CliError> {
    #[derive(serde::Deserialize)]
    struct Row {
        token: u64,
        id: u64,
        layer: usize,
        experts: Vec<u32>,
        weights: Vec<f32>,
    }
    let text = std::fs::read_to_string(f)
        .map_err(|e| CliError::bad_input(format!("{}: {e}", f.display())))?;
    let (n_layer, x, k) = (
        model.layers.len(),
        model.shape.n_expert,
        model.shape.n_expert_used as usize,
    );
    let mut ids = Vec::new();
    let mut out: Vec<Vec<TokenTrace>> = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let bad =
            |why: String| CliError::bad_input(format!("{} line {}: {why}", f.display(), i + 1));
        let r: Row = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        let expect_token = if r.layer == 0 {
            out.len()
        } else {
            out.len().wrapping_sub(1)
        };
        if r.token as usize != expect_token {
            return Err(bad(format!("token {} out of order", r.token)));
        }
        if r.layer == 0 {
            if r.id >= model.shape.vocab {
                return Err(bad(format!("token id {} outside the vocabulary", r.id)));
            }
            if out.last().is_some_and(|t| t.len() != n_layer) {
                return Err(bad(format!(
                    "the previous token has not all {n_layer} layers"
                )));
            }
            ids.push(r.id as u32);
            out.push(Vec::with_capacity(n_layer));
        }
        let cur = out
            .last_mut()
            .ok_or_else(|| bad("the trace does not start at layer 0".into()))?;
        if r.layer != cur.len() || r.layer >= n_layer {
            return Err(bad(format!(
                "layer {} out of order (model: {n_layer} layers)",
                r.layer
            )));
        }
        if r.experts.len() != k || r.weights.len() != k {
            return Err(bad(format!("{k} experts and {k} weights expected")));
        }
        for (j, &e) in r.experts.iter().enumerate() {
            if u64::from(e) >= x || r.experts[..j].contains(&e) {
                return Err(bad(format!("expert {e} outside 0..{x} or repeated")));
            }
        }
        if r.weights.iter().any(|w| !w.is_finite()) {
            return Err(bad("a weight is not finite".into()));
        }
        cur.push(TokenTrace {
            layer: r.layer,
            experts: r.experts,
            weights: r.weights,
        });
    }
    if ids.is_empty() || out.last().is_some_and(|t| t.len() != n_layer) {
        return Err(CliError::bad_input(format!(
            "{}: no complete token (each token needs all {n_layer} layers)",
            f.display()
        )));
    }
    Ok((ids, out))
}

/// Cache slots from the flag (`32GB` = 32 GiB, as in the C engine: `plan::parse_cache_flag`),
/// else the plan's size when there is a plan (GPU backends), else the host default.
fn cache_slots(
    a: &Args,
    model: &Ds4Model,
    plan: Option<&ds4_stream::plan::Plan>,
) -> Result<(usize, String), CliError> {
    use ds4_stream::plan::CacheRequest::{Bytes, Experts};
    let total = model.n_routed_experts();
    let eb = model.layers.first().map_or(1, |l| l.expert_bytes()).max(1);
    let flag = a.ssd_streaming_cache_experts.as_deref();
    match flag.map(ds4_stream::plan::parse_cache_flag).transpose() {
        Err(e) => return Err(CliError::bad_input(e)),
        Ok(Some(Experts(n))) => {
            return Ok((
                n.min(total) as usize,
                format!("--ssd-streaming-cache-experts {n}"),
            ))
        }
        Ok(Some(Bytes(b))) => {
            return Ok((
                (b / eb).min(total) as usize,
                format!(
                    "budget {} / {eb} B per expert",
                    flag.unwrap_or_default().trim()
                ),
            ))
        }
        _ => {}
    }
    if let Some(p) = plan.filter(|p| p.streaming) {
        return Ok((
            p.cache_experts as usize,
            "the memory plan's size (ds4 plan)".into(),
        ));
    }
    let quarter = total.div_ceil(4);
    let avail = ds4_stream::units::available_memory().unwrap_or(u64::MAX);
    let fits = avail / 4 / eb;
    let n = quarter.min(fits).max(model.shape.n_expert_used);
    Ok((
        n as usize,
        format!("default: min(25% of {total} experts, 25% of available memory)"),
    ))
}

/// `--ram-streaming-cache-experts`: (slots, how), or `None` without the flag or where device
/// memory is RAM already (a note says so).
fn ram_slots(
    a: &Args,
    model: &Ds4Model,
    device: &dyn Device,
) -> Result<Option<(usize, String)>, CliError> {
    use ds4_stream::plan::CacheRequest::{Bytes, Experts};
    let Some(flag) = a.ram_streaming_cache_experts.as_deref() else {
        return Ok(None);
    };
    let total = model.n_routed_experts();
    let eb = model.layers.first().map_or(1, |l| l.expert_bytes()).max(1);
    let (n, how) = match ds4_stream::plan::parse_cache_flag(flag)
        .map_err(|e| CliError::bad_input(format!("--ram-streaming-cache-experts: {e}")))?
    {
        Experts(n) => (n, format!("--ram-streaming-cache-experts {n}")),
        Bytes(b) => (
            b / eb,
            format!("budget {} / {eb} B per expert", flag.trim()),
        ),
        ds4_stream::plan::CacheRequest::Auto => return Ok(None),
    };
    if device.unified_memory() {
        let _ = writeln!(
            std::io::stderr(),
            "note: --ram-streaming-cache-experts is off on {}: its device memory is host RAM already",
            device.name()
        );
        return Ok(None);
    }
    let k = model.shape.n_expert_used;
    if n < k {
        return Err(CliError::bad_input(format!(
            "--ram-streaming-cache-experts {flag}: {n} experts is smaller than one layer's {k}"
        )));
    }
    Ok(Some((n.min(total) as usize, how)))
}

/// The experts to preload: the most used of `--ssd-streaming-popularity` (none without it, or
/// with `--ssd-streaming-cold`).
fn preload_keys(
    a: &Args,
    model: &Ds4Model,
    slots: usize,
) -> Result<Vec<ds4_stream::expert_cache::ExpertKey>, CliError> {
    let Some(f) = a
        .ssd_streaming_popularity
        .as_ref()
        .filter(|_| !a.ssd_streaming_cold)
    else {
        if a.ssd_streaming_preload_experts.is_some_and(|n| n > 0) && !a.ssd_streaming_cold {
            return Err(CliError::bad_input(
                "--ssd-streaming-preload-experts needs --ssd-streaming-popularity FILE",
            ));
        }
        return Ok(Vec::new());
    };
    let text = std::fs::read_to_string(f)
        .map_err(|e| CliError::bad_input(format!("{}: {e}", f.display())))?;
    let what = f.display().to_string();
    let counts = if text.trim_start().starts_with('{') {
        let t = crate::trace::read_record_trace(text.as_bytes())
            .map_err(|e| CliError::bad_input(format!("{what}: {}", chain(&e))))?;
        let mut c: std::collections::HashMap<ds4_stream::expert_cache::ExpertKey, u64> =
            Default::default();
        for k in &t.keys {
            ds4_stream::decode::checked_key(k.layer.into(), k.expert.into(), model)
                .map_err(|e| CliError::bad_input(format!("{what}: {e}")))?;
            *c.entry(*k).or_default() += 1;
        }
        c.into_iter().collect()
    } else {
        ds4_stream::decode::parse_popularity(&text, &what, model)
            .map_err(|e| CliError::bad_input(chain(&e)))?
    };
    let n = a.ssd_streaming_preload_experts.unwrap_or(slots.min(4096));
    Ok(ds4_stream::decode::most_used(
        counts,
        n,
        a.ssd_streaming_full_layers,
    ))
}

/// The stack on the host (reference kernels + an expert provider) or on a GPU.
enum Runner<'a> {
    Host(MoeStack<'a>, Box<dyn ExpertProvider + 'a>),
    Gpu(Box<dyn GpuRunner + 'a>),
}

impl Runner<'_> {
    /// The device allocation steps, measured (GPU runners; empty on the host).
    fn alloc_steps(&self) -> serde_json::Value {
        match self {
            Runner::Host(..) => serde_json::json!([]),
            Runner::Gpu(g) => g.alloc_steps(),
        }
    }

    fn token(
        &mut self,
        t: u32,
        forced: Option<&[TokenTrace]>,
    ) -> Result<(Vec<f32>, Vec<TokenTrace>), ds4_stream::decode::DecodeError> {
        match self {
            Runner::Host(stack, p) => stack.token(t, p.as_mut(), forced),
            Runner::Gpu(g) => g.token(t, forced),
        }
    }
    fn stats(&self) -> ds4_stream::decode::FetchStats {
        match self {
            Runner::Host(_, p) => p.stats(),
            Runner::Gpu(g) => g.stats(),
        }
    }
}

/// What `report` says about the run besides the provider's counters.
struct RunInfo {
    backend: BackendKind,
    secs: f64,
    load_secs: f64,
    slots: usize,
    how: String,
    policy: PolicyKind,
    preloaded: usize,
    full_layers: usize,
    /// The plan's device lines beside the measured allocations (GPU backends).
    mem: Option<serde_json::Value>,
    /// How the RAM tier's size was chosen (with `--ram-streaming-cache-experts`).
    ram_how: Option<String>,
    /// The run's largest read (`--read-chunk`, parsed).
    read_chunk: usize,
}

/// Opens (generating `--demo`'s model first if needed) and runs.
pub fn run(a: Args) -> CliResult {
    // Outputs are created (under temporary names) before any work (the demo model's generation included): an unwritable or existing
    // path fails now, not after the run.
    let output = |f: &Option<PathBuf>, flag: &str| {
        f.as_deref()
            .map(|p| Output::create(p, a.force, &format!("{flag} {}", p.display())))
            .transpose()
    };
    let dump_out = output(&a.dump_hidden, "--dump-hidden")?;
    let trace_out = output(&a.record_trace, "--record-trace")?;
    let path = a.model.path()?;
    let (file, model) = Ds4Model::open(&path).map_err(|e| CliError::bad_input(chain(&e)))?;
    let (ids, replay) = token_ids(&a, &model)?;
    let chunk = read_chunk(&a.read_chunk)?;
    let cfg = engine_config(&a, chunk)?;
    let (device, gpu) = gpu::open_device(a.backend)?;
    let backend = device.kind();
    // Held until the run ends; the plan below sees it as memory in use.
    let _taken = simulate_used(&a, device.as_ref())?;
    let ram = ram_slots(&a, &model, device.as_ref())?;
    let ram_bytes = ram.as_ref().map_or(0, |r| {
        r.0 as u64 * model.layers.first().map_or(0, |l| l.expert_bytes())
    });
    // The memory plan, before any allocation, where the backend knows its device memory.
    let plan = super::plan::at_run_start(
        device.as_ref(),
        (&file, &model),
        a.ssd_streaming,
        a.ssd_streaming_cache_experts.as_deref(),
        ram_bytes,
        a.json,
    )?;
    let (slots, how) = cache_slots(&a, &model, plan.as_ref())?;
    if gpu.is_none() {
        host_mem::check(&file, &model, a.ssd_streaming, slots)?;
    }
    let engine = Engine::open(&path, device, cfg).map_err(|e| CliError::runtime(chain(&e)))?;
    let bad = |e| decode_error(&path, e);
    let weights = MoeWeights::load(&file, &model, &engine).map_err(bad)?;
    let policy = cache_policy(&a, gpu.is_none())?;
    let preload = preload_keys(&a, &model, slots)?;
    let t_load = Instant::now();
    let b = gpu::Build {
        a: &a,
        path: &path,
        engine: &engine,
        model: &model,
        weights: &weights,
        slots,
        policy,
        ram: ram.as_ref().map(|r| r.0),
        preload: &preload,
    };
    let (mut runner, preloaded) = build_runner(gpu, &b).map_err(bad)?;
    let load_secs = t_load.elapsed().as_secs_f64();
    let free_after_load = free_memory(engine.device().as_ref());
    let t0 = Instant::now();
    let decoded = decode_all(&a, &mut runner, &ids, replay.as_deref()).map_err(bad)?;
    let secs = t0.elapsed().as_secs_f64();
    let digest = digest_hex(decoded.hidden.iter().map(|h| h.as_slice()));
    commit_outputs(dump_out, trace_out, &ids, &decoded)?;
    let st = runner.stats();
    let mem = device_memory(
        plan.as_ref(),
        &runner,
        free_after_load,
        free_memory(engine.device().as_ref()),
    );
    let run = RunInfo {
        backend,
        secs,
        load_secs,
        slots,
        how,
        policy,
        preloaded,
        full_layers: a.ssd_streaming_full_layers.min(model.layers.len()),
        mem,
        ram_how: ram.map(|(_, how)| how),
        read_chunk: chunk,
    };
    report(&a, &path, &model, &ids, &run, &st, &digest)
}

/// The engine's configuration for the run, checked (a bad `--workers` is a usage error).
fn engine_config(a: &Args, chunk: usize) -> Result<EngineConfig, CliError> {
    let text = &a.copy_piece;
    let piece = ds4_stream::units::parse_size(text)
        .ok()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| n % 4096 == 0)
        .ok_or_else(|| {
            CliError::bad_input(format!(
                "--copy-piece {text:?}: must be 0 or a multiple of 4KiB"
            ))
        })?;
    let cfg = EngineConfig {
        copy_piece: piece,
        workers: a.workers,
        cold: a.ssd_streaming_cold,
        slot_bytes: chunk,
        // At least the default ring's bytes (128 MiB), so small chunks keep as much in flight.
        slots: ((128usize << 20) / chunk).clamp(32, 2048),
        ..EngineConfig::default()
    };
    cfg.validate()
        .map_err(|e| CliError::bad_input(format!("--workers {}: {}", a.workers, chain(&e))))?;
    Ok(cfg)
}

/// A decode error of the run on `path`: bad input (exit 2) when the file is at fault, else a
/// runtime error.
fn decode_error(path: &Path, e: ds4_stream::decode::DecodeError) -> CliError {
    if e.is_bad_input() {
        CliError::bad_input(format!("{}: {}", path.display(), chain(&e)))
    } else {
        CliError::runtime(chain(&e))
    }
}

/// `--cache-policy` (default LRU with `--ssd-streaming-c-engine-pattern`), and the options the
/// C engine's pattern refuses on the host backend.
fn cache_policy(a: &Args, host: bool) -> Result<PolicyKind, CliError> {
    let policy = match &a.cache_policy {
        Some(p) => p
            .parse::<PolicyKind>()
            .map_err(|e| CliError::bad_input(e.to_string()))?,
        None if a.ssd_streaming_c_engine_pattern => PolicyKind::Lru,
        None => PolicyKind::DEFAULT,
    };
    if a.ssd_streaming_c_engine_pattern
        && host
        && (a.ssd_streaming_full_layers > 0 || a.ssd_streaming_popularity.is_some())
    {
        return Err(CliError::bad_input(
            "--ssd-streaming-c-engine-pattern on the host backend: no --ssd-streaming-full-layers or --ssd-streaming-popularity",
        ));
    }
    Ok(policy)
}

/// Each token's routing, one trace per layer (`--routing-trace`).
type Routing = Vec<Vec<TokenTrace>>;

/// The token ids to run and, with `--routing-trace`, the routing each token is forced to.
fn token_ids(a: &Args, model: &Ds4Model) -> Result<(Vec<u32>, Option<Routing>), CliError> {
    Ok(match &a.routing_trace {
        Some(f) => {
            let (ids, r) = read_routing(f, model)?;
            (ids, Some(r))
        }
        None => (tokens(a, model.shape.vocab)?, None),
    })
}

/// The stack on `gpu` when one opened, else on the host; returns it and how many experts
/// were preloaded.
fn build_runner<'a>(
    gpu: Option<gpu::GpuHandle>,
    b: &gpu::Build<'a, '_>,
) -> Result<(Runner<'a>, usize), ds4_stream::decode::DecodeError> {
    match gpu {
        Some(g) => {
            let (r, n) = gpu::build(g, b)?;
            Ok((Runner::Gpu(r), n))
        }
        None => host_runner(b),
    }
}

/// The stack on the host with its expert provider (the C engine's pattern, the streamed cache,
/// or every expert resident); returns it and how many experts were preloaded.
fn host_runner<'a>(
    b: &gpu::Build<'a, '_>,
) -> Result<(Runner<'a>, usize), ds4_stream::decode::DecodeError> {
    let (a, engine, model) = (b.a, b.engine, b.model);
    let mut preloaded = 0usize;
    let provider: Box<dyn ExpertProvider + 'a> =
        if a.ssd_streaming && a.ssd_streaming_c_engine_pattern {
            Box::new(ds4_stream::decode::c_pattern::CPatternExperts::new(
                b.path,
                model,
                engine.device().clone(),
                b.slots,
                b.policy,
            )?)
        } else if a.ssd_streaming {
            let mut st = StreamedExperts::new(engine, model, b.slots, b.policy)?
                .with_full_layers(a.ssd_streaming_full_layers)?;
            preloaded = st.preload(b.preload)?;
            Box::new(st)
        } else {
            Box::new(ResidentExperts::load(model, engine)?)
        };
    let stack = MoeStack::new(b.weights, engine).with_lookahead(a.ssd_streaming_lookahead);
    Ok((Runner::Host(stack, provider), preloaded))
}

/// Writes `--dump-hidden` and `--record-trace` (created at the start) where asked.
fn commit_outputs(
    dump_out: Option<Output>,
    trace_out: Option<Output>,
    ids: &[u32],
    decoded: &Decoded,
) -> CliResult {
    if let Some(o) = dump_out {
        o.commit(&dump_bytes(&decoded.hidden))?;
    }
    if let Some(o) = trace_out {
        o.commit(trace_text(ids, &decoded.traces).as_bytes())?;
    }
    Ok(())
}

/// The decoded tokens' hidden states and, with `--record-trace`, their routing.
struct Decoded {
    hidden: Vec<Vec<f32>>,
    traces: Vec<Vec<TokenTrace>>,
}

/// Runs every token (forced to `replay`'s routing when given), with a progress line on a
/// terminal.
fn decode_all(
    a: &Args,
    runner: &mut Runner<'_>,
    ids: &[u32],
    replay: Option<&[Vec<TokenTrace>]>,
) -> Result<Decoded, ds4_stream::decode::DecodeError> {
    let mut hidden: Vec<Vec<f32>> = Vec::with_capacity(ids.len());
    let mut traces: Vec<Vec<TokenTrace>> = Vec::new();
    let progress = !a.json && ids.len() > 1 && {
        use std::io::IsTerminal;
        std::io::stderr().is_terminal()
    };
    for (i, &t) in ids.iter().enumerate() {
        let forced = replay.map(|r| r[i].as_slice());
        let (h, tr) = runner.token(t, forced)?;
        hidden.push(h);
        if a.record_trace.is_some() {
            traces.push(tr);
        }
        if progress {
            let _ = write!(std::io::stderr(), "\rtoken {}/{}", i + 1, ids.len());
        }
    }
    if progress {
        let _ = writeln!(std::io::stderr());
    }
    Ok(Decoded { hidden, traces })
}
