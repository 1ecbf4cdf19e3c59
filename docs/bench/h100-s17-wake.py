"""Issue 18, seventeenth session: what waiting for a copy's event costs, blocking vs polling.
N times: one 1 MiB pinned host-to-device copy, an event after it, wait for the event; per wait
the time from the copy's issue to the wait's return, for an event made with blocking sync
(the thread sleeps until the GPU's interrupt wakes it) and for a polled one (cuEventQuery loop).
    python3 docs/bench/h100-s17-wake.py
"""
import time
import cupy as cp
rt = cp.cuda.runtime
host = cp.cuda.alloc_pinned_memory(1 << 20)
dev = cp.empty(1 << 20, dtype=cp.uint8)
s = cp.cuda.Stream(non_blocking=True)
def run(block, poll, n=400):
    t = []
    for _ in range(n):
        e = cp.cuda.Event(block=block, disable_timing=True)
        a = time.perf_counter()
        rt.memcpyAsync(dev.data.ptr, host.ptr, 1 << 20, rt.memcpyHostToDevice, s.ptr)
        e.record(s)
        if poll:
            while not e.done: pass
        else:
            e.synchronize()
        t.append(time.perf_counter() - a)
    t.sort()
    return t[len(t) // 2] * 1e6, t[int(len(t) * .99)] * 1e6
run(True, False, 50)
for name, block, poll in (("blocking-sync wait", True, False), ("spinning wait", False, False),
                          ("query loop", True, True)):
    p50, p99 = run(block, poll)
    print(f"1 MiB copy + event, {name:18}: issue->wait returned p50 {p50:7.1f} us p99 {p99:7.1f} us")
