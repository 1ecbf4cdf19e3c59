#!/usr/bin/env bash
# Compiles kernels/ds4_kernels.cu with g++ (C++20) behind shim.h and runs it against fresh
# oracle files (tests/py/compute_oracle.py gen). Needs g++ >= 11 and DS4_PYTHON (or .venv).
# A manual check of the kernel source where no GPU compiler is available; not a GPU test.
set -euo pipefail
cd "$(dirname "$0")"
py="${DS4_PYTHON:-../../.venv/bin/python}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" ../../tests/py/compute_oracle.py gen "$tmp" "${1:-7}" > "$tmp/manifest.json"
"$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["ffn"]["clamp"])' "$tmp/manifest.json" > "$tmp/ffn.clamp"
g++ -std=c++20 -O2 -ffp-contract=off -Wall -Wextra -Wno-unused-function -pthread -o "$tmp/check" check.cpp
"$tmp/check" "$tmp"
