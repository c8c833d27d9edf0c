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
