"""Permutation rounds (core/round.py, run/walk.groups_of) on fakes (tests/fakes.py: host memory for GPU memory,
threads for ranks). A fake: these test roles, counts and samples agreed across the round, verification accounting and
the walk's plan, not a GPU; whether a round leaves a row within its noise of the pair alone is measured on GPUs
(tests/test_gpu_suites.py, docs/measurement.md)."""

from __future__ import annotations

import pytest

from fakes import FakeNode
from ipcbench.core.methods import METHODS
from ipcbench.core.round import measure_round, round_roles
from ipcbench.core.sampler import SamplingRule
from ipcbench.core.schedule import PairMode, decide_permutation, permutation_rounds
from ipcbench.run.collect import RowSink
from ipcbench.run.walk import groups_of, guarded, walk
from ipcbench.suites.registry import plan

FAST = SamplingRule(min_time_s=2e-5)
US = 1000.0
SHIFT1 = [(0, 1), (1, 2), (2, 3), (3, 0)]


def test_roles_in_a_round():
    assert round_roles(SHIFT1, 1) == ((1, 2), (0, 1))
    assert round_roles([(0, 1)], 2) == (None, None)
    with pytest.raises(ValueError, match="permutation round"):
        round_roles([(0, 1), (0, 2)], 0)


@pytest.mark.parametrize("method, direction", [("ce", "push"), ("sm_read", "pull"), ("sm_write", "push")])
def test_every_flow_of_a_round_is_its_own_row(method, direction):
    """Rank r's copies cost (r + 1) us: a push flow's time is its source's, a pull flow's its destination's (the
    driver's). Every flow takes the round's one count and one number of samples, and lands verified."""
    node = FakeNode(n=4, rule=FAST, gpu_kw=[dict(transfer_ns=lambda n, r=r: (r + 1) * US) for r in range(4)])
    out = node.run(lambda ctx: measure_round(ctx, "copy", METHODS[method], direction, SHIFT1, [1024, 4096]))
    rows = [x for r in out for x in r]
    assert sorted((x.src_rank, x.dst_rank, x.bytes) for x in rows) == sorted(
        (a, b, n) for a, b in SHIFT1 for n in (1024, 4096))
    for x in rows:
        driver = x.src_rank if direction == "push" else x.dst_rank
        assert x.time_us_median == pytest.approx(driver + 1) and x.verified and x.checks == x.samples
        assert x.method == method and x.direction == direction
    for n in (1024, 4096):
        at = [x for x in rows if x.bytes == n]
        assert len({x.iterations for x in at}) == 1 and len({x.samples for x in at}) == 1
        assert at[0].iterations * 4e-3 >= FAST.sample_s(n) * 1e3 / 2  # long enough on the slowest driver


def test_a_broken_source_fails_its_own_flow_only():
    node = FakeNode(n=4, rule=FAST, gpu_kw=[{}, dict(drop_copies=True), {}, {}])
    out = node.run(lambda ctx: measure_round(ctx, "copy", METHODS["ce"], "push", SHIFT1, [1024]))
    for r, rows in enumerate(out):
        (x,) = rows
        assert x.verified is (r != 1), (r, x.note)


def test_a_rank_outside_the_round_takes_part_and_writes_nothing():
    node = FakeNode(n=3, rule=FAST)
    out = node.run(lambda ctx: measure_round(ctx, "copy", METHODS["ce"], "push", [(0, 1), (1, 0)], [1024]))
    assert [len(r) for r in out] == [1, 1, 0] and all(x.verified for r in out for x in r)


def test_two_sided_methods_have_no_permutation_round():
    node = FakeNode(n=2, rule=FAST)
    with pytest.raises(ValueError, match="two-sided"):
        node.run(lambda ctx: measure_round(ctx, "nccl", METHODS["nccl"], "push", [(0, 1), (1, 0)], [1024]))


def _permuting(table, n=4):
    """A concurrent node of n NVSwitch GPUs whose permutation rounds cover `table` (engine -> largest size)."""
    return PairMode("concurrent", "auto", "test",
                    permutation=decide_permutation("auto", 1, ["nvswitch"] * (n * (n - 1)), table))


def test_a_step_is_split_between_permutation_and_disjoint_rounds_by_size():
    mode = _permuting({"ce": 8192})
    steps = {s.label: s for s in plan(["copy", "nccl"], 4, [4096, 8192, 1 << 20])}
    push = groups_of(steps["ce push"], mode)
    assert [(g.kind, g.sizes, len(g.flows)) for g in push] == [("permutation", (4096, 8192), 4)] * 3 + \
        [("disjoint", (1 << 20,), 2)] * 6
    assert [g.flows for g in push[:3]] == [tuple(r) for r in permutation_rounds(steps["ce push"].pairs)]
    assert {g.kind for g in groups_of(steps["ce bidir"], mode)} == {"disjoint"}
    assert {g.kind for g in groups_of(steps["nccl push"], mode)} == {"disjoint"}
    # the guard: each kind of round of the engine once, at the largest size it measured
    checks = guarded([steps["ce push"], steps["ce pull"]], mode)
    assert list(checks) == [0] and [(c.kind, c.sizes) for c in checks[0]] == [("disjoint", (1 << 20,)),
                                                                               ("permutation", (8192,))]


def test_walk_measures_permutation_rounds_and_checks_them(capsys):
    mode = _permuting({"ce": 1 << 30})
    (step,) = [s for s in plan(["copy"], 4, [1024]) if s.label == "ce push"]
    node = FakeNode(n=4, rule=FAST, kinds=("legacy",))
    out = node.run(lambda ctx: walk(ctx, [step], RowSink(ctx.world, None, None), quiet=True, mode=mode))
    rows, (check,) = out[0]
    assert sorted((x.src_rank, x.dst_rank) for x in rows) == [(a, b) for a in range(4) for b in range(4) if a != b]
    assert all("permutation round of 4 flows" in x.note and x.round_pairs == 4 and x.verified for x in rows)
    assert check["round"] == "permutation" and check["ok"] and len(check["pairs"]) == 4
    assert "may share a link" not in capsys.readouterr().err
