//! Parsing a GGUF header leaves the tensor data behind it out of the page cache: the header's
//! reads do no readahead (src/gguf/header_source.rs). With readahead on, walking a Flash file's
//! ~4 MB header read ~10 MB of `token_embd.weight` behind it with readahead marks, and a cold
//! `ds4 cat` of that tensor then went through the page cache chunk after chunk (0.43 GB/s
//! instead of ~1.1 unbuffered on the dev machine). Linux only (cachestat / mincore).
#![cfg(target_os = "linux")]

use ds4_stream::gguf::{parse_file, Caps};
use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::process::Command;

#[test]
fn parsing_the_header_reads_nothing_ahead_into_the_tensor_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flash1.gguf");
    let out = Command::new(env!("CARGO_BIN_EXE_ds4"))
        .args([
            "gen-model",
            "--scale",
            "flash",
            "--layers",
            "1",
            "--holes",
            "all",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let f = File::open(&path).unwrap();
    f.sync_all().unwrap(); // clean pages can be dropped
    for attempt in 1..=3 {
        // SAFETY: posix_fadvise only reads its integer arguments; the fd is open.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if ds4_io::cached_fraction(&f, 0, 64 << 20).is_none_or(|c| c > 0.0) {
            eprintln!("skipped: no page-cache probe here, or the kernel kept pages");
            return;
        }
        let g = parse_file(&path, &Caps::default()).unwrap();
        assert!(
            g.data_offset > 1 << 20,
            "a Flash header holds the vocabulary"
        );
        // The header's last read may fill its 1 MiB buffer past the header; nothing further.
        let ahead = ds4_io::cached_fraction(&f, g.data_offset + (1 << 20), 8 << 20).unwrap();
        if ahead == 0.0 {
            return;
        }
        eprintln!(
            "attempt {attempt}: {:.0} % of the 8 MiB past the header cached",
            ahead * 100.0
        );
        assert!(
            attempt < 3,
            "the header's reads read ahead into the tensor data"
        );
    }
}
