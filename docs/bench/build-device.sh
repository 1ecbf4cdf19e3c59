#!/usr/bin/env bash
# Builds (here, on the dev machine) the binaries the GPU machine runs and strips them into
# .dev/device (git-ignored; carry it): ds4, ds4-bench and the GPU test binaries, for cuda and
# (suffix -hip) hip. The hip build uses its own target dir so neither overwrites the other's
# `ds4`; the test binaries spawn `ds4` from their build path (CARGO_BIN_EXE_ds4):
# /work/main/target/release/ds4 (cuda) and /work/tgt-hip/release/ds4 (hip), so on the GPU
# machine copy .dev/device/ds4 and ds4-hip there first.
#   bash docs/bench/build-device.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.dev/device; mkdir -p "$out"
tests() { # feature target-dir package test...
  local f=$1 dir=$2 pkg=$3; shift 3
  local args=(); for t in "$@"; do args+=(--test "$t"); done
  CARGO_TARGET_DIR=$dir cargo test --release --features "$f" -p "$pkg" "${args[@]}" --no-run \
    --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])'
}
build() { # feature target-dir suffix
  local f=$1 dir=$2 sfx=$3
  CARGO_TARGET_DIR=$dir cargo build --release --features "$f" -p ds4-tools --bin ds4 --bin ds4-bench
  strip -o "$out/ds4$sfx" "$dir/release/ds4"
  strip -o "$out/ds4-bench$sfx" "$dir/release/ds4-bench"
  { tests "$f" "$dir" ds4-stream engine_device device_backends kernels_gpu
    tests "$f" "$dir" ds4-tools decode_gpu
    tests "$f" "$dir" ds4stream-capi gpu
    CARGO_TARGET_DIR=$dir cargo test --release --features "$f" -p ds4-stream --lib --no-run \
      --message-format=json 2>/dev/null | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print("ds4_stream", m["executable"])'
  } | while read -r name exe; do
    [ "$name" = gpu ] && name=capi_gpu
    strip -o "$out/$name$sfx" "$exe"
  done
}
build cuda target ""
HIP_PATH=/usr build hip /work/tgt-hip -hip
ls -la "$out"; du -sh "$out"
