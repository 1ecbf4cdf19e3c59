//! The plan's lines that do not depend on the context or the cache size: memory in use, the
//! simulated use, the platform reserve, resident weights, the resident-mode Q8->F16 cache and
//! the fragmentation headroom (device), the staging ring and the RAM tier (host).

use super::{rules, Line, PlanInput, Platform, Side, Source, CACHE_LINE, HEADROOM_LINE, Q8_LINE};
use crate::units::human_bytes;

pub(super) fn line(what: &str, bytes: u64, source: Source, side: Side, note: String) -> Line {
    Line {
        what: what.to_string(),
        bytes,
        source,
        side,
        note,
    }
}

pub(super) fn cache_line(bytes: u64, n: u64, source: Source, note: String) -> Line {
    line(
        CACHE_LINE,
        bytes,
        source,
        Side::Device,
        format!("{n} experts; {note}"),
    )
}

/// The device lines that do not depend on the context or the cache size.
pub(super) fn fixed_lines(inp: &PlanInput) -> Vec<Line> {
    let m = &inp.model;
    let total = inp.device_total;
    let mut v = Vec::new();
    if let Some(free) = inp.device_free {
        v.push(line(
            "in use before the run",
            total - free,
            Source::Measured,
            Side::Device,
            "device total - free as the driver reports them (context, other processes)".into(),
        ));
    }
    if inp.simulate_used > 0 {
        v.push(line(
            "simulated used memory",
            inp.simulate_used,
            Source::Flag,
            Side::Device,
            "--simulate-used-memory: lowers the plan's budget (`ds4 --simulate-used-memory` \
             holds the memory for real: device memory, or locked host memory on a unified \
             device)"
                .into(),
        ));
    }
    v.push(match inp.platform {
        Platform::Windows => line(
            "platform reserve",
            rules::WINDOWS_DRIVER_RESERVE,
            Source::Measured,
            Side::Device,
            "Windows ROCm driver (staging, hipBLAS workspaces): 11.67 GiB measured on Strix \
             Halo; the port reserves 12 GiB, we use the measurement"
                .into(),
        ),
        Platform::Linux => line(
            "platform reserve",
            0,
            Source::Rule,
            Side::Device,
            "linux: none; the driver's own memory is already out of the queried free memory".into(),
        ),
    });
    v.push(if inp.streaming {
        line(
            "resident weights",
            m.resident_bytes,
            Source::File,
            Side::Device,
            "every non-routed tensor (the routed experts stream)".into(),
        )
    } else {
        line(
            "resident weights",
            m.resident_bytes + m.routed_bytes,
            Source::File,
            Side::Device,
            "every tensor, routed experts included".into(),
        )
    });
    if !inp.streaming {
        let cap = rules::q8_f16_reserve(total, false);
        v.push(line(
            Q8_LINE,
            m.q8_f16_bytes.min(cap),
            Source::Rule,
            Side::Device,
            format!(
                "resident: min(full size {}, the C engine's reserve {} = {})",
                human_bytes(m.q8_f16_bytes),
                if total >= 112 << 30 {
                    "512 MiB (device >= 112 GiB)"
                } else {
                    "max(4 GiB, 5 % of the device)"
                },
                human_bytes(cap)
            ),
        ));
    }
    v.push(match inp.platform {
        Platform::Windows => line(
            HEADROOM_LINE,
            rules::WINDOWS_FRAGMENTATION_HEADROOM,
            Source::Measured,
            Side::Device,
            "Windows ROCm: derived from the Strix Halo cliff (229,376 worked, 245,760 failed \
             with ~8 GiB nominally free); docs/PLANNER.md"
                .into(),
        ),
        Platform::Linux => line(
            HEADROOM_LINE,
            rules::LINUX_FRAGMENTATION_HEADROOM,
            Source::Rule,
            Side::Device,
            "linux: 256 MiB; the H200 (CUDA) granted one allocation of all but 4 MiB of its free \
             memory (docs/PLANNER.md)"
                .into(),
        ),
    });
    v
}

pub(super) fn host_lines(inp: &PlanInput) -> Vec<Line> {
    let mut v = vec![line(
        "staging ring",
        inp.staging_bytes,
        Source::Rule,
        Side::Host,
        "pinned host memory: engine slots x slot bytes (EngineConfig defaults)".into(),
    )];
    if inp.ram_tier > 0 {
        v.push(line(
            "RAM tier",
            inp.ram_tier,
            Source::Flag,
            Side::Host,
            "host memory holding experts between the SSD and the device cache".into(),
        ));
    }
    v
}
