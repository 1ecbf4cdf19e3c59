#!/usr/bin/env python3
"""KvikIO (NVIDIA's file -> GPU reader) on the same file and access patterns as `ds4-bench io`.

The baseline ds4-stream is measured against (TARGETS: hot sequential >= 0.95x the pinned copy
ceiling, ahead of KvikIO's best; expert-shaped reads >= 1.5x KvikIO). Run it in the same session
as `ds4-bench io --backend cuda` on the same file, so both see the same machine.

    python3 benches/kvikio/kvikio_bench.py --file F --pattern seq --threads 1,16 \
        --task-size 4MiB,16MiB --reps 3
    python3 benches/kvikio/kvikio_bench.py --file F --pattern expert --total 2.6GiB

Patterns (the same shapes as ds4-bench's, see tools/benches/ds4-bench/plan.rs):
- seq: the first TOTAL bytes of the file in order, one `pread` per destination-ring fill (KvikIO
  splits it into tasks of --task-size over its thread pool).
- expert: the file as contiguous 7,077,888-byte experts (slices of 2,162,688, 2,162,688 and
  2,752,512 bytes); per token 6 distinct random experts (none twice in a run) = 18 `pread`s
  submitted together and all waited for; each slice lands in its expert's slot of a GPU ring.
  The experts are drawn by this script's own seeded generator: same shape and sizes as
  ds4-bench's plan, not the same offsets.

Hot runs only (the file must already be in the page cache: the caller reads it first). KvikIO
runs in compatibility mode (POSIX reads into its pinned bounce buffers, then copies), which is
what it does on a machine without GPUDirect Storage; the script forces it so the result does not
depend on cuFile's presence. Each run's first slice is read back and compared with a plain read
of the file (a broken read cannot pass as fast).

Prints one JSON object per configuration: pattern, threads, task_size, bytes, secs (median),
secs_min, secs_max, gbps (from the median).
"""
import argparse
import json
import os
import random
import statistics
import sys
import time

os.environ.setdefault("KVIKIO_COMPAT_MODE", "ON")

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402
import kvikio  # noqa: E402
import kvikio.defaults  # noqa: E402

EXPERT_BYTES = 7_077_888
EXPERT_SLICES = (2_162_688, 2_162_688, 2_752_512)
EXPERTS_PER_TOKEN = 6


def size(s):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 10**3, "MB": 10**6, "GB": 10**9}
    for u, m in units.items():
        if s.endswith(u):
            return int(float(s[: -len(u)]) * m)
    return int(s)


def set_defaults(threads, task):
    """KvikIO's thread pool size and task size, across its API generations."""
    d = kvikio.defaults
    if hasattr(d, "set"):
        d.set({"num_threads": threads, "task_size": task})
    else:
        d.num_threads_reset(threads)
        d.task_size_reset(task)


def check_first(path, dev, dev_off, file_off, n):
    n = min(n, 1 << 20)
    with open(path, "rb") as f:
        f.seek(file_off)
        want = np.frombuffer(f.read(n), dtype=np.uint8)
    got = cp.asnumpy(dev[dev_off : dev_off + n])
    if not np.array_equal(got, want):
        sys.exit(f"kvikio_bench: bytes at file offset {file_off} differ from a plain read")


def run_seq(path, total, ring):
    dev = cp.empty(ring, dtype=cp.uint8)
    cp.cuda.runtime.deviceSynchronize()
    with kvikio.CuFile(path, "r") as f:
        t0 = time.perf_counter()
        done = 0
        while done < total:
            n = min(ring, total - done)
            got = f.pread(dev[:n], n, done).get()
            if got != n:
                sys.exit(f"kvikio_bench: short read at {done}: {got} of {n}")
            done += n
        cp.cuda.runtime.deviceSynchronize()
        secs = time.perf_counter() - t0
    check_first(path, dev, 0, total - min(ring, total), min(ring, total))
    return secs


def expert_plan(file_len, total, seed):
    n = file_len // EXPERT_BYTES
    tokens = min(total // (EXPERTS_PER_TOKEN * EXPERT_BYTES), n // EXPERTS_PER_TOKEN)
    order = random.Random(seed).sample(range(n), tokens * EXPERTS_PER_TOKEN)
    return [order[t * EXPERTS_PER_TOKEN : (t + 1) * EXPERTS_PER_TOKEN] for t in range(tokens)]


def run_expert(path, plan, ring_experts):
    dev = cp.empty(ring_experts * EXPERT_BYTES, dtype=cp.uint8)
    cp.cuda.runtime.deviceSynchronize()
    slot = 0
    first = None
    with kvikio.CuFile(path, "r") as f:
        t0 = time.perf_counter()
        for token in plan:
            futs = []
            for e in token:
                base = (slot % ring_experts) * EXPERT_BYTES
                o = 0
                for s in EXPERT_SLICES:
                    futs.append((f.pread(dev[base + o : base + o + s], s, e * EXPERT_BYTES + o), s))
                    o += s
                if first is None:
                    first = (base, e * EXPERT_BYTES)
                slot += 1
            for fut, s in futs:
                if fut.get() != s:
                    sys.exit("kvikio_bench: short expert slice read")
        cp.cuda.runtime.deviceSynchronize()
        secs = time.perf_counter() - t0
    if len(plan) * EXPERTS_PER_TOKEN <= ring_experts:
        check_first(path, dev, first[0], first[1], EXPERT_SLICES[0])
    return secs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--file", required=True)
    ap.add_argument("--pattern", choices=["seq", "expert"], default="seq")
    ap.add_argument("--threads", default="1,16")
    ap.add_argument("--task-size", default="4MiB,16MiB")
    ap.add_argument("--total", default=None, help="bytes per run (default: the whole file)")
    ap.add_argument("--dest", default="1GiB", help="GPU destination ring")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    file_len = os.path.getsize(a.file)
    total = min(size(a.total), file_len) if a.total else file_len
    ring = size(a.dest)
    for threads in [int(x) for x in a.threads.split(",")]:
        for task in [size(x) for x in a.task_size.split(",")]:
            set_defaults(threads, task)
            times = []
            for rep in range(a.reps):
                if a.pattern == "seq":
                    nbytes = total
                    times.append(run_seq(a.file, total, ring))
                else:
                    plan = expert_plan(file_len, total, a.seed + rep)
                    nbytes = sum(len(t) for t in plan) * EXPERT_BYTES
                    times.append(run_expert(a.file, plan, max(ring // EXPERT_BYTES, EXPERTS_PER_TOKEN)))
            med = statistics.median(times)
            print(json.dumps({
                "case": "kvikio", "pattern": a.pattern, "threads": threads, "task_size": task,
                "compat_mode": os.environ.get("KVIKIO_COMPAT_MODE"), "bytes": nbytes,
                "secs": med, "secs_min": min(times), "secs_max": max(times),
                "gbps": nbytes / med / 1e9, "kvikio": getattr(kvikio, "__version__", "?"),
            }), flush=True)


if __name__ == "__main__":
    main()
