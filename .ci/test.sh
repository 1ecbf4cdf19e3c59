#!/usr/bin/env bash
# The test command (README's second command; .ci/run calls it too).
# Creates .venv with gguf-py 0.19.0 (the independent GGUF oracle) if it is missing, then runs
# every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! .venv/bin/python -c 'import gguf' 2>/dev/null; then
    python3 -m venv .venv
    .venv/bin/pip install -q gguf==0.19.0
fi
export DS4_PYTHON="$PWD/.venv/bin/python"
cargo test --workspace --release "$@"
