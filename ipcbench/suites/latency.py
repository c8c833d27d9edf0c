"""The `latency` suite: how long a small message takes from one process's GPU to another's.

Three instruments, none with Python in the timed region:
- ce / sm_write / sm_read at 4 B .. 64 KiB: back-to-back transfers in a graph behind the gate; the time
  per transfer is the one-way time of a transfer that must complete before the next one starts.
- sm_pingpong: a kernel on each side stores a flag into the peer's memory and spins on its own
  (thousands of round trips in one launch, timed by the GPU's global timer); one way = round trip / 2,
  i.e. half a store-and-poll round trip on hot flags. nvbandwidth's latency_sm (0.83 µs on an H200 pair)
  is a load round trip (a pointer chase): a different quantity.
- event_pingpong: rank A records an interprocess event, rank B waits on it with cudaStreamWaitEvent
  and records its own, A waits on that, N times; all enqueued before a gate opens, timed with CUDA
  events on A's stream; one way = round trip / 2. A separate pass puts a flag kernel before each
  record and checks it after each wait, which proves the wait really ordered the two streams.
"""

from __future__ import annotations

import numpy as np

from ipcbench.catalogue.planned import RowShape
from ipcbench.core.methods import METHODS
from ipcbench.core.pair import measure_pair
from ipcbench.core.rows import join_note, make_row
from ipcbench.core.sampler import take_samples
from ipcbench.core.world import ordered_pairs, unordered_pairs
from ipcbench.errors import MeasureError
from ipcbench.suites.registry import Step, SuiteSpec
from ipcbench.suites.staged import sweep_staged
from ipcbench.suites.transfer import round_runner

# CUDA and MPI are imported in the functions that measure: plans and the report import this (suites/registry.py).

# The small-message sizes: 4 B .. 64 KiB in x4 steps, plus 8 B. Independent of --sizes: latency is a
# property of small messages, and the staged paths' numbers at these sizes are the baseline to beat.
LAT_SIZES = [4, 8, 16, 64, 256, 1024, 4096, 16384, 65536]
# --quick (a fleet check): the smallest (the report's latency), one page (the bandwidth sweep's first size)
# and the largest.
QUICK_LAT_SIZES = [4, 4096, 65536]
PP_OFF = 0xF000  # ping-pong flags in the ctrl block: flag written by rank p into rank r at r.ctrl+PP_OFF+4p
PP_OUT = 0xF800  # this rank's ping-pong result words (local)
EV_OFF = 0xFC00  # event ping-pong check word (written by the peer)
PP_TIMEOUT_NS = 5_000_000_000
ONEWAY_NOTE = "back-to-back transfers, time per transfer"
TIME_SLICED_NOTE = ("same GPU: the two processes' kernels are time-sliced (no MPS), so this is the "
                    "context-switch period, not a link latency")
MPS_NOTE = "same GPU under MPS: the two processes' kernels run concurrently"


def _read_words(ptr: int, n: int, stream):
    from cupy.cuda import runtime

    out = np.zeros(n, dtype=np.uint64)
    runtime.memcpyAsync(out.ctypes.data, ptr, 8 * n, runtime.memcpyDeviceToHost, stream.ptr)
    stream.synchronize()
    return out


def _same_gpu_note(ctx, src, dst) -> str:
    if not ctx.same_gpu(src, dst):
        return ""
    return TIME_SLICED_NOTE if ctx.time_sliced(src, dst) else MPS_NOTE


def sm_pingpong(ctx, src: int, dst: int, sizes: list[int], iters: int | None = None):
    """Both ranks of the pair call this; src is the initiator and returns the row."""
    w, gpu = ctx.world, ctx.gpu
    me = w.local_rank
    peer = dst if me == src else src
    bufs = ctx.buffers["legacy"]
    mine = bufs.ctrl + PP_OFF + 4 * peer
    theirs = bufs.peer_ctrl[peer] + PP_OFF + 4 * me
    out = bufs.ctrl + PP_OUT
    slow = ctx.time_sliced(src, dst)
    # Two processes on one GPU (without MPS) get the GPU in time slices, so two spinning kernels take
    # turns of milliseconds: a few round trips show that, thousands would only take long.
    iters = 20 if slow else (iters or (2000 if ctx.rule.min_time_s < 0.005 else 10000))
    warm = 2 if slow else 100
    fn = gpu.function("pingpong", "pingpong")
    bases = ctx.state.setdefault("pingpong_base", {})

    def sample(_s: int):
        base = bases.get(peer, 0)
        w.pair_barrier(peer)
        with gpu.stream:
            fn((1,), (32,), (np.uint64(mine), np.uint64(theirs), np.uint32(base), np.int32(warm), np.int32(iters),
                             np.int32(1 if me == src else 0), np.uint64(PP_TIMEOUT_NS), np.uint64(out)))
        gpu.wait(what="the ping-pong kernel", timeout=30)
        bases[peer] = base + warm + iters
        elapsed_ns, status = (int(x) for x in _read_words(out, 2, gpu.stream))
        result = (elapsed_ns / 1e3 / iters / 2, status)
        other = w.exchange(result, peer)
        stuck = [(r, st) for r, st in ((me, status), (peer, other[1])) if st]
        if stuck:
            raise MeasureError(f"ping-pong between node-local ranks {src} and {dst}: rank "
                               f"{ctx.world_rank(stuck[0][0])} timed out at round trip {stuck[0][1]}")
        return (result if me == src else other)[0], 1, 0  # every round trip saw the expected flag

    got = take_samples(ctx.rule, iters, sample)
    if me != src:
        return []
    note = join_note(f"one way = round trip / 2 (half a store-and-poll round trip on hot flags; not a load "
                     f"latency); {iters} round trips per launch, flag stores + __threadfence_system",
                     _same_gpu_note(ctx, src, dst))
    return [make_row(ctx, suite="latency", method="sm_pingpong", direction="oneway", src=src, dst=dst, nbytes=4,
                     per_us=got.per_transfer_us, iterations=iters, moved=None, checks=got.checks, mismatches=0,
                     note=note, kind="latency")]


def _event_pair(ctx, peer: int):
    """This rank's interprocess event for talking to `peer`, and the peer's, opened here (cached; destroyed
    at the end of the run: ctx.add_cleanup)."""
    from ipcbench.ipc.events import EventIpc

    cache = ctx.state.setdefault("event_pairs", {})
    if peer not in cache:
        ipc = ctx.state.get("event_ipc")
        if ipc is None:
            ipc = ctx.state["event_ipc"] = EventIpc(ctx.gpu, ctx.world.rank)
            ctx.add_cleanup(ipc.close)
        ev = ipc.create()
        theirs = ctx.world.exchange(ipc.export(ev), peer)
        cache[peer] = (ev, ipc.open(theirs, peer))
    return cache[peer]


def _event_chain(ctx, src, dst, rounds: int, check: bool):
    """One chain of `rounds` record -> wait round trips, enqueued behind a gate on the initiator (src).
    Returns (one-way µs on src or None, mismatches counted by the flag check or 0)."""
    from cupy.cuda import runtime

    w, gpu = ctx.world, ctx.gpu
    me = w.local_rank
    peer = dst if me == src else src
    initiator = me == src
    ev_mine, ev_peer = _event_pair(ctx, peer)
    bufs = ctx.buffers["legacy"]
    put, chk = gpu.function("pingpong", "put"), gpu.function("pingpong", "check")
    s = gpu.stream
    counter = bufs.ctrl + PP_OUT + 64
    seq = ctx.state.setdefault("event_seq", {})
    runtime.memsetAsync(counter, 0, 8, s.ptr)
    gpu.wait(what="event ping-pong setup")
    w.pair_barrier(peer)
    start, stop = gpu.event(), gpu.event()
    ticket = gpu.gate(s) if initiator else None
    if initiator:
        start.record(s)

    def flag(kernel, addr, v, *extra):
        with s:
            kernel((1,), (32,), (np.uint64(addr), np.uint32(v), *extra))

    for _ in range(rounds):
        v = seq.get(peer, 0) + 1
        seq[peer] = v
        if initiator:
            if check:
                flag(put, bufs.peer_ctrl[peer] + EV_OFF, v)
            runtime.eventRecord(ev_mine, s.ptr)
            w.send(v, peer, tag=21)
            w.recv(peer, tag=22)
            runtime.streamWaitEvent(s.ptr, ev_peer, 0)
            if check:
                flag(chk, bufs.ctrl + EV_OFF, v, np.uint64(counter))
        else:
            w.recv(peer, tag=21)
            runtime.streamWaitEvent(s.ptr, ev_peer, 0)
            if check:
                flag(chk, bufs.ctrl + EV_OFF, v, np.uint64(counter))
                flag(put, bufs.peer_ctrl[peer] + EV_OFF, v)
            runtime.eventRecord(ev_mine, s.ptr)
            w.send(v, peer, tag=22)
    if initiator:
        stop.record(s)
        gpu.release(ticket)
    # Sleep from the first miss while the chain runs (as a timed batch's wait does: core/timing.py): polling it
    # in a tight loop, a rank bound to one core read the one-way time 2.3 or 4.6 us slower in 13-17 of 36 runs on
    # two H200s (6.15 us otherwise; 3 of 36 with the sleeping poll of 4465724)
    gpu.wait(what="the event ping-pong chain", timeout=30, spin=False)
    if initiator and gpu.gate_timed_out(ticket):
        raise MeasureError("gate timed out while the event ping-pong chain was enqueued")
    bad = int(_read_words(counter, 1, s)[0]) if check else 0
    us = gpu.elapsed_ms(start, stop) * 1e3 / rounds / 2 if initiator else None
    return us, bad


def event_pingpong(ctx, src: int, dst: int, sizes: list[int], rounds: int = 100):
    """A records, B waits + records, A waits ... `rounds` times; timed on A (src). Both ranks call this.
    The timed chains carry no check kernels; one extra chain with flag kernels proves the waits ordered."""
    w = ctx.world
    peer = dst if w.local_rank == src else src

    def sample(_s: int):
        us, _ = _event_chain(ctx, src, dst, rounds, check=False)
        theirs = w.exchange(us, peer)  # the initiator's time, so that both ranks stop alike
        return (us if us is not None else theirs), 0, 0

    got = take_samples(ctx.rule, rounds, sample)
    _, bad = _event_chain(ctx, src, dst, rounds, check=True)
    bad += w.exchange(bad, peer)
    if w.local_rank != src:
        return []
    note = join_note(f"one way = round trip / 2 over {rounds} cudaEventRecord -> cudaStreamWaitEvent round "
                     f"trips; ordering checked with flag kernels in one separate chain", _same_gpu_note(ctx, src, dst))
    return [make_row(ctx, suite="latency", method="event_pingpong", direction="oneway", src=src, dst=dst, nbytes=0,
                     per_us=got.per_transfer_us, iterations=rounds, moved=None, checks=1, mismatches=bad, note=note,
                     kind="latency", required=1)]


def steps(n: int, sizes: list[int]) -> list[Step]:
    def oneway(method, direction):
        labels = dict(row_direction="oneway", kind="latency", note=f"{direction}: {ONEWAY_NOTE}")

        def run(ctx, src, dst, sizes):
            return measure_pair(ctx, "latency", METHODS[method], direction, src, dst, sizes, **labels)

        return Step("latency", f"{method} one-way", ordered_pairs(n), LAT_SIZES, run, needs=("legacy",),
                    rounds_ok=True, quick_sizes=QUICK_LAT_SIZES, engine=METHODS[method].engine,
                    run_round=round_runner("latency", method, direction, **labels),
                    writes=(RowShape(method, "oneway"),))

    def staged(method):
        def run(ctx, src, dst, sizes):
            return sweep_staged(ctx, method, src, dst, sizes, suite="latency", direction="oneway",
                                kind="latency", note="push: time per message")

        return Step("latency", f"{method} one-way", ordered_pairs(n), LAT_SIZES, run, cost=1.5,
                    quick_sizes=QUICK_LAT_SIZES, writes=(RowShape(method, "oneway"),))

    def pingpong(fn, label, row: RowShape):
        return Step("latency", label, unordered_pairs(n), [4], lambda ctx, s, d, sz: fn(ctx, s, d, sz),
                    needs=("legacy",), cost=3.0, writes=(row,))

    return [oneway("ce", "push"), oneway("sm_write", "push"), oneway("sm_read", "pull"),
            staged("shm_staged"), staged("mpi_staged"),
            pingpong(sm_pingpong, "sm pingpong", RowShape("sm_pingpong", "oneway")),
            pingpong(event_pingpong, "event pingpong", RowShape("event_pingpong", "oneway", bytes=0))]



SUITE = SuiteSpec("latency", "small messages (4 B - 64 KiB) one way by ce/sm and the host paths, a device-side "
                  "P2P flag ping-pong, and interprocess-event ping-pong", steps)
