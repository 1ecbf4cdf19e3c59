//! Which experts to read before the first token (`--ssd-streaming-preload-experts`): the most
//! used ones of a popularity list — `layer expert hits` per line, as the C engine's popularity
//! files have it — or of a recorded routing trace (counted by the caller, which parses JSON).

use super::DecodeError;
use crate::expert_cache::ExpertKey;
use crate::model::Ds4Model;
use std::collections::HashMap;

/// Parses `layer expert hits` lines (whitespace-separated; `#` comments and blank lines
/// skipped). Duplicate keys add up. Every key is checked against the model.
pub fn parse_popularity(
    text: &str,
    what: &str,
    model: &Ds4Model,
) -> Result<Vec<(ExpertKey, u64)>, DecodeError> {
    let mut counts: HashMap<ExpertKey, u64> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = |why: String| DecodeError::Input {
            what: format!("{what} line {}", i + 1),
            why,
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 3 {
            return Err(bad(format!("{line:?}: expected `layer expert hits`")));
        }
        let num = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| bad(format!("{s:?} is not a number")))
        };
        let (l, e, h) = (num(f[0])?, num(f[1])?, num(f[2])?);
        let key = checked_key(l, e, model).map_err(bad)?;
        *counts.entry(key).or_default() += h;
    }
    Ok(counts.into_iter().collect())
}

/// `(layer, expert)` as a key, when the model has it.
pub fn checked_key(layer: u64, expert: u64, model: &Ds4Model) -> Result<ExpertKey, String> {
    if layer >= model.layers.len() as u64 || expert >= model.shape.n_expert {
        return Err(format!(
            "expert {expert} of layer {layer} is not in the model ({} layers of {} experts)",
            model.layers.len(),
            model.shape.n_expert
        ));
    }
    Ok(ExpertKey::new(layer as u16, expert as u16))
}

/// The `n` most used keys (most hits first, ties by key), skipping layers below `skip_layers`
/// (those are resident anyway).
pub fn most_used(
    mut counts: Vec<(ExpertKey, u64)>,
    n: usize,
    skip_layers: usize,
) -> Vec<ExpertKey> {
    counts.retain(|(k, h)| *h > 0 && (k.layer as usize) >= skip_layers);
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    counts.into_iter().take(n).map(|(k, _)| k).collect()
}
