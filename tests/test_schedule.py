"""Rounds of disjoint pairs (core/schedule.py) and when a run may use them. Pure logic, no GPU; the
8-rank plan is also checked end to end through `mpiexec -n 8 ipcbench all --dry-run --pairs concurrent`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import launcher_free_env, mpiexec_or_skip

from ipcbench.core.schedule import ModeError, circle_order, decide_mode, pair_rounds


def ordered(n):
    return [(a, b) for a in range(n) for b in range(n) if a != b]


def unordered(n):
    return [(a, b) for a in range(n) for b in range(a + 1, n)]


def _assert_rounds(rounds, pairs, n, expected_rounds):
    flat = [p for r in rounds for p in r]
    assert sorted(flat) == sorted(pairs), "every pair exactly once"
    for r in rounds:
        ranks = [x for p in r for x in p]
        assert len(ranks) == len(set(ranks)), f"a rank in two pairs of one round: {r}"
    assert len(rounds) == expected_rounds
    if n % 2 == 0:
        assert all(len(r) == n // 2 for r in rounds), "each round a perfect matching"


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8, 16])
def test_ordered_pairs_fall_into_2n_minus_2_rounds(n):
    m = n + n % 2
    _assert_rounds(pair_rounds(ordered(n)), ordered(n), n, 2 * (m - 1))


@pytest.mark.parametrize("n", [2, 3, 4, 6, 8])
def test_unordered_pairs_fall_into_n_minus_1_rounds(n):
    m = n + n % 2
    _assert_rounds(pair_rounds(unordered(n)), unordered(n), n, m - 1)


def test_circle_order_lists_every_ordered_pair_once():
    for n in (2, 3, 8):
        assert sorted(circle_order(n)) == sorted(ordered(n))


def test_any_pair_list_is_partitioned():
    pairs = [(0, 1), (1, 0), (0, 2), (3, 1), (2, 3)]
    rounds = pair_rounds(pairs)
    assert sorted(p for r in rounds for p in r) == sorted(pairs)
    for r in rounds:
        ranks = [x for p in r for x in p]
        assert len(ranks) == len(set(ranks))
    assert pair_rounds([]) == []


def test_auto_is_concurrent_only_behind_nvswitch_with_one_rank_per_gpu():
    sw = ["nvswitch"] * 12
    assert decide_mode("auto", 1, sw, 4).concurrent
    assert not decide_mode("auto", 1, sw[:-1] + ["nvlink"], 4).concurrent  # a direct mesh may share links
    assert not decide_mode("auto", 1, ["pcie"] * 12, 4).concurrent
    assert not decide_mode("auto", 1, None, 4).concurrent  # unknown topology
    m = decide_mode("auto", 2, sw, 4)
    assert not m.concurrent and "2 ranks per GPU" in m.reason
    assert not decide_mode("auto", 1, sw[:2], 2).concurrent  # two ranks: one pair per round anyway
    assert not decide_mode("sequential", 1, sw, 8).concurrent
    assert decide_mode("concurrent", 1, None, 8).as_dict() == {"mode": "concurrent", "requested": "concurrent",
                                                                "reason": "--pairs concurrent"}


def test_concurrent_is_refused_when_ranks_share_a_gpu():
    with pytest.raises(ModeError, match="share a GPU"):
        decide_mode("concurrent", 2, ["nvswitch"] * 2, 4)
    with pytest.raises(ValueError):
        decide_mode("sometimes", 1, None, 4)


@pytest.mark.timeout(240)
def test_eight_rank_plan_in_rounds():
    """`mpiexec -n 8` as one pretend node: every transfer step's rounds are perfect matchings covering every
    pair once; host paths, handles and the pipeline stay one pair at a time; the estimate shrinks."""
    env = launcher_free_env()

    def plan(*extra):
        p = subprocess.run([mpiexec_or_skip(), "-n", "8", sys.executable, "-m", "ipcbench", "all", "--dry-run", "--json",
                            *extra], capture_output=True, text=True, timeout=200, env=env)
        assert p.returncode == 0, p.stderr[-2000:]
        return json.loads(p.stdout)

    conc, seq = plan("--pairs", "concurrent"), plan("--pairs", "sequential")
    assert conc["pair_mode"]["mode"] == "concurrent" and seq["pair_mode"]["mode"] == "sequential"
    by_label = {(s["suite"], s["label"]): s for s in conc["steps"]}
    ce = by_label[("copy", "ce push")]["rounds"]
    _assert_rounds([[tuple(p) for p in r] for r in ce], ordered(8), 8, 14)
    bidir = by_label[("kernel", "sm_read bidir")]["rounds"]
    _assert_rounds([[tuple(p) for p in r] for r in bidir], unordered(8), 8, 7)
    assert by_label[("latency", "ce one-way")]["rounds"]
    for key in [("staged", "shm_staged push"), ("latency", "mpi_staged one-way"), ("handles", "memory handles"),
                ("pipeline", "ring depth 2")]:
        assert by_label[key]["rounds"] is None, key
    assert all(s["rounds"] is None for s in seq["steps"])
    assert conc["measurements"] == seq["measurements"]
    assert conc["estimated_s"] < 0.7 * seq["estimated_s"]
