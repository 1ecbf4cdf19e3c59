#!/usr/bin/env bash
# Run from the repository root on the GPU machine; D=.dev/device holds the binaries built here
# (docs/STATUS.md, "How to run things on the GPU machine"): ds4 / ds4-bench / test binaries built
# with --features cuda, the same with an -hip suffix built with --features hip, fio, plan_chunks.
# Session 6 batch 2: (1) ds4-bench io rows, CUDA vs HIP through the shim, same file and minute;
# (2) ds4 cat cold shapes A/B against fio.
set -u
D=.dev/device; m=/root/flash4.gguf
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
[ -f $m ] || /usr/bin/time -f "gen-model: %e s" $D/ds4 gen-model --scale flash --layers 4 --fill $m
ls -la $m
[ -f /tmp/shim/libamdhip64.so.5 ] || bash tests/hip_shim/build.sh /tmp/shim $D/ds4-bench-hip $D/ds4-hip >/dev/null
cat $m > /dev/null
for rep in 1 2; do
  echo "== rep $rep cuda"
  $D/ds4-bench io --backend cuda --file $m --pattern both --hot --workers 12,16 --chunk 4MiB --direct off \
     --cases engine,engine-host,io-threads,copy --reps 3 --dest 1GiB --total 6GiB --quiet --csv $OUT/io-cuda-$rep.csv 2>&1 | tail -n 14
  echo "== rep $rep hip (shim)"
  LD_LIBRARY_PATH=/tmp/shim $D/ds4-bench-hip io --backend hip --file $m --pattern both --hot --workers 12,16 --chunk 4MiB --direct off \
     --cases engine,engine-host,io-threads,copy --reps 3 --dest 1GiB --total 6GiB --quiet --csv $OUT/io-hip-$rep.csv 2>&1 | tail -n 14
done
echo "== cat cold shapes"
PATH=$D:$PATH timeout 300 bash docs/bench/cat-bench.sh $m blk.0.ffn_down_exps.weight 7 \
  $D/ds4-cold16x24 $D/ds4-cold32x32 $D/ds4-cold24x48 2>&1 | tail -n 16
