#!/usr/bin/env bash
# Issue 18, seventeenth session: the staged path's per-chunk timeline (DS4_STAGE_TRACE) on the
# GPU, expert and seq patterns, hot, 16 workers; summarised by docs/bench/stage-trace.py.
#   OUT=... bash docs/bench/h100-s17-trace.sh      (D=.dev/device: docs/bench/build-device.sh)
set -u
D=.dev/device; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
m=/root/flash6.gguf
[ -f $m ] || $D/ds4 gen-model --scale flash --layers 6 --fill $m | tail -1
cat $m > /dev/null
$D/ds4 --backend cuda -m $m -n 2 > /dev/null 2>&1   # JIT warm-up
tr() { # name pattern total chunk slots [env...]
  local n=$1 pat=$2 tot=$3 ch=$4 sl=$5; shift 5
  mkdir -p "$OUT/$n"
  env "$@" DS4_STAGE_TRACE="$OUT/$n/t" $D/ds4-bench io --backend cuda --file $m --pattern $pat \
    --total $tot --hot --workers 16 --chunk $ch --slots $sl --direct off --reps 3 \
    --cases engine,io-threads --quiet 2>&1 | grep -E "^(engine|io-threads) " | cut -c1-60
  python3 docs/bench/stage-trace.py "$OUT/$n"/t.*.jsonl
}
for rep in 1 2; do
  echo "== rep $rep"
  tr exp-c4-$rep expert 2700MiB 4MiB 32
  tr exp-c4-inline-$rep expert 2700MiB 4MiB 32 DS4_COPY_THREAD=off
  tr exp-c1-$rep expert 2700MiB 1MiB 64
  tr seq-c4-$rep seq 4GiB 4MiB 32
done
