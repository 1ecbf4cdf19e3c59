//! The environment knobs' parsers (`DS4_RAMP`, `DS4_COPY_THREAD`, `DS4_COPY_STREAMS`,
//! `DS4_EVENT_SPIN_US`, `DS4_HANDOFF_SPIN_US`): one place, so every switch reads `on` / `off`
//! the same way and a value that is not one is ignored the same way (the built-in default
//! applies; a knob is a tuning aid, never a way to fail a run).

use std::time::Duration;

/// An on/off switch: `on`, `1`, `true`, `yes` / `off`, `0`, `false`, `no` (case-insensitive,
/// blanks trimmed); `None` when unset or anything else.
pub(crate) fn env_switch(name: &str) -> Option<bool> {
    parse_switch(&std::env::var(name).ok()?)
}

/// A whole number (blanks trimmed); `None` when unset or not a number.
pub(crate) fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

/// A duration in whole microseconds ([`env_number`]).
pub(crate) fn env_micros(name: &str) -> Option<Duration> {
    env_number(name).map(Duration::from_micros)
}

fn parse_switch(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "on" | "1" | "true" | "yes" => Some(true),
        "off" | "0" | "false" | "no" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::parse_switch;

    #[test]
    fn switches_read_on_and_off_words_and_ignore_the_rest() {
        for v in ["on", "1", "true", "yes", " ON ", "Yes"] {
            assert_eq!(parse_switch(v), Some(true), "{v:?}");
        }
        for v in ["off", "0", "false", "no", "Off\n"] {
            assert_eq!(parse_switch(v), Some(false), "{v:?}");
        }
        for v in ["", "2", "enable", "o n"] {
            assert_eq!(parse_switch(v), None, "{v:?}");
        }
    }
}
