"""Concurrent traffic: every rank of a node pushes to every other rank at the same time.

Unlike the pair matrices (one pair at a time), this shows what the fabric gives when all links and
copy engines are busy at once. Each rank drives one stream per peer; every stream waits on the same
gate, and each (src, dst) row is timed by that stream's own events.
"""

from __future__ import annotations

import cupy

from .measure import Ctx, MeasureError, make_row
from .methods import GraphBatch
from .stats import poison_seed, seed_for

NOTE = "all pairs of the node at once"


def _time_streams(ctx: Ctx, batches: dict[int, GraphBatch]) -> dict[int, float]:
    """GPU ms of each peer stream's transfers, all streams behind one gate per segment."""
    gpu, w = ctx.gpu, ctx.world
    totals = {p: 0.0 for p in batches}
    for reps in next(iter(batches.values())).segments():
        ticket = gpu.gate(gpu.stream)
        opened = cupy.cuda.Event(disable_timing=True)
        opened.record(gpu.stream)
        events = {}
        for peer, b in batches.items():
            b.stream.wait_event(opened)
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(b.stream)
            b.enqueue(reps)
            stop.record(b.stream)
            events[peer] = (start, stop)
        w.node_barrier("the all-to-all start")
        gpu.release(ticket)
        for b in batches.values():
            gpu.wait(b.stream, what="all-to-all batch")
        if gpu.gate_timed_out(ticket):
            raise MeasureError("the gate kernel timed out before the all-to-all batch was enqueued")
        for p, (a, b) in events.items():
            totals[p] += cupy.cuda.get_elapsed_time(a, b)
    return totals


def measure_alltoall(ctx: Ctx, method, sizes: list[int], suite: str = "copy") -> list:
    """All node-local ranks call this together; each returns the rows of the pairs it sources."""
    w, gpu = ctx.world, ctx.gpu
    me, n = w.local_rank, w.local_size
    peers = [p for p in range(n) if p != me]
    bufs = ctx.buffers[method.buffers]
    streams = ctx.state.get("a2a_streams")
    if streams is None:
        streams = ctx.state["a2a_streams"] = {p: cupy.cuda.Stream(non_blocking=True) for p in peers}
    label = f"{suite}/{method.name}_alltoall"
    rows = []
    for nbytes in sizes:
        def batches(count):
            return {p: GraphBatch(gpu, method, bufs.src, bufs.peer_inbox_slot(p, me), nbytes, count, streams[p])
                    for p in peers}

        w.node_barrier("the all-to-all calibration")
        trial = max(_time_streams(ctx, batches(1)).values())
        trial = max(w.node_allgather(trial, "all-to-all calibration"))
        count = max(1, min(ctx.opts.max_count, int(ctx.opts.min_time_s * 1e3 / max(trial, 1e-4)) + 1))
        bs = batches(count)
        count = next(iter(bs.values())).count
        per_peer_ms = {p: [] for p in peers}
        bad_from = {p: 0 for p in peers}
        for s in range(ctx.opts.samples):
            gpu.fill(bufs.src, nbytes, seed_for(w.rank, nbytes, s, label))
            for p in peers:
                gpu.fill(bufs.inbox_slot(p), nbytes, poison_seed(seed_for(ctx.world_rank(p), nbytes, s, label)))
            gpu.wait(what="fill/poison")
            w.node_barrier("the all-to-all sample start")
            for p, ms in _time_streams(ctx, bs).items():
                per_peer_ms[p].append(ms)
            w.node_barrier("the all-to-all sample end")
            if ctx.opts.verify:
                for p in peers:
                    bad_from[p] += gpu.verify(bufs.inbox_slot(p), nbytes, seed_for(ctx.world_rank(p), nbytes, s, label))
        # Each destination tells each source how many words of its data were wrong.
        everyone_bad = w.node_allgather(bad_from, "all-to-all verification results")
        for p in peers:
            per_us = [ms * 1e3 / count for ms in per_peer_ms[p]]
            rows.append(make_row(ctx, suite, f"{method.name}_alltoall", "push", me, p, nbytes, count, per_us,
                                 nbytes, everyone_bad[p][me], ctx.opts.verify, NOTE))
    return rows
