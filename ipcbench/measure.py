"""The timing loop: warm-up, calibration, samples behind a gate, bidirectional coordination, verification.

Rules (DESIGN.md): no Python in the timed region (CUDA events on the working stream around a batch
enqueued behind a gate kernel, as graph launches); iterations calibrated so that a sample lasts at least
--min-time; --samples samples; every (method, pair, size) verified by a GPU kernel on the destination.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import cupy

from .methods import GraphBatch, Method
from .results import Row
from .stats import poison_seed, seed_for, summarize


class MeasureError(RuntimeError):
    pass


@dataclass
class Options:
    samples: int = 5
    min_time_s: float = 0.010
    verify: bool = True
    warmup: int = 2
    max_count: int = 200_000


@dataclass
class Ctx:
    """What a rank needs to measure: world, GPU, shared buffers, options, identity of the run."""

    world: object
    gpu: object
    buffers: dict
    opts: Options
    run_id: str
    gpu_of: list[int]  # node-local rank -> GPU index
    unverified: int = 0
    state: dict = field(default_factory=dict)  # per-run caches a suite keeps between pairs (streams, events)

    def same_gpu(self, a: int, b: int) -> bool:
        return self.gpu_of[a] == self.gpu_of[b]

    def world_rank(self, local: int) -> int:
        return self.node_ranks[local]

    @property
    def node_ranks(self) -> list[int]:
        if not hasattr(self, "_node_ranks"):
            self._node_ranks = self.world.node_allgather(self.world.rank, "the node's rank list")
        return self._node_ranks


def time_batch(gpu, batch, sync_peer=None) -> float:
    """GPU time in ms of all transfers of `batch`, enqueued behind a gate in segments (methods.MAX_QUEUED).

    For each segment: gate kernel, start event, the segment's graph launches, stop event; then
    `sync_peer` (bidirectional runs: both ranks release their gates together) and the release. Only the
    GPU's time between the events counts, so no host activity is ever inside the timed region.
    """
    stream = gpu.stream
    total = 0.0
    for reps in batch.segments():
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        ticket = gpu.gate(stream)
        start.record(stream)
        batch.enqueue(reps)
        stop.record(stream)
        if sync_peer is not None:
            sync_peer()
        gpu.release(ticket)
        gpu.wait(stream, what="a timed batch")
        if gpu.gate_timed_out(ticket):
            raise MeasureError("the gate kernel timed out before the batch was enqueued (host too slow?)")
        total += cupy.cuda.get_elapsed_time(start, stop)
    return total


def calibrate(gpu, make_batch, min_time_s: float, max_count: int, warmup: int) -> int:
    """Transfers per sample so that one sample lasts about min_time_s (at least one transfer)."""
    b = make_batch(1)
    for _ in range(warmup):
        time_batch(gpu, b)
    per_ms = time_batch(gpu, b)
    target_ms = min_time_s * 1e3
    if per_ms < target_ms / 20:
        c = int(min(max_count, max(2, math.ceil(target_ms / 20 / max(per_ms, 1e-4)))))
        c = min(c, 4096)
        b = make_batch(c)
        time_batch(gpu, b)
        per_ms = time_batch(gpu, b) / b.count
    return int(max(1, min(max_count, math.ceil(target_ms / max(per_ms, 1e-5)))))


@dataclass
class PairRoles:
    """Who does what in one (method, direction, src, dst) measurement, from this rank's point of view."""

    me: int
    peer: int
    sources: tuple[int, ...]  # ranks whose `src` buffer is read
    drivers: tuple[int, ...]  # ranks that enqueue transfers


def roles_for(method: Method, direction: str, src: int, dst: int, me: int) -> PairRoles:
    peer = dst if me == src else src
    if direction == "push":
        return PairRoles(me, peer, (src,), (src,))
    if direction == "pull":
        return PairRoles(me, peer, (src,), (dst,))
    if direction == "bidir":
        return PairRoles(me, peer, (src, dst), (src, dst))
    raise ValueError(direction)


def _endpoints(bufs, style: str, me: int, peer: int) -> tuple[int, int]:
    """(src, dst) pointers of the transfer that `me` drives: push writes into the peer, pull reads it."""
    if style == "push":
        return bufs.src, bufs.peer_inbox_slot(peer, me)
    return bufs.peer_src[peer], bufs.inbox_slot(peer)


def measure_pair(ctx: Ctx, suite: str, method: Method, direction: str, src: int, dst: int,
                 sizes: list[int], row_direction: str | None = None) -> list[Row]:
    """Run one pair's size sweep. Both ranks of the pair call this; `src` returns the rows.

    `row_direction` relabels the rows (the latency suite reports one-way push/pull times as `oneway`).
    """
    w, gpu = ctx.world, ctx.gpu
    me = w.local_rank
    r = roles_for(method, direction, src, dst, me)
    bufs = ctx.buffers[method.buffers]
    style = method.style if direction == "bidir" else direction
    label = f"{suite}/{method.name}/{direction}"
    rows = []
    for nbytes in sizes:
        driving = me in r.drivers
        if driving:
            s_ptr, d_ptr = _endpoints(bufs, style, me, r.peer)
            make = lambda c: GraphBatch(gpu, method, s_ptr, d_ptr, nbytes, c)  # noqa: E731
            count = calibrate(gpu, make, ctx.opts.min_time_s, ctx.opts.max_count, ctx.opts.warmup)
        else:
            count = 0
        if direction == "bidir":
            count = max(count, w.exchange(count, r.peer))
        batch = make(count) if driving else None
        times_ms, mismatches = [], 0
        for s in range(ctx.opts.samples):
            my_seed = seed_for(w.rank, nbytes, s, label)
            if me in r.sources:
                gpu.fill(bufs.src, nbytes, my_seed)
            # This rank's inbox slot for the peer receives data when the peer's source flows here.
            receiving = r.peer in r.sources
            peer_world = ctx.world_rank(r.peer)
            if receiving:
                gpu.fill(bufs.inbox_slot(r.peer), nbytes, poison_seed(seed_for(peer_world, nbytes, s, label)))
            gpu.wait(what="fill/poison")
            w.pair_barrier(r.peer)
            if driving:
                sync = (lambda: w.pair_barrier(r.peer, tag=12)) if direction == "bidir" else None
                times_ms.append(time_batch(gpu, batch, sync))
            w.pair_barrier(r.peer)
            if receiving and ctx.opts.verify:
                mismatches += gpu.verify(bufs.inbox_slot(r.peer), nbytes,
                                         seed_for(peer_world, nbytes, s, label))
        theirs = w.exchange((times_ms, mismatches, batch.count if batch else 0), r.peer)
        if me != src:
            continue
        all_times = [times_ms, theirs[0]]
        total_bad = mismatches + theirs[1]
        n = batch.count if batch else theirs[2]
        note = "" if row_direction is None else f"{direction}: back-to-back transfers, time per transfer"
        serialized = direction == "bidir" and method.engine == "sm" and ctx.same_gpu(src, dst)
        if serialized:
            # Two processes' kernels on one GPU never run at once without MPS (time slices): each side's
            # events then time only its own batch, and the longer of the two would count both directions'
            # bytes in one direction's time (seen: 2,925 GB/s against 2,009 one way). Their sum is the time.
            per_us = [(a + b) * 1e3 / n for a, b in zip(*all_times)]
            moved = 2 * nbytes
            note = "same GPU: the two processes' kernels are time-sliced (no MPS), time = sum of both sides"
        elif direction == "bidir":
            per_us = [max(a, b) * 1e3 / n for a, b in zip(*all_times)]
            moved = 2 * nbytes
        else:
            per_us = [t * 1e3 / n for t in (times_ms or theirs[0])]
            moved = nbytes
        rows.append(make_row(ctx, suite, method.name, row_direction or direction, src, dst, nbytes, n, per_us,
                             moved, total_bad, ctx.opts.verify, note))
    return rows


def make_row(ctx: Ctx, suite: str, method: str, direction: str, src: int, dst: int, nbytes: int,
             iterations: int, per_us: list[float], moved: int | None, mismatches: int, checked: bool,
             note: str = "") -> Row:
    """Build a result row for a node-local (src, dst) pair; `moved` None means no bandwidth column."""
    sm = summarize(per_us, moved)
    verified = checked and mismatches == 0
    if checked and mismatches:
        note = (note + "; " if note else "") + f"{mismatches} mismatched words"
        ctx.unverified += 1
    elif not checked:
        note = (note + "; " if note else "") + "not verified (--no-verify)"
    return Row(
        run_id=ctx.run_id, host=ctx.world.host, suite=suite, method=method, direction=direction,
        src_rank=ctx.world_rank(src) if src >= 0 else -1, dst_rank=ctx.world_rank(dst) if dst >= 0 else -1,
        src_gpu=ctx.gpu_of[src] if src >= 0 else -1, dst_gpu=ctx.gpu_of[dst] if dst >= 0 else -1,
        same_gpu=(src >= 0 and dst >= 0 and ctx.same_gpu(src, dst)), bytes=nbytes, iterations=iterations,
        samples=len(per_us), time_us_median=sm.median_us, time_us_min=sm.min_us, time_us_max=sm.max_us,
        bw_gbps_median=sm.bw_median, bw_gbps_max=sm.bw_max, cv=sm.cv, verified=verified, note=note)
