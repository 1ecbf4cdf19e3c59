#!/usr/bin/env bash
# Builds the DS4 C engine (antirez/ds4 at 80ebbc3) with the ds4-stream adapter:
#
#   integrations/ds4/build.sh DS4_SRC OUT [cpu|cuda|rocm]
#
# DS4_SRC: an unmodified DS4 source tree (read only; it is copied). OUT: a new folder (or one an
# earlier run of this script made) that gets the binaries (ds4, ds4-server, ds4-bench, ...),
# libds4stream.so beside them (found through the $ORIGIN rpath) and src/, the patched copy the
# build ran in. Target: cpu (default), cuda (nvcc, cuBLAS) or rocm (hipcc, hipBLAS, hipBLASLt).
#
# Environment:
#   DS4S_LIB_DIR  a folder with libds4stream.so already built (machines without cargo);
#                 default: built here with cargo (`--features cuda` / `hip` for those targets)
#   CUDA_ARCH     nvcc -arch for cuda (default sm_90); CUDA_HOME (default /usr/local/cuda)
#   ROCM_ARCH     --offload-arch for rocm (default gfx1151)
#   JOBS          make -j (default: number of cores)
#   DS4S_MAKE_TARGETS  the make targets for cuda (default: ds4 ds4-server ds4-bench ds4-eval)
set -euo pipefail

die() { echo "build.sh: $*" >&2; exit 2; }

[ $# -ge 2 ] && [ $# -le 3 ] || die "usage: build.sh DS4_SRC OUT [cpu|cuda|rocm]"
src=$1
out=$2
target=${3:-cpu}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

case $target in cpu | cuda | rocm) ;; *) die "target '$target' is not one of cpu, cuda, rocm" ;; esac
[ -f "$src/ds4.c" ] && [ -f "$src/ds4_cuda.cu" ] && [ -f "$src/Makefile" ] ||
    die "$src is not a DS4 source tree (no ds4.c / ds4_cuda.cu / Makefile)"
if [ -e "$out" ]; then
    [ -d "$out" ] || die "$out exists and is not a folder: not touching it"
    if [ -n "$(ls -A "$out")" ] && [ ! -f "$out/.ds4s-build" ]; then
        die "$out exists, is not empty and was not made by this script: not touching it"
    fi
fi
command -v patch >/dev/null || die "needs patch (apt-get install patch)"
command -v make >/dev/null || die "needs make (apt-get install make)"

# The patch must apply to this tree exactly (it is written against 80ebbc3).
if ! patch --dry-run -p1 -d "$src" -s -f <"$here/ds4-80ebbc3.patch" >/dev/null; then
    die "ds4-80ebbc3.patch does not apply to $src (it is written against DS4 80ebbc3)"
fi

# libds4stream.so
if [ -n "${DS4S_LIB_DIR:-}" ]; then
    lib=$(cd "$DS4S_LIB_DIR" && pwd)
    [ -f "$lib/libds4stream.so" ] || die "DS4S_LIB_DIR=$DS4S_LIB_DIR has no libds4stream.so"
else
    features=()
    [ "$target" = cuda ] && features=(--features cuda)
    [ "$target" = rocm ] && features=(--features hip)
    tdir=${CARGO_TARGET_DIR:-$root/target}/ds4-adapter-$target
    (cd "$root" && CARGO_TARGET_DIR=$tdir cargo build --release -p ds4stream-capi "${features[@]}")
    lib=$tdir/release
fi

mkdir -p "$out"
touch "$out/.ds4s-build"
rm -rf "$out/src"
cp -r "$src/." "$out/src"
chmod -R u+w "$out/src"
cp "$here/ds4s_adapter.c" "$here/ds4s_adapter.h" "$here/ds4s_cuda.inc" "$here/ds4s_rocm.inc" "$root/include/ds4stream.h" \
    "$out/src/"
patch -p1 -d "$out/src" -s <"$here/ds4-80ebbc3.patch"

jobs=${JOBS:-$(nproc 2>/dev/null || echo 4)}
case $target in
cpu)
    make -C "$out/src" -j"$jobs" cpu DS4_STREAM_LIB="$lib"
    ;;
cuda)
    # shellcheck disable=SC2086
    make -C "$out/src" -j"$jobs" ${DS4S_MAKE_TARGETS:-ds4 ds4-server ds4-bench ds4-eval} \
        CUDA_ARCH="${CUDA_ARCH:-sm_90}" CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" \
        DS4_STREAM_LIB="$lib"
    ;;
rocm)
    make -C "$out/src" -j"$jobs" strix-halo ROCM_ARCH="${ROCM_ARCH:-gfx1151}" DS4_STREAM_LIB="$lib"
    ;;
esac

cp "$lib/libds4stream.so" "$out/"
for b in ds4 ds4-server ds4-bench ds4-eval ds4-agent; do
    [ -f "$out/src/$b" ] && cp "$out/src/$b" "$out/"
done
echo "build.sh: DS4 80ebbc3 + ds4-stream ($target) in $out: $(cd "$out" && ls ds4* 2>/dev/null | tr '\n' ' ')"
