//! `ds4-bench cache`: hit rate against cache size for every expert-cache policy, on a recorded
//! routing trace (`--trace`, the `ds4 --record-trace` format) or on the synthetic ones, beside
//! two references computed from the trace itself: `oracle-static` (the most used experts pinned)
//! and `belady` (the optimum). No IO, no device: `ds4_stream::expert_cache` driven as the engine
//! drives it (see `expert_cache::reference`).
//!
//! Limits: the synthetic traces are assumptions shaped after the published facts, not a real DS4
//! trace, so their numbers are not the published curve (59 / 74 / 87 % hits at 11 / 22 / 44 % of
//! the experts, from another engine on a real trace); compare policies with each other and with
//! the references, in one run.

use super::plot::{line_panels, LinePanel};
use super::BenchError;
use ds4_stream::expert_cache::reference::{belady, oracle_static, simulate};
use ds4_stream::expert_cache::trace::{self, Shape, Synth, Trace};
use ds4_stream::expert_cache::PolicyKind;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

/// A cache size: a slot count, a percentage of all the trace's experts, or a number of tokens'
/// worth (`1tok` = K × layers, the smallest cache that holds one token's experts).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SlotsArg {
    Count(usize),
    Percent(f64),
    Tokens(usize),
}

fn slots_arg(s: &str) -> Result<SlotsArg, String> {
    if let Some(t) = s.strip_suffix("tok") {
        return t
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .map(SlotsArg::Tokens)
            .ok_or_else(|| format!("{s:?}: a number of tokens' worth ≥ 1, like 1tok"));
    }
    if let Some(p) = s.strip_suffix('%') {
        match p.parse::<f64>() {
            Ok(v) if v > 0.0 && v <= 100.0 => Ok(SlotsArg::Percent(v)),
            _ => Err(format!("{s:?}: a percentage in (0, 100]")),
        }
    } else {
        s.parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .map(SlotsArg::Count)
            .ok_or_else(|| format!("{s:?}: a slot count ≥ 1 or a percentage like 11%"))
    }
}

/// `--shape`: one shape, or `all`.
#[derive(Clone, Debug, PartialEq)]
pub struct Shapes(pub Vec<Shape>);

fn shapes_arg(s: &str) -> Result<Shapes, String> {
    if s == "all" {
        Ok(Shapes(Shape::ALL.to_vec()))
    } else {
        Ok(Shapes(vec![s.parse::<Shape>()?]))
    }
}

/// Arguments of `ds4-bench cache`.
#[derive(clap::Args, Debug)]
pub struct CacheArgs {
    /// A routing trace recorded by `ds4 --record-trace` (JSON Lines) instead of the synthetic
    /// traces.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Cache sizes: slot counts, percentages of all the trace's experts (43 × 256 = 11,008 for
    /// Flash; `11%,22%,44%` are the sizes of the published DS4 curve), or tokens' worth of
    /// experts (`1tok` = K × layers = 258 for Flash, the smallest useful cache).
    #[arg(long, value_delimiter = ',', default_value = "1tok,5%,11%,22%,40%", value_parser = slots_arg)]
    pub slots: Vec<SlotsArg>,
    /// Tokens of each synthetic trace (43 × 6 expert uses each): a count, as `ds4 -n`. (The
    /// hidden alias `tokens` is the old name.)
    #[arg(short = 'n', long = "n-tokens", alias = "tokens", value_name = "N", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub tokens: u64,
    /// Seed of the synthetic traces.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Synthetic trace shape: recency (drifting topics, token-to-token reuse), frequency
    /// (strong stable skew), mixed, or all three.
    #[arg(long, default_value = "all", value_parser = shapes_arg)]
    pub shape: Shapes,
    /// Policies to run. [default: all]
    #[arg(long, value_delimiter = ',')]
    pub policies: Vec<PolicyKind>,
    /// One JSON object per (trace, policy, slots) on stdout; the table goes to stderr.
    #[arg(long)]
    pub json: bool,
    /// Let --plot replace an existing file.
    #[arg(long)]
    pub force: bool,
    /// Write an SVG plot (hit rate against cache size, one panel per trace) to this file (it
    /// must not exist; see --force).
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// One (trace, policy or reference, size) result.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CacheRow {
    pub trace: String,
    pub policy: String,
    pub slots: usize,
    /// slots / all the trace's experts, in %.
    pub slots_pct: f64,
    pub hit_rate: f64,
    pub hits: u64,
    pub misses: u64,
    /// Policies only (null for the references).
    pub evictions: Option<u64>,
    /// The library's default policy (`PolicyKind::DEFAULT`).
    pub default: bool,
}

/// Runs `ds4-bench cache`.
pub fn run(args: CacheArgs) -> Result<(), BenchError> {
    // Created before the simulation: an existing or unwritable path fails at once.
    let plot_out = args
        .plot
        .as_ref()
        .map(|p| {
            ds4_tools::cli::files::Output::create(p, args.force, &format!("--plot {}", p.display()))
        })
        .transpose()
        .map_err(super::io::cli_error)?;
    let traces: Vec<(String, Trace)> = match &args.trace {
        Some(p) => {
            let f = std::fs::File::open(p)
                .map_err(|e| BenchError::BadInput(format!("cannot open {}: {e}", p.display())))?;
            let t = ds4_tools::trace::read_record_trace(std::io::BufReader::new(f))
                .map_err(|e| BenchError::BadInput(format!("{}: {e}", p.display())))?;
            vec![(p.display().to_string(), t)]
        }
        None => args
            .shape
            .0
            .iter()
            .map(|&s| {
                let t = trace::synthetic(&Synth::flash(s, args.tokens as usize, args.seed));
                (format!("synthetic-{s}"), t)
            })
            .collect(),
    };
    let policies = if args.policies.is_empty() {
        PolicyKind::ALL.to_vec()
    } else {
        args.policies.clone()
    };
    let mut rows = Vec::new();
    let mut notes = String::new();
    for (name, t) in &traces {
        let cov = trace::coverage(t, 0.9);
        let mut learned: Vec<usize> = cov.iter().skip(3.min(cov.len() - 1)).copied().collect();
        learned.sort_unstable();
        let _ = writeln!(
            notes,
            "{name}: {} tokens, {} layers × {} experts, K = {}, {} uses; experts covering 90 % of a layer's uses: hash layers {:?}, learned median {} of {}",
            t.tokens,
            t.n_layers,
            t.n_experts,
            t.k,
            t.keys.len(),
            &cov[..3.min(cov.len())],
            learned[learned.len() / 2],
            t.n_experts
        );
        rows.extend(run_trace(name, t, &args.slots, &policies)?);
    }
    let table = table(&rows, &policies, &notes);
    let mut out = std::io::stdout().lock();
    let res = if args.json {
        eprint!("{table}");
        rows.iter().try_for_each(|r| {
            let line = serde_json::to_string(r).expect("rows serialise");
            writeln!(out, "{line}")
        })
    } else {
        out.write_all(table.as_bytes())
    };
    if let Err(e) = res {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(BenchError::Runtime(format!("writing stdout: {e}")));
        }
    }
    if let Some(o) = plot_out {
        o.commit(plot(&rows, &policies).as_bytes())
            .map_err(super::io::cli_error)?;
    }
    Ok(())
}

fn run_trace(
    name: &str,
    t: &Trace,
    sizes: &[SlotsArg],
    policies: &[PolicyKind],
) -> Result<Vec<CacheRow>, BenchError> {
    let total = t.total_experts();
    let mut rows = Vec::new();
    for &size in sizes {
        let slots = match size {
            SlotsArg::Count(n) => n,
            SlotsArg::Percent(p) => ((p / 100.0 * total as f64).round() as usize).max(1),
            SlotsArg::Tokens(n) => n * t.k * t.n_layers as usize,
        };
        let row = |policy: &str, hits: u64, misses: u64, evictions: Option<u64>| CacheRow {
            trace: name.to_string(),
            policy: policy.to_string(),
            slots,
            slots_pct: 100.0 * slots as f64 / total as f64,
            hit_rate: hits as f64 / (hits + misses).max(1) as f64,
            hits,
            misses,
            evictions,
            default: policy == PolicyKind::DEFAULT.name(),
        };
        for &k in policies {
            let s =
                simulate(t, slots, k).map_err(|e| BenchError::Usage(format!("--slots: {e}")))?;
            rows.push(row(
                k.name(),
                s.hits + s.dedup_hits,
                s.misses,
                Some(s.evictions),
            ));
        }
        let o = oracle_static(t, slots);
        rows.push(row("oracle-static", o.hits, o.misses, None));
        let b = belady(t, slots);
        rows.push(row("belady", b.hits, b.misses, None));
    }
    Ok(rows)
}

/// Column order: the policies, then the references.
fn columns(policies: &[PolicyKind]) -> Vec<String> {
    let mut c: Vec<String> = policies.iter().map(|k| k.name().to_string()).collect();
    c.push("oracle-static".into());
    c.push("belady".into());
    c
}

/// Hit rates in %, one block per trace, one line per size; the default policy is starred, and
/// the last column is its margin over the better of `lru` and `lfu-admit` (points).
fn table(rows: &[CacheRow], policies: &[PolicyKind], notes: &str) -> String {
    let cols = columns(policies);
    let mut s = String::new();
    s.push_str(notes);
    let mut traces: Vec<&str> = Vec::new();
    for r in rows {
        if !traces.contains(&r.trace.as_str()) {
            traces.push(&r.trace);
        }
    }
    let margin_ok = policies.contains(&PolicyKind::DEFAULT)
        && policies.contains(&PolicyKind::Lru)
        && policies.contains(&PolicyKind::LfuAdmit);
    for tr in traces {
        let _ = write!(s, "\n{tr}\n{:>7} {:>7}", "slots", "% exp");
        for c in &cols {
            let star = if c == PolicyKind::DEFAULT.name() {
                "*"
            } else {
                ""
            };
            let _ = write!(s, " {:>14}", format!("{c}{star}"));
        }
        if margin_ok {
            let _ = write!(s, " {:>16}", "default-best");
        }
        s.push('\n');
        let mut sizes: Vec<usize> = rows
            .iter()
            .filter(|r| r.trace == tr)
            .map(|r| r.slots)
            .collect();
        sizes.dedup();
        for slots in sizes {
            let get = |p: &str| {
                rows.iter()
                    .find(|r| r.trace == tr && r.slots == slots && r.policy == p)
                    .map(|r| (r.hit_rate, r.slots_pct))
            };
            let pct = get(&cols[0]).map_or(0.0, |g| g.1);
            let _ = write!(s, "{slots:>7} {pct:>6.1}%");
            for c in &cols {
                let _ = write!(s, " {:>13.1}%", get(c).map_or(f64::NAN, |g| 100.0 * g.0));
            }
            if margin_ok {
                let h = |k: PolicyKind| get(k.name()).map_or(0.0, |g| g.0);
                let m = h(PolicyKind::DEFAULT) - h(PolicyKind::Lru).max(h(PolicyKind::LfuAdmit));
                let _ = write!(s, " {:>+15.1}p", 100.0 * m);
            }
            s.push('\n');
        }
    }
    s
}

fn plot(rows: &[CacheRow], policies: &[PolicyKind]) -> String {
    let cols = columns(policies);
    let mut traces: Vec<&str> = Vec::new();
    for r in rows {
        if !traces.contains(&r.trace.as_str()) {
            traces.push(&r.trace);
        }
    }
    let panels: Vec<LinePanel> = traces
        .iter()
        .map(|tr| LinePanel {
            title: tr.to_string(),
            x_label: "cache size, % of all experts".into(),
            y_label: "hit rate".into(),
            y_max: 1.0,
            series: cols
                .iter()
                .map(|c| {
                    let pts = rows
                        .iter()
                        .filter(|r| r.trace == *tr && &r.policy == c)
                        .map(|r| (r.slots_pct, r.hit_rate))
                        .collect();
                    let reference = c == "oracle-static" || c == "belady";
                    (c.clone(), pts, reference)
                })
                .collect(),
        })
        .collect();
    line_panels(
        "ds4-bench cache: expert-cache hit rate (dashed: references from the trace)",
        &panels,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_values() {
        assert_eq!(slots_arg("11%"), Ok(SlotsArg::Percent(11.0)));
        assert_eq!(slots_arg("1211"), Ok(SlotsArg::Count(1211)));
        assert_eq!(slots_arg("2tok"), Ok(SlotsArg::Tokens(2)));
        assert!(slots_arg("0tok").is_err());
        assert!(slots_arg("0").is_err() && slots_arg("101%").is_err() && slots_arg("x").is_err());
        assert_eq!(shapes_arg("all").unwrap().0.len(), 3);
        assert!(shapes_arg("lru").is_err());
    }
}
