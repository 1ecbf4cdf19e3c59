#!/usr/bin/env bash
# Issue 10 item 5 on the GPU machine: the memory plan against real allocations, the measured
# fragmentation headroom, and `ds4 cat` against fio again (after the residency-shaped pool).
#
#   bash docs/bench/h200-plan-check.sh BINDIR
#
# BINDIR: ds4 built with --features cuda, and fio (static) for the cat part.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=$(cd "$1" && pwd)
D=$bin/ds4
echo "== headroom probe"; $D plan --backend cuda --measure-headroom --json
$D gen-model --scale flash --holes all --fill-layers 0-1 /root/flash.gguf > /dev/null &
$D --demo -n 1 >/dev/null 2>&1
echo "== demo streamed"; $D --backend cuda --demo -n 64 --ssd-streaming 2>&1 | grep -v "^note"
echo "== demo resident"; $D --backend cuda --demo -n 64 2>&1 | grep -v "^note"
wait
echo "== flash plan"; $D plan --backend cuda -m /root/flash.gguf --ssd-streaming
echo "== flash streamed, auto cache"; timeout 200 $D --backend cuda -m /root/flash.gguf -n 2 --ssd-streaming 2>&1 | grep -v "^note"
echo "== cat bench"; PATH=$bin:$PATH timeout 200 bash docs/bench/cat-bench.sh /root/flash.gguf blk.0.ffn_down_exps.weight 3 "$D" 2>&1 | tail -n 14
