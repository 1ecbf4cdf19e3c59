"""Issue 18, seventeenth session: what one host-to-device copy call costs on this machine.
CPU time inside cudaMemcpyAsync (pinned cudaHostAlloc source, one stream, no sync between calls),
per size, alone and with one event record per call, from 1 thread and from 16 threads at once;
plus the GPU time per copy (events around N back-to-back copies). Prints one line per case.
    python3 docs/bench/h100-s17-calls.py
"""
import threading, time
import cupy as cp
rt = cp.cuda.runtime
N = 400
sizes = [256 << 10, 512 << 10, 1 << 20, 2 << 20, 2359296, 4 << 20]
host = cp.cuda.alloc_pinned_memory(64 << 20)
dev = cp.empty(1 << 30, dtype=cp.uint8)
def calls(stream, size, n, events, base):
    t = []
    for i in range(n):
        off = (base + i * size) % ((1 << 30) - size)
        hoff = (i * size) % ((64 << 20) - size)
        a = time.perf_counter()
        rt.memcpyAsync(dev.data.ptr + off, host.ptr + hoff, size, rt.memcpyHostToDevice, stream.ptr)
        if events:
            e = cp.cuda.Event(disable_timing=True); e.record(stream)
        t.append(time.perf_counter() - a)
    return t
def pct(v, p): v = sorted(v); return v[min(len(v) - 1, int(p * len(v)))] * 1e6
s = cp.cuda.Stream(non_blocking=True)
calls(s, 1 << 20, 50, True, 0); s.synchronize()
for size in sizes:
    for events in (False, True):
        s.synchronize()
        a = time.perf_counter(); t = calls(s, size, N, events, 0); issued = time.perf_counter() - a
        s.synchronize(); total = time.perf_counter() - a
        print(f"1 thread  size {size>>10:5} KiB events {int(events)}: call p50 {pct(t,.5):7.1f} us p99 {pct(t,.99):7.1f}"
              f"  issue-all {issued*1e3:6.2f} ms  all-done {total*1e3:6.2f} ms  {N*size/total/1e9:5.1f} GB/s")
    res = [None] * 16
    def worker(k):
        cp.cuda.Device(0).use()
        res[k] = calls(s, size, N // 16, True, k * (N // 16) * size)
    s.synchronize(); a = time.perf_counter()
    th = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
    [x.start() for x in th]; [x.join() for x in th]
    issued = time.perf_counter() - a; s.synchronize(); total = time.perf_counter() - a
    t = [x for r in res for x in r]
    print(f"16 threads size {size>>10:5} KiB events 1: call p50 {pct(t,.5):7.1f} us p99 {pct(t,.99):7.1f}"
          f"  issue-all {issued*1e3:6.2f} ms  all-done {total*1e3:6.2f} ms  {len(t)*size/total/1e9:5.1f} GB/s")
