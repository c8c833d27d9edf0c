"""Concurrent traffic: every rank of a node pushes to every other rank at the same time (copy suite).

Unlike the pair matrices, this shows what the fabric gives when all links and copy engines are busy at
once. Each rank drives one stream per peer, all behind one gate. The time of a sample is ONE window per
GPU: from the earliest start to the latest end of every flow sourced on that GPU, on the GPU's own
clock (%globaltimer stamps, shared by all processes on the GPU). Per-flow times from each stream's own
events would overlap and add up past the link; a window that covers every flow cannot. Each flow's copies
are enqueued on its stream as an application would (core/methods.StreamBatch), at most one gated segment a
sample.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ipcbench.core.methods import per_segment
from ipcbench.core.rows import make_row
from ipcbench.core.sampler import calibrate, take_samples
from ipcbench.core.stats import poison_seed, seed_for
from ipcbench.errors import MeasureError

NOTE = ("all pairs of the node at once; time = one window covering every flow sourced on the GPU "
        "(GPU clock), so flows from one GPU share it")


def _time_flows(ctx, batches: dict, reps_per_segment: list[int]) -> list[tuple[int, int]]:
    """Run every peer's batch at once behind one gate per segment; [(start_ns, end_ns)] per segment."""
    gpu, w = ctx.gpu, ctx.world
    main = gpu.stream
    marks = []
    for reps in reps_per_segment:
        ticket = gpu.gate(main)
        gpu.stamp(0, main)
        opened = gpu.event(timing=False)
        opened.record(main)
        for b in batches.values():
            b.stream.wait_event(opened)
            b.enqueue(reps)
            done = gpu.event(timing=False)
            done.record(b.stream)
            main.wait_event(done)
        gpu.stamp(1, main)
        w.node_barrier("the all-to-all start")
        gpu.release(ticket)
        gpu.wait(main, what="an all-to-all batch")
        if gpu.gate_timed_out(ticket):
            raise MeasureError("the gate kernel timed out before the all-to-all batch was enqueued")
        marks.append(gpu.read_stamps())
    return marks


def gpu_windows_ms(marks_by_rank: list[list[tuple[int, int]]], gpu_of: list[int]) -> dict[int, float]:
    """Per GPU: sum over segments of (latest end - earliest start) of the ranks on that GPU, in ms."""
    out: dict[int, float] = {}
    for g in sorted(set(gpu_of)):
        ranks = [r for r, gg in enumerate(gpu_of) if gg == g]
        segs = len(marks_by_rank[ranks[0]])
        out[g] = sum(max(marks_by_rank[r][k][1] for r in ranks) - min(marks_by_rank[r][k][0] for r in ranks)
                     for k in range(segs)) / 1e6
    return out


def alltoall_name(method) -> str:
    """The method name of a method's all-to-all rows."""
    return f"{method.name}_alltoall"


def measure_alltoall(ctx, method, sizes: list[int], suite: str = "copy") -> list:
    """All node-local ranks call this together; each returns the rows of the flows it sources."""
    w, gpu = ctx.world, ctx.gpu
    me, n = w.local_rank, w.local_size
    peers = [p for p in range(n) if p != me]
    bufs = ctx.buffers[method.buffers]
    streams = ctx.state.get("a2a_streams")
    if streams is None:
        streams = ctx.state["a2a_streams"] = {p: gpu.new_stream() for p in peers}
    label = f"{suite}/{alltoall_name(method)}"
    rows = []
    for nbytes in sizes:
        built: dict[int, Any] = {}

        def batches(count):
            if count not in built:
                built.clear()
                built[count] = {p: method.batch(gpu, bufs.src, bufs.peer_inbox_slot(p, me), nbytes, count, streams[p])
                                for p in peers}
            return built[count]

        def node_window(count):
            """Every rank runs `count` per flow; the slowest GPU's window (ms) and the flows' count."""
            bs = batches(count)
            first = next(iter(bs.values()))
            marks = _time_flows(ctx, bs, first.segments())
            everyone = w.node_allgather(marks, "the all-to-all windows")
            return gpu_windows_ms(everyone, ctx.gpu_of), first.count

        def timed(count):
            wins, done = node_window(count)
            return max(wins.values()), done

        w.node_barrier("the all-to-all calibration")
        count, _ = calibrate(replace(ctx.rule, max_count=min(ctx.rule.max_count, per_segment())), timed)
        count = max(w.node_allgather(count, "the all-to-all count"))
        count = next(iter(batches(count).values())).count
        my_gpu_ms: list[float] = []

        def sample(s: int):
            gpu.fill(bufs.src, nbytes, seed_for(w.rank, nbytes, s, label))
            for p in peers:
                gpu.fill(bufs.inbox_slot(p), nbytes, poison_seed(seed_for(ctx.world_rank(p), nbytes, s, label)))
            gpu.wait(what="fill/poison")
            w.node_barrier("the all-to-all sample start")
            wins, _ = node_window(count)
            my_gpu_ms.append(wins[ctx.gpu_of[me]])
            bad = checks = 0
            if ctx.verify:
                for p in peers:
                    bad_from[p] = bad_from.get(p, 0) + gpu.verify(
                        bufs.inbox_slot(p), nbytes, seed_for(ctx.world_rank(p), nbytes, s, label))
                checks = 1
            return max(wins.values()) * 1e3 / count, checks, bad

        bad_from: dict[int, int] = {}
        got = take_samples(ctx.rule, count, sample)
        everyone_bad = w.node_allgather(bad_from, "all-to-all verification results")
        per_us = [ms * 1e3 / count for ms in my_gpu_ms]
        for p in peers:
            rows.append(make_row(ctx, suite, alltoall_name(method), "push", me, p, nbytes, per_us, count,
                                 nbytes, got.checks, everyone_bad[p].get(me, 0), note=NOTE))
    return rows
