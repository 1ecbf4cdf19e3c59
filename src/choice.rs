//! Named values: the library's small enums that a user picks by name (`--scale demo`,
//! `--holes experts`, `--quant q4`, `--platform windows`), with the names and one-line helps
//! in one place. The library parses nothing from a command line; the tools build their clap
//! value parsers on [`Choice`] (`ds4_tools::cli::choice`), so `--help` lists exactly these
//! names and helps, in this order.

use crate::generate::{Holes, Quant, Scale};
use crate::plan::Platform;

/// An enum chosen by name.
pub trait Choice: Copy + Sized + 'static {
    /// Every value, in the order help lists them.
    const ALL: &'static [Self];
    /// The name a user types (lowercase).
    fn name(self) -> &'static str;
    /// What the value means, on one line (`None`: the name says it).
    fn help(self) -> Option<&'static str>;
    /// The value called `name` (exact match), if any.
    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| c.name() == name)
    }
}

impl Choice for Scale {
    const ALL: &'static [Self] = &[Scale::Tiny, Scale::Demo, Scale::Flash];
    fn name(self) -> &'static str {
        self.as_str()
    }
    fn help(self) -> Option<&'static str> {
        Some(match self {
            Scale::Tiny => {
                "A few MiB: 6 layers (3 hash), embedding 256, 16 experts, FF 256, vocab 512"
            }
            Scale::Demo => {
                "540 MiB of experts: 10 layers (3 hash), embedding 1024, 128 experts, FF 512"
            }
            Scale::Flash => {
                "The exact DeepSeek V4 Flash shapes (~81 GiB; experts as holes by default)"
            }
        })
    }
}

impl Choice for Holes {
    const ALL: &'static [Self] = &[Holes::None, Holes::Experts, Holes::All];
    fn name(self) -> &'static str {
        match self {
            Holes::None => "none",
            Holes::Experts => "experts",
            Holes::All => "all",
        }
    }
    fn help(self) -> Option<&'static str> {
        Some(match self {
            Holes::None => "Nothing: every byte is written",
            Holes::Experts => "Routed expert tensors (except `--fill-layers`)",
            Holes::All => {
                "Everything except the routed tensors of `--fill-layers` and the hash layers' \
                 `tid2eid` tables (a few MiB): zeros there would route every token to expert 0 \
                 six times, which the decoder rightly refuses, so a file of holes still runs"
            }
        })
    }
}

impl Choice for Quant {
    const ALL: &'static [Self] = &[Quant::Q2, Quant::Q4];
    fn name(self) -> &'static str {
        match self {
            Quant::Q2 => "q2",
            Quant::Q4 => "q4",
        }
    }
    fn help(self) -> Option<&'static str> {
        Some(match self {
            Quant::Q2 => {
                "gate/up IQ2_XXS, down Q2_K (the q2 imatrix file users run; 6.75 MiB per Flash \
                 expert)"
            }
            Quant::Q4 => "gate/up/down Q4_K (13.5 MiB per Flash expert)",
        })
    }
}

impl Choice for Platform {
    const ALL: &'static [Self] = &[Platform::Linux, Platform::Windows];
    fn name(self) -> &'static str {
        self.as_str()
    }
    fn help(self) -> Option<&'static str> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trips<T: Choice + PartialEq + std::fmt::Debug>() {
        for &c in T::ALL {
            assert_eq!(T::from_name(c.name()), Some(c));
        }
        assert_eq!(T::from_name("nope"), None);
    }

    #[test]
    fn names_round_trip() {
        round_trips::<Scale>();
        round_trips::<Holes>();
        round_trips::<Quant>();
        round_trips::<Platform>();
    }
}
