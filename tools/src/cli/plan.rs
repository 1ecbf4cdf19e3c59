//! `ds4 plan`: the memory plan of a run, before any allocation (src/plan/, docs/PLANNER.md).
//! Every device line with its bytes and source, the largest context that fits and the expert
//! cache size. Exit 0 when the plan fits, 1 when it does not (with the first line that does
//! not fit and by how much), 2 for bad input. Also [`for_run`]: the plan `ds4` makes at the
//! start of a run when the backend knows its device memory.

use super::{chain, CliError, CliResult};
use ds4_stream::device::{BackendArg, Device, OpenOptions};
use ds4_stream::engine::EngineConfig;
use ds4_stream::gguf::GgufFile;
use ds4_stream::model::Ds4Model;
use ds4_stream::plan::{self, CacheRequest, ModelSizes, Plan, PlanInput, Platform, Side, Source};
use ds4_stream::units::{group_digits, human_bytes, parse_size};
use std::fmt::Write as _;
use std::io::Write as _;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub model: crate::cli::demo::ModelArgs,
    /// Device memory to plan for (`24GiB`, `80GB` = 80 × 10^9). Without it, the backend's
    /// device is queried (total and free).
    #[arg(long, value_name = "SIZE")]
    pub gpu_mem: Option<String>,
    /// Backend to query for device memory when --gpu-mem is not given.
    #[arg(long, default_value = "auto")]
    pub backend: BackendArg,
    /// Platform: windows adds the ROCm driver reserve and the measured fragmentation headroom
    /// [default: this program's platform].
    #[arg(long, value_parser = super::choice::<Platform>())]
    pub platform: Option<Platform>,
    /// Context length to plan for [default: min(32768, the model's, what fits)].
    #[arg(long)]
    pub ctx: Option<u64>,
    /// Prefill chunk (tokens); the prefill scratch is 2 × this many bytes per context token.
    #[arg(long, default_value_t = 4096)]
    pub prefill_chunk: u64,
    /// Plan a streamed run: only non-routed tensors resident, experts through a cache.
    #[arg(long)]
    pub ssd_streaming: bool,
    /// Expert cache: a number of experts or a budget (`32GB` = 32 GiB here, as in the C
    /// engine's flag) [default: sized by the plan].
    #[arg(long, value_name = "N|SIZE", requires = "ssd_streaming")]
    pub ssd_streaming_cache_experts: Option<String>,
    /// Host RAM tier for experts, as `ds4 --ram-streaming-cache-experts`: a number of experts
    /// or a budget (a host line; not checked against device memory). `--ram-tier` is the old
    /// spelling.
    #[arg(
        long,
        visible_alias = "ram-tier",
        value_name = "N|SIZE",
        requires = "ssd_streaming"
    )]
    pub ram_streaming_cache_experts: Option<String>,
    /// Plan as if this much device memory were already in use (only the budget is lowered;
    /// the C engine also locks host memory for it, this does not).
    #[arg(long, value_name = "SIZE")]
    pub simulate_used_memory: Option<String>,
    /// Print the plan as one JSON object (with max_ctx and cache_experts).
    #[arg(long)]
    pub json: bool,
    /// Measure the fragmentation headroom on the device instead of planning: the largest
    /// single allocation the driver grants next to the free memory it reports (to 2 MiB;
    /// allocates and frees almost all free device memory several times). GPU backends only.
    #[arg(long, conflicts_with = "gpu_mem")]
    pub measure_headroom: bool,
}

fn size(flag: &str, text: &str) -> Result<u64, CliError> {
    parse_size(text).map_err(|e| CliError::bad_input(format!("--{flag}: {e}")))
}

/// Opens the file's header and takes the planner's sizes from its tensor table.
fn model_sizes(path: &std::path::Path) -> Result<ModelSizes, CliError> {
    let (file, model) = Ds4Model::open(path).map_err(|e| CliError::bad_input(chain(&e)))?;
    Ok(sizes(&file, &model))
}

fn sizes(file: &GgufFile, model: &Ds4Model) -> ModelSizes {
    ModelSizes::from_model(model, ModelSizes::ctx_limit_of(file))
}

/// `--ram-streaming-cache-experts N|SIZE` in bytes (N experts of `expert_bytes`, or a budget
/// rounded down to whole experts, as the run does).
fn ram_tier_bytes(flag: Option<&str>, expert_bytes: u64) -> Result<u64, CliError> {
    use ds4_stream::plan::CacheRequest::{Auto, Bytes, Experts};
    let Some(flag) = flag else { return Ok(0) };
    let eb = expert_bytes.max(1);
    match ds4_stream::plan::parse_cache_flag(flag)
        .map_err(|e| CliError::bad_input(format!("--ram-streaming-cache-experts: {e}")))?
    {
        Experts(n) => Ok(n.saturating_mul(eb)),
        Bytes(b) => Ok(b / eb * eb),
        Auto => Ok(0),
    }
}

fn staging_bytes() -> u64 {
    let c = EngineConfig::default();
    (c.slots as u64) * (c.slot_bytes as u64)
}

fn planned(inp: &PlanInput) -> Result<Plan, CliError> {
    plan::plan(inp).map_err(|e| CliError::bad_input(e.to_string()))
}

/// The plan `ds4` makes at the start of a run, before any allocation, on a backend that knows
/// its device memory (`None` on the host backend): default context and prefill chunk, the
/// run's streaming mode and cache flag. Prints its summary on stderr (not with `--json`) and
/// refuses a run whose plan does not fit.
pub(super) fn at_run_start(
    device: &dyn Device,
    (file, model): (&GgufFile, &Ds4Model),
    streaming: bool,
    cache_flag: Option<&str>,
    ram_tier: u64,
    json: bool,
) -> Result<Option<Plan>, CliError> {
    let Ok(Some(mem)) = device.memory_info() else {
        return Ok(None);
    };
    let cache = match cache_flag {
        Some(t) => plan::parse_cache_flag(t).map_err(CliError::bad_input)?,
        None => CacheRequest::Auto,
    };
    let p = planned(&PlanInput {
        device_total: mem.total,
        device_free: Some(mem.free),
        device_source: Source::Measured,
        platform: Platform::current(),
        ctx: None,
        prefill_chunk: 4096,
        streaming,
        cache,
        ram_tier,
        simulate_used: 0,
        staging_bytes: staging_bytes(),
        model: sizes(file, model),
    })?;
    if !json {
        let _ = writeln!(std::io::stderr(), "{}", p.summary());
    }
    if let Some(m) = &p.misfit {
        return Err(CliError::runtime(format!(
            "the plan does not fit: {} (see ds4 plan)",
            m.describe()
        )));
    }
    Ok(Some(p))
}

/// `ds4 plan --measure-headroom`: the probe of [`plan::measure_headroom`] on the device.
fn measure(a: &Args) -> CliResult {
    let dev = a
        .backend
        .open(OpenOptions::default())
        .map_err(|e| CliError::runtime(chain(&e)))?;
    if dev.memory_info().ok().flatten().is_none() {
        return Err(CliError::bad_input(format!(
            "--measure-headroom needs a GPU: the {} backend has no device memory of its own",
            dev.kind().as_str()
        )));
    }
    let p = plan::measure_headroom(dev.as_ref(), 2 << 20)
        .map_err(|e| CliError::runtime(format!("measuring the headroom: {}", chain(&e))))?;
    let text = if a.json {
        let mut v = serde_json::to_value(p)
            .map_err(|e| CliError::runtime(format!("probe to JSON: {e}")))?;
        v["device"] = dev.name().into();
        format!("{v}\n")
    } else {
        format!(
            "{}: {} free; largest single allocation {} ({} attempts, step {}): headroom {}\n",
            dev.name(),
            human_bytes(p.free),
            human_bytes(p.largest),
            p.attempts,
            human_bytes(p.step),
            human_bytes(p.headroom)
        )
    };
    super::out(&text).map(|_| ())
}

pub fn run(a: Args) -> CliResult {
    if a.measure_headroom {
        return measure(&a);
    }
    let path = a.model.path()?;
    let model = model_sizes(&path)?;
    let (total, free, source) = match &a.gpu_mem {
        Some(t) => (size("gpu-mem", t)?, None, Source::Flag),
        None => {
            let dev = a
                .backend
                .open(OpenOptions::default())
                .map_err(|e| CliError::runtime(chain(&e)))?;
            match dev
                .memory_info()
                .map_err(|e| CliError::runtime(chain(&e)))?
            {
                Some(m) => (m.total, Some(m.free), Source::Measured),
                None => {
                    return Err(CliError::bad_input(format!(
                        "no device memory is known on the {} backend: pass --gpu-mem SIZE \
                         for a plan",
                        dev.kind().as_str()
                    )))
                }
            }
        }
    };
    let cache = match &a.ssd_streaming_cache_experts {
        Some(t) => plan::parse_cache_flag(t).map_err(CliError::bad_input)?,
        None => CacheRequest::Auto,
    };
    let inp = PlanInput {
        device_total: total,
        device_free: free,
        device_source: source,
        platform: a.platform.unwrap_or_else(Platform::current),
        ctx: a.ctx,
        prefill_chunk: a.prefill_chunk,
        streaming: a.ssd_streaming,
        cache,
        ram_tier: ram_tier_bytes(a.ram_streaming_cache_experts.as_deref(), model.expert_bytes)?,
        simulate_used: a
            .simulate_used_memory
            .as_deref()
            .map_or(Ok(0), |t| size("simulate-used-memory", t))?,
        staging_bytes: staging_bytes(),
        model,
    };
    let p = planned(&inp)?;
    let text = if a.json {
        let mut v = serde_json::to_value(&p)
            .map_err(|e| CliError::runtime(format!("plan to JSON: {e}")))?;
        v["model"] = path.display().to_string().into();
        format!("{v}\n")
    } else {
        render(&p, &path)
    };
    if !super::out(&text)? {
        return Ok(());
    }
    match &p.misfit {
        None => Ok(()),
        Some(m) => Err(CliError::runtime(format!(
            "the plan does not fit: {} (largest context that fits: {})",
            m.describe(),
            group_digits(p.max_ctx)
        ))),
    }
}

/// The plan as a table.
fn render(p: &Plan, path: &std::path::Path) -> String {
    let mut t = String::new();
    let free = p
        .device_free
        .map(|f| format!(", {} free", human_bytes(f)))
        .unwrap_or_default();
    let _ = writeln!(
        t,
        "plan for {} on {} of device memory ({}{free}), {}, {}",
        path.display(),
        human_bytes(p.device_total),
        p.device_source.as_str(),
        p.platform.as_str(),
        if p.streaming {
            "ssd-streaming"
        } else {
            "resident"
        }
    );
    for side in [Side::Device, Side::Host] {
        let _ = writeln!(
            t,
            "{}:",
            if side == Side::Device {
                "device"
            } else {
                "host (not counted against the device)"
            }
        );
        for l in p.lines.iter().filter(|l| l.side == side) {
            let _ = writeln!(
                t,
                "  {:<28} {:>11}  {:<8} {}",
                l.what,
                human_bytes(l.bytes),
                l.source.as_str(),
                l.note
            );
        }
    }
    let _ = writeln!(
        t,
        "device total: {} of {} ({} left)",
        human_bytes(p.device_used),
        human_bytes(p.device_total),
        human_bytes(p.device_total.saturating_sub(p.device_used))
    );
    let _ = writeln!(
        t,
        "ctx {} (prefill chunk {}); largest context that fits: {}",
        group_digits(p.ctx),
        p.prefill_chunk,
        group_digits(p.max_ctx)
    );
    if p.streaming {
        let _ = writeln!(t, "expert cache: {} experts", group_digits(p.cache_experts));
    }
    let _ = writeln!(
        t,
        "{}",
        match &p.misfit {
            None => "fits".to_string(),
            Some(m) => format!("does not fit: {}", m.describe()),
        }
    );
    t
}
