"""What the host spends per operation of a sample, outside any timed region (issue: "A node characterised in 20
seconds"): the enqueue of one transfer through each path the suites can take, a stream wait, an event, a fill and a
verify of a small buffer.

A device benchmark (not a test): one process, one GPU, no peer (the host cost of an enqueue does not depend on
where the bytes go). Every path is enqueued N times behind a gate kernel (nothing runs while the host enqueues),
and the host's time per call is printed in µs.

Usage: python tests/bench_host_costs.py [N]   (default 512, the most transfers of one gated segment)
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
from cupy.cuda import runtime

from ipcbench.core.gpu import Gpu


def per_call_us(fn, n: int, reps: int = 5) -> float:
    """Median over `reps` of the host µs per call of fn(), n calls each."""
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(out)


def gated(gpu: Gpu, fn, n: int) -> float:
    """Host µs per call of fn(), n calls enqueued behind a gate (so the stream never drains meanwhile)."""
    ticket = gpu.gate()
    try:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t) / n * 1e6
    finally:
        gpu.release(ticket)
        gpu.wait(what="the benchmark's batch")


def main(n: int) -> None:
    gpu = Gpu(0)
    a, b = gpu.malloc(1 << 20), gpu.malloc(1 << 20)
    s = gpu.stream
    gpu.launch_copy(a, b, 4096, 1, s)
    gpu.launch_bulk_copy(a, b, 4096, 1, s)
    gpu.wait()
    rows = []
    rows.append(("cudaMemcpyAsync 4K (Gpu.copy_async)", gated(gpu, lambda: gpu.copy_async(b, a, 4096, s), n)))
    rows.append(("SM copy kernel 4K (Gpu.launch_copy)", gated(gpu, lambda: gpu.launch_copy(a, b, 4096, 1, s), n)))
    rows.append(("bulk kernel 4K (Gpu.launch_bulk_copy)", gated(gpu, lambda: gpu.launch_bulk_copy(a, b, 4096, 1, s),
                                                                n)))
    go = gpu.copier(a, b, 4096, 1, s)
    rows.append(("SM copy kernel 4K (Gpu.copier, prepared)", gated(gpu, go, n)))
    go = gpu.bulk_copier(a, b, 4096, 1, s)
    rows.append(("bulk kernel 4K (Gpu.bulk_copier, prepared)", gated(gpu, go, n)))
    fn = gpu.function("copy", "copy_v16", (f"UNROLL={gpu.copy_shape.unroll}",))
    blocks = gpu.blocks_for(4096, 16 * gpu.copy_shape.unroll, gpu.copy_shape.blocks_per_sm, gpu.copy_shape.threads)
    raw = (np.uint64(a), np.uint64(b), np.uint64(4096), np.int32(1))

    def cupy_call():
        with s:
            fn((blocks,), (gpu.copy_shape.threads,), raw)

    rows.append(("SM copy kernel 4K (RawKernel call, the old path)", gated(gpu, cupy_call, n)))
    rows.append(("Gpu.wait on an idle stream", per_call_us(lambda: gpu.wait(), 200)))
    rows.append(("Gpu.event + record", per_call_us(lambda: gpu.event().record(s), 200)))
    rows.append(("fill 4K + wait", per_call_us(lambda: (gpu.fill(a, 4096, 7), gpu.wait()), 200)))
    rows.append(("verify 4K (waits)", per_call_us(lambda: gpu.verify(a, 4096, 7), 200)))
    rows.append(("fill 1M + wait", per_call_us(lambda: (gpu.fill(a, 1 << 20, 7), gpu.wait()), 50)))
    rows.append(("gate + release + wait (empty segment)", per_call_us(
        lambda: (gpu.release(gpu.gate()), gpu.wait()), 200)))
    for what, us in rows:
        print(f"{what:48s} {us:9.2f} µs per call")
    runtime.deviceSynchronize()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 512)
