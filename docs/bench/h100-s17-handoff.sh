#!/usr/bin/env bash
# Issue 18, seventeenth session: the staged path's hand-offs. (1) stage traces (DS4_STAGE_TRACE)
# with the hops copy queued -> handed to the completion thread -> event seen -> engine done;
# (2) ds4-bench io hot, 16 workers, 4 MiB chunks, no trace: DS4_HANDOFF_SPIN_US (poll before
# parking in the copy thread, completion thread and engine completer) x DS4_EVENT_SPIN_US;
# (3) decode tok/s; (4) the GPU tests with the polling on. D=.dev/device (build-device.sh).
#   OUT=... bash docs/bench/h100-s17-handoff.sh
set -u
D=.dev/device; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p /work/main/target/release; cp $D/ds4 /work/main/target/release/ds4
m=/root/flash6.gguf
[ -f $m ] || $D/ds4 gen-model --scale flash --layers 6 --fill $m | tail -1
cat $m > /dev/null
$D/ds4 --backend cuda -m $m -n 2 > /dev/null 2>&1   # JIT warm-up
b() { $D/ds4-bench io --backend cuda --file $m --hot --workers 16 --chunk 4MiB --direct off "$@"; }
for h in 0 1000; do
  mkdir -p "$OUT/tr-h$h"
  DS4_HANDOFF_SPIN_US=$h DS4_STAGE_TRACE="$OUT/tr-h$h/t" b --pattern expert --total 2700MiB --reps 1 \
    --cases engine --quiet 2>&1 | grep "^engine" | cut -c1-60
  python3 docs/bench/stage-trace.py "$OUT/tr-h$h"/t.*.jsonl | head -12; rm -f "$OUT/tr-h$h"/t.*.jsonl
done
io() { # name pattern total env...
  local n=$1 pat=$2 tot=$3; shift 3
  env "$@" $D/ds4-bench io --backend cuda --file $m --hot --workers 16 --chunk 4MiB --direct off \
    --pattern $pat --total $tot --reps 3 --cases engine,io-threads --quiet --json > "$OUT/$n.json" 2>"$OUT/$n.err" \
    || { echo "  $n FAILED: $(tail -2 "$OUT/$n.err")"; return; }
  python3 - "$OUT/$n.json" "$n" <<'PY'
import json, sys
g = {r["case"]: r for r in (json.loads(l) for l in open(sys.argv[1]) if l.startswith("{"))}
e, io = g["engine"], g["io-threads"]
print(f"  {sys.argv[2]:24} engine {e['gbps']:6.2f}  io-threads {io['gbps']:6.2f}  staged/io {e['gbps']/io['gbps']:.3f}  cpu {e.get('cpu_util') or 0:.1f}")
PY
}
for rep in 1 2; do
  echo "== expert rep $rep"
  io exp-h0-$rep expert 2700MiB DS4_HANDOFF_SPIN_US=0
  io exp-h200-$rep expert 2700MiB DS4_HANDOFF_SPIN_US=200
  io exp-h1000-$rep expert 2700MiB DS4_HANDOFF_SPIN_US=1000
  io exp-h1000-e1000-$rep expert 2700MiB DS4_HANDOFF_SPIN_US=1000 DS4_EVENT_SPIN_US=1000
  io exp-h1000-inline-$rep expert 2700MiB DS4_HANDOFF_SPIN_US=1000 DS4_COPY_THREAD=off
done
echo "== seq"
io seq-h0 seq 8GiB DS4_HANDOFF_SPIN_US=0
io seq-h1000 seq 8GiB DS4_HANDOFF_SPIN_US=1000
s() { python3 docs/bench/run-summary.py "$1"; }
r() { local name=$1; shift; cat $m > /dev/null
  "$@" --backend cuda -m $m --json > "$OUT/$name.json" 2>"$OUT/$name.err" && s "$OUT/$name.json" \
    || echo "  $name FAILED: $(tail -2 "$OUT/$name.err")"; }
for rep in 1 2; do for h in 0 1000; do
  echo "== decode rep $rep handoff spin $h us: streamed 2GB, 1GB (-n 48)"
  r hot-h$h-$rep env DS4_HANDOFF_SPIN_US=$h $D/ds4 --ssd-streaming --ssd-streaming-cache-experts 2GB -n 48
  r hot1-h$h-$rep env DS4_HANDOFF_SPIN_US=$h $D/ds4 --ssd-streaming --ssd-streaming-cache-experts 1GB -n 48
done; done
export DS4_HANDOFF_SPIN_US=1000 DS4_GPU_TESTS=cuda
for t in engine_device device_backends decode_gpu capi_gpu; do
  $D/$t --test-threads=1 > "$OUT/$t.log" 2>&1; echo "=== $t (handoff spin 1000): rc $? $(grep 'test result' "$OUT/$t.log")"
done
