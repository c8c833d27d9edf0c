"""A row's kind is computed once (catalogue/row_kind.py): its size band and whether it is a time-sliced hand-off, for
one row and over a frame's columns alike, and the sampler's stopping target, a row's stated noise and compare's floor
all read it (issue "Sample the context", item 3)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ipcbench.catalogue import noise, row_kind
from ipcbench.catalogue.row_kind import LARGE, MID, SMALL, RowKind
from ipcbench.judging.significance import between_runs_floor, size_band, time_sliced

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("nbytes, want", [(4, SMALL), (256 << 10, SMALL), ((256 << 10) + 4, MID), ((64 << 20) - 4, MID),
                                          (64 << 20, LARGE), (1 << 30, LARGE)])
def test_size_bands_and_their_edges(nbytes, want):
    assert row_kind.band(nbytes) == want
    assert row_kind.BANDS[int(size_band([nbytes])[0])] == want


@pytest.mark.parametrize("timing, same_gpu, mps, want", [
    ("handoff", True, False, True), ("handoff", True, None, True),  # MPS not recorded: read as without MPS
    ("handoff", True, True, False), ("handoff", False, False, False), ("gated", True, False, False),
    ("window", True, None, False)])
def test_time_sliced_is_a_same_gpu_handoff_without_mps(timing, same_gpu, mps, want):
    assert row_kind.time_sliced(timing, same_gpu, mps) is want
    assert RowKind("sm", timing, 4096, same_gpu, mps).time_sliced is want


def test_the_column_rule_is_the_row_rule():
    combos = list(itertools.product(("handoff", "gated", "window", "host"), (True, False), (True, False, None)))
    frame = pd.DataFrame(combos, columns=["timing", "same_gpu", "mps"])
    frame["mps"] = frame["mps"].astype(object)
    want = [row_kind.time_sliced(t, g, m) for t, g, m in combos]
    assert list(time_sliced(frame)) == want


def test_floor_of_a_kind_is_the_floor_of_its_facts():
    for engine, timing, nbytes, same, mps in itertools.product(("ce", "sm", "sm_bulk", "shm"), ("gated", "handoff"),
                                                               (4096, 1 << 20, 256 << 20), (True, False),
                                                               (True, False)):
        kind = RowKind(engine, timing, nbytes, same, mps)
        want = noise.floor_for("NVIDIA H100 80GB HBM3", engine, timing, nbytes, time_sliced=kind.time_sliced,
                               same_gpu=same)
        assert noise.floor_of("NVIDIA H100 80GB HBM3", kind) == want


def test_compare_floor_takes_the_time_sliced_level_where_either_side_was():
    got = between_runs_floor("NVIDIA H200", np.array(["sm", "sm"]), np.array(["handoff", "handoff"]),
                             np.array([4096, 4096]), np.array([True, False]), np.array([True, True]))
    assert got[0] == noise.TIME_SLICED
    assert got[1] == noise.floor_for("NVIDIA H200", "sm", "handoff", 4096, same_gpu=True).fraction < 1


def test_a_rows_stated_noise_and_the_samplers_target_read_the_same_kind():
    from ipcbench.core.context import Ctx
    from ipcbench.core.rows import state_noise
    from ipcbench.core.sampler import SamplingRule
    from ipcbench.results import Row

    class _Info:
        name = "NVIDIA H100 80GB HBM3"

    class _Gpu:
        info = _Info()

    ctx = Ctx(world=None, gpu=_Gpu(), buffers={}, rule=SamplingRule(), verify=True, run_id="r", gpu_of=[0, 0],
              node_ranks=[0, 1], mps=False)
    row = Row(run_id="r", host="h", suite="copy", method="ce", direction="push", src_rank=0, dst_rank=1, src_gpu=0,
              dst_gpu=0, same_gpu=True, bytes=4096, iterations=1, samples=5, time_us_median=1.0, time_us_min=1.0,
              time_us_max=1.0, bw_gbps_median=4.0, bw_gbps_max=4.0, cv=0.0, verified=True, noise=0.0,
              engine="ce", timing="gated", mps=False)
    state_noise([row], ctx.gpu_model)
    kind = RowKind("ce", "gated", 4096, True, False)
    assert row.noise_floor == noise.floor_of(ctx.gpu_model, kind).fraction == 0.09  # the same-GPU floor, not 0.065
    assert ctx.enough_noise("ce", "gated", 4096, 0, 1) == pytest.approx(ctx.rule.floor_share * 0.09)


def test_no_module_but_the_catalogue_writes_the_rules_of_a_kind():
    """The time-sliced test and the band edges were written in core/context.py, core/rows.py and
    judging/significance.py (and the bands in catalogue/noise.py): each now reads catalogue/row_kind.py."""
    rules = [r"==\s*[\"']handoff[\"']", r"256\s*<<\s*10", r"64\s*<<\s*20", r"256\s*\*\s*K", r"64\s*\*\s*M"]
    for rel in ("ipcbench/core/context.py", "ipcbench/core/rows.py", "ipcbench/core/sampler.py",
                "ipcbench/judging/significance.py", "ipcbench/judging/bounds.py", "ipcbench/catalogue/noise.py"):
        text = (ROOT / rel).read_text()
        for rule in rules:
            assert not re.search(rule, text), f"{rel} writes {rule!r} itself: read catalogue/row_kind.py"
