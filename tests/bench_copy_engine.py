"""Does a copy need the SMs? Each copy timed alone, then again while a kernel holds every SM.

A device benchmark (not a test; docs/measurement.md says what it found): one process, GPU 0. A "hog" kernel
of 2 x 1024 threads per SM spins for 50 ms, so no other block can start anywhere; a copy enqueued on another
stream right after it either finishes in its usual time (a copy engine moves it) or waits for the hog (it
runs on the SMs). Usage: python tests/bench_copy_engine.py
"""

from __future__ import annotations

import time

import cupy
import numpy as np
from cupy.cuda import runtime

from ipcbench.core.gpu import Gpu

HOG = r'''
extern "C" __global__ void hog(unsigned long long ns) {
    unsigned long long t0, t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
'''
HOG_NS = 50_000_000


def main() -> int:
    g = Gpu(0)
    hog = cupy.RawKernel(HOG, "hog")
    big = 1 << 30
    a, b = g.malloc(big), g.malloc(big)
    host = runtime.hostAlloc(64 << 20, 0)
    other = g.new_stream()

    def timed(enqueue) -> float:
        e0, e1 = g.event(), g.event()
        e0.record(other)
        enqueue(other)
        e1.record(other)
        g.wait(other)
        return g.elapsed_ms(e0, e1)

    def trial(label, enqueue):
        timed(enqueue)  # warm: kernels and graphs loaded before anything is timed
        alone = timed(enqueue)
        with g.stream:
            hog((2 * g.sm_count,), (1024,), (np.uint64(HOG_NS),))
        time.sleep(0.005)  # the hog is running
        busy = timed(enqueue)
        g.wait()
        print(f"{label:34s} alone {alone:8.3f} ms   with every SM held {busy:8.3f} ms", flush=True)

    def graph_of(nbytes):
        other.begin_capture()
        runtime.memcpyAsync(b, a, nbytes, runtime.memcpyDefault, other.ptr)
        gr = other.end_capture()
        gr.upload(other)
        return gr

    print(f"GPU 0 ({g.info.name}), a kernel holding all {g.sm_count} SMs for {HOG_NS / 1e6:.0f} ms")
    def copy(dst, src, nbytes):
        return lambda s: runtime.memcpyAsync(dst, src, nbytes, runtime.memcpyDefault, s.ptr)

    trial("device->device 1 GiB (same GPU)", copy(b, a, big))
    trial("device->device 64 MiB (same GPU)", copy(b, a, 64 << 20))
    trial("host->device 64 MiB (pinned)", copy(b, host, 64 << 20))
    g1 = graph_of(big)
    trial("device->device 1 GiB, graph node", lambda s: g1.launch(s))
    trial("SM copy kernel 1 GiB (control)", lambda s: g.launch_copy(a, b, big, 1, s))
    runtime.freeHost(host)
    g.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
