//! Fuzz target: bytes -> `parse_bytes` -> `Ds4Model::from_gguf` must never panic, and a map
//! that builds must keep its promises. Raw, zero-padded and structured-edit modes: see
//! `ds4_tools::stress::fuzz::check_ds4_map`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ds4_tools::stress::fuzz::check_ds4_map(data);
});
