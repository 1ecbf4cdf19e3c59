#!/usr/bin/env bash
# Issue 18, nineteenth session, on the GPU machine (D=.dev/device: docs/bench/build-device.sh):
# one host-to-device copy stream against one per reader thread (DS4_COPY_STREAMS).
#   py      the cupy harness (h100-s18-streams.py): shared / 4 / own streams, 16 and 8 threads
#   io      ds4-bench io, engine at DS4_COPY_STREAMS=1,4,16 + io-threads, expert and seq, hot
#   kv      KvikIO 16 threads 4 MiB, expert (the same run's baseline; .dev/wheels)
#   decode  ds4 --ssd-streaming, 2 GB and 1 GB caches, streams 1 / 16
#   tests   the GPU tests, cuda and hip (shim), streams 1 and 16; the kernels' ordering test
#           against a build whose launches wait on stream 0 only (.dev/device/kernels_gpu-broken;
#           it must fail)
#   PARTS="py io kv decode tests" REPS=3 DREPS=2 OUT=... bash docs/bench/h100-s19-streams.sh
set -u
. docs/bench/lib.sh
P=" ${PARTS:-py io kv decode tests} "; has() { case "$P" in *" $1 "*) return 0;; esac; return 1; }
if has py; then
  for th in 16 8; do python3 docs/bench/h100-s18-streams.py $m $th 120 2>&1 | tail -3; done
fi
io() { # name pattern total cases env...
  local n=$1 pat=$2 tot=$3 cases=$4; shift 4
  env "$@" $D/ds4-bench io --backend cuda --file $m --pattern $pat --total $tot --hot --workers 16 \
    --chunk 4MiB --direct off --reps 3 --cases $cases --quiet 2>&1 |
    grep -E "^(engine|io-threads) " | cut -c1-60 | sed "s/^/  $n /"
}
kv=/root/kvikio-py
if has kv && ! [ -d $kv ]; then
  mkdir -p $kv; for w in .dev/wheels/*.whl; do python3 -m zipfile -e "$w" $kv > /dev/null; done
fi
if has io; then
  for rep in $(seq ${REPS:-3}); do
    echo "== io rep $rep"
    io exp expert 2700MiB io-threads
    for s in 1 4 16; do io exp-s$s expert 2700MiB engine DS4_COPY_STREAMS=$s; done
    has kv && PYTHONPATH=$kv LD_LIBRARY_PATH="$kv/libkvikio/lib64:$kv/rapids_logger/lib64" \
      python3 benches/kvikio/kvikio_bench.py --file $m --pattern expert --threads 16 \
      --task-size 4MiB --reps 3 --total 2831155200 --dest 1GiB 2>&1 | python3 -c 'import json, sys
for l in sys.stdin:
    print("  kvikio expert %.3f GB/s" % json.loads(l)["gbps"] if l.startswith("{") else "  " + l.rstrip()[:100])'
    io seq seq 8GiB io-threads
    for s in 1 16; do io seq-s$s seq 8GiB engine DS4_COPY_STREAMS=$s; done
  done
fi
has decode && for rep in $(seq ${DREPS:-2}); do
  for s in 1 16; do
    echo "== decode rep $rep streams $s: streamed 2GB, 1GB (-n 48)"
    dec d2-s$s-$rep DS4_COPY_STREAMS=$s --ssd-streaming --ssd-streaming-cache-experts 2GB -n 48
    dec d1-s$s-$rep DS4_COPY_STREAMS=$s --ssd-streaming --ssd-streaming-cache-experts 1GB -n 48
  done
done
if has tests; then
  [ -f /tmp/shim/libamdhip64.so.5 ] || bash tests/hip_shim/build.sh /tmp/shim $D/*-hip 2>&1 | tail -1
  t kernels-broken env DS4_GPU_TESTS=cuda $D/kernels_gpu-broken every_copy_stream
  for s in 1 16; do
    export DS4_COPY_STREAMS=$s DS4_GPU_TESTS=cuda
    for b in engine_device device_backends kernels_gpu decode_gpu capi_gpu; do t $b-s$s $D/$b --test-threads=1; done
    t lib-s$s $D/ds4_stream device engine expert_store decode
    export DS4_GPU_TESTS=hip
    for b in engine_device device_backends kernels_gpu decode_gpu capi_gpu; do LD_LIBRARY_PATH=/tmp/shim t $b-hip-s$s $D/$b-hip --test-threads=1; done
    LD_LIBRARY_PATH=/tmp/shim t lib-hip-s$s $D/ds4_stream-hip device engine expert_store decode
  done
  unset DS4_GPU_TESTS DS4_COPY_STREAMS
fi
