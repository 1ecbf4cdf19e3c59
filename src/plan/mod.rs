//! The memory planner: what a run will put in device memory, line by line, derived before any
//! allocation instead of found by trial. Pure arithmetic: the inputs are the device's memory
//! (queried or `--gpu-mem`), the platform, the context and prefill chunk, the streaming mode and
//! cache flag, and the model's tensor table ([`ModelSizes`]); the output is a [`Plan`] of
//! [`Line`]s, each with its bytes and where the number comes from ([`Source`]), plus the largest
//! context that fits (`max_ctx`), the expert-cache size (`cache_experts`), and, when the plan
//! does not fit, the first line that does not and by how much.
//!
//! Device lines, in the order the plan checks them: memory in use before the run (measured),
//! simulated used memory (flag), the platform reserve, resident weights, the Q8→F16 cache
//! (resident mode: a fixed line), the fragmentation headroom, a flag-sized expert cache, the KV
//! cache with its prefill scratch; when streaming, then the Q8→F16 cache (what exceeds the
//! 16 GiB it leaves free) and the auto-sized expert cache. Host lines (the staging ring, the
//! RAM tier) are reported but not checked against device memory. docs/PLANNER.md explains
//! every line and derives the numbers in [`rules`].

mod lines;
pub mod probe;
pub mod rules;
#[cfg(test)]
mod tests;

pub use probe::{measure_headroom, HeadroomProbe};
pub use rules::{parse_cache_flag, CacheRequest, ModelSizes};

use crate::units::human_bytes;
use lines::{cache_line, fixed_lines, host_lines, line};

/// Where a line's number comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Queried from the device, or measured on real hardware (published figures).
    Measured,
    /// A rule: the C engine's, or ours (the line's note says which).
    Rule,
    /// A command-line flag.
    Flag,
    /// The model file's tensor table.
    File,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Measured => "measured",
            Source::Rule => "rule",
            Source::Flag => "flag",
            Source::File => "file",
        }
    }
}

/// Which memory a line lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Device,
    Host,
}

/// The platform the run is on: Windows ROCm has a driver reserve and a measured fragmentation
/// cliff; Linux has neither measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    Linux,
    Windows,
}

impl Platform {
    pub fn as_str(self) -> &'static str {
        match self {
            Platform::Linux => "linux",
            Platform::Windows => "windows",
        }
    }

    /// The platform this program was built for.
    pub fn current() -> Self {
        if cfg!(windows) {
            Platform::Windows
        } else {
            Platform::Linux
        }
    }
}

/// One line of the plan.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Line {
    pub what: String,
    pub bytes: u64,
    pub source: Source,
    pub side: Side,
    /// Where the number comes from, in words.
    pub note: String,
}

/// What the planner is asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanInput {
    /// Device memory in total (bytes): queried, or `--gpu-mem`.
    pub device_total: u64,
    /// Free device memory when queried (`None` with `--gpu-mem`: all of it is the budget).
    pub device_free: Option<u64>,
    /// Measured (queried) or Flag (`--gpu-mem`).
    pub device_source: Source,
    pub platform: Platform,
    /// Requested context; `None`: min(DEFAULT_CTX, what fits).
    pub ctx: Option<u64>,
    pub prefill_chunk: u64,
    pub streaming: bool,
    pub cache: CacheRequest,
    /// Host RAM tier for experts (bytes; 0 = none).
    pub ram_tier: u64,
    /// `--simulate-used-memory`: device memory the plan treats as taken.
    pub simulate_used: u64,
    /// The engine's pinned staging ring (slots × slot bytes).
    pub staging_bytes: u64,
    pub model: ModelSizes,
}

/// Why the planner refused its input (bad input, exit 2).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("device memory of 0 bytes: give a positive size")]
    ZeroDevice,
    #[error("free device memory {free} exceeds the total {total}")]
    FreeAboveTotal { free: u64, total: u64 },
    #[error("--ctx {ctx} is outside 1..={limit} (the model's context length)")]
    Ctx { ctx: u64, limit: u64 },
    #[error("--prefill-chunk {0} is outside 1..={max}", max = rules::MAX_PREFILL_CHUNK)]
    PrefillChunk(u64),
    #[error("the model has no routed experts of a known size")]
    NoExperts,
}

/// The first device line that does not fit.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Misfit {
    /// The line's `what`.
    pub line: String,
    /// Its bytes.
    pub needs: u64,
    /// Device memory left for it after the lines before it.
    pub left: u64,
    /// How far this line alone is short: `needs - left`.
    pub short: u64,
    /// How far the whole plan is over the device (bytes to cut to fit).
    pub over: u64,
}

/// The plan.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Plan {
    pub device_total: u64,
    pub device_free: Option<u64>,
    pub device_source: Source,
    pub platform: Platform,
    pub streaming: bool,
    pub ctx: u64,
    pub prefill_chunk: u64,
    /// Largest context whose plan fits (0: nothing fits).
    pub max_ctx: u64,
    /// Experts in the expert cache (0 when not streaming: every expert is resident).
    pub cache_experts: u64,
    pub lines: Vec<Line>,
    /// Device bytes of all device lines.
    pub device_used: u64,
    pub fits: bool,
    pub misfit: Option<Misfit>,
}

/// Names of lines other code (and tests) refer to.
pub const KV_LINE: &str = "KV cache + prefill scratch";
pub const CACHE_LINE: &str = "expert cache";
pub const Q8_LINE: &str = "Q8->F16 cache";
pub const HEADROOM_LINE: &str = "fragmentation headroom";

/// Computes the plan.
pub fn plan(inp: &PlanInput) -> Result<Plan, PlanError> {
    check_input(inp)?;
    let m = &inp.model;
    let total = inp.device_total;
    let per_token =
        rules::KV_BYTES_PER_TOKEN + rules::SCRATCH_BYTES_PER_TOKEN_PER_CHUNK * inp.prefill_chunk;
    let fixed = fixed_lines(inp);
    let fixed_cache = fixed_cache(inp);
    // Largest context: everything but the KV line, the elastic Q8 cache at 0 and an auto cache
    // at its minimum.
    let min_cache = match (&fixed_cache, inp.streaming) {
        (Some(c), _) => c.experts * m.expert_bytes,
        (None, true) => m.min_cache_experts.min(m.n_experts) * m.expert_bytes,
        (None, false) => 0,
    };
    let before_kv = sum(&fixed).saturating_add(min_cache);
    let max_ctx = (total.saturating_sub(before_kv) / per_token).min(m.ctx_limit);
    let ctx = inp
        .ctx
        .unwrap_or_else(|| rules::DEFAULT_CTX.min(m.ctx_limit).min(max_ctx.max(1)));
    let mut lines = fixed;
    if let Some(c) = &fixed_cache {
        lines.push(cache_line(
            c.experts * m.expert_bytes,
            c.experts,
            Source::Flag,
            c.how.clone(),
        ));
    }
    lines.push(kv_line(inp, per_token, ctx));
    let cache_experts = match fixed_cache {
        Some(c) => {
            if inp.streaming {
                lines.push(q8_line(inp, total.saturating_sub(sum(&lines)), false));
            }
            c.experts
        }
        None if inp.streaming => auto_cache_lines(inp, &mut lines),
        None => 0,
    };
    lines.extend(host_lines(inp));
    let device_used = sum(&lines);
    let misfit = first_misfit(&lines, total, device_used);
    Ok(Plan {
        device_total: total,
        device_free: inp.device_free,
        device_source: inp.device_source,
        platform: inp.platform,
        streaming: inp.streaming,
        ctx,
        prefill_chunk: inp.prefill_chunk,
        max_ctx,
        cache_experts,
        lines,
        device_used,
        fits: misfit.is_none(),
        misfit,
    })
}

/// The input's own consistency: a device, free ≤ total, a prefill chunk and context in range,
/// experts to stream when streaming.
fn check_input(inp: &PlanInput) -> Result<(), PlanError> {
    let m = &inp.model;
    let total = inp.device_total;
    if total == 0 {
        return Err(PlanError::ZeroDevice);
    }
    if let Some(free) = inp.device_free {
        if free > total {
            return Err(PlanError::FreeAboveTotal { free, total });
        }
    }
    if inp.prefill_chunk == 0 || inp.prefill_chunk > rules::MAX_PREFILL_CHUNK {
        return Err(PlanError::PrefillChunk(inp.prefill_chunk));
    }
    if let Some(c) = inp.ctx {
        if c == 0 || c > m.ctx_limit {
            return Err(PlanError::Ctx {
                ctx: c,
                limit: m.ctx_limit,
            });
        }
    }
    if inp.streaming && (m.expert_bytes == 0 || m.n_experts == 0) {
        return Err(PlanError::NoExperts);
    }
    Ok(())
}

/// An expert cache sized by the user's flag (count or bytes), and how it was sized.
struct FixedCache {
    experts: u64,
    how: String,
}

fn fixed_cache(inp: &PlanInput) -> Option<FixedCache> {
    let m = &inp.model;
    match (inp.streaming, inp.cache) {
        (false, _) | (true, CacheRequest::Auto) => None,
        (true, CacheRequest::Experts(n)) => Some(FixedCache {
            experts: n.min(m.n_experts),
            how: format!("--ssd-streaming-cache-experts {n}"),
        }),
        (true, CacheRequest::Bytes(b)) => Some(FixedCache {
            experts: (b / m.expert_bytes).min(m.n_experts),
            how: format!(
                "--ssd-streaming-cache-experts: {} / {} B per expert",
                human_bytes(b),
                m.expert_bytes
            ),
        }),
    }
}

/// The compressed KV cache and prefill scratch for `ctx` tokens.
fn kv_line(inp: &PlanInput, per_token: u64, ctx: u64) -> Line {
    line(
        KV_LINE,
        per_token.saturating_mul(ctx),
        Source::Rule,
        Side::Device,
        format!(
            "ctx {ctx} x ({} B/token compressed KV + 2 x prefill_chunk {} B/token scratch) \
             (DS4_FACTS, CUDA/ROCm)",
            rules::KV_BYTES_PER_TOKEN,
            inp.prefill_chunk
        ),
    )
}

/// Streaming: the elastic Q8->F16 cache takes what `rest` has beyond the C engine's reserve
/// (the 16 GiB streaming reserve when the cache is auto-sized, else the non-streaming one).
fn q8_line(inp: &PlanInput, rest: u64, auto_cache: bool) -> Line {
    let m = &inp.model;
    // The C engine's 16 GiB streaming reserve keeps room for the expert cache; a cache
    // sized by the flag is already a line, so then only the non-streaming reserve is kept.
    let reserve = rules::q8_f16_reserve(inp.device_total, auto_cache);
    let q8 = m.q8_f16_bytes.min(rest.saturating_sub(reserve));
    let why = if auto_cache {
        "for the expert cache (the C engine's streaming reserve)"
    } else {
        "(the non-streaming reserve: the flag already sized the expert cache)"
    };
    line(
        Q8_LINE,
        q8,
        Source::Rule,
        Side::Device,
        format!(
            "streaming: the Q8->F16 cache leaves {} free {why}; it takes what exceeds \
             that, at most its full size {}",
            human_bytes(reserve),
            human_bytes(m.q8_f16_bytes)
        ),
    )
}

/// Streaming with an auto-sized cache: the Q8 line, then the expert cache from what is left
/// (at least one layer's experts). Returns the cache's expert count.
fn auto_cache_lines(inp: &PlanInput, lines: &mut Vec<Line>) -> u64 {
    let m = &inp.model;
    let rest = inp.device_total.saturating_sub(sum(lines));
    let q8 = q8_line(inp, rest, true);
    let left = rest - q8.bytes;
    lines.push(q8);
    let n = (left / m.expert_bytes)
        .min(m.n_experts)
        .max(m.min_cache_experts.min(m.n_experts));
    lines.push(cache_line(
        n * m.expert_bytes,
        n,
        Source::Rule,
        format!(
            "auto: what is left / {} B per expert, at most all {} experts, at least \
             {} (one layer's experts)",
            m.expert_bytes, m.n_experts, m.min_cache_experts
        ),
    ));
    n
}

/// Device bytes of the device lines.
fn sum(lines: &[Line]) -> u64 {
    lines
        .iter()
        .filter(|l| l.side == Side::Device)
        .fold(0u64, |a, l| a.saturating_add(l.bytes))
}

fn first_misfit(lines: &[Line], total: u64, used: u64) -> Option<Misfit> {
    let mut cum = 0u64;
    for l in lines.iter().filter(|l| l.side == Side::Device) {
        let left = total.saturating_sub(cum);
        cum = cum.saturating_add(l.bytes);
        if cum > total {
            return Some(Misfit {
                line: l.what.clone(),
                needs: l.bytes,
                left,
                short: l.bytes - left,
                over: used - total,
            });
        }
    }
    None
}

impl Plan {
    /// One line for the start of a run.
    pub fn summary(&self) -> String {
        let mode = if self.streaming {
            format!("ssd-streaming, expert cache {} experts", self.cache_experts)
        } else {
            "resident".to_string()
        };
        let head = format!(
            "plan: {} device ({}), {}, ctx {} (max {}), {mode}: {} of device memory",
            human_bytes(self.device_total),
            self.device_source.as_str(),
            self.platform.as_str(),
            self.ctx,
            self.max_ctx,
            human_bytes(self.device_used),
        );
        match &self.misfit {
            None => format!("{head}, fits"),
            Some(m) => format!("{head}, does not fit: {}", m.describe()),
        }
    }
}

impl Misfit {
    /// `KV cache + prefill scratch needs 5.02 GiB, 4.86 GiB left: this line is 167.00 MiB
    /// short, the whole plan 171.80 MiB over`: the line's own shortfall and the plan's (the
    /// lines after it add to the second), each labelled.
    pub fn describe(&self) -> String {
        format!(
            "{} needs {}, {} left: this line is {} short, the whole plan {} over",
            self.line,
            human_bytes(self.needs),
            human_bytes(self.left),
            human_bytes(self.short),
            human_bytes(self.over)
        )
    }
}
