//! `ds4`'s outputs: the report (text or `--json`), the hidden-state dump, the routing trace, and
//! the plan's device lines beside what the run's allocations took.

use super::{Args, RunInfo, Runner};
use crate::cli::CliResult;
use ds4_stream::decode::TokenTrace;
use ds4_stream::device::{BackendKind, Device};
use ds4_stream::model::Ds4Model;
use std::fmt::Write as _;
use std::path::Path;

/// Who reads the misses: the engine, or the C engine's pattern re-implemented.
fn read_pattern(a: &Args) -> &'static str {
    if a.ssd_streaming_c_engine_pattern {
        "c-engine pattern (re-implemented: 18 workers, pread+copy+sync per slice, rendezvous per layer)"
    } else {
        "engine"
    }
}

pub(super) fn free_memory(dev: &dyn Device) -> Option<u64> {
    dev.memory_info().ok().flatten().map(|m| m.free)
}

/// The memory plan's device lines beside what this run's allocations took from the device's
/// free memory (GPU backends; `None` on the host). Issue 10's check of the plan against reality.
pub(super) fn device_memory(
    plan: Option<&ds4_stream::plan::Plan>,
    runner: &Runner<'_>,
    free_after_load: Option<u64>,
    free_after_run: Option<u64>,
) -> Option<serde_json::Value> {
    let plan = plan?;
    let steps = runner.alloc_steps();
    let lines: Vec<_> = plan
        .lines
        .iter()
        .filter(|l| l.side == ds4_stream::plan::Side::Device)
        .map(|l| serde_json::json!({"what": l.what, "bytes": l.bytes}))
        .collect();
    Some(serde_json::json!({
        "free_at_plan": plan.device_free,
        "free_after_load": free_after_load,
        "free_after_run": free_after_run,
        "steps": steps,
        "plan_lines": lines,
    }))
}

/// `--dump-hidden`'s bytes: every hidden state, little-endian f32, token-major.
pub(super) fn dump_bytes(hidden: &[Vec<f32>]) -> Vec<u8> {
    let mut b = Vec::with_capacity(hidden.len() * hidden.first().map_or(0, |h| h.len()) * 4);
    for h in hidden {
        for v in h {
            b.extend_from_slice(&v.to_le_bytes());
        }
    }
    b
}

/// `--record-trace`'s text: one JSON object per (token, layer).
pub(super) fn trace_text(ids: &[u32], traces: &[Vec<TokenTrace>]) -> String {
    let mut s = String::new();
    for (i, (id, tr)) in ids.iter().zip(traces).enumerate() {
        for t in tr {
            let e: Vec<String> = t.experts.iter().map(|x| x.to_string()).collect();
            let w: Vec<String> = t.weights.iter().map(|x| format!("{x:?}")).collect();
            let _ = writeln!(
                s,
                "{{\"token\": {i}, \"id\": {id}, \"layer\": {}, \"experts\": [{}], \"weights\": [{}]}}",
                t.layer,
                e.join(", "),
                w.join(", ")
            );
        }
    }
    s
}

pub(super) fn report(
    a: &Args,
    path: &Path,
    model: &Ds4Model,
    ids: &[u32],
    run: &RunInfo,
    st: &ds4_stream::decode::FetchStats,
    digest: &str,
) -> CliResult {
    let n = ids.len() as f64;
    let secs = run.secs;
    let r = Report {
        a,
        path,
        model,
        ids,
        run,
        st,
        digest,
        kernels: match run.backend {
            BackendKind::Host => "the host's reference kernels",
            _ => "the GPU kernels (kernels/ds4_kernels.cu)",
        },
        tps: n / secs.max(1e-9),
        mib_per_tok: st.bytes_streamed as f64 / n / (1 << 20) as f64,
        stall: st.stall.as_secs_f64() / secs.max(1e-9),
        mode: if a.ssd_streaming {
            "ssd-streaming"
        } else {
            "resident"
        },
        // hits / lookups, the same `hits` as below.
        hr: st.cache.hit_rate(),
        hits: st.cache.hits + st.cache.dedup_hits,
    };
    if a.json {
        return crate::cli::out(&format!("{}\n", r.json())).map(|_| ());
    }
    crate::cli::out(&r.text()).map(|_| ())
}

/// The report's inputs and the figures both outputs derive from them.
struct Report<'a> {
    a: &'a Args,
    path: &'a Path,
    model: &'a Ds4Model,
    ids: &'a [u32],
    run: &'a RunInfo,
    st: &'a ds4_stream::decode::FetchStats,
    digest: &'a str,
    kernels: &'static str,
    tps: f64,
    mib_per_tok: f64,
    stall: f64,
    mode: &'static str,
    hr: f64,
    hits: u64,
}

impl Report<'_> {
    /// `--json`'s object.
    fn json(&self) -> serde_json::Value {
        let (a, run) = (self.a, self.run);
        let mut v = serde_json::json!({
            "model": self.path.display().to_string(),
            "mode": self.mode,
            "backend": run.backend.as_str(),
            "compute": format!("{}; MoE stack only (no attention, no hyper-connections)", self.kernels),
            "tokens": self.ids.len(),
            "layers": self.model.layers.len(),
            "seconds": run.secs,
            "load_seconds": run.load_secs,
            "tokens_per_s": self.tps,
            "digest": self.digest,
        });
        if a.ssd_streaming {
            self.streaming_json(&mut v);
        }
        if let Some(m) = &run.mem {
            v["device_memory"] = m.clone();
        }
        v
    }

    /// `--json`'s expert cache, IO, RAM tier and lookahead fields (`--ssd-streaming`).
    fn streaming_json(&self, v: &mut serde_json::Value) {
        let (a, run, st) = (self.a, self.run, self.st);
        v["cache"] = serde_json::json!({
            "experts": run.slots,
            "chosen_by": run.how,
            "policy": run.policy.name(),
            "preloaded": run.preloaded,
            "full_layers": run.full_layers,
            // One definition of a hit in both outputs: a lookup served without reading
            // the file, the expert resident or already being read for another lookup.
            "hits": self.hits,
            "resident_hits": st.cache.hits,
            "loading_hits": st.cache.dedup_hits,
            "misses": st.cache.misses,
            "lookups": st.cache.lookups(),
            "evictions": st.cache.evictions,
            "hit_rate": self.hr,
            // The cache's own counters: here `hits` are the resident hits only.
            "stats": st.cache,
        });
        v["mib_streamed_per_token"] = self.mib_per_tok.into();
        v["stall_fraction"] = self.stall.into();
        v["fetch_p50_us"] = st.fetch_p50_us.into();
        v["fetch_p99_us"] = st.fetch_p99_us.into();
        v["prefetched_hash_experts"] = st.prefetched.into();
        v["read_pattern"] = read_pattern(a).into();
        v["io"] = serde_json::json!({"workers": a.workers, "read_chunk": run.read_chunk});
        if let Some(r) = &st.ram {
            v["ram_tier"] = serde_json::to_value(r).unwrap_or_default();
            v["ram_tier"]["chosen_by"] = run.ram_how.clone().into();
        }
        if a.ssd_streaming_lookahead {
            v["lookahead"] = serde_json::json!({
                "predicted": st.lookahead_predicted,
                "used": st.lookahead_used,
                "reads_started": st.lookahead_reads,
            });
        }
    }

    /// The text report.
    fn text(&self) -> String {
        let (a, run) = (self.a, self.run);
        let mode = self.mode;
        let mut t = String::new();
        let _ = writeln!(
            t,
            "{}: {} tokens through {} layers ({mode}), {:.2} tokens/s ({:.3} s; experts/weights loaded in {:.3} s)",
            self.path.display(),
            self.ids.len(),
            self.model.layers.len(),
            self.tps,
            run.secs,
            run.load_secs
        );
        if a.ssd_streaming {
            self.streaming_text(&mut t);
        }
        if let Some(m) = &run.mem {
            write_device_memory(&mut t, m);
        }
        let digest = self.digest;
        let (kernels, backend) = (self.kernels, run.backend);
        let _ = writeln!(t, "digest (sha256 of every hidden state): {digest}");
        let _ = writeln!(
            t,
            "note: the MoE half of DS4 only (router, routed and shared experts; no attention, no \
             hyper-connections), on {kernels} ({backend})"
        );
        t
    }

    /// The text report's expert cache, RAM tier and lookahead lines (`--ssd-streaming`).
    fn streaming_text(&self, t: &mut String) {
        let (a, st) = (self.a, self.st);
        let RunInfo {
            slots,
            ref how,
            policy,
            preloaded,
            full_layers,
            ref ram_how,
            ..
        } = *self.run;
        let _ = writeln!(
            t,
            "expert cache: {slots} experts ({how}), policy {}, {preloaded} preloaded, {full_layers} full layers: hit rate {:.1}% of {} lookups ({} hits: {} resident + {} already loading; {} misses, {} evictions); {:.2} MiB streamed per token; IO stall {:.1}% of the time; fetch p50 {} us, p99 {} us; {} hash-layer experts read at token start",
            policy.name(),
            self.hr * 100.0,
            st.cache.lookups(),
            self.hits,
            st.cache.hits,
            st.cache.dedup_hits,
            st.cache.misses,
            st.cache.evictions,
            self.mib_per_tok,
            self.stall * 100.0,
            st.fetch_p50_us,
            st.fetch_p99_us,
            st.prefetched
        );
        if a.ssd_streaming_c_engine_pattern {
            let _ = writeln!(t, "misses read by the {}", read_pattern(a));
        }
        if let Some(r) = &st.ram {
            let _ = writeln!(
                t,
                "RAM tier: {} experts ({}; {:.2} GiB pinned host memory): hit rate {:.1}% of device misses ({} copied from RAM, {} read from the file into it), {} evictions",
                r.experts,
                ram_how.as_deref().unwrap_or("-"),
                r.bytes as f64 / (1u64 << 30) as f64,
                r.cache.hit_rate() * 100.0,
                r.cache.hits,
                r.cache.misses,
                r.cache.evictions
            );
        }
        if a.ssd_streaming_lookahead {
            let _ = writeln!(
                t,
                "lookahead: {} experts guessed, {} of them used by their layer ({:.1}%), {} reads started early",
                st.lookahead_predicted,
                st.lookahead_used,
                100.0 * st.lookahead_used as f64 / st.lookahead_predicted.max(1) as f64,
                st.lookahead_reads
            );
        }
    }
}

/// The device-memory check in words: each measured step (asked for, free memory dropped by),
/// then the run's total drop against the plan's device lines.
fn write_device_memory(t: &mut String, m: &serde_json::Value) {
    use ds4_stream::units::human_bytes;
    let b = |v: &serde_json::Value| v.as_u64().map_or("?".to_string(), human_bytes);
    if let Some(steps) = m["steps"].as_array() {
        for s in steps {
            let _ = writeln!(
                t,
                "device memory: {}: asked {}, free memory dropped by {}",
                s["what"].as_str().unwrap_or("?"),
                b(&s["requested"]),
                b(&s["free_drop"])
            );
        }
    }
    if let (Some(p), Some(r)) = (m["free_at_plan"].as_u64(), m["free_after_run"].as_u64()) {
        let _ = writeln!(
            t,
            "device memory: free {} at the plan, {} after the run (dropped by {}; plan lines: {})",
            human_bytes(p),
            human_bytes(r),
            human_bytes(p.saturating_sub(r)),
            m["plan_lines"]
                .as_array()
                .map(|ls| ls
                    .iter()
                    .map(|l| format!("{} {}", l["what"].as_str().unwrap_or("?"), b(&l["bytes"])))
                    .collect::<Vec<_>>()
                    .join(", "))
                .unwrap_or_default()
        );
    }
}
