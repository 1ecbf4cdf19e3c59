#!/usr/bin/env bash
# Builds the HIP shim (hip_shim.c) as the libamdhip64 our `hip` binaries ask for, forwarding to
# the CUDA runtime of this machine. Usage:
#   build.sh OUT_DIR BINARY...
# BINARY: test executables built with `--features hip`; the soname (libamdhip64.so.N) and the
# symbol versions come from their imports, and the build fails unless the shim exports every
# hip* symbol they import. CUDART=/path/to/libcudart.so.N picks the CUDA runtime by hand.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: build.sh OUT_DIR BINARY...}"
shift
[ $# -gt 0 ] || { echo "build.sh: name at least one hip-built binary" >&2; exit 2; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"

# 1. Which libamdhip64 the binaries need.
soname=$(readelf -d "$@" | grep -o 'libamdhip64\.so[.0-9]*' | sort -u)
[ "$(echo "$soname" | wc -l)" -eq 1 ] && [ -n "$soname" ] ||
    { echo "build.sh: expected one libamdhip64 soname in NEEDED, found: '$soname'" >&2; exit 1; }

# 2. The hip* symbols they import, with their versions (hipMalloc@hip_4.2): the shim defines
#    the same version nodes, so the dynamic linker binds them exactly as it would ROCm's.
imports=$(nm -D --undefined-only "$@" | awk '{print $NF}' | grep '^hip' | sort -u)
map="$out/hip_shim.map"
echo "$imports" | awk -F@ '
    NF == 2 { v[$2] = v[$2] "    " $1 ";\n" }
    END { for (k in v) printf "%s {\n  global:\n%s};\n", k, v[k] }' >"$map"
version_flag=()
[ -s "$map" ] && version_flag=("-Wl,--version-script=$map")

# 3. The CUDA runtime to forward to.
cudart="${CUDART:-}"
if [ -z "$cudart" ]; then
    for d in /usr/local/cuda/lib64 /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib \
        /usr/lib/x86_64-linux-gnu /usr/lib64 \
        $(python3 -c 'import site; print(" ".join(p + "/nvidia/cuda_runtime/lib" for p in site.getsitepackages()))' 2>/dev/null || true); do
        c=$(ls "$d"/libcudart.so.[0-9]* 2>/dev/null | grep -E 'libcudart\.so\.[0-9]+$' | sort -V | tail -1 || true)
        if [ -n "$c" ]; then cudart="$c"; break; fi
    done
fi
[ -n "$cudart" ] && [ -e "$cudart" ] ||
    { echo "build.sh: no libcudart.so.N found (set CUDART=/path/to/libcudart.so.N)" >&2; exit 1; }
cudart_dir=$(cd "$(dirname "$cudart")" && pwd)
cudart_name=$(basename "$cudart")

# 4. Compile.
cmd=(gcc -shared -fPIC -O2 -Wall -Wextra -o "$out/$soname" "$here/hip_shim.c"
    -Wl,-soname,"$soname" "${version_flag[@]}" -L"$cudart_dir" -l:"$cudart_name"
    -Wl,-rpath,"$cudart_dir" -ldl)
"${cmd[@]}"

# 5. Every import must be exported (a missing one would fail at load time, or worse, later).
exports=$(nm -D --defined-only "$out/$soname" | awk '{print $NF}' | sed 's/@@*/@/' | sort -u)
missing=$(comm -23 <(echo "$imports") <(echo "$exports") || true)
if [ -n "$missing" ]; then
    echo "build.sh: the shim does not export:" >&2
    echo "$missing" >&2
    exit 1
fi

echo "hip_shim: built $out/$soname"
echo "  compile: ${cmd[*]}"
echo "  forwards to: $cudart"
echo "  exports the $(echo "$imports" | wc -l) hip* symbols the binaries import:" $(echo "$imports" | tr '\n' ' ')
echo "  run with: LD_LIBRARY_PATH=$out"
