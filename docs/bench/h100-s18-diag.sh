#!/usr/bin/env bash
# Issue 18, eighteenth session, on the GPU machine (D=.dev/device: docs/bench/build-device.sh):
#   link    why the link slows beside the readers (h100-s18-link.py)
#   trace   the staged expert timeline, ramp off/on, 4 MiB and 1 MiB chunks, accurate
#           completion times (event spin on); raw traces kept in $OUT (docs/bench/stage-trace.py)
#   io      engine vs io-threads, ramp off/on (DS4_RAMP), expert and seq, hot, same run
#   decode  ds4 --ssd-streaming, 2 GB and 1 GB caches, ramp off/on
#   tests   the GPU tests, cuda and hip (shim), ramp off and on
#   PARTS="link trace io decode tests" REPS=3 DREPS=2 OUT=... bash docs/bench/h100-s18-diag.sh
#   (any subset of PARTS; REPS = io reps, DREPS = decode reps)
set -u
. docs/bench/lib.sh
P=" ${PARTS:-link trace io decode tests} "; has() { case "$P" in *" $1 "*) return 0;; esac; return 1; }
has link && python3 docs/bench/h100-s18-link.py $m 15 2>&1 | tee "$OUT/link.txt"
tr() { # name chunk slots [env...]
  local n=$1 ch=$2 sl=$3; shift 3
  mkdir -p "$OUT/$n"; echo "== trace $n"
  env "$@" DS4_EVENT_SPIN_US=1000 DS4_STAGE_TRACE="$OUT/$n/t" $D/ds4-bench io --backend cuda \
    --file $m --pattern expert --total 2700MiB --hot --workers 16 --chunk $ch --slots $sl \
    --direct off --reps 2 --cases engine,io-threads --quiet 2>&1 | grep -E "^(engine|io-threads) " | cut -c1-60
  python3 docs/bench/stage-trace.py "$OUT/$n"/t.*.jsonl 2>&1 | grep -E "jsonl|total|read1|issue0|done1|link|after"
}
if has trace; then
  tr c4 4MiB 32; tr c4-ramp 4MiB 32 DS4_RAMP=on; tr c1 1MiB 64; tr c1-ramp 1MiB 64 DS4_RAMP=on
fi
io() { # name pattern total env...
  local n=$1 pat=$2 tot=$3; shift 3
  env "$@" $D/ds4-bench io --backend cuda --file $m --pattern $pat --total $tot --hot --workers 16 \
    --chunk 4MiB --direct off --reps 3 --cases engine,engine-host,io-threads --quiet --json \
    > "$OUT/$n.json" 2> "$OUT/$n.err" || { echo "  $n FAILED: $(tail -2 "$OUT/$n.err")"; return; }
  python3 - "$OUT/$n.json" "$n" <<'PY'
import json, sys
g = {r["case"]: r for r in (json.loads(l) for l in open(sys.argv[1]) if l.startswith("{"))}
e, io, h = g["engine"], g["io-threads"], g["engine-host"]
print(f"  {sys.argv[2]:16} engine {e['gbps']:6.2f}  host {h['gbps']:6.2f}  io-threads {io['gbps']:6.2f}"
      f"  staged/io {e['gbps']/io['gbps']:.3f}  cpu {e.get('cpu_util') or 0:.1f}")
PY
}
if has io; then
  for rep in $(seq ${REPS:-3}); do
    echo "== io rep $rep"
    for r in off on; do io exp-$r-$rep expert 2700MiB DS4_RAMP=$r; done
    for r in off on; do io seq-$r-$rep seq 8GiB DS4_RAMP=$r; done
  done
fi
has decode && for rep in $(seq ${DREPS:-2}); do
  for r in off on; do
    echo "== decode rep $rep ramp $r: streamed 2GB, 1GB (-n 48)"
    dec d2-$r-$rep DS4_RAMP=$r --ssd-streaming --ssd-streaming-cache-experts 2GB -n 48
    dec d1-$r-$rep DS4_RAMP=$r --ssd-streaming --ssd-streaming-cache-experts 1GB -n 48
  done
done
if has tests; then
  [ -f /tmp/shim/libamdhip64.so.5 ] || bash tests/hip_shim/build.sh /tmp/shim $D/*-hip 2>&1 | tail -1
  for r in off on; do
    export DS4_RAMP=$r DS4_GPU_TESTS=cuda
    for b in engine_device device_backends decode_gpu capi_gpu; do t $b-$r $D/$b --test-threads=1; done
    t lib-$r $D/ds4_stream device engine expert_store decode
    export DS4_GPU_TESTS=hip
    for b in engine_device device_backends decode_gpu capi_gpu; do LD_LIBRARY_PATH=/tmp/shim t $b-hip-$r $D/$b-hip --test-threads=1; done
    LD_LIBRARY_PATH=/tmp/shim t lib-hip-$r $D/ds4_stream-hip device engine expert_store decode
  done
  unset DS4_GPU_TESTS DS4_RAMP
fi
