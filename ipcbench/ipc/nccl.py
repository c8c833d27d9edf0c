"""NCCL between the two ranks of a pair: loading the library, one communicator per cross-GPU pair, and the
transfer bound to that pair (ncclSend/ncclRecv) that core/pair.py and suites/nccl.py enqueue. NCCL is the
baseline people use instead of raw CUDA IPC; the report divides every IPC method by it.

Binding: cupy.cuda.nccl. CuPy is already this tool's GPU layer (core/gpu.py); its NCCL calls take what the
rest of the code deals in (raw device pointers as ints, counts in elements, a stream's handle `stream.ptr`),
and it loads libnccl from the pip wheel nvidia-nccl-cu13 (the `nccl` extra) without a path. nccl4py,
NVIDIA's own binding, is newer, not known to be installed where this runs, and would make nothing here
simpler.

Communicators: NCCL refuses two ranks of one GPU in one communicator ("Duplicate GPU detected"), and a
node-wide communicator would need every rank at every init; so each cross-GPU pair makes its own 2-rank
communicator the first time it is measured (the lower node-local rank makes the unique id, the pair swaps
it over MPI, both call ncclCommInitRank), then one direct send/receive each way connects the pair: NCCL
connects peers lazily, and a first P2P call must not happen inside a graph capture. Cached in
ctx.state["nccl_pairs"] by the unordered pair; close_pairs, the context's release of them (ctx.add_cleanup),
destroys them at the end of the run in one order that every rank shares, so no two ranks wait on each
other's different communicator.

Threads: NCCL's set-up runs through helper threads (the proxy service and progress threads), which inherit the
CPUs of the thread that makes the communicator. Open MPI binds each of two ranks to one core by default, and
there the first send/receive of a pair took 1.1-1.2 s (NCCL's threads and the rank's own sharing that core),
against 0.17-0.19 s unbound (two H200s, 2026-11-26). So a rank bound more narrowly than its process may run
makes its communicators with every CPU it is allowed (`wider_cpus`: its cgroup's, whatever bound it: mpirun,
Slurm, taskset or numactl), which NCCL narrows to the GPU's own (NCCL's CPU affinity rule), for the pair's set-up
only: once its first send/receive is done, the rank and every
thread that started meanwhile go back to the rank's binding, before anything is timed, so the rest of the run
(NCCL's rows, and the other ranks' cores) sees NCCL's threads where they always were.

Graphs: NCCL's P2P calls can be captured into CUDA graphs (NCCL >= 2.9), but whether a call is captured
must be the same on both ranks of the pair (NCCL's rule), and what a send or receive that was captured but
never launched leaves in the communicator is not documented. So the pair decides BEFORE any NCCL call is
captured, once, when its communicator is made (`capture_check`: NCCL's version, IPCBENCH_NCCL_GRAPHS, and a
capture of a plain copy on the work stream, on each rank; both must say yes), and both ranks then capture or
both enqueue their calls directly behind the gate (core/methods.StreamBatch), the rows saying which. A capture
of NCCL calls that still fails after both agreed is an error on both ranks, not a silent fallback.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
import warnings

from ipcbench.core.methods import GraphBatch, StreamBatch, register_pair_transfer
from ipcbench.errors import MeasureError

NCCL_TAG = 41  # MPI tag of the pair's NCCL setup and capture agreement
MIN_P2P_VERSION = 2700  # ncclSend/ncclRecv: NCCL 2.7 (NCCL_VERSION(2,7,0) in the pre-2.9 encoding)
MIN_GRAPH_VERSION = 20900  # P2P calls captured into CUDA graphs: NCCL 2.9
# Stream operations one NCCL call may add behind a gate (core/methods.MAX_QUEUED counts these): captured, its
# kernel node and room for one more (a host or empty node); enqueued directly, twice that, since an
# uncaptured launch also records and waits on events to order NCCL's internal stream with this one.
NODES_PER_CALL = 2
DIRECT_FACTOR = 2
CONNECT_BYTES = 4  # the first send/receive of a pair, outside any capture
GRAPHS_ENV = "IPCBENCH_NCCL_GRAPHS"  # "0": never capture NCCL calls (both ranks of every pair go direct)
INSTALL_HINT = "pip install -e '.[nccl]' (the nvidia-nccl-cu13 wheel, which cupy.cuda.nccl loads)"


@contextlib.contextmanager
def wider_cpus(get=os.sched_getaffinity, put=os.sched_setaffinity, count=os.cpu_count, threads=None):
    """While inside: this thread may run on every CPU its process is allowed (Linux intersects the mask with
    the cgroup's cpuset), so the threads NCCL starts inherit room beyond a one-core binding. On the way out this
    thread, and every thread of the process that started inside (`threads()`: the thread ids now), are bound
    as this thread was again. Yields (CPUs bound to, CPUs while inside); both equal where nothing changed
    (already unbound, or the kernel refused)."""
    threads = threads or _thread_ids
    bound = set(get(0))
    wide, before = bound, threads()
    try:
        put(0, bound | set(range(count() or 1)))  # never without the CPUs it had
        wide = set(get(0))
    except OSError:
        pass
    try:
        yield len(bound), len(wide)
    finally:
        if wide != bound:
            put(0, bound)
            done: set[int] = set()
            while new := threads() - before - done:  # again: a thread re-bound may have started another
                for tid in new:
                    try:  # where NCCL placed it within the binding (its GPU's CPUs), else the binding
                        put(tid, (set(get(tid)) & bound) or bound)
                    except OSError:  # ended meanwhile
                        pass
                done |= new


def _thread_ids() -> set[int]:
    """The Linux thread ids of this process's threads."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return set()


class NcclUnavailable(MeasureError):
    """NCCL cannot be used in this process; the message says why (the support check says it before a run
    measures; a measurement that still meets it ends with it)."""


def load():
    """cupy.cuda.nccl with libnccl loaded (NcclUnavailable otherwise), imported here: NCCL is optional, and a
    failed import is the answer. Tests replace this with a fake."""
    try:
        with warnings.catch_warnings():  # CuPy warns at import when libnccl is missing: the reason is ours to say
            warnings.simplefilter("ignore")
            from cupy.cuda import nccl
    except Exception as e:  # noqa: BLE001 - any import failure means "no NCCL here"
        raise NcclUnavailable(f"cupy.cuda.nccl cannot be imported ({type(e).__name__}: {e})") from None
    if not getattr(nccl, "available", False):
        raise NcclUnavailable("NCCL is not installed: cupy.cuda.nccl cannot load libnccl.so.2")
    return nccl


def version_text(code: int) -> str:
    """NCCL's version code as text: 22809 -> 2.28.9, 2708 -> 2.7.8 (the encoding changed at 2.9)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def nccl_support(device: int | None = None) -> tuple[bool, str | None]:
    """(True, None) where NCCL's send/receive can be used, else (False, why and how to install it). The
    support check of the `nccl` need (ipc/sharers.LIBRARIES); loads the library, makes nothing."""
    try:
        code = int(load().get_version())
    except NcclUnavailable as e:
        return False, f"{e}; {INSTALL_HINT}"
    except Exception as e:  # noqa: BLE001 - a broken library says so here, not mid-run
        return False, f"NCCL did not report its version ({type(e).__name__}: {e})"
    if code < MIN_P2P_VERSION:
        return False, f"NCCL {version_text(code)} has no ncclSend/ncclRecv (2.7 or later is needed)"
    return True, None


def capture_check(gpu, version: int, src: int, dst: int) -> str | None:
    """Why this rank should not capture NCCL calls into CUDA graphs, or None: an NCCL without P2P capture,
    IPCBENCH_NCCL_GRAPHS=0, or a work stream that cannot capture (tried with a 4-byte copy from `src` to
    `dst` that is captured and dropped, never launched: no NCCL call is captured to find out)."""
    if version < MIN_GRAPH_VERSION:
        return f"NCCL {version_text(version)} cannot capture P2P calls"
    if os.environ.get(GRAPHS_ENV, "1") == "0":
        return f"{GRAPHS_ENV}=0"
    s = gpu.stream
    try:
        s.begin_capture()
        try:
            gpu.copy_async(dst, src, 4, s)
        finally:
            s.end_capture()
    except Exception as e:  # noqa: BLE001 - any failure means: do not capture here
        return f"the work stream cannot capture a CUDA graph ({type(e).__name__}: {e})"
    return None


class NcclPair:
    """One cross-GPU pair's 2-rank communicator as this rank sees it (node-local ranks `me` and `peer`)."""

    def __init__(self, lib, comm, world, me: int, peer: int, version: int, init_ms: float):
        self.lib, self.comm, self.world = lib, comm, world
        self.me, self.peer = me, peer
        self.peer_rank = 1 if me < peer else 0  # the peer's rank in the communicator
        self.version = version
        self.init_ms = init_ms
        self.connect_ms = 0.0
        self.cpus = (0, 0)  # (CPUs this rank is bound to, CPUs its set-up had): wider_cpus
        # Capture into graphs: decided by both ranks when the pair is made (create, capture_check), before any
        # NCCL call is captured; `direct_why` says why not.
        self.graphs = False
        self.direct_why = ""

    @classmethod
    def create(cls, ctx, me: int, peer: int) -> "NcclPair":
        """Collective over the pair: both ranks of the pair call this, in the same order. Unique id, init, first
        send/receive."""
        lib = load()
        w, gpu = ctx.world, ctx.gpu
        uid = lib.get_unique_id() if me < peer else None
        theirs = w.exchange(uid, peer, tag=NCCL_TAG)
        uid = uid if me < peer else theirs
        with wider_cpus() as cpus:  # NCCL's threads start in here (the module docstring: Threads)
            t0 = time.perf_counter()
            try:
                comm = lib.NcclCommunicator(2, uid, 0 if me < peer else 1)
            except Exception as e:  # noqa: BLE001 - NcclError, or CUDA's: the message names the pair and the call
                raise MeasureError(f"ncclCommInitRank for node-local ranks {min(me, peer)} and {max(me, peer)} "
                                   f"(GPUs {ctx.gpu_of[me]}, {ctx.gpu_of[peer]}) failed on rank {w.rank}: "
                                   f"{e}") from None
            pair = cls(lib, comm, w, me, peer, int(lib.get_version()), (time.perf_counter() - t0) * 1e3)
            pair.cpus = cpus
            bufs = ctx.buffers["legacy"]
            t0 = time.perf_counter()
            try:
                pair.transfer().enqueue(gpu, gpu.stream, bufs.src, bufs.inbox_slot(peer), CONNECT_BYTES)
                gpu.wait(what="the first NCCL send/receive of the pair")
            except Exception as e:  # noqa: BLE001 - no destroy: the peer may still wait in it; the job ends anyway
                raise MeasureError(f"the first ncclSend/ncclRecv between node-local ranks {me} and {peer} failed "
                                   f"on rank {w.rank}: {e}") from None
            pair.connect_ms = (time.perf_counter() - t0) * 1e3
        mine = capture_check(gpu, pair.version, bufs.src, bufs.inbox_slot(peer))
        theirs = w.exchange(mine, peer, tag=NCCL_TAG)
        pair.graphs = mine is None and theirs is None
        if not pair.graphs:
            pair.direct_why = (f"rank {w.rank}: {mine}" if mine else f"rank {ctx.world_rank(peer)}: {theirs}")
        return pair

    def transfer(self, order: str = "group") -> "NcclTransfer":
        return NcclTransfer(self, order)

    def describe(self) -> str:
        bound, wide = self.cpus
        room = (f"; set up on {wide} CPUs, then NCCL's threads back on this rank's {bound}" if wide > bound else "")
        return (f"NCCL {version_text(self.version)}, a 2-rank communicator per GPU pair (ncclCommInitRank "
                f"{self.init_ms:.0f} ms, first send/receive {self.connect_ms:.0f} ms{room})")

    def close(self) -> None:
        self.comm.destroy()


ORDERS = ("group", "send_recv", "recv_send")


class NcclTransfer:
    """What a rank enqueues through its pair's communicator, per transfer: a send from `src` and/or a
    receive into `dst` (None: the half this rank does not do), in one NCCL group ("group": they progress
    together; bidir sends and receives at once) or one after the other ("send_recv"/"recv_send": the two
    halves of a ping-pong round trip, the receive waiting for the peer's send). The transfer interface of
    core/methods.Method: `nodes`, `enqueue`, `batch`."""

    def __init__(self, pair: NcclPair, order: str = "group"):
        if order not in ORDERS:
            raise ValueError(f"unknown NCCL order {order!r} (known: {', '.join(ORDERS)})")
        self.pair, self.order = pair, order
        self.nodes = NODES_PER_CALL * (1 if order == "group" else 2)  # a group is one kernel launch

    def enqueue(self, gpu, stream, src: int | None, dst: int | None, nbytes: int, count: int = 1) -> None:
        p = self.pair
        lib, comm, peer, s, u8 = p.lib, p.comm, p.peer_rank, stream.ptr, p.lib.NCCL_UINT8
        for _ in range(count):
            if self.order == "group":
                lib.groupStart()
                try:
                    if src is not None:
                        comm.send(src, nbytes, u8, peer, s)
                    if dst is not None:
                        comm.recv(dst, nbytes, u8, peer, s)
                finally:
                    lib.groupEnd()
            elif self.order == "send_recv":
                comm.send(src, nbytes, u8, peer, s)
                comm.recv(dst, nbytes, u8, peer, s)
            else:
                comm.recv(dst, nbytes, u8, peer, s)
                comm.send(src, nbytes, u8, peer, s)

    def batch(self, gpu, src: int | None, dst: int | None, nbytes: int, count: int):
        """Collective over the pair: both ranks of the pair call this, in the same order, with the same counts
        (core/pair.py agrees every count). `count` transfers as CUDA graph launches where the pair agreed to
        capture (NcclPair.create), else enqueued directly (core/methods.StreamBatch); a capture that fails on
        either rank after the agreement ends both with an error."""
        p = self.pair
        if p.graphs:
            graph, err = None, None
            try:
                graph = GraphBatch(gpu, self, src, dst, nbytes, count, nodes=self.nodes)
            except Exception as e:  # noqa: BLE001 - NcclError or a CUDA capture error: both ranks must hear of it
                err = f"rank {p.world.rank}: {type(e).__name__}: {e}"
            theirs = p.world.exchange(err, p.peer, tag=NCCL_TAG)
            if err or theirs or graph is None:
                raise MeasureError(f"capturing ncclSend/ncclRecv into a CUDA graph failed after both ranks of the "
                                   f"pair had agreed to capture ({err or theirs}): NCCL leaves the communicator in "
                                   f"an undocumented state; rerun with {GRAPHS_ENV}=0")
            graph.note = "ncclSend/ncclRecv captured in CUDA graphs"
            return graph
        # More operations per call than a graph's: a smaller k, fixed for every count at or above the graph's
        # k, so batch_maker's segment-size key still tells when a new batch is needed. No warm-up transfer:
        # the pair connected with its first send/receive (NcclPair.create), and a warm-up would be a send
        # that must meet a receive.
        b = StreamBatch(gpu, self, src, dst, nbytes, count, nodes=self.nodes * DIRECT_FACTOR, warm=False)
        b.note = (f"no CUDA graph ({p.direct_why}): NCCL calls enqueued directly behind the gate, at most "
                  f"{b.k} per gated segment")
        return b


def pair_for(ctx, me: int, peer: int) -> NcclPair:
    """Collective over the pair: both ranks of the pair call this, in the same order. The communicator of this
    rank with `peer`, made on first use; the rank's first makes close_pairs its release at the end of the run
    (ctx.add_cleanup).
    """
    pairs = ctx.state.get("nccl_pairs")
    if pairs is None:
        pairs = ctx.state["nccl_pairs"] = {}
        ctx.add_cleanup(lambda: close_pairs(ctx))
    key = (min(me, peer), max(me, peer))
    if key not in pairs:
        pairs[key] = NcclPair.create(ctx, me, peer)
    return pairs[key]


def pair_transfer(ctx, me: int, peer: int) -> NcclTransfer:
    """Collective over the pair: both ranks of the pair call this, in the same order (pair_for).
    core/methods.Method.bind for the nccl engine: sends and receives grouped per transfer."""
    return pair_for(ctx, me, peer).transfer("group")


register_pair_transfer("nccl", pair_transfer)  # the nccl engine's binding, with core (which imports no ipc module)


def close_pairs(ctx) -> None:
    """Destroy this rank's communicators at the end of the run (ctx.clean_up, before the shared buffers their
    last calls touched): graphs holding NCCL work first, then every communicator in ascending pair order (the
    same on every rank)."""
    pairs = ctx.state.pop("nccl_pairs", {})
    if not pairs:
        return
    gc.collect()  # a graph of NCCL calls must go before its communicator
    ctx.gpu.wait(what="NCCL work before its communicators are destroyed")
    for key in sorted(pairs):
        pairs[key].close()


class NcclNode:
    """A communicator of every rank of the node, for the all-to-all (suites/alltoall.py): NCCL's own all-to-all is a
    group of ncclSend/ncclRecv to every peer on one communicator. Needs one rank per GPU (NCCL refuses two ranks of
    one GPU in one communicator: the `nccl_node` need, ipc/sharers.LIBRARIES). Its calls are enqueued directly behind
    the gate (core/methods.StreamBatch), never captured."""

    def __init__(self, lib, comm, world, inbox: dict[int, int], version: int, init_ms: float):
        self.lib, self.comm, self.world = lib, comm, world
        self.inbox = inbox  # node-local rank -> where its data lands here
        self.version, self.init_ms = version, init_ms
        self.connect_ms = 0.0
        self.nodes = NODES_PER_CALL * DIRECT_FACTOR  # one group is one kernel launch, enqueued directly

    @classmethod
    def create(cls, ctx) -> "NcclNode":
        """Collective over the node: every rank of the node calls this, in the same order. Unique id from local rank
        0, ncclCommInitRank on every rank, then one small all-to-all to connect every peer outside any timing."""
        lib = load()
        w, gpu = ctx.world, ctx.gpu
        bufs = ctx.buffers["legacy"]
        inbox = {p: bufs.inbox_slot(p) for p in range(w.local_size) if p != w.local_rank}
        uid = w.node_allgather(lib.get_unique_id() if w.local_rank == 0 else None, "the node's NCCL unique id")[0]
        with wider_cpus():  # NCCL's threads start in here (the module docstring: Threads)
            t0 = time.perf_counter()
            try:
                comm = lib.NcclCommunicator(w.local_size, uid, w.local_rank)
            except Exception as e:  # noqa: BLE001 - NcclError, or CUDA's: the message names the call
                raise MeasureError(f"ncclCommInitRank of the node's {w.local_size} ranks failed on rank {w.rank}: "
                                   f"{e}") from None
            node = cls(lib, comm, w, inbox, int(lib.get_version()), (time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            try:
                node.enqueue(gpu, gpu.stream, bufs.src, None, CONNECT_BYTES)
                gpu.wait(what="the node's first NCCL all-to-all")
            except Exception as e:  # noqa: BLE001 - the job ends anyway
                raise MeasureError(f"the first NCCL all-to-all failed on rank {w.rank}: {e}") from None
            node.connect_ms = (time.perf_counter() - t0) * 1e3
        return node

    def enqueue(self, gpu, stream, src: int, dst, nbytes: int, count: int = 1) -> None:
        """`count` all-to-alls: each one group of a send of `src` to every peer and a receive from every peer into
        its inbox slot here (`dst` unused: the slots are the node's)."""
        lib, comm, s, u8 = self.lib, self.comm, stream.ptr, self.lib.NCCL_UINT8
        for _ in range(count):
            lib.groupStart()
            try:
                for p, slot in self.inbox.items():
                    comm.send(src, nbytes, u8, p, s)
                    comm.recv(slot, nbytes, u8, p, s)
            finally:
                lib.groupEnd()

    def warm(self, gpu, stream, src: int, dst, nbytes: int) -> dict:
        """No un-gated warm-up: a send must meet its receive, and the node connected in create."""
        return {}

    def describe(self) -> str:
        return (f"NCCL {version_text(self.version)}, one group of ncclSend/ncclRecv to every peer on a communicator "
                f"of the node's ranks (ncclCommInitRank {self.init_ms:.0f} ms, first all-to-all "
                f"{self.connect_ms:.0f} ms)")

    def close(self) -> None:
        self.comm.destroy()


def node_for(ctx) -> NcclNode:
    """Collective over the node: the node's communicator, made on first use; destroyed at the end of the run
    (ctx.add_cleanup, after the pairs' communicators were made, so before them and before the shared buffers)."""
    node = ctx.state.get("nccl_node")
    if node is None:
        node = ctx.state["nccl_node"] = NcclNode.create(ctx)
        ctx.add_cleanup(lambda: ctx.state.pop("nccl_node").close())
    return node


def node_support(gpu_of: list[int]) -> tuple[bool, str | None]:
    """Whether the node's ranks can share one NCCL communicator: one rank per GPU."""
    if len(set(gpu_of)) < len(gpu_of):
        return False, (f"{len(gpu_of)} ranks on {len(set(gpu_of))} GPUs: NCCL refuses two ranks of one GPU in one "
                       f"communicator")
    return True, None
