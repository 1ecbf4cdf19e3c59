//! Fuzz target: the engine's chunk planner must tile any range exactly (no gap, no overlap,
//! chunks within one slot-aligned window), and the same reads through real engines (slot sizes
//! 4 KiB..1 MiB, claimed direct-IO alignments, staged and direct destinations) must deliver
//! every byte without reading past the end of the file. See
//! `ds4_tools::stress::fuzz::{check_plan_chunks, check_plan_chunks_engine}`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ds4_tools::stress::fuzz::check_plan_chunks(data);
    // Every input also drives the engines (the first bytes pick slot and alignment).
    ds4_tools::stress::fuzz::check_plan_chunks_engine(data);
});
