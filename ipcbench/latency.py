"""The `latency` suite: how long a small message takes from one process's GPU to another's.

Three instruments, none with Python in the timed region:
- ce / sm_write / sm_read at 4 B .. 64 KiB: back-to-back transfers in a graph behind the gate; the time
  per transfer is the one-way time of a transfer that must complete before the next one starts.
- sm_pingpong: a kernel on each side stores a flag into the peer's memory and spins on its own
  (thousands of round trips in one launch, timed by the GPU's global timer); one way = round trip / 2.
  This is the true latency of a P2P store becoming visible to the peer.
- event_pingpong: rank A records an interprocess event, rank B waits on it with cudaStreamWaitEvent
  and records its own, A waits on that, N times; all enqueued before a gate opens, timed with CUDA
  events on A's stream; one way = round trip / 2. A separate pass puts a flag kernel before each
  record and checks it after each wait, which proves the wait really ordered the two streams.
"""

from __future__ import annotations

import numpy as np
import cupy
from cupy.cuda import runtime

from .measure import Ctx, MeasureError, make_row, measure_pair
from .methods import METHODS
from .share import EventIpc

LAT_SIZES = [4, 8, 16, 64, 256, 1024, 4096, 16384, 65536]
PP_OFF = 0xF000  # ping-pong flags in the ctrl block: flag written by rank p into rank r at r.ctrl+PP_OFF+4p
PP_OUT = 0xF800  # this rank's ping-pong result words (local)
EV_OFF = 0xFC00  # event ping-pong check word (written by the peer)
PP_TIMEOUT_NS = 5_000_000_000


def lat_sizes(sizes: list[int]) -> list[int]:
    """The small-message sizes: 4 B .. 64 KiB in x4 steps, plus 8 B (independent of --sizes)."""
    return list(LAT_SIZES)


def oneway_copy(ctx: Ctx, method_name: str, direction: str, src: int, dst: int, sizes: list[int]):
    return measure_pair(ctx, "latency", METHODS[method_name], direction, src, dst, lat_sizes(sizes),
                        row_direction="oneway")


def _read_words(ptr: int, n: int, stream) -> np.ndarray:
    out = np.zeros(n, dtype=np.uint64)
    runtime.memcpyAsync(out.ctypes.data, ptr, 8 * n, runtime.memcpyDeviceToHost, stream.ptr)
    stream.synchronize()
    return out


def sm_pingpong(ctx: Ctx, src: int, dst: int, sizes: list[int], iters: int | None = None):
    """Both ranks of the pair call this; src is the initiator and returns the row."""
    w, gpu = ctx.world, ctx.gpu
    me = w.local_rank
    peer = dst if me == src else src
    bufs = ctx.buffers["legacy"]
    mine = bufs.ctrl + PP_OFF + 4 * peer
    theirs = bufs.peer_ctrl[peer] + PP_OFF + 4 * me
    out = bufs.ctrl + PP_OUT
    same = ctx.same_gpu(src, dst)
    # Two processes on one GPU (without MPS) get the GPU in time slices, so two spinning kernels take
    # turns of milliseconds: a few round trips show that, thousands would only take long.
    iters = 20 if same else (iters or (2000 if ctx.opts.min_time_s < 0.005 else 10000))
    warm = 2 if same else 100
    fn = gpu.function("pingpong", "pingpong")
    bases = ctx.state.setdefault("pingpong_base", {})
    per_us, failures = [], []
    for _ in range(ctx.opts.samples):
        base = bases.get(peer, 0)
        w.pair_barrier(peer)
        with gpu.stream:
            fn((1,), (32,), (np.uint64(mine), np.uint64(theirs), np.uint32(base), np.int32(warm), np.int32(iters),
                             np.int32(1 if me == src else 0), np.uint64(PP_TIMEOUT_NS), np.uint64(out)))
        gpu.wait(what="the ping-pong kernel", timeout=30)
        bases[peer] = base + warm + iters
        elapsed_ns, status = _read_words(out, 2, gpu.stream)
        if status:
            failures.append(f"timed out at round trip {int(status)}")
        else:
            per_us.append(elapsed_ns / 1e3 / iters / 2)
    theirs_fail = w.exchange(failures, peer)
    if me != src:
        return []
    failures += theirs_fail
    if not per_us:
        raise MeasureError(f"ping-pong between node-local ranks {src} and {dst}: {'; '.join(failures)}")
    note = f"one way = round trip / 2; {iters} round trips per launch, flag stores + __threadfence_system"
    if same:
        note += ("; same GPU: the two processes' kernels are time-sliced (no MPS), so this is the "
                 "context-switch period, not a link latency")
    if failures:
        note += "; " + "; ".join(failures)
    return [make_row(ctx, "latency", "sm_pingpong", "oneway", src, dst, 4, iters, per_us, None,
                     len(failures), True, note)]


def _event_pair(ctx: Ctx, peer: int):
    """This rank's interprocess event for talking to `peer`, and the peer's, opened here (cached)."""
    cache = ctx.state.setdefault("event_pairs", {})
    if peer not in cache:
        ipc = ctx.state.get("event_ipc")
        if ipc is None:
            ipc = ctx.state["event_ipc"] = EventIpc(ctx.gpu, ctx.world.rank)
        ev = ipc.create()
        theirs = ctx.world.exchange(ipc.export(ev), peer)
        cache[peer] = (ev, ipc.open(theirs, peer))
    return cache[peer]


def event_pingpong(ctx: Ctx, src: int, dst: int, sizes: list[int], rounds: int = 100):
    """A records, B waits + records, A waits ... `rounds` times; timed on A (src). Both ranks call this."""
    w, gpu = ctx.world, ctx.gpu
    me = w.local_rank
    peer = dst if me == src else src
    initiator = me == src
    ev_mine, ev_peer = _event_pair(ctx, peer)
    bufs = ctx.buffers["legacy"]
    put, check = gpu.function("pingpong", "put"), gpu.function("pingpong", "check")
    s = gpu.stream
    counter = bufs.ctrl + PP_OUT + 64
    per_us = []
    bad = 0
    seq = ctx.state.setdefault("event_seq", {})
    for sample in range(ctx.opts.samples + 1):
        verify_pass = sample == ctx.opts.samples  # the last pass checks ordering with flag kernels
        runtime.memsetAsync(counter, 0, 8, s.ptr)
        gpu.wait(what="event ping-pong setup")
        w.pair_barrier(peer)
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        ticket = gpu.gate(s) if initiator else None
        if initiator:
            start.record(s)
        for _ in range(rounds):
            v = seq.get(peer, 0) + 1
            seq[peer] = v
            if initiator:
                if verify_pass:
                    with s:
                        put((1,), (32,), (np.uint64(bufs.peer_ctrl[peer] + EV_OFF), np.uint32(v)))
                runtime.eventRecord(ev_mine, s.ptr)
                w.send(v, peer, tag=21)
                w.recv(peer, tag=22)
                runtime.streamWaitEvent(s.ptr, ev_peer, 0)
                if verify_pass:
                    with s:
                        check((1,), (32,), (np.uint64(bufs.ctrl + EV_OFF), np.uint32(v), np.uint64(counter)))
            else:
                w.recv(peer, tag=21)
                runtime.streamWaitEvent(s.ptr, ev_peer, 0)
                if verify_pass:
                    with s:
                        check((1,), (32,), (np.uint64(bufs.ctrl + EV_OFF), np.uint32(v), np.uint64(counter)))
                        put((1,), (32,), (np.uint64(bufs.peer_ctrl[peer] + EV_OFF), np.uint32(v)))
                runtime.eventRecord(ev_mine, s.ptr)
                w.send(v, peer, tag=22)
        if initiator:
            stop.record(s)
            gpu.release(ticket)
        gpu.wait(what="the event ping-pong chain", timeout=30)
        if initiator and gpu.gate_timed_out(ticket):
            raise MeasureError("gate timed out while the event ping-pong chain was enqueued")
        if verify_pass:
            bad += int(_read_words(counter, 1, s)[0])
        elif initiator:
            per_us.append(cupy.cuda.get_elapsed_time(start, stop) * 1e3 / rounds / 2)
    bad += w.exchange(bad, peer)
    if not initiator:
        return []
    note = (f"one way = round trip / 2 over {rounds} cudaEventRecord -> cudaStreamWaitEvent round trips; "
            f"ordering checked with flag kernels in a separate pass")
    return [make_row(ctx, "latency", "event_pingpong", "oneway", src, dst, 0, rounds, per_us, None,
                     bad, True, note)]
