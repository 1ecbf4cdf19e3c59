//! The decode kernels (kernels/ds4_kernels.cu) are valid HIP: AMD's hipRTC compiles them, with no
//! GPU needed, for an RDNA target (gfx1030: wave32, the Strix Halo family's wave size) and a CDNA
//! one (gfx90a: wave64). What the H200's shim run cannot show (it forwards hipRTC to NVRTC).
//!
//! Runs in CI against Debian's HIP 5.2 (hipRTC inside libamdhip64), which knows no target newer
//! than gfx1030/gfx90a (its comgr aborts the process on gfx1100+, so those are not tried here).
//! Where no hipRTC is found the test is skipped with a note, unless `DS4_HIPRTC_TESTS=1`
//! demands it (CI sets it).
#![cfg(feature = "hip")]

#[test]
fn amd_hiprtc_compiles_the_kernels_for_rdna_and_cdna() {
    let required = std::env::var("DS4_HIPRTC_TESTS").is_ok_and(|v| v == "1");
    for arch in ["gfx1030", "gfx90a"] {
        match ds4_stream::device::hip::compile_kernels_for(arch) {
            Ok((code, from)) => {
                // A code object: an AMDGPU ELF, or clang's offload bundle around one.
                let elf = code.starts_with(b"\x7fELF");
                let bundle = code.starts_with(b"__CLANG_OFFLOAD_BUNDLE__");
                assert!(
                    elf || bundle,
                    "{arch}: not a code object: {:?}",
                    &code[..16.min(code.len())]
                );
                if elf {
                    // e_machine (offset 18) = EM_AMDGPU (224).
                    assert_eq!(
                        u16::from_le_bytes([code[18], code[19]]),
                        224,
                        "{arch}: e_machine"
                    );
                }
                // Every kernel is in it by name (the module loader looks them up so).
                for k in ds4_stream::compute::KERNEL_NAMES {
                    assert!(
                        code.windows(k.len()).any(|w| w == k.as_bytes()),
                        "{arch}: no {k} in the code object"
                    );
                }
                eprintln!(
                    "{arch}: {} bytes ({}) from hipRTC in {from}",
                    code.len(),
                    if elf { "AMDGPU ELF" } else { "offload bundle" }
                );
            }
            Err(e) if !required && e.to_string().contains("no hipRTC library found") => {
                eprintln!("note: hipRTC tests skipped: {e}");
                return;
            }
            Err(e) => panic!("{arch}: {e}"),
        }
    }
}

/// A source hipRTC cannot compile: a typed error naming the call, with hipRTC's own log.
#[test]
fn a_broken_source_fails_with_the_compilers_log() {
    let src = "extern \"C\" __global__ void k(float *y) { y[0] = undeclared_name; }";
    match ds4_stream::device::hip::compile_source_for(src, "gfx1030") {
        Ok(_) => panic!("a broken source compiled"),
        Err(e) if e.to_string().contains("no hipRTC library found") => {
            assert!(
                !std::env::var("DS4_HIPRTC_TESTS").is_ok_and(|v| v == "1"),
                "{e}"
            );
            eprintln!("note: hipRTC tests skipped: {e}");
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("hiprtcCompileProgram"), "{msg}");
            assert!(msg.contains("undeclared_name"), "the log is missing: {msg}");
        }
    }
}
