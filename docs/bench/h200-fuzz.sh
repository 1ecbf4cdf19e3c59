#!/usr/bin/env bash
# Run from the repository root on the GPU machine (or any Linux box): fuzz plan_chunks on every
# core for FT seconds. D=.dev/device holds plan_chunks, built here with
#   RUSTC_BOOTSTRAP=1 cargo fuzz build -O -a -s none plan_chunks
# (release + debug assertions, no ASan: docs/TESTING.md says why) and stripped.
# Usage: FT=540 SEED=8000 bash docs/bench/h200-fuzz.sh   (results: $OUT/fuzz-SEED.txt, crashes: $OUT/)
set -u
D=${D:-.dev/device}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
NF=${NF:-$(nproc)}; FT=${FT:-540}; SEED=${SEED:-8000}
echo "cores $(nproc), $NF processes, $FT s, seeds $((SEED+1))..$((SEED+NF))"
mkdir -p /tmp/fz/art
for i in $(seq 1 "$NF"); do
  mkdir -p /tmp/fz/c$i
  $D/plan_chunks -max_total_time="$FT" -rss_limit_mb=2048 -seed=$((SEED+i)) \
    -artifact_prefix=/tmp/fz/art/ -print_final_stats=1 /tmp/fz/c$i fuzz/corpus/plan_chunks \
    > /tmp/fz/log$i.txt 2>&1 &
done
wait
{ for i in $(seq 1 "$NF"); do
    grep -h "stat::number_of_executed_units\|stat::peak_rss\|Done\|ERROR\|crash\|panicked" \
      /tmp/fz/log$i.txt | tr '\n' ' '; echo; done; } > "$OUT/fuzz-$SEED.txt"
awk '/number_of_executed_units/ {for(i=1;i<=NF;i++) if($i=="stat::number_of_executed_units:") s+=$(i+1)} END {print "total executions:", s}' "$OUT/fuzz-$SEED.txt" | tee -a "$OUT/fuzz-$SEED.txt"
grep -c "ERROR\|panicked" "$OUT/fuzz-$SEED.txt" | sed 's/^/processes reporting an error: /'
ls /tmp/fz/art | head; cp /tmp/fz/art/* "$OUT/" 2>/dev/null; true
