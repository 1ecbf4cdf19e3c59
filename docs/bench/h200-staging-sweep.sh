#!/bin/bash
# Staging-ring sweep on the GPU machine (slots 16/32/64 x workers 12/16 x chunk 1-4 MiB, hot):
#   bash docs/bench/h200-staging-sweep.sh BINDIR OUTDIR   (BINDIR: ds4-bench --features cuda, fio)
bin=$(cd "$1" && pwd)
out=$(realpath -m "$2"); mkdir -p "$out"
cd "$bin"
f=/root/ds4io/seq8g.bin
mkdir -p /root/ds4io
[ -f $f ] || ./fio --name=w --filename=$f --rw=write --bs=4m --size=8g --refill_buffers --output=/dev/null
cat $f > /dev/null
for slots in 16 32 64; do
  echo "== seq slots=$slots"
  ./ds4-bench io --backend cuda --file $f --pattern seq --hot --reps 3 --dest 1GiB --slots $slots \
    --cases engine,io-threads --workers 12,16 --chunk 1MiB,2MiB,4MiB --direct off --json > $out/seq-s$slots.json 2> $out/seq-s$slots.log
  grep -A20 "^case" $out/seq-s$slots.log | head -14
  echo "== expert slots=$slots"
  ./ds4-bench io --backend cuda --file $f --pattern expert --hot --reps 3 --dest 1GiB --slots $slots --total 2831155200 \
    --cases engine --workers 12,16 --chunk 1MiB,2MiB,4MiB --direct off --json > $out/exp-s$slots.json 2> $out/exp-s$slots.log
  grep -A20 "^case" $out/exp-s$slots.log | head -8
done
