//! The numbers the planner uses that do not come from the file or the device: measured figures
//! of the C engine's Windows ROCm port and the C engine's rules (../shared/DS4_FACTS.md,
//! "Memory planning facts"), and this project's own rules where nothing was measured. Each one
//! says where it comes from; docs/PLANNER.md derives the fragmentation headroom.

use crate::model::Ds4Model;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// Compressed KV cache per context token on CUDA/ROCm (8,224 on Metal, which we do not target).
pub const KV_BYTES_PER_TOKEN: u64 = 13_760;

/// Prefill scratch per context token, per prefill-chunk token: 2 × prefill_chunk B/token.
pub const SCRATCH_BYTES_PER_TOKEN_PER_CHUNK: u64 = 2;

/// The Windows ROCm driver's own device memory (staging, hipBLAS workspaces), measured at
/// 11.67 GiB on Strix Halo: round(11.67 × 2^30). The port reserves 12 GiB; we use the
/// measurement and say so.
pub const WINDOWS_DRIVER_RESERVE: u64 = 12_530_567_086;

/// Fragmentation headroom on Windows ROCm: device memory that is nominally free but could not
/// take the KV allocation (the port failed at ctx 245,760 with ~8 GiB nominally free). Derived
/// in docs/PLANNER.md from the Strix Halo numbers: with this planner's other lines, ctx 229,376
/// (worked) leaves 5.358 GiB and 245,760 (failed) 5.023 GiB; the headroom is the midpoint,
/// rounded to a MiB: 5,315 MiB. The limit then lands at ctx 237,553, halfway between.
pub const WINDOWS_FRAGMENTATION_HEADROOM: u64 = 5_315 * MIB;

/// Fragmentation headroom on Linux (CUDA or ROCm): 256 MiB. Measured on the H200 (CUDA 13,
/// `ds4 plan --measure-headroom`): the largest single allocation the driver granted was the
/// free memory it reported minus 4 MiB (docs/PLANNER.md); the rest is room for what the driver
/// allocates after the plan (kernel modules, streams, events). It was max(256 MiB, 1 % of the
/// device) before the measurement: 1.40 GiB on the H200.
pub const LINUX_FRAGMENTATION_HEADROOM: u64 = 256 * MIB;

/// The C engine's Q8→F16 cache reserve: 16 GiB when streaming; 512 MiB if the device has
/// ≥ 112 GiB; else max(4 GiB, 5 % of the device). How the planner reads it: docs/PLANNER.md.
pub fn q8_f16_reserve(device_total: u64, streaming: bool) -> u64 {
    if streaming {
        16 * GIB
    } else if device_total >= 112 * GIB {
        512 * MIB
    } else {
        (4 * GIB).max(device_total / 20)
    }
}

/// The plan's context length when `--ctx` is not given (capped by the model and by what fits).
/// Ours: the C engine's default is not in our facts.
pub const DEFAULT_CTX: u64 = 32_768;

/// Context limit when the file does not say (`deepseek4.context_length`): DS4 Flash's
/// 65,536 × 16 (YaRN factor) = 1,048,576 tokens.
pub const FALLBACK_CTX_LIMIT: u64 = 1 << 20;

/// Largest prefill chunk accepted (a bad-input check, not a memory rule).
pub const MAX_PREFILL_CHUNK: u64 = 1 << 20;

/// What the planner needs from a model file's tensor table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ModelSizes {
    /// Every non-routed tensor (resident in both modes).
    pub resident_bytes: u64,
    /// Every routed expert tensor.
    pub routed_bytes: u64,
    /// One expert of one layer (gate + up + down).
    pub expert_bytes: u64,
    /// Routed experts in the file (layers × experts per layer).
    pub n_experts: u64,
    /// Smallest expert cache a streamed token can run with (the experts one layer uses).
    pub min_cache_experts: u64,
    /// F16 copies of every resident Q8_0 tensor (what the Q8→F16 cache holds when complete).
    pub q8_f16_bytes: u64,
    /// Longest context the file allows (`deepseek4.context_length`, else 1,048,576).
    pub ctx_limit: u64,
}

impl ModelSizes {
    /// From the validated model map; `ctx_limit` from the file's metadata when it has one.
    pub fn from_model(model: &Ds4Model, ctx_limit: Option<u64>) -> Self {
        let q8_f16_bytes = model
            .resident
            .iter()
            .filter(|t| t.ggml_type == crate::gguf::GgmlType::Q8_0)
            .map(|t| t.dims.iter().product::<u64>().saturating_mul(2))
            .fold(0u64, u64::saturating_add);
        Self {
            resident_bytes: model.resident_bytes,
            routed_bytes: model.routed_bytes,
            expert_bytes: model.layers.first().map_or(0, |l| l.expert_bytes()),
            n_experts: model.n_routed_experts(),
            min_cache_experts: model.shape.n_expert_used,
            q8_f16_bytes,
            ctx_limit: ctx_limit.filter(|&c| c > 0).unwrap_or(FALLBACK_CTX_LIMIT),
        }
    }

    /// `deepseek4.context_length` of an open file, when present and a positive integer.
    pub fn ctx_limit_of(file: &crate::gguf::GgufFile) -> Option<u64> {
        file.get("deepseek4.context_length")
            .and_then(|v| v.as_u64())
            .filter(|&c| c > 0)
    }
}

/// An expert-cache size as `--ssd-streaming-cache-experts` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheRequest {
    /// No size given: the planner sizes the cache.
    Auto,
    /// A number of experts.
    Experts(u64),
    /// A byte budget: floor(bytes / expert bytes) experts.
    Bytes(u64),
}

/// Parses `--ssd-streaming-cache-experts N|SIZE`. A plain number is a count of experts; a size
/// is a budget. As in the C engine's flag, decimal-looking units are binary here: `32GB` is
/// 32 GiB (so `32GB` on Flash is floor(32 × 2^30 / 7,077,888) = 4,854 experts, the issue's
/// figure), `512MB` is 512 MiB. Every other size flag of ours keeps `units::parse_size`'s
/// strict reading (GB = 10^9).
pub fn parse_cache_flag(text: &str) -> Result<CacheRequest, String> {
    let t = text.trim();
    if let Ok(n) = t.parse::<u64>() {
        return Ok(CacheRequest::Experts(n));
    }
    let lower = t.to_ascii_lowercase();
    let normalized = match ["kb", "mb", "gb", "tb"]
        .iter()
        .find(|u| lower.ends_with(*u))
    {
        // `32GB` -> `32GiB` (the suffix is ASCII, so the slice is on a char boundary).
        Some(u) => format!("{}{}iB", &t[..t.len() - 2], &u[..1]),
        None => t.to_string(),
    };
    crate::units::parse_size(&normalized)
        .map(CacheRequest::Bytes)
        .map_err(|e| format!("--ssd-streaming-cache-experts {t:?}: {e}"))
}
