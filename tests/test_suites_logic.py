"""The suites' plans and measurement bookkeeping on fakes (tests/fakes.py: host memory for GPU memory,
threads for ranks). A fake: these test which steps a suite plans, how rows are labelled and accounted
(all-to-all windows and per-flow verification, the staged sweep's protocol), not a GPU."""

from __future__ import annotations

import pytest

from fakes import FakeNode
from ipcbench.core.methods import METHODS
from ipcbench.core.sampler import SamplingRule
from ipcbench.core.schedule import PairMode
from ipcbench.errors import UsageError
from ipcbench.run.collect import RowSink
from ipcbench.run.walk import walk
from ipcbench.suites import alltoall, handles, latency, pipeline, staged
from ipcbench.suites.registry import plan

FAST = SamplingRule(min_time_s=2e-5)  # ~20 fake transfers per sample: the logic, quickly
US = 1000.0


# ---- the transfer suites, end to end on fakes ----------------------------------------------------

def test_copy_kernel_pool_plan_runs_on_a_fake_node():
    """Every step of copy, kernel and pool, walked on three fake ranks: every (method, direction, pair,
    size) gives one verified row."""
    sizes = [1024, 4096]
    steps = plan(["copy", "kernel", "pool"], 3, sizes)
    node = FakeNode(n=3, rule=FAST, slot_bytes=4096)
    out = node.run(lambda ctx: walk(ctx, steps, RowSink(ctx.world, None, None), quiet=True,
                                    mode=PairMode("sequential", "sequential", "test")))
    rows = out[0][0]
    assert all(r.verified for r in rows), [r.note for r in rows if not r.verified]
    keys = {(r.method, r.direction, r.src_rank, r.dst_rank, r.bytes) for r in rows}
    assert len(keys) == len(rows)
    want = set()
    for name in ("ce", "sm_read", "sm_write", "pool_ce", "pool_sm_read", "pool_sm_write"):
        for d in METHODS[name].directions:
            pairs = [(0, 1), (0, 2), (1, 2)] if d == "bidir" else [(a, b) for a in range(3) for b in range(3) if a != b]
            want |= {(name, d, a, b, n) for a, b in pairs for n in sizes}
    assert keys == want
    assert {r.suite for r in rows} == {"copy", "kernel", "pool"}


def test_alltoall_is_planned_from_three_ranks_on_large_sizes():
    assert alltoall.steps(2, [1 << 20]) == []
    steps = alltoall.steps(4, [1 << 20, 4 << 20, 16 << 20])
    assert [s.label for s in steps] == ["ce all-to-all", "sm all-to-all", "nccl all-to-all"]
    assert [s.engine for s in steps] == ["ce", "sm", "nccl"]
    assert steps[2].needs == ("legacy", "nccl_node") and steps[0].needs == ("legacy",)
    for s in steps:
        assert s.all_ranks and s.sizes == [4 << 20, 16 << 20] and s.cost == 4.0 and s.measurements == 2
    assert [s.sizes for s in alltoall.steps(3, [1 << 10, 1 << 20])] == [[1 << 20]] * 3  # none that large: the largest


# ---- all-to-all ----------------------------------------------------------------------------------

def a2a(node, sizes, name="ce_alltoall"):
    return node.run(lambda ctx: alltoall.measure_alltoall(ctx, name, sizes))


@pytest.mark.parametrize("name", ["ce_alltoall", "sm_alltoall"])
def test_alltoall_time_is_each_gpus_own_window(name):
    """A fake: rank r's transfers cost (r + 1) us a step (the CE's steps, or the kernel's pass over every peer at
    once), so GPU r's window per all-to-all is (r + 1) us x its steps; the count is agreed on the slowest GPU, so
    all ranks use one count."""
    node = FakeNode(n=3, rule=FAST, gpu_kw=[dict(transfer_ns=lambda n, r=r: (r + 1) * US) for r in range(3)])
    out = a2a(node, [4096], name)
    steps = 2 if name == "ce_alltoall" else 1
    for r, rows in enumerate(out):
        assert [(x.src_rank, x.dst_rank) for x in rows] == [(r, p) for p in range(3) if p != r]
        for x in rows:
            assert x.method == name and x.suite == "alltoall" and x.time_us_median == pytest.approx((r + 1) * steps)
            assert x.verified and x.checks == x.samples and alltoall.WINDOW in x.note
    assert len({x.iterations for rows in out for x in rows}) == 1
    # the count gives a sample of at least half its length (calibrate's "close") on the slowest GPU
    assert out[0][0].iterations * 3e-3 * steps >= FAST.sample_s(4096) * 1e3 / 2


def test_ce_alltoall_steps_are_shifted_permutations_with_a_barrier_after_each():
    """Rank r copies to r+1, r+2, ... (mod n) in that order, every copy followed by one device barrier: each step of
    the node is a permutation, so no GPU receives from two at once."""
    node = FakeNode(n=4, rule=FAST)
    out = a2a(node, [1024])
    for r, g in enumerate(node.gpus):
        slots = {node.buffers["legacy"][p].peer_inbox_slot(p, r): p for p in range(4) if p != r}
        order = [slots[d] for d in g.copy_dsts if d in slots]
        assert order[:3] == [(r + k) % 4 for k in (1, 2, 3)] and order == order[:3] * (len(order) // 3)
        assert g.barriers == len(order)
    assert all(x.verified for rows in out for x in rows)


def test_ce_alltoall_fails_when_a_barrier_gave_up():
    node = FakeNode(n=3, rule=FAST)
    for bs in node.buffers["legacy"]:
        node.memory.view(bs.ctrl + alltoall.A2A_STATUS, 4)[:] = 1
    with pytest.raises(Exception, match="device barrier"):
        a2a(node, [1024])


def test_alltoall_blames_the_flows_of_a_broken_source():
    """A fake: rank 1's transfers do nothing; ranks 0 and 2 find poison in rank 1's slot, and the rows
    of rank 1's flows (not the finders' own rows) fail."""
    node = FakeNode(n=3, rule=FAST, gpu_kw=[{}, dict(drop_copies=True), {}])
    out = a2a(node, [4096])
    assert all(x.verified for x in out[0] + out[2])
    for x in out[1]:
        assert not x.verified and f"{x.samples * 1024} mismatched words" in x.note


def test_nccl_alltoall_is_one_group_on_one_communicator_of_the_node(monkeypatch):
    """A fake NCCL: every rank makes one communicator of the node's 3 ranks (made once, destroyed at the clean-up);
    each all-to-all sends to and receives from every peer, and every flow lands verified."""
    from fakes import FakeNccl
    from ipcbench.ipc import nccl

    fake = FakeNccl()
    monkeypatch.setattr(nccl, "load", lambda: fake)
    node = FakeNode(n=3, rule=FAST)

    def body(ctx):
        rows = alltoall.measure_alltoall(ctx, "nccl_alltoall", [1024]) + alltoall.measure_alltoall(
            ctx, "nccl_alltoall", [2048])
        ctx.world.node_barrier("test")
        ctx.clean_up()
        return rows

    out = node.run(body)
    assert len(fake.comms) == 3 and {c.ndev for c in fake.comms} == {3} and all(c.destroyed for c in fake.comms)
    for r, rows in enumerate(out):
        assert [(x.dst_rank, x.bytes) for x in rows] == [(p, b) for b in (1024, 2048) for p in range(3) if p != r]
        assert all(x.verified and x.method == "nccl_alltoall" for x in rows)
    assert all(c.calls["send"] == c.calls["recv"] for c in fake.comms)


def test_the_nodes_nccl_communicator_needs_one_rank_per_gpu():
    from ipcbench.ipc.nccl import node_support

    assert node_support([0, 1, 2, 3]) == (True, None)
    ok, why = node_support([0, 1, 0, 1])
    assert not ok and "4 ranks on 2 GPUs" in why


def test_gpu_windows():
    marks = [[(0, 100), (1000, 1200)], [(50, 300), (990, 1100)], [(0, 10), (0, 10)]]
    assert alltoall.gpu_windows_ms(marks, [0, 0, 1]) == {0: pytest.approx((300 + 210) / 1e6),
                                                         1: pytest.approx(20 / 1e6)}


# ---- latency -------------------------------------------------------------------------------------

def test_latency_plan():
    steps = latency.steps(3, [1 << 20])
    assert [s.label for s in steps] == ["ce one-way", "sm_write one-way", "sm_read one-way", "shm_staged one-way",
                                        "mpi_staged one-way", "sm pingpong", "event pingpong"]
    assert all(s.sizes == latency.LAT_SIZES for s in steps[:5])
    assert steps[5].sizes == [4] and len(steps[5].pairs) == 3 and len(steps[0].pairs) == 6
    assert steps[0].needs == ("legacy",) and steps[3].needs == ()


@pytest.mark.parametrize("label, direction", [("ce one-way", "push"), ("sm_read one-way", "pull")])
def test_latency_oneway_rows(label, direction):
    """A fake: back-to-back transfers of 2 us: the row is a oneway latency row of 2 us, no bandwidth."""
    (step,) = [s for s in latency.steps(2, []) if s.label == label]
    node = FakeNode(rule=FAST, gpu_kw=[dict(transfer_ns=lambda n: 2 * US)] * 2)
    rows, _ = node.run(lambda ctx: step.run(ctx, 0, 1, [8, 64]))
    assert [(r.direction, r.kind, r.bytes) for r in rows] == [("oneway", "latency", 8), ("oneway", "latency", 64)]
    for r in rows:
        assert r.time_us_median == pytest.approx(2.0) and r.bw_gbps_median is None and r.verified
        assert r.note.startswith(f"{direction}: {latency.ONEWAY_NOTE}")
        assert ("; SM copy kernel, up to 8 blocks of 512 threads" in r.note) == label.startswith("sm_")  # how it ran


def test_same_gpu_notes():
    node = FakeNode(n=3, gpu_of=[0, 0, 1])
    ctx = node.ctx(type("W", (), {"local_rank": 0, "node_ranks": [0, 1, 2]})())
    assert latency._same_gpu_note(ctx, 0, 2) == ""
    assert latency._same_gpu_note(ctx, 0, 1) == latency.TIME_SLICED_NOTE
    ctx.mps = True
    assert latency._same_gpu_note(ctx, 0, 1) == latency.MPS_NOTE


# ---- handles and pipeline planning ---------------------------------------------------------------

def test_handles_plan():
    assert handles.size_classes([4096, 1 << 20, 4 << 20, 64 << 20, 1 << 30]) == [4096, 4 << 20, 1 << 30]
    assert handles.size_classes([8, 8]) == [8]
    labels = [s.label for s in handles.steps(3, [4096, 1 << 20])]
    assert labels == ["memory handles", "event handles", "pool handles", "cuda.core handles", "vmm handles",
                      "error paths"]
    assert [s.label for s in handles.steps(1, [4096])] == ["memory handles", "event handles", "pool handles",
                                                          "cuda.core handles", "vmm handles"]
    (err,) = [s for s in handles.steps(4, [4096]) if s.label == "error paths"]
    assert err.pairs == [(0, 1)] and err.sizes == [2 << 20]


def test_pipeline_plan_binds_each_depth(monkeypatch):
    steps = pipeline.steps(2, [64 << 10, 4 << 20])
    assert [s.label for s in steps] == ["ring depth 2", "ring depth 4", "ring depth 8"]
    assert [s.sizes for s in steps] == [[64 << 10, 1 << 20, 2 << 20], [64 << 10, 1 << 20], [64 << 10]]
    assert all(s.pairs == [(0, 1), (1, 0)] and s.needs == ("legacy",) for s in steps)
    seen = []
    monkeypatch.setattr(pipeline, "measure_ring", lambda ctx, src, dst, depth, chunks: seen.append(depth) or [])
    for s in steps:
        s.run(None, 0, 1, s.sizes)
    assert seen == [2, 4, 8]  # each step measures its own ring depth
    assert pipeline.plan([64 << 10, 1 << 20], capacity=256 << 10) == [(2, [64 << 10]), (4, [64 << 10])]


# ---- staged: planning and the sweep's protocol on a fake pipe ------------------------------------

def test_staged_params_and_steps(monkeypatch):
    p = staged.params()
    assert {"shm_chunk", "shm_slots", "mpi_chunk", "mpi_slots"} <= set(p)
    assert [s.label for s in staged.steps(3, [4096])] == ["shm_staged push", "mpi_staged push"]
    monkeypatch.setenv("IPCBENCH_SHM_SLOTS", "0")
    with pytest.raises(UsageError, match="IPCBENCH_SHM_SLOTS=0"):
        staged.steps(3, [4096])


def test_staged_notes():
    from ipcbench.suites.staged_plan import plan_chunks

    node = FakeNode(gpu_of=[0, 0])
    ctx = node.ctx(type("W", (), {"local_rank": 0, "node_ranks": [0, 1]})())
    one, many = plan_chunks(4096, 1 << 20, 3), plan_chunks(8 << 20, 1 << 20, 3)
    assert "same GPU" in staged._shm_note(ctx, 0, 1, one) and "POSIX shm" in staged._shm_note(ctx, 0, 1, one)
    ctx.mps = True
    assert "same GPU" not in staged._shm_note(ctx, 0, 1, one)
    assert "one chunk per message, messages pipelined" in staged._mpi_note(ctx, 0, 1, one)
    assert "8 chunks of 1M through 3 slots, pipelined" in staged._mpi_note(ctx, 0, 1, many)


class FakePipe:
    """A stand-in for a host-staged pipe (suites/staged_shm.ShmPipe): open() swaps buffer pointers with the
    peer; timed() copies the source's buffer into the destination's between two pair barriers (so the
    destination checks after the data arrived) at `ns_per_byte[role]`; `fail_at` makes the n-th timed
    call on the source raise."""

    made: list = []
    ns_per_byte = {"src": 1.0, "dst": 1.0}
    fail_at: int | None = None

    def __init__(self, ctx, role, peer, chunk, slots, max_bytes):
        self.ctx, self.role, self.peer, self.chunk, self.slots = ctx, role, peer, min(chunk, max_bytes), slots
        self.buf = ctx.gpu.malloc(max_bytes)
        self.calls = 0
        self.closed = False
        FakePipe.made.append(self)

    def open(self, max_bytes):
        self.peer_buf = self.ctx.world.exchange(self.buf, self.peer, tag=77)

    def timed(self, plan, count):
        w, mem = self.ctx.world, self.ctx.gpu.memory
        self.calls += 1
        if self.role == "src" and self.calls == self.fail_at:
            raise RuntimeError("the fake pipe broke")
        w.pair_barrier(self.peer, tag=78)
        if self.role == "src" and not self.ctx.gpu.drop_copies:
            mem.view(self.peer_buf, plan.nbytes)[:] = mem.view(self.buf, plan.nbytes)
        w.pair_barrier(self.peer, tag=79)
        return count * plan.nbytes * self.ns_per_byte[self.role] / 1e6, count

    def close(self):
        self.closed = True
        self.ctx.gpu.free(self.buf)


@pytest.fixture
def fake_pipe(monkeypatch):
    from ipcbench.suites import staged_mpi, staged_shm

    FakePipe.made = []
    FakePipe.ns_per_byte = {"src": 1.0, "dst": 1.0}
    FakePipe.fail_at = None
    monkeypatch.setattr(staged_shm, "ShmPipe", FakePipe)
    monkeypatch.setattr(staged_mpi, "MpiPipe", FakePipe)
    # bandwidth rows take samples of at least STAGED_MIN_SAMPLE_S (10 ms: ~10,000 fake transfers); scale it
    # to the fast rule so the logic stays quick: 5 times a sample
    monkeypatch.setattr(staged, "STAGED_MIN_SAMPLE_S", 5 * FAST.min_time_s)
    return FakePipe


@pytest.mark.parametrize("method", ["shm_staged", "mpi_staged"])
def test_staged_sweep_source_decides_and_destination_verifies(fake_pipe, method):
    """A fake pipe: the destination calibrates slower (3 ns/B) than the source (1 ns/B), so the two
    would pick different counts; the source's count is used on both sides, and the destination's
    checks reach the source's row."""
    fake_pipe.ns_per_byte = {"src": 1.0, "dst": 3.0}
    node = FakeNode(rule=FAST)
    rows, other = node.run(lambda ctx: staged.sweep_staged(ctx, method, 0, 1, [1000, 4000]))
    assert other == []
    assert [r.bytes for r in rows] == [1000, 4000]
    for r in rows:
        assert r.method == method and r.direction == "push" and r.verified and r.checks == r.samples
        assert r.time_us_median == pytest.approx(r.bytes / 1e3)  # the source's 1 ns per byte
        sample_us = r.iterations * r.time_us_median
        if method == "shm_staged":
            # its bandwidth rows' samples are calibrated to STAGED_MIN_SAMPLE_S (a pipeline fill per sample),
            # not to min_time: at least half of it (calibration's accepted band), so far more than min_time
            assert sample_us >= 0.5 * staged.STAGED_MIN_SAMPLE_S * 1e6 > 2 * FAST.min_time_s * 1e6
        else:
            assert FAST.min_time_s * 1e6 * 0.5 <= sample_us < 0.5 * staged.STAGED_MIN_SAMPLE_S * 1e6
    src, dst = fake_pipe.made
    assert src.calls == dst.calls and src.closed and dst.closed
    assert len(node.gpus[1].verifies) == sum(r.samples for r in rows) and not node.gpus[0].verifies


def test_staged_sweep_reports_lost_data(fake_pipe):
    node = FakeNode(rule=FAST, gpu_kw=[dict(drop_copies=True), {}])
    (row,), _ = node.run(lambda ctx: staged.sweep_staged(ctx, "shm_staged", 0, 1, [4096], suite="latency",
                                                          direction="oneway", kind="latency", note="n"))
    assert not row.verified and f"{row.samples * 1024} mismatched words" in row.note
    assert row.kind == "latency" and row.bw_gbps_median is None and row.note.startswith("n; ")


def test_staged_sweep_closes_the_pipe_on_error(fake_pipe):
    fake_pipe.fail_at = 2
    node = FakeNode(rule=FAST)
    with pytest.raises(RuntimeError, match="the fake pipe broke"):
        node.run(lambda ctx: staged.sweep_staged(ctx, "shm_staged", 0, 1, [4096]))
    assert all(p.closed for p in fake_pipe.made) and len(fake_pipe.made) == 2


def test_twins_take_every_other_size_of_the_default_sweep_only():
    """Pool, vmm and cuda.core steps (the legacy engines on memory shared another way) are twins: under the
    default sweep they measure every other size from the largest down (256M, 64M, ..., 4K); an explicit
    --sizes, even the default one spelled out, gives every step every size; --quick keeps its two sizes."""
    from ipcbench.cli import _bench_parser
    from ipcbench.config import build_config
    from ipcbench.sizes import parse_sizes
    from ipcbench.suites.registry import thinned

    def steps(*args):
        return build_config(_bench_parser().parse_args(["copy", "pool", "vmm", *args])).steps(2)

    default = steps()
    full = parse_sizes("4K:256M")
    assert thinned(full) == [4 << 10 << (2 * i) for i in range(9)]
    assert thinned([4, 8, 16]) == [4, 16] and thinned([8]) == [8]
    for s in default:
        assert s.twin == (s.suite != "copy"), s.label
        assert s.sizes == (thinned(full) if s.twin else full), s.label
    assert all(s.sizes == full for s in steps("--sizes", "4K:256M"))
    assert all(s.sizes == [4 << 10, 256 << 20] for s in steps("--quick"))
    cfg = build_config(_bench_parser().parse_args(["all"]))
    assert cfg.options_meta()["twin_sizes"] == "every other size"
    cfg = build_config(_bench_parser().parse_args(["all", "--sizes", "1M"]))
    assert cfg.options_meta()["twin_sizes"] == "every size"
