#!/usr/bin/env bash
# Bounded stress for CI (called by .ci/run after the tests), failing on any lost request, any
# wrong byte, any error the fault plan does not explain, or a leaked fd / pinned byte:
#   1. the loom model check of the staging-slot hand-off and ticket completion;
#   2. ds4-stress on a 6 GiB sparse file with every fault kind, cancellations and shutdown
#      storms (40 s), then on a virtual 64 GiB file with unified memory (20 s);
#   3. under Wine, if the Windows toolchain that .ci/wine-tests.sh sets up is there: a 20 s
#      stress of the Windows reader (debug build: it reuses .ci/wine-tests.sh's artifacts; a
#      failing Windows build fails CI).
# Longer runs: see docs/TESTING.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
start=$(date +%s)

echo "stress: loom model (tests/loom_staging.rs)"
t0=$(date +%s)
RUSTFLAGS="--cfg ds4_loom" CARGO_TARGET_DIR=target/loom \
    cargo test --release --test loom_staging
echo "stress: loom done in $(( $(date +%s) - t0 )) s (build included)"

cargo build --release --bin ds4-stress
bin=target/release/ds4-stress
# timeout: a hang is a failure too (the stress has its own 60 s lost-request watchdog).
echo "stress: 6 GiB sparse file, all faults, cancellations, shutdown storms"
timeout 170 "$bin" --duration 40s --faults all --cancel 0.05 --storm-every 2s --progress
echo "stress: virtual 64 GiB file, unified memory, read faults"
timeout 120 "$bin" --virtual --file-len 64GiB --unified --duration 20s --huge 1GiB \
    --faults short=0.1,eintr=0.05:8,eio=0.001,spike=0.001:10ms --storm-every 3s --progress

if [ -x /usr/lib/wine/wine64 ] && [ -x /usr/bin/cargo ] && [ -d /usr/lib/rustlib/src/rust/library ]; then
    echo "stress: Windows build of ds4-stress (x86_64-win7-windows-gnu)"
    t0=$(date +%s)
    if CARGO_TARGET_DIR="$PWD/target/wine" RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 \
        /usr/bin/cargo build -Zbuild-std=std,panic_abort \
        --target x86_64-win7-windows-gnu --bin ds4-stress; then
        echo "stress: Windows build took $(( $(date +%s) - t0 )) s; 20 s stress under wine64"
        export WINEPREFIX="$PWD/target/wine/prefix" WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
        mkdir -p "$WINEPREFIX"
        t0=$(date +%s)
        timeout 240 /usr/lib/wine/wine64 target/wine/x86_64-win7-windows-gnu/debug/ds4-stress.exe \
            --duration 20s --file-len 5GiB --huge 0 --threads 2 --tasks 2 --storm-every 5s \
            --storm-requests 300 --faults short=0.05,eintr=0.02:4,eio=0.0005 --max-inflight 512MiB
        /usr/lib/wine/wineserver -w 2>/dev/null || true
        echo "stress: Wine stress took $(( $(date +%s) - t0 )) s"
    else
        echo "stress: FAILED: ds4-stress does not build for Windows" >&2
        exit 1
    fi
else
    echo "stress: no Windows toolchain (.ci/wine-tests.sh installs it); Wine stress skipped"
fi
echo "stress: all done in $(( $(date +%s) - start )) s"
