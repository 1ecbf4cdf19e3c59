//! Checks on the CUDA/HIP source that need no GPU: its IQ2_XXS grid is the host's, it includes
//! nothing, and every kernel kernels/README.md documents is defined as `extern "C" __global__`.

use super::quant::IQ2XXS_GRID;
use super::DS4_KERNELS_CU;

use super::KERNEL_NAMES as KERNELS;

#[test]
fn kernel_grid_matches_the_host_grid() {
    let start = DS4_KERNELS_CU
        .find("// grid begin")
        .expect("grid begin marker");
    let end = DS4_KERNELS_CU.find("// grid end").expect("grid end marker");
    let values: Vec<u64> = DS4_KERNELS_CU[start + "// grid begin".len()..end]
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            let hex = s.trim_start_matches("0x").trim_end_matches("ull");
            u64::from_str_radix(hex, 16).unwrap_or_else(|e| panic!("{s}: {e}"))
        })
        .collect();
    assert_eq!(values.len(), 256);
    assert_eq!(values, IQ2XXS_GRID.to_vec());
}

#[test]
fn kernel_source_is_self_contained_and_complete() {
    for line in DS4_KERNELS_CU.lines() {
        let code = line.split("//").next().unwrap_or("").trim_start();
        assert!(!code.starts_with("#include"), "{line}");
        assert!(!code.contains("__shfl"), "{line}");
    }
    let readme = include_str!("../../kernels/README.md");
    for k in KERNELS {
        assert!(
            DS4_KERNELS_CU.contains(&format!("extern \"C\" __global__ void {k}(")),
            "{k} is not defined"
        );
        assert!(
            readme.contains(k),
            "kernels/README.md does not document {k}"
        );
    }
    assert_eq!(
        DS4_KERNELS_CU.matches("extern \"C\" __global__").count(),
        KERNELS.len(),
        "a kernel is missing from KERNELS (and so from the documentation check)"
    );
}
