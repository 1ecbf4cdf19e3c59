#!/usr/bin/env bash
# Issue 18, eighteenth session: the staged path against KvikIO and io-threads in the same run
# (GPU machine; D=.dev/device from docs/bench/build-device.sh, .dev/wheels: kvikio-cu13,
# libkvikio-cu13 and rapids-logger wheels, `pip download --no-deps`). Two rounds, each: engine
# + io-threads (ds4-bench io) then KvikIO 16 threads, 4 MiB tasks, expert 2700 MiB and seq 8 GiB.
#   OUT=... bash docs/bench/h100-s18-kv.sh
set -u
. docs/bench/lib.sh
kv=/root/kvikio-py; rm -rf $kv; mkdir -p $kv
for w in .dev/wheels/*.whl; do python3 -m zipfile -e "$w" $kv > /dev/null; done
for rep in 1 2; do
  for pat in expert seq; do
    tot=8GiB; kt=8589934592; [ $pat = expert ] && { tot=2700MiB; kt=2831155200; }
    echo "== $pat rep $rep"
    $D/ds4-bench io --backend cuda --file $m --pattern $pat --total $tot --hot --workers 16 \
      --chunk 4MiB --direct off --reps 3 --cases engine,io-threads --quiet 2>&1 |
      grep -E "^(engine|io-threads) " | cut -c1-60
    PYTHONPATH=$kv LD_LIBRARY_PATH="$kv/libkvikio/lib64:$kv/rapids_logger/lib64" \
      python3 benches/kvikio/kvikio_bench.py --file $m --pattern $pat --threads 16 \
      --task-size 4MiB --reps 3 --total $kt --dest 1GiB 2>&1 | tee -a "$OUT/kv-$pat.jsonl" | cut -c1-160
  done
done
