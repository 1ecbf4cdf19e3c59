//! Windows only (runs under Wine in CI): a short relative path whose absolute form is longer than
//! MAX_PATH (260). Without the `\\?\` prefix Windows joins it to the current directory and
//! refuses the result ("relative paths are always limited to a total of MAX_PATH characters");
//! std opens it (it passes every relative path to `CreateFileW` as `\\?\` + its absolute form),
//! and so must the reader, which now does the same. Under Wine, which opens long paths without
//! the prefix too, this shows that the prefixed absolute form reaches the right file; that real
//! Windows needs it comes from the documentation, not from this run.
//!
//! Its own test binary: it changes the process's current directory, which no other test may
//! see.

#![cfg(windows)]

mod common;

use common::scratch;
use ds4_io::pattern;
use ds4_io::{FileSource, OpenConfig, Source};
use std::path::Path;

#[test]
fn short_relative_path_longer_than_max_path_once_absolute() {
    let dir = scratch();
    let base = std::path::absolute(dir.path()).unwrap();
    // The current directory stays under MAX_PATH (SetCurrentDirectoryW's own limit) ...
    let pad = 200usize.saturating_sub(base.as_os_str().len()).max(10);
    let cwd = base.join("c".repeat(pad.min(200)));
    // ... the relative path is short, and together they are over 260 characters.
    let rel = Path::new(&"r".repeat(80)).join("model.gguf");
    let abs = cwd.join(&rel);
    assert!(rel.as_os_str().len() < 100);
    assert!(abs.as_os_str().len() > 260, "{}", abs.display());
    std::fs::create_dir_all(abs.parent().unwrap()).unwrap();
    let p = pattern::write_full(&abs, 256 * 1024).unwrap();

    let before = std::env::current_dir().unwrap();
    std::env::set_current_dir(&cwd).unwrap();
    // std opens it (the GGUF header is read with std) ...
    assert_eq!(std::fs::metadata(&rel).unwrap().len(), 256 * 1024);
    // ... and so does the reader, buffered and unbuffered.
    for direct in [false, true] {
        let cfg = OpenConfig {
            direct,
            drop_cache: false,
            use_cache: false,
        };
        let src = FileSource::open(&rel, cfg).unwrap();
        assert_eq!(src.len(), 256 * 1024);
        let mut h = src.open_handle().unwrap();
        let mut buf = ds4_io::AlignedBuf::new(64 * 1024, 4096).unwrap();
        h.read_exact_at(&mut buf, 64 * 1024).unwrap();
        p.verify(64 * 1024, &buf).unwrap();
        h.read_exact_at(&mut buf[..1000], 12345).unwrap();
        p.verify(12345, &buf[..1000]).unwrap();
        let s = h.stats();
        assert_eq!(s.counters.direct_bytes > 0, direct, "{s:?}");
    }
    // Leave the directory before the scratch dir is removed (Windows cannot remove a current
    // directory).
    std::env::set_current_dir(before).unwrap();
}
