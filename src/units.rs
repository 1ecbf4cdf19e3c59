//! Numbers for people: byte sizes with a binary unit and digit grouping, and byte sizes on the
//! command line (`4GiB`, `32GB`, `1MiB`, `4096`). One place, so every program parses and prints
//! sizes the same way.
//!
//! Why our own parser: the flags take typed sizes, and a wrong unit must be a usage error (exit 2)
//! that names the bad text, not a silent misread. Units are strict: `KB/MB/GB/TB` are powers of
//! 1000, `KiB/MiB/GiB/TiB` (and the shorthands `K/M/G/T`) powers of 1024. Case-insensitive;
//! fractions (`1.5GiB`, `107.87GiB`, up to 18 decimals) are accepted and rounded down to whole
//! bytes, so a size quoted from a spec sheet is never more than was written.

/// Bytes with a binary unit, two decimals: `512 B`, `1.50 KiB`, `6.75 MiB`, `72.56 GiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// `1234567` -> `1,234,567`.
pub fn group_digits(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(7077888), "7,077,888");
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.50 KiB");
        assert_eq!(human_bytes(7077888), "6.75 MiB");
        assert_eq!(human_bytes(1536 << 20), "1.50 GiB");
        assert_eq!(human_bytes(77913391104), "72.56 GiB");
        assert_eq!(human_bytes(86_720_111_488), "80.76 GiB");
        assert_eq!(human_bytes(3 << 50), "3.00 PiB");
    }
}

/// Why a size string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("empty size")]
    Empty,
    #[error("size {text:?}: {why}")]
    Bad { text: String, why: &'static str },
    #[error("size {text:?} overflows 64 bits")]
    Overflow { text: String },
}

/// Parses a byte size such as `4GiB`, `32GB`, `7077888`, `1.5MiB`; a fraction of a byte is
/// dropped (`107.87GiB` = floor(107.87 × 2^30) = 115,824,530,554 B).
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(SizeError::Empty);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: String = num.chars().filter(|&c| c != '_').collect();
    if num.is_empty() {
        return Err(SizeError::Bad {
            text: text.into(),
            why: "expected a number, e.g. 4GiB, 32GB, 1048576",
        });
    }
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => {
            return Err(SizeError::Bad {
                text: text.into(),
                why: "unknown unit (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
            })
        }
    };
    let overflow = || SizeError::Overflow { text: text.into() };
    match num.split_once('.') {
        None => {
            let n: u64 = num.parse().map_err(|_| overflow())?;
            n.checked_mul(mult).ok_or_else(overflow)
        }
        Some((int, frac)) => {
            if frac.contains('.') || frac.len() > 18 {
                return Err(SizeError::Bad {
                    text: text.into(),
                    why: "malformed fraction (at most 18 decimals)",
                });
            }
            let int: u64 = if int.is_empty() {
                0
            } else {
                int.parse().map_err(|_| overflow())?
            };
            // At most 18 digits: below 10^18, so the product with a unit (<= 2^40) fits u128.
            let frac_digits: u128 = if frac.is_empty() {
                0
            } else {
                frac.parse().map_err(|_| overflow())?
            };
            let scale = 10u128.pow(frac.len() as u32);
            let whole = (int as u128)
                .checked_mul(mult as u128)
                .ok_or_else(overflow)?;
            // Rounded down: the fraction of a byte is dropped.
            let part = frac_digits * mult as u128;
            u64::try_from(whole + part / scale).map_err(|_| overflow())
        }
    }
}

/// A size for display: the largest binary unit that divides it exactly, else bytes
/// (`7077888` prints as `6912KiB`, `4294967296` as `4GiB`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Size(pub u64);

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0;
        for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
            if n != 0 && n % (1u64 << shift) == 0 {
                return write!(f, "{}{unit}", n >> shift);
            }
        }
        write!(f, "{n}B")
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("4gib"), Ok(4 << 30));
        assert_eq!(parse_size("32GB"), Ok(32_000_000_000));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("8M"), Ok(8 << 20));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert_eq!(parse_size("6.75MiB"), Ok(7_077_888));
        assert_eq!(parse_size("1_000"), Ok(1000));
    }

    #[test]
    fn fractions_round_down() {
        // docs/PLANNER.md's Strix Halo figure: floor(107.87 * 2^30).
        assert_eq!(parse_size("107.87GiB"), Ok(115_824_530_554));
        assert_eq!(parse_size("1.3B"), Ok(1));
        assert_eq!(parse_size("0.5"), Ok(0));
        assert_eq!(parse_size("1.0000001KiB"), Ok(1024));
        assert_eq!(parse_size("2.9999999999GB"), Ok(2_999_999_999));
        assert_eq!(parse_size(".5MiB"), Ok(512 << 10));
        assert_eq!(parse_size("1.123456789012345678TiB"), Ok(1_235_253_802_822));
    }

    #[test]
    fn rejects() {
        assert_eq!(parse_size(""), Err(SizeError::Empty));
        assert!(parse_size("GiB").is_err());
        assert!(parse_size("4 parsecs").is_err());
        assert!(parse_size("1.1234567890123456789GiB").is_err());
        assert!(parse_size("1.2.3MiB").is_err());
        assert!(matches!(
            parse_size("99999999999TiB"),
            Err(SizeError::Overflow { .. })
        ));
        assert!(matches!(
            parse_size("99999999999999999999999"),
            Err(SizeError::Overflow { .. })
        ));
    }

    #[test]
    fn display() {
        assert_eq!(Size(4 << 30).to_string(), "4GiB");
        assert_eq!(Size(7_077_888).to_string(), "6912KiB");
        assert_eq!(Size(1000).to_string(), "1000B");
    }
}

/// Available memory (Linux `MemAvailable`), for defaults sized to the machine; `None` where
/// the OS does not say.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}
