#!/usr/bin/env bash
# DS4 80ebbc3 + the ds4-stream adapter, CUDA build, compiled and linked with nvcc from Python
# packages (no GPU, no CUDA install here): the patch applies, integrations/ds4/ds4s_cuda.inc
# compiles inside DS4's ds4_cuda.cu, and `ds4` links against libds4stream (cuda feature),
# cudart and cuBLAS. Nothing is run (the H200 runs are in docs/DS4_INTEGRATION.md).
# PTX only (-arch=compute_90 -code=compute_90) at -O0: the point is compiling our code into
# DS4's, not DS4's kernels (~6 min on 2 cores, most of it nvcc's front end on ds4_cuda.cu).
# DS4_SRC (default ../shared/ds4c); no DS4 source: skipped, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
src=${DS4_SRC:-../shared/ds4c}
if [ ! -f "$src/ds4_cuda.cu" ]; then
    echo "ds4 cuda build: no DS4 source at $src: skipped"
    exit 0
fi
venv=.venv-nvcc
if [ ! -x "$venv/bin/nvcc-ok" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q nvidia-cuda-nvcc==13.5.37 nvidia-cuda-runtime==13.5.37 \
        nvidia-cuda-crt==13.5.37 nvidia-cuda-cccl==13.3.5.0.6 nvidia-cublas==13.10.0.20
    touch "$venv/bin/nvcc-ok"
fi
cu=$("$venv/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')
[ -x "$cu/bin/nvcc" ] || { echo "no nvcc in $cu" >&2; exit 1; }
# DS4's Makefile links with -L$(CUDA_HOME)/lib64 -lcudart -lcublas; the wheels ship only the
# versioned names in lib/.
mkdir -p "$cu/lib64"
for l in cudart cublas cublasLt; do ln -sf "../lib/lib$l.so.13" "$cu/lib64/lib$l.so"; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
NVCCFLAGS="-O0 -arch=compute_90 -code=compute_90 -Xcompiler -pthread" DS4S_MAKE_TARGETS=ds4 \
    CUDA_HOME="$cu" JOBS=2 bash integrations/ds4/build.sh "$src" "$tmp/ds4" cuda >"$tmp/build.log" 2>&1 ||
    { tail -60 "$tmp/build.log"; exit 1; }
needed=$(readelf -d "$tmp/ds4/ds4" | grep NEEDED)
for lib in libds4stream.so libcudart.so libcublas.so; do
    echo "$needed" | grep -q "$lib" || { echo "ds4 does not link $lib:"; echo "$needed"; exit 1; } >&2
done
# (captured first: grep -q closing the pipe early would fail nm under pipefail)
syms=$(nm -D "$tmp/ds4/ds4")
grep -q ' U ds4s_read$' <<<"$syms" || { echo "ds4 does not call ds4s_read" >&2; exit 1; }
echo "ds4 cuda build: DS4 80ebbc3 + ds4-stream compiled and linked in $(( $(date +%s) - t0 )) s" \
    "(libds4stream, cudart, cuBLAS; not run: no GPU here)"
