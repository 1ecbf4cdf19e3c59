#!/usr/bin/env bash
# Issue 9 on the GPU machine: `ds4 --ssd-streaming` on a fully written Flash-shaped model
# (`gen-model --scale flash --layers 12 --fill`: 12 layers x 256 experts of 6.75 MiB, 23.6 GiB)
# with an expert cache smaller than the working set, in one run:
#   - hot (file in the page cache) and cold (page cache dropped, --ssd-streaming-cold = O_DIRECT);
#   - the engine's path (default policy), with the speculative lookahead, with the RAM tier,
#     and the C engine's pattern re-implemented (--ssd-streaming-c-engine-pattern);
#   - the resident run (every expert in device memory): the compute-only time per token;
#   - the expert-shaped read ceilings of the same file (ds4-bench io: engine and fio cold,
#     engine hot), so IO time per token (streamed - resident) can be set against
#     bytes read per token / ceiling.
#
#   bash docs/bench/h200-stream.sh BINDIR OUTDIR [MODEL]
#
# BINDIR: ds4 and ds4-bench built with --features cuda, fio (static). Needs root (drop_caches).
# Prints one summary line per run; the JSON of every run is kept in OUTDIR.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=$(cd "$1" && pwd)
out=$2
m=${3:-/root/flash12.gguf}
mkdir -p "$out"
export PATH="$bin:$PATH"
D=$bin/ds4
log() { echo "== $(date +%T) $*"; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

if [ ! -f "$m" ]; then
    log "writing $m"
    /usr/bin/time -f "gen-model: %e s" $D gen-model --scale flash --layers 12 --fill "$m"
fi

summary() {
    python3 - "$1" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))
c = v.get("cache", {})
r = v.get("ram_tier")
la = v.get("lookahead")
line = (f"{v['tokens_per_s']:.2f} tok/s, {v['seconds']:.2f} s, load {v['load_seconds']:.2f} s, "
        f"hit {c.get('hit_rate', 0) * 100:.1f}% ({c.get('experts')} slots, {c.get('policy')}), "
        f"{v.get('mib_streamed_per_token', 0):.1f} MiB/token, stall {v.get('stall_fraction', 0) * 100:.1f}%, "
        f"p50 {v.get('fetch_p50_us')} us p99 {v.get('fetch_p99_us')} us, digest {v['digest'][:12]}")
if r:
    rc = r["cache"]
    line += f"; RAM tier {r['experts']}: {rc['hits']} hits / {rc['misses']} misses"
if la:
    line += f"; lookahead {la['used']}/{la['predicted']} used, {la['reads_started']} reads"
print("   ", line)
EOF
}

run() {
    local name=$1
    shift
    log "$name: ds4 $*"
    if $D --backend cuda -m "$m" --json "$@" > "$out/$name.json" 2> "$out/$name.err"; then
        summary "$out/$name.json"
    else
        echo "    FAILED: $(tail -n 3 "$out/$name.err")"
    fi
}

common=(-n 32 --seed 7 --ssd-streaming --ssd-streaming-cache-experts 4GB)

log "hot: the file read once into the page cache"
cat "$m" > /dev/null
run resident -n 32 --seed 7
run hot-engine "${common[@]}"
run hot-lookahead "${common[@]}" --ssd-streaming-lookahead
run hot-ram "${common[@]}" --ram-streaming-cache-experts 16GB
run hot-engine-lru "${common[@]}" --cache-policy lru
# Last of the hot runs: its fadvise(DONTNEED) drops from the page cache what it reads.
run hot-cpattern "${common[@]}" --ssd-streaming-c-engine-pattern

for name in engine lookahead cpattern; do
    drop
    case $name in
        engine) run cold-engine "${common[@]}" --ssd-streaming-cold ;;
        lookahead) run cold-lookahead "${common[@]}" --ssd-streaming-cold --ssd-streaming-lookahead ;;
        cpattern) run cold-cpattern "${common[@]}" --ssd-streaming-c-engine-pattern ;;
    esac
done

# The RAM tier in steady state: a 2 GB device cache, cold file, 96 tokens; 20 GB of RAM tier
# holds 96% of the experts, so after the first reads most device misses skip the file.
long=(-n 96 --seed 11 --ssd-streaming --ssd-streaming-cache-experts 2GB --ssd-streaming-cold)
drop
run cold-long-engine "${long[@]}"
drop
run cold-long-ram "${long[@]}" --ram-streaming-cache-experts 20GB

log "the expert-shaped read ceiling of this file, cold (engine 18 workers, the C engine's pattern, fio)"
ds4-bench io --backend cuda --file "$m" --pattern expert --cold --reps 2 --total 2GiB \
    --cases engine,c-stream,fio --workers 18 --chunk 4MiB --direct on --json \
    > "$out/ceiling-cold.json" 2> "$out/ceiling-cold.log"
tail -n 20 "$out/ceiling-cold.log"
cat "$m" > /dev/null
ds4-bench io --backend cuda --file "$m" --pattern expert --hot --reps 2 --dest 1GiB \
    --total 2831155200 --cases engine,copy --workers 18 --chunk 4MiB --direct off \
    > "$out/ceiling-hot.json" 2> "$out/ceiling-hot.log"
tail -n 6 "$out/ceiling-hot.log"
log "done"
