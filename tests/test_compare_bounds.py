"""How far a row may move (judging/bounds.py): each side's honest noise (its stated noise; its within-run noise
combined with today's floor; the floor where neither was written, never zero), one BASE run's bound (both sides'
noise summed), several BASE runs' (their spread, never below that sum), the rule that set it and the note of a row
inside it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ipcbench.catalogue import noise
from ipcbench.judging.bounds import bounds, pct

H100 = "NVIDIA H100 80GB HBM3"
FLOOR = noise.floor_for(H100, "ce", "gated", 256 << 20).fraction  # a large ce row's between-runs floor


def judge(cases: list[dict], nb: int = 1, old: bool = False):
    """bounds() of one hand-made row per case (a large ce row of two H100 runs: each side's fields over
    stated noise 0.5 and no within-run noise, one BASE run)."""
    base = dict(engine_b="ce", engine_n="ce", bytes=256 << 20, timing="gated", kind="bandwidth", sliced=False,
                same_gpu=False,
                within_b=math.nan, within_n=math.nan, noise_b=0.5, noise_n=0.5, k=float(nb), lv_max=0.0, lv_min=0.0,
                _runs_why="")
    rows = pd.DataFrame([{**base, **c} for c in cases])
    bound, rule, why, no_noise = bounds(rows, rows, nb, old, (H100, H100))
    return list(zip(bound, rule, why, no_noise))


def test_one_base_run_the_bound_is_both_sides_honest_noise_summed():
    (got,) = judge([dict(noise_b=0.01, noise_n=0.02)])
    assert got[0] == pytest.approx(0.03) and got[1:] == ("noise", "within the rows' noise", "")
    (got,) = judge([dict(noise_b=0.01, noise_n=0.02)], old=True)
    assert got[1] == "noise+floor"


def test_a_within_run_noise_is_combined_with_todays_floor_and_no_noise_is_the_floor():
    (within,) = judge([dict(within_b=0.01, within_n=0.0, noise_b=9.0, noise_n=9.0)])
    assert within[0] == pytest.approx(noise.combined(0.01, FLOOR) + noise.combined(0.0, FLOOR)) and within[3] == ""
    got = judge([dict(noise_b=math.nan), dict(noise_n=-1.0), dict(noise_b=math.nan, noise_n=math.nan, within_n=-1.0)])
    assert [g[0] for g in got] == pytest.approx([FLOOR + 0.5, 0.5 + FLOOR, 2 * FLOOR])
    assert [g[3] for g in got] == [f"no noise in {s}: the ce >= 64M floor ±{pct(FLOOR)}" for s in
                                   ("BASE", "NEW", "BASE and NEW")]
    (zero,) = judge([dict(noise_b=0.0, noise_n=0.0)])
    assert zero[0] == 0.0 and zero[3] == ""  # a noise of 0 is a noise, not a missing one


@pytest.mark.parametrize("k, spread, bound, rule, why", [
    (2, 2.0, 2.0, "spread", "within the BASE runs' spread"),  # the spread above both sides' noise: it
    (2, 1.0, 1.0, "spread", "within the BASE runs' spread"),  # equal to it: the spread still says why
    (2, 0.5, 1.0, "spread", "within the rows' noise"),  # never below both sides' noise
    (1, 2.0, 1.0, "noise", "within the rows' noise")])  # the row in one BASE run of two: its noise alone
def test_several_base_runs_their_spread_never_below_the_noise(k, spread, bound, rule, why):
    (got,) = judge([dict(k=float(k), lv_max=math.log1p(spread), lv_min=0.0)], nb=2)
    assert got[0] == pytest.approx(bound) and got[1:3] == (rule, why)


def test_time_sliced_rows_are_judged_by_the_runs_rule_host_timed_rows_by_their_kinds_tail():
    sliced = dict(_runs_why="time-sliced hand-off (same GPU, no MPS)", k=2.0)
    host = dict(_runs_why="host-timed", timing="host", k=2.0, noise_b=0.0, noise_n=0.0, lv_max=math.log1p(5.0))
    got = judge([sliced, host, dict(host, noise_b=9.0, noise_n=9.0), dict(host, k=1.0)], nb=2)
    assert [g[1] for g in got] == ["runs", "tail", "tail", "runs"]
    assert np.isclose(got[0][0], 1.0)  # the spread of 0 never below both sides' noise
    tail = noise.host_tail("ce", 256 << 20).fraction
    assert got[1][0] == pytest.approx(tail) and got[1][2] == "within the tail of host-timed rows"  # not the spread
    assert got[2][0] == pytest.approx(18.0) and got[2][2] == "within the rows' noise"  # never below the noise
    assert got[3][0] == pytest.approx(0.0)  # in one BASE run of two: its noise alone


@pytest.mark.parametrize("v, words", [(0.032, "3.2%"), (0.135, "13.5%"), (0.2667, "26.7%"), (1.5, "150%"),
                                      (9.99, "999%"), (10.0, "1000%"), (0.0, "0%"), (None, ""), (math.nan, "")])
def test_a_fraction_in_words(v, words):
    assert pct(v) == words


def test_the_gpu_model_whose_floors_judge_a_run_is_its_most_common_named_one():
    from pathlib import Path

    from ipcbench.judging.bounds import gpu_model
    from ipcbench.record.meta import parse_meta
    from ipcbench.record.run import Run

    def run(names):
        gpus = {"h": [{"index": i, "name": n, "uuid": f"GPU-{i}"} for i, n in enumerate(names)]}
        return Run("r", Path("r"), Path("r/results.csv"), parse_meta({"hosts": ["h"], "gpus": gpus}), None)

    assert gpu_model(run(["?", "?", "?", H100, "X", H100])) == H100
    assert gpu_model(run(["?", "", "?"])) == "" and gpu_model(run([])) == ""
