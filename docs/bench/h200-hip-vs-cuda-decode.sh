#!/usr/bin/env bash
# Run from the repository root on the GPU machine; D=.dev/device holds the binaries built here
# (docs/STATUS.md, "How to run things on the GPU machine"): ds4 / ds4-bench / test binaries built
# with --features cuda, the same with an -hip suffix built with --features hip, fio, plan_chunks.
# HIP (through tests/hip_shim) vs CUDA: the same decode runs, same model, same minute.
set -u
D=.dev/device; m=/root/flash6.gguf
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
[ -f $m ] || /usr/bin/time -f "gen-model: %e s" $D/ds4 gen-model --scale flash --layers 6 --fill $m
[ -f /tmp/shim/libamdhip64.so.5 ] || bash tests/hip_shim/build.sh /tmp/shim $D/ds4-hip >/dev/null
s() { python3 docs/bench/run-summary.py $1; }
r() { local name=$1 b=$2; shift 2
  if [ $b = hip ]; then LD_LIBRARY_PATH=/tmp/shim $D/ds4-hip --backend hip -m $m --json "$@" > /tmp/$name.json 2>/tmp/$name.err
  else $D/ds4 --backend cuda -m $m --json "$@" > /tmp/$name.json 2>/tmp/$name.err; fi
  if [ $? = 0 ]; then s /tmp/$name.json; else echo "  $b FAILED: $(tail -2 /tmp/$name.err)"; fi; }
cat $m > /dev/null
for rep in 1 2; do
for b in cuda hip; do
  echo "== rep $rep $b resident (-n 16)"; r res-$b $b -n 16
  echo "== rep $rep $b streamed hot, cache 2GB (-n 48)"; r hot-$b $b --ssd-streaming --ssd-streaming-cache-experts 2GB -n 48
  echo "== rep $rep $b streamed cold, cache 2GB (-n 24)"; drop; r cold-$b $b --ssd-streaming --ssd-streaming-cold --ssd-streaming-cache-experts 2GB -n 24
  cat $m > /dev/null
done; done
