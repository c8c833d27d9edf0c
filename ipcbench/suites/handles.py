"""Suite `handles`: what sharing costs, per operation, and what the common mistakes look like.

These are host-side API costs (a driver call that returns when the mapping exists), so unlike the
transfer suites they are timed with the host clock, time.perf_counter_ns() around the one CUDA call:
there is no GPU work to put between CUDA events. Rows: direction `op`, time_us_* = time of one
operation (median/min/max over --samples repetitions, at least 3), no bandwidth, `bytes` = the size
class of the buffer (0 for events). One ordered pair at a time; the exporter is src, the importer dst;
`same_gpu` tells same-GPU from cross-GPU pairs.

Per size class (the run's smallest, a middle and its largest size), every repetition uses a FRESH
cudaMalloc buffer: the owner fills it, times cudaIpcGetMemHandle, sends the handle over MPI; the peer
times the first cudaIpcOpenMemHandle (cudaIpcMemLazyEnablePeerAccess), a repeated open of the same
handle in the same process (the driver hands back the same mapping), verifies the data through the
mapping (a GPU kernel: `verified`), closes (the close after the repeated open is untimed; the timed
`ipc_close_mem_handle` is the one that unmaps), acknowledges, and the owner frees.
Methods: ipc_get_mem_handle, ipc_open_mem_handle_first, ipc_open_mem_handle_repeat,
ipc_close_mem_handle, ipc_get_event_handle, ipc_open_event_handle (the opened event is waited on by a
stream: `verified`). Pool operations (pool_export_fd, pool_export_pointer, fd_transfer, pool_import,
pool_import_pointer) are measured in handles_pool.py, the same steps through cuda.core's
own API (core_export_pool, core_export_buffer, core_import_pool, core_import_buffer) in handles_core.py.
VMM sharing (a cuMemCreate allocation exported as a POSIX fd, ipc/vmm.py) in handles_vmm.py: vmm_create,
vmm_export_fd, vmm_fd_transfer (exporter), vmm_import, vmm_map (cuMemAddressReserve + cuMemMap),
vmm_set_access, vmm_unmap_release (cuMemUnmap + cuMemRelease + cuMemAddressFree) (importer), verified
through the importer's mapping; no rows where either GPU lacks VMM with POSIX-fd export. Those three
mechanisms (their export is a POSIX fd) share one protocol, share_costs.py, and say only how they export
and import once.

Error paths, last in the suite, on the pair (0, 1) only: each row is `verified=true` when ipcbench's own
code (share.LegacyIpc) raised an error whose message names the rank and the CUDA call; the note holds
the (shortened) message. If the driver accepts the call instead, the row says so ("driver accepted")
with verified=false; that is a fact about the driver, not a failed transfer, so it does not fail the run.
  err_open_freed_handle       the owner frees the buffer, then sends the handle; the peer opens it
  err_open_exited_owner_handle  a child process allocates, exports and exits; the peer opens the handle
  err_open_own_handle         a process opens a handle it exported itself
  err_host_pointer_handle     cudaIpcGetMemHandle on pinned (cudaHostAlloc) and on pageable host memory
None of these CUDA errors is sticky, so the context stays usable.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from ipcbench.catalogue.planned import RowShape
from ipcbench.catalogue.suites import HANDLE_CALLS
from ipcbench.core.rows import make_row
from ipcbench.core.stats import seed_for
from ipcbench.core.world import ordered_pairs
from ipcbench.errors import ShareError
from ipcbench.suites.handles_core import CORE_COSTS, measure_core_handles
from ipcbench.suites.handles_pool import POOL_COSTS, measure_pool_handles
from ipcbench.suites.handles_vmm import VMM_COSTS, measure_vmm_handles
from ipcbench.suites.registry import Step, SuiteSpec

# CUDA and MPI are imported in the functions that measure: plans and the report import this (suites/registry.py).

MIN_SAMPLES = 5  # host-timed API calls: the first repetitions pay cold-start costs
TAG_HANDLE, TAG_ACK, TAG_ERR, TAG_QUERIED = 21, 22, 23, 24
CHILD_TIMEOUT_S = 120.0
EXITED_OWNERS = "handles_exited_owners"  # ctx.state: {src: (handle, why)} of the children start_exited_owners ran
# The rows each step writes per pair and size (registry.Step.writes): the memory handles' per size class (a repeated
# open the driver refuses has no row), the event handles' (no buffer: size 0), the error paths' (each probe once)
MEM_ROWS = (RowShape("ipc_get_mem_handle", "op"), RowShape("ipc_open_mem_handle_first", "op"),
            RowShape("ipc_open_mem_handle_repeat", "op", unless="the driver refused every repeated open of a handle"),
            RowShape("ipc_close_mem_handle", "op"))
EVENT_ROWS = (RowShape("ipc_get_event_handle", "op"), RowShape("ipc_open_event_handle", "op"))
ERROR_ROWS = tuple(RowShape(m, "op", bytes=0) for m in HANDLE_CALLS["legacy"] if m.startswith("err_"))


# ---- planning (pure) ---------------------------------------------------------------------------
def size_classes(sizes: list[int]) -> list[int]:
    """The run's smallest, a middle (geometric middle of the list) and largest size, deduplicated."""
    s = sorted(set(sizes))
    return sorted({s[0], s[len(s) // 2], s[-1]})


def error_pairs(n: int) -> list[tuple[int, int]]:
    return [(0, 1)] if n >= 2 else []


# ---- helpers -----------------------------------------------------------------------------------
def _us(t0: int, t1: int) -> float:
    return (t1 - t0) / 1e3


def _short(msg: str, limit: int = 160) -> str:
    msg = " ".join(str(msg).split()).replace(",", ";")
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def _share_error(rank: int, call: str, e: Exception | str):
    return ShareError(f"rank {rank}: {call} failed: {e}")


# ---- memory handles ----------------------------------------------------------------------------
def measure_mem_handles(ctx, src: int, dst: int, sizes: list[int]):
    """Both ranks of the pair call this; src returns the rows. Per size class, `n` repetitions on a fresh
    buffer each: the exporter's (`_export_mem_handle`) against the importer's (`_open_mem_handle`)."""
    w = ctx.world
    me = w.local_rank
    n = max(MIN_SAMPLES, ctx.rule.min_samples)
    rows = []
    for nbytes in sizes:
        label = "handles/mem"
        get_us: list[float] = []
        opened = _Opened()
        for s in range(n):
            if me == src:
                get_us.append(_export_mem_handle(ctx, dst, nbytes, s, label))
            else:
                _open_mem_handle(ctx, src, nbytes, s, opened)
        theirs = w.exchange(opened.as_tuple() if me == dst else None, dst if me == src else src, tag=TAG_ACK + 10)
        if me != src:
            continue
        rows += _mem_handle_rows(ctx, src, dst, nbytes, n, get_us, _Opened(*theirs))
    return rows


def _export_mem_handle(ctx, dst: int, nbytes: int, s: int, label: str) -> float:
    """The exporter's repetition `s`: a fresh buffer filled with the seeded pattern, cudaIpcGetMemHandle timed,
    the handle sent, the importer's acknowledgement awaited, the buffer freed. -> the get's µs."""
    from cupy.cuda import runtime

    w, gpu = ctx.world, ctx.gpu
    seed = seed_for(w.rank, nbytes, s, label)
    ptr = gpu.malloc(nbytes)
    try:
        gpu.fill(ptr, nbytes, seed)
        gpu.wait(what="fill before export")
        t0 = time.perf_counter_ns()
        try:
            h = runtime.ipcGetMemHandle(ptr)
        except runtime.CUDARuntimeError as e:
            h = None
            err = str(_share_error(w.rank, f"cudaIpcGetMemHandle(0x{ptr:x})", e))
        t1 = time.perf_counter_ns()
        w.send((bytes(h) if h is not None else None, seed), dst, tag=TAG_HANDLE)
        if h is None:
            raise ShareError(err)
        get_us = _us(t0, t1)
        ack = w.recv(dst, tag=TAG_ACK, what=f"rank {ctx.world_rank(dst)} to close the IPC mapping")
    finally:
        gpu.free(ptr)
    if isinstance(ack, str):
        raise ShareError(f"(reported by the importer) {ack}")
    return get_us


@dataclass
class _Opened:
    """The importer's side of one size class: per repetition the first open, the repeated open and the close
    (µs), the data checked through the first mapping, what the driver did that is worth a note."""

    first_us: list[float] = field(default_factory=list)
    repeat_us: list[float] = field(default_factory=list)
    close_us: list[float] = field(default_factory=list)
    bad: int = 0
    checks: int = 0
    notes: list[str] = field(default_factory=list)

    def as_tuple(self) -> tuple:
        return self.first_us, self.repeat_us, self.close_us, self.bad, self.checks, self.notes


def _open_mem_handle(ctx, src: int, nbytes: int, s: int, opened: _Opened) -> None:
    """The importer's repetition `s`: the first cudaIpcOpenMemHandle of the exporter's handle and a repeated
    one timed, the data verified through the first mapping, the close that unmaps timed; the acknowledgement
    (or the error, which both ranks raise) sent back."""
    from cupy.cuda import runtime

    w, gpu = ctx.world, ctx.gpu
    h, seed = w.recv(src, tag=TAG_HANDLE, what=f"an IPC handle from rank {ctx.world_rank(src)}")
    if h is None:
        raise _share_error(ctx.world_rank(src), "cudaIpcGetMemHandle", "see that rank's error")
    ack: bool | str = True
    try:
        flags = runtime.cudaIpcMemLazyEnablePeerAccess
        t0 = time.perf_counter_ns()
        p1 = runtime.ipcOpenMemHandle(h, flags)
        t1 = time.perf_counter_ns()
        opened.first_us.append(_us(t0, t1))
        p2 = None
        try:
            t0 = time.perf_counter_ns()
            p2 = runtime.ipcOpenMemHandle(h, flags)
            t1 = time.perf_counter_ns()
            opened.repeat_us.append(_us(t0, t1))
            if p2 != p1 and s == 0:
                opened.notes.append("repeat open gave a second mapping")
        except runtime.CUDARuntimeError as e:
            if s == 0:
                opened.notes.append(f"repeat open refused: {_short(e, 80)}")
        if ctx.verify:
            opened.bad += gpu.verify(p1, nbytes, seed)
            opened.checks += 1
        if p2 is not None:
            runtime.ipcCloseMemHandle(p2)  # undo the repeated open (untimed)
        t0 = time.perf_counter_ns()
        try:
            runtime.ipcCloseMemHandle(p1)
        except runtime.CUDARuntimeError as e:
            if p2 != p1:
                raise
            # The driver did not count the repeated open: the first close already unmapped.
            if s == 0:
                opened.notes.append(f"second close refused ({_short(e, 60)}): opens not reference-counted")
        t1 = time.perf_counter_ns()
        opened.close_us.append(_us(t0, t1))
    except runtime.CUDARuntimeError as e:
        ack = str(_share_error(w.rank, f"cudaIpcOpenMemHandle/cudaIpcCloseMemHandle (owner rank "
                                       f"{ctx.world_rank(src)})", e))
    w.send(ack, src, tag=TAG_ACK)
    if isinstance(ack, str):
        raise ShareError(ack)


def _mem_handle_rows(ctx, src: int, dst: int, nbytes: int, n: int, get_us: list[float], opened: _Opened):
    """src's rows of one size class: the exporter's gets, the importer's opens and closes."""
    # Every repetition's buffer was checked through the importer's first mapping, so each row of the
    # repetition (get, open, repeat open, close) carries that check.
    note = "; ".join(["data checked through the first mapping", *opened.notes])
    return [make_row(ctx, suite="handles", method=method, direction="op", src=src, dst=dst, nbytes=nbytes, per_us=vals,
                     iterations=1, moved=None, checks=opened.checks, mismatches=opened.bad, note=note, kind="op",
                     required=n)
            for method, vals in zip((shape.method for shape in MEM_ROWS),
                                    (get_us, opened.first_us, opened.repeat_us, opened.close_us))
            if vals]


# ---- event handles -----------------------------------------------------------------------------
def _event_ready(runtime, ev) -> bool:
    try:
        return runtime.eventQuery(ev) == 0
    except runtime.CUDARuntimeError as e:
        if "NotReady" in str(e):
            return False
        raise


def measure_event_handles(ctx, src: int, dst: int, sizes: list[int]):
    """Event handles, checked for real: the exporter records its event behind a closed gate, so the
    importer must see the imported event NOT complete, then complete once the exporter opens the gate
    and the importer's stream has waited on it (the event tracks the exporter's stream)."""
    from cupy.cuda import runtime

    w = ctx.world
    me = w.local_rank
    n = max(MIN_SAMPLES, ctx.rule.min_samples)
    get_us: list[float] = []
    seen = _EventsSeen()
    for _ in range(n):
        if me == src:
            get_us.append(_export_event(ctx, runtime, dst))
        else:
            _import_event(ctx, runtime, src, seen)
    theirs = w.exchange((seen.open_us, seen.bad, seen.checks) if me == dst else None, dst if me == src else src,
                        tag=TAG_ACK + 10)
    if me != src:
        return []
    open_us, bad, checks = theirs
    note = "checked: not complete while the exporter's stream was held, complete after it ran"
    return [make_row(ctx, suite="handles", method=method, direction="op", src=src, dst=dst, nbytes=0, per_us=vals,
                     iterations=1, moved=None, checks=checks, mismatches=bad, note=note, kind="op", required=n)
            for method, vals in zip((shape.method for shape in EVENT_ROWS), (get_us, open_us))]


@dataclass
class _EventsSeen:
    """What the importer saw of the imported events: each open's time, the checks run and those that failed."""

    open_us: list[float] = field(default_factory=list)
    bad: int = 0
    checks: int = 0


def _export_event(ctx, runtime, dst: int) -> float:
    """One repetition on the exporter: an interprocess event recorded behind a closed gate, its handle sent; the
    gate opened once the importer has queried it. Returns the handle's get time (µs)."""
    w, gpu = ctx.world, ctx.gpu
    ev = runtime.eventCreateWithFlags(runtime.eventInterprocess | runtime.eventDisableTiming)
    ticket = gpu.gate(gpu.stream)
    try:
        runtime.eventRecord(ev, gpu.stream.ptr)
        t0 = time.perf_counter_ns()
        h = bytes(runtime.ipcGetEventHandle(ev))
        t1 = time.perf_counter_ns()
        w.send(h, dst, tag=TAG_HANDLE)
        w.recv(dst, tag=TAG_QUERIED, what=f"rank {ctx.world_rank(dst)} to query the imported event")
    finally:
        gpu.release(ticket)
        gpu.wait(what="the gated event record")
    ack = w.recv(dst, tag=TAG_ACK, what=f"rank {ctx.world_rank(dst)} to wait on the event")
    runtime.eventDestroy(ev)
    if isinstance(ack, str):
        raise ShareError(f"(reported by the importer) {ack}")
    return _us(t0, t1)


def _import_event(ctx, runtime, src: int, seen: _EventsSeen) -> None:
    """One repetition on the importer: open the handle, see the event not complete while the exporter's gate is
    closed, then complete after its stream waited on it; a failure is reported to the exporter, then raised."""
    w, gpu = ctx.world, ctx.gpu
    h = w.recv(src, tag=TAG_HANDLE, what=f"an event handle from rank {ctx.world_rank(src)}")
    ack: bool | str = True
    ev = None
    try:
        t0 = time.perf_counter_ns()
        ev = runtime.ipcOpenEventHandle(h)
        t1 = time.perf_counter_ns()
        seen.open_us.append(_us(t0, t1))
        early = _event_ready(runtime, ev)  # must be False: the exporter's gate is still closed
    except runtime.CUDARuntimeError as e:
        ack = str(_share_error(w.rank, f"cudaIpcOpenEventHandle (owner rank {ctx.world_rank(src)})", e))
    w.send(True, src, tag=TAG_QUERIED)
    if ev is not None and ack is True:
        try:
            runtime.streamWaitEvent(gpu.stream.ptr, ev, 0)
            gpu.wait(what="a wait on an imported event", timeout=30)
            seen.checks += 1
            seen.bad += int(early or not _event_ready(runtime, ev))
        finally:
            runtime.eventDestroy(ev)
    w.send(ack, src, tag=TAG_ACK)
    if isinstance(ack, str):
        raise ShareError(ack)


# ---- error paths -------------------------------------------------------------------------------
def _clear(msg: str, rank: int, call: str) -> bool:
    return f"rank {rank}" in msg and call in msg


def _expect_error(what, rank: int, call: str) -> tuple[bool, str]:
    """Run `what()`; (True, message) if it raised a clear ShareError, else (False, what happened)."""
    try:
        result = what()
    except ShareError as e:
        msg = str(e)
        if _clear(msg, rank, call):
            return True, msg
        return False, f"unclear message: {msg}"
    return False, f"driver accepted {call} (returned {result!r})"


def _error_row(ctx, src, dst, method, ok: bool, note: str, t_us: float):

    # An error-path probe: `kind` error, never `verified`; the note says whether the message was clear.
    verdict = "clear error" if ok else "NOT a clear error"
    return make_row(ctx, suite="handles", method=method, direction="op", src=src, dst=dst, nbytes=0, per_us=[t_us],
                    iterations=1, moved=None, checks=0, mismatches=0, note=f"{verdict}: {_short(note, 300)}",
                    kind="error")


# The child imports CuPy's runtime binding alone (not cupy: half a second of its start on an H100 host).
_CHILD = r"""
import sys
from cupy_backends.cuda.api import runtime
runtime.setDevice(int(sys.argv[1]))
p = runtime.malloc(2 << 20)
print(bytes(runtime.ipcGetMemHandle(p)).hex(), flush=True)
"""


def _start_child(gpu_index: int) -> tuple[subprocess.Popen | None, str]:
    """The child process that exports a handle on GPU `gpu_index` and exits, started: (its Popen, "") or (None, why).
    It is let run on every CPU of the machine the kernel allows it (a cgroup's cpuset still holds), not only the
    rank's binding (one core under Open MPI's default), which the rank's own setup uses meanwhile: it lives
    0.3 s, before anything is measured."""
    try:
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(gpu_index)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    except OSError as e:
        return None, f"could not run the exporting child process: {e}"
    try:
        os.sched_setaffinity(proc.pid, range(os.cpu_count() or 1))
    except (OSError, AttributeError):  # refused, or ended already; AttributeError: not Linux
        pass
    return proc, ""


def _child_handle(proc: subprocess.Popen | None, why: str) -> tuple[bytes | None, str]:
    """The handle a started child exported, once it has exited: (handle, "") or (None, why not)."""
    if proc is None:
        return None, why
    try:
        out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        proc.kill()
        proc.communicate()
        return None, f"could not run the exporting child process: {e}"
    if proc.returncode != 0 or not out.strip():
        return None, f"exporting child process failed: {_short(err.strip()[-200:])}"
    return bytes.fromhex(out.strip().splitlines()[-1]), ""


def _exited_owner_handle(gpu_index: int) -> tuple[bytes | None, str]:
    """A handle exported by a child process that has exited since (its memory went with it)."""
    return _child_handle(*_start_child(gpu_index))


def start_exited_owners(ctx, pairs: list[tuple[int, int]]):
    """The error step's prelude (registry.Step.prelude): on each rank that opens a handle for an error pair, the
    child process that plays the exited owner, started at the run's setup, so that its 0.3 s (an interpreter and a
    CUDA context) runs beside the setup's instead of inside the suite; the wait() it returns lets the children
    end, before anything is measured, and keeps their handles for measure_errors (ctx.state)."""
    me = ctx.world.local_rank
    started = {src: _start_child(ctx.gpu_of[src]) for src, dst in pairs if dst == me}
    ctx.helper_pids.extend(proc.pid for proc, _ in started.values() if proc is not None)  # not another job's

    def wait() -> None:
        ctx.state[EXITED_OWNERS] = {src: _child_handle(*child) for src, child in started.items()}

    return wait


def measure_errors(ctx, src: int, dst: int, sizes: list[int]):
    """The error paths of legacy IPC handles, each probed on the rank it concerns; the exporter writes the rows."""
    from ipcbench.ipc.legacy import LegacyIpc

    w = ctx.world
    me = w.local_rank
    ipc = LegacyIpc(ctx.gpu, w.rank)
    nbytes = 2 << 20
    mine = _probe_freed_handle(ctx, ipc, src, dst, nbytes)  # (method, ok, note, us)
    if me == dst:
        mine += _probe_exited_owner(ctx, ipc, src)
    if me == src:
        mine += _probe_own_handle_and_host_pointers(ctx, ipc, nbytes)
    theirs = w.exchange(mine, dst if me == src else src, tag=TAG_ERR + 10)
    if me != src:
        return []
    return [_error_row(ctx, src, dst, m, ok, note, us) for m, ok, note, us in mine + theirs]


def _probe_freed_handle(ctx, ipc, src: int, dst: int, nbytes: int) -> list:
    """1. The owner frees the buffer before the peer opens its handle (the peer's row)."""
    w, gpu = ctx.world, ctx.gpu
    if w.local_rank == src:
        ptr = gpu.malloc(nbytes)
        h = ipc.export(ptr)
        gpu.free(ptr)
        w.send(h, dst, tag=TAG_ERR)
        w.recv(dst, tag=TAG_ERR, what=f"rank {ctx.world_rank(dst)} to try a freed handle")
        return []
    h = w.recv(src, tag=TAG_ERR, what=f"a freed handle from rank {ctx.world_rank(src)}")
    t0 = time.perf_counter_ns()
    ok, msg = _expect_error(lambda: ipc.open(h, ctx.world_rank(src)), w.rank, "cudaIpcOpenMemHandle")
    t1 = time.perf_counter_ns()
    ipc.close_all()
    w.send(True, src, tag=TAG_ERR)
    return [("err_open_freed_handle", ok, msg, _us(t0, t1))]


def _probe_exited_owner(ctx, ipc, src: int) -> list:
    """2. The owner process has exited (a child process of the importer plays the owner). The child ran at the
    run's setup (start_exited_owners); run alone, the step starts its own."""
    h, why = ctx.state.get(EXITED_OWNERS, {}).pop(src, None) or _exited_owner_handle(ctx.gpu_of[src])
    if h is None:
        return [("err_open_exited_owner_handle", False, why, 0.0)]
    rank = ctx.world.rank
    t0 = time.perf_counter_ns()
    ok, msg = _expect_error(lambda: ipc.open(h, "an exited child process"), rank, "cudaIpcOpenMemHandle")
    t1 = time.perf_counter_ns()
    ipc.close_all()
    return [("err_open_exited_owner_handle", ok, msg, _us(t0, t1))]


def _probe_own_handle_and_host_pointers(ctx, ipc, nbytes: int) -> list:
    """3. A process opens its own handle; 4. host memory passed where a device pointer is expected (pinned, then
    pageable). The exporter's rows."""
    from cupy.cuda import runtime

    gpu, rank = ctx.gpu, ctx.world.rank
    ptr = gpu.malloc(nbytes)
    try:
        h = ipc.export(ptr)
        t0 = time.perf_counter_ns()
        ok, msg = _expect_error(lambda: ipc.open(h, rank), rank, "cudaIpcOpenMemHandle")
        t1 = time.perf_counter_ns()
        ipc.close_all()
    finally:
        gpu.free(ptr)
    out = [("err_open_own_handle", ok, msg, _us(t0, t1))]
    pinned = runtime.hostAlloc(nbytes, 0)
    pageable = np.ones(nbytes // 8, dtype=np.uint64)
    try:
        t0 = time.perf_counter_ns()
        ok1, msg1 = _expect_error(lambda: ipc.export(pinned), rank, "cudaIpcGetMemHandle")
        t1 = time.perf_counter_ns()
        ok2, msg2 = _expect_error(lambda: ipc.export(pageable.ctypes.data), rank, "cudaIpcGetMemHandle")
    finally:
        runtime.freeHost(pinned)
    return out + [("err_host_pointer_handle", ok1 and ok2, f"pinned: {_short(msg1, 140)} | pageable: "
                   f"{_short(msg2, 140)}", _us(t0, t1))]

def steps(n: int, sizes: list[int]) -> list[Step]:
    pairs = ordered_pairs(n)
    classes = size_classes(sizes)
    out = [Step("handles", "memory handles", pairs, classes, measure_mem_handles, needs=(), cost=1.0,
                writes=MEM_ROWS),
           Step("handles", "event handles", pairs, [0], measure_event_handles, needs=(), cost=1.0,
                writes=EVENT_ROWS),
           Step("handles", "pool handles", pairs, classes, measure_pool_handles, needs=(), cost=1.5,
                writes=POOL_COSTS.writes),
           Step("handles", "cuda.core handles", pairs, classes, measure_core_handles, needs=(), cost=1.5,
                writes=CORE_COSTS.writes),
           Step("handles", "vmm handles", pairs, classes, measure_vmm_handles, needs=(), cost=1.5,
                writes=VMM_COSTS.writes)]
    ep = error_pairs(n)
    if ep:
        # cost 2: its child process runs at the setup (start_exited_owners), no longer inside the step (40 before)
        out.append(Step("handles", "error paths", ep, [2 << 20], measure_errors, needs=(), cost=2.0,
                        prelude=start_exited_owners, writes=ERROR_ROWS))
    return out



SUITE = SuiteSpec("handles", "what sharing costs: IPC memory and event handle get/open/close per size class, "
                "and the error paths people hit (freed or exited owner, own handle, host pointer)", steps)
