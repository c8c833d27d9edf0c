"""The selftest's independent path: the same transfer timed the way nvbandwidth times it, with nothing of
ipcbench's measuring machinery in between.

One process, buffers it allocated itself (cudaMalloc; on another GPU through peer access: no IPC), the
transfers enqueued call by call on a stream between two events behind a spin kernel (nvbandwidth's
spinKernel: the host finishes enqueuing before the GPU starts), a fixed number of transfers per repetition
(about 5 ms), the median of REPS repetitions after a warm-up transfer and a one-transfer probe, at
placements(size) places of its buffers measured at moments spread over the sweep (combine). None of
core/methods (batches), core/timing, core/sampler (calibration, stopping rule), core/pair (the protocol of
two processes) or ipc/ (sharing memory) is used; only the Gpu's primitives that enqueue one transfer
(cudaMemcpyAsync, the copy kernels), the gate kernel as the spin kernel, and fill/verify.
"""

from __future__ import annotations

import math
import statistics

import cupy
from cupy.cuda import runtime

from ipcbench.core.sampler import median_noise
from ipcbench.errors import MeasureError
from ipcbench.selftest.plan import PLACEMENTS, AnchorKey, placements
from ipcbench.selftest.verdict import Anchor, combine

REPS = 7
# Every repetition counts: the warm-up transfer and the latched probe before them already load the kernels and
# wake the copy path. Until 2026-11-26 one more was run first and dropped; on two H200s, over 294 anchors (CE, SM
# and bulk copies, 4 KiB to 1 GiB, local, push and pull), that first repetition lay within -0.52..+0.61% of the
# others' median, and the median of the first 7 within -0.13..+0.33% of the median of the last 7.
# 5 ms a repetition (10 ms until 2026-11-25): longer than ipcbench's shortest samples (2 ms), and the anchors were
# 45 of a selftest's 62 s on two H100s.
TARGET_MS = 5.0
MAX_TRANSFERS = 512  # behind one spin kernel, as ipcbench's own segments (core/methods.MAX_QUEUED)
# Each anchor is measured with its buffers at plan.placements(size) places of a larger allocation (OFFSETS: a new
# page, another alignment, other address bits each). Where a buffer lies moves a small copy-engine transfer: one
# H200 read 4 KiB copies at 2.558, 2.630, 2.646 or 2.666 GB/s by allocation, each within 0.05% run to run
# (SM kernels and 64 KiB copies: within 0.1%). The row's buffer lies at one such place, so the anchor's noise
# holds the farthest of its places from their median (verdict.combine).
OFFSETS = tuple(((2 << 20) + (64 << 10)) * ((1 << p) - 1) for p in range(PLACEMENTS))  # 0, 2.06M, 6.2M, 14.4M, 31M


def _enqueue(gpu, engine: str, stream, src: int, dst: int, nbytes: int, n: int) -> None:
    """n transfers as an application enqueues them (an SM copy of at least 4 x L2 loops n passes in one
    launch, as nvbandwidth's copy kernel does). Smaller SM copies are n launches of one kernel whose arguments
    are packed once (Gpu.copier: the same driver call each time). Packed at every launch, a repetition's
    enqueuing took 2.2 ms on average in a profile of selftest (cProfile, two H200s) while the GPU waited
    behind the spin kernel: time of the selftest's, not of the transfers'."""
    if engine == "ce":
        for _ in range(n):
            gpu.copy_async(dst, src, nbytes, stream)
        return
    if nbytes >= gpu.loop_in_kernel_bytes:
        (gpu.launch_copy if engine == "sm" else gpu.launch_bulk_copy)(src, dst, nbytes, n, stream)
        return
    launch = (gpu.copier if engine == "sm" else gpu.bulk_copier)(src, dst, nbytes, 1, stream)
    for _ in range(n):
        launch()


def _latched_ms(gpu, engine: str, stream, src: int, dst: int, nbytes: int, n: int) -> float:
    start, stop = gpu.event(), gpu.event()
    ticket = gpu.gate(stream)
    start.record(stream)
    _enqueue(gpu, engine, stream, src, dst, nbytes, n)
    stop.record(stream)
    gpu.release(ticket)
    gpu.wait(stream, what="an anchor's transfers")
    if gpu.gate_timed_out(ticket):
        raise MeasureError("selftest anchor: the spin kernel timed out before its transfers were enqueued")
    return gpu.elapsed_ms(start, stop)


def measure_one(gpu, engine: str, stream, src: int, dst: int, nbytes: int, seed: int) -> Anchor:
    """The anchor of one size: warm-up, a one-transfer probe for the count, REPS repetitions, one check."""
    _enqueue(gpu, engine, stream, src, dst, nbytes, 1)  # loads the kernels before anything waits on the latch
    gpu.wait(stream, what="an anchor's warm-up")
    per_ms = _latched_ms(gpu, engine, stream, src, dst, nbytes, 1)
    n = max(1, min(MAX_TRANSFERS, math.ceil(TARGET_MS / max(per_ms, 1e-4))))
    gpu.fill(src, nbytes, seed)
    gpu.fill(dst, nbytes, seed ^ 0x5A5A5A5A)
    gpu.wait(what="an anchor's fill")
    times = [_latched_ms(gpu, engine, stream, src, dst, nbytes, n) for _ in range(REPS)]
    bad = gpu.verify(dst, nbytes, seed)
    per = [t / n for t in times]
    return Anchor(gbps=nbytes / (statistics.median(per) * 1e-3) / 1e9, noise=median_noise(per), reps=REPS,
                  transfers=n, mismatches=bad)


def measure(gpu, key: AnchorKey, sizes: list[int]) -> dict:
    """{(key, size): Anchor} for one anchor job; this rank's GPU is the key's driving GPU. A buffer on
    another GPU is allocated there by this process (peer access, no IPC) and freed before returning."""
    if gpu.index != key.driver_gpu:
        raise MeasureError(f"selftest anchor {key.describe()} measured on GPU {gpu.index}")
    big = max(sizes) + OFFSETS[-1]
    other = key.src_gpu if key.style == "pull" else key.dst_gpu
    remote = None
    if other != gpu.index:
        try:
            runtime.deviceEnablePeerAccess(other)
        except runtime.CUDARuntimeError as e:
            if "PeerAccessAlreadyEnabled" not in str(e):
                raise MeasureError(f"selftest anchor {key.describe()}: peer access to GPU {other}: {e}") from None
        with cupy.cuda.Device(other):
            remote = runtime.malloc(big)
    mine = gpu.malloc(big)
    if key.style == "local":
        src, dst = mine, gpu.malloc(big)
    elif key.style == "push":
        src, dst = mine, remote
    else:
        src, dst = remote, mine
    stream = gpu.bulk_stream() if key.engine == "sm_bulk" else gpu.stream
    try:
        # Placement by placement over the whole sweep, not size by size: a size's placements are measured
        # seconds apart, so the spread combine() takes in holds the drift from one moment to the next (a
        # small copy's rate moves by 2-3% over seconds on an H100, more than its repetitions' noise), as the
        # row it is held against was measured at yet another moment.
        placed = [{n: measure_one(gpu, key.engine, stream, src + OFFSETS[p], dst + OFFSETS[p], n,
                                  seed=(n * 2654435761 + 7 * i + p) & 0xFFFFFFFF)
                   for i, n in enumerate(sizes) if p < placements(n)}
                  for p in range(PLACEMENTS)]
        return {(key, n): combine([at[n] for at in placed if n in at]) for n in sizes}
    finally:
        gpu.free(mine)
        if key.style == "local":
            gpu.free(dst)
        if remote is not None:
            with cupy.cuda.Device(other):
                runtime.free(remote)
