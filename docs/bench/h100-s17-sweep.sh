#!/usr/bin/env bash
# Issue 18, seventeenth session: (1) the cost of one copy call (h100-s17-calls.py, cupy);
# (2) staged expert/seq against io-threads over workers x chunk, copy thread on and off.
#   OUT=... bash docs/bench/h100-s17-sweep.sh      (D=.dev/device: ds4, ds4-bench)
set -u
D=.dev/device; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 docs/bench/h100-s17-calls.py 2>&1 | tee "$OUT/calls.txt"
m=/root/flash6.gguf
[ -f $m ] || $D/ds4 gen-model --scale flash --layers 6 --fill $m | tail -1
cat $m > /dev/null
$D/ds4 --backend cuda -m $m -n 2 > /dev/null 2>&1   # JIT warm-up
sweep() { # name pattern total env...
  local n=$1 pat=$2 tot=$3; shift 3
  env "$@" $D/ds4-bench io --backend cuda --file $m --pattern $pat --total $tot --hot \
    --workers ${W:-8,16,24,32} --chunk ${C:-1MiB,2MiB,4MiB} --direct off --reps 3 \
    --cases engine,io-threads --quiet --json > "$OUT/$n.json" 2> "$OUT/$n.err" \
    || { echo "$n FAILED: $(tail -2 "$OUT/$n.err")"; return; }
  python3 - "$OUT/$n.json" "$n" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
io = {}
for r in rows:
    if r["case"] == "io-threads": io[r["workers"]] = max(io.get(r["workers"], 0), r["gbps"])
for r in rows:
    if r["case"] != "engine": continue
    x = r.get("extra") or {}
    def p(k): v = x.get(k) or {}; return f"{v.get('p50_us',0)}/{v.get('p99_us',0)}"
    i = io.get(r["workers"], 0)
    print(f"{sys.argv[2]:12} w {r['workers']:2} chunk {r['chunk']>>10:5}K engine {r['gbps']:6.2f} io-threads(best chunk, same w) {i:6.2f}"
          f" ratio {r['gbps']/i if i else 0:.3f}  read {p('chunk_read')} issue {p('issue')} copy {p('copy')} held {p('slot_held')}")
print(f"{sys.argv[2]:12} io-threads by workers: {io}")
PY
}
for rep in 1 2; do
  sweep expert-on-$rep expert 2700MiB
  sweep expert-off-$rep expert 2700MiB DS4_COPY_THREAD=off
done
W=16,24 C=2MiB,4MiB sweep seq-on seq 8GiB
W=16,24 C=2MiB,4MiB sweep seq-off seq 8GiB DS4_COPY_THREAD=off
