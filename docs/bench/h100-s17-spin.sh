#!/usr/bin/env bash
# Issue 18, seventeenth session: the completion thread's wait for copy events, blocking vs
# polled first (DS4_EVENT_SPIN_US), same run. D=.dev/device from docs/bench/build-device.sh.
#   PARTS="wake io decode tests" OUT=... bash docs/bench/h100-s17-spin.sh   (any subset)
set -u
D=.dev/device; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
P=" ${PARTS:-wake io decode tests} "; has() { case "$P" in *" $1 "*) return 0;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
mkdir -p /work/main/target/release /work/tgt-hip/release
cp $D/ds4 /work/main/target/release/ds4; cp $D/ds4-hip /work/tgt-hip/release/ds4
has wake && python3 docs/bench/h100-s17-wake.py 2>&1 | tee "$OUT/wake.txt"
m=/root/flash6.gguf
[ -f $m ] || $D/ds4 gen-model --scale flash --layers 6 --fill $m | tail -1
cat $m > /dev/null
$D/ds4 --backend cuda -m $m -n 2 > /dev/null 2>&1   # JIT warm-up
io() { # name pattern total chunk env...
  local n=$1 pat=$2 tot=$3 ch=$4; shift 4
  env "$@" $D/ds4-bench io --backend cuda --file $m --pattern $pat --total $tot --hot --workers 16 \
    --chunk $ch --direct off --reps 3 --cases engine,engine-host,io-threads --quiet --json \
    > "$OUT/$n.json" 2> "$OUT/$n.err" || { echo "  $n FAILED: $(tail -2 "$OUT/$n.err")"; return; }
  python3 - "$OUT/$n.json" "$n" <<'PY'
import json, sys
g = {r["case"]: r for r in (json.loads(l) for l in open(sys.argv[1]) if l.startswith("{"))}
e, io, h = g["engine"], g["io-threads"], g["engine-host"]
x = e.get("extra") or {}
def p(k): v = x.get(k) or {}; return f"{v.get('p50_us',0)}/{v.get('p99_us',0)}"
print(f"  {sys.argv[2]:22} engine {e['gbps']:6.2f}  host {h['gbps']:6.2f}  io-threads {io['gbps']:6.2f}"
      f"  staged/io {e['gbps']/io['gbps']:.3f}  cpu {e.get('cpu_util') or 0:.1f}  us p50/p99: read {p('chunk_read')}"
      f" issue {p('issue')} copy {p('copy')} held {p('slot_held')}")
PY
}
if has io; then
  for rep in 1 2; do
    echo "== expert rep $rep (16 workers, 4 MiB chunks; DS4_EVENT_SPIN_US)"
    for us in 0 50 200 1000 1000000; do io exp-s$us-$rep expert 2700MiB 4MiB DS4_EVENT_SPIN_US=$us; done
    io exp-s1000-inline-$rep expert 2700MiB 4MiB DS4_EVENT_SPIN_US=1000 DS4_COPY_THREAD=off
    for us in 0 1000; do io exp-c1-s$us-$rep expert 2700MiB 1MiB DS4_EVENT_SPIN_US=$us; done
    echo "== seq rep $rep"
    for us in 0 1000; do io seq-s$us-$rep seq 8GiB 4MiB DS4_EVENT_SPIN_US=$us; done
  done
fi
s() { python3 docs/bench/run-summary.py "$1"; }
r() { local name=$1; shift; cat $m > /dev/null
  "$@" --backend cuda -m $m --json > "$OUT/$name.json" 2>"$OUT/$name.err" && s "$OUT/$name.json" \
    || echo "  $name FAILED: $(tail -2 "$OUT/$name.err")"; }
has decode && for rep in 1 2; do
  for us in 0 1000; do
    echo "== decode rep $rep spin $us us: resident, streamed 2GB, streamed 1GB (-n 48)"
    r res-s$us-$rep env DS4_EVENT_SPIN_US=$us $D/ds4 -n 48
    r hot-s$us-$rep env DS4_EVENT_SPIN_US=$us $D/ds4 --ssd-streaming --ssd-streaming-cache-experts 2GB -n 48
    r hot1-s$us-$rep env DS4_EVENT_SPIN_US=$us $D/ds4 --ssd-streaming --ssd-streaming-cache-experts 1GB -n 48
  done
done
t() { local n=$1; shift; echo "=== $n"; local s=$SECONDS
  "$@" > "$OUT/$n.log" 2>&1; echo "rc $?"
  grep -E "test result|panicked|FAILED" "$OUT/$n.log" | head -8; echo "($((SECONDS-s)) s)"; }
if has tests; then
  [ -f /tmp/shim/libamdhip64.so.5 ] || bash tests/hip_shim/build.sh /tmp/shim $D/*-hip 2>&1 | tail -1
  for us in 0 1000; do
    export DS4_EVENT_SPIN_US=$us DS4_GPU_TESTS=cuda
    for b in engine_device device_backends decode_gpu capi_gpu; do t $b-s$us $D/$b --test-threads=1; done
    t lib-s$us $D/ds4_stream device engine expert_store decode
    export DS4_GPU_TESTS=hip
    for b in engine_device device_backends decode_gpu capi_gpu; do LD_LIBRARY_PATH=/tmp/shim t $b-hip-s$us $D/$b-hip --test-threads=1; done
    LD_LIBRARY_PATH=/tmp/shim t lib-hip-s$us $D/ds4_stream-hip device engine expert_store decode
  done
  unset DS4_GPU_TESTS DS4_EVENT_SPIN_US
fi
