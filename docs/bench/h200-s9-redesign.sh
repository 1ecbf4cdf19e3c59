#!/usr/bin/env bash
# Issue 20's check on the GPU machine: the redesigned binaries against main before it, same
# machine, same minutes. Run from the repository root there:
#
#   bash docs/bench/h200-s9-redesign.sh tests   # every GPU test, cuda and hip (shim)
#   bash docs/bench/h200-s9-redesign.sh bench   # decode digests + tok/s, ds4-bench io: old vs new
#
# D=.dev/device holds the new binaries (ds4, ds4-bench, kernels_gpu, decode_gpu,
# device_backends, engine_device; the same with an -hip suffix, built with --features hip);
# O=.dev/old holds ds4, ds4-bench and ds4-hip built from f76fd53 (main before the redesign).
set -u
D=.dev/device; O=.dev/old; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -f /tmp/shim/libamdhip64.so.5 ] || bash tests/hip_shim/build.sh /tmp/shim $D/*-hip $D/ds4-hip $O/ds4-hip 2>&1 | tail -3
# decode_gpu spawns ds4 from its build path (CARGO_BIN_EXE_ds4): the target dirs they were built in.
mkdir -p /work/tgt-cuda/release /work/tgt-hip/release
t() { local n=$1; shift; echo "=== $n"; local s=$SECONDS
  "$@" > "$OUT/$n.log" 2>&1; echo "rc $?"
  grep -E "^test |test result|within|digest|L2|panicked|error|Error" "$OUT/$n.log" | grep -v "\.\.\. ok$" | head -40
  echo "($((SECONDS-s)) s)"; }

if [ "${1:-tests}" = tests ]; then
  export DS4_GPU_TESTS=cuda
  cp $D/ds4 /work/tgt-cuda/release/ds4
  t kernels_gpu $D/kernels_gpu --nocapture
  t decode_gpu $D/decode_gpu --nocapture --test-threads=1
  t device_backends $D/device_backends
  t engine_device $D/engine_device
  export DS4_GPU_TESTS=hip LD_LIBRARY_PATH=/tmp/shim
  cp $D/ds4-hip /work/tgt-hip/release/ds4
  t kernels_gpu-hip $D/kernels_gpu-hip --nocapture
  t decode_gpu-hip $D/decode_gpu-hip --nocapture --test-threads=1
  t device_backends-hip $D/device_backends-hip
  t engine_device-hip $D/engine_device-hip
  exit 0
fi

# bench: a 6-layer Flash-shaped model in the page cache; old and new alternated.
m=/root/flash6.gguf
[ -f $m ] || /usr/bin/time -f "gen-model: %e s" $D/ds4 gen-model --scale flash --layers 6 --fill $m
cat $m > /dev/null
s() { python3 docs/bench/run-summary.py "$1"; }
r() { local name=$1 bin=$2 b=$3; shift 3
  if [ "$b" = hip ]; then LD_LIBRARY_PATH=/tmp/shim $bin --backend hip -m $m --json "$@" > "$OUT/$name.json" 2>"$OUT/$name.err"
  else $bin --backend cuda -m $m --json "$@" > "$OUT/$name.json" 2>"$OUT/$name.err"; fi
  if [ $? = 0 ]; then s "$OUT/$name.json"; else echo "  $name FAILED: $(tail -2 "$OUT/$name.err")"; fi; }
$D/ds4 --backend cuda -m $m -n 2 > /dev/null 2>&1   # JIT warm-up
for rep in 1 2; do
  for v in old new; do
    if [ $v = old ]; then B=$O; else B=$D; fi
    echo "== rep $rep $v cuda resident (-n 16)"; r res-$v-$rep $B/ds4 cuda -n 16
    echo "== rep $rep $v cuda streamed hot, cache 2GB (-n 48)"
    r hot-$v-$rep $B/ds4 cuda --ssd-streaming --ssd-streaming-cache-experts 2GB -n 48
    echo "== rep $rep $v hip streamed hot, cache 2GB (-n 24)"
    r hiphot-$v-$rep $B/ds4-hip hip --ssd-streaming --ssd-streaming-cache-experts 2GB -n 24
  done
done
for rep in 1 2; do
  for v in old new; do
    if [ $v = old ]; then B=$O; else B=$D; fi
    for p in seq expert; do
      echo "== rep $rep $v ds4-bench io $p hot"
      $B/ds4-bench io --backend cuda --file $m --pattern $p --hot --reps 3 --dest 1GiB \
        --total 4GiB --cases engine,io-threads,copy --workers 16 --chunk 4MiB --direct off \
        --json > "$OUT/io-$p-$v-$rep.json" 2> "$OUT/io-$p-$v-$rep.log"
      echo "rc $?"; grep -iE "GB/s|error" "$OUT/io-$p-$v-$rep.log" | tail -6
    done
  done
done
