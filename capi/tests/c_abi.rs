//! Builds `tests/c/abi_test.c` with the system C compiler against the cdylib of this crate and
//! runs it on a generated tiny DS4 file, a malformed file and a missing path (see the C file for
//! what it checks). On Linux the C side is built with AddressSanitizer (`-fsanitize=address`):
//! a read that wrote caller memory after close, or a bad pointer we handed out, fails the run.
//! `CC` picks the compiler (default `cc`); `DS4S_C_TEST_NO_ASAN=1` builds without ASan.
//! Windows: .ci/wine-tests.sh builds the same program with mingw-w64 and runs it under Wine.
#![cfg(unix)]

mod common;
use std::path::Path;
use std::process::Command;

#[test]
fn c_program_passes_against_the_shared_library() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = common::lib_dir();
    assert!(
        lib.join("libds4stream.so").exists(),
        "no libds4stream.so in {} (cargo builds the cdylib with the tests)",
        lib.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny(dir.path(), 7);
    // Malformed: the model's first 4000 bytes (a GGUF header cut short).
    let bytes = std::fs::read(&model).unwrap();
    let malformed = dir.path().join("truncated.gguf");
    std::fs::write(&malformed, &bytes[..4000]).unwrap();
    let missing = dir.path().join("no-such-file.gguf");

    let asan = std::env::var_os("DS4S_C_TEST_NO_ASAN").is_none();
    let exe = dir.path().join("abi_test");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut build = Command::new(&cc);
    build
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g", "-O1"])
        .arg("-I")
        .arg(root.join("../include"))
        .arg(root.join("tests/c/abi_test.c"))
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lds4stream");
    if asan {
        build.args(["-fsanitize=address", "-fno-omit-frame-pointer"]);
    }
    let out = build
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(
        out.status.success(),
        "{cc} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe)
        .arg(&model)
        .arg(&malformed)
        .arg(&missing)
        // Leak checking on: everything a closed handle owned must be freed.
        .env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        // cargo's LD_LIBRARY_PATH (which beats the RUNPATH) also lists target/<profile>/, where
        // an older uplifted libds4stream.so may lie: only the one cargo just built.
        .env("LD_LIBRARY_PATH", &lib)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "abi_test failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("checks passed"), "{stdout}");
    println!("{stdout}(asan: {asan})");
}
