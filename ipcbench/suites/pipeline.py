"""Suite `pipeline`: a producer/consumer stage pair (inference server / pipeline stages in separate processes).

The producer (src rank) writes fixed-size chunks into a ring of D slots that lives in the consumer's
(dst rank's) GPU memory, mapped through legacy IPC, and signals each chunk with a flag; the consumer
kernel verifies every chunk and releases its slot with a flag back. All of it is device-side: one
persistent kernel on each GPU per sample (kernels/pipeline.cu), both enqueued behind a gate and
released together after a pair barrier, so no Python runs while chunks move.

Where things live (legacy BufferSet): the ring is the consumer's inbox slot for the producer (room for
the run's largest size, so only (chunk, depth) combinations with D*C <= that size are planned); the
"ready" counters are in the consumer's ctrl block, the "released" counters and the consumer's hello
flag in the producer's ctrl block, at byte offset CTRL_OFF (the upper half of the 64 KiB block).
Every counter is reset by its owner before each sample, behind a pair barrier.

Rows (one pair at a time, every ordered pair; the producer is src, the consumer dst):
  method `ring_d{D}`, direction push, bytes = chunk size C:
      time_us_* = per-chunk time in steady state (span / N over the samples), bw = C / that time
      (sustained GB/s). The span runs, on the producer's %globaltimer, from the moment the first lane
      starts writing chunk 0 (the producer waits for the consumer kernel's hello first, so launch
      skew between the two GPUs is not counted) to the moment the last chunk is released.
  method `ring_d{D}_latency`, direction oneway, bytes = C:
      per-chunk latency, all chunks of all samples: from the producer starting to write chunk i into a
      free slot to the producer seeing the consumer's release of chunk i, both on the PRODUCER's clock
      (no cross-GPU clock offset). It therefore includes the write, the ready flag, the consumer's
      wait behind up to D-1 earlier chunks (queueing under sustained load), its verification, and one
      release flag back (~0.75 us on NVLink). time_us_median/min/max; p50/p99 in the note.
Both rows carry `verified` = every chunk of every sample matched its per-chunk pattern.

Same-GPU pairs (two processes on one GPU) work. Without MPS the two persistent kernels are time-sliced
by the driver, so every hand-off waits for a context switch: those pairs run a few chunks only and the
note says so. Under MPS (ctx.mps, core/mps.py) they run concurrently and are measured like any pair;
the note says that too. Chunk sizes: 64K, 1M, 4M clamped to the run's --sizes (at most half the
largest size, a multiple of 16 bytes); ring depths 2, 4, 8. With --quick (2 ms samples) a pair takes
about a second.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ipcbench.catalogue.planned import RowShape
from ipcbench.catalogue.suites import PIPELINE_DEPTHS
from ipcbench.core.rows import join_note, make_row
from ipcbench.core.sampler import take_samples
from ipcbench.core.stats import percentile, seed_for
from ipcbench.core.world import ordered_pairs
from ipcbench.errors import PipelineError
from ipcbench.suites.registry import Step, SuiteSpec

# CUDA and MPI are imported in the functions that measure: plans and the report import this (suites/registry.py).

CHUNK_TARGETS = (64 << 10, 1 << 20, 4 << 20)
DEPTHS = PIPELINE_DEPTHS  # the catalogue's (catalogue/suites.py: the rows they write)
CTRL_OFF = 32 << 10  # byte offset of the pipeline's counters inside each rank's 64 KiB ctrl block
MAX_LANES = 1024
THREADS = 512
# At least this much of a chunk per lane (block). Swept on 2x H200 (NV18), --quick: 8K/32K/64K lanes gave
# 64K chunks 20/19/15 GB/s (depth 2) and 65/64/55 (depth 8); 1M chunks 160/152/146 (d2), 175/325/265 (d8);
# 4M chunks 301/306/261 (d2), 302/310/363 (d4). 32K is the best single choice.
LANE_MIN_BYTES = 32 << 10
MAX_CHUNKS = 4096
MIN_CHUNKS = 32
SAME_GPU_CHUNKS = 16
SPIN_TIMEOUT_S = 5.0

# ctrl layout at CTRL_OFF (u64 words): [0, MAX_LANES) ready (consumer's), [MAX_LANES, 2*MAX_LANES)
# released (producer's), 2*MAX_LANES: hello (producer's).
READY_OFF = CTRL_OFF
RELEASED_OFF = CTRL_OFF + 8 * MAX_LANES
HELLO_OFF = CTRL_OFF + 16 * MAX_LANES
CTRL_USED = 16 * MAX_LANES + 8

ST_MESSAGES = {
    1: "the producer never saw the consumer kernel start (hello flag)",
    2: "the producer waited for a slot that the consumer never released",
    3: "the producer's monitor waited for a chunk release that never came",
    4: "the consumer waited for a chunk that the producer never published",
}




# ---- planning (pure, no CUDA) ------------------------------------------------------------------
def chunk_sizes(sizes: list[int]) -> list[int]:
    """64K, 1M, 4M clamped into [smallest size, largest/2], multiples of 16; deduplicated, ascending."""
    lo, hi = min(sizes), max(sizes) // 2
    hi -= hi % 16
    if hi < 16:
        return []
    lo = min(max(16, -(-lo // 16) * 16), hi)
    return sorted({min(max(t, lo), hi) for t in CHUNK_TARGETS})


def plan(sizes: list[int], capacity: int | None = None) -> list[tuple[int, list[int]]]:
    """[(depth, [chunk sizes])]: every (C, D) with D*C within the ring capacity (default: largest size)."""
    cap = max(sizes) if capacity is None else capacity
    out = []
    for d in DEPTHS:
        cs = [c for c in chunk_sizes(sizes) if c * d <= cap]
        if cs:
            out.append((d, cs))
    return out


def lanes_for(chunk: int, sm_count: int, depth: int) -> tuple[int, int, int]:
    """(lanes, bytes per lane, groups): a chunk is split into `lanes` blocks of >= LANE_MIN_BYTES, and
    `groups` such sets of blocks take turns (chunk i goes to group i % groups), at most `depth` (no more
    chunks than slots can be in flight) and lanes * groups <= SMs - 1 (one SM for the monitor)."""
    room = max(1, min(MAX_LANES, sm_count - 1))
    lanes = max(1, min(room, chunk // LANE_MIN_BYTES))
    part = -(-chunk // lanes)
    part = -(-part // 16) * 16
    lanes = -(-chunk // part)  # no empty lanes
    groups = max(1, min(depth, room // lanes))
    return lanes, part, groups


def latency_summary(lat_us: list[float]) -> dict:
    return {"p50": percentile(lat_us, 50), "p99": percentile(lat_us, 99), "min": min(lat_us), "max": max(lat_us)}


def _same_gpu_note(ctx, producer: int, consumer: int, n: int) -> str:
    """What a same-GPU pair's rows must say: time-sliced (a few chunks) without MPS, concurrent under it."""
    if ctx.time_sliced(producer, consumer):
        return f"same GPU: kernels time-sliced (no MPS), {n} chunks"
    if ctx.same_gpu(producer, consumer):
        return "same GPU under MPS: the two processes' kernels run concurrently"
    return ""


# ---- measurement -------------------------------------------------------------------------------
def _run_sample(ctx, producer: int, consumer: int, chunk: int, depth: int, n_chunks: int, base_seed: int,
                me_producer: bool, scratch: int, lanes: int, part: int, groups: int):
    """One sample: both ranks run this. Returns (span_ns, latencies_ns) on the producer, mismatches on the consumer."""
    from cupy.cuda import runtime

    w, gpu = ctx.world, ctx.gpu
    bufs = ctx.buffers["legacy"]
    peer = consumer if me_producer else producer
    timeout_ns = np.uint64(int(SPIN_TIMEOUT_S * 1e9))
    s = gpu.stream
    # Reset my own counters and my result scratch; then both sides are clean before anyone launches.
    runtime.memsetAsync(bufs.ctrl + CTRL_OFF, 0, CTRL_USED, s.ptr)
    runtime.memsetAsync(scratch, 0, 64, s.ptr)  # status u32 at +0, mismatches u64 at +8
    if me_producer:
        runtime.memsetAsync(scratch + 64, 0xFF, 8 * n_chunks, s.ptr)  # t_start: atomicMin from ~0
        runtime.memsetAsync(scratch + 64 + 8 * n_chunks, 0, 8 * n_chunks, s.ptr)  # t_done
    gpu.wait(what="pipeline reset")
    w.pair_barrier(peer)
    # Load the kernel before the gate: loading a module while the gate spins would wait for the gate.
    fn = gpu.function("pipeline", "pipe_producer" if me_producer else "pipe_consumer")
    ticket = gpu.gate(s)
    if me_producer:
        ring = bufs.peer_inbox_slot(consumer, producer)
        peer_ctrl = bufs.peer_ctrl[consumer]
        with s:
            fn((lanes * groups + 1,), (THREADS,), (
                np.uint64(ring), np.uint64(chunk), np.uint32(depth), np.uint32(n_chunks), np.uint32(lanes),
                np.uint32(groups), np.uint64(part), np.uint32(base_seed), np.uint64(peer_ctrl + READY_OFF),
                np.uint64(bufs.ctrl + RELEASED_OFF), np.uint64(bufs.ctrl + HELLO_OFF),
                np.uint64(scratch + 64), np.uint64(scratch + 64 + 8 * n_chunks), np.uint64(scratch),
                timeout_ns))
    else:
        ring = bufs.inbox_slot(producer)
        peer_ctrl = bufs.peer_ctrl[producer]
        with s:
            fn((lanes * groups,), (THREADS,), (
                np.uint64(ring), np.uint64(chunk), np.uint32(depth), np.uint32(n_chunks), np.uint32(lanes),
                np.uint32(groups), np.uint64(part), np.uint32(base_seed), np.uint64(bufs.ctrl + READY_OFF),
                np.uint64(peer_ctrl + RELEASED_OFF), np.uint64(peer_ctrl + HELLO_OFF),
                np.uint64(scratch + 8), np.uint64(scratch), timeout_ns))
    w.pair_barrier(peer, tag=12)
    gpu.release(ticket)
    gpu.wait(s, timeout=4 * SPIN_TIMEOUT_S + 30, what="the pipeline kernel")
    if gpu.gate_timed_out(ticket):
        raise PipelineError(f"rank {w.rank}: the gate before the pipeline kernel timed out")
    result = _read_result(runtime, scratch, me_producer, n_chunks)
    theirs = w.exchange(result, peer, tag=13)
    mine_status, peer_status = result[0], theirs[0]
    if mine_status or peer_status:
        who = [f"rank {ctx.world_rank(r)} ({'producer' if r == producer else 'consumer'}): "
               f"{ST_MESSAGES.get(st, f'status {st}')}"
               for r, st in ((w.local_rank, mine_status), (peer, peer_status)) if st]
        raise PipelineError(f"pipeline {ctx.world_rank(producer)}->{ctx.world_rank(consumer)} chunk {chunk} "
                            f"depth {depth}: a spin timed out after {SPIN_TIMEOUT_S:g} s: " + "; ".join(who))
    return (result, theirs) if me_producer else (theirs, result)


def _read_result(runtime, scratch: int, me_producer: bool, n_chunks: int) -> tuple:
    """What the kernel left in its scratch: (status, span_ns, each chunk's latency_ns) on the producer, (status,
    mismatches) on the consumer; a failed status leaves no times."""
    head = np.zeros(2, dtype=np.uint64)
    runtime.memcpy(head.ctypes.data, scratch, 16, runtime.memcpyDeviceToHost)
    status = int(head[0]) & 0xFFFFFFFF
    if not me_producer:
        return (status, int(head[1]))
    stamps = np.zeros(2 * n_chunks, dtype=np.uint64)
    runtime.memcpy(stamps.ctypes.data, scratch + 64, 16 * n_chunks, runtime.memcpyDeviceToHost)
    t_start, t_done = stamps[:n_chunks].astype(np.int64), stamps[n_chunks:].astype(np.int64)
    if status:
        return (status, 0, [])
    return (status, int(t_done[-1] - t_start[0]), (t_done - t_start).tolist())


def measure_ring(ctx, producer: int, consumer: int, depth: int, chunks: list[int]):
    """Both ranks of the pair call this; the producer returns a ring_dD row and a ring_dD_latency row per
    chunk size. Chunks per sample are calibrated like every other measurement (core/sampler.py)."""
    w, gpu = ctx.world, ctx.gpu
    me = w.local_rank
    me_producer = me == producer
    peer = consumer if me_producer else producer
    # Agree on the SM count (lane count) with the peer.
    sms = min(gpu.sm_count, w.exchange(gpu.sm_count, peer, tag=14))
    slow = ctx.time_sliced(producer, consumer)
    cap = ctx.buffers["legacy"].slot_bytes
    rule = replace(ctx.rule, max_count=MAX_CHUNKS)
    label = f"pipeline/d{depth}"
    rows = []
    scratch = gpu.malloc(64 + 16 * MAX_CHUNKS)
    try:
        for chunk in chunks:
            if chunk * depth > cap:
                continue
            lanes, part, groups = lanes_for(chunk, sms, depth)

            def run(n, s):
                seed = seed_for(ctx.world_rank(producer), chunk, s, label)
                return _run_sample(ctx, producer, consumer, chunk, depth, n, seed, me_producer, scratch,
                                   lanes, part, groups)

            if slow:  # every hand-off waits for a context switch: a few chunks show it
                n = SAME_GPU_CHUNKS
                run(n, -1)  # warm-up (module load, first touch of the mapping)
            else:
                def timed(c):
                    c = max(MIN_CHUNKS, c)
                    prod, _ = run(c, -1)
                    return prod[1] / 1e6, c

                n = max(MIN_CHUNKS, ctx.calibrate((label, producer, consumer), chunk, timed))
            lat_us: list[float] = []
            sample_p50: list[float] = []

            def sample(s: int):
                prod, cons = run(n, s)
                lats = [x / 1e3 for x in prod[2]]
                lat_us.extend(lats)
                sample_p50.append(percentile(lats, 50))
                return prod[1] / 1e3 / n, 1, cons[1]  # the consumer checked every chunk of the sample

            got = take_samples(rule, n, sample)
            if me_producer:
                rows += _ring_rows(ctx, producer, consumer, depth, chunk, n, f"{lanes}x{groups}", got, lat_us,
                                   sample_p50)
    finally:
        gpu.free(scratch)
    return rows


def _ring_rows(ctx, producer: int, consumer: int, depth: int, chunk: int, n: int, lanes: str, got, lat_us: list[float],
               sample_p50: list[float]) -> list:
    """The producer's two rows of one chunk size: the ring's bandwidth (`got`, its samples) and each chunk's latency
    (every chunk's, `lat_us`; its samples each sample's p50)."""
    ls = latency_summary(lat_us)
    extra = _same_gpu_note(ctx, producer, consumer, n)
    note = join_note(f"ring={depth} chunk={chunk} chunks={n} lanes={lanes} p50_us={ls['p50']:.2f} "
                     f"p99_us={ls['p99']:.2f}", extra)
    shape, lat_shape = ring_rows(depth)
    row = make_row(ctx, suite="pipeline", method=shape.method, direction=shape.direction, src=producer, dst=consumer,
                   nbytes=chunk, per_us=got.per_transfer_us, iterations=n, moved=chunk, checks=got.checks,
                   mismatches=got.mismatches, note=note)
    lat_note = join_note(f"ring={depth} chunk={chunk} p50_us={ls['p50']:.2f} p99_us={ls['p99']:.2f}; write "
                         f"start -> release seen, producer's clock; median/min/max over every chunk, "
                         f"samples_us = each sample's p50", extra)
    lat_row = make_row(ctx, suite="pipeline", method=lat_shape.method, direction=lat_shape.direction, src=producer,
                       dst=consumer, nbytes=chunk, per_us=lat_us, iterations=n, moved=None, checks=got.checks,
                       mismatches=got.mismatches, note=lat_note, kind="latency", required=len(got.per_transfer_us),
                       samples_us=sample_p50)
    lat_row.samples = len(got.per_transfer_us)
    return [row, lat_row]


def ring_rows(depth: int) -> tuple[RowShape, RowShape]:
    """The producer's two rows of each chunk size at `depth` (_ring_rows): the ring's bandwidth, each chunk's
    latency."""
    return RowShape(f"ring_d{depth}", "push"), RowShape(f"ring_d{depth}_latency", "oneway")


def steps(n: int, sizes: list[int]) -> list[Step]:
    out = []
    for depth, chunks in plan(sizes):
        def run(ctx, src, dst, chunk_list, depth=depth):
            return measure_ring(ctx, src, dst, depth, chunk_list)

        out.append(Step("pipeline", f"ring depth {depth}", ordered_pairs(n), chunks, run,
                        needs=("legacy",), cost=1.6, writes=ring_rows(depth)))
    return out



SUITE = SuiteSpec("pipeline", "producer/consumer stage: chunks through a ring in the consumer's GPU memory, "
                "signalled by device-side flags, every chunk verified; sustained GB/s and per-chunk latency",
                steps)
