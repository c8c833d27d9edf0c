"""suites/handles.py and ipc/legacy.py over a fake CUDA IPC driver (cupy's runtime calls replaced by
fakes.FakeCudaIpc) on fake ranks (tests/fakes.py). A fake: this tests the handle protocol's bookkeeping
(who exports, who opens, what is checked through the mapping, how errors travel to both ranks, which
rows and notes come out), not a driver; the driver behaviours it models are the ones the suite names."""

from __future__ import annotations

import threading

import pytest
from cupy.cuda import runtime

from fakes import INVALID_HANDLE, NOT_READY, FakeCudaIpc, FakeNode
from ipcbench.core.sampler import SamplingRule
from ipcbench.errors import ShareError
from ipcbench.suites import handles

def buffer_ptrs(node) -> set:
    return {b for bufs in node.buffers.values() for bs in bufs for b in (bs.src, bs.inbox, bs.ctrl)}


def node_with(monkeypatch, **kw):
    node = FakeNode(rule=SamplingRule(min_samples=3))
    return node, FakeCudaIpc(node, **kw).install(monkeypatch)


# ---- memory handles ------------------------------------------------------------------------------

def test_memory_handle_rows_checked_through_the_mapping(monkeypatch):
    node, drv = node_with(monkeypatch)
    rows, other = node.run(lambda ctx: handles.measure_mem_handles(ctx, 0, 1, [4096, 65536]))
    assert other == []
    assert [(r.method, r.bytes) for r in rows] == [
        (m, n) for n in (4096, 65536) for m in ("ipc_get_mem_handle", "ipc_open_mem_handle_first",
                                                "ipc_open_mem_handle_repeat", "ipc_close_mem_handle")]
    n = handles.MIN_SAMPLES
    for r in rows:
        assert (r.direction, r.kind, r.samples, r.checks, r.verified) == ("op", "op", n, n, True)
        assert r.note == "data checked through the first mapping" and r.bw_gbps_median is None
    # the importer checked every repetition's fresh buffer against the exporter's seed
    assert len(node.gpus[1].verifies) == 2 * n and all(bad == 0 for *_, bad in node.gpus[1].verifies)
    assert {seed for *_, seed, _ in node.gpus[1].verifies} == {seed for _, _, seed in node.gpus[0].fills}
    # every fresh buffer was freed by its owner, every mapping closed
    assert all(v == 0 for v in drv.maps.values())
    assert node.memory.live() == buffer_ptrs(node)


def test_unreferenced_repeat_open_is_noted(monkeypatch):
    """A driver that returns the same mapping but does not count opens: the second close is refused."""
    node, _ = node_with(monkeypatch, refcounted=False)
    rows, _ = node.run(lambda ctx: handles.measure_mem_handles(ctx, 0, 1, [4096]))
    assert all(r.verified for r in rows) and len(rows) == 4
    assert "opens not reference-counted" in rows[0].note and "second close refused" in rows[0].note


def test_refused_repeat_open_drops_its_row(monkeypatch):
    node, _ = node_with(monkeypatch, repeat_open=False)
    rows, _ = node.run(lambda ctx: handles.measure_mem_handles(ctx, 0, 1, [4096]))
    assert [r.method for r in rows] == ["ipc_get_mem_handle", "ipc_open_mem_handle_first", "ipc_close_mem_handle"]
    assert "repeat open refused: cudaErrorInvalidResourceHandle" in rows[0].note


def test_a_mapping_of_the_wrong_memory_fails_every_row(monkeypatch):
    node, drv = node_with(monkeypatch)
    drv.remap_to = node.memory.alloc(4096)  # zeros, not the exporter's pattern
    rows, _ = node.run(lambda ctx: handles.measure_mem_handles(ctx, 0, 1, [4096]))
    assert all(not r.verified and f"{handles.MIN_SAMPLES * 1024} mismatched words" in r.note for r in rows)


def test_an_importer_error_ends_both_ranks(monkeypatch):
    node, _ = node_with(monkeypatch, fail_open=True)
    errors = []

    def rank(ctx):
        try:
            handles.measure_mem_handles(ctx, 0, 1, [4096])
        except ShareError as e:
            errors.append((ctx.world.rank, str(e)))
            return "raised"

    assert node.run(rank) == ["raised", "raised"]
    msgs = dict(errors)
    assert msgs[1].startswith("rank 1: cudaIpcOpenMemHandle/cudaIpcCloseMemHandle (owner rank 0) failed")
    assert msgs[0] == "(reported by the importer) " + msgs[1]
    assert node.memory.live() == buffer_ptrs(node)  # the exporter freed its buffer on the way out


def test_an_exporter_error_ends_both_ranks(monkeypatch):
    """The exporter cannot make a handle: it tells the importer (a None handle) and both raise."""
    node, _ = node_with(monkeypatch, fail_export=True)

    def rank(ctx):
        with pytest.raises(ShareError) as e:
            handles.measure_mem_handles(ctx, 0, 1, [4096])
        return str(e.value)

    msgs = node.run(rank)
    assert msgs[0].startswith("rank 0: cudaIpcGetMemHandle(0x") and "cudaErrorInvalidValue" in msgs[0]
    assert msgs[1].startswith("rank 0: cudaIpcGetMemHandle failed: see that rank's error")
    assert node.memory.live() == buffer_ptrs(node)


# ---- event handles -------------------------------------------------------------------------------

def test_event_handles_are_checked_against_the_exporters_gate(monkeypatch):
    node, drv = node_with(monkeypatch)
    rows, other = node.run(lambda ctx: handles.measure_event_handles(ctx, 0, 1, [0]))
    assert other == [] and [r.method for r in rows] == ["ipc_get_event_handle", "ipc_open_event_handle"]
    for r in rows:
        assert r.verified and r.checks == handles.MIN_SAMPLES and r.bytes == 0 and "not complete" in r.note
    assert node.gpus[0].log.count("gate") == handles.MIN_SAMPLES == len(node.gpus[0].released)
    assert all(getattr(e, "destroyed", False) for e in drv.events.values())


def test_an_event_that_ignores_the_exporters_stream_fails(monkeypatch):
    node, _ = node_with(monkeypatch, events_always_done=True)
    rows, _ = node.run(lambda ctx: handles.measure_event_handles(ctx, 0, 1, [0]))
    assert all(not r.verified and f"{handles.MIN_SAMPLES} mismatched" in r.note for r in rows)


def test_event_ready_reads_not_ready_as_false():
    class Rt:
        CUDARuntimeError = runtime.CUDARuntimeError

        def __init__(self, outcome):
            self.outcome = outcome

        def eventQuery(self, ev):
            if isinstance(self.outcome, Exception):
                raise self.outcome
            return self.outcome

    assert handles._event_ready(Rt(0), 1) is True
    assert handles._event_ready(Rt(NOT_READY), 1) is False
    assert handles._event_ready(Rt(runtime.CUDARuntimeError(NOT_READY)), 1) is False
    with pytest.raises(runtime.CUDARuntimeError):
        handles._event_ready(Rt(runtime.CUDARuntimeError(INVALID_HANDLE)), 1)


# ---- error paths ---------------------------------------------------------------------------------

def errors_run(monkeypatch, **kw):
    node, drv = node_with(monkeypatch, **kw)

    def exited(gpu_index):
        """The owner exited: its allocation is gone (made and freed here, exported by a helper thread)."""
        ptr = node.memory.alloc(2 << 20)
        box = []
        t = threading.Thread(target=lambda: box.append(runtime.ipcGetMemHandle(ptr)))
        t.start()
        t.join()
        node.memory.free(ptr)
        return box[0], ""

    monkeypatch.setattr(handles, "_exited_owner_handle", exited)
    rows, other = node.run(lambda ctx: handles.measure_errors(ctx, 0, 1, [2 << 20]))
    assert other == []
    return {r.method: r for r in rows}


def test_error_paths_give_clear_errors(monkeypatch):
    rows = errors_run(monkeypatch)
    assert list(rows) == ["err_open_own_handle", "err_host_pointer_handle", "err_open_freed_handle",
                          "err_open_exited_owner_handle"]
    for r in rows.values():
        assert r.kind == "error" and not r.verified and r.checks == 0 and r.note.startswith("clear error: ")
    assert "a process cannot open a handle it exported itself" in rows["err_open_own_handle"].note
    assert "rank 0: cudaIpcGetMemHandle" in rows["err_host_pointer_handle"].note
    assert "may have freed the buffer or exited" in rows["err_open_freed_handle"].note
    assert "owned by an exited child process" in rows["err_open_exited_owner_handle"].note


def test_a_driver_that_accepts_host_pointers_is_reported(monkeypatch):
    rows = errors_run(monkeypatch, accept_host=True)
    r = rows["err_host_pointer_handle"]
    assert r.note.startswith("NOT a clear error: pinned: driver accepted cudaIpcGetMemHandle")
    assert "pageable: rank 0: cudaIpcGetMemHandle" in r.note  # pageable memory is still refused
    assert rows["err_open_freed_handle"].note.startswith("clear error")


def test_a_missing_exporting_child_is_a_row_not_a_crash(monkeypatch):
    node, _ = node_with(monkeypatch)
    monkeypatch.setattr(handles, "_exited_owner_handle", lambda i: (None, "could not run the child: boom"))
    rows, _ = node.run(lambda ctx: handles.measure_errors(ctx, 0, 1, [2 << 20]))
    (r,) = [r for r in rows if r.method == "err_open_exited_owner_handle"]
    assert r.note == "NOT a clear error: could not run the child: boom"


def test_expect_error_and_short():
    def raise_(msg):
        def f():
            raise ShareError(msg)
        return f

    assert handles._expect_error(raise_("rank 3: cudaX failed"), 3, "cudaX") == (True, "rank 3: cudaX failed")
    assert handles._expect_error(raise_("something broke"), 3, "cudaX") == (False, "unclear message: something broke")
    assert handles._expect_error(lambda: 7, 3, "cudaX") == (False, "driver accepted cudaX (returned 7)")
    assert handles._short("a,  b\n c") == "a; b c"
    assert handles._short("x" * 200, 20) == "x" * 17 + "..."
    assert handles._us(1000, 3500) == 2.5


def test_the_exited_owner_runs_at_the_setup_and_the_step_opens_its_handle(monkeypatch):
    """start_exited_owners (the error step's prelude) starts one child per error pair on the rank that opens its
    handle, for the source's GPU; wait() keeps what the child gave, and measure_errors opens that, starting no
    child of its own (logic only: fake GPUs, and a child that could not start)."""
    node, drv = node_with(monkeypatch)
    started = []

    def start(gpu_index):
        started.append(gpu_index)
        return None, "no child on a fake GPU"

    def no_child_in_the_step(gpu_index):
        raise AssertionError("the step started a child of its own")

    monkeypatch.setattr(handles, "_start_child", start)
    monkeypatch.setattr(handles, "_exited_owner_handle", no_child_in_the_step)

    def rank(ctx):
        handles.start_exited_owners(ctx, handles.error_pairs(2))()
        return handles.measure_errors(ctx, 0, 1, [2 << 20])

    rows, other = node.run(rank)
    assert started == [0] and other == []  # rank 1 opens rank 0's handles; rank 0's GPU is GPU 0
    r = {r.method: r for r in rows}["err_open_exited_owner_handle"]
    assert r.note == "NOT a clear error: no child on a fake GPU"


def test_the_error_step_has_its_child_started_at_the_setup():
    step = [s for s in handles.steps(2, [4096, 1 << 20]) if s.label == "error paths"][0]
    assert step.prelude is handles.start_exited_owners and step.pairs == [(0, 1)]
    assert step.cost < 40  # its 0.3 s child is no longer in the step (the dry run's cost model)


def test_the_exited_owners_child_is_the_runs_own_process(monkeypatch):
    """The child started at the setup holds a CUDA context while NVML may read the node: its pid goes to
    ctx.helper_pids on the rank that started it (the evidence counts it as the run's own), on no other rank; its
    output is read once it has exited (logic only: fake GPUs and a fake child)."""
    from types import SimpleNamespace

    node, drv = node_with(monkeypatch)
    handle = bytes(range(64))

    def start(gpu_index):
        return SimpleNamespace(pid=4242, returncode=0,
                               communicate=lambda timeout=None: (handle.hex() + "\n", "")), ""

    monkeypatch.setattr(handles, "_start_child", start)

    def rank(ctx):
        handles.start_exited_owners(ctx, handles.error_pairs(2))()
        return ctx.helper_pids, ctx.state[handles.EXITED_OWNERS]

    got = node.run(rank)
    assert list(got) == [([], {}), ([4242], {0: (handle, "")})]
