#!/usr/bin/env bash
# The H200 session's IO measurements, in one run (same machine, same minutes):
#   1. hot sequential 8 GiB -> GPU: engine (staged, unified), raw threads, the old path (mmap +
#      pageable copy to the GPU), the C engine's load path, the pinned copy ceiling, KvikIO;
#   2. hot expert-shaped reads -> GPU: the same cases and KvikIO;
#   3. `ds4 cat` cold and hot against fio (the best of several O_DIRECT configurations) and dd.
#
#   bash docs/bench/h200-io.sh BINDIR OUTDIR
#
# BINDIR holds ds4 and ds4-bench (built with --features cuda), fio (a static build: the GPU
# machine has none) and wheels/ (kvikio-cu13, libkvikio-cu13, rapids-logger; cupy must be
# installed there). Needs root (drop_caches) and about 30 GiB of disk under $WORK (default /root).
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=$(cd "$1" && pwd)
out=$2
work=${WORK:-/root/ds4io}
mkdir -p "$out" "$work"
export PATH="$bin:$PATH"
log() { echo "== $(date +%T) $*"; }

log "machine"; nproc; free -g | head -2; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; uname -r

# KvikIO from the wheels (no network there): unpacked, not installed.
kv=$work/kvikio-py
if [ -d "$bin/wheels" ]; then
    rm -rf "$kv"; mkdir -p "$kv"
    for w in "$bin"/wheels/*.whl; do python3 -m zipfile -e "$w" "$kv" >/dev/null; done
    export PYTHONPATH="$kv${PYTHONPATH:+:$PYTHONPATH}"
    export LD_LIBRARY_PATH="$kv/libkvikio/lib64:$kv/rapids_logger/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
kvikio_ok=0
python3 -c "import kvikio, cupy; print('kvikio', kvikio.__version__, 'cupy', cupy.__version__)" && kvikio_ok=1

f=$work/seq8g.bin
if [ ! -f "$f" ]; then
    log "writing $f (8 GiB, fio's random buffers)"
    fio --name=w --filename="$f" --rw=write --bs=4m --size=8g --refill_buffers --output=/dev/null
fi
log "page cache: reading $f once"; cat "$f" > /dev/null

log "1. hot sequential 8 GiB -> GPU (ds4-bench)"
ds4-bench io --backend cuda --file "$f" --pattern seq --hot --reps 3 --dest 1GiB \
    --cases engine,engine-host,io-threads,mmap,c-load,copy --workers 16 --chunk 4MiB,16MiB \
    --direct off --json > "$out/seq-hot.json" 2> "$out/seq-hot.log"
tail -n 30 "$out/seq-hot.log"
if [ $kvikio_ok = 1 ]; then
    log "1. hot sequential 8 GiB -> GPU (KvikIO)"
    python3 benches/kvikio/kvikio_bench.py --file "$f" --pattern seq --threads 1,16 \
        --task-size 4MiB,16MiB --reps 3 --dest 1GiB | tee "$out/seq-hot-kvikio.jsonl"
fi

log "2. hot expert-shaped -> GPU (ds4-bench: 400 experts per run)"
ds4-bench io --backend cuda --file "$f" --pattern expert --hot --reps 3 --dest 1GiB \
    --total 2831155200 --cases engine,engine-host,io-threads,mmap,c-stream,copy \
    --workers 16,18 --chunk 4MiB --direct off --json > "$out/expert-hot.json" 2> "$out/expert-hot.log"
tail -n 30 "$out/expert-hot.log"
if [ $kvikio_ok = 1 ]; then
    log "2. hot expert-shaped -> GPU (KvikIO)"
    python3 benches/kvikio/kvikio_bench.py --file "$f" --pattern expert --threads 1,16 \
        --task-size 4MiB --reps 3 --total 2831155200 | tee "$out/expert-hot-kvikio.jsonl"
fi

log "3. ds4 cat vs fio (cold) and dd (hot)"
g=$work/flash.gguf
[ -f "$g" ] || ds4 gen-model --scale flash --holes all --fill-layers 0-1 "$g"
bash docs/bench/cat-bench.sh "$g" blk.0.ffn_down_exps.weight 5 "$bin/ds4" 2>&1 | tee "$out/cat-bench.txt" | tail -n 20
log "done"
