//! The host backend's up-front memory check (issue 21): a run whose weights cannot fit in this
//! process's memory fails before the first read, naming what it needs and what there is, instead
//! of reading for half a minute and dying at the limit. GPU backends have the memory plan.
//!
//! Needed: the MoE stack's resident tensors (token embedding and every `ffn_*` tensor that is
//! not a routed expert) plus the routed experts: all of them in a resident run, the cache's
//! slots when streaming (the RAM the stack holds; buffers of the engine are small beside it).
//! Available: the smaller of `MemAvailable` and what RLIMIT_AS leaves (limit − VmSize), on
//! Linux; elsewhere nothing is checked.

use super::super::CliError;
use ds4_stream::gguf::GgufFile;
use ds4_stream::model::Ds4Model;
use ds4_stream::units::human_bytes;

/// Headroom on top of the weights: the engine's staging ring and the stack's scratch.
const HEADROOM: u64 = 256 << 20;

/// Bytes the host run will hold: (resident tensors, routed experts).
pub(super) fn needed(
    file: &GgufFile,
    model: &Ds4Model,
    streaming: bool,
    slots: usize,
) -> (u64, u64) {
    let resident = file
        .tensors
        .iter()
        .filter(|t| {
            t.name == "token_embd.weight"
                || (t.name.contains(".ffn_") && !t.name.contains("_exps."))
        })
        .map(|t| t.nbytes)
        .sum::<u64>();
    let per_expert = model.layers.first().map_or(0, |l| l.expert_bytes());
    let experts = if streaming {
        per_expert.saturating_mul(slots as u64)
    } else {
        model.routed_bytes
    };
    (resident, experts)
}

/// What this process may still allocate, and where the figure comes from; `None`: unknown.
fn available() -> Option<(u64, &'static str)> {
    let avail = ds4_stream::units::available_memory()?;
    let mut best = (avail, "MemAvailable");
    if let Some(left) = address_space_left() {
        if left < best.0 {
            best = (left, "RLIMIT_AS minus this process's address space");
        }
    }
    Some(best)
}

#[cfg(target_os = "linux")]
fn address_space_left() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own; no other memory is touched.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) } != 0
        || lim.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmSize:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(lim.rlim_cur.saturating_sub(kib.saturating_mul(1024)))
}

#[cfg(not(target_os = "linux"))]
fn address_space_left() -> Option<u64> {
    None
}

/// Fails (exit 1) when the run cannot fit; says what to do instead.
pub(super) fn check(
    file: &GgufFile,
    model: &Ds4Model,
    streaming: bool,
    slots: usize,
) -> Result<(), CliError> {
    let Some((avail, source)) = available() else {
        return Ok(());
    };
    let (resident, experts) = needed(file, model, streaming, slots);
    let need = resident.saturating_add(experts).saturating_add(HEADROOM);
    if need <= avail {
        return Ok(());
    }
    let what = if streaming {
        format!("a cache of {slots} experts ({})", human_bytes(experts))
    } else {
        format!("every routed expert resident ({})", human_bytes(experts))
    };
    let hint = if streaming {
        "use a smaller --ssd-streaming-cache-experts"
    } else {
        "use --ssd-streaming with --ssd-streaming-cache-experts N|SIZE"
    };
    Err(CliError::runtime(format!(
        "host memory: this run needs {} ({what}, {} of resident tensors, {} headroom) but {} is \
         available ({source}); nothing was read: {hint}",
        human_bytes(need),
        human_bytes(resident),
        human_bytes(HEADROOM),
        human_bytes(avail)
    )))
}
