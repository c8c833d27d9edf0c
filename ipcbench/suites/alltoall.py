"""Suite `alltoall`: every rank of the node sends one buffer to every other rank at the same time, through the
ranks' IPC-shared memory by the copy engine and by one SM kernel per GPU, and through NCCL's all-to-all (the
baseline users would pick): what MoE dispatch and combine, and any all-to-all of a multi-process job, get.

Schedules (docs/suites.md, "alltoall", has the measurements that chose them):
- ce_alltoall: cudaMemcpyAsync in N-1 shifted steps on one stream: in step k rank i copies to rank (i+k) mod N,
  so that every step is a permutation and each GPU receives from one GPU at a time; a device-side barrier
  between the node's GPUs after every step (kernels/alltoall.cu a2a_barrier) keeps the steps together. Copies
  to every peer at once (a stream per peer) or in the same order on every GPU collide at their destinations:
  57-76% of the link on four H200s, where one pair's copy reaches 394.
- sm_alltoall: one kernel per GPU whose blocks store into every peer at once (kernels/alltoall.cu a2a_write), as
  MoE dispatch kernels do.
- nccl_alltoall: one NCCL group of ncclSend/ncclRecv to every peer on a communicator of the node's ranks
  (ipc/nccl.NcclNode), what nccl-tests' alltoall_perf runs.

Timing: the gate holds every rank's batch until every rank has enqueued it; a sample's time is ONE window per GPU,
from the earliest start to the latest end of every flow sourced on that GPU, on the GPU's own clock (%globaltimer
stamps, shared by the processes of a GPU). Each flow's row is its bytes over its GPU's window: the flows of one
GPU share it, and a GPU's aggregate is the sum of its flows (never above its NVLink aggregate: record/validate.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from ipcbench.catalogue.planned import RowShape
from ipcbench.core.methods import StreamBatch, per_segment
from ipcbench.core.pair import sample_seconds
from ipcbench.core.rows import make_row
from ipcbench.core.sampler import calibrate, take_samples
from ipcbench.core.stats import poison_seed, seed_for
from ipcbench.errors import MeasureError
from ipcbench.suites.registry import Step, SuiteSpec

ALLTOALL_MIN_BYTES = 4 << 20  # the all-to-all's sizes: the run's from here up (its largest where none is)
# The ctrl block's words of the copy engine's step barrier (ipc/buffers.BufferSet.ctrl; latency and pipeline use
# 0xF000 up and 32 KiB..48 KiB): flags written by every peer at A2A_FLAGS + 4 * its node-local rank, this rank's
# count and the barrier's timeout status.
A2A_FLAGS = 0x1000
A2A_SEQ = 0x1400
A2A_STATUS = 0x1404

WINDOW = ("time = one window on the GPU clock covering every flow sourced on the GPU, so flows from one GPU "
          "share it")


class AllToAll:
    """One all-to-all of this rank (a send to every peer), enqueued as core/methods.StreamBatch enqueues a transfer:
    what every schedule has."""

    engine = ""  # what moves its bytes (core/methods.ENGINES)
    two_sided = False  # every send meets a receive the peer enqueues (NCCL): no un-gated warm-up, no spinning wait
    stream_ops = 1  # stream operations one all-to-all puts behind a gate (StreamBatch's `nodes`)
    note = ""  # how it ran, for its rows

    def __init__(self, ctx, bufs):
        """This rank's all-to-all over the node's shared buffers `bufs` (ipc/buffers.BufferSet)."""

    def enqueue(self, gpu, stream, src: int, dst, nbytes: int, count: int = 1) -> None:
        raise NotImplementedError

    def warm(self, gpu, stream, src: int, dst, nbytes: int) -> dict:
        """A batch's first, un-gated all-to-all ({}: nothing learnt)."""
        self.enqueue(gpu, stream, src, dst, nbytes, 1)
        return {}

    def failed(self, gpu) -> str | None:
        """Why the batch just waited for is no all-to-all, or None."""
        return None


class CeShifted(AllToAll):
    """One all-to-all by the copy engine: N-1 shifted steps (step k: this rank -> rank me+k mod N), a barrier
    between the node's GPUs after each (a2a_barrier), all on the batch's one stream. The transfer interface of
    core/methods.StreamBatch: `stream_ops` (its `nodes`), `enqueue`, `warm`."""

    engine, two_sided = "ce", False

    def __init__(self, ctx, bufs):
        gpu, me, n = ctx.gpu, ctx.world.local_rank, ctx.world.local_size
        self.order = [(me + k) % n for k in range(1, n)]
        self.dst = {p: bufs.peer_inbox_slot(p, me) for p in self.order}
        self.stream_ops = 2 * len(self.order)
        self.status = bufs.ctrl + A2A_STATUS
        self._barrier = (gpu.table([bufs.peer_ctrl[p] + A2A_FLAGS + 4 * me for p in self.order]), len(self.order),
                         bufs.ctrl + A2A_FLAGS, n, me, bufs.ctrl + A2A_SEQ, self.status)
        self._launch: dict[int, Callable[[], None]] = {}
        self.note = (f"all-to-all by the copy engine: {len(self.order)} shifted steps (step k: rank i -> rank i+k mod "
                     f"{n}, each GPU receiving from one GPU at a time), a device barrier between the GPUs after each")

    def barrier(self, gpu, stream):
        launch = self._launch.get(stream.ptr)
        if launch is None:
            launch = self._launch[stream.ptr] = gpu.a2a_barrier(*self._barrier, stream=stream)
        return launch

    def enqueue(self, gpu, stream, src: int, dst, nbytes: int, count: int = 1) -> None:
        barrier = self.barrier(gpu, stream)
        for _ in range(count):
            for p in self.order:
                gpu.copy_async(self.dst[p], src, nbytes, stream)
                barrier()

    def failed(self, gpu) -> str | None:
        """A barrier that gave up."""
        if gpu.read_word(self.status):
            return "a device barrier between the all-to-all's steps timed out (a GPU of the node stopped?)"
        return None


class SmAllAtOnce(AllToAll):
    """One all-to-all by one SM kernel per GPU that stores into every peer at once (a2a_write); from
    gpu.loop_in_kernel_bytes a batch's passes loop inside one launch, as core/methods.SmEngine's copies do."""

    engine, two_sided = "sm", False

    def __init__(self, ctx, bufs):
        gpu, me, n = ctx.gpu, ctx.world.local_rank, ctx.world.local_size
        peers = [(me + k) % n for k in range(1, n)]
        self.npeers, self.stream_ops = len(peers), 1
        self.table = gpu.table([bufs.peer_inbox_slot(p, me) for p in peers])
        c = gpu.copy_shape
        self.note = (f"all-to-all by one SM kernel per GPU storing into all {len(peers)} peers at once, its blocks "
                     f"dealt among them (--sm-copy {c} over the whole grid)")

    def enqueue(self, gpu, stream, src: int, dst, nbytes: int, count: int = 1) -> None:
        if nbytes >= gpu.loop_in_kernel_bytes:
            gpu.a2a_writer(src, self.table, self.npeers, nbytes, count, stream)()
            return
        launch = gpu.a2a_writer(src, self.table, self.npeers, nbytes, 1, stream)
        for _ in range(count):
            launch()


class NcclAllToAll(AllToAll):
    """NCCL's all-to-all on the node's communicator (ipc/nccl.NcclNode: made on first use, collective)."""

    engine, two_sided = "nccl", True

    def __init__(self, ctx, bufs):
        from ipcbench.ipc.nccl import node_for

        self.comm = node_for(ctx)  # the communicator of every rank of the node
        self.stream_ops = self.comm.nodes
        self.note = self.comm.describe()

    def enqueue(self, gpu, stream, src: int, dst, nbytes: int, count: int = 1) -> None:
        self.comm.enqueue(gpu, stream, src, dst, nbytes, count)

    def warm(self, gpu, stream, src: int, dst, nbytes: int) -> dict:
        return {}  # a send must meet its receive: the node connected when its communicator was made


SCHEDULES: dict[str, type[AllToAll]] = {"ce_alltoall": CeShifted, "sm_alltoall": SmAllAtOnce,
                                        "nccl_alltoall": NcclAllToAll}
NEEDS = {"ce_alltoall": ("legacy",), "sm_alltoall": ("legacy",), "nccl_alltoall": ("legacy", "nccl_node")}


def _time_flows(ctx, batch, transfer) -> list[tuple[int, int]]:
    """Every rank's batch behind its gate, released together once every rank has enqueued; [(start_ns, end_ns)] of
    each gated segment on this GPU's clock."""
    gpu, w = ctx.gpu, ctx.world
    marks = []
    for reps in batch.segments():
        ticket = gpu.gate(batch.stream)
        gpu.stamp(0, batch.stream)
        batch.enqueue(reps)
        gpu.stamp(1, batch.stream)
        w.node_barrier("the all-to-all start")
        gpu.release(ticket)
        gpu.wait(batch.stream, what="an all-to-all batch", spin=not transfer.two_sided)
        if gpu.gate_timed_out(ticket):
            raise MeasureError("the gate kernel timed out before the all-to-all batch was enqueued")
        why = transfer.failed(gpu)
        if why:
            raise MeasureError(why)
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


def measure_alltoall(ctx, name: str, sizes: list[int]) -> list:
    """Collective over the node: every rank of the node calls this, in the same order. Returns the rows of the
    flows this rank sources (one per peer and size)."""
    bufs = ctx.buffers["legacy"]
    transfer = SCHEDULES[name](ctx, bufs)
    rows = []
    for nbytes in sizes:
        rows += _measure_size(ctx, name, transfer, bufs, nbytes)
    return rows


def _measure_size(ctx, name: str, transfer, bufs, nbytes: int) -> list:
    """One size of the all-to-all `name` (its `transfer`, on the legacy buffers): calibrated, sampled and verified
    on every rank of the node at once; this rank's flows as rows."""
    w, gpu = ctx.world, ctx.gpu
    me = w.local_rank
    peers = [p for p in range(w.local_size) if p != me]
    label = f"alltoall/{name}"
    built: dict[int, StreamBatch] = {}

    def batch(count: int) -> StreamBatch:
        if count not in built:
            built.clear()
            built[count] = StreamBatch(gpu, transfer, bufs.src, None, nbytes, count, gpu.stream,
                                       nodes=transfer.stream_ops, warm=not transfer.two_sided)
        return built[count]

    def windows(count: int) -> tuple[dict[int, float], int]:
        b = batch(count)
        everyone = w.node_allgather(_time_flows(ctx, b, transfer), "the all-to-all windows")
        return gpu_windows_ms(everyone, ctx.gpu_of), b.count

    def timed(count: int) -> tuple[float, int]:
        wins, done = windows(count)
        return max(wins.values()), done

    rule = replace(ctx.rule, max_count=min(ctx.rule.max_count, per_segment(transfer.stream_ops)),
                   min_time_s=sample_seconds(ctx.rule, nbytes, transfer.engine, transfer.two_sided,
                                             gpu.loop_in_kernel_bytes))
    w.node_barrier("the all-to-all calibration")
    count, _ = calibrate(rule, timed)
    count = batch(max(w.node_allgather(count, "the all-to-all count"))).count
    enough = min(w.node_allgather(ctx.enough_noise(transfer.engine, "window", nbytes, me, peers[0]),
                                  "the all-to-all stopping rule"))
    mine_ms: list[float] = []
    bad_from: dict[int, int] = {}

    def sample(s: int) -> tuple[float, int, int]:
        gpu.fill(bufs.src, nbytes, seed_for(w.rank, nbytes, s, label))
        for p in peers:
            gpu.fill(bufs.inbox_slot(p), nbytes, poison_seed(seed_for(ctx.world_rank(p), nbytes, s, label)))
        gpu.wait(what="fill/poison")
        w.node_barrier("the all-to-all sample start")
        wins, _ = windows(count)
        mine_ms.append(wins[ctx.gpu_of[me]])
        checks = 0
        if ctx.verify:
            for p in peers:
                bad_from[p] = bad_from.get(p, 0) + gpu.verify(
                    bufs.inbox_slot(p), nbytes, seed_for(ctx.world_rank(p), nbytes, s, label))
            checks = 1
        return max(wins.values()) * 1e3 / count, checks, 0

    got = take_samples(rule, count, sample, enough)
    everyone_bad = w.node_allgather(bad_from, "all-to-all verification results")
    per_us = [ms * 1e3 / count for ms in mine_ms]
    return [make_row(ctx, suite="alltoall", method=name, direction="push", src=me, dst=p, nbytes=nbytes,
                     per_us=per_us, iterations=count, moved=nbytes, checks=got.checks,
                     mismatches=everyone_bad[p].get(me, 0), note=f"{transfer.note}; {WINDOW}") for p in peers]


def steps(n: int, sizes: list[int]) -> list[Step]:
    """One step of every rank at once per schedule; none with two ranks (their all-to-all is the bidirectional
    pair, measured by every pair suite)."""
    if n < 3:
        return []
    big = [s for s in sizes if s >= ALLTOALL_MIN_BYTES] or sizes[-1:]

    def runner(name):
        return lambda ctx, sizes: measure_alltoall(ctx, name, sizes)

    return [Step("alltoall", f"{SCHEDULES[name].engine} all-to-all", [], big, runner(name), all_ranks=True,
                 needs=NEEDS[name], cost=float(n), engine=SCHEDULES[name].engine, writes=(RowShape(name, "push"),))
            for name in SCHEDULES]


SUITE = SuiteSpec("alltoall", "every rank sends to every other at once: the copy engine in shifted steps, one SM "
                  "kernel per GPU writing every peer, and NCCL's all-to-all beside them", steps)
