"""Fakes for CPU tests: a GPU whose memory is host memory, and an MPI world whose ranks are threads.

They exist to test the measurement LOGIC on a machine without a GPU: roles, endpoints, who verifies,
sample-count agreement between the ranks of a pair, stopping decisions, verification accounting, row
building, scheduling. They never support a GPU claim: a fake copy is a memmove, and a fake time is
whatever the test configures. docs/architecture.md, "How a row is born", describes the real path.

FakeGpu provides the interface of core/gpu.Gpu that the measurement code uses, including the stream
primitives (`new_stream`, `event`, `elapsed_ms`, `copy_async`) through which core/methods.StreamBatch and
core/timing.time_batch reach the device, so those run unchanged on top of it. Work on a FakeStream runs
at once; the stream keeps a cursor on the fake GPU clock (ns) that every transfer advances by its
configured cost. A gate models a release at instant 0 of the segment: it resets every stream of that
fake GPU to `skew_ns`, so the k-th segments of two ranks line up as if released together.

FakeWorld provides the interface of core/world.World over threads of one process: point-to-point
messages are FIFO queues per (sender, receiver, tag), collectives are messages to every member, values
are pickled on the way (as MPI does), and every wait has a deadline. Because the ranks share one address
space, a peer's pointer is usable as is: `make_buffers` builds BufferSets whose peer maps point straight
at the peers' allocations, the stand-in for CUDA IPC mappings.

FakeCudaIpc stands in for the driver's legacy IPC and interprocess-event calls (installed over cupy's
runtime functions with pytest's monkeypatch) for the code that calls CUDA directly (ipc/legacy.py,
suites/handles.py, BufferSet.create).

FakeNccl stands in for cupy.cuda.nccl (installed over ipc/nccl.load): sends and receives of the ranks'
communicators meet through FIFOs, so the nccl suite's two-sided protocol runs on fake ranks.
"""

from __future__ import annotations

import itertools
import pickle
import queue
import struct
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ipcbench.errors import WorldError

# ---- the fill pattern (the same hash as kernels/pattern.cu) ---------------------------------------


def _hash(seed: int, idx: np.ndarray) -> np.ndarray:
    lo = (idx & 0xFFFFFFFF).astype(np.uint32)
    hi = (idx >> np.uint64(32)).astype(np.uint32)
    x = np.uint32(seed & 0xFFFFFFFF) ^ lo ^ (hi * np.uint32(0x85EBCA6B))
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x7FEB352D)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x846CA68B)
    x ^= x >> np.uint32(16)
    return x ^ np.uint32(0xA5A5A5A5)


def pattern(seed: int, nbytes: int) -> np.ndarray:
    """The bytes kernels/pattern.cu's fill writes: word i = hash(seed, i); a tail byte t = low byte of hash(seed, t)."""
    nw = nbytes // 4
    words = _hash(seed, np.arange(nw, dtype=np.uint64)).astype("<u4")
    tail = _hash(seed, np.arange(4 * nw, nbytes, dtype=np.uint64)) & np.uint32(0xFF)
    return np.concatenate([words.view(np.uint8), tail.astype(np.uint8)])


def mismatched_words(data: np.ndarray, seed: int) -> int:
    """What kernels/pattern.cu's verify counts: differing full words plus differing tail bytes."""
    want = pattern(seed, len(data))
    nw = len(data) // 4
    bad = int(np.count_nonzero(data[: 4 * nw].view("<u4") != want[: 4 * nw].view("<u4")))
    return bad + int(np.count_nonzero(data[4 * nw:] != want[4 * nw:]))


# ---- memory ---------------------------------------------------------------------------------------


class HostMemory:
    """Host buffers addressed by integer pointers, shared by every fake rank of a test."""

    def __init__(self):
        self._blocks: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def alloc(self, nbytes: int) -> int:
        arr = np.zeros(max(1, nbytes), dtype=np.uint8)
        ptr = arr.ctypes.data
        with self._lock:
            self._blocks[ptr] = arr
        return ptr

    def free(self, ptr: int) -> None:
        with self._lock:
            del self._blocks[ptr]

    def live(self) -> set[int]:
        """Base pointers of the allocations not freed yet."""
        with self._lock:
            return set(self._blocks)

    def block(self, ptr: int) -> np.ndarray | None:
        """The allocation based at ptr (None if there is none, e.g. freed)."""
        with self._lock:
            return self._blocks.get(ptr)

    def view(self, ptr: int, nbytes: int) -> np.ndarray:
        """ptr[0:nbytes] as a writable array; an access outside every allocation is an error (a wrong
        slot or endpoint computation shows up here instead of corrupting memory)."""
        with self._lock:
            for base, arr in self._blocks.items():
                if base <= ptr and ptr + nbytes <= base + arr.size:
                    return arr[ptr - base: ptr - base + nbytes]
        raise AssertionError(f"access to [0x{ptr:x}, +{nbytes}) is outside every fake allocation")


# ---- streams, events, graphs ----------------------------------------------------------------------


class FakeEvent:
    def __init__(self, timing: bool = True):
        self.timing = timing
        self.t_ns: float | None = None
        self.done = True  # work runs at once

    def record(self, stream=None) -> None:
        self.t_ns = stream.t_ns
        stream.after_event = True  # the next transfer on the stream restarts it (FakeGpu.restart_ns)


class FakeGraph:
    def __init__(self, ops):
        self.ops = ops
        self.launches = 0

    def upload(self, stream) -> None:
        pass

    def launch(self, stream) -> None:
        self.launches += 1
        for cost, fn in self.ops:
            stream.submit(cost, fn)


STREAMS: "weakref.WeakValueDictionary[int, FakeStream]" = weakref.WeakValueDictionary()  # ptr -> stream


class FakeStream:
    """An in-order stream: work runs at once and advances the cursor `t_ns`; a capture records instead.
    `ptr` (the handle a library call is given, as cupy's stream.ptr) finds it again in STREAMS."""

    def __init__(self, gpu):
        self.gpu = gpu
        self.t_ns = 0.0
        self.level = 1.0  # a factor on every cost: a context's level (FakeGpu.lanes)
        self.after_event = False  # an event was recorded since the last transfer
        self.ptr = id(self)
        self._capture: list | None = None
        STREAMS[self.ptr] = self

    def submit(self, cost_ns: float, fn: Callable[[], None], first_use: object = None) -> None:
        """Run (or capture) one operation. `first_use`: what the driver would load at the operation's first
        use (a kernel, a copy of that size): a first use behind a held gate is an error here, as on a GPU,
        where the load waits for the gate until it times out (core/methods.StreamBatch); a capture counts
        as the load (a graph's upload loads its kernels)."""
        if first_use is not None:
            if self._capture is None and self.gpu.gated and first_use not in self.gpu.loaded:
                raise AssertionError(f"first use of {first_use} behind a held gate (it would wait for the gate)")
            self.gpu.loaded.add(first_use)
        if self._capture is not None:
            self._capture.append((cost_ns, fn))
            return
        fn()
        self.t_ns += cost_ns * self.gpu.factor * self.level
        if self.after_event:
            self.t_ns += self.gpu.restart_ns
            self.after_event = False

    def begin_capture(self) -> None:
        if self.gpu.capture_fails:
            raise RuntimeError("fake: this stream cannot capture a graph")
        self._capture = []

    def end_capture(self) -> FakeGraph:
        ops, self._capture = self._capture, None
        return FakeGraph(ops)

    def synchronize(self) -> None:
        pass

    def wait_event(self, ev: FakeEvent) -> None:
        self.t_ns = max(self.t_ns, ev.t_ns)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ---- the GPU --------------------------------------------------------------------------------------


class FakeGpu:
    """The part of core/gpu.Gpu that measurement code uses, on host memory with configured times.

    transfer_ns(nbytes): the cost of one transfer on the fake clock. jitter(): a factor drawn per gated
    segment (noise). skew_ns: where this rank's segments start after the common release. drop_copies:
    transfers do nothing (a broken path: the destination keeps its poison). gate_times_out: every gate
    reports a timeout. cc: the compute capability it claims (the bulk-copy methods need 9.0); a bulk copy
    is done piece by piece as core/bulk.plan and sequence cut it, so a planning mistake fails verification.
    """

    def __init__(self, memory: HostMemory, index: int = 0, transfer_ns: Callable[[int], float] | None = None,
                 jitter: Callable[[], float] | None = None, skew_ns: float = 0.0, drop_copies: bool = False,
                 gate_times_out: bool = False, sm_count: int = 132, l2_bytes: int = 4096,
                 free_bytes: int = 80 << 30, cc: str = "9.0", bulk_shape=None, capture_fails: bool = False,
                 green_granularity: int = 8, green_why: str = "no green contexts on this fake GPU",
                 clock_mhz: float | None = None, place_factor: Callable[[int], float] | None = None,
                 lane_level: Callable[[int], float] | None = None, lanes_why: str = "", restart_ns: float = 0.0):
        from ipcbench.core.bulk import BulkShape

        self.memory = memory
        self.index = index
        self.transfer_ns = transfer_ns or (lambda nbytes: 1000.0)
        self.jitter = jitter
        self.skew_ns = skew_ns
        self.drop_copies = drop_copies
        self.gate_times_out = gate_times_out
        self.clock_mhz = clock_mhz  # what gate_clock_mhz reports (None: a gate too brief to tell)
        self.place_factor = place_factor  # a copy's time x place_factor(its destination): where a buffer lies
        self.lane_level = lane_level  # lane i's level (a factor on its transfers' time): a context's (lanes)
        self.lanes_why = lanes_why  # lanes() raises GpuError with this where it is set (a driver without them)
        self.restart_ns = restart_ns  # what the first transfer after an event costs more (a segment's fixed cost)
        self.lane_streams: list[FakeStream] = []
        self.copy_dsts: list[int] = []  # every copy's destination, in order
        self.sm_count = sm_count
        self.l2_bytes = l2_bytes
        self.loop_in_kernel_bytes = 4 * l2_bytes
        self.free_bytes = free_bytes
        self.cc = cc
        self.capture_fails = capture_fails  # its streams refuse begin_capture
        self.green_granularity, self.green_why = green_granularity, green_why  # bulk_placement
        self.green_stream = None
        self.loaded: set = set()  # what has had its first use (FakeStream.submit)
        self.bulk_shape = bulk_shape or BulkShape()
        from ipcbench.core.sm_copy import CopyShape

        self.copy_shape = CopyShape()
        self.factor = 1.0
        self.streams: list[FakeStream] = []
        self.stream = self.new_stream()
        self._ticket = 0
        self.released: list[int] = []
        self.gated = False  # a gate holds this GPU's work stream
        self.on_release: list[Callable[[], None]] = []  # work queued behind the gate (fake IPC events)
        self._stamps = [0, 0]
        # What happened, for assertions.
        self.copies = 0  # transfers executed
        self.launches: list[tuple[int, int]] = []  # SM kernel launches: (nbytes, loops)
        self.bulk_launches: list[tuple[int, int, int]] = []  # bulk-copy kernel launches: (nbytes, loops, CTAs)
        self.fills: list[tuple[int, int, int]] = []  # (ptr, nbytes, seed)
        self.verifies: list[tuple[int, int, int, int]] = []  # (ptr, nbytes, seed, mismatched words)
        self.corrupted = 0
        self.log: list[str] = []  # "gate" and "release" in the order they happened

    def gate_clock_mhz(self) -> float | None:
        return self.clock_mhz

    # memory
    def malloc(self, nbytes: int) -> int:
        return self.memory.alloc(nbytes)

    def free(self, ptr: int) -> None:
        self.memory.free(ptr)

    def free_memory(self) -> int:
        return self.free_bytes

    # stream primitives (the seam in core/gpu.py)
    def new_stream(self) -> FakeStream:
        s = FakeStream(self)
        self.streams.append(s)
        return s

    def event(self, timing: bool = True) -> FakeEvent:
        return FakeEvent(timing)

    def lanes(self, k: int) -> list[FakeStream]:
        """k streams, lane i at the level lane_level(i) (1.0 without it): the contexts of core/gpu.Gpu.lanes."""
        if self.lanes_why:
            from ipcbench.errors import GpuError

            raise GpuError(self.lanes_why)
        while len(self.lane_streams) < k:
            s = self.new_stream()
            s.level = self.lane_level(len(self.lane_streams)) if self.lane_level else 1.0
            self.lane_streams.append(s)
        return self.lane_streams[:k]

    def elapsed_ms(self, start: FakeEvent, stop: FakeEvent) -> float:
        assert start.timing and stop.timing, "elapsed time of an event created without timing"
        return (stop.t_ns - start.t_ns) / 1e6

    def _copy(self, dst: int, src: int, nbytes: int) -> None:
        self.copies += 1
        if not self.drop_copies:
            self.memory.view(dst, nbytes)[:] = self.memory.view(src, nbytes)

    def copy_async(self, dst: int, src: int, nbytes: int, stream) -> None:
        self.copy_dsts.append(dst)
        ns = self.transfer_ns(nbytes) * (self.place_factor(dst) if self.place_factor else 1.0)
        stream.submit(ns, lambda: self._copy(dst, src, nbytes), ("copy", nbytes))

    def launch_copy(self, src: int, dst: int, nbytes: int, loops: int = 1, stream=None) -> None:
        def run():
            self.launches.append((nbytes, loops))
            for _ in range(loops):
                self._copy(dst, src, nbytes)

        (stream or self.stream).submit(loops * self.transfer_ns(nbytes), run, "copy kernel")

    def copier(self, src: int, dst: int, nbytes: int, loops: int = 1, stream=None):
        """core/gpu.Gpu.copier: a prepared launch of launch_copy."""
        return lambda: self.launch_copy(src, dst, nbytes, loops, stream)

    def table(self, values: list[int]) -> int:
        """core/gpu.Gpu.table: 64-bit words in fake device memory."""
        ptr = self.memory.alloc(8 * max(1, len(values)))
        self.memory.view(ptr, 8 * len(values))[:] = np.asarray(values, dtype=np.uint64).view(np.uint8)
        return ptr

    def a2a_writer(self, src: int, dsts: int, npeers: int, nbytes: int, loops: int = 1, stream=None):
        """core/gpu.Gpu.a2a_writer: one launch copies src to every destination of the table, `loops` times; its
        cost is one transfer per pass (the peers' shares of the grid run side by side)."""
        targets = [int(x) for x in self.memory.view(dsts, 8 * npeers).view(np.uint64)]

        def run():
            self.launches.append((nbytes, loops))
            for _ in range(loops):
                for d in targets:
                    self._copy(d, src, nbytes)

        return lambda: (stream or self.stream).submit(loops * self.transfer_ns(nbytes), run, "a2a kernel")

    def a2a_barrier(self, post: int, npeers: int, mine: int, n: int, me: int, seq: int, status: int, stream=None):
        """core/gpu.Gpu.a2a_barrier on a fake: the device barrier cannot be modelled by threads that run their work at
        enqueue; it counts its launches (`barriers`) and costs nothing."""
        def run():
            self.barriers += 1

        return lambda: (stream or self.stream).submit(0.0, run, "a2a barrier")

    barriers = 0  # a2a_barrier launches run

    def read_word(self, ptr: int) -> int:
        return int(self.memory.view(ptr, 4).view(np.uint32)[0])

    def bulk_copier(self, src: int, dst: int, nbytes: int, loops: int = 1, stream=None):
        """core/gpu.Gpu.bulk_copier: a prepared launch of launch_bulk_copy."""
        return lambda: self.launch_bulk_copy(src, dst, nbytes, loops, stream)

    def feature_support(self, name: str) -> tuple[bool, str | None]:
        from ipcbench.core import bulk

        if name == bulk.FEATURE:
            return bulk.support(self.cc, f"fake GPU {self.index}", self.bulk_shape, sm_count=self.sm_count)
        return False, f"unknown GPU feature {name!r}"

    def launch_bulk_copy(self, src: int, dst: int, nbytes: int, loops: int = 1, stream=None) -> None:
        """What kernels/bulk.cu does, as core/bulk.py plans it: every CTA's pieces of every pass, then the tail."""
        from ipcbench.core import bulk

        ok, why = self.feature_support(bulk.FEATURE)
        assert ok, f"a bulk copy launched on a GPU without the feature: {why}"
        assert (src | dst) % bulk.ALIGN == 0, "bulk copies need 16-byte aligned pointers"
        p = bulk.plan(nbytes, self.bulk_shape, self.sm_count, loops, self.bulk_placement().sms)

        def run():
            self.bulk_launches.append((nbytes, loops, p.blocks))
            self.copies += loops
            if self.drop_copies:
                return
            for off, size in bulk.sequence(p, loops):
                self.memory.view(dst + off, size)[:] = self.memory.view(src + off, size)
            if p.tail:
                self.memory.view(dst + p.body, p.tail)[:] = self.memory.view(src + p.body, p.tail)

        (stream or self.stream).submit(loops * self.transfer_ns(nbytes), run, "bulk kernel")

    def bulk_placement(self):
        """core/gpu.Gpu.bulk_placement on a fake: green contexts in groups of `green_granularity` SMs (0: none
        can be made, with `green_why`)."""
        from ipcbench.core import bulk

        n = self.bulk_shape.sms
        got = -(-n // self.green_granularity) * self.green_granularity if n and self.green_granularity else 0
        return bulk.placement(self.bulk_shape, self.sm_count, (min(got, self.sm_count), self.green_why))

    def bulk_stream(self):
        if self.bulk_placement().confined:
            if self.green_stream is None:
                self.green_stream = self.new_stream()
            return self.green_stream
        return self.stream

    def bulk_sms_seen(self, src: int, dst: int, nbytes: int, stream=None) -> int:
        """A fake's answer: one SM per CTA of the grid, at most the placement's SMs where it is confined."""
        from ipcbench.core import bulk

        where = self.bulk_placement()
        p = bulk.plan(nbytes, self.bulk_shape, self.sm_count, 1, where.sms)
        self.launch_bulk_copy(src, dst, nbytes, 1, stream)
        return min(p.blocks, where.sms) if where.confined else p.blocks

    # data
    def fill(self, ptr: int, nbytes: int, seed: int, stream=None) -> None:
        self.fills.append((ptr, nbytes, seed))
        self.memory.view(ptr, nbytes)[:] = pattern(seed, nbytes)

    def verify(self, ptr: int, nbytes: int, seed: int, stream=None) -> int:
        bad = mismatched_words(self.memory.view(ptr, nbytes), seed)
        self.verifies.append((ptr, nbytes, seed, bad))
        return bad

    def corrupt(self, ptr: int, nbytes: int, stream=None) -> None:
        n = min(16, nbytes)
        off = ((nbytes - n) // 2 // 4) * 4
        self.memory.view(ptr + off, n)[:] = 0x5A
        self.corrupted += 1

    # gate and clock
    def gate(self, stream=None) -> int:
        self._ticket += 1
        self.factor = self.jitter() if self.jitter else 1.0
        for s in self.streams:
            s.t_ns = self.skew_ns
        self.log.append("gate")
        self.gated = True
        return self._ticket

    def release(self, ticket: int) -> None:
        self.released.append(ticket)
        self.log.append("release")
        self.gated = False
        while self.on_release:
            self.on_release.pop(0)()

    def gate_timed_out(self, ticket: int) -> bool:
        return self.gate_times_out

    def stamp(self, slot: int, stream=None) -> None:
        self._stamps[slot] = int((stream or self.stream).t_ns)

    def read_stamps(self) -> tuple[int, int]:
        return self._stamps[0], self._stamps[1]

    def wait(self, stream=None, timeout: float = 60.0, what: str = "GPU work", spin: bool = True) -> None:
        pass

    def function(self, module: str, fn: str, defines: tuple[str, ...] = ()):
        raise NotImplementedError(f"a fake GPU runs no kernels ({module}.{fn})")

    def close(self) -> None:
        pass


# ---- the MPI world --------------------------------------------------------------------------------


class PeerFailed(WorldError):
    """Raised in a fake rank that waits on a rank that has already failed."""


class Hub:
    """What the fake ranks share: one FIFO per (sender, receiver, tag) and a failure flag."""

    def __init__(self, hosts: list[str], timeout: float):
        self.hosts = list(hosts)
        self.timeout = timeout
        self.failed = threading.Event()
        self._queues: dict[tuple, queue.Queue] = {}
        self._lock = threading.Lock()

    def _q(self, key) -> queue.Queue:
        with self._lock:
            return self._queues.setdefault(key, queue.Queue())

    def put(self, src: int, dst: int, tag, value) -> None:
        self._q((src, dst, tag)).put(pickle.dumps(value))

    def get(self, src: int, dst: int, tag, what: str, timeout: float):
        q = self._q((src, dst, tag))
        deadline = time.monotonic() + timeout
        while True:
            try:
                return pickle.loads(q.get(timeout=0.01))
            except queue.Empty:
                if self.failed.is_set():
                    raise PeerFailed(f"rank {dst}: another fake rank failed while waiting for {what}") from None
                if time.monotonic() > deadline:
                    raise WorldError(f"timed out after {timeout:g} s waiting for {what} (rank {dst})") from None

    def pending(self) -> list[tuple]:
        """Keys of queues that still hold messages nobody received (a protocol out of step)."""
        with self._lock:
            return [k for k, q in self._queues.items() if not q.empty()]


class FakeComm:
    """The few communicator calls the run code makes directly (bcast, allgather)."""

    def __init__(self, world: "FakeWorld", members: list[int], name: str):
        self.world, self.members, self.name = world, members, name

    @property
    def rank(self) -> int:
        return self.members.index(self.world.rank)

    @property
    def size(self) -> int:
        return len(self.members)

    def bcast(self, value, root: int = 0):
        return self.world._allgather(self, value, "a broadcast")[root]

    def allgather(self, value):
        return self.world._allgather(self, value, "an allgather")


class FakeWorld:
    """core/world.World's interface over threads (see the module docstring)."""

    TIGHT_TAG = 4241

    def __init__(self, hub: Hub, rank: int):
        self.hub = hub
        self.rank = rank
        self.size = len(hub.hosts)
        self.host = hub.hosts[rank]
        self.hosts = list(dict.fromkeys(hub.hosts))
        self.node_index = self.hosts.index(self.host)
        self.n_nodes = len(self.hosts)
        self.node_ranks = [r for r, h in enumerate(hub.hosts) if h == self.host]
        self.local_rank = self.node_ranks.index(rank)
        self.local_size = len(self.node_ranks)
        self.timeout = hub.timeout
        self.comm = FakeComm(self, list(range(self.size)), "world")
        self.node = FakeComm(self, self.node_ranks, f"node:{self.host}")

    def _allgather(self, comm: FakeComm, value, what: str, timeout: float | None = None) -> list:
        tag = ("collective", comm.name)
        for r in comm.members:
            if r != self.rank:
                self.hub.put(self.rank, r, tag, value)
        return [pickle.loads(pickle.dumps(value)) if r == self.rank else
                self.hub.get(r, self.rank, tag, what, self.timeout if timeout is None else timeout)
                for r in comm.members]

    def barrier(self, comm=None, what: str = "the other ranks", timeout: float | None = None) -> None:
        self._allgather(comm or self.node, None, what, timeout)

    def node_barrier(self, what: str = "the other ranks of this node") -> None:
        self.barrier(self.node, what)

    def node_allgather(self, value, what: str = "a node-wide exchange"):
        return self._allgather(self.node, value, what)

    def node_gather(self, value, what: str = "a node-wide gather"):
        out = self._allgather(self.node, value, what)
        return out if self.local_rank == 0 else None

    def world_gather(self, value, what: str = "the final gather"):
        out = self._allgather(self.comm, value, what)
        return out if self.rank == 0 else None

    def world_allgather(self, value, what: str = "a job-wide exchange"):
        return self._allgather(self.comm, value, what)

    def world_allreduce_max(self, value, what: str = "an agreement between ranks"):
        return max(self._allgather(self.comm, value, what))

    def send(self, value, peer: int, tag: int = 7) -> None:
        self.hub.put(self.rank, self.node_ranks[peer], tag, value)

    def recv(self, peer: int, tag: int = 7, what: str | None = None):
        return self.hub.get(self.node_ranks[peer], self.rank, tag,
                            what or f"a message from node-local rank {peer} (tag {tag})", self.timeout)

    def exchange(self, value, peer: int, tag: int = 9):
        self.send(value, peer, tag)
        return self.recv(peer, tag)

    def pair_barrier(self, peer: int, tag: int = 11) -> None:
        self.exchange(None, peer, tag)

    def tight_exchange(self, value: int, peer: int, what: str) -> int:
        return int(self.exchange(int(value), peer, self.TIGHT_TAG))


def run_ranks(fn: Callable[[FakeWorld], object], n: int = 2, hosts: list[str] | None = None,
              timeout: float = 10.0) -> list:
    """Run fn(world) on every fake rank (one thread each); the ranks' return values in rank order.

    The first real error of any rank is re-raised here (not the PeerFailed of the ranks that waited
    on it). A run that leaves messages nobody received is an error too: the ranks were out of step."""
    hub = Hub(hosts or ["fakehost"] * n, timeout)
    size = len(hub.hosts)
    results: list = [None] * size
    errors: list = [None] * size

    def body(r: int) -> None:
        try:
            results[r] = fn(FakeWorld(hub, r))
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            errors[r] = e
            hub.failed.set()

    threads = [threading.Thread(target=body, args=(r,), daemon=True, name=f"fake-rank-{r}") for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    if any(t.is_alive() for t in threads):
        raise AssertionError("a fake rank hung")
    real = [e for e in errors if e is not None and not isinstance(e, PeerFailed)]
    if real or any(errors):
        raise (real or [e for e in errors if e is not None])[0]
    left = hub.pending()
    if left:
        raise AssertionError(f"messages sent but never received: {left}")
    return results


# ---- a node of fake ranks with buffers and contexts ----------------------------------------------


def make_buffers(memory: HostMemory, n_local: int, slot_bytes: int) -> list:
    """One BufferSet per node-local rank; every peer map points at the peer's own allocation."""
    from ipcbench.ipc.buffers import BufferSet

    own = [(memory.alloc(slot_bytes), memory.alloc(slot_bytes * n_local), memory.alloc(BufferSet.CTRL_BYTES))
           for _ in range(n_local)]
    sets = []
    for r in range(n_local):
        bs = BufferSet(None, slot_bytes, *own[r])
        for p in range(n_local):
            bs.peer_src[p], bs.peer_inbox[p], bs.peer_ctrl[p] = own[p]
        sets.append(bs)
    return sets


@dataclass
class FakeNode:
    """n fake ranks on one node: their FakeGpus (gpu_of[r] is rank r's GPU index), legacy and pool
    BufferSets of `slot_bytes`, and a core.context.Ctx for each, built inside the rank's thread."""

    n: int = 2
    gpu_of: list[int] | None = None
    slot_bytes: int = 1 << 16
    rule: object = None
    verify: bool = True
    corrupt: str = ""
    mps: bool = False
    kinds: tuple[str, ...] = ("legacy", "pool")
    gpu_kw: list[dict] | None = None
    timeout: float = 10.0

    def __post_init__(self):
        from ipcbench.core.sampler import SamplingRule

        self.gpu_of = list(self.gpu_of or range(self.n))
        self.rule = self.rule or SamplingRule(min_time_s=0.001)
        self.memory = HostMemory()
        kw = self.gpu_kw or [{} for _ in range(self.n)]
        self.gpus = [FakeGpu(self.memory, index=self.gpu_of[r], **kw[r]) for r in range(self.n)]
        self.buffers = {k: make_buffers(self.memory, self.n, self.slot_bytes) for k in self.kinds}
        self.ctxs: list = [None] * self.n

    def ctx(self, world: FakeWorld):
        """Rank `world.local_rank`'s Ctx, with the lanes of its rule's contexts as run/runner.py makes them."""
        from ipcbench.core.context import Ctx

        r = world.local_rank
        c = Ctx(world=world, gpu=self.gpus[r], buffers={k: v[r] for k, v in self.buffers.items()}, rule=self.rule,
                verify=self.verify, run_id="fake-run", gpu_of=self.gpu_of, node_ranks=world.node_ranks,
                mps=self.mps, corrupt=self.corrupt)
        if self.rule.contexts > 1:
            c.lanes = self.gpus[r].lanes(self.rule.contexts)
            c.lane_events = [tuple(FakeEvent() for _ in range(4)) for _ in c.lanes]
        self.ctxs[r] = c
        return c

    def run(self, fn: Callable) -> list:
        """fn(ctx) on every rank; the results in rank order."""
        return run_ranks(lambda w: fn(self.ctx(w)), n=self.n, timeout=self.timeout)


# ---- a CUDA IPC driver (legacy memory handles, interprocess events) ------------------------------

INVALID_VALUE, DEVICE_UNINITIALIZED, INVALID_HANDLE, NOT_READY = 1, 201, 400, 600


class FakeIpcEvent:
    def __init__(self, owner):
        self.owner = owner
        self.done = threading.Event()
        self.done.set()  # a new event counts as complete


class FakeCudaIpc:
    """Legacy IPC semantics over one address space; a "process" is a fake rank's thread.

    Memory: a handle names a live allocation of the node's HostMemory; opening it in another thread
    gives the same pointer (`refcounted`: every open needs its close; otherwise the first close unmaps,
    and the second is refused); the exporter's own thread is refused (as the driver does); a freed
    allocation is refused; host memory cannot be exported unless `accept_host`. `fail_open`: every open
    fails; `fail_export`: every export fails. `remap_to`: opens return this pointer instead (a mapping of the wrong
    memory).
    `node` is anything with `memory` (HostMemory) and `gpus` (FakeGpus): a FakeNode.
    Events: a record behind a closed gate completes at the gate's release; a wait blocks until complete;
    `events_always_done`: imported events never track the exporter's stream (a broken driver)."""

    def __init__(self, node, refcounted=True, repeat_open=True, fail_open=False, accept_host=False,
                 remap_to=None, events_always_done=False, fail_export=False):
        self.node = node
        self.fail_export = fail_export
        self.refcounted, self.repeat_open, self.fail_open = refcounted, repeat_open, fail_open
        self.accept_host, self.remap_to, self.events_always_done = accept_host, remap_to, events_always_done
        self.lock = threading.Lock()
        self.serial = itertools.count(1)
        self.handles = {}  # handle bytes -> (ptr, block array, owner thread)
        self.maps = {}  # (thread, ptr) -> open count
        self.events = {}  # id -> FakeIpcEvent
        self.host = {}  # pinned host allocations

    def install(self, monkeypatch):
        """Replace cupy's runtime calls with this driver's for the test (pytest's monkeypatch)."""
        from cupy.cuda import runtime

        for name in ("ipcGetMemHandle", "ipcOpenMemHandle", "ipcCloseMemHandle", "eventCreateWithFlags",
                     "eventRecord", "ipcGetEventHandle", "ipcOpenEventHandle", "eventQuery", "streamWaitEvent",
                     "eventDestroy", "hostAlloc", "freeHost", "memset", "deviceSynchronize"):
            monkeypatch.setattr(runtime, name, getattr(self, name))
        return self

    @staticmethod
    def err(code):
        from cupy.cuda import runtime

        return runtime.CUDARuntimeError(code)

    def memset(self, ptr, value, nbytes):
        self.node.memory.view(ptr, nbytes)[:] = value

    def deviceSynchronize(self):
        pass

    # memory
    def ipcGetMemHandle(self, ptr):
        block = self.node.memory.block(ptr)
        if self.fail_export or (block is None and not (self.accept_host and ptr in self.host)):
            raise self.err(INVALID_VALUE)
        h = struct.pack("<QQQ", ptr, next(self.serial), threading.get_ident()).ljust(64, b"\0")
        with self.lock:
            self.handles[h] = (ptr, block, threading.get_ident())
        return h

    def ipcOpenMemHandle(self, h, flags):
        ptr, block, owner = self.handles[bytes(h)]
        me = threading.get_ident()
        if owner == me:
            raise self.err(DEVICE_UNINITIALIZED)
        if self.fail_open or self.node.memory.block(ptr) is not block:
            raise self.err(INVALID_HANDLE)
        mapped = self.remap_to or ptr
        with self.lock:
            n = self.maps.get((me, mapped), 0)
            if n and not self.repeat_open:
                raise self.err(INVALID_HANDLE)
            self.maps[(me, mapped)] = n + 1
        return mapped

    def ipcCloseMemHandle(self, ptr):
        key = (threading.get_ident(), ptr)
        with self.lock:
            n = self.maps.get(key, 0)
            if n == 0:
                raise self.err(INVALID_HANDLE)
            self.maps[key] = n - 1 if self.refcounted else 0

    def hostAlloc(self, nbytes, flags):
        arr = np.zeros(nbytes, dtype=np.uint8)
        self.host[arr.ctypes.data] = arr
        return arr.ctypes.data

    def freeHost(self, ptr):
        del self.host[ptr]

    # events
    def eventCreateWithFlags(self, flags):
        ev = FakeIpcEvent(threading.get_ident())
        self.events[id(ev)] = ev
        return id(ev)

    def _gpu_of_stream(self, sptr):
        (gpu,) = [g for g in self.node.gpus if any(s.ptr == sptr for s in g.streams)]
        return gpu

    def eventRecord(self, ev, sptr):
        e, gpu = self.events[ev], self._gpu_of_stream(sptr)
        if gpu.gated:
            e.done.clear()
            gpu.on_release.append(e.done.set)

    def ipcGetEventHandle(self, ev):
        return struct.pack("<Q", ev).ljust(64, b"\0")

    def ipcOpenEventHandle(self, h):
        (ev,) = struct.unpack("<Q", bytes(h)[:8])
        if self.events_always_done:
            other = FakeIpcEvent(threading.get_ident())
            self.events[id(other)] = other
            return id(other)
        return ev

    def eventQuery(self, ev):
        if not self.events[ev].done.is_set():
            raise self.err(NOT_READY)
        return 0

    def streamWaitEvent(self, sptr, ev, flags):
        assert self.events[ev].done.wait(5), "a stream waited on an event that never completed"

    def eventDestroy(self, ev):
        self.events[ev].destroyed = True


# ---- NCCL (cupy.cuda.nccl's interface) ---------------------------------------------------------------

class FakeNcclError(RuntimeError):
    pass


class FakeNccl:
    """cupy.cuda.nccl's interface over fake ranks (FakeGpu streams, host memory), for the LOGIC of the nccl suite
    (roles, lockstep counts, graph-or-direct agreement, verification, communicator bookkeeping): install it
    with `monkeypatch.setattr(ipcbench.ipc.nccl, "load", lambda: fake)`. A send puts the bytes of its
    source on a FIFO per (communicator, sender, receiver) when its stream runs it; a receive takes the next
    one (waiting up to 5 s for it) and writes it into its destination. A group runs its sends before its
    receives. Each call costs its GPU's transfer_ns(nbytes) on its stream. Nothing here is a GPU claim.

    `version`: what get_version says; `capture_fails_for`: communicator ranks whose calls fail while their
    stream captures a graph; `duplicate_gpu`: ncclCommInitRank refuses (NCCL's "Duplicate GPU detected")."""

    NCCL_UINT8 = 1
    available = True

    def __init__(self, version: int = 22809, capture_fails_for=(), duplicate_gpu: bool = False):
        self.version = version
        self.capture_fails_for, self.duplicate_gpu = set(capture_fails_for), duplicate_gpu
        self.captured = 0  # calls made while their stream captured a graph
        self.lock = threading.Lock()
        self.serial = itertools.count(1)
        self.fifos: dict[tuple, queue.Queue] = {}
        self.comms: list[FakeNcclComm] = []
        self.local = threading.local()

    def get_version(self) -> int:
        return self.version

    def get_unique_id(self) -> bytes:
        return struct.pack("<Q", next(self.serial)).ljust(128, b"\0")

    def NcclCommunicator(self, ndev: int, uid: bytes, rank: int) -> "FakeNcclComm":
        if self.duplicate_gpu:
            raise FakeNcclError("invalid usage: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 0")
        comm = FakeNcclComm(self, bytes(uid), ndev, rank)
        with self.lock:
            self.comms.append(comm)
        return comm

    def groupStart(self) -> None:
        self.local.group = getattr(self.local, "group", None) or []
        self.local.depth = getattr(self.local, "depth", 0) + 1

    def groupEnd(self) -> None:
        self.local.depth -= 1
        if self.local.depth == 0:
            ops, self.local.group = self.local.group, None
            for op in sorted(ops, key=lambda o: o[0] != "send"):
                self._submit(*op)

    def fifo(self, uid: bytes, sender: int, receiver: int) -> queue.Queue:
        with self.lock:
            return self.fifos.setdefault((uid, sender, receiver), queue.Queue())

    def call(self, op: str, comm: "FakeNcclComm", ptr: int, count: int, peer: int, sptr: int) -> None:
        if getattr(self.local, "depth", 0):
            self.local.group.append((op, comm, ptr, count, peer, sptr))
        else:
            self._submit(op, comm, ptr, count, peer, sptr)

    def _submit(self, op, comm, ptr, count, peer, sptr) -> None:
        stream = STREAMS[sptr]
        if stream._capture is not None:
            self.captured += 1
            if comm.rank in self.capture_fails_for:
                raise FakeNcclError(f"unhandled cuda error: fake capture failure of nccl{op.title()}")
        memory = stream.gpu.memory
        if op == "send":
            def run():
                self.fifo(comm.uid, comm.rank, peer).put(bytes(memory.view(ptr, count)))
        else:
            def run():
                try:
                    data = self.fifo(comm.uid, peer, comm.rank).get(timeout=5)
                except queue.Empty:
                    raise AssertionError("a fake ncclRecv never met its send") from None
                assert len(data) == count, f"a fake ncclRecv of {count} B met a send of {len(data)} B"
                memory.view(ptr, count)[:] = np.frombuffer(data, dtype=np.uint8)
        comm.calls[op] += 1
        stream.submit(stream.gpu.transfer_ns(count), run)

    def pending(self) -> list[tuple]:
        """FIFOs that still hold sends nobody received (the two ranks out of step)."""
        with self.lock:
            return [k for k, q in self.fifos.items() if not q.empty()]


class FakeNcclComm:
    def __init__(self, lib: FakeNccl, uid: bytes, ndev: int, rank: int):
        self.lib, self.uid, self.ndev, self.rank = lib, uid, ndev, rank
        self.calls = {"send": 0, "recv": 0}
        self.destroyed = False

    def send(self, ptr: int, count: int, datatype: int, peer: int, stream: int) -> None:
        assert isinstance(ptr, int) and isinstance(stream, int) and datatype == FakeNccl.NCCL_UINT8
        self.lib.call("send", self, ptr, count, peer, stream)

    def recv(self, ptr: int, count: int, datatype: int, peer: int, stream: int) -> None:
        assert isinstance(ptr, int) and isinstance(stream, int) and datatype == FakeNccl.NCCL_UINT8
        self.lib.call("recv", self, ptr, count, peer, stream)

    def destroy(self) -> None:
        self.destroyed = True
