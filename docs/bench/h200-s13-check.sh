#!/usr/bin/env bash
# Issue 18, second GPU run of the thirteenth session: after copy_piece went to 0 and the cold
# depth tuner landed. D=.dev/device (new), B=.dev/base (0ba3661, before issue 18).
#   bash docs/bench/h200-s13-check.sh
# 1. decode base vs new, resident and streamed (cache 2GB, 1GB), -n 48, 2 reps alternated
# 2. ds4-bench io hot expert + seq, base vs new default, and two expert variants
# 3. cold `ds4 cat` (drop_caches before each): tuned default vs the old fixed 16x24x4MiB and a
#    fixed depth 2, against one and four O_DIRECT 8 MiB sequential dd streams (= fio psync
#    1 / 4 jobs; no fio on the GPU machine), 1 GiB and 672 MiB tensors, 4 reps alternated
set -u
D=.dev/device; B=.dev/base; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader; df -h /root | tail -1
m=/root/flash6.gguf
[ -f $m ] || $D/ds4 gen-model --scale flash --layers 6 --fill $m | tail -1
cat $m > /dev/null
$D/ds4 --backend cuda -m $m -n 2 > /dev/null 2>&1   # JIT warm-up
s() { python3 docs/bench/run-summary.py "$1"; }
r() { local name=$1 bin=$2; shift 2; cat $m > /dev/null
  $bin --backend cuda -m $m --json "$@" > "$OUT/$name.json" 2>"$OUT/$name.err" && s "$OUT/$name.json" \
    || echo "  $name FAILED: $(tail -2 "$OUT/$name.err")"; }
for rep in 1 2; do
  for v in base new; do
    if [ $v = base ]; then X=$B/ds4; else X=$D/ds4; fi
    echo "== decode rep $rep $v: resident, streamed 2GB, streamed 1GB (-n 48)"
    r res-$v-$rep $X -n 48
    r hot-$v-$rep $X --ssd-streaming --ssd-streaming-cache-experts 2GB -n 48
    r hot1-$v-$rep $X --ssd-streaming --ssd-streaming-cache-experts 1GB -n 48
  done
done
io() { local n=$1 bin=$2 pat=$3 tot=$4; shift 4
  $bin io --backend cuda --file $m --pattern $pat --total $tot --hot --workers 16 --chunk 4MiB \
    --direct off --reps 3 --cases engine,engine-host,io-threads --quiet --json "$@" \
    > "$OUT/$n.json" 2> "$OUT/$n.err" || { echo "  $n FAILED: $(tail -2 "$OUT/$n.err")"; return; }
  python3 - "$OUT/$n.json" "$n" <<'PY'
import json, sys
g = {}
for l in open(sys.argv[1]):
    if l.startswith("{"): r = json.loads(l); g[r["case"]] = r
e, io = g["engine"], g["io-threads"]
print(f"  {sys.argv[2]:16} engine {e['gbps']:6.2f}  host {g['engine-host']['gbps']:6.2f}  io-threads {io['gbps']:6.2f}  staged/io {e['gbps']/io['gbps']:.3f}")
PY
}
cat $m > /dev/null
for rep in 1 2; do
  echo "== io rep $rep"
  io exp-base-$rep $B/ds4-bench expert 2700MiB
  io exp-new-$rep $D/ds4-bench expert 2700MiB
  io exp-s64-$rep $D/ds4-bench expert 2700MiB --slots 64
  io exp-w24c2-$rep $D/ds4-bench expert 2700MiB --workers 24 --chunk 2MiB
  io seq-base-$rep $B/ds4-bench seq 8GiB
  io seq-new-$rep $D/ds4-bench seq 8GiB
done
echo "== cold ds4 cat (GB/s of the tensor's bytes, whole process)"
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
for t in token_embd.weight blk.0.ffn_down_exps.weight; do
  read -r off len < <($D/ds4 inspect $m --json | python3 -c "
import json,sys
d=json.load(sys.stdin); t=[t for t in d['tensors'] if t['name']=='$t'][0]; print(t['offset'],t['nbytes'])")
  a=$(( off/8388608*8388608 )); n=$(( (off+len-a+8388607)/8388608 )); q=$(( (n+3)/4 ))
  res=$OUT/cold-$t.txt; : > $res
  for rep in 1 2 3 4; do
    for sh in tuned 16,24,4096 2,3,4096; do drop; t0=$(date +%s.%N)
      if [ $sh = tuned ]; then $D/ds4 cat $m $t > /dev/null; else DS4_CAT_SHAPE=$sh $D/ds4 cat $m $t > /dev/null; fi
      t1=$(date +%s.%N); echo "cat:$sh $(python3 -c "print($len/($t1-$t0)/1e9)")" >> $res; done
    drop; t0=$(date +%s.%N); dd if=$m of=/dev/null bs=8M iflag=direct skip=$((a/8388608)) count=$n status=none; t1=$(date +%s.%N)
    echo "dd-1x8M $(python3 -c "print($n*8388608/($t1-$t0)/1e9)")" >> $res
    drop; t0=$(date +%s.%N)
    for k in 0 1 2 3; do dd if=$m of=/dev/null bs=8M iflag=direct skip=$((a/8388608+k*q)) count=$q status=none & done; wait
    t1=$(date +%s.%N); echo "dd-4x8M $(python3 -c "print(4*$q*8388608/($t1-$t0)/1e9)")" >> $res
  done
  echo "-- $t ($len B)"
  python3 - $res <<'PY'
import sys, statistics as st, collections
d = collections.defaultdict(list)
for l in open(sys.argv[1]): k, v = l.split(); d[k].append(float(v))
b = max(st.median(v) for k, v in d.items() if k.startswith("dd"))
for k, v in d.items(): print(f"  {k:16} median {st.median(v):.3f} ({min(v):.3f}-{max(v):.3f})  x{st.median(v)/b:.2f} best dd")
PY
done
drop
$D/ds4-bench io --file $m --pattern seq --cold --cases cat --reps 3 --total 2GiB --json --quiet 2>/dev/null \
  | python3 -c "
import json,sys
for l in sys.stdin:
  if l.startswith('{'): r=json.loads(l); print('  ds4-bench cat cold', round(r['gbps'],3), r.get('extra'))"
