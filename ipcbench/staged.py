"""Host-staged transfers: the paths an application takes without CUDA IPC (suite `staged`).

Both move `nbytes` from the source rank's device memory into the destination rank's device memory
through host memory, one ordered pair at a time, and are the baseline that every IPC method's speedup
is measured against, so both are made as fast as an honest application could make them.

shm_staged (the strong baseline; no Python in the timed region)
    The source rank creates a POSIX shared-memory segment (/dev/shm, mode 0600, unlinked as soon as
    both ranks mapped it) of `slots` chunk buffers plus a flag page; both ranks pin it with
    cudaHostRegister(Portable|Mapped). Each side captures its half of the pipeline into a CUDA graph:
      source:      [wait free[s]]  D2H chunk -> slot s   [post full[s]]
      destination: [wait full[s]]  H2D slot s -> inbox   [post free[s]]
    with slots used round-robin, so the D2H of chunk k+1 overlaps the H2D of chunk k. The waits and
    posts are one-thread kernels (kernels/flags.cu) on host-mapped flags that only ever grow; a wait
    gives up after FLAG_TIMEOUT_S and sets a shared abort word, so nothing can hang. Each side enqueues
    its graph launches behind its own gate, the two ranks meet at a (busy-polled) pair barrier, both
    release, and the time per transfer is the longer of the two sides' event-timed spans / count.

mpi_staged (what an application without IPC does through MPI)
    D2H into pinned host slots (cudaHostAlloc), MPI Isend/Irecv on the node communicator, H2D on the
    destination, chunked and pipelined by the Python ranks themselves (D2H of chunk k+S-1 overlaps the
    send of chunk k; the receive of chunk k+S-1 overlaps the H2D of chunk k). Python is in this path
    by nature; it is timed with host clocks from a busy-polled pair barrier to the last send (source)
    and to the last H2D done (destination), and the longer of the two counts.

Both fill the source with seed_for(source world rank, size, sample, label), poison the destination
and verify it after every sample (DESIGN.md rule 3), like measure.measure_pair.

Tuning knobs (environment, the same on every rank): IPCBENCH_SHM_CHUNK (default 16M),
IPCBENCH_SHM_SLOTS (3), IPCBENCH_MPI_CHUNK (4M), IPCBENCH_MPI_SLOTS (3).
"""

from __future__ import annotations

import ctypes
import math
import mmap
import os
import secrets
import time
from contextlib import contextmanager
from dataclasses import dataclass

from .sizes import SizeError, fmt_size, parse_size

MiB = 1 << 20
# H200 pair, 64M/256M, this pipeline (2026-11-22): 8M x 3 slots 49.0-49.2 GB/s, 8M x 2 48.5-48.8,
# 16M x 2 50.5-50.8, 16M x 3 50.7-51.0 (one-process probe in TESTBED: 3 x 8M best at 52.2).
SHM_CHUNK = 16 * MiB
SHM_SLOTS = 3
# mpi_staged, same pair (Open MPI 4.1.6): 4M x 3 7.0-7.7 GB/s, 2M x 4 7.0-7.6, 1M x 3 5.8-6.3,
# 16M x 3 5.5-7.1, unchunked 5.1-5.3 (the naive blocking path: 6): chunked 4M it is.
MPI_CHUNK = 4 * MiB
MPI_SLOTS = 3
MAX_SLOTS = 16
MAX_CHUNK = 1 << 30

SHM_DIR = "/dev/shm"
SHM_PREFIX = "ipcbench-"
PAGE = 4096
FLAG_BYTES = 1 << 16  # flag page(s) at the start of the segment; chunk buffers start 64 KiB in
# uint32 word indices inside the flag area (64 bytes apart)
FULL_WORD = 0  # + 16 * slot
FREE_WORD = 256  # + 16 * slot
ABORT_WORD = 512
STATUS_WORD = {"src": 528, "dst": 544}
TIMEOUT_CODE = {"src": 1, "dst": 2}  # which wait timed out (written into that side's status word)

FLAG_TIMEOUT_S = 10.0
# Stream operations (graph nodes: copies and flag kernels) queued behind one gate. Thousands of queued
# operations can fill the channel's push buffer while the gate holds the stream (measure.py/methods.py:
# 5,120 small copies did on an H200 pair), so a sample is several gated segments, each one graph launch
# of at most this many nodes (unless one transfer alone needs more), whose GPU times add up.
MAX_QUEUED_NODES = 512

SHM_TAG = 31  # world.exchange tags used here (pair-local, strictly alternating)
AGREE_TAG = 32
BARRIER_TAG = 4241  # busy-polled pair barrier
DATA_TAG = 4242  # mpi_staged chunks

HOST_REGISTER_PORTABLE = 1  # cudaHostRegisterPortable
HOST_REGISTER_MAPPED = 2  # cudaHostRegisterMapped


class StagedError(RuntimeError):
    """A failure of a host-staged path (shm segment, registration, a flag wait that timed out)."""


# ---- planning (pure functions) ---------------------------------------------------------------
@dataclass(frozen=True)
class ChunkPlan:
    """How one message of `nbytes` is cut into chunks that cycle through `slots` staging buffers."""

    nbytes: int
    chunk: int  # bytes per chunk (the last one may be shorter)
    slots: int

    @property
    def n_chunks(self) -> int:
        return -(-self.nbytes // self.chunk)

    def spans(self) -> list[tuple[int, int]]:
        """(offset, length) of every chunk of one message."""
        return [(o, min(self.chunk, self.nbytes - o)) for o in range(0, self.nbytes, self.chunk)]

    def describe(self) -> str:
        n = self.n_chunks
        return f"{n} chunk{'s' if n > 1 else ''} of {fmt_size(self.chunk)} through {self.slots} slots"


def plan_chunks(nbytes: int, chunk_max: int, slots: int) -> ChunkPlan:
    """chunk = min(nbytes, chunk_max): a small message is one chunk; a large one ceil(n / chunk_max)."""
    if nbytes <= 0:
        raise ValueError(f"message size must be positive (got {nbytes})")
    if not (0 < chunk_max <= MAX_CHUNK):
        raise ValueError(f"chunk size must be in 1..{MAX_CHUNK} bytes (got {chunk_max})")
    if not (1 <= slots <= MAX_SLOTS):
        raise ValueError(f"slots must be in 1..{MAX_SLOTS} (got {slots})")
    return ChunkPlan(nbytes, min(nbytes, chunk_max), slots)


def slot_of(chunk_index: int, slots: int) -> int:
    """Chunks use the slots round-robin, across message boundaries too (so small messages pipeline)."""
    return chunk_index % slots


def plan_graph(count: int, nodes_per_transfer: int, node_budget: int = MAX_QUEUED_NODES) -> tuple[int, int]:
    """(k, segments): a graph of k transfers (at most node_budget nodes, at least one transfer), launched
    once per gated segment, `segments` times; k * segments >= count."""
    if count < 1 or nodes_per_transfer < 1:
        raise ValueError("count and nodes_per_transfer must be >= 1")
    k = min(count, max(1, node_budget // nodes_per_transfer))
    return k, -(-count // k)


def calibrated_count(per_ms: float, min_time_s: float, max_count: int) -> int:
    """Transfers per sample so that a sample lasts about min_time_s (at least one)."""
    target_ms = min_time_s * 1e3
    return int(max(1, min(max_count, math.ceil(target_ms / max(per_ms, 1e-5)))))


def probe_count(per_ms: float, min_time_s: float, max_count: int) -> int | None:
    """A second, longer calibration run when one transfer is far shorter than a sample (as measure.calibrate)."""
    target_ms = min_time_s * 1e3
    if per_ms >= target_ms / 20:
        return None
    c = int(min(max_count, max(2, math.ceil(target_ms / 20 / max(per_ms, 1e-4)))))
    return min(c, 4096)


def shm_layout(chunk: int, slots: int) -> tuple[int, int]:
    """(segment bytes, bytes per slot): a flag area, then `slots` page-aligned chunk buffers."""
    per_slot = -(-chunk // PAGE) * PAGE
    return FLAG_BYTES + slots * per_slot, per_slot


def staged_params(env: dict | None = None) -> dict[str, int]:
    """Chunk sizes and slot counts from the environment (IPCBENCH_{SHM,MPI}_{CHUNK,SLOTS}) or defaults."""
    env = os.environ if env is None else env
    out = {}
    for key, default, kind in (("IPCBENCH_SHM_CHUNK", SHM_CHUNK, "size"), ("IPCBENCH_SHM_SLOTS", SHM_SLOTS, "int"),
                               ("IPCBENCH_MPI_CHUNK", MPI_CHUNK, "size"), ("IPCBENCH_MPI_SLOTS", MPI_SLOTS, "int")):
        text = env.get(key)
        if text is None or not text.strip():
            value = default
        else:
            try:
                value = parse_size(text) if kind == "size" else int(text)
            except (SizeError, ValueError):
                raise ValueError(f"{key}={text!r} is not a valid {'size' if kind == 'size' else 'number'}") from None
        if kind == "int" and not (1 <= value <= MAX_SLOTS):
            raise ValueError(f"{key}={value}: slots must be in 1..{MAX_SLOTS}")
        if kind == "size" and not (0 < value <= MAX_CHUNK):
            raise ValueError(f"{key}={value}: chunk must be in 1..{MAX_CHUNK} bytes")
        out[key[len("IPCBENCH_"):].lower()] = value
    return out


# ---- pair agreement --------------------------------------------------------------------------
def agree(world, peer: int, error: str | None, what: str, tag: int = AGREE_TAG) -> None:
    """Both ranks of a pair learn whether either failed `what`; both raise if one did (no one-sided hang)."""
    theirs = world.exchange(error, peer, tag)
    if error:
        raise StagedError(f"{what}: {error}")
    if theirs:
        raise StagedError(f"{what} failed on node-local rank {peer}: {theirs}")


# ---- the shared-memory segment ---------------------------------------------------------------
class ShmSegment:
    """A POSIX shared-memory file in /dev/shm, mapped read-write into this process.

    `addr` is the mapping's address (for cudaHostRegister and ctypes views). The creator unlinks the
    name as soon as the peer has mapped it, so nothing is left behind even if a rank dies later.
    """

    def __init__(self, name: str, mm: mmap.mmap, size: int, creator: bool, directory: str):
        self.name = name
        self.size = size
        self.creator = creator
        self.directory = directory
        self._mm = mm
        self._anchor = ctypes.c_char.from_buffer(mm)  # pins the buffer export; dropped in close()
        self.addr = ctypes.addressof(self._anchor)
        self.unlinked = not creator

    @property
    def path(self) -> str:
        return os.path.join(self.directory, self.name)

    @classmethod
    def create(cls, size: int, directory: str = SHM_DIR) -> "ShmSegment":
        try:
            st = os.statvfs(directory)
        except OSError as e:
            raise StagedError(f"cannot use {directory} for the staging buffer: {e.strerror or e}") from None
        free = st.f_bavail * st.f_frsize
        if size > free:
            raise StagedError(f"{directory} has {free / MiB:.0f} MiB free but the staging buffer needs "
                              f"{size / MiB:.0f} MiB (enlarge it, e.g. docker --shm-size, or lower "
                              f"IPCBENCH_SHM_CHUNK / IPCBENCH_SHM_SLOTS)")
        name = f"{SHM_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise StagedError(f"cannot create {path}: {e.strerror or e}") from None
        try:
            try:
                # Reserve the pages now: a full tmpfs fails here instead of with SIGBUS on first touch.
                os.posix_fallocate(fd, 0, size)
                mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
        except OSError as e:
            _unlink_quietly(path)
            raise StagedError(f"cannot allocate {size / MiB:.1f} MiB in {path}: {e.strerror or e}") from None
        return cls(name, mm, size, True, directory)

    @classmethod
    def attach(cls, name: str, size: int, directory: str = SHM_DIR) -> "ShmSegment":
        if not name.startswith(SHM_PREFIX) or "/" in name or name in (".", ".."):
            raise StagedError(f"refusing to open a staging segment named {name!r}")
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            raise StagedError(f"cannot open {path}: {e.strerror or e}") from None
        try:
            have = os.fstat(fd).st_size
            if have < size:
                raise StagedError(f"{path} holds {have} bytes, expected at least {size}")
            try:
                mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            except OSError as e:
                raise StagedError(f"cannot map {path}: {e.strerror or e}") from None
        finally:
            os.close(fd)
        return cls(name, mm, size, False, directory)

    def words(self, count: int = FLAG_BYTES // 4):
        """uint32 view of the start of the segment (the flag area); valid until close()."""
        return (ctypes.c_uint32 * count).from_address(self.addr)

    def unlink(self) -> None:
        if not self.unlinked:
            self.unlinked = True
            _unlink_quietly(self.path)

    def close(self) -> None:
        self.unlink()
        if self._mm is not None:
            self._anchor = None
            self._mm.close()
            self._mm = None

    @property
    def closed(self) -> bool:
        return self._mm is None


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def open_pair_segment(world, peer: int, creator: bool, size: int, directory: str = SHM_DIR,
                      tag: int = SHM_TAG) -> ShmSegment:
    """Create (creator) or attach (the other rank) one segment shared by a pair; unlinked on return.

    Two exchanges, made by both ranks whatever happens, so a failure on either side makes both raise:
    1. the creator sends the name (or its error); 2. the other rank answers "mapped" (or its error).
    The creator unlinks the name after step 2, in every case.
    """
    if creator:
        seg, err = None, None
        try:
            seg = ShmSegment.create(size, directory)
        except StagedError as e:
            err = str(e)
        try:
            world.exchange(("err", err) if seg is None else ("name", seg.name), peer, tag)
            reply = world.exchange(None, peer, tag)
        except BaseException:
            if seg is not None:
                seg.close()
            raise
        if seg is None:
            raise StagedError(f"shared staging buffer: {err}")
        seg.unlink()
        if not reply or reply[0] != "ok":
            seg.close()
            raise StagedError(f"node-local rank {peer} could not map the shared staging buffer: "
                              f"{reply[1] if reply else 'no answer'}")
        return seg
    first = world.exchange(None, peer, tag)
    seg, err = None, None
    if first and first[0] == "name":
        try:
            seg = ShmSegment.attach(first[1], size, directory)
        except StagedError as e:
            err = str(e)
    else:
        err = f"node-local rank {peer} could not create it: {first[1] if first else 'no answer'}"
    try:
        world.exchange(("ok",) if seg is not None else ("err", err), peer, tag)
    except BaseException:
        if seg is not None:
            seg.close()
        raise
    if seg is None:
        raise StagedError(f"shared staging buffer: {err}")
    return seg


@contextmanager
def pair_segment(world, peer: int, creator: bool, size: int, directory: str = SHM_DIR):
    """open_pair_segment as a context manager: the mapping is closed however the block ends."""
    seg = open_pair_segment(world, peer, creator, size, directory)
    try:
        yield seg
    finally:
        seg.close()


# ---- busy-polled pair barrier ----------------------------------------------------------------
def tight_barrier(comm, peer: int, value: int, timeout: float, what: str) -> int:
    """Swap one int with the peer, busy-polling (no sleeps), so both leave within MPI latency.

    world.exchange sleeps between polls (up to 0.5 ms), which would skew the two sides' start of a
    timed region; this does not. Returns the peer's value.
    """
    import numpy as np
    from mpi4py import MPI

    sbuf = np.array([value], dtype=np.int64)
    rbuf = np.zeros(1, dtype=np.int64)
    rreq = comm.Irecv([rbuf, MPI.INT64_T], source=peer, tag=BARRIER_TAG)
    sreq = comm.Isend([sbuf, MPI.INT64_T], dest=peer, tag=BARRIER_TAG)
    spin(rreq.Test, timeout, what)
    spin(sreq.Test, timeout, what)
    return int(rbuf[0])


def spin(done, timeout: float, what: str) -> None:
    """Busy-wait until done() is true; StagedError after `timeout` seconds."""
    if done():
        return
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise StagedError(f"timed out after {timeout:.0f} s waiting for {what}")


# ---- GPU side (imports CUDA lazily so the pure parts above need no GPU) -----------------------
def host_register(gpu, addr: int, size: int, what: str) -> None:
    """cudaHostRegister(Portable|Mapped); with UVA the host address is then valid on the device."""
    from cupy.cuda import runtime

    try:
        same = runtime.deviceGetAttribute(runtime.cudaDevAttrCanUseHostPointerForRegisteredMem, gpu.index)
    except runtime.CUDARuntimeError as e:
        raise StagedError(f"GPU {gpu.index}: cannot query host-pointer support: {e}") from None
    if not same:
        raise StagedError(f"GPU {gpu.index} cannot use host pointers of registered memory on the device "
                          f"(cudaDevAttrCanUseHostPointerForRegisteredMem = 0)")
    try:
        runtime.hostRegister(addr, size, HOST_REGISTER_PORTABLE | HOST_REGISTER_MAPPED)
    except runtime.CUDARuntimeError as e:
        raise StagedError(f"GPU {gpu.index}: cudaHostRegister of the {what} ({size / MiB:.1f} MiB) "
                          f"failed: {e}") from None


def host_unregister(addr: int) -> str | None:
    from cupy.cuda import runtime

    try:
        runtime.hostUnregister(addr)
        return None
    except runtime.CUDARuntimeError as e:
        return f"cudaHostUnregister failed: {e}"


def _malloc_agreed(ctx, peer: int, nbytes: int, what: str) -> int | None:
    """gpu.malloc on this rank, agreed with the peer (both raise if either failed)."""
    ptr, err = None, None
    try:
        ptr = ctx.gpu.malloc(nbytes)
    except Exception as e:  # GpuError: out of memory
        err = str(e)
    try:
        agree(ctx.world, peer, err, what)
    except BaseException:
        if ptr is not None:
            ctx.gpu.free(ptr)
        raise
    return ptr


@dataclass
class ShmBatch:
    count: int
    graph: object
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
        self.buf = None  # device: the source (src) or the inbox (dst)
        self.seq = None  # device: this side's per-slot use counters
        self.words = None
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
        self.buf = _malloc_agreed(self.ctx, self.peer, max_bytes, "shm_staged device buffer")
        self.seq = _malloc_agreed(self.ctx, self.peer, 4 * MAX_SLOTS, "shm_staged counters")
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
        return self.seg.addr + FLAG_BYTES + s * self.slot_bytes

    def _flag_addr(self, word: int) -> int:
        return self.seg.addr + 4 * word

    def _enqueue_chunks(self, stream, chunks: list[tuple[int, int, int]]) -> None:
        """Enqueue (capture) this side's pipeline for `chunks` = [(slot, offset, length)], in order:
        wait(slot 0)  copy 0  post(0)+wait(1)  copy 1  ...  copy n-1  post(n-1)."""
        import numpy as np
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
        k, segments = plan_graph(count, 2 * n + 1)
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
        limit = max(60.0, 20 * self.ctx.opts.min_time_s + 3 * FLAG_TIMEOUT_S + 30)
        mine = 0.0
        for _ in range(b.segments):
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            ticket = gpu.gate(stream)
            start.record(stream)
            b.graph.launch(stream)
            stop.record(stream)
            theirs = tight_barrier(w.node, self.peer, b.count, w.timeout, f"node-local rank {self.peer} (shm_staged)")
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


def _pair_sweep(ctx, suite: str, method: str, src: int, dst: int, sizes: list[int], timed, buf: int,
                make_plan, note_fn) -> list:
    """Calibrate, sample, verify and (on src) build the rows, for either method.

    `timed(plan, count)` runs one batch on both ranks and returns (the longer side's ms, transfers done);
    both ranks get the same value, so their calibration arithmetic agrees. `buf` is this rank's device
    buffer: the source on src, the inbox on dst.
    """
    from .measure import make_row
    from .stats import poison_seed, seed_for

    w, gpu, opts = ctx.world, ctx.gpu, ctx.opts
    me = w.local_rank
    peer = dst if me == src else src
    label = f"{suite}/{method}/push"
    rows = []
    for nbytes in sizes:
        plan = make_plan(nbytes)
        for _ in range(opts.warmup):
            timed(plan, 1)
        ms, n = timed(plan, 1)
        per_ms = ms / n
        c = probe_count(per_ms, opts.min_time_s, opts.max_count)
        if c is not None:
            timed(plan, c)
            ms, n = timed(plan, c)
            per_ms = ms / n
        count = calibrated_count(per_ms, opts.min_time_s, opts.max_count)
        theirs = w.exchange(count, peer, AGREE_TAG)
        if me == dst:
            count = theirs  # the source decides (both computed the same number anyway)
        per_us, bad, done = [], 0, 0
        for s in range(opts.samples):
            seed = seed_for(ctx.world_rank(src), nbytes, s, label)
            gpu.fill(buf, nbytes, seed if me == src else poison_seed(seed))
            gpu.wait(what="fill/poison")
            ms, done = timed(plan, count)
            per_us.append(ms * 1e3 / done)
            if me == dst and opts.verify:
                bad += gpu.verify(buf, nbytes, seed)
        bad += w.exchange(bad, peer, AGREE_TAG)  # only the destination counted
        if me == src:
            rows.append(make_row(ctx, suite, method, "push", src, dst, nbytes, done, per_us, nbytes, bad,
                                 opts.verify, note_fn(plan)))
    return rows


def _run_pipe(ctx, pipe_cls, method: str, src: int, dst: int, sizes: list[int], chunk: int, slots: int,
              suite: str, timed_of, note) -> list:
    """Open a pipe of either kind for the pair, sweep the sizes through it, close it (also on error)."""
    me = ctx.world.local_rank
    role = "src" if me == src else "dst"
    peer = dst if me == src else src
    pipe = pipe_cls(ctx, role, peer, chunk, slots, max(sizes))
    try:
        pipe.open(max(sizes))
        rows = _pair_sweep(ctx, suite, method, src, dst, sizes, timed_of(pipe), pipe.buf,
                           lambda n: plan_chunks(n, pipe.chunk, slots), note)
    except BaseException:
        _close_quietly(pipe)
        raise
    pipe.close()
    return rows


def run_shm_staged(ctx, src: int, dst: int, sizes: list[int], chunk: int = SHM_CHUNK,
                   slots: int = SHM_SLOTS, suite: str = "staged") -> list:
    """Both ranks of the pair call this; the source rank returns the rows."""

    def timed_of(pipe):
        def timed(plan, count):
            b = pipe.batch(plan, count)
            return pipe.run(b), b.count

        return timed

    def note(plan):
        text = (f"{plan.describe()} in POSIX shm pinned by both ranks (cudaHostRegister); D2H of chunk k+1 "
                f"overlaps H2D of chunk k; device-side flag kernels, CUDA graphs behind a gate; no Python "
                f"in the timed region")
        if ctx.same_gpu(src, dst):
            text += ("; same GPU: the two processes' spinning flag kernels time-slice the GPU (no MPS), "
                     "so small messages pay context switches")
        return text

    return _run_pipe(ctx, ShmPipe, "shm_staged", src, dst, sizes, chunk, slots, suite, timed_of, note)


class MpiPipe:
    """One pair's mpi_staged side: pinned host slots (cudaHostAlloc), events, the device buffer."""

    def __init__(self, ctx, role: str, peer: int, chunk: int, slots: int, max_bytes: int):
        self.ctx, self.role, self.peer = ctx, role, peer
        self.gpu = ctx.gpu
        self.chunk, self.slots = min(chunk, max_bytes), slots
        self.host = None
        self.buf = None
        self.views = []
        self.events = []

    def open(self, max_bytes: int) -> None:
        import cupy
        import numpy as np
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
        arr = np.frombuffer(whole, dtype=np.uint8)
        self.views = [arr[i * self.chunk:(i + 1) * self.chunk] for i in range(self.slots)]
        self.events = [cupy.cuda.Event(disable_timing=True) for _ in range(self.slots)]
        self.buf = _malloc_agreed(self.ctx, self.peer, max_bytes, "mpi_staged device buffer")

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
        from cupy.cuda import runtime
        from mpi4py import MPI

        w = self.ctx.world
        comm, peer, S = w.node, self.peer, self.slots
        spans = plan.spans()
        n = len(spans)
        total = count * n
        stream = self.gpu.stream
        sp = stream.ptr
        views, events, buf, host, chunk = self.views, self.events, self.buf, self.host, self.chunk
        reqs = [None] * S
        to = w.timeout
        what = f"node-local rank {peer} (mpi_staged)"
        theirs = tight_barrier(comm, peer, count, to, what)
        if theirs != count:
            raise StagedError(f"mpi_staged: batch of {count} here, {theirs} on node-local rank {peer}")
        t0 = time.perf_counter()
        if self.role == "src":
            def d2h(g):
                s = g % S
                off, ln = spans[g % n]
                runtime.memcpyAsync(host + s * chunk, buf + off, ln, runtime.memcpyDeviceToHost, sp)
                events[s].record(stream)

            for g in range(min(S, total)):
                d2h(g)
            for g in range(total):
                s = g % S
                ev = events[s]
                spin(lambda: ev.done, to, "a D2H copy")
                reqs[s] = comm.Isend([views[s][:spans[g % n][1]], MPI.BYTE], dest=peer, tag=DATA_TAG)
                nxt = g - 1 + S
                if g >= 1 and nxt < total:
                    ps = (g - 1) % S
                    spin(reqs[ps].Test, to, what)
                    d2h(nxt)
            for r in reqs:
                if r is not None:
                    spin(r.Test, to, what)
        else:
            def post(g):
                s = g % S
                reqs[s] = comm.Irecv([views[s][:spans[g % n][1]], MPI.BYTE], source=peer, tag=DATA_TAG)

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
        mine = (time.perf_counter() - t0) * 1e3
        other = w.exchange(mine, peer, AGREE_TAG)
        return max(mine, other)


def run_mpi_staged(ctx, src: int, dst: int, sizes: list[int], chunk: int = MPI_CHUNK,
                   slots: int = MPI_SLOTS, suite: str = "staged") -> list:
    """Both ranks of the pair call this; the source rank returns the rows."""

    def timed_of(pipe):
        return lambda plan, count: (pipe.run(plan, count), count)

    def note(plan):
        pipelined = "pipelined" if plan.n_chunks > 1 else "one chunk per message, messages pipelined"
        return (f"D2H -> pinned host (cudaHostAlloc) -> MPI Isend/Irecv -> H2D, {plan.describe()}, "
                f"{pipelined} by the Python ranks (Python in the loop, as in an app without IPC); "
                f"host clock from a pair barrier to the last send / last H2D done, the longer side")

    return _run_pipe(ctx, MpiPipe, "mpi_staged", src, dst, sizes, chunk, slots, suite, timed_of, note)


def _close_quietly(pipe) -> None:
    """Cleanup while another error is on its way out: that error is the one to report."""
    try:
        pipe.close()
    except Exception:
        pass
