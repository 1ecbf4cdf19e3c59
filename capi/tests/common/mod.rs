//! Shared by the capi test binaries: the tiny DS4 model they run on, and where cargo put the
//! shared library. (`mod common;` in each; a binary that uses only one of them allows the other.)
#![allow(dead_code)]

use ds4_stream::generate::{write_file, Options, Quant, Scale};
use std::path::{Path, PathBuf};

/// A generated tiny DS4 file (`dir/tiny.gguf`) with this seed.
pub fn tiny(dir: &Path, seed: u64) -> PathBuf {
    let path = dir.join("tiny.gguf");
    let opts = Options {
        scale: Scale::Tiny,
        seed,
        holes: None,
        fill_layers: Vec::new(),
        fill_experts: None,
        quant: Quant::Q2,
        layers: None,
    };
    write_file(&path, &opts, &mut |_| {}).unwrap();
    path
}

/// target/<profile>/deps/: where `cargo test` rebuilds libds4stream.so beside the test (it does
/// not copy it up to target/<profile>/, so a copy there may be stale).
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().to_path_buf()
}
