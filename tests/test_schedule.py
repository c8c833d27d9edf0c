"""Rounds of disjoint pairs (core/schedule.py) and when a run may use them, and the serial steps' pair
coverage (every pair or a ring). Pure logic, no GPU; the 8-rank plan is also checked end to end through
`mpiexec -n 8 ipcbench all --dry-run --pairs concurrent [--serial-pairs ring]`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import launcher_free_env, mpiexec_or_skip

from ipcbench.core.schedule import (ModeError, circle_order, decide_mode, decide_permutation, decide_serial_pairs,
                                    pair_rounds, permutation_rounds, ring_pairs)


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
    assert decide_mode("concurrent", 1, None, 8).as_dict() == {
        "mode": "concurrent", "requested": "concurrent", "reason": "--pairs concurrent",
        "serial_pairs": {"coverage": "all", "requested": "auto", "reason": "topology unknown (no NVML link table)"},
        "permutation": {"up_to": {}, "reason": "not every GPU pair is linked through NVSwitch"}}


def test_concurrent_is_refused_when_ranks_share_a_gpu():
    with pytest.raises(ModeError, match="share a GPU"):
        decide_mode("concurrent", 2, ["nvswitch"] * 2, 4)
    with pytest.raises(ValueError):
        decide_mode("sometimes", 1, None, 4)


@pytest.mark.parametrize("n", range(2, 17))
def test_the_ordered_ring_sends_and_receives_once_per_rank(n):
    ring = ring_pairs(ordered(n))
    assert len(ring) == n and set(ring) <= set(ordered(n))
    assert sorted(a for a, _ in ring) == list(range(n)) and sorted(b for _, b in ring) == list(range(n))
    assert ring == [p for p in ordered(n) if p in ring], "the step's own order is kept"
    if n == 2:
        assert ring == ordered(2)  # two ranks: the ring is every pair
    else:
        assert (n - 1, 0) in ring and all((i, i + 1) in ring for i in range(n - 1))


@pytest.mark.parametrize("n", range(2, 17))
def test_the_unordered_ring_has_each_rank_in_two_pairs(n):
    ring = ring_pairs(unordered(n))
    assert set(ring) <= set(unordered(n))
    if n == 2:
        assert ring == [(0, 1)]
    else:
        assert len(ring) == n and all(sum(r in p for p in ring) == 2 for r in range(n))
        assert (0, n - 1) in ring and all((i, i + 1) in ring for i in range(n - 1))


def test_the_ring_of_an_hgx_crosses_the_sockets_twice():
    """GPUs 0-3 on one socket, 4-7 on the other: the ring measures both kinds of pair, both ways across."""
    ring = ring_pairs(ordered(8))
    across = [(a, b) for a, b in ring if (a < 4) != (b < 4)]
    assert across == [(3, 4), (7, 0)] and len(ring) - len(across) == 6


def test_a_partial_pair_list_keeps_its_ring_pairs():
    assert ring_pairs([(0, 1)]) == [(0, 1)]  # handles' error paths: one pair, kept
    assert ring_pairs([(0, 2), (2, 0), (4, 0)]) == [(0, 2), (4, 0)]  # the ranks named: 0 -> 2 -> 4 -> 0
    assert ring_pairs([]) == []


SW8 = ["nvswitch"] * 56


@pytest.mark.parametrize("quick", [False, True])
def test_serial_pairs_all_and_ring_are_what_was_asked(quick):
    for rpg in (1, 2):
        for kinds in (SW8, None, ["pcie"] * 56):
            for n in (2, 4, 8):
                assert decide_serial_pairs("all", rpg, kinds, n, quick).coverage == "all"
                ring = decide_serial_pairs("ring", rpg, kinds, n, quick)
                assert (ring.coverage, ring.reason) == ("ring", "--serial-pairs ring")


def test_serial_pairs_auto_rings_only_where_pairs_are_alike():
    auto = decide_serial_pairs
    assert auto("auto", 1, SW8, 8).ring and auto("auto", 1, SW8[:12], 4).ring
    assert "NVSwitch" in auto("auto", 1, SW8, 8).reason
    assert not auto("auto", 1, SW8[:6], 3).ring  # fewer than 4 ranks: every pair is affordable
    assert not auto("auto", 1, None, 8).ring  # topology unknown
    assert not auto("auto", 1, SW8[:-1] + ["nvlink"], 8).ring  # a mesh: pairs differ
    assert not auto("auto", 1, ["pcie"] * 56, 8).ring
    two = auto("auto", 2, SW8, 8)  # 8 ranks on 4 GPUs: same-GPU pairs are the point, a ring misses them
    assert not two.ring and "2 ranks per GPU" in two.reason
    with pytest.raises(ValueError):
        auto("sometimes", 1, SW8, 8)


def test_quick_rings_wherever_each_gpu_has_one_rank():
    for kinds in (SW8, None, ["pcie"] * 56):
        for n in (2, 3, 8):
            q = decide_serial_pairs("auto", 1, kinds, n, quick=True)
            assert q.ring and "--quick" in q.reason
    assert not decide_serial_pairs("auto", 2, SW8, 8, quick=True).ring
    assert not decide_serial_pairs("all", 1, SW8, 8, quick=True).ring


def test_the_pair_mode_carries_its_coverage():
    m = decide_mode("auto", 1, SW8, 8)
    assert m.concurrent and m.serial.ring and m.as_dict()["serial_pairs"]["coverage"] == "ring"
    assert m.serial.select(ordered(8)) == ring_pairs(ordered(8))
    seq = decide_mode("sequential", 1, SW8, 8, serial="all")
    assert not seq.concurrent and seq.serial.select(ordered(8)) == ordered(8)
    # the pair mode and the coverage are independent answers to independent questions
    assert decide_mode("sequential", 1, SW8, 8).serial.ring
    assert not decide_mode("concurrent", 1, None, 8).serial.ring


@pytest.mark.timeout(240)
def test_eight_rank_plan_in_rounds():
    """`mpiexec -n 8` as one pretend node: every transfer step's rounds are perfect matchings covering every
    pair once; host paths, handles and the pipeline stay one pair at a time; the estimate shrinks."""
    env = launcher_free_env()

    def plan(*extra):
        p = subprocess.run([mpiexec_or_skip(), "-n", "8", sys.executable, "-m", "ipcbench", "all", "--dry-run",
                            "--json", *extra], capture_output=True, text=True, timeout=200, env=env)
        assert p.returncode == 0, p.stderr[-2000:]
        return json.loads(p.stdout)

    conc, seq, perm = plan("--pairs", "concurrent"), plan("--pairs", "sequential"), plan("--pairs", "permutation")
    assert conc["pair_mode"]["mode"] == "concurrent" and seq["pair_mode"]["mode"] == "sequential"
    by_label = {(s["suite"], s["label"]): s for s in conc["steps"]}

    def flows(rounds, kind="disjoint"):
        assert {r["kind"] for r in rounds} == {kind}
        return [[tuple(p) for p in r["flows"]] for r in rounds]

    _assert_rounds(flows(by_label[("copy", "ce push")]["rounds"]), ordered(8), 8, 14)
    _assert_rounds(flows(by_label[("kernel", "sm_read bidir")]["rounds"]), unordered(8), 8, 7)
    assert by_label[("latency", "ce one-way")]["rounds"]
    for key in [("staged", "shm_staged push"), ("latency", "mpi_staged one-way"), ("handles", "memory handles"),
                ("pipeline", "ring depth 2")]:
        assert by_label[key]["rounds"] is None, key
    assert all(s["rounds"] is None for s in seq["steps"])
    assert conc["measurements"] == seq["measurements"] == perm["measurements"]
    assert conc["estimated_s"] < 0.7 * seq["estimated_s"]
    # --pairs permutation: every one-way step of a one-sided engine in the 7 cyclic shifts (each rank sends once and
    # receives once a round), bidirectional and NCCL steps still in disjoint rounds; the estimate shrinks again
    by_label = {(s["suite"], s["label"]): s for s in perm["steps"]}
    for key in [("copy", "ce push"), ("kernel", "sm_read pull"), ("kernel", "sm_bulk_write push"),
                ("latency", "sm_read one-way")]:
        rounds = flows(by_label[key]["rounds"], "permutation")
        assert sorted(p for r in rounds for p in r) == sorted(ordered(8)) and len(rounds) == 7, key
        assert all(sorted(a for a, _ in r) == sorted(b for _, b in r) == list(range(8)) for r in rounds), key
    _assert_rounds(flows(by_label[("kernel", "sm_read bidir")]["rounds"]), unordered(8), 8, 7)
    _assert_rounds(flows(by_label[("nccl", "nccl push")]["rounds"]), ordered(8), 8, 14)
    assert perm["estimated_s"] < conc["estimated_s"]


@pytest.mark.timeout(240)
def test_eight_rank_plan_with_serial_steps_on_a_ring():
    """`mpiexec -n 8 ... --serial-pairs ring`: every serial step measures the ring (each rank once as sender,
    once as receiver; unordered steps each rank in two pairs), transfer steps keep every pair in rounds, the
    plan says so, and the estimate and measurement count shrink accordingly."""
    env = launcher_free_env()

    def plan(*extra):
        p = subprocess.run([mpiexec_or_skip(), "-n", "8", sys.executable, "-m", "ipcbench", "all", "--dry-run",
                            *extra], capture_output=True, text=True, timeout=200, env=env)
        assert p.returncode == 0, p.stderr[-2000:]
        return p.stdout

    ring = json.loads(plan("--json", "--pairs", "concurrent", "--serial-pairs", "ring"))
    every = json.loads(plan("--json", "--pairs", "concurrent", "--serial-pairs", "all"))
    assert ring["pair_mode"]["serial_pairs"] == {"coverage": "ring", "requested": "ring",
                                                 "reason": "--serial-pairs ring"}
    assert every["pair_mode"]["serial_pairs"]["coverage"] == "all"
    by_label = {(s["suite"], s["label"]): s for s in ring["steps"]}
    for key in [("staged", "shm_staged push"), ("staged", "mpi_staged push"), ("latency", "mpi_staged one-way"),
                ("handles", "memory handles"), ("pipeline", "ring depth 2")]:
        s = by_label[key]
        pairs = [tuple(p) for p in s["pairs"]]
        assert s["ring"] and s["rounds"] is None and len(pairs) == 8, key
        assert sorted(a for a, _ in pairs) == list(range(8)) and sorted(b for _, b in pairs) == list(range(8))
    pp = [tuple(p) for p in by_label[("latency", "sm pingpong")]["pairs"]]
    assert len(pp) == 8 and all(sum(r in p for p in pp) == 2 for r in range(8))
    assert [tuple(p) for p in by_label[("handles", "error paths")]["pairs"]] == [(0, 1)]
    ce = by_label[("copy", "ce push")]
    assert not ce["ring"] and len(ce["pairs"]) == 56 and len(ce["rounds"]) == 14
    assert ring["measurements"] == sum(s["measurements"] for s in ring["steps"])
    assert ring["measurements"] < every["measurements"]
    assert ring["estimated_s"] < 0.8 * every["estimated_s"]
    text = plan("--pairs", "concurrent", "--serial-pairs", "ring")
    assert "serial:  one-pair-at-a-time steps" in text and "measure a ring" in text
    assert "8 pairs one at a time, a ring" in text and "estimated duration:" in text
    quick = json.loads(plan("--json", "--quick"))  # auto under --quick: a ring, whatever the topology
    assert quick["pair_mode"]["serial_pairs"]["coverage"] == "ring"
    assert quick["sizes"] == [4096, 256 << 20]
    assert by_label[("latency", "ce one-way")]["measurements"] > \
        {(s["suite"], s["label"]): s for s in quick["steps"]}[("latency", "ce one-way")]["measurements"]


def test_quick_with_ranks_sharing_gpus_keeps_one_rank_pair_per_gpu_pair():
    """4 ranks on 2 GPUs (rank i on GPU i % 2): 12 ordered rank pairs cross 4 ordered GPU pairs (0->1, 1->0, and
    each GPU with itself); a fleet check measures each once, by its first rank pair."""
    from ipcbench.core.schedule import EVERY_PAIR, PairMode, one_per_gpu_pair, per_gpu_pair
    from ipcbench.core.world import ordered_pairs, unordered_pairs

    gpu_of = (0, 1, 0, 1)
    assert one_per_gpu_pair(ordered_pairs(4), gpu_of) == [(0, 1), (0, 2), (1, 0), (1, 3)]
    assert one_per_gpu_pair(unordered_pairs(4), gpu_of) == [(0, 1), (0, 2), (1, 3)]
    mode = PairMode("sequential", "auto", "2 ranks per GPU", EVERY_PAIR)
    assert per_gpu_pair(mode, wanted=False, gpu_of=list(gpu_of)) is mode  # the full run measures every rank pair
    assert per_gpu_pair(mode, wanted=True, gpu_of=[0, 1, 2, 3]) is mode  # one rank per GPU: nothing to merge
    quick = per_gpu_pair(mode, wanted=True, gpu_of=list(gpu_of))
    assert quick.select(ordered_pairs(4), serial_step=False) == [(0, 1), (0, 2), (1, 0), (1, 3)]
    assert quick.as_dict()["rank_pairs"].startswith("one per GPU pair")
    assert "rank_pairs" not in mode.as_dict()


def test_one_rank_pair_per_gpu_pair_after_a_ring_keeps_both_directions():
    """A ring thinned from ordered pairs holds no pair both ways; it is still ordered: GPU 1 sends too (review)."""
    from ipcbench.core.schedule import PairMode, SerialPairs
    from ipcbench.core.world import ordered_pairs

    mode = PairMode("sequential", "auto", "x", SerialPairs("ring", "ring", "--serial-pairs ring"), gpu_of=(0, 1, 0, 1))
    got = mode.select(ordered_pairs(4), serial_step=True)
    assert {(mode.gpu_of[a], mode.gpu_of[b]) for a, b in got} == {(0, 1), (1, 0)}


# ---- permutation rounds --------------------------------------------------------------------------

@pytest.mark.parametrize("n", range(2, 10))
def test_the_ordered_pairs_fall_into_n_minus_1_cyclic_shifts(n):
    """Every ordered pair once; round k is rank i -> i+k mod n: each rank sends once and receives once."""
    rounds = permutation_rounds(ordered(n))
    assert len(rounds) == n - 1
    assert sorted(p for r in rounds for p in r) == sorted(ordered(n))
    for k, r in enumerate(rounds, start=1):
        assert sorted(r) == sorted((i, (i + k) % n) for i in range(n))


def test_any_pairs_pack_into_rounds_of_one_send_and_one_receive_per_rank():
    pairs = [(0, 1), (0, 2), (1, 0), (3, 0), (2, 1)]
    rounds = permutation_rounds(pairs)
    assert sorted(p for r in rounds for p in r) == sorted(pairs)
    for r in rounds:
        assert len({a for a, _ in r}) == len(r) == len({b for _, b in r})
    assert permutation_rounds([]) == []


def test_which_rows_go_in_permutation_rounds():
    sw = ["nvswitch"] * 12
    table = {"ce": 1 << 20, "sm": 64 << 10}
    p = decide_permutation("auto", 1, sw, table)
    assert p.sizes("ce", [4096, 1 << 20, 2 << 20]) == [4096, 1 << 20] and p.sizes("sm", [1 << 20]) == []
    assert p.sizes("sm_bulk", [4096]) == [] and p.sizes("nccl", [4096]) == []
    assert decide_permutation("concurrent", 1, sw, table).up_to == p.up_to
    assert decide_permutation("auto", 1, sw, {}).up_to == ()  # nothing measured to hold: none
    for off in (decide_permutation("sequential", 1, sw, table), decide_permutation("auto", 2, sw, table),
                decide_permutation("auto", 1, sw[:-1] + ["nvlink"], table), decide_permutation("auto", 1, None, table)):
        assert off.up_to == ()
    forced = decide_permutation("permutation", 1, None, {})
    assert all(forced.sizes(e, [1 << 40]) == [1 << 40] for e in ("ce", "sm", "sm_bulk"))
    assert forced.sizes("nccl", [1]) == []


def test_pairs_permutation_is_concurrent_and_refused_where_ranks_share_a_gpu():
    m = decide_mode("permutation", 1, None, 4)
    assert m.concurrent and m.permutation.limit("sm") > 1 << 40 and m.as_dict()["permutation"]["up_to"]["ce"] > 0
    with pytest.raises(ModeError, match="share a GPU"):
        decide_mode("permutation", 2, ["nvswitch"] * 2, 4)


def test_quick_with_ranks_sharing_nvswitch_gpus_measures_gpu_disjoint_pairs_at_once():
    """--quick, 8 ranks on 4 NVSwitch GPUs: one rank pair per GPU pair, in rounds in which no GPU is in two pairs
    (a same-GPU pair holds its one GPU); without NVSwitch, under --pairs sequential, or on fewer than 4 GPUs: one
    pair at a time, as before."""
    from ipcbench.core.schedule import gpu_rounds, per_gpu_pair

    gpu_of = [0, 1, 2, 3, 0, 1, 2, 3]
    sw = ["nvswitch"] * 12
    base = decide_mode("auto", 2, sw, 8, quick=True)
    assert not base.concurrent
    m = per_gpu_pair(base, True, gpu_of, sw)
    assert m.concurrent and m.gpu_of == tuple(gpu_of) and "disjoint GPUs" in m.reason
    for off in (per_gpu_pair(base, True, gpu_of, sw[:-1] + ["pcie"]), per_gpu_pair(base, True, gpu_of, None),
                per_gpu_pair(decide_mode("sequential", 2, sw, 8, quick=True), True, gpu_of, sw),
                per_gpu_pair(decide_mode("auto", 2, sw[:2], 4, quick=True), True, [0, 1, 0, 1], sw[:2])):
        assert not off.concurrent
    pairs = m.select(ordered(8), serial_step=False)
    assert len(pairs) == 16  # 12 cross-GPU ordered GPU pairs and 4 same-GPU ones
    rounds = gpu_rounds(pairs, m.gpu_of)
    assert sorted(p for r in rounds for p in r) == sorted(pairs)
    for r in rounds:
        gpus = [g for a, b in r for g in {gpu_of[a], gpu_of[b]}]
        assert len(gpus) == len(set(gpus)), r
    assert len(rounds) <= 8  # as 4 GPUs' 6 rounds of ordered pairs, plus the same-GPU pairs packed beside them
    assert gpu_rounds(ordered(4), (0, 1, 2, 3)) == pair_rounds(ordered(4))  # one rank per GPU: pair_rounds
