//! Routing traces: which experts each (token, layer) used. A seeded synthetic generator shaped
//! like DS4's published routing (the reader of `ds4 --record-trace` files is `ds4_tools::trace`).
//!
//! Why synthetic: no recorded DS4 Flash trace is in this repository, and cache policies need
//! traces with known character to be compared. The generator follows ../shared/DS4_FACTS.md:
//! - hash layers (the first 3) pick 6 distinct experts from a hash of (layer, token id), so
//!   they are near uniform over the 256 and repeat only when the token id repeats (token ids
//!   follow a Zipf law over the vocabulary, as text does);
//! - learned layers draw from a mixture of a per-layer Zipf popularity (skew varying by layer)
//!   and the current *topic's* Zipf popularity, whose hot set is a different permutation of the
//!   experts for every (topic, layer) ("topics barely share hot sets");
//! - topics change at random (mean run length per shape), popularity therefore drifts, and with
//!   probability `reuse` an expert of the previous token at the same layer is used again
//!   ("adjacent tokens share some experts").
//!
//! Shapes: `recency` (weak global skew, many short-lived topics, strong token-to-token reuse:
//! what LRU likes), `frequency` (strong stable skew, few topics, little reuse: what frequency
//! pinning likes) and `mixed` between them. The numbers are assumptions, not fits to a real
//! trace; [`coverage`] prints how many experts cover 90 % of a layer's uses so they can be
//! compared with the published "a popularity list covers median 138 of 256 per layer".
//! Deterministic: the same parameters give the same trace on every machine (splitmix64, f64
//! arithmetic only in table building).

use super::ExpertKey;
use std::fmt;
use std::str::FromStr;

/// A routing trace: for each step (token, layer) in order, the experts used.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    pub n_layers: u16,
    pub n_experts: u16,
    /// Most experts one step uses (K).
    pub k: usize,
    pub tokens: usize,
    /// Every step's keys, concatenated (token-major, then layer).
    pub keys: Vec<ExpertKey>,
    /// Step `i` is `keys[starts[i]..starts[i + 1]]`.
    pub starts: Vec<usize>,
}

impl Trace {
    /// An empty trace (no steps) of `n_layers` × `n_experts`; steps come from [`Trace::push_step`]
    /// (the trace readers of the tools build one this way).
    pub fn new(n_layers: u16, n_experts: u16) -> Self {
        Trace {
            n_layers,
            n_experts,
            starts: vec![0],
            ..Trace::default()
        }
    }
    /// Appends one step (one token's experts at one layer); `k` grows to the step's size.
    pub fn push_step(&mut self, keys: impl IntoIterator<Item = ExpertKey>) {
        self.keys.extend(keys);
        let n = self.keys.len() - self.starts[self.starts.len() - 1];
        self.k = self.k.max(n);
        self.starts.push(self.keys.len());
    }
    /// The steps, in order.
    pub fn steps(&self) -> impl Iterator<Item = &[ExpertKey]> + '_ {
        self.starts.windows(2).map(|w| &self.keys[w[0]..w[1]])
    }
    /// layers × experts: every key the trace could use.
    pub fn total_experts(&self) -> usize {
        self.n_layers as usize * self.n_experts as usize
    }
    /// A dense index of `key` in `0..total_experts()`.
    pub fn index(&self, key: ExpertKey) -> usize {
        key.layer as usize * self.n_experts as usize + key.expert as usize
    }
}

/// The character of a synthetic trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Shape {
    Recency,
    Frequency,
    Mixed,
}

impl Shape {
    pub const ALL: [Shape; 3] = [Shape::Recency, Shape::Mixed, Shape::Frequency];
    pub fn name(self) -> &'static str {
        match self {
            Shape::Recency => "recency",
            Shape::Frequency => "frequency",
            Shape::Mixed => "mixed",
        }
    }
    /// (global weight, base skew, topic skew, topics, mean topic run in tokens, reuse).
    fn knobs(self) -> (f64, f64, f64, u64, u64, f64) {
        match self {
            Shape::Recency => (0.15, 0.6, 1.2, 100_000, 48, 0.5),
            Shape::Mixed => (0.5, 0.9, 1.1, 64, 96, 0.2),
            Shape::Frequency => (0.8, 1.1, 1.0, 16, 24, 0.03),
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Shape {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Shape::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown trace shape {s:?} (recency, frequency, mixed)"))
    }
}

/// Parameters of [`synthetic`]. `Synth::flash(shape, tokens, seed)` is the DS4 Flash shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Synth {
    pub shape: Shape,
    pub tokens: usize,
    pub seed: u64,
    pub layers: u16,
    pub experts: u16,
    pub k: usize,
    pub hash_layers: u16,
    pub vocab: u32,
}

impl Synth {
    /// 43 layers, 256 experts, K = 6, 3 hash layers, vocabulary 129,280.
    pub fn flash(shape: Shape, tokens: usize, seed: u64) -> Self {
        Synth {
            shape,
            tokens,
            seed,
            layers: 43,
            experts: 256,
            k: 6,
            hash_layers: 3,
            vocab: 129_280,
        }
    }
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Cumulative Zipf(s) weights over ranks 0..n.
fn zipf_cdf(n: usize, s: f64) -> Vec<f64> {
    let mut acc = 0.0;
    let mut v: Vec<f64> = (1..=n)
        .map(|r| {
            acc += (r as f64).powf(-s);
            acc
        })
        .collect();
    let total = acc;
    v.iter_mut().for_each(|x| *x /= total);
    v
}

fn draw(cdf: &[f64], u: f64) -> usize {
    cdf.partition_point(|&c| c < u).min(cdf.len() - 1)
}

/// A pseudo-random bijection of `0..n` (n a power of two) keyed by `h`: rank → expert.
fn permute(rank: usize, n: usize, h: u64) -> usize {
    let m = n - 1;
    let mut x = rank;
    for round in 0..3 {
        let k = mix(h ^ round);
        x = (x
            .wrapping_mul((k as usize) | 1)
            .wrapping_add((k >> 32) as usize))
            & m;
        x ^= x >> (n.trailing_zeros() / 2).max(1);
    }
    x & m
}

/// Generates the synthetic trace of `p`. Deterministic in `p`.
pub fn synthetic(p: &Synth) -> Trace {
    let (g, s_base, s_topic, n_topics, run, reuse) = p.shape.knobs();
    let e = p.experts as usize;
    assert!(
        e.is_power_of_two() && p.k <= e,
        "experts: a power of two ≥ k"
    );
    let mut rng = Rng(p.seed ^ 0x5eed_0000_d5f4);
    let vocab_cdf = zipf_cdf(p.vocab as usize, 1.0);
    // Per-layer skew varies by ±30 % around the shape's base skew.
    let base_cdf: Vec<Vec<f64>> = (0..p.layers)
        .map(|l| {
            let jitter = (mix(p.seed ^ 0xb45e ^ l as u64) % 1000) as f64 / 1000.0;
            zipf_cdf(e, s_base * (0.7 + 0.6 * jitter))
        })
        .collect();
    let topic_cdf = zipf_cdf(e, s_topic);
    let mut t = Trace::new(p.layers, p.experts);
    let mut topic = 0u64;
    let mut prev: Vec<Vec<u16>> = vec![Vec::new(); p.layers as usize];
    let mut cur: Vec<u16> = Vec::with_capacity(p.k);
    for _ in 0..p.tokens {
        if rng.below(run) == 0 {
            topic = rng.below(n_topics);
        }
        let rank = draw(&vocab_cdf, rng.unit()) as u64;
        let id = if rng.unit() < 0.5 {
            mix(rank ^ p.seed)
        } else {
            mix(rank ^ mix(topic + 1) ^ p.seed)
        } % p.vocab as u64;
        for l in 0..p.layers {
            cur.clear();
            if l < p.hash_layers {
                let mut h = Rng(mix(id ^ ((l as u64) << 40) ^ p.seed));
                while cur.len() < p.k {
                    let x = h.below(e as u64) as u16;
                    if !cur.contains(&x) {
                        cur.push(x);
                    }
                }
            } else {
                for &x in &prev[l as usize] {
                    if cur.len() < p.k && rng.unit() < reuse && !cur.contains(&x) {
                        cur.push(x);
                    }
                }
                let mut tries = 0;
                while cur.len() < p.k {
                    tries += 1;
                    let x = if tries > 10_000 {
                        rng.below(e as u64) as usize
                    } else if rng.unit() < g {
                        let h = mix(p.seed ^ 0xba5e ^ l as u64);
                        permute(draw(&base_cdf[l as usize], rng.unit()), e, h)
                    } else {
                        let h = mix(p.seed ^ mix(topic) ^ ((l as u64) << 32));
                        permute(draw(&topic_cdf, rng.unit()), e, h)
                    } as u16;
                    if !cur.contains(&x) {
                        cur.push(x);
                    }
                }
            }
            t.push_step(cur.iter().map(|&x| ExpertKey::new(l, x)));
            prev[l as usize].clone_from(&cur);
        }
        t.tokens += 1;
    }
    t
}

/// For each layer, how many of its experts cover `frac` of that layer's uses (most used first).
pub fn coverage(t: &Trace, frac: f64) -> Vec<usize> {
    let mut counts = vec![vec![0u64; t.n_experts as usize]; t.n_layers as usize];
    for k in &t.keys {
        counts[k.layer as usize][k.expert as usize] += 1;
    }
    counts
        .into_iter()
        .map(|mut c| {
            let total: u64 = c.iter().sum();
            c.sort_unstable_by(|a, b| b.cmp(a));
            let mut acc = 0u64;
            c.iter()
                .take_while(|&&x| {
                    let before = acc;
                    acc += x;
                    (before as f64) < frac * total as f64
                })
                .count()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_shaped() {
        let p = Synth::flash(Shape::Mixed, 50, 7);
        let a = synthetic(&p);
        assert_eq!(a, synthetic(&p));
        assert_ne!(a, synthetic(&Synth { seed: 8, ..p }));
        assert_eq!(a.tokens, 50);
        assert_eq!(a.starts.len(), 50 * 43 + 1);
        assert_eq!(a.k, 6);
        for step in a.steps() {
            let mut e: Vec<u16> = step.iter().map(|k| k.expert).collect();
            e.sort_unstable();
            e.dedup();
            assert_eq!(e.len(), 6, "distinct experts per step");
        }
    }

    #[test]
    fn hash_layers_flatter_than_learned() {
        let t = synthetic(&Synth::flash(Shape::Frequency, 2000, 1));
        let cov = coverage(&t, 0.5);
        let hash = cov[..3].iter().sum::<usize>() / 3;
        let learned = cov[3..].iter().sum::<usize>() / 40;
        assert!(hash > 2 * learned, "hash {hash} vs learned {learned}");
    }

    #[test]
    fn permute_is_a_bijection() {
        for h in [0u64, 1, 99] {
            let mut seen: Vec<usize> = (0..256).map(|r| permute(r, 256, h)).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..256).collect::<Vec<_>>());
        }
    }
}
