"""shm_staged: the strong host baseline, pipelined through pinned POSIX shared memory (suite `staged`).

The source rank's side and the destination rank's side each capture their half of the pipeline into a
CUDA graph:
  source:      [wait free[s]]  D2H chunk -> slot s   [post full[s]]
  destination: [wait full[s]]  H2D slot s -> inbox   [post free[s]]
with slots used round-robin, so the D2H of chunk k+1 overlaps the H2D of chunk k. Waits and posts are
one-thread kernels (kernels/flags.cu) on host-mapped flags that only ever grow; a wait gives up after
FLAG_TIMEOUT_S and sets a shared abort word, so nothing can hang. Each side enqueues its graph launches
behind its own gate, the ranks meet at a busy-polled pair barrier, both release, and the time per transfer
is the longer of the two sides' event-timed spans / count. No Python in the timed region.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ipcbench.core.methods import plan_segments
from ipcbench.errors import StagedError
from ipcbench.ipc.shm import (AGREE_TAG, FLAG_BYTES, ShmSegment, agree, host_register, host_unregister,
                              malloc_agreed, open_pair_segment)
from ipcbench.suites.staged_plan import (ABORT_WORD, FLAG_TIMEOUT_S, FREE_WORD, FULL_WORD, MAX_SLOTS, STATUS_WORD,
                                         TIMEOUT_CODE, ChunkPlan, shm_layout, slot_of)

# CUDA and MPI are imported in the functions that measure: plans and the report import this (suites/registry.py).


@dataclass
class ShmBatch:
    count: int
    graph: Any  # a CuPy graph
    segments: int  # gated segments of one graph launch each


class ShmPipe:
    """One pair's shm_staged pipeline (this rank's side): segment, registration, device buffers, graphs."""

    def __init__(self, ctx, role: str, peer: int, chunk: int, slots: int, max_bytes: int):
        self.ctx, self.role, self.peer = ctx, role, peer
        self.gpu = ctx.gpu
        self.chunk, self.slots = min(chunk, max_bytes), slots
        self.size, self.slot_bytes = shm_layout(self.chunk, slots)
        self.seg: ShmSegment | None = None
        self.registered = False
        # set by open(), None before it and after close()
        self.buf: Any = None  # device: the source (src) or the inbox (dst)
        self.seq: Any = None  # device: this side's per-slot use counters
        self.words: Any = None  # the segment's flag words (ShmSegment.words)
        self._graphs: dict[tuple[int, int], ShmBatch] = {}

    def open(self, max_bytes: int) -> None:
        w = self.ctx.world
        mine = (self.chunk, self.slots, self.size)
        theirs = w.exchange(mine, self.peer, AGREE_TAG)
        if theirs != mine:
            raise StagedError(f"shm_staged: the pair disagrees on the staging layout (chunk, slots, bytes): "
                              f"here {mine}, node-local rank {self.peer} {theirs} (set IPCBENCH_SHM_* alike "
                              f"on every rank)")
        self.seg = open_pair_segment(w, self.peer, self.role == "src", self.size)
        err = None
        try:
            host_register(self.gpu, self.seg.addr, self.size, "shared staging buffer")
            self.registered = True
        except StagedError as e:
            err = str(e)
        agree(w, self.peer, err, "pinning the shared staging buffer")
        self.words = self.seg.words()
        self.buf = malloc_agreed(self.ctx, self.peer, max_bytes, "shm_staged device buffer")
        self.seq = malloc_agreed(self.ctx, self.peer, 4 * MAX_SLOTS, "shm_staged counters")
        from cupy.cuda import runtime

        runtime.memset(self.seq, 0, 4 * MAX_SLOTS)
        # Load the flag kernels before any capture.
        self._wait_fn = self.gpu.function("flags", "flag_wait")
        self._post_fn = self.gpu.function("flags", "flag_post")
        self._post_wait_fn = self.gpu.function("flags", "flag_post_wait")
        w.pair_barrier(self.peer, AGREE_TAG)

    def close(self) -> None:
        """Undo open(), in order: GPU idle, unregister, unmap; device memory freed last."""
        self._graphs.clear()
        problems = []
        idle = True
        try:
            self.gpu.wait(what="shm_staged work before cleanup", timeout=FLAG_TIMEOUT_S * 3 + 30)
        except Exception as e:
            idle = False
            problems.append(str(e))
        if self.seg is not None:
            if self.registered and idle:
                p = host_unregister(self.seg.addr)
                if p:
                    problems.append(p)
                else:
                    self.registered = False
            self.words = None
            if not self.registered:
                self.seg.close()  # never unmap memory the GPU may still have pinned
            else:
                self.seg.unlink()
        for ptr in (self.buf, self.seq):
            if ptr is not None and idle:
                self.gpu.free(ptr)
        self.buf = self.seq = None
        if problems:
            raise StagedError("shm_staged cleanup: " + "; ".join(problems))

    # ---- graphs ----
    def _slot_addr(self, s: int) -> int:
        assert self.seg is not None  # open()
        return self.seg.addr + FLAG_BYTES + s * self.slot_bytes

    def _flag_addr(self, word: int) -> int:
        assert self.seg is not None  # open()
        return self.seg.addr + 4 * word

    def _enqueue_chunks(self, stream, chunks: list[tuple[int, int, int]]) -> None:
        """Enqueue (capture) this side's pipeline for `chunks` = [(slot, offset, length)], in order:
        wait(slot 0)  copy 0  post(0)+wait(1)  copy 1  ...  copy n-1  post(n-1)."""
        from cupy.cuda import runtime

        timeout_ns = np.uint64(int(FLAG_TIMEOUT_S * 1e9))
        abort = np.uint64(self._flag_addr(ABORT_WORD))
        status = np.uint64(self._flag_addr(STATUS_WORD[self.role]))
        code = np.uint32(TIMEOUT_CODE[self.role])
        if self.role == "src":  # wait for a free slot, D2H into it, publish it full
            wait_base, post_base, plus, kind = FREE_WORD, FULL_WORD, 0, runtime.memcpyDeviceToHost
        else:  # wait for a full slot, H2D out of it, publish it free
            wait_base, post_base, plus, kind = FULL_WORD, FREE_WORD, 1, runtime.memcpyHostToDevice
        plus = np.uint32(plus)

        def flag(base, s):
            return np.uint64(self._flag_addr(base + 16 * s))

        def seq(s):
            return np.uint64(self.seq + 4 * s)

        with stream:
            s0 = chunks[0][0]
            self._wait_fn((1,), (32,), (flag(wait_base, s0), seq(s0), plus, abort, status, code, timeout_ns))
            for i, (s, off, ln) in enumerate(chunks):
                slot = self._slot_addr(s)
                if self.role == "src":
                    runtime.memcpyAsync(slot, self.buf + off, ln, kind, stream.ptr)
                else:
                    runtime.memcpyAsync(self.buf + off, slot, ln, kind, stream.ptr)
                if i + 1 < len(chunks):
                    n = chunks[i + 1][0]
                    self._post_wait_fn((1,), (32,), (flag(post_base, s), seq(s), flag(wait_base, n), seq(n), plus,
                                                     abort, status, code, timeout_ns))
                else:
                    self._post_fn((1,), (32,), (flag(post_base, s), seq(s)))

    def batch(self, plan: ChunkPlan, count: int) -> ShmBatch:
        """`count` (or slightly more) transfers: a graph of k transfers, launched `segments` times. Cached."""
        key = (plan.nbytes, count)
        b = self._graphs.get(key)
        if b is not None:
            return b
        self._graphs = {k: v for k, v in self._graphs.items() if k[0] == plan.nbytes}  # one size at a time
        n = plan.n_chunks
        k, segments = plan_segments(count, 2 * n + 1)
        spans = plan.spans()
        chunks = [(slot_of(t * n + j, self.slots), off, ln) for t in range(k) for j, (off, ln) in enumerate(spans)]
        stream = self.gpu.stream
        stream.begin_capture()
        try:
            self._enqueue_chunks(stream, chunks)
        finally:
            graph = stream.end_capture()
        graph.upload(stream)  # so that no launch behind a gate has to build the executable graph first
        self.gpu.wait(stream, what="uploading a shm_staged graph")
        b = ShmBatch(k * segments, graph, segments)
        self._graphs[key] = b
        return b

    # ---- one timed run (both ranks, same batch) ----
    def run(self, b: ShmBatch) -> float:
        """Both ranks, per segment: gate, events around one graph launch, meet, release, wait.

        Returns the longer side's total GPU time in ms (each side's segment times add up)."""
        import cupy

        gpu, w = self.gpu, self.ctx.world
        stream = gpu.stream
        limit = max(60.0, 20 * self.ctx.rule.min_time_s + 3 * FLAG_TIMEOUT_S + 30)
        mine = 0.0
        for _ in range(b.segments):
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            ticket = gpu.gate(stream)
            start.record(stream)
            b.graph.launch(stream)
            stop.record(stream)
            theirs = w.tight_exchange(b.count, self.peer, f"node-local rank {self.peer} (shm_staged)")
            gpu.release(ticket)
            if theirs != b.count:
                # Only if the ranks diverged: the flag waits then time out and set the abort word; let them.
                try:
                    gpu.wait(stream, timeout=limit, what="an aborted shm_staged batch")
                except Exception:
                    pass
                raise StagedError(f"shm_staged: batch of {b.count} here, {theirs} on node-local rank {self.peer}")
            gpu.wait(stream, timeout=limit, what="a shm_staged batch")
            if gpu.gate_timed_out(ticket):
                raise StagedError("the gate kernel timed out before the shm_staged batch was enqueued "
                                  "(host too slow?)")
            if self.words[ABORT_WORD]:
                who = [r for r in ("src", "dst") if self.words[STATUS_WORD[r]]]
                what = {"src": "the source waiting for a free slot",
                        "dst": "the destination waiting for a full slot"}
                raise StagedError("shm_staged: a flag wait timed out after "
                                  f"{FLAG_TIMEOUT_S:.0f} s ({', '.join(what[r] for r in who) or 'unknown side'})")
            mine += cupy.cuda.get_elapsed_time(start, stop)
        other = w.exchange(mine, self.peer, AGREE_TAG)
        return max(mine, other)

    def timed(self, plan: ChunkPlan, count: int) -> tuple[float, int]:
        """About `count` transfers on both ranks: (the longer side's ms, transfers done)."""
        b = self.batch(plan, count)
        return self.run(b), b.count
