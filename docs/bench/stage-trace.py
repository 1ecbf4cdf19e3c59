"""Summarises a stage trace (DS4_STAGE_TRACE=PREFIX; src/engine/trace.rs): where each request's
time goes on the staged path. Chunks belong to the request whose [submitted, finished] holds
them (right for clients that wait for each request before the next, like ds4-bench io).
    python3 docs/bench/stage-trace.py PREFIX.<pid>.<n>.jsonl [more files]
Per request, in microseconds from its submission (median over requests, p90 in brackets):
  first read start, last read end, first copy issued, last copy issued, last completion seen,
  finished; the client's gap before the next submission; the copy rate from the first issue to
  the last completion (bytes over that span); chunks and reads in flight at once. Per chunk:
the hops from copy queued to completion seen (handed/seen come from the GPU backends).
link_in / link_after: GB/s of copies completed while reads still ran (first issue to last read
end) and after the last read ended; after_mb: MB left to copy when the last read ended.
"""
import json, sys

def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else 0

for path in sys.argv[1:]:
    chunks, reqs = [], []
    for line in open(path):
        r = json.loads(line)
        if "chunk" in r: chunks.append(r)
        elif "request" in r: reqs.append(r)
    reqs.sort(key=lambda r: r["submitted"]); chunks.sort(key=lambda c: c["taken"])
    rows, i = [], 0
    for k, q in enumerate(reqs):
        mine = [c for c in chunks if q["submitted"] <= c["taken"] and c["done"] <= q["finished"]]
        if not mine: continue
        s = q["submitted"]
        nxt = reqs[k + 1]["submitted"] - q["finished"] if k + 1 < len(reqs) else None
        span = max(c["done"] for c in mine) - min(c["issued"] for c in mine)
        # Most reads running at one moment.
        ev = sorted([(c["started"], 1) for c in mine] + [(c["read_end"], -1) for c in mine])
        cur = most = 0
        for _, d in ev: cur += d; most = max(most, cur)
        # The link's rate while reads still run and after the last one ended: bytes whose copy
        # completed (event seen, else done) in each span over its length.
        r1 = max(c["read_end"] for c in mine); i0 = min(c["issued"] for c in mine)
        fin = lambda c: c.get("seen") or c["done"]
        d1 = max(fin(c) for c in mine)
        b_in = sum(c["len"] for c in mine if fin(c) <= r1)
        b_after = sum(c["len"] for c in mine if fin(c) > r1)
        rows.append(dict(
            total=q["finished"] - s,
            read0=min(c["started"] for c in mine) - s,
            read1=max(c["read_end"] for c in mine) - s,
            issue0=min(c["issued"] for c in mine) - s,
            issue1=max(c["issued"] for c in mine) - s,
            done1=max(c["done"] for c in mine) - s,
            gap=nxt, gbps=sum(c["len"] for c in mine) / span / 1e3 if span else 0,
            chunks=len(mine), reads=most,
            link_in=b_in / (r1 - i0) / 1e3 if r1 > i0 else None,
            link_after=b_after / (d1 - r1) / 1e3 if d1 > r1 else None,
            after_mb=b_after / 1e6))
    print(f"{path}: {len(reqs)} requests, {len(chunks)} staged chunks, {len(rows)} requests with chunks")
    hops = {"queued->handed (copy thread)": ("issued", "handed"),
            "handed->seen (GPU + event wait)": ("handed", "seen"),
            "seen->done (engine completer)": ("seen", "done"),
            "queued->done": ("issued", "done")}
    for name, (a, b) in hops.items():
        v = [c[b] - c[a] for c in chunks if c.get(a) is not None and c.get(b) is not None]
        if v: print(f"  per chunk {name:32} median {pct(v, .5):7} us  p90 {pct(v, .9):7} us")
    for k in ("total", "read0", "read1", "issue0", "issue1", "done1", "gap", "gbps", "chunks", "reads",
              "link_in", "link_after", "after_mb"):
        v = [r[k] for r in rows if r[k] is not None]
        if v: print(f"  {k:7} median {pct(v, .5):9.1f}  p90 {pct(v, .9):9.1f}")
