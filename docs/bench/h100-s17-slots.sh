#!/usr/bin/env bash
# Issue 18, seventeenth session: staged expert pattern against the ring's size (slots x chunk),
# hot, 16 workers, same run. D=.dev/device from docs/bench/build-device.sh.
#   OUT=... bash docs/bench/h100-s17-slots.sh
set -u
D=.dev/device; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
m=/root/flash6.gguf
[ -f $m ] || $D/ds4 gen-model --scale flash --layers 6 --fill $m | tail -1
cat $m > /dev/null
$D/ds4 --backend cuda -m $m -n 2 > /dev/null 2>&1   # JIT warm-up
io() { # name chunk slots
  local n=$1 ch=$2 sl=$3
  $D/ds4-bench io --backend cuda --file $m --pattern expert --total 2700MiB --hot --workers 16 \
    --chunk $ch --slots $sl --direct off --reps 3 --cases engine,io-threads --quiet --json \
    > "$OUT/$n.json" 2> "$OUT/$n.err" || { echo "  $n FAILED: $(tail -2 "$OUT/$n.err")"; return; }
  python3 - "$OUT/$n.json" "$n" <<'PY'
import json, sys
g = {r["case"]: r for r in (json.loads(l) for l in open(sys.argv[1]) if l.startswith("{"))}
e, io = g["engine"], g["io-threads"]
x = e.get("extra") or {}
def p(k): v = x.get(k) or {}; return f"{v.get('p50_us',0)}/{v.get('p99_us',0)}"
print(f"  {sys.argv[2]:14} engine {e['gbps']:6.2f}  io-threads {io['gbps']:6.2f}  staged/io {e['gbps']/io['gbps']:.3f}"
      f"  us p50/p99: read {p('chunk_read')} queued {p('queued')} copy {p('copy')} held {p('slot_held')} stall {x.get('stall_total_us')}")
PY
}
for rep in 1 2; do
  echo "== rep $rep"
  for sl in 8 16 24 32 64; do io c4-s$sl-$rep 4MiB $sl; done
  for sl in 16 32 64; do io c2-s$sl-$rep 2MiB $sl; done
  for sl in 32 64 128; do io c1-s$sl-$rep 1MiB $sl; done
done
