//! The reader of `ds4 --record-trace` files (JSON Lines, docs/MOE_STACK.md): one object per
//! (token, layer), `{"token": i, "id": t, "layer": l, "experts": [...], "weights": [...]}`.
//! In the tools, not the library, because it needs serde_json. `id` and `weights` are accepted and not used; unknown
//! fields are ignored. Steps keep the file's order.
//!
//! Limits: the number of experts per layer is taken as the largest id seen + 1 (a trace does not
//! say how many the model has), so "fractions of all experts" mean of those the trace could see.

use ds4_stream::expert_cache::trace::Trace;
use ds4_stream::expert_cache::ExpertKey;
use std::io::BufRead;

/// Most lines read (about 43 × 6 per token: 2 million tokens).
const MAX_LINES: usize = 100_000_000;

/// Why a trace file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("reading the trace: {0}")]
    Io(#[from] std::io::Error),
    #[error("line {line}: {msg}")]
    Line { line: usize, msg: String },
    #[error("the trace holds no steps")]
    Empty,
}

#[derive(serde::Deserialize)]
struct Record {
    token: u64,
    layer: u16,
    experts: Vec<u16>,
}

/// Reads a record-trace from `r`. Blank lines are skipped; a bad line is an error naming it.
pub fn read_record_trace(r: impl BufRead) -> Result<Trace, TraceError> {
    let mut t = Trace::new(0, 0);
    let mut last_token = None;
    let (mut max_layer, mut max_expert) = (0u16, 0u16);
    for (i, line) in r.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |msg: String| TraceError::Line { line: i + 1, msg };
        if i >= MAX_LINES {
            return Err(bad(format!("more than {MAX_LINES} lines")));
        }
        let rec: Record = serde_json::from_str(&line).map_err(|e| bad(e.to_string()))?;
        if rec.experts.is_empty() {
            return Err(bad("no experts".into()));
        }
        for (j, e) in rec.experts.iter().enumerate() {
            if rec.experts[..j].contains(e) {
                return Err(bad(format!("expert {e} twice in one step")));
            }
        }
        if last_token != Some(rec.token) {
            t.tokens += 1;
            last_token = Some(rec.token);
        }
        max_layer = max_layer.max(rec.layer);
        max_expert = max_expert.max(rec.experts.iter().copied().max().unwrap_or(0));
        t.push_step(rec.experts.iter().map(|&e| ExpertKey::new(rec.layer, e)));
    }
    if t.keys.is_empty() {
        return Err(TraceError::Empty);
    }
    t.n_layers = max_layer + 1;
    t.n_experts = max_expert.saturating_add(1);
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_steps_and_rejects_bad_lines() {
        let text = concat!(
            r#"{"token": 0, "id": 17, "layer": 0, "experts": [3, 1], "weights": [0.9, 0.6]}"#,
            "\n",
            r#"{"token": 0, "id": 17, "layer": 1, "experts": [2, 0], "weights": [1.0, 0.5]}"#,
            "\n\n",
            r#"{"token": 1, "id": 5, "layer": 0, "experts": [7, 1], "weights": [1.0, 0.5]}"#,
            "\n"
        );
        let t = read_record_trace(text.as_bytes()).unwrap();
        assert_eq!((t.tokens, t.n_layers, t.n_experts, t.k), (2, 2, 8, 2));
        assert_eq!(t.steps().count(), 3);
        assert_eq!(t.keys[2], ExpertKey::new(1, 2));
        let e = read_record_trace(&br#"{"token": 0, "layer": 0, "experts": [1, 1]}"#[..]);
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("line 1: expert 1 twice"));
        let e = read_record_trace(&b"\n{\"token\": 0}\n"[..]).unwrap_err();
        assert!(e.to_string().starts_with("line 2:"), "{e}");
        assert!(matches!(
            read_record_trace(&b"\n"[..]),
            Err(TraceError::Empty)
        ));
    }
}
