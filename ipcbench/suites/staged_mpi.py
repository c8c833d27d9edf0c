"""mpi_staged: what an application without IPC does through MPI (suite `staged`).

D2H into pinned host slots (cudaHostAlloc), MPI Isend/Irecv on the node communicator, H2D on the
destination, chunked and pipelined by the Python ranks themselves (D2H of chunk k+S-1 overlaps the send
of chunk k; the receive of chunk k+S-1 overlaps the H2D of chunk k). Python is in this path by nature:
it is timed with host clocks from a busy-polled pair barrier to the last send (source) and to the last
H2D done (destination), and the longer of the two counts.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

import numpy as np

from ipcbench.core.poll import wait_until
from ipcbench.errors import StagedError
from ipcbench.ipc.shm import AGREE_TAG, agree, malloc_agreed
from ipcbench.suites.staged_plan import DATA_TAG, ChunkPlan

# CUDA and MPI are imported in the functions that measure: plans and the report import this (suites/registry.py).


def spin(done, timeout: float, what: str) -> None:
    """Busy-wait (no sleeps: this loop is the pipeline) until done(); StagedError after `timeout` s."""
    wait_until(done, timeout, what, max_sleep=0, error=StagedError)


class MpiPipe:
    """One pair's mpi_staged side: pinned host slots (cudaHostAlloc), events, the device buffer."""

    def __init__(self, ctx, role: str, peer: int, chunk: int, slots: int, max_bytes: int):
        self.ctx, self.role, self.peer = ctx, role, peer
        self.gpu = ctx.gpu
        self.chunk, self.slots = min(chunk, max_bytes), slots
        # set by open(), None (empty) before it and after close()
        self.host: Any = None  # pinned host slots (cudaHostAlloc)
        self.buf: Any = None  # device buffer
        self.views: list[Any] = []  # a numpy view per slot of the host buffer
        self.events: list[Any] = []  # a CuPy event per slot

    def open(self, max_bytes: int) -> None:
        import cupy
        from cupy.cuda import runtime

        w = self.ctx.world
        mine = (self.chunk, self.slots)
        theirs = w.exchange(mine, self.peer, AGREE_TAG)
        if theirs != mine:
            raise StagedError(f"mpi_staged: the pair disagrees on (chunk, slots): here {mine}, node-local rank "
                              f"{self.peer} {theirs} (set IPCBENCH_MPI_* alike on every rank)")
        err = None
        try:
            self.host = runtime.hostAlloc(self.chunk * self.slots, runtime.hostAllocDefault)
        except runtime.CUDARuntimeError as e:
            err = f"cudaHostAlloc({self.chunk * self.slots}) failed: {e}"
        agree(w, self.peer, err, "mpi_staged pinned host buffer")
        whole = (ctypes.c_ubyte * (self.chunk * self.slots)).from_address(self.host)
        arr = np.frombuffer(whole, dtype=np.uint8)  # type: ignore[call-overload]  # (a ctypes array is a buffer)
        self.views = [arr[i * self.chunk:(i + 1) * self.chunk] for i in range(self.slots)]
        self.events = [cupy.cuda.Event(disable_timing=True) for _ in range(self.slots)]
        self.buf = malloc_agreed(self.ctx, self.peer, max_bytes, "mpi_staged device buffer")

    def close(self) -> None:
        from cupy.cuda import runtime

        problems = []
        idle = True
        try:
            self.gpu.wait(what="mpi_staged work before cleanup")
        except Exception as e:
            idle = False
            problems.append(str(e))
        self.views, self.events = [], []
        if idle:
            if self.host is not None:
                try:
                    runtime.freeHost(self.host)
                except runtime.CUDARuntimeError as e:
                    problems.append(f"cudaFreeHost failed: {e}")
            if self.buf is not None:
                self.gpu.free(self.buf)
        self.host = self.buf = None
        if problems:
            raise StagedError("mpi_staged cleanup: " + "; ".join(problems))

    def run(self, plan: ChunkPlan, count: int) -> float:
        """count transfers (count * n_chunks chunks through the slots); the longer side's elapsed ms."""
        w, peer = self.ctx.world, self.peer
        spans = plan.spans()
        total = count * len(spans)
        what = f"node-local rank {peer} (mpi_staged)"
        # the loop of this side, made before the timed region (imports, streams, requests: none of it timed)
        chunks = (self._sender if self.role == "src" else self._receiver)(spans, total, what)
        theirs = w.tight_exchange(count, peer, what)
        if theirs != count:
            raise StagedError(f"mpi_staged: batch of {count} here, {theirs} on node-local rank {peer}")
        t0 = time.perf_counter()
        chunks()
        mine = (time.perf_counter() - t0) * 1e3
        other = w.exchange(mine, peer, AGREE_TAG)
        return max(mine, other)

    def _sender(self, spans: list, total: int, what: str):
        """The source's side of `total` chunks, as a loop to time: each copied device to host into a slot, sent from
        there once its copy is done; a slot is refilled once its send has completed (S slots in flight)."""
        from cupy.cuda import runtime
        from mpi4py import MPI

        comm, peer, S, n, to = self.ctx.world.node, self.peer, self.slots, len(spans), self.ctx.world.timeout
        stream = self.gpu.stream
        sp = stream.ptr
        views, events, buf, host, chunk = self.views, self.events, self.buf, self.host, self.chunk
        reqs: list[Any] = [None] * S

        def d2h(g):
            s = g % S
            off, ln = spans[g % n]
            runtime.memcpyAsync(host + s * chunk, buf + off, ln, runtime.memcpyDeviceToHost, sp)
            events[s].record(stream)

        def loop():
            for g in range(min(S, total)):
                d2h(g)
            for g in range(total):
                s = g % S
                ev = events[s]
                spin(lambda: ev.done, to, "a D2H copy")
                reqs[s] = comm.Isend([views[s][:spans[g % n][1]], MPI.BYTE], dest=peer, tag=DATA_TAG)
                nxt = g - 1 + S
                if g >= 1 and nxt < total:
                    spin(reqs[(g - 1) % S].Test, to, what)
                    d2h(nxt)
            for r in reqs:
                if r is not None:
                    spin(r.Test, to, what)

        return loop

    def _receiver(self, spans: list, total: int, what: str):
        """The destination's side, as a loop to time: S receives posted, each chunk copied host to device from its
        slot once it arrived; a slot is posted again once its copy is done."""
        from cupy.cuda import runtime
        from mpi4py import MPI

        comm, peer, S, n, to = self.ctx.world.node, self.peer, self.slots, len(spans), self.ctx.world.timeout
        stream = self.gpu.stream
        sp = stream.ptr
        views, events, buf, host, chunk = self.views, self.events, self.buf, self.host, self.chunk
        reqs: list[Any] = [None] * S

        def post(g):
            s = g % S
            reqs[s] = comm.Irecv([views[s][:spans[g % n][1]], MPI.BYTE], source=peer, tag=DATA_TAG)

        def loop():
            for g in range(min(S, total)):
                post(g)
            for g in range(total):
                s = g % S
                spin(reqs[s].Test, to, what)
                off, ln = spans[g % n]
                runtime.memcpyAsync(buf + off, host + s * chunk, ln, runtime.memcpyHostToDevice, sp)
                events[s].record(stream)
                nxt = g - 1 + S
                if g >= 1 and nxt < total:
                    ev = events[(g - 1) % S]
                    spin(lambda: ev.done, to, "an H2D copy")
                    post(nxt)
            last = events[(total - 1) % S]
            spin(lambda: last.done, to, "the last H2D copy")

        return loop

    def timed(self, plan: ChunkPlan, count: int) -> tuple[float, int]:
        """`count` transfers on both ranks: (the longer side's ms, transfers done)."""
        return self.run(plan, count), count
