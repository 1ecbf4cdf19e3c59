//! Which parts of a generated file hold data and which are holes.
//!
//! Holes cost no disk and read as zeros. The default for `flash` is to leave the routed experts
//! (72.56 GiB) as holes; tests that need real bytes far into the file fill a few layers, or a
//! few experts of a few layers, so that a test writes megabytes, not gigabytes.

use super::{GenError, Generator};
use crate::model::ExpertKind;

/// What is left as holes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holes {
    /// Nothing: every byte is written.
    None,
    /// Routed expert tensors (except `--fill-layers`).
    Experts,
    /// Everything except the routed tensors of `--fill-layers` and the hash layers' `tid2eid`
    /// tables (a few MiB): zeros there would route every token to expert 0 six times, which the
    /// decoder rightly refuses, so a file of holes still runs.
    All,
}

/// The parts of one tensor that get written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Region {
    Whole,
    Hole,
    /// Only these experts (sorted, distinct) of a routed tensor.
    Experts(Vec<u64>),
}

/// The fill policy of a generated file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FillPlan {
    pub holes: Holes,
    /// Routed tensors of these layers are written even when `holes` says otherwise.
    pub fill_layers: Vec<u64>,
    /// When set, a written routed tensor gets only these experts (the rest are holes).
    pub fill_experts: Option<Vec<u64>>,
}

/// Most entries a list may expand to (a range like `0-4294967295` must not allocate GiBs).
pub const MAX_LIST: u64 = 1 << 16;

/// Parses `1,3,5-7` into sorted distinct numbers.
pub fn parse_list(list: &str) -> Result<Vec<u64>, GenError> {
    let bad = |why: String| GenError::BadList {
        list: list.to_string(),
        why,
    };
    let num = |s: &str| {
        s.trim()
            .parse::<u64>()
            .map_err(|_| bad(format!("{s:?} is not a number")))
    };
    let mut out = Vec::new();
    for part in list.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let n = num(part)?;
                (n, n)
            }
        };
        if lo > hi {
            return Err(bad(format!("range {lo}-{hi} is reversed")));
        }
        if hi - lo >= MAX_LIST || out.len() as u64 + (hi - lo) >= MAX_LIST {
            return Err(bad(format!("more than {MAX_LIST} entries")));
        }
        out.extend(lo..=hi);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

impl Holes {
    /// The name `--holes` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Holes::None => "none",
            Holes::Experts => "experts",
            Holes::All => "all",
        }
    }

    fn from_name(s: &str) -> Option<Self> {
        [Holes::None, Holes::Experts, Holes::All]
            .into_iter()
            .find(|h| h.as_str() == s)
    }
}

/// `[0, 1, 2, 5, 7, 8]` -> `0-2,5,7-8` (what [`parse_list`] reads back).
pub fn format_list(list: &[u64]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < list.len() {
        let mut j = i;
        while j + 1 < list.len() && list[j + 1] == list[j].wrapping_add(1) {
            j += 1;
        }
        parts.push(if i == j {
            list[i].to_string()
        } else {
            format!("{}-{}", list[i], list[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

impl FillPlan {
    /// The plan as the generated file records it (metadata `ds4stream.gen.fill`), so a reader
    /// can tell holes from data: `holes=experts;layers=41-42;experts=0,200,255` (`experts=`
    /// only when set).
    pub fn spec(&self) -> String {
        let mut s = format!(
            "holes={};layers={}",
            self.holes.as_str(),
            format_list(&self.fill_layers)
        );
        if let Some(e) = &self.fill_experts {
            s.push_str(";experts=");
            s.push_str(&format_list(e));
        }
        s
    }

    /// Parses [`FillPlan::spec`]'s format.
    pub fn from_spec(spec: &str) -> Result<Self, GenError> {
        let bad = |why: String| GenError::BadList {
            list: spec.to_string(),
            why,
        };
        let mut plan = FillPlan::full();
        let mut holes = None;
        for part in spec.split(';') {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("{part:?} is not key=value")))?;
            match k {
                "holes" => {
                    holes = Some(
                        Holes::from_name(v)
                            .ok_or_else(|| bad(format!("unknown holes value {v:?}")))?,
                    )
                }
                "layers" if v.is_empty() => plan.fill_layers.clear(),
                "layers" => plan.fill_layers = parse_list(v)?,
                "experts" => plan.fill_experts = Some(parse_list(v)?),
                _ => return Err(bad(format!("unknown key {k:?}"))),
            }
        }
        plan.holes = holes.ok_or_else(|| bad("no holes= part".to_string()))?;
        Ok(plan)
    }

    /// Every byte written.
    pub fn full() -> Self {
        Self {
            holes: Holes::None,
            fill_layers: Vec::new(),
            fill_experts: None,
        }
    }

    /// Holes as given, no filled layers.
    pub fn with_holes(holes: Holes) -> Self {
        Self {
            holes,
            ..Self::full()
        }
    }

    /// Which part of tensor `name` is written.
    pub fn region(&self, name: &str) -> Region {
        match ExpertKind::parse_tensor_name(name) {
            Some((layer, _)) => {
                let written =
                    self.holes == Holes::None || self.fill_layers.contains(&u64::from(layer));
                match (&self.fill_experts, written) {
                    (_, false) => Region::Hole,
                    (None, true) => Region::Whole,
                    (Some(list), true) => Region::Experts(list.clone()),
                }
            }
            None if self.holes == Holes::All && !name.ends_with("ffn_gate_tid2eid.weight") => {
                Region::Hole
            }
            None => Region::Whole,
        }
    }

    /// Fills `buf` with bytes `[offset, offset + len)` of tensor `name` as the file generated
    /// with this plan holds them: generator bytes where written, zeros in holes.
    pub fn file_bytes(
        &self,
        generator: &Generator,
        name: &str,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), GenError> {
        match self.region(name) {
            Region::Whole => generator.tensor_bytes(name, offset, buf),
            Region::Hole => {
                generator.check_range(name, offset, buf.len() as u64)?;
                buf.fill(0);
                Ok(())
            }
            Region::Experts(list) => {
                let kind = ExpertKind::parse_tensor_name(name)
                    .map(|(_, k)| k)
                    .ok_or_else(|| GenError::UnknownTensor {
                        name: name.to_string(),
                    })?;
                generator.check_range(name, offset, buf.len() as u64)?;
                // Non-zero: routed dims were validated when the generator was built.
                let eb = generator.expert_bytes(kind).max(1);
                let mut pos = 0usize;
                while pos < buf.len() {
                    let abs = offset + pos as u64;
                    let e = abs / eb;
                    let n = ((e + 1) * eb - abs).min((buf.len() - pos) as u64) as usize;
                    if list.binary_search(&e).is_ok() {
                        generator.tensor_bytes(name, abs, &mut buf[pos..pos + n])?;
                    } else {
                        buf[pos..pos + n].fill(0);
                    }
                    pos += n;
                }
                Ok(())
            }
        }
    }
}
