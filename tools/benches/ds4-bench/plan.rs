//! What one benchmark run reads: a list of batches of requests (file range -> destination offset).
//!
//! Two shapes, both built up front so every case of a run reads exactly the same bytes:
//! - `seq`: the file from offset 0 in order, `total` bytes. The destination is a ring of at most
//!   `dest_cap` bytes; each lap of the ring is one batch (a barrier between laps keeps two
//!   in-flight writes from ever landing on the same destination bytes).
//! - `expert`: the file seen as contiguous 7,077,888-byte experts (DS4's q2 expert: gate, up,
//!   down = 2,162,688 + 2,162,688 + 2,752,512 bytes), taken in a seeded random order without
//!   repeats; 6 experts per "token" form one batch of 18 slice requests, written into a ring of
//!   expert slots. Limits: no expert is read twice in a run, so `total` is capped by the file.
//!
//! [`Plan::final_segments`] says which file bytes the destination must hold after a run, which is
//! what the verifier checks.

use std::collections::{BTreeMap, HashMap};

/// Bytes of one q2 DS4 expert (gate + up + down).
pub const EXPERT_BYTES: u64 = 7_077_888;
/// The three slices of one expert, in file order: gate (IQ2_XXS), up (IQ2_XXS), down (Q2_K).
pub const EXPERT_SLICES: [u64; 3] = [2_162_688, 2_162_688, 2_752_512];
/// Routed experts used per token.
pub const EXPERTS_PER_TOKEN: u64 = 6;
/// Most tokens one expert plan holds (18 requests each: ~170 MB of plan at the cap, 7.4 TB
/// of reads): a larger `--total` is refused rather than allocated.
pub const MAX_TOKENS: u64 = 400_000;

/// Access pattern of a run.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// The whole file in order.
    Seq,
    /// Random 7,077,888-byte experts, each as its 3 slices, 6 per token.
    Expert,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Seq => "seq",
            Pattern::Expert => "expert",
        }
    }
}

/// One read: `len` bytes at `file_off` into the destination at `dest_off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub file_off: u64,
    pub len: u64,
    pub dest_off: u64,
}

impl Request {
    /// Splits into pieces of at most `chunk` bytes (in order, tiling the request exactly).
    pub fn pieces(self, chunk: u64) -> impl Iterator<Item = Request> {
        let chunk = chunk.max(1);
        let n = self.len.div_ceil(chunk);
        (0..n).map(move |i| {
            let o = i * chunk;
            Request {
                file_off: self.file_off + o,
                len: chunk.min(self.len - o),
                dest_off: self.dest_off + o,
            }
        })
    }
}

/// A plan that cannot be built from these sizes.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{pattern} pattern needs at least {need} bytes of file, file has {have}")]
    FileTooSmall {
        pattern: &'static str,
        need: u64,
        have: u64,
    },
    #[error("--total {total} bytes is below one {what} ({need} bytes)")]
    TotalTooSmall {
        total: u64,
        what: &'static str,
        need: u64,
    },
    #[error("--dest {cap} bytes is below {need} bytes (one {what})")]
    DestTooSmall {
        cap: u64,
        need: u64,
        what: &'static str,
    },
    #[error(
        "--total needs {requests} requests in one plan, more than the cap of {cap}: lower --total"
    )]
    TooManyRequests { requests: u64, cap: u64 },
    #[error("plan bug: {0}")]
    Inconsistent(String),
}

/// Everything one run reads, in submission order.
#[derive(Clone, Debug)]
pub struct Plan {
    pub pattern: Pattern,
    /// Batches in order; a case finishes one batch before starting the next.
    pub batches: Vec<Vec<Request>>,
    /// Sum of all request lengths.
    pub bytes: u64,
    /// Destination bytes the plan writes into (`[0, dest_len)`).
    pub dest_len: u64,
    /// File length the plan was built for.
    pub file_len: u64,
}

/// splitmix64: a tiny deterministic generator (no dependency; quality is ample for shuffling).
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform-enough value in `[0, n)`; `n` must be > 0.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

impl Plan {
    /// `total` bytes of the file in order, through a destination ring of at most `dest_cap`
    /// bytes (rounded down to 4 KiB so every lap starts aligned).
    pub fn seq(file_len: u64, total: u64, dest_cap: u64) -> Result<Plan, PlanError> {
        if total == 0 || file_len == 0 {
            return Err(PlanError::FileTooSmall {
                pattern: "seq",
                need: 1,
                have: file_len.min(total),
            });
        }
        let total = total.min(file_len);
        let lap = (dest_cap & !4095).min(total);
        if lap == 0 {
            return Err(PlanError::DestTooSmall {
                cap: dest_cap,
                need: 4096,
                what: "4 KiB page",
            });
        }
        let mut batches = Vec::new();
        let mut off = 0;
        while off < total {
            let len = lap.min(total - off);
            batches.push(vec![Request {
                file_off: off,
                len,
                dest_off: 0,
            }]);
            off += len;
        }
        let plan = Plan {
            pattern: Pattern::Seq,
            batches,
            bytes: total,
            dest_len: lap,
            file_len,
        };
        plan.check()?;
        Ok(plan)
    }

    /// Expert-shaped reads: `total / (6 * EXPERT_BYTES)` tokens of 6 distinct random experts
    /// (no expert twice in the run), each read as its 3 slices into a ring of expert slots.
    pub fn expert(file_len: u64, total: u64, dest_cap: u64, seed: u64) -> Result<Plan, PlanError> {
        let token_bytes = EXPERTS_PER_TOKEN * EXPERT_BYTES;
        let n_experts = file_len / EXPERT_BYTES;
        if n_experts < EXPERTS_PER_TOKEN {
            return Err(PlanError::FileTooSmall {
                pattern: "expert",
                need: token_bytes,
                have: file_len,
            });
        }
        if total < token_bytes {
            return Err(PlanError::TotalTooSmall {
                total,
                what: "token of 6 experts",
                need: token_bytes,
            });
        }
        let tokens = (total / token_bytes).min(n_experts / EXPERTS_PER_TOKEN);
        let cap_slots = dest_cap / EXPERT_BYTES;
        if cap_slots < EXPERTS_PER_TOKEN {
            return Err(PlanError::DestTooSmall {
                cap: dest_cap,
                need: token_bytes,
                what: "token of 6 expert slots",
            });
        }
        let slots = cap_slots.min(tokens * EXPERTS_PER_TOKEN);
        if tokens > MAX_TOKENS {
            return Err(PlanError::TooManyRequests {
                requests: tokens.saturating_mul(18),
                cap: MAX_TOKENS * 18,
            });
        }
        // The first tokens*6 steps of a Fisher-Yates shuffle of all expert ids, kept sparse
        // (only swapped positions are stored) so a huge file costs memory only for what is read.
        let mut swapped: HashMap<u64, u64> = HashMap::new();
        let mut rng = SplitMix(seed);
        let used = tokens * EXPERTS_PER_TOKEN;
        let mut order = Vec::with_capacity(used as usize);
        for i in 0..used {
            let j = i + rng.below(n_experts - i);
            let at_j = swapped.get(&j).copied().unwrap_or(j);
            let at_i = swapped.get(&i).copied().unwrap_or(i);
            swapped.insert(j, at_i);
            order.push(at_j);
        }
        let mut batches = Vec::with_capacity(tokens as usize);
        for t in 0..tokens {
            let mut batch = Vec::with_capacity(18);
            for j in 0..EXPERTS_PER_TOKEN {
                let k = t * EXPERTS_PER_TOKEN + j;
                let expert = order[k as usize];
                let slot = k % slots;
                let mut o = 0;
                for s in EXPERT_SLICES {
                    batch.push(Request {
                        file_off: expert * EXPERT_BYTES + o,
                        len: s,
                        dest_off: slot * EXPERT_BYTES + o,
                    });
                    o += s;
                }
            }
            batches.push(batch);
        }
        let plan = Plan {
            pattern: Pattern::Expert,
            batches,
            bytes: tokens * token_bytes,
            dest_len: slots * EXPERT_BYTES,
            file_len,
        };
        plan.check()?;
        Ok(plan)
    }

    /// Checks the invariants the cases rely on for memory safety and verification: every
    /// request inside the file and the destination, and requests of one batch never overlapping
    /// in the destination (they run concurrently).
    pub fn check(&self) -> Result<(), PlanError> {
        let mut sum = 0u64;
        for (b, batch) in self.batches.iter().enumerate() {
            let mut spans: Vec<(u64, u64)> = Vec::with_capacity(batch.len());
            for r in batch {
                let fend = r.file_off.checked_add(r.len);
                let dend = r.dest_off.checked_add(r.len);
                match (fend, dend) {
                    (Some(f), Some(d)) if f <= self.file_len && d <= self.dest_len && r.len > 0 => {
                    }
                    _ => {
                        return Err(PlanError::Inconsistent(format!(
                            "batch {b}: request {r:?} outside file ({}) or destination ({})",
                            self.file_len, self.dest_len
                        )))
                    }
                }
                spans.push((r.dest_off, r.dest_off + r.len));
                sum += r.len;
            }
            spans.sort_unstable();
            if let Some(w) = spans.windows(2).find(|w| w[0].1 > w[1].0) {
                return Err(PlanError::Inconsistent(format!(
                    "batch {b}: destination ranges {:?} and {:?} overlap",
                    w[0], w[1]
                )));
            }
        }
        if sum != self.bytes {
            return Err(PlanError::Inconsistent(format!(
                "requests sum to {sum} bytes, plan says {}",
                self.bytes
            )));
        }
        Ok(())
    }

    /// What the destination holds after the run: for each written destination range, the file
    /// offset it came from (the last write wins; partly overwritten ranges are trimmed).
    /// Sorted by destination offset, non-overlapping.
    pub fn final_segments(&self) -> Vec<Request> {
        // dest start -> (dest end, file offset of dest start)
        let mut map: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for r in self.batches.iter().flatten() {
            let (s, e) = (r.dest_off, r.dest_off + r.len);
            // Entries that may overlap [s, e): the last one starting before s, and all starting
            // in [s, e).
            let mut hit: Vec<u64> = map
                .range(..s)
                .next_back()
                .filter(|(_, &(end, _))| end > s)
                .map(|(&k, _)| k)
                .into_iter()
                .collect();
            hit.extend(map.range(s..e).map(|(&k, _)| k));
            for k in hit {
                if let Some((end, f)) = map.remove(&k) {
                    if k < s {
                        map.insert(k, (s, f));
                    }
                    if end > e {
                        map.insert(e, (end, f + (e - k)));
                    }
                }
            }
            map.insert(s, (e, r.file_off));
        }
        map.into_iter()
            .map(|(s, (e, f))| Request {
                file_off: f,
                len: e - s,
                dest_off: s,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_tile_the_request() {
        let r = Request {
            file_off: 100,
            len: 10,
            dest_off: 7,
        };
        let p: Vec<_> = r.pieces(4).collect();
        assert_eq!(p.len(), 3);
        assert_eq!(
            p[2],
            Request {
                file_off: 108,
                len: 2,
                dest_off: 15
            }
        );
        assert_eq!(p.iter().map(|x| x.len).sum::<u64>(), 10);
    }

    #[test]
    fn seq_laps_and_final_state() {
        let p = Plan::seq(10 << 20, 10 << 20, 4 << 20).unwrap();
        assert_eq!(p.batches.len(), 3);
        assert_eq!(p.dest_len, 4 << 20);
        assert_eq!(p.bytes, 10 << 20);
        // Lap 3 is shorter (2 MiB): it overwrites the first half of lap 2.
        let f = p.final_segments();
        assert_eq!(
            f,
            vec![
                Request {
                    file_off: 8 << 20,
                    len: 2 << 20,
                    dest_off: 0
                },
                Request {
                    file_off: 6 << 20,
                    len: 2 << 20,
                    dest_off: 2 << 20
                },
            ]
        );
    }

    #[test]
    fn expert_plan_shape() {
        let file = 100 * EXPERT_BYTES + 123;
        let p = Plan::expert(file, 60 * EXPERT_BYTES, 20 * EXPERT_BYTES, 1).unwrap();
        assert_eq!(p.batches.len(), 10);
        assert!(p.batches.iter().all(|b| b.len() == 18));
        assert_eq!(p.bytes, 60 * EXPERT_BYTES);
        assert_eq!(p.dest_len, 20 * EXPERT_BYTES);
        // No expert twice.
        let mut experts: Vec<u64> = p
            .batches
            .iter()
            .flatten()
            .filter(|r| r.file_off % EXPERT_BYTES == 0)
            .map(|r| r.file_off / EXPERT_BYTES)
            .collect();
        experts.sort_unstable();
        experts.dedup();
        assert_eq!(experts.len(), 60);
        // 20 slots x 3 slices in the final state.
        assert_eq!(p.final_segments().len(), 60);
        // Different seeds, different orders.
        let q = Plan::expert(file, 60 * EXPERT_BYTES, 20 * EXPERT_BYTES, 2).unwrap();
        assert_ne!(p.batches, q.batches);
    }

    #[test]
    fn expert_plan_errors() {
        assert!(Plan::expert(5 * EXPERT_BYTES, 1 << 40, 1 << 30, 0).is_err());
        assert!(Plan::expert(100 * EXPERT_BYTES, EXPERT_BYTES, 1 << 30, 0).is_err());
        assert!(Plan::expert(100 * EXPERT_BYTES, 1 << 30, EXPERT_BYTES, 0).is_err());
        // Total beyond the file: capped, every expert at most once.
        let p = Plan::expert(13 * EXPERT_BYTES, 1 << 40, 1 << 40, 0).unwrap();
        assert_eq!(p.batches.len(), 2);
    }

    #[test]
    fn expert_plan_on_a_huge_file_allocates_only_what_it_reads() {
        let p = Plan::expert(1 << 50, 60 * EXPERT_BYTES, 1 << 30, 5).unwrap();
        assert_eq!(p.batches.len(), 10);
        let mut ids: Vec<u64> = p
            .batches
            .iter()
            .flatten()
            .filter(|r| r.file_off % EXPERT_BYTES == 0)
            .map(|r| r.file_off / EXPERT_BYTES)
            .collect();
        assert!(ids.iter().all(|&e| e < (1 << 50) / EXPERT_BYTES));
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 60, "no expert twice");
        assert!(matches!(
            Plan::expert(1 << 50, 1 << 50, 1 << 30, 5),
            Err(PlanError::TooManyRequests { .. })
        ));
    }

    #[test]
    fn check_catches_overlap() {
        let mut p = Plan::expert(100 * EXPERT_BYTES, 12 * EXPERT_BYTES, 1 << 30, 0).unwrap();
        p.batches[0][1].dest_off = p.batches[0][0].dest_off + 1;
        assert!(p.check().is_err());
    }
}
