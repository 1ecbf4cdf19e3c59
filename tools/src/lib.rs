//! ds4-tools: the code of the ds4-stream programs, on top of the engine library
//! (`ds4_stream`), which depends on none of the crates used here (clap, indicatif, serde_json,
//! tokio, memmap2, ctrlc).
//!
//! [`cli`] is `ds4` (`tools/src/bin/ds4.rs`), [`stress`] is `ds4-stress` (`tools/src/bin/ds4-stress.rs`)
//! and the checks the fuzz targets run, [`trace`] reads the routing traces `ds4
//! --record-trace` writes (for `ds4-bench cache`). `ds4-bench` lives in `tools/benches/ds4-bench/`.

pub mod cli;
pub mod stress;
pub mod trace;
