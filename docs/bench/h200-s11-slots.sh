#!/usr/bin/env bash
# Issue 20 part 2 (one SlotLoader) on the GPU machine (`bash docs/bench/h200-s11-slots.sh [bench]`):
# every GPU test of the decode path, the
# expert store and the C ABI on cuda and hip (shim), then old vs new decode digests and tok/s.
# D=.dev/device: ds4, ds4-bench, ds4-hip, decode_gpu(-hip), ds4_stream(-hip) (the library's
# unit tests), capi_gpu; O=.dev/old: ds4, ds4-hip from f76fd53 (before the redesign).
set -u
D=.dev/device; O=.dev/old; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -f /tmp/shim/libamdhip64.so.5 ] || bash tests/hip_shim/build.sh /tmp/shim $D/*-hip $O/ds4-hip 2>&1 | tail -1
mkdir -p /work/tgt-cuda/release /work/tgt-hip/release
t() { local n=$1; shift; echo "=== $n"; local s=$SECONDS
  "$@" > "$OUT/$n.log" 2>&1; echo "rc $?"
  grep -E "test result|L2|digest|panicked|FAILED|error" "$OUT/$n.log" | head -20; echo "($((SECONDS-s)) s)"; }
if [ "${1:-all}" != bench ]; then
export DS4_GPU_TESTS=cuda
cp $D/ds4 /work/tgt-cuda/release/ds4
t decode_gpu $D/decode_gpu --nocapture --test-threads=1
t lib-store-decode $D/ds4_stream expert_store decode device
t capi_gpu $D/capi_gpu
export DS4_GPU_TESTS=hip
cp $D/ds4-hip /work/tgt-hip/release/ds4
LD_LIBRARY_PATH=/tmp/shim t decode_gpu-hip $D/decode_gpu-hip --nocapture --test-threads=1
LD_LIBRARY_PATH=/tmp/shim t lib-store-decode-hip $D/ds4_stream-hip expert_store decode device
unset DS4_GPU_TESTS
fi
m=/root/flash6.gguf
[ -f $m ] || /usr/bin/time -f "gen-model: %e s" $D/ds4 gen-model --scale flash --layers 6 --fill $m
cat $m > /dev/null
s() { python3 docs/bench/run-summary.py "$1"; }
# Every run starts from the whole file in the page cache: the C engine's pattern drops what it
# reads (fadvise DONTNEED), which would make every later run a cold one.
r() { local name=$1 bin=$2 b=$3; shift 3; cat $m > /dev/null
  if [ "$b" = hip ]; then LD_LIBRARY_PATH=/tmp/shim $bin --backend hip -m $m --json "$@" > "$OUT/$name.json" 2>"$OUT/$name.err"
  else $bin --backend cuda -m $m --json "$@" > "$OUT/$name.json" 2>"$OUT/$name.err"; fi
  if [ $? = 0 ]; then s "$OUT/$name.json"; else echo "  $name FAILED: $(tail -2 "$OUT/$name.err")"; fi; }
$D/ds4 --backend cuda -m $m -n 2 > /dev/null 2>&1   # JIT warm-up
C="--ssd-streaming --ssd-streaming-cache-experts 2GB"
for rep in 1 2; do
  for v in old new; do
    if [ $v = old ]; then B=$O; else B=$D; fi
    echo "== rep $rep $v cuda resident (-n 16)"; r res-$v-$rep $B/ds4 cuda -n 16
    echo "== rep $rep $v cuda streamed hot, cache 2GB (-n 48)"; r hot-$v-$rep $B/ds4 cuda $C -n 48
    echo "== rep $rep $v cuda streamed + lookahead (-n 48)"; r la-$v-$rep $B/ds4 cuda $C --ssd-streaming-lookahead -n 48
    echo "== rep $rep $v cuda 1GB + RAM tier 2GB (-n 32)"; r ram-$v-$rep $B/ds4 cuda --ssd-streaming --ssd-streaming-cache-experts 1GB --ram-streaming-cache-experts 2GB -n 32
    echo "== rep $rep $v cuda c-engine pattern (-n 24)"; r cp-$v-$rep $B/ds4 cuda $C --ssd-streaming-c-engine-pattern --cache-policy lru -n 24
    echo "== rep $rep $v hip streamed hot, cache 2GB (-n 24)"; r hiphot-$v-$rep $B/ds4-hip hip $C -n 24
  done
done
