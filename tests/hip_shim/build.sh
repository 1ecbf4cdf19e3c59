#!/usr/bin/env bash
# Builds the HIP shim (hip_shim.c) as the libamdhip64 our `hip` binaries ask for, forwarding to
# the CUDA runtime of this machine. Usage:
#   build.sh OUT_DIR BINARY...
# BINARY: test executables built with `--features hip`; the soname (libamdhip64.so.N) and the
# symbol versions come from their imports, and the build fails unless the shim exports every
# hip* symbol they import. CUDART=/path/to/libcudart.so.N picks the CUDA runtime by hand.
# The shim also exports the hiprtc* functions our code dlsyms from hipRTC (forwarded to NVRTC;
# NVRTC=/path/to/libnvrtc.so.N picks it by hand), and OUT_DIR/libhiprtc.so.7 links to it.
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

# 4. The NVRTC the shim's hiprtc* open (dlopen, at their first call): the one of the CUDA
#    runtime's major version, baked in by path; without one the shim tries libnvrtc.so.13,
#    .so.12 and .so on the library path at run time.
nvrtc="${NVRTC:-}"
major=$(echo "$cudart_name" | grep -oE '\.so\.[0-9]+$' | cut -c5- || true)
if [ -z "$nvrtc" ] && [ -n "$major" ]; then
    for d in "$cudart_dir" /usr/local/cuda/lib64 /usr/local/cuda*/lib64 \
        /usr/local/cuda*/targets/*/lib /usr/lib/x86_64-linux-gnu /usr/lib64 \
        $(python3 -c 'import site; print(" ".join(p + "/nvidia/cuda_nvrtc/lib" for p in site.getsitepackages()))' 2>/dev/null || true); do
        if [ -e "$d/libnvrtc.so.$major" ]; then nvrtc="$d/libnvrtc.so.$major"; break; fi
    done
fi
nvrtc_flag=()
if [ -n "$nvrtc" ]; then
    [ -e "$nvrtc" ] || { echo "build.sh: NVRTC=$nvrtc does not exist" >&2; exit 1; }
    nvrtc="$(cd "$(dirname "$nvrtc")" && pwd)/$(basename "$nvrtc")"
    nvrtc_flag=("-DHIP_SHIM_NVRTC=\"$nvrtc\"")
else
    echo "build.sh: warning: no libnvrtc.so.${major:-N} found (set NVRTC=/path/to/libnvrtc.so.N):" \
        "the shim's hiprtc* will look for libnvrtc.so.13/.12/.so at run time" >&2
fi

# 5. Compile.
cmd=(gcc -shared -fPIC -O2 -Wall -Wextra -pthread -o "$out/$soname" "$here/hip_shim.c"
    "${nvrtc_flag[@]}" -Wl,-soname,"$soname" "${version_flag[@]}" -L"$cudart_dir"
    -l:"$cudart_name" -Wl,-rpath,"$cudart_dir" -ldl)
"${cmd[@]}"
# Our code dlopens hipRTC as libhiprtc.so.7 first: the same file, so the same loaded library.
ln -sfn "$soname" "$out/libhiprtc.so.7"

# 6. Every import must be exported (a missing one would fail at load time, or worse, later),
#    and every hiprtc* our code dlsyms (not imports: dlsym finds them whatever their version).
exports=$(nm -D --defined-only "$out/$soname" | awk '{print $NF}' | sed 's/@@*/@/' | sort -u)
hiprtc=$(printf '%s\n' hiprtcCreateProgram hiprtcCompileProgram hiprtcGetProgramLogSize \
    hiprtcGetProgramLog hiprtcGetCodeSize hiprtcGetCode hiprtcDestroyProgram \
    hiprtcGetErrorString hiprtcVersion | sort)
missing=$(comm -23 <(echo "$imports") <(echo "$exports") || true)
missing_rtc=$(comm -23 <(echo "$hiprtc") <(echo "$exports" | sed 's/@.*//' | sort -u) || true)
if [ -n "$missing" ] || [ -n "$missing_rtc" ]; then
    echo "build.sh: the shim does not export:" >&2
    { [ -z "$missing" ] || echo "$missing"; [ -z "$missing_rtc" ] || echo "$missing_rtc"; } >&2
    exit 1
fi

echo "hip_shim: built $out/$soname (and $out/libhiprtc.so.7 -> $soname)"
echo "  compile: ${cmd[*]}"
echo "  forwards to: $cudart, the CUDA driver (libcuda.so.1) and ${nvrtc:-libnvrtc.so.13/.12/.so}"
echo "  exports the $(echo "$imports" | wc -l) hip* symbols the binaries import: $(echo "$imports" | tr '\n' ' ')"
echo "  exports the $(echo "$hiprtc" | wc -l) hiprtc* symbols our code dlsyms: $(echo "$hiprtc" | tr '\n' ' ')"
echo "  run with: LD_LIBRARY_PATH=$out"
