#!/usr/bin/env bash
# Cold `cat` shapes against one fio stream, in paired rounds (twenty-first session, dev VM).
#
#   ROUNDS=8 bash docs/bench/dev-s21-cat-readers.sh FILE [OLD_DS4_BENCH] [SHAPE...]
#
# Each round: fio psync 1 job 4 MiB O_DIRECT over the first 2 GiB (one pass), then
# `ds4-bench io --file FILE --cases cat --pattern seq --cold --reps 1 --total 2GiB` with the
# tuned default, with each DS4_CAT_SHAPE=WORKERS,WINDOW,CHUNK_KIB given, and with an older
# ds4-bench if given; page cache dropped (root) before every run. Prints GB/s per run and,
# for tuned runs, the readers / windows each batch ended at and the tuner's probes.
set -euo pipefail
file=$1; old=${2:-}; shift $(( $# < 2 ? $# : 2 ))
shapes=("$@")
new=${DS4_BENCH:-target/release/ds4-bench}
unset DS4_CAT_SHAPE # the tuned rows must be the default
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
fio1() {
    drop
    fio --name=x --filename="$file" --numjobs=1 --readonly --allow_file_create=0 --thread \
        --direct=1 --rw=read --size=2G --output-format=json --ioengine=psync --bs=4M |
        python3 -c 'import json,sys; print(round(json.load(sys.stdin)["jobs"][0]["read"]["bw_bytes"]/1e9,3))'
}
cat1() { # binary, env...
    drop
    local b=$1; shift
    env "$@" "$b" io --file "$file" --cases cat --pattern seq --cold --reps 1 --total 2GiB \
        --json 2>/dev/null | python3 -c '
import json,sys
d=json.loads(sys.stdin.readline()); e=d.get("extra") or {}
print(round(d["gbps"],3), "readers", e.get("readers"), "windows", e.get("windows"), "probes", e.get("probes"))'
}
for r in $(seq 1 "${ROUNDS:-6}"); do
    echo "round $r: fio psync 1 job 4 MiB $(fio1)"
    echo "  tuned: $(cat1 "$new")"
    [ -z "$old" ] || echo "  old:   $(cat1 "$old")"
    for s in "${shapes[@]}"; do echo "  $s: $(cat1 "$new" DS4_CAT_SHAPE="$s")"; done
done
