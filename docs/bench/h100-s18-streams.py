"""Issue 18: does one copy stream cost the staged expert pattern against one stream per reader?

KvikIO (compat mode: each thread preads into its bounce buffer, copies on its own stream, waits)
read the expert pattern at 26.9-27.4 GB/s against the engine's 22.3-22.9 in the same run (H100,
eighteenth session). This mimics both in one harness: T threads, per token 18 slices (6 random
experts x 3) handed out together and all waited for; per slice a pread into the thread's pinned
buffer, a host-to-device copy, a wait on an event after it. `shared`: every thread's copies go to
one stream (the engine's shape); `own`: each thread has its own stream (KvikIO's); `pool4`:
thread i copies on stream i % 4.
    python3 docs/bench/h100-s18-streams.py FILE [THREADS] [TOKENS]   (FILE hot in the page cache)
"""
import os, queue, random, sys, threading, time
import cupy as cp
import numpy as np

SLICES = (2_162_688, 2_162_688, 2_752_512)
EXPERT = sum(SLICES)


def run(path, threads, tokens, mode, seed):
    fd = os.open(path, os.O_RDONLY)
    n_exp = os.fstat(fd).st_size // EXPERT
    order = random.Random(seed).sample(range(n_exp), min(n_exp, tokens * 6))
    tokens = len(order) // 6
    dev = cp.empty(len(order) * EXPERT, dtype=cp.uint8)
    n_streams = {"shared": 1, "pool4": 4}.get(mode, threads)
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(n_streams)]
    jobs, done = queue.Queue(), queue.Queue()

    def worker(i):
        buf = cp.cuda.alloc_pinned_memory(4 << 20)
        host = np.frombuffer(buf, dtype=np.uint8, count=4 << 20)
        stream = streams[i % n_streams]
        ev = cp.cuda.Event(block=False, disable_timing=True)
        while True:
            j = jobs.get()
            if j is None:
                return
            dst, off, n = j
            got = os.preadv(fd, [memoryview(host)[:n]], off)
            assert got == n
            cp.cuda.runtime.memcpyAsync(dev.data.ptr + dst, host.ctypes.data, n, 1, stream.ptr)
            ev.record(stream)
            ev.synchronize()
            done.put(n)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    t0 = time.perf_counter()
    total = 0
    for t in range(tokens):
        k = 0
        for i, e in enumerate(order[t * 6:(t + 1) * 6]):
            o = 0
            for s in SLICES:
                jobs.put(((t * 6 + i) * EXPERT + o, e * EXPERT + o, s))
                o += s
                k += 1
        for _ in range(k):
            total += done.get()
    secs = time.perf_counter() - t0
    for _ in ts:
        jobs.put(None)
    for t in ts:
        t.join()
    os.close(fd)
    return total / secs / 1e9


def main():
    path = sys.argv[1]
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 60
    run(path, threads, 8, "own", 0)  # warm-up
    for rep in range(3):
        r = {m: run(path, threads, tokens, m, rep + 1) for m in ("shared", "pool4", "own")}
        print(f"rep {rep + 1}: threads {threads}  shared stream {r['shared']:6.2f}  "
              f"4 streams {r['pool4']:6.2f}  own streams {r['own']:6.2f} GB/s  "
              f"own/shared {r['own'] / r['shared']:.3f}", flush=True)


main()
