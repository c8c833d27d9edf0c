"""What a run plans is what it writes: every step declares its rows (Step.writes, catalogue/planned.RowShape), the run
records each node's steps, pairs and sizes (run/walk.planned, meta.json's planned_rows), and the walk writes exactly
those rows, over every way it walks pairs (one at a time, rounds, a ring of the serial steps, every rank at once,
ranks sharing GPUs, one rank pair per GPU pair), on fakes (tests/fakes.py: threads for ranks, host memory for GPUs).
"""

from __future__ import annotations

import json
import threading

import pytest

from fakes import FakeNccl, FakeNode
from test_run_on_fakes import cfg, fake_job  # noqa: F401 (a fixture)
from ipcbench.catalogue.planned import PlannedStep, RowShape, merged
from ipcbench.catalogue.suites import ORDER, ROWS
from ipcbench.core import gpu as gpumod
from ipcbench.core.rows import make_row
from ipcbench.results import SCHEMA_VERSION
from ipcbench.core.schedule import PairMode, SerialPairs
from ipcbench.ipc import nccl as ncclmod
from ipcbench.record.meta import read_meta
from ipcbench.record.run import load_run
from ipcbench.results import DIRECTIONS, RUN_KEY
from ipcbench.run.collect import RowSink
from ipcbench.run.walk import planned, walk
from ipcbench.suites.registry import Step, plan

SEQUENTIAL = PairMode("sequential", "sequential", "test")
CONCURRENT = PairMode("concurrent", "concurrent", "test")
RING = PairMode("sequential", "sequential", "test", SerialPairs("ring", "ring", "--serial-pairs ring"))


def keys_of(steps: list[PlannedStep], rank_of) -> set[tuple]:
    got = [k for s in steps for k, _ in s.keys(rank_of)]
    assert len(got) == len(set(got)), "a row planned twice"
    return set(got)


def row_keys(rows) -> list[tuple]:
    return [tuple(getattr(r, c) for c in RUN_KEY) for r in rows]


def fake_steps(n: int) -> list[Step]:
    """A transfer step in rounds, a serial step, a step of every rank, a cross-GPU step and a step of two rows per pair
    at a size of its own: each writes what it declares (the rows a real suite's step writes, on the source rank)."""
    lock = threading.Lock()

    def writer(shapes, cross=False):
        def run(ctx, src, dst, sizes):
            if ctx.world.local_rank != src or (cross and ctx.same_gpu(src, dst)):
                return []
            with lock:
                return [make_row(ctx, suite="copy", method=s.method, direction=s.direction, src=src, dst=dst,
                                 nbytes=nb if s.bytes is None else s.bytes, per_us=[1.0] * 3, iterations=1, moved=None,
                                 checks=3, mismatches=0) for nb in sizes for s in shapes]
        return run

    def everyone(ctx, sizes):
        me = ctx.world.local_rank
        return [make_row(ctx, suite="copy", method="ce_alltoall", direction="push", src=me, dst=p, nbytes=nb,
                         per_us=[1.0] * 3, iterations=1, moved=nb, checks=3, mismatches=0)
                for nb in sizes for p in range(ctx.world.local_size) if p != me]

    ordered = [(a, b) for a in range(n) for b in range(n) if a != b]
    unordered = [(a, b) for a in range(n) for b in range(a + 1, n)]
    two = (RowShape("ce", "op"), RowShape("ce", "oneway", bytes=0))
    return [Step("copy", "ce push", ordered, [64, 128], writer((RowShape("ce", "push"),)), needs=("legacy",),
                 rounds_ok=True, engine="ce", writes=(RowShape("ce", "push"),)),
            Step("copy", "ce bidir serial", unordered, [64], writer((RowShape("ce", "bidir"),)), needs=("legacy",),
                 writes=(RowShape("ce", "bidir"),)),
            Step("copy", "every rank", [], [256], everyone, all_ranks=True, needs=("legacy",),
                 writes=(RowShape("ce_alltoall", "push"),)),
            Step("copy", "cross", ordered, [32], writer((RowShape("ce", "pull"),), cross=True), needs=("legacy",),
                 writes=(RowShape("ce", "pull"),), cross_gpu=True),
            Step("copy", "two rows", ordered, [4], writer(two), needs=("legacy",), writes=two)]


@pytest.mark.parametrize("mode, gpu_of", [(SEQUENTIAL, [0, 1, 2, 3]), (CONCURRENT, [0, 1, 2, 3]), (RING, [0, 1, 2, 3]),
                                          (SEQUENTIAL, [0, 1, 0, 1]),
                                          (PairMode("sequential", "auto", "test", gpu_of=(0, 1, 0, 1)), [0, 1, 0, 1])],
                         ids=["sequential", "rounds", "ring", "ranks sharing GPUs", "one rank pair per GPU pair"])
def test_the_walk_writes_exactly_the_rows_it_planned(mode, gpu_of):
    node = FakeNode(n=4, kinds=("legacy",), gpu_of=gpu_of)
    steps = fake_steps(4)
    out = node.run(lambda ctx: walk(ctx, steps, RowSink(ctx.world, None, None), quiet=True, mode=mode)[0])
    got = row_keys(out[0])
    assert len(got) == len(set(got))
    assert set(got) == keys_of(planned(steps, mode, gpu_of, "fakehost"), lambda h, r: (r, gpu_of[r]))


def test_a_step_of_ranks_sharing_a_gpu_plans_no_pair_it_cannot_measure():
    steps = fake_steps(4)
    cross = next(p for p in planned(steps, SEQUENTIAL, [0, 1, 0, 1], "h") if p.step == "cross")
    assert cross.pairs == ((0, 1), (0, 3), (1, 0), (1, 2), (2, 1), (2, 3), (3, 0), (3, 2))


def test_a_fleets_nodes_that_plan_alike_are_one_entry():
    steps = fake_steps(2)
    a, b = planned(steps, SEQUENTIAL, [0, 1], "a"), planned(steps, SEQUENTIAL, [0, 1], "b")
    both = merged(a + b)
    assert [s.hosts for s in both] == [("a", "b")] * len(steps)
    assert keys_of(both, lambda h, r: (r + (2 if h == "b" else 0), r)) == \
        keys_of(a, lambda h, r: (r, r)) | keys_of(b, lambda h, r: (r + 2, r))
    bigger = planned(fake_steps(4), RING, [0, 1, 2, 3], "c")  # another node, another plan: entries of its own
    assert [s.hosts for s in merged(a + bigger)] == [("a",)] * len(steps) + [("c",)] * len(steps)


@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize("quick, thin", [(False, False), (True, False), (False, True)], ids=["all", "quick", "twins"])
def test_every_step_of_every_suite_declares_the_rows_it_writes(n, quick, thin):
    """Its methods are those the catalogue says its suite writes, its directions rows' directions; no two steps plan
    one row. The rows it writes are its code's (tests/test_gpu_suites.py holds a real run to its plan)."""
    steps = plan(list(ORDER), n, [4096 << i for i in range(17)], quick=quick, thin_twins=thin)
    for s in steps:
        assert s.writes, f"{s.suite}/{s.label} declares no rows"
        for shape in s.writes:
            assert shape.method in ROWS[s.suite] and shape.direction in DIRECTIONS, (s.suite, s.label, shape)
    every = planned(steps, SEQUENTIAL, list(range(n)), "h")
    assert len(every) == len(steps) and keys_of(every, lambda h, r: (r, r))


def test_the_rows_each_step_writes_are_the_ones_its_code_names():
    """The steps whose code names rows by their declaration: the pipeline's, the handle costs', the error paths'."""
    from ipcbench.catalogue.suites import HANDLE_CALLS, SHARE_COST_ROWS
    from ipcbench.suites import handles, pipeline

    assert [s.method for s in pipeline.ring_rows(4)] == ["ring_d4", "ring_d4_latency"]
    by = {s.label: s for s in handles.steps(2, [4096, 1 << 20])}
    assert [s.method for s in by["memory handles"].writes] == list(HANDLE_CALLS["legacy"][:4])
    assert [s.method for s in by["vmm handles"].writes] == [*SHARE_COST_ROWS["vmm"][0], *SHARE_COST_ROWS["vmm"][1]]
    assert all(s.unless for s in by["pool handles"].writes) and by["event handles"].sizes == [0]
    assert [(s.method, s.bytes) for s in by["error paths"].writes] == [(m, 0) for m in HANDLE_CALLS["legacy"][4:]]


def _loaded(out):
    run = load_run(out / "results.csv")
    raw = json.loads((out / "meta.json").read_text())
    assert raw["schema_version"] == SCHEMA_VERSION == 6 and run.unchecked == "" and run.incomplete == ""
    return run, raw


def test_a_run_on_fakes_records_its_plan_and_holds_it(fake_job, tmp_path):  # noqa: F811
    """copy and the all-to-all on three ranks, with pool's steps and NCCL's all-to-all skipped: read back whole."""
    out = tmp_path / "run"
    statuses, _ = fake_job(cfg(out, suites=("copy", "pool", "alltoall"), argv=("all",), quiet=True, sizes=(4096,)),
                           n=3)
    assert statuses == [0, 0, 0]
    run, raw = _loaded(out)
    assert {p["suite"] for p in raw["planned_rows"]} == {"copy", "pool", "alltoall"}
    planned_keys = keys_of(run.meta.planned_rows, lambda h, r: (r, r))
    skipped = {(s.suite, s.step) for s in run.meta.skipped}
    assert {(p.suite, p.step) for p in run.meta.planned_rows if p.suite == "pool"} | {("alltoall", "nccl all-to-all")} \
        == skipped
    held = {k for p in run.meta.planned_rows if (p.suite, p.step) not in skipped
            for k, _ in p.keys(lambda h, r: (r, r))}
    assert set(row_keys(run.frame.itertuples())) == held and held < planned_keys
    assert read_meta(out).planned_rows == run.meta.planned_rows  # what the draft wrote reads back equal


def test_nccl_plans_no_pair_of_ranks_sharing_a_gpu(fake_job, tmp_path, monkeypatch):  # noqa: F811
    """Four ranks on two GPUs, --quick (one rank pair per GPU pair): NCCL writes no row of ranks sharing a GPU, and
    plans none."""
    lib = FakeNccl()
    monkeypatch.setattr(ncclmod, "load", lambda: lib)
    monkeypatch.setattr(gpumod, "device_count", lambda: 2)
    out = tmp_path / "run"
    statuses, _ = fake_job(cfg(out, suites=("nccl",), argv=("nccl",), quiet=True, sizes=(4096,), quick=True), n=4,
                           gpu_of=[0, 1, 0, 1])
    assert statuses == [0] * 4
    run, _ = _loaded(out)
    pairs = {p for s in run.meta.planned_rows for p in s.pairs}
    assert pairs and all(a % 2 != b % 2 for a, b in pairs) and len(run.frame) > 0
