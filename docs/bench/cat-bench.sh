#!/usr/bin/env bash
# `ds4 cat` against the disk's and the page cache's ceilings on the same bytes, same run.
#
#   bash docs/bench/cat-bench.sh FILE TENSOR [REPS] [DS4...]
#
# Cold: page cache dropped (echo 3 > /proc/sys/vm/drop_caches, needs root) before every run;
# each repetition runs every configuration, alternating order. The fio baseline is the best of
# several O_DIRECT configurations (psync 1 and 4 jobs, libaio depth 4/8/32; 4 and 8 MiB blocks)
# over the tensor's bytes (offset rounded down to 4096), and the winner is named.
# Hot: the tensor read once buffered first; `ds4 cat` vs `dd bs=4M` (read() into one reused
# buffer) of the same byte range, both to /dev/null.
# Extra DS4 binaries (e.g. an older build) are timed alongside the first.
# Other reader shapes: wrapper scripts as extra binaries, e.g. /tmp/ds4-8x12x1024 holding
#   DS4_CAT_SHAPE=8,12,1024 exec /path/to/ds4 "$@"
# The cold lines also print the ratio to the best psync 1/4-job run (the issue's fio set).
# Prints one line per measurement and the medians with ratios.
set -euo pipefail
file=$1 tensor=$2 reps=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
bins=("${@:-target/release/ds4}")
[ ${#bins[@]} -gt 0 ] || bins=(target/release/ds4)
read -r off len < <("${bins[0]}" inspect "$file" --json | python3 -c "
import json,sys
d=json.load(sys.stdin)
t=[t for t in d['tensors'] if t['name']=='$tensor'][0]
print(t['offset'], t['nbytes'])")
aoff=$(( off / 4096 * 4096 ))
alen=$(( (off + len - aoff + 4095) / 4096 * 4096 ))
echo "tensor $tensor: offset $off, $len bytes (fio/dd: $alen bytes at $aoff)"
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
now() { date +%s.%N; }
gbps() { python3 -c "print(f'{$1/($3-$2)/1e9:.3f}')"; }
results=$(mktemp)
run_fio() { # name, extra args
    local name=$1; shift
    local out
    out=$(fio --name=x --filename="$file" --readonly --direct=1 --rw=read --offset="$aoff" \
        --size="$alen" --output-format=json "$@" 2>/dev/null)
    local bw
    bw=$(echo "$out" | python3 -c "import json,sys; j=json.load(sys.stdin); print(sum(x['read']['bw_bytes'] for x in j['jobs'])/1e9)")
    echo "cold fio-$name $bw" | tee -a "$results"
}
for r in $(seq 1 "$reps"); do
    for b in "${bins[@]}"; do
        drop; t0=$(now); "$b" cat "$file" "$tensor" > /dev/null; t1=$(now)
        echo "cold cat:$b $(gbps "$len" "$t0" "$t1")" | tee -a "$results"
    done
    drop; run_fio psync1-4m --ioengine=psync --bs=4m --numjobs=1
    drop; run_fio psync1-8m --ioengine=psync --bs=8m --numjobs=1
    drop; run_fio psync4-4m --ioengine=psync --bs=4m --numjobs=4 --offset_increment=$(( alen / 4 / 4096 * 4096 )) --size=$(( alen / 4 / 4096 * 4096 )) --group_reporting
    drop; run_fio aio4-4m --ioengine=libaio --bs=4m --iodepth=4
    drop; run_fio aio8-4m --ioengine=libaio --bs=4m --iodepth=8
    drop; run_fio aio8-8m --ioengine=libaio --bs=8m --iodepth=8
    drop; run_fio aio32-4m --ioengine=libaio --bs=4m --iodepth=32
done
# Hot: bring the bytes into the page cache, then read them again.
dd if="$file" of=/dev/null bs=4M iflag=skip_bytes,count_bytes skip="$aoff" count="$alen" status=none
for r in $(seq 1 "$reps"); do
    for b in "${bins[@]}"; do
        t0=$(now); "$b" cat "$file" "$tensor" > /dev/null; t1=$(now)
        echo "hot cat:$b $(gbps "$len" "$t0" "$t1")" | tee -a "$results"
    done
    t0=$(now)
    dd if="$file" of=/dev/null bs=4M iflag=skip_bytes,count_bytes skip="$aoff" count="$alen" status=none
    t1=$(now)
    echo "hot dd-4m $(gbps "$alen" "$t0" "$t1")" | tee -a "$results"
done
python3 - "$results" <<'EOF'
import sys, statistics as st, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    mode, name, v = line.split()
    rows[(mode, name)].append(float(v))
med = {k: st.median(v) for k, v in rows.items()}
print("\nmedians (GB/s; min-max):")
for k, v in sorted(rows.items()):
    print(f"  {k[0]:4} {k[1]:40} {med[k]:.3f}  ({min(v):.3f}-{max(v):.3f}, n={len(v)})")
fio = {k[1]: m for k, m in med.items() if k[0] == "cold" and k[1].startswith("fio-")}
best = max(fio, key=fio.get)
dd = med[("hot", "dd-4m")]
# The issue's own set (1 and 4 jobs, 4 and 8 MiB, plain pread) beside the best of all.
psync = {k: v for k, v in fio.items() if k.startswith("fio-psync")}
pbest = max(psync, key=psync.get) if psync else None
for k, m in sorted(med.items()):
    if k[1].startswith("cat:"):
        base = fio[best] if k[0] == "cold" else dd
        what = best if k[0] == "cold" else "dd-4m"
        print(f"  {k[0]} {k[1]}: {m / base:.2f}x {what} (median {base:.3f})")
        if k[0] == "cold" and pbest:
            print(f"  cold {k[1]}: {m / psync[pbest]:.2f}x {pbest}, the best psync 1/4-job run (median {psync[pbest]:.3f})")
EOF
rm -f "$results"
