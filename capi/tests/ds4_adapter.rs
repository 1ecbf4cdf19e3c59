//! The DS4 engine adapter (integrations/ds4/): its generic part built with the system C
//! compiler against this crate's cdylib and run on the host backend
//! (`integrations/ds4/tests/adapter_host_test.c`: batched reads verified byte for byte against
//! pread, the stock switch, failures reported), and, where `DS4_SRC` points at a DS4 80ebbc3
//! source tree, `integrations/ds4/build.sh DS4_SRC OUT cpu`: the patch applies, the CPU engine
//! builds and links with libds4stream, and the binary starts. Without `DS4_SRC` that part says
//! it is skipped. (The CUDA build is compiled and run on a GPU machine: docs/DS4_INTEGRATION.md.)
#![cfg(all(unix, target_os = "linux"))]

mod common;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn build_host_test(dir: &Path) -> PathBuf {
    let root = root();
    let lib = common::lib_dir();
    assert!(
        lib.join("libds4stream.so").exists(),
        "no libds4stream.so in {}",
        lib.display()
    );
    let exe = dir.join("adapter_host_test");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-g", "-O1"])
        .arg("-I")
        .arg(root.join("include"))
        .arg("-I")
        .arg(root.join("integrations/ds4"))
        .arg(root.join("integrations/ds4/ds4s_adapter.c"))
        .arg(root.join("integrations/ds4/tests/adapter_host_test.c"))
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lds4stream", "-lpthread"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(
        out.status.success(),
        "{cc} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn adapter_reads_batches_and_honours_the_stock_switch() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny(dir.path(), 11);
    let exe = build_host_test(dir.path());

    let out = Command::new(&exe)
        .arg(&model)
        .env_remove("DS4_STREAM")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "adapter test failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("adapter ok: 18 ranges"), "{stdout}");
    // The attach announces itself; the failures name what failed; the summary is printed.
    assert!(stderr.contains("ds4-stream engine on"), "{stderr}");
    assert!(
        stderr.contains("read of past the end: not started"),
        "{stderr}"
    );
    assert!(stderr.contains("DS4S_ERR_OUT_OF_RANGE"), "{stderr}");
    assert!(stderr.contains("DS4S_ERR_UNSUPPORTED"), "{stderr}");
    assert!(stderr.contains("read of unattached"), "{stderr}");
    assert!(
        stderr.contains("read of device on host: not started"),
        "{stderr}"
    );
    assert!(stderr.contains("ds4-stream read "), "{stderr}");

    let out = Command::new(&exe)
        .arg(&model)
        .env("DS4_STREAM", "stock")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "stock run failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("stock: nothing attached"), "{stdout}");
    assert!(!stderr.contains("ds4-stream engine on"), "{stderr}");
}

#[test]
fn patched_ds4_cpu_engine_builds_and_links() {
    let Some(src) = std::env::var_os("DS4_SRC").filter(|s| !s.is_empty()) else {
        eprintln!("note: DS4_SRC is not set: skipping the DS4 build with the adapter");
        return;
    };
    let src = PathBuf::from(src);
    assert!(
        src.join("ds4.c").exists(),
        "DS4_SRC={} has no ds4.c",
        src.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("ds4");
    let out = Command::new("bash")
        .arg(root().join("integrations/ds4/build.sh"))
        .arg(&src)
        .arg(&out_dir)
        .arg("cpu")
        .env("DS4S_LIB_DIR", common::lib_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "build.sh failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The binary runs from OUT with the library beside it (the $ORIGIN rpath).
    assert!(out_dir.join("libds4stream.so").exists());
    // cargo test sets LD_LIBRARY_PATH to its deps/, which would win over the rpath.
    let help = Command::new(out_dir.join("ds4"))
        .arg("--help")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&help.stdout).to_string() + &String::from_utf8_lossy(&help.stderr);
    assert!(text.contains("--ssd-streaming"), "{text}");
    let ldd = Command::new("ldd")
        .arg(out_dir.join("ds4"))
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    assert!(
        ldd.contains(&format!("{}/libds4stream.so", out_dir.display()))
            || ldd.contains("./libds4stream.so"),
        "ds4 does not load the libds4stream.so beside it:\n{ldd}"
    );

    // OUT made by someone else is never touched.
    let foreign = dir.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("keep.txt"), b"mine").unwrap();
    let out = Command::new("bash")
        .arg(root().join("integrations/ds4/build.sh"))
        .arg(&src)
        .arg(&foreign)
        .arg("cpu")
        .env("DS4S_LIB_DIR", common::lib_dir())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("was not made by this script"));
    assert_eq!(std::fs::read(foreign.join("keep.txt")).unwrap(), b"mine");
}

/// The ROCm hooks (`ds4s_rocm.inc`) cannot be compiled inside DS4's ROCm backend here (it needs
/// hipBLAS and hipBLASLt, which Debian does not ship), so they are type-checked with the host
/// C++ compiler against DS4's own declarations: the read-job struct is taken from DS4_SRC's
/// runtime at test time (nothing of DS4 is copied into this repository), the globals the hooks
/// use are declared with DS4's types.
#[test]
fn rocm_hooks_type_check_against_ds4_src() {
    let Some(src) = std::env::var_os("DS4_SRC").filter(|s| !s.is_empty()) else {
        eprintln!("note: DS4_SRC is not set: skipping the ROCm hooks' type check");
        return;
    };
    let runtime = PathBuf::from(src).join("rocm/ds4_rocm_runtime.cuh");
    let text = std::fs::read_to_string(&runtime).unwrap();
    let start = text
        .find("typedef struct cuda_stream_read_job {")
        .expect("DS4's runtime has no cuda_stream_read_job");
    let end = start + text[start..].find("} cuda_stream_read_job;").unwrap() + 23;
    for decl in [
        "static const void *g_model_host_base;",
        "static int g_model_fd = -1;",
        "static const void *g_model_fd_host_base;",
        "static uint64_t g_model_file_size;",
        "static int g_ssd_streaming_mode;",
    ] {
        assert!(
            text.contains(decl),
            "DS4's runtime no longer declares {decl}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let harness = dir.path().join("rocm_check.cpp");
    let body = format!(
        "#include <errno.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n\
         #include <string.h>\n#include <vector>\n#include \"ds4s_adapter.h\"\n\
         #define DS4_GPU_LOG_PREFIX \"ds4: ROCm \"\n\
         static const void *g_model_host_base;\nstatic int g_model_fd = -1;\n\
         static const void *g_model_fd_host_base;\nstatic uint64_t g_model_file_size;\n\
         static int g_ssd_streaming_mode;\n{}\n#include \"ds4s_rocm.inc\"\n\
         int main() {{\n    (void)g_model_fd;\n    cuda_stream_read_job j[1] = {{}};\n\
         ds4s_rocm_attach(-1);\n    return ds4s_rocm_jobs_start(j, 1) + ds4s_rocm_jobs_wait(j, 1) +\n\
         ds4s_rocm_refuse_map_copy(0, \"x\") + ds4s_rocm_read_range(0, 0, 0, 0, \"x\");\n}}\n",
        &text[start..end]
    );
    std::fs::write(&harness, body).unwrap();
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = Command::new(&cxx)
        .args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only"])
        .arg("-I")
        .arg(root().join("include"))
        .arg("-I")
        .arg(root().join("integrations/ds4"))
        .arg(&harness)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cxx}: {e}"));
    assert!(
        out.status.success(),
        "{cxx} rejects ds4s_rocm.inc:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
