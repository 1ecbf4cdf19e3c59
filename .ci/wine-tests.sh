#!/usr/bin/env bash
# Windows tests of the ds4-io crate under Wine (called by .ci/run).
#
# Builds ds4-io's test executables for x86_64-win7-windows-gnu with Debian's rustc-web (std
# rebuilt from rust-web-src with -Zbuild-std; RUSTC_BOOTSTRAP unlocks -Z on a stable compiler),
# then runs every test .exe under wine64 and fails if any test fails. The build uses its own
# target dir (target/wine) and the Wine prefix lives in target/wine/prefix, so neither fights
# the host build. Installs the packages it needs when they are missing (CI runs as root).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

need=()
[ -x /usr/bin/rustc ] || need+=(rustc-web)
[ -x /usr/bin/cargo ] || need+=(cargo-web)
[ -d /usr/lib/rustlib/src/rust/library ] || need+=(rust-web-src)
command -v x86_64-w64-mingw32-gcc >/dev/null || need+=(gcc-mingw-w64-x86-64)
[ -x /usr/lib/wine/wine64 ] || need+=(wine64)
if [ ${#need[@]} -gt 0 ]; then
    echo "wine-tests: installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

target=x86_64-win7-windows-gnu
export CARGO_TARGET_DIR="$PWD/target/wine"
export RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1
export CARGO_TERM_COLOR=never
mkdir -p "$CARGO_TARGET_DIR"

echo "wine-tests: building ds4-io tests for $target"
/usr/bin/cargo test -p ds4-io --no-run --message-format=json \
    -Zbuild-std=std,panic_abort --target "$target" >"$CARGO_TARGET_DIR/build.json"
# One "executable" per test target (the lib's unit tests and each io/tests/*.rs).
mapfile -t exes < <(grep -o '"executable":"[^"]*\.exe"' "$CARGO_TARGET_DIR/build.json" \
    | sed 's/^"executable":"//; s/"$//' | sort -u)
if [ ${#exes[@]} -eq 0 ]; then
    echo "wine-tests: no test executables were built" >&2
    exit 1
fi
echo "wine-tests: built ${#exes[@]} test executables in $(( $(date +%s) - start )) s"

export WINEPREFIX="$CARGO_TARGET_DIR/prefix" WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
mkdir -p "$WINEPREFIX"
failed=()
for exe in "${exes[@]}"; do
    name=$(basename "$exe")
    echo "wine-tests: running $name"
    # A hung test must not hang CI: 5 minutes per executable at most.
    if ! timeout 300 /usr/lib/wine/wine64 "$exe"; then
        failed+=("$name")
    fi
done
/usr/lib/wine/wineserver -w 2>/dev/null || true

echo "wine-tests: done in $(( $(date +%s) - start )) s"
if [ ${#failed[@]} -gt 0 ]; then
    echo "wine-tests: FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "wine-tests: all Windows tests passed under Wine"
