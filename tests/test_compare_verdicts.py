"""compare's outcome in order (judging/compare_verdicts.py): worst first, what fails the gate before what passes it,
and within a verdict the largest change first; what a pass covers per kind of row."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from ipcbench.judging.compare_verdicts import WORST_FIRST, catches, worst_first
from ipcbench.judging.row_verdict import RowVerdict as V


def test_the_outcome_is_worst_first_and_the_largest_change_first_within_a_verdict():
    rows = [(V.NEW, math.nan), (V.IMPROVEMENT, 0.05), (V.REGRESSION, -0.02), (V.UNCHANGED, 0.001),
            (V.IMPROVEMENT, 0.30), (V.NOT_JUDGED, math.nan), (V.REGRESSION, -0.40), (V.MISSING, math.nan),
            (V.UNCHANGED, -0.003)]
    t = pd.DataFrame([dict(verdict=v, gain=g, suite="copy", method="ce", direction="push", bytes=4096, _runs_why="",
                           _engine="ce", _band=0) for v, g in rows])
    got = worst_first(t)
    assert list(got["verdict"]) == [V.REGRESSION, V.REGRESSION, V.MISSING, V.IMPROVEMENT, V.IMPROVEMENT,
                                    V.UNCHANGED, V.UNCHANGED, V.NOT_JUDGED, V.NEW]
    assert list(got["gain"][:2]) == [-0.40, -0.02] and list(got["gain"][3:5]) == [0.30, 0.05]
    assert list(got["gain"][5:7]) == [-0.003, 0.001]
    assert "_engine" not in got.columns and WORST_FIRST[0] is V.REGRESSION


@pytest.mark.parametrize("bounds, bar, at", [([0.01, 0.015], 0.02, True), ([0.02, 0.02], 0.02, True),
                                              ([0.01, 0.05, 0.07], 0.05, False), ([0.03, 0.05], 0.04, False)])
def test_the_smallest_change_caught_is_the_median_of_the_bounds_never_below_the_threshold(bounds, bar, at):
    rows = pd.DataFrame([dict(_engine="sm", _band=2, bound=b) for b in bounds])
    (c,) = catches(rows, 0.02)
    assert c["smallest_change"] == pytest.approx(bar) and c["at_threshold"] is at
    assert (c["kind"], c["engine"], c["band"], c["rows"]) == ("sm >= 64M", "sm", ">= 64M", len(bounds))


def test_kinds_are_said_by_size_band_then_engine():
    rows = pd.DataFrame([dict(_engine=e, _band=b, bound=0.01) for e, b in
                         [("sm", 2), ("zz", 0), ("ce", 2), ("nccl", 0), ("api", 0), ("ce", 1)]])
    assert [c["kind"] for c in catches(rows, 0.02)] == ["nccl <= 256K", "api <= 256K", "zz <= 256K", "ce 256K-64M",
                                                       "ce >= 64M", "sm >= 64M"]


def judge_rows(cases: list[dict], nb: int, threshold: float = 0.02):
    """compare_verdicts.row_verdicts on one hand-made row per case: each case's fields over a matched, verified,
    valid bandwidth row that moved by nothing, inside a 1% bound."""
    import numpy as np

    from ipcbench.judging.compare_verdicts import row_verdicts

    base = dict(_merge="both", verified_b=True, verified_n=True, impossible_b="", impossible_n="", bad_b="", bad_n="",
                k=float(nb), lv_b=0.0, lv_n=0.0, kind="bandwidth", timing="gated", _runs_why="", lv_max=0.0,
                lv_min=0.0, g=0.0, bound=0.01,
                why="within the rows' noise", sig=False, enough=True)
    rows = pd.DataFrame([{**base, **c} for c in cases])
    col = {c: rows[c].to_numpy() for c in ("g", "bound", "sig", "enough")}
    verdict, note, valued = row_verdicts(rows, rows, col["g"].astype(float), col["bound"].astype(float),
                                         rows["why"].to_numpy(dtype=str), col["sig"].astype(bool),
                                         col["enough"].astype(bool), threshold, nb)
    return [(v, n) for v, n in zip(verdict, note)], list(np.asarray(valued))


NAN = float("nan")
HOST = "host-timed"
SLICED = "time-sliced hand-off (same GPU, no MPS)"


@pytest.mark.parametrize("nb, case, want", [
    (1, dict(_merge="left_only", kind="error", verified_n=False), (V.MISSING, "in BASE, not in NEW")),
    (1, dict(_merge="right_only", kind="error"), (V.NEW, "only in NEW")),
    (1, dict(kind="error", impossible_n="x", verified_n=False), (V.NOT_JUDGED, "error-path row")),
    (1, dict(impossible_n="x", impossible_b="y", bad_n="z"), (V.NOT_JUDGED, "above a physical ceiling in NEW")),
    (1, dict(impossible_b="y", bad_n="z"), (V.NOT_JUDGED, "above a physical ceiling in BASE")),
    (1, dict(bad_n="z", bad_b="w", verified_n=False), (V.NOT_JUDGED, "invalid in NEW")),
    (1, dict(bad_b="w", verified_n=False), (V.NOT_JUDGED, "invalid in BASE: w")),
    (1, dict(verified_n=False, lv_n=NAN), (V.REGRESSION, "unverified in NEW")),
    (1, dict(verified_b=False, lv_n=NAN), (V.IMPROVEMENT, "verified in NEW only")),
    (1, dict(verified_b=False, verified_n=False, g=1.0), (V.NOT_JUDGED, "unverified in both")),
    (1, dict(lv_n=NAN, _runs_why=HOST), (V.NOT_JUDGED, "no value to compare")),
    (1, dict(lv_b=NAN), (V.NOT_JUDGED, "no value to compare")),
    (1, dict(_runs_why=HOST, g=1.0, enough=False), (V.NOT_JUDGED, "host-timed: give 2+ BASE runs")),
    (2, dict(_runs_why=HOST, g=1.0, k=1.0, enough=False), (V.NOT_JUDGED, "host-timed: in fewer than 2 BASE runs")),
    (2, dict(_runs_why=HOST, g=1.0, enough=False), (V.NOT_JUDGED, "fewer than 2 samples")),
    (1, dict(g=0.0198, bound=0.0), (V.UNCHANGED, "within ±2%")),
    (1, dict(g=-0.0198, bound=0.0), (V.UNCHANGED, "within ±2%")),
    (1, dict(g=0.05, bound=0.06), (V.UNCHANGED, "within the rows' noise")),
    (1, dict(g=-0.05, bound=0.06, why="within the BASE runs' spread"), (V.UNCHANGED, "within the BASE runs' spread")),
    (2, dict(_runs_why=SLICED, g=-0.5, bound=0.1), (V.UNCHANGED, "not significant")),
    (2, dict(_runs_why=SLICED, g=-0.5, bound=0.1, sig=True), (V.REGRESSION, "")),
    (2, dict(_runs_why=HOST, timing="host", g=-0.5, bound=0.1), (V.REGRESSION, "")),  # its tail, no t-test
    (2, dict(_runs_why=HOST, timing="host", g=-0.5, bound=0.1, lv_max=math.log1p(0.2)),
     (V.NOT_JUDGED, "host-timed: the BASE runs disagree by 20%, more than the ±10% such rows move")),  # no tail
    (2, dict(g=-0.5, bound=0.1), (V.REGRESSION, "")),  # not host-timed: its significance decides nothing
    (2, dict(g=0.5, bound=0.1, k=1.0), (V.IMPROVEMENT, "")),  # in one BASE run of two: judged by its noise
    (1, dict(g=0.05, bound=0.04), (V.IMPROVEMENT, "")),
    (1, dict(g=-0.05, bound=0.04), (V.REGRESSION, "")),
])
def test_each_rows_verdict_is_the_first_rule_that_holds(nb, case, want):
    (got,), (valued,) = judge_rows([case], nb)
    assert got == want
    assert bool(valued) is (want[1] in ("", "within ±2%", "within the rows' noise", "within the BASE runs' spread",
                                        "not significant"))


def test_a_change_and_its_bound_are_compared_in_log_space():
    """|g| is a log ratio: a change beyond --threshold (log1p of it) and beyond its bound (log1p of it) counts."""
    got, _ = judge_rows([dict(g=math.log1p(0.0201), bound=0.0), dict(g=math.log1p(0.0199), bound=0.0),
                         dict(g=math.log1p(0.0501), bound=0.05), dict(g=math.log1p(0.0499), bound=0.05),
                         dict(g=-math.log1p(0.0501), bound=0.05), dict(g=math.log1p(0.05), bound=0.05)], 1)
    assert [v for v, _ in got] == [V.IMPROVEMENT, V.UNCHANGED, V.IMPROVEMENT, V.UNCHANGED, V.REGRESSION,
                                   V.UNCHANGED]  # a change of exactly its bound is within it
