#!/usr/bin/env bash
# Stock DS4 80ebbc3 vs DS4 + ds4-stream (integrations/ds4) on the H200, one run, one binary
# (DS4_STREAM=stock is the stock path), one fully written Flash file in tmpfs (hot).
# Run from the repository root on the GPU machine with `.dev/device` (our `ds4` for gen-model,
# libds4stream.so built with --features cuda) and `.dev/ds4c` (a copy of ../shared/ds4c) carried.
#   bash docs/bench/h200-ds4.sh [SIZES] [TOKENS] [PHASES]
#   SIZES default "1024 2048 4096", TOKENS 24, PHASES "compare" (any of compare verify preload):
#   compare: stock vs ds4-stream, generation and --dump-logits, per cache size;
#   verify:  ds4-stream with DS4_STREAM_VERIFY=1 (every delivered byte compared with the file);
#   preload: the default popularity preload (no --ssd-streaming-cold), stock vs ds4-stream.
# Logs go to /tmp/ds4-out; the summary to $OUT/summary.txt and the logs to $OUT/ds4-logs.tar.gz.
set -uo pipefail
out=/tmp/ds4-out
mkdir -p "$out"
summary=${OUT:-$out}/summary.txt
dev=.dev/device
sizes=${1:-1024 2048 4096}
ntok=${2:-24}
phases=${3:-compare}
model=/mnt/m/flash.gguf
bin=/tmp/ds4b/ds4
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader

mkdir -p /mnt/m
mountpoint -q /mnt/m || mount -t tmpfs -o size=100G tmpfs /mnt/m
if [ ! -x "$bin" ]; then
    (DS4S_LIB_DIR=$dev JOBS=10 bash integrations/ds4/build.sh .dev/ds4c /tmp/ds4b cuda \
        >"$out/build.log" 2>&1; echo "build rc=$?" >>"$out/build.log") &
    build_pid=$!
fi
if [ ! -f "$model" ]; then
    t0=$(date +%s)
    "$dev/ds4" gen-model "$model" --scale flash --fill >"$out/gen.log" 2>&1 || { cat "$out/gen.log"; exit 1; }
    echo "gen-model: $(( $(date +%s) - t0 )) s, $(stat -c %s "$model") bytes"
fi
[ -n "${build_pid:-}" ] && wait "$build_pid"
tail -2 "$out/build.log" 2>/dev/null
[ -x "$bin" ] || { tail -40 "$out/build.log"; exit 1; }

# A short prompt (streaming prefill runs token by token: ~25 tokens), then greedy generation.
prompt=${DS4_PROMPT:-"Explain how a solid state drive stores data, and why a model that streams its expert weights cares about queue depth."}
common=(-m "$model" --cuda --ssd-streaming -c 4096 --temp 0 --nothink)

run() { # run NAME MODE CACHE [extra args...]
    local name=$1 mode=$2 cache=$3
    shift 3
    local t0 t1
    t0=$(date +%s.%N)
    DS4_STREAM=$mode DS4_CUDA_STREAMING_EXPERT_CACHE_VERBOSE=1 timeout "${RUN_TIMEOUT:-150}" "$bin" "${common[@]}" \
        --ssd-streaming-cache-experts "$cache" "$@" >"$out/$name.txt" 2>"$out/$name.err"
    local rc=$?
    t1=$(date +%s.%N)
    local speed hits misses direct
    speed=$(grep -o 'prefill: [0-9.]* t/s, generation: [0-9.]* t/s' "$out/$name.err" | tail -1)
    hits=$(grep -o ' hits=[0-9]*' "$out/$name.err" | awk -F= '{s+=$2} END {print s+0}')
    misses=$(grep -o ' misses=[0-9]*' "$out/$name.err" | awk -F= '{s+=$2} END {print s+0}')
    direct=$(grep -o ' direct=[0-9]*' "$out/$name.err" | awk -F= '{s+=$2} END {print s+0}')
    printf '%-22s rc=%s wall=%6.1fs %s hits=%s misses=%s direct=%s | %s\n' "$name" "$rc" \
        "$(awk "BEGIN {print $t1 - $t0}")" "${speed:-no speed line}" "$hits" "$misses" "$direct" \
        "$(grep 'ds4-stream read' "$out/$name.err" | tail -1 | sed 's/^ds4: //')" | tee -a "$summary"
    # Keep the logs small: the per-layer lines are summed above.
    grep -v 'selected layer=' "$out/$name.err" >"$out/$name.log"; rm -f "$out/$name.err"
}

cold=--ssd-streaming-cold
for phase in $phases; do
    for c in $sizes; do
        case $phase in
        compare)
            run "ds4s-gen-$c" on "$c" $cold -p "$prompt" -n "$ntok"
            run "stock-gen-$c" stock "$c" $cold -p "$prompt" -n "$ntok"
            run "ds4s-logits-$c" on "$c" $cold -p "$prompt" --dump-logits "$out/ds4s-logits-$c.json"
            run "stock-logits-$c" stock "$c" $cold -p "$prompt" --dump-logits "$out/stock-logits-$c.json"
            cmp -s "$out/stock-gen-$c.txt" "$out/ds4s-gen-$c.txt" && t=same || t=DIFFERENT
            cmp -s "$out/stock-logits-$c.json" "$out/ds4s-logits-$c.json" && l=same || l=DIFFERENT
            echo "cache $c: generated text $t, logits $l" | tee -a "$summary"
            ;;
        verify)
            DS4_STREAM_VERIFY=1 run "ds4s-verify-$c" on "$c" $cold -p "$prompt" -n "$ntok"
            grep 'verify' "$out/ds4s-verify-$c.log" | tail -2 | tee -a "$summary"
            ;;
        preload)
            run "ds4s-preload-$c" on "$c" -p "$prompt" -n "$ntok"
            run "stock-preload-$c" stock "$c" -p "$prompt" -n "$ntok"
            ;;
        esac
    done
done
[ -n "${OUT:-}" ] && tar -czf "$OUT/ds4-logs-${phases// /-}.tar.gz" -C "$out" --exclude='*.json' .
head -c 300 "$out/ds4s-gen-${sizes%% *}.txt"; echo
