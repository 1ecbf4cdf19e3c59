#!/usr/bin/env bash
# The test command (README's second command; .ci/run calls it too).
# Creates .venv with gguf-py 0.19.0 (the independent GGUF oracle) if it is missing, checks that
# the engine library builds lean (no tools' dependencies), then runs every test of the workspace
# (with the real DS4 engine's test where ../shared/ds4c exists: ~3 min, 8.3 GiB of disk).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! .venv/bin/python -c 'import gguf' 2>/dev/null; then
    python3 -m venv .venv
    .venv/bin/pip install -q gguf==0.19.0
fi
export DS4_PYTHON="$PWD/.venv/bin/python"
# The real DS4 C engine's source, where the checkout has one beside it: tests/ds4c_engine.rs
# copies it, builds the CPU engine (make, cc) and runs it on a generated Flash file. An explicit
# DS4_SRC wins; DS4_SRC= (empty) skips that test.
if [ -z "${DS4_SRC+set}" ] && [ -f ../shared/ds4c/ds4.c ]; then
    DS4_SRC=$(realpath ../shared/ds4c)
    export DS4_SRC
fi

# The engine library must stay usable without the tools (the separate crate ds4-tools): it pulls
# in no command-line, progress-bar, JSON, async-runtime, mmap or signal crate, and builds alone.
lean=$(cargo tree -p ds4-stream -e normal --prefix none)
for dep in clap indicatif serde_json tokio memmap2 ctrlc; do
    if grep -q "^$dep v" <<<"$lean"; then
        echo "test.sh: ds4-stream depends on $dep:" >&2
        cargo tree -p ds4-stream -e normal -i "$dep" >&2
        exit 1
    fi
done
cargo build -p ds4-stream --lib --release

cargo test --workspace --release "$@"
