#!/usr/bin/env bash
# Issue 18, fourteenth session: the GPU's copy thread (src/device/gpu/issue.rs), same run.
#   PARTS="tests io kv decode" bash docs/bench/h200-s14-copythread.sh   (any subset; default all)
# D=.dev/device: new binaries (ds4, ds4-bench, ds4-hip, GPU test binaries); B=.dev/base14: ds4,
# ds4-bench of b2e48b5 (copies issued by the readers, one per 4 MiB chunk); .dev/wheels: KvikIO.
# 1. every GPU test of the device, engine, store and decode paths (cuda, hip through the shim)
# 2. ds4-bench io hot, 16 workers, 4 MiB chunks, direct off, written Flash-shaped model in the
#    page cache: seq 8 GiB and expert (400 experts): base vs new with DS4_COPY_THREAD=off vs new
#    (copy thread) at copy pieces 0, 512KiB, 1MiB, 2MiB; KvikIO 26.10 (compat) beside them
# 3. ds4 --ssd-streaming decode tok/s: base, new, new --copy-piece 1MiB, new DS4_COPY_THREAD=off
set -u
D=.dev/device; B=.dev/base14; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; free -g | head -2
[ -f /tmp/shim/libamdhip64.so.5 ] || bash tests/hip_shim/build.sh /tmp/shim $D/*-hip 2>&1 | tail -1
t() { local n=$1; shift; echo "=== $n"; local s=$SECONDS
  "$@" > "$OUT/$n.log" 2>&1; echo "rc $?"
  grep -E "test result|panicked|FAILED" "$OUT/$n.log" | head -8; echo "($((SECONDS-s)) s)"; }
P=" ${PARTS:-tests io kv decode} "; has() { case "$P" in *" $1 "*) return 0;; esac; return 1; }
if has tests; then
  mkdir -p /work/main/target/release
  export DS4_GPU_TESTS=cuda
  cp $D/ds4 /work/main/target/release/ds4
  for b in engine_device device_backends decode_gpu capi_gpu; do t $b $D/$b --test-threads=1; done
  t lib $D/ds4_stream device engine expert_store decode
  DS4_COPY_THREAD=off t device_backends-inline $D/device_backends --test-threads=1
  export DS4_GPU_TESTS=hip
  cp $D/ds4-hip /work/main/target/release/ds4
  for b in engine_device device_backends decode_gpu; do LD_LIBRARY_PATH=/tmp/shim t $b-hip $D/$b-hip --test-threads=1; done
  LD_LIBRARY_PATH=/tmp/shim t lib-hip $D/ds4_stream-hip device engine expert_store decode
  unset DS4_GPU_TESTS
  cp $D/ds4 /work/main/target/release/ds4
fi
m=/root/flash6.gguf
[ -f $m ] || $D/ds4 gen-model --scale flash --layers 6 --fill $m | tail -1
cat $m > /dev/null
$D/ds4 --backend cuda -m $m -n 2 > /dev/null 2>&1   # JIT warm-up
io() { # name bin pattern total [flags]
  local n=$1 bin=$2 pat=$3 tot=$4; shift 4
  $bin io --backend cuda --file $m --pattern $pat --total $tot --hot --workers 16 --chunk 4MiB \
    --direct off --reps 3 --cases engine,engine-host,io-threads,copy --quiet --json "$@" \
    > "$OUT/$n.json" 2> "$OUT/$n.err" || { echo "  $n FAILED: $(tail -2 "$OUT/$n.err")"; return; }
  python3 - "$OUT/$n.json" "$n" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
g = {r["case"]: r for r in rows}
e, io = g.get("engine"), g.get("io-threads")
x = (e or {}).get("extra") or {}
def p(k): v = x.get(k) or {}; return f"{v.get('p50_us',0)}/{v.get('p99_us',0)}"
print(f"  {sys.argv[2]:16} engine {e['gbps']:6.2f}  host {g['engine-host']['gbps']:6.2f}  io-threads {io['gbps']:6.2f}"
      f"  copy {g['copy']['gbps']:6.2f}  staged/io {e['gbps']/io['gbps']:.3f}  pieces {x.get('copy_pieces')}"
      f"  us p50/p99: read {p('chunk_read')} queued {p('queued')} issue {p('issue')} copy {p('copy')} held {p('slot_held')} stall {x.get('stall_total_us')}")
PY
}
has io && for pat in expert seq; do
  tot=8GiB; [ $pat = expert ] && tot=2700MiB
  for rep in 1 2; do
    echo "== $pat rep $rep"
    io $pat-base-$rep $B/ds4-bench $pat $tot
    DS4_COPY_THREAD=off io $pat-inline-$rep $D/ds4-bench $pat $tot
    for p in 0 512KiB 1MiB 2MiB; do io $pat-p$p-$rep $D/ds4-bench $pat $tot --copy-piece $p; done
  done
done
kv=/root/kvikio-py
if has kv && [ -d .dev/wheels ]; then rm -rf $kv; mkdir -p $kv
  for w in .dev/wheels/*.whl; do python3 -m zipfile -e "$w" $kv > /dev/null; done
  export PYTHONPATH=$kv LD_LIBRARY_PATH="$kv/libkvikio/lib64:$kv/rapids_logger/lib64"
  if python3 -c "import kvikio, cupy; print('kvikio', kvikio.__version__)"; then
    echo "== kvikio seq"; python3 benches/kvikio/kvikio_bench.py --file $m --pattern seq --threads 16 \
      --task-size 4MiB --reps 3 --total 8589934592 --dest 1GiB 2>&1 | tee "$OUT/kv-seq.jsonl" | cut -c1-200
    echo "== kvikio expert"; python3 benches/kvikio/kvikio_bench.py --file $m --pattern expert --threads 16 \
      --task-size 4MiB --reps 3 --total 2831155200 2>&1 | tee "$OUT/kv-exp.jsonl" | cut -c1-200
  fi
  unset PYTHONPATH LD_LIBRARY_PATH
fi
s() { python3 docs/bench/run-summary.py "$1"; }
r() { local name=$1; shift; cat $m > /dev/null
  "$@" --backend cuda -m $m --json > "$OUT/$name.json" 2>"$OUT/$name.err" && s "$OUT/$name.json" \
    || echo "  $name FAILED: $(tail -2 "$OUT/$name.err")"; }
has decode && for rep in 1 2; do
  for v in base new p1MiB inline; do
    X="$D/ds4"; E=""
    case $v in base) X=$B/ds4;; p1MiB) X="$D/ds4 --copy-piece 1MiB";; inline) E="DS4_COPY_THREAD=off";; esac
    echo "== decode rep $rep $v: resident, streamed 2GB, streamed 1GB (-n 48)"
    r res-$v-$rep env $E $X -n 48
    r hot-$v-$rep env $E $X --ssd-streaming --ssd-streaming-cache-experts 2GB -n 48
    r hot1-$v-$rep env $E $X --ssd-streaming --ssd-streaming-cache-experts 1GB -n 48
  done
done
