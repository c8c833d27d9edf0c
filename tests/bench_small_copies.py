"""Why do back-to-back queued small peer copies take longer each than copies issued one by one?

A device benchmark (not a test): one process, GPU 0 -> GPU 1 (or GPU 0 -> GPU 0 with one GPU), N copies of
SIZE bytes, timed five ways, printed as a table:
  loop      events around a plain Python loop of cudaMemcpyAsync (what naive tools do)
  enqueue   host time per cudaMemcpyAsync call in that loop
  queued    all N behind a gate kernel, events around the batch (ipcbench's method, no graph)
  graph     one CUDA graph of N copies behind the gate (ipcbench's method)
  isolated  each copy alone on an idle stream, events right around it, host waits between copies
  spaced    all N behind the gate, but each copy preceded by a ~5 us spin kernel; the spin's own
            time (measured alone) is subtracted: a copy that never has a predecessor still in flight
  per-copy  events around every copy inside the queued batch: the GPU's view of each copy's duration

Usage: python tests/bench_small_copies.py [SIZE ...]   (default 8 4096 65536 1048576)
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
import cupy
from cupy.cuda import runtime

from ipcbench.core.gpu import Gpu
from ipcbench.sizes import parse_size

N = 500
SPIN = r'''
extern "C" __global__ void spin(unsigned long long ns) {
    unsigned long long t0; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    unsigned long long t = t0;
    while (t - t0 < ns) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
}
'''


def main(sizes: list[int]) -> None:
    ndev = runtime.getDeviceCount()
    dst_dev = 1 if ndev > 1 else 0
    g = Gpu(0)
    if dst_dev:
        runtime.deviceEnablePeerAccess(dst_dev)
    src = g.malloc(max(sizes))
    with cupy.cuda.Device(dst_dev):
        dst = runtime.malloc(max(sizes))
    s = g.stream
    spin = cupy.RawKernel(SPIN, "spin")
    ev = cupy.cuda.Event
    print(f"GPU 0 -> GPU {dst_dev}, {N} copies; us per copy (median of 5)")
    print(f"{'size':>8s} {'loop':>7s} {'enqueue':>7s} {'queued':>7s} {'graph':>7s} {'isolated':>8s} "
          f"{'spaced':>7s} {'per-copy':>8s}")
    for size in sizes:
        res = {k: [] for k in ("loop", "enqueue", "queued", "graph", "isolated", "spaced", "percopy")}
        for _ in range(5):
            # plain loop
            a, b = ev(), ev()
            a.record(s)
            t0 = time.perf_counter()
            for _ in range(N):
                runtime.memcpyAsync(dst, src, size, runtime.memcpyDefault, s.ptr)
            t1 = time.perf_counter()
            b.record(s)
            s.synchronize()
            res["loop"].append(cupy.cuda.get_elapsed_time(a, b) * 1e3 / N)
            res["enqueue"].append((t1 - t0) * 1e6 / N)
            # queued behind the gate
            a, b = ev(), ev()
            t = g.gate(s)
            a.record(s)
            for _ in range(N):
                runtime.memcpyAsync(dst, src, size, runtime.memcpyDefault, s.ptr)
            b.record(s)
            g.release(t)
            s.synchronize()
            res["queued"].append(cupy.cuda.get_elapsed_time(a, b) * 1e3 / N)
            # graph behind the gate
            s.begin_capture()
            for _ in range(N):
                runtime.memcpyAsync(dst, src, size, runtime.memcpyDefault, s.ptr)
            graph = s.end_capture()
            graph.upload(s)
            s.synchronize()
            a, b = ev(), ev()
            t = g.gate(s)
            a.record(s)
            graph.launch(s)
            b.record(s)
            g.release(t)
            s.synchronize()
            res["graph"].append(cupy.cuda.get_elapsed_time(a, b) * 1e3 / N)
            # isolated copies
            iso = []
            for _ in range(50):
                a, b = ev(), ev()
                a.record(s)
                runtime.memcpyAsync(dst, src, size, runtime.memcpyDefault, s.ptr)
                b.record(s)
                s.synchronize()
                iso.append(cupy.cuda.get_elapsed_time(a, b) * 1e3)
            res["isolated"].append(statistics.median(iso))
            # spaced: spin kernel before each copy, minus the spins alone
            def spaced(with_copy: bool) -> float:
                a, b = ev(), ev()
                t = g.gate(s)
                a.record(s)
                for _ in range(200):
                    with s:
                        spin((1,), (32,), (np.uint64(5000),))
                    if with_copy:
                        runtime.memcpyAsync(dst, src, size, runtime.memcpyDefault, s.ptr)
                b.record(s)
                g.release(t)
                s.synchronize()
                return cupy.cuda.get_elapsed_time(a, b) * 1e3 / 200
            res["spaced"].append(spaced(True) - spaced(False))
            # per-copy events inside a queued batch
            evs = [ev() for _ in range(2 * 200)]
            t = g.gate(s)
            for i in range(200):
                evs[2 * i].record(s)
                runtime.memcpyAsync(dst, src, size, runtime.memcpyDefault, s.ptr)
                evs[2 * i + 1].record(s)
            g.release(t)
            s.synchronize()
            res["percopy"].append(statistics.median(
                cupy.cuda.get_elapsed_time(evs[2 * i], evs[2 * i + 1]) * 1e3 for i in range(200)))
        med = {k: statistics.median(v) for k, v in res.items()}
        print(f"{size:>8d} {med['loop']:7.2f} {med['enqueue']:7.2f} {med['queued']:7.2f} {med['graph']:7.2f} "
              f"{med['isolated']:8.2f} {med['spaced']:7.2f} {med['percopy']:8.2f}", flush=True)


if __name__ == "__main__":
    main([parse_size(a) for a in sys.argv[1:]] or [8, 4096, 65536, 1 << 20])
