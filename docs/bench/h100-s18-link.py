"""Issue 18, eighteenth session: what slows the host-to-device link while readers run.
Two suspects for run 8's "link ~36 GB/s beside readers, ~51 alone": host memory bandwidth
shared with the readers' page-cache copies, or the DMA reading lines the CPU has just written
(still dirty in a core's cache, so each read is a snoop). Measured with cupy, the GPU time of
back-to-back pinned copies (events around them), per copy size:
  alone      the pinned buffer written long ago (evicted by a 2 GiB sweep)
  readers    the same while K threads pread the page-cached file into their own large buffers
             (they never touch the pinned buffer): memory bandwidth shared, no snoops
  fresh      one thread: pread a chunk into the pinned buffer, then copy it and wait (serial),
             the copy timed alone: snoops, no contention; `stale` is the same chunks copied
             after an eviction sweep
and the readers' own rate alone and beside the link.
    python3 docs/bench/h100-s18-link.py FILE [K]
"""
import os, sys, threading, time
import numpy as np
import cupy as cp

rt = cp.cuda.runtime
MB = 1 << 20
F = sys.argv[1]
K = int(sys.argv[2]) if len(sys.argv) > 2 else 15
fd = os.open(F, os.O_RDONLY)
flen = os.fstat(fd).st_size
PIN = 512 * MB
P = cp.cuda.alloc_pinned_memory(PIN)
pv = np.frombuffer(P, np.uint8, PIN)
dev = cp.empty(1 << 30, dtype=cp.uint8)
s = cp.cuda.Stream(non_blocking=True)
sweep_a = np.ones(1 << 31, np.uint8)

def evict():
    sweep_a[:] = 2  # 2 GiB of writes: the pinned buffer's lines leave the caches

def link(size, total, base=0):
    """GB/s of back-to-back copies of `size` from the pinned buffer (GPU-timed)."""
    n = max(1, total // size)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    e0.record(s)
    for i in range(n):
        h = (base + i * size) % (PIN - size)
        d = (i * size) % ((1 << 30) - size)
        rt.memcpyAsync(dev.data.ptr + d, P.ptr + h, size, rt.memcpyHostToDevice, s.ptr)
    e1.record(s)
    e1.synchronize()
    return n * size / (cp.cuda.get_elapsed_time(e0, e1) / 1e3) / 1e9

class Readers:
    """K threads preading 4 MiB pieces of the file into their own 256 MiB buffers."""
    def __init__(self, k):
        self.k, self.stop, self.bytes = k, False, [0] * k
        self.bufs = [np.zeros(256 * MB, np.uint8) for _ in range(k)]
        self.th = [threading.Thread(target=self.run, args=(i,)) for i in range(k)]
    def run(self, i):
        b, off, at = self.bufs[i], (i * 997 * 4 * MB) % (flen - 8 * MB), 0
        mv = memoryview(b)
        while not self.stop:
            n = os.preadv(fd, [mv[at:at + 4 * MB]], off)
            self.bytes[i] += n
            off = (off + 4 * MB) % (flen - 8 * MB)
            at = (at + 4 * MB) % (256 * MB)
    def __enter__(self):
        self.t0 = time.perf_counter()
        for t in self.th: t.start()
        time.sleep(0.2)
        return self
    def __exit__(self, *a):
        self.stop = True
        for t in self.th: t.join()
        self.rate = sum(self.bytes) / (time.perf_counter() - self.t0) / 1e9

def fresh(size, n, written):
    """Serial: pread a chunk into the pinned buffer (unless `written` is False), then copy it
    and wait; returns GB/s over the copies' GPU time only."""
    gpu = 0.0
    for i in range(n):
        h = (i * size) % (PIN - size)
        if written:
            os.preadv(fd, [memoryview(pv[h:h + size])], (i * 7919 * MB) % (flen - size))
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record(s)
        rt.memcpyAsync(dev.data.ptr, P.ptr + h, size, rt.memcpyHostToDevice, s.ptr)
        e1.record(s)
        e1.synchronize()
        gpu += cp.cuda.get_elapsed_time(e0, e1) / 1e3
    return n * size / gpu / 1e9

pv[:] = 1
link(MB, 64 * MB)  # warm up
sizes = [1 * MB, 2359296, 4 * MB]
for size in sizes:
    evict(); a = link(size, 2048 * MB)
    with Readers(K) as r:
        b = link(size, 2048 * MB)
    evict(); st = fresh(size, 100, False)
    fr = fresh(size, 100, True)
    print(f"size {size >> 10:5} KiB  link alone {a:5.1f}  beside {K} readers {b:5.1f} GB/s"
          f" (readers {r.rate:5.1f})  serial copy: stale {st:5.1f}  fresh {fr:5.1f} GB/s", flush=True)
for k in (4, 8, K):
    with Readers(k) as r:
        time.sleep(1.0)
    print(f"readers alone k={k:2}: {r.rate:5.1f} GB/s", flush=True)
