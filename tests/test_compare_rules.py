"""The rules of `ipcbench compare` that the rest of the suite would let go unnoticed, each pinned by a case
whose verdict changes when the rule is broken: Welch's degrees of freedom (its p is printed), Welch no longer
deciding a verdict, the floor of the pooled between-run variance at the row's own. Expected p-values were
computed once with scipy 1.17.1 (scipy.stats.ttest_ind(log(BASE), log(NEW), equal_var=False)), outside the
project, and written here; scipy is not a dependency."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synth  # noqa: E402
from ipcbench.catalogue import noise  # noqa: E402
from ipcbench.judging import compare, significance  # noqa: E402

SIZES = [4096, 1 << 20, 64 << 20]
ROW = dict(suite="copy", method="ce", direction="push", src_gpu=0, dst_gpu=1, bytes=4096)  # ~10 µs a copy
GPU = "NVIDIA H100 80GB HBM3"  # the runs' GPUs (catalogue/noise.py: the family whose floors are largest)


def on_h100(run: Path) -> Path:
    meta = json.loads((run / "meta.json").read_text())
    for gs in meta["gpus"].values():
        for g in gs:
            g["name"] = GPU
    (run / "meta.json").write_text(json.dumps(meta))
    return run


def noise_of(run: Path, **want) -> float:
    header, records = synth.read_csv(run)
    return float(records[index_of(run, **want)][header.index("noise")])


def another_run(src: Path, dst: Path) -> Path:
    """A copy of a run under a run id of its own: another run with the same rows."""
    shutil.copytree(src, dst)
    meta = json.loads((dst / "meta.json").read_text())
    (dst / "meta.json").write_text(json.dumps({**meta, "run_id": dst.name, "start": dst.name}))
    return dst


def index_of(run: Path, **want) -> int:
    header, records = synth.read_csv(run)
    hits = [i for i, r in enumerate(records) if all(r[header.index(k)] == str(v) for k, v in want.items())]
    assert len(hits) == 1, want
    return hits[0]


def judged(bases: list[Path], new: Path, alpha: float, **want):
    runs = [compare.load(p) for p in [*bases, new]]
    t = compare.compare(runs[:-1], runs[-1], alpha=alpha).table
    for k, v in want.items():
        t = t[t[k].astype(str) == str(v)]
    assert len(t) == 1, want
    return t.iloc[0]


@pytest.fixture
def pair_of_runs(tmp_path):
    base = synth.make_run(tmp_path, run_id="base", suites=["copy", "kernel", "staged"], sizes=SIZES, same_gpu=False)
    return on_h100(base), another_run(base, tmp_path / "new")


def test_welch_uses_welchs_degrees_of_freedom():
    """BASE: 3 noisy samples; NEW: 15 tight ones, 30% slower. Welch's df is 2.0003 (scipy): p = 0.16579; the
    pooled n1 + n2 - 2 = 16 would give 0.04818 for the same t."""
    a = np.log([10.0, 12.5, 8.4])
    b = np.log([13.0, 13.1, 12.9, 13.05, 12.95, 13.02, 12.98, 13.01, 12.99, 13.03, 12.97, 13.0, 13.04, 12.96, 13.0])

    def stats(x):
        return np.array(float(len(x))), np.array(x.mean()), np.array(((x - x.mean()) ** 2).sum())

    p, diff = significance.welch(*stats(a), *stats(b))
    assert float(p) == pytest.approx(0.1657904906516384, rel=1e-6)
    assert float(diff) == pytest.approx(b.mean() - a.mean())


def test_welch_no_longer_vetoes_a_change_beyond_the_rows_noise(pair_of_runs):
    """The same samples in a row of BASE and NEW, at alpha 0.05: Welch says not significant (p 0.166, printed),
    and the old rule left the 30% slower row unchanged. The row moved beyond both rows' noise (old runs: each
    side's within-run noise, BASE ±14.5% from its 3 samples, NEW ±0.1%, combined with the ce <= 256K floor: 17%): a
    regression."""
    base, new = pair_of_runs
    a = [10.0, 12.5, 8.4]
    synth.set_samples(base, index_of(base, **ROW), a)
    synth.set_samples(new, index_of(new, **ROW), [13.0, 13.1, 12.9, 13.05, 12.95, 13.02, 12.98, 13.01, 12.99, 13.03,
                                                  12.97, 13.0, 13.04, 12.96, 13.0])
    row = judged([base], new, 0.05, **ROW)
    assert row["p"] == pytest.approx(0.1657904906516384, rel=1e-6)
    noise_b = 1.2533 * float(np.std(a, ddof=1) / np.mean(a)) / np.sqrt(3)
    assert noise_of(base, **ROW) == pytest.approx(noise_b, rel=1e-4)
    floor = noise.floor_for(GPU, "ce", "gated", 4096).fraction
    want = noise.combined(noise_b, floor) + noise.combined(noise_of(new, **ROW), floor)
    assert row["bound"] == pytest.approx(want, rel=1e-3) and row["rule"] == "noise+floor"
    assert (row["verdict"], row["note"]) == ("regression", "")


def test_a_significant_move_inside_the_floor_is_unchanged(pair_of_runs):
    """What failed back-to-back runs of unchanged code: an SM copy at 4K, tight samples, 8% slower. Welch's p is
    below 1e-6 and the old rule called it a regression; the row is within what sm rows <= 256K move between
    runs on H100 (each side's 0.1% and the 10% floor combined, twice: 20%), so it is unchanged."""
    base, new = pair_of_runs
    row4k = dict(suite="kernel", method="sm_write", direction="push", src_gpu=0, dst_gpu=1, bytes=4096)
    tight = [10.0, 10.01, 9.99, 10.02, 9.98]
    synth.set_samples(base, index_of(base, **row4k), tight)
    synth.set_samples(new, index_of(new, **row4k), [x * 1.08 for x in tight])
    row = judged([base], new, 0.01, **row4k)
    floor = noise.floor_for(GPU, "sm", "gated", 4096).fraction
    want = noise.combined(noise_of(base, **row4k), floor) + noise.combined(noise_of(new, **row4k), floor)
    assert row["p"] < 1e-6 and row["bound"] == pytest.approx(want, rel=1e-4) and want > 0.08
    assert (row["verdict"], row["note"]) == ("unchanged", "within the rows' noise")


def test_the_pooled_between_run_variance_never_goes_below_the_rows_own(tmp_path):
    """Three BASE runs; the host-timed mpi_staged push rows vary 0.2% between them, except one that varies 30%.
    NEW has that row 50% slower, beyond the BASE runs' spread (30%). Against the variance pooled over its 36
    rows (0.00064) it would be a regression (t 10.9); against its own (0.0228), the floor, t is 1.82 on 72
    degrees of freedom: not significant at 0.01 (p pins it). The verdict is unchanged before the test is asked: the
    row lies within both sides' honest noise (the mpi 64M floor, 30% a side)."""
    base = synth.make_run(tmp_path, run_id="b1", suites=["copy", "staged"], sizes=SIZES, same_gpu=False)
    b2, b3, new = (another_run(base, tmp_path / n) for n in ("b2", "b3", "new"))
    host = dict(suite="staged", method="mpi_staged", direction="push")

    def is_host(r):
        return all(r[k] == v for k, v in host.items())

    synth.scale_rows(b2, is_host, 1.002)
    synth.scale_rows(b3, is_host, 0.998)
    target = dict(host, src_gpu=0, dst_gpu=1, bytes=64 << 20)
    synth.scale_rows(b2, [index_of(b2, **target)], 1 / 1.3 / 1.002)  # this row 30% slower in b2
    synth.scale_rows(new, [index_of(new, **target)], 1 / 1.5)
    row = judged([base, b2, b3], new, 0.01, **target)
    geomean = (1 / 1.3 * 0.998) ** (1 / 3)  # the reference: the BASE runs' geometric mean
    assert row["test"] == "runs" and row["change"] == pytest.approx(1 / 1.5 / geomean - 1, abs=1e-4)
    assert row["spread"] == pytest.approx(0.3, abs=1e-3)
    assert 0.05 < row["p"] < 0.1, row["p"]  # t 1.82, 72 degrees of freedom: 0.073
    assert (row["verdict"], row["note"]) == ("unchanged", "within the rows' noise")


def test_a_host_timed_row_whose_base_runs_disagree_beyond_its_tail_is_not_judged_whatever_the_alpha(tmp_path):
    """Two BASE runs 3x apart on one host-timed row (its spread 200%, beyond its bound of ±60%: both sides' noise, above
    the ±55% tail of a 64 MiB MPI-staged transfer, catalogue/noise.HOST_TAIL): the bound is known not to hold for it,
    so NEW (5.5x slower than the first)
    is not judged, and no --alpha changes that (the runs t-test decides time-sliced rows, not host-timed ones)."""
    base = synth.make_run(tmp_path, run_id="b1", suites=["copy", "staged"], sizes=SIZES, same_gpu=False)
    b2, new = (another_run(base, tmp_path / n) for n in ("b2", "new"))
    target = dict(suite="staged", method="mpi_staged", direction="push", src_gpu=0, dst_gpu=1, bytes=64 << 20)
    synth.scale_rows(b2, [index_of(b2, **target)], 1 / 3)
    synth.scale_rows(new, [index_of(new, **target)], 1 / 5.5)
    for alpha in (0.01, 0.3):
        row = judged([base, b2], new, alpha, **target)
        assert row["spread"] == pytest.approx(2.0, abs=1e-3) and abs(np.log1p(row["change"])) > np.log(3)
        assert (row["verdict"], row["note"]) == (
            "not judged", "host-timed: the BASE runs disagree by 200%, more than the ±60% such rows move"), alpha


def test_at_threshold_zero_an_unmoved_row_is_within_the_threshold(pair_of_runs):
    """The threshold is a strict bound: a row that did not move is within it even at --threshold 0 (said so),
    before its noise is asked."""
    base, new = pair_of_runs
    runs = [compare.load(p) for p in (base, new)]
    t = compare.compare(runs[:1], runs[1], threshold=0.0).table
    valued = t[t["rule"] != ""]
    assert len(valued) and (valued["verdict"] == "unchanged").all() and (valued["note"] == "within ±0%").all()
