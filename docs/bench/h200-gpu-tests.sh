#!/usr/bin/env bash
# Run from the repository root on the GPU machine; D=.dev/device holds the binaries built here
# (docs/STATUS.md, "How to run things on the GPU machine"): ds4 / ds4-bench / test binaries built
# with --features cuda, the same with an -hip suffix built with --features hip, fio, plan_chunks.
# Session 6 batch 1: GpuDevice refactor on CUDA + HIP (hipRTC through the shim), fuzz beside.
set -u
D=.dev/device
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# --- fuzz plan_chunks on 11 cores, niced, beside the functional GPU tests (no timings taken) ---
mkdir -p /tmp/fz/art
NF=${NF:-11}; FT=${FT:-470}
for i in $(seq 1 $NF); do
  mkdir -p /tmp/fz/c$i
  nice -n 19 $D/plan_chunks -max_total_time=$FT -rss_limit_mb=2048 -seed=$((7000+i)) \
    -artifact_prefix=/tmp/fz/art/ -print_final_stats=1 /tmp/fz/c$i fuzz/corpus/plan_chunks \
    > /tmp/fz/log$i.txt 2>&1 &
done
mkdir -p target/release
t() { local n=$1; shift; echo "=== $n"; local s=$SECONDS; "$@" 2>&1 | grep -E "^test |test result|^== |within|digest|L2|bytes \(|panicked|error|Error|note:" | head -60; echo "($((SECONDS-s)) s)"; }
export DS4_GPU_TESTS=cuda
cp $D/ds4 target/release/ds4
t kernels_gpu $D/kernels_gpu --nocapture
t decode_gpu $D/decode_gpu --nocapture --test-threads=1
t device_backends $D/device_backends
t engine_device $D/engine_device
echo "=== hip shim"
bash tests/hip_shim/build.sh /tmp/shim $D/*-hip $D/ds4-hip 2>&1 | tail -6
export DS4_GPU_TESTS=hip LD_LIBRARY_PATH=/tmp/shim
cp $D/ds4-hip target/release/ds4
t kernels_gpu-hip $D/kernels_gpu-hip --nocapture
t decode_gpu-hip $D/decode_gpu-hip --nocapture --test-threads=1
t device_backends-hip $D/device_backends-hip
t engine_device-hip $D/engine_device-hip
unset LD_LIBRARY_PATH DS4_GPU_TESTS
echo "=== waiting for fuzz"; wait
{ for i in $(seq 1 $NF); do grep -h "stat::number_of_executed_units\|stat::peak_rss\|Done\|ERROR\|crash" /tmp/fz/log$i.txt | tr '\n' ' '; echo; done; } > $OUT/fuzz.txt
awk '/number_of_executed_units/ {for(i=1;i<=NF;i++) if($i=="stat::number_of_executed_units:") s+=$(i+1)} END {print "total executions:", s}' $OUT/fuzz.txt
ls /tmp/fz/art | head; cp /tmp/fz/art/* $OUT/ 2>/dev/null; true
