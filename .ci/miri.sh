#!/usr/bin/env bash
# Miri over the code whose soundness rests on unsafe: the device layer (leases, pinned buffers,
# events, the host backend's copy thread) and the engine (pooled host buffers, chunk planner),
# as unit tests, plus tests/engine_device.rs (copies, read-backs and engine requests racing on
# one buffer, ordered with gates). Called by .ci/run; about a minute after Miri's first build.
# Miri needs the nightly toolchain with the miri and rust-src components: installed here when
# missing (rustup, which the CI machine has).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
if ! cargo +nightly miri --version >/dev/null 2>&1; then
    echo "miri: installing the nightly miri and rust-src components"
    rustup toolchain install nightly --profile minimal --component miri,rust-src
fi
t0=$(date +%s)
# Isolation stays on (no file system, no clock): none of these tests needs either.
CARGO_TARGET_DIR=target/miri cargo +nightly miri test -p ds4-stream \
    --lib -- device:: engine::
CARGO_TARGET_DIR=target/miri cargo +nightly miri test -p ds4-stream \
    --test engine_device
echo "miri: done in $(( $(date +%s) - t0 )) s"
