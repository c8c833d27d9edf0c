"""Transfer methods: what moves the bytes, and which buffers it moves them between.

A method = an engine (copy engine or SM kernel) + the buffer kind it runs on (legacy IPC, pool, VMM...) +
the directions it supports. An engine knows how to enqueue one transfer of n bytes from a source
pointer to a destination pointer on a stream; `StreamBatch` enqueues a batch of `count` transfers on the
stream one call at a time, as an application does, behind the gate (core/timing.py), so the number is the
one an application enqueuing the same transfer gets and no Python runs in the timed region.

Why not CUDA graphs: a captured copy is not the copy an application enqueues. On one H100, a same-GPU
cudaMemcpyAsync of exactly 512 MiB, 1 GiB or 2 GiB captured into a graph ran at 1,218 GB/s against 1,498-1,515
enqueued on a stream (508, 516, 768 and 1,020 MiB were not affected), and graph replay read 2-4% faster than
stream enqueue from 64 to 128 MiB and twice as fast for 4 KiB copies (tests/bench_copy_paths.py;
docs/measurement.md). Graphs remain for NCCL's calls (ipc/nccl.py), captured only where both ranks agreed
beforehand.

Directions (from the point of view of the ordered pair src -> dst):
  push  the source rank drives: its local buffer -> the peer's memory (a P2P write)
  pull  the destination rank drives: the peer's memory -> its local buffer (a P2P read)
  bidir both ranks drive at once, each in the method's one-way style
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, fields
from typing import Callable

from ipcbench.catalogue.methods import METHOD_FACTS, MethodFacts
from ipcbench.core import bulk

# Stream operations (copies, kernel launches, graph nodes) queued behind one gate: the most transfers of one
# sample (a sample is one gated segment: core/pair.py caps calibration at `per_segment`). Far more than this
# (5,120 small peer copies, seen on an H200 pair) fills the channel's push buffer: the host blocks inside the
# call while the gate holds the stream, and the gate times out.
MAX_QUEUED = 512


def plan_segments(count: int, nodes_per_transfer: int = 1, budget: int = MAX_QUEUED) -> tuple[int, int]:
    """(k, segments): k transfers (at most `budget` stream operations, at least one transfer) per gated
    segment, `segments` times, so that k * segments >= count. The one batching rule of every gated
    measurement (StreamBatch and GraphBatch here, the shm pipeline in suites/staged_shm.py)."""
    if count < 1 or nodes_per_transfer < 1:
        raise ValueError("count and nodes_per_transfer must be >= 1")
    k = min(count, max(1, budget // nodes_per_transfer))
    return k, -(-count // k)


def per_segment(nodes_per_transfer: int = 1, budget: int = MAX_QUEUED) -> int:
    """The most transfers one gated segment holds: a sample's cap (core/pair.py)."""
    return plan_segments(budget, nodes_per_transfer, budget)[0]


class Engine:
    """What moves a transfer's bytes: `enqueue` puts `count` transfers on a stream. The defaults are those of a
    one-sided engine on the work stream with nothing to describe or learn; an engine overrides what it has."""

    name = ""
    gpu_needs: tuple[str, ...] = ()  # GPU features its steps need (Step.needs: ipc/sharers.GPU_FEATURES)
    two_sided = False  # both ranks drive matched operations (PairEngine)

    def enqueue(self, gpu, stream, src: int, dst: int, nbytes: int, count: int = 1) -> None:
        raise NotImplementedError

    def describe(self, gpu) -> str:
        """What the engine ran with, for the row's note ("": nothing to choose)."""
        return ""

    def stream(self, gpu):
        """Where its batches run: None, the work stream (StreamBatch)."""
        return None

    def warm(self, gpu, stream, src: int, dst: int, nbytes: int) -> dict:
        """A batch's first, un-gated transfer, and what it learnt for the row ({}: nothing)."""
        self.enqueue(gpu, stream, src, dst, nbytes, 1)
        return {}

    def bind(self, ctx, me: int, peer: int):
        raise TypeError(f"the {self.name} engine is one-sided: a Method binds only a two-sided engine to a pair")


class CopyEngine(Engine):
    """cudaMemcpyAsync: the GPU's DMA copy engines, the path NCCL/cudaMemcpyPeer take for large copies."""

    name = "ce"

    def enqueue(self, gpu, stream, src: int, dst: int, nbytes: int, count: int = 1) -> None:
        copy = gpu.copy_async
        for _ in range(count):
            copy(dst, src, nbytes, stream)


class SmEngine(Engine):
    """An SM copy kernel (kernels/copy.cu) doing 16-byte loads and stores straight to/from peer memory.

    Copies of at least gpu.loop_in_kernel_bytes (4 x L2) do `count` passes in one launch; smaller ones
    launch once per pass, so that no pass can be served from the caches filled by the previous one.
    """

    name = "sm"

    def describe(self, gpu) -> str:
        c = gpu.copy_shape
        return (f"SM copy kernel, up to {c.blocks_per_sm} blocks of {c.threads} threads on each of {gpu.sm_count} "
                f"SMs, {c.unroll} 16-byte loads in flight per thread (--sm-copy {c})")

    def enqueue(self, gpu, stream, src: int, dst: int, nbytes: int, count: int = 1) -> None:
        if nbytes >= gpu.loop_in_kernel_bytes:
            gpu.launch_copy(src, dst, nbytes, count, stream)
        else:
            launch = gpu.copier(src, dst, nbytes, 1, stream)
            for _ in range(count):
                launch()


class BulkEngine(Engine):
    """Hopper's bulk asynchronous copies (kernels/bulk.cu, core/bulk.py): an SM kernel whose CTAs move the
    bytes through shared memory with cp.async.bulk (the TMA unit) instead of 16-byte loads and stores.
    Launched like SmEngine (passes in one launch from gpu.loop_in_kernel_bytes); needs compute capability
    >= 9.0, so its steps need the GPU feature "bulk_copy" (in Step.needs: ipc/sharers.GPU_FEATURES)."""

    name = "sm_bulk"
    gpu_needs = ("bulk_copy",)

    def describe(self, gpu) -> str:
        return bulk.describe(gpu.bulk_shape, gpu.sm_count, gpu.bulk_placement())

    def stream(self, gpu):
        """Where its batches run: a green context's stream for --sm-bulk ...@N (Gpu.bulk_stream)."""
        return gpu.bulk_stream()

    def warm(self, gpu, stream, src: int, dst: int, nbytes: int) -> dict:
        """The first, un-gated transfer of a batch, which also records the SMs its CTAs ran on."""
        return {"sms_used": gpu.bulk_sms_seen(src, dst, nbytes, stream)}

    def enqueue(self, gpu, stream, src: int, dst: int, nbytes: int, count: int = 1) -> None:
        if nbytes >= gpu.loop_in_kernel_bytes:
            gpu.launch_bulk_copy(src, dst, nbytes, count, stream)
        else:
            launch = gpu.bulk_copier(src, dst, nbytes, 1, stream)
            for _ in range(count):
                launch()


# The two-sided engines' pair transfers, by engine name: `make(ctx, me, peer)` -> the transfer bound to the pair.
# Registered by the module that makes them (ipc/nccl.py registers "nccl" when imported, which the nccl suite does
# before any of its steps runs), so core names no ipc module, not even as a string (tests/test_layering.py).
PAIR_TRANSFERS: dict[str, Callable] = {}


def register_pair_transfer(engine: str, make: Callable) -> None:
    """Make `make(ctx, me, peer)` the way the two-sided engine `engine` binds a transfer to a pair."""
    PAIR_TRANSFERS[engine] = make


class PairEngine(Engine):
    """An engine whose transfers are two-sided (NCCL: a send on one rank meets its receive on the other), so
    both ranks drive and each enqueues through a transfer bound to the pair (Method.bind), which the module that
    makes it registered (register_pair_transfer): core imports no ipc module (ipc/nccl.py imports core)."""

    two_sided = True

    def __init__(self, name: str):
        self.name = name

    def bind(self, ctx, me: int, peer: int):
        """Collective over the pair: both ranks of the pair call this, in the same order (the pair's first call
        makes its communicator: ipc/nccl.pair_for)."""
        make = PAIR_TRANSFERS.get(self.name)
        if make is None:
            raise RuntimeError(f"no pair transfer is registered for the {self.name} engine: the module that makes it "
                               "registers it when imported (core/methods.register_pair_transfer)")
        return make(ctx, me, peer)

    def enqueue(self, gpu, stream, src: int, dst: int, nbytes: int, count: int = 1) -> None:
        raise TypeError(f"a {self.name} transfer needs its pair: enqueue through Method.bind(ctx, me, peer)")


ENGINES: dict[str, Engine] = {"ce": CopyEngine(), "sm": SmEngine(), "sm_bulk": BulkEngine(),
                              "nccl": PairEngine("nccl")}
# Engines that are kernels on the SMs: from gpu.loop_in_kernel_bytes one launch per sample (core/pair.py's
# longer samples), and two processes' kernels on one GPU are time-sliced without MPS.
KERNEL_ENGINES = ("sm", "sm_bulk")


def on_sms(engine: str, same_gpu: bool) -> bool:
    """Whether the engine's transfers run on the SMs, so that two processes' transfers on one GPU are
    time-sliced without MPS: the kernels, and the copy engine's calls between two buffers of one GPU, which
    the driver runs as kernels (seen on an H100: a same-GPU cudaMemcpyAsync, stream-enqueued or captured,
    waited until a kernel holding every SM ended, while a host-to-device copy did not; docs/measurement.md)."""
    return engine in KERNEL_ENGINES or (engine == "ce" and same_gpu)


@dataclass(frozen=True)
class Method(MethodFacts):
    """A method's facts (catalogue/methods.py: engine, style, buffers, directions) with what it does."""

    @property
    def gpu_needs(self) -> tuple[str, ...]:
        """GPU features its engine needs (run/walk.py skips the step, with the reason, where one is missing)."""
        return ENGINES[self.engine].gpu_needs

    @property
    def two_sided(self) -> bool:
        """Both ranks drive matched operations (NCCL: a send on one, its receive on the other): core/pair.py
        gives each rank its half and agrees every count between them."""
        return ENGINES[self.engine].two_sided

    nodes = 1  # stream operations one transfer puts behind a gate (plan_segments)

    def stream_is_work(self, gpu) -> bool:
        """Whether its batches run on the work stream (so a sample may spread over the contexts' lanes instead:
        core/lanes.py), not on a stream of the engine's own: a bulk copy whose --sm-bulk asks for N SMs (Gpu.bulk_stream
        confines it to a green context of its own where the driver makes one). Read from the run's options, never from
        what this rank's GPU made, so that both ranks of a pair answer alike."""
        return self.engine != "sm_bulk" or not gpu.bulk_shape.sms

    def describe(self, gpu) -> str:
        """What the engine ran with, for the row's note ("" for the copy engine and NCCL: nothing to choose)."""
        return ENGINES[self.engine].describe(gpu)

    def bind(self, ctx, me: int, peer: int):
        """Collective over the pair: both ranks of the pair call this, in the same order, where the method is
        two-sided (PairEngine.bind; a one-sided method answers alone). What this rank enqueues when measuring
        with node-local rank `peer` (`nodes`, `enqueue`, `batch`): the method itself, or a two-sided engine's
        transfer bound to the pair (NCCL: its communicator)."""
        return ENGINES[self.engine].bind(ctx, me, peer) if self.two_sided else self

    def batch(self, gpu, src: int, dst: int, nbytes: int, count: int, stream=None) -> "StreamBatch":
        """`count` transfers enqueued on the stream behind each gate (StreamBatch), on the engine's own
        stream where it has one (a bulk copy confined to N SMs: core/gpu.Gpu.bulk_stream)."""
        if stream is None:
            stream = ENGINES[self.engine].stream(gpu)
        return StreamBatch(gpu, self, src, dst, nbytes, count, stream)

    def enqueue(self, gpu, stream, src: int, dst: int, nbytes: int, count: int = 1) -> None:
        ENGINES[self.engine].enqueue(gpu, stream, src, dst, nbytes, count)

    def warm(self, gpu, stream, src: int, dst: int, nbytes: int) -> dict:
        """A batch's first transfer, un-gated (StreamBatch): facts the engine learns from it for the row
        (the bulk kernel: the SMs its CTAs ran on), {} for the others."""
        return ENGINES[self.engine].warm(gpu, stream, src, dst, nbytes)


# The table of facts is the catalogue's (catalogue/methods.py: the reading side reads it too); here each gets
# its behaviour.
METHODS: dict[str, Method] = {name: Method(*(getattr(f, x.name) for x in fields(MethodFacts)))
                              for name, f in METHOD_FACTS.items()}


class StreamBatch:
    """`count` transfers enqueued call by call on the stream behind each gate: `segments` gated segments of
    `k` transfers (plan_segments), each transfer `nodes` stream operations.

    The constructor runs one transfer un-gated and waits for it: the driver loads the kernels of a same-GPU
    copy (and CuPy a kernel's module) at their first use, and a load behind a held gate waits for the gate,
    which then times out (seen on an H100: every gated first use of a same-GPU cudaMemcpyAsync did). So no
    gated segment is ever a first use. `transfer`: what enqueues one transfer (a Method, or a transfer
    bound to a pair: ipc/nccl.py, which warms up at its own connection and passes warm=False).
    """

    note = ""  # how the batch ran, for the row's note (ipc/nccl.py says graph or direct)

    def __init__(self, gpu, transfer, src, dst, nbytes: int, count: int, stream=None, nodes: int = 1,
                 warm: bool = True):
        self.stream = stream or gpu.stream
        self.nodes = nodes
        self.k, self.n_segments = plan_segments(count, nodes)
        self.count = self.k * self.n_segments
        self.gpu, self.transfer, self.args = gpu, transfer, (src, dst, nbytes)
        self.facts: dict = {}  # what the warm-up learnt for the row (Method.warm)
        if warm:
            self.facts = transfer.warm(gpu, self.stream, src, dst, nbytes)
            gpu.wait(self.stream, what="a transfer's first, un-gated run")

    def with_count(self, count: int) -> "StreamBatch":
        """The same batch for another count of transfers: only the number of segments changes. Valid when
        plan_segments gives the same `k` (every count from a full segment up), so calibration and sampling at
        different counts share one batch (and one warm-up)."""
        k, n = plan_segments(count, self.nodes)
        if k != self.k:
            raise ValueError(f"a batch of {self.k} transfers per segment cannot serve {count} (needs {k})")
        other = copy.copy(self)
        other.n_segments, other.count = n, k * n
        return other

    def at(self, offset: int) -> "StreamBatch":
        """The same batch with its source and destination `offset` bytes further into their buffers (a sample's
        placement: core/placement.py); the warm-up is not repeated (a sample's first transfer at a new place
        is part of the sample, as an application's would be)."""
        if offset == 0:
            return self
        src, dst, nbytes = self.args
        if src is None or dst is None:
            raise ValueError("a batch with a missing endpoint (one half of a two-sided transfer) has no placement")
        other = copy.copy(self)
        other.args = (src + offset, dst + offset, nbytes)
        return other

    def segments(self) -> list[int]:
        """What each gated segment enqueues (`enqueue`'s argument): one round of k transfers each."""
        return [1] * self.n_segments

    def enqueue(self, reps: int = 1) -> None:
        for _ in range(reps):
            self.transfer.enqueue(self.gpu, self.stream, *self.args, self.k)

    def enqueue_on(self, stream, count: int) -> None:
        """`count` of its transfers on another stream (a context's lane: core/lanes.py), not on its own."""
        self.transfer.enqueue(self.gpu, stream, *self.args, count)


class GraphBatch(StreamBatch):
    """`count` transfers as `segments` launches of one CUDA graph of `k` captured transfers: only for NCCL's
    calls (ipc/nccl.py), whose capture both ranks agree on before it is tried."""

    def __init__(self, gpu, transfer, src, dst, nbytes: int, count: int, stream=None, nodes: int = 1):
        super().__init__(gpu, transfer, src, dst, nbytes, count, stream, nodes, warm=False)
        s = self.stream
        s.begin_capture()
        try:
            transfer.enqueue(gpu, s, src, dst, nbytes, self.k)
        finally:
            self.graph = s.end_capture()
        self.graph.upload(s)  # so that no launch behind a gate has to build the executable graph first
        s.synchronize()

    def at(self, offset: int) -> "StreamBatch":
        if offset:
            raise ValueError("a captured graph's transfers cannot move (core/pair.py places one-sided batches only)")
        return self

    def enqueue(self, reps: int = 1) -> None:
        for _ in range(reps):
            self.graph.launch(self.stream)
