# Shared preamble of the GPU-machine bench scripts (source it from the repository root):
# D = the carried binaries (docs/bench/build-device.sh), OUT = what comes back, the card's name,
# the CPU's caches, the hip/cuda `ds4` where the test binaries spawn it, the 6-layer Flash-shaped
# model $m (written, in the page cache) and one CUDA run to pay the kernel JIT before timing.
D=.dev/device; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lscpu | grep -E "^(Model name|CPU\(s\)|L2|L3|NUMA node\(s\))" | tr -s ' '
mkdir -p /work/main/target/release /work/tgt-hip/release
cp $D/ds4 /work/main/target/release/ds4; cp $D/ds4-hip /work/tgt-hip/release/ds4
m=/root/flash6.gguf
[ -f $m ] || $D/ds4 gen-model --scale flash --layers 6 --fill $m | tail -1
cat $m > /dev/null
$D/ds4 --backend cuda -m $m -n 2 > /dev/null 2>&1   # JIT warm-up

# dec NAME VAR=VALUE ds4-args...: one `ds4 --backend cuda --json` run with one variable set
# (model re-read first), its summary line (run-summary.py), NAME.json / NAME.err under $OUT.
dec() { local name=$1 e=$2; shift 2; cat $m > /dev/null
  env "$e" $D/ds4 --backend cuda -m $m --json "$@" > "$OUT/$name.json" 2>"$OUT/$name.err" \
    && python3 docs/bench/run-summary.py "$OUT/$name.json" || echo "  $name FAILED: $(tail -2 "$OUT/$name.err")"; }
# t NAME command...: run a test binary, keep its log as NAME.log, print rc, the result line and
# the first failures.
t() { local n=$1; shift; local s=$SECONDS
  "$@" > "$OUT/$n.log" 2>&1; local rc=$?
  echo "=== $n rc $rc $(grep -E "test result" "$OUT/$n.log" | tail -1) ($((SECONDS-s)) s)"
  grep -E "panicked|FAILED|stale" "$OUT/$n.log" | head -4; }
