"""`ipcbench compare BASE [BASE ...] NEW`: statistical verdicts, symmetry, units, host-timed rows, several BASE
runs, missing rows, impossible rows, warnings, formats and exit codes.

Synthetic runs come from synth.py (every column, five samples a row). The real runs committed under
results/*/ (or $IPCBENCH_RESULTS_DIR) are compared with themselves and with each other in both orders (the
verdicts must mirror), and a copy in which the test degrades a few rows must be flagged on exactly those.

Runs recorded on the GPU machine for the compare itself: point $IPCBENCH_COMPARE_CASES at a directory of
cases, one subdirectory each with a case.json
    {"base": ["run-a", "run-b"], "new": "run-c", "args": ["--threshold", "5%"], "exit": 0,
     "regressions": {"max": 0}}
(paths relative to the case directory; "regressions" may give "max" and/or "min"; with one BASE the swapped
comparison is checked to mirror). test_recorded_case runs every case found.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import math
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synth  # noqa: E402
from ipcbench.catalogue import noise  # noqa: E402
from ipcbench.errors import UsageError  # noqa: E402
from ipcbench.record.meta import Meta, read_meta  # noqa: E402
from ipcbench.record.run import derive_facts, load_run  # noqa: E402
from ipcbench.judging import compare, significance  # noqa: E402
from ipcbench.judging.bounds import pct  # noqa: E402
from ipcbench.report import compare_command  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(os.environ.get("IPCBENCH_RESULTS_DIR", REPO / "results"))
CASES = os.environ.get("IPCBENCH_COMPARE_CASES")
KEY = ["suite", "method", "direction", "src_gpu", "dst_gpu", "bytes", "seq"]
K, M = 1 << 10, 1 << 20
SYNTH_GPU = "NVIDIA H200"  # synth.py's GPUs: the floors (catalogue/noise.py) of the synthetic runs
SIZES = [4 * K, 1 * M, 64 * M]


# results/, recorded runs
from conftest import (MIRROR, has_cross_gpu_pairs, per_directory, real_runs, ring_pairs,  # noqa: E402,F401
                      run_compare, sampled)


def csv_table(capsys, *argv) -> tuple[int, pd.DataFrame, str]:
    rc, out, err = run_compare(capsys, *argv, "--format", "csv")
    assert rc in (0, 1), err
    return rc, pd.read_csv(io.StringIO(out), keep_default_na=False, na_values=[""]), err


def api(*paths, **kw) -> compare.Comparison:
    sides = [compare.load(str(p)) for p in paths]
    return compare.compare(sides[:-1], sides[-1], **kw)


def copy_run(src: Path, dst: Path) -> Path:
    """Another run with the same rows: a copy under a run id and start of its own (a copy that kept them would
    be the same run, which compare counts once, and refuses as NEW)."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("report"))
    if (dst / "meta.json").is_file():
        meta = json.loads((dst / "meta.json").read_text())
        meta.update(run_id=dst.name, start=f"{meta.get('start')}+{dst.name}")
        (dst / "meta.json").write_text(json.dumps(meta))
    return dst


def where(**want):
    """A row predicate for synth.scale_rows: every given column equals the given text."""
    return lambda r: all(str(r[k]) == str(v) for k, v in want.items())


def row_index(run_dir: Path, **want) -> int:
    header, records = synth.read_csv(run_dir)
    hits = [i for i, r in enumerate(records) if where(**want)(dict(zip(header, r)))]
    assert len(hits) == 1, (want, len(hits))
    return hits[0]


def keyed(t: pd.DataFrame) -> pd.DataFrame:
    return t.set_index(KEY).sort_index()


def verdict_of(t: pd.DataFrame, **want) -> pd.Series:
    sel = t
    for k, v in want.items():
        sel = sel[sel[k].astype(str) == str(v)]
    assert len(sel) == 1, (want, len(sel))
    return sel.iloc[0]


def assert_mirrors(a, b) -> None:
    """compare(a, b) and compare(b, a): every verdict mirrored, the same p-values, opposite log changes."""
    x, y = api(a, b).table, api(b, a).table
    x, y = keyed(x), keyed(y)
    assert len(x) == len(y) and x.index.equals(y.index)
    assert (x["verdict"].map(MIRROR) == y["verdict"]).all(), \
        x[x["verdict"].map(MIRROR) != y["verdict"]][["verdict", "note"]].join(y["verdict"], rsuffix="_swapped")
    assert np.array_equal(x["p"].to_numpy(), y["p"].to_numpy(), equal_nan=True)
    assert np.array_equal(x["gain"].to_numpy(), -y["gain"].to_numpy(), equal_nan=True)
    both = x["verdict"].isin(["regression", "improvement", "unchanged", "not judged"])
    assert (x["ratio"].isna() == y["ratio"].isna()).all()  # a row above a ceiling has no value either way
    both &= x["ratio"].notna()
    assert np.allclose(x.loc[both, "ratio"] * y.loc[both, "ratio"], 1.0, equal_nan=True)


# ------------------------------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    return synth.make_run(tmp_path_factory.mktemp("base"), run_id="base", sizes=SIZES, errors=True,
                          suites=["copy", "staged", "latency", "handles"])


@pytest.fixture
def new_run(base_run, tmp_path):
    return copy_run(base_run, tmp_path / "new")


# ------------------------------------------------------------------------------------------ statistics

@pytest.mark.parametrize("t, df, p", [(12.706, 1, 0.05), (63.657, 1, 0.01), (2.776, 4, 0.05), (4.604, 4, 0.01),
                                      (2.228, 10, 0.05), (3.169, 10, 0.01), (1.960, 1e6, 0.05), (0.0, 7, 1.0)])
def test_t_pvalue_matches_the_tables(t, df, p):
    got = significance.t_pvalue(np.array([t, -t]), np.array([float(df)] * 2))
    assert got[0] == pytest.approx(p, rel=2e-3) and got[0] == got[1]


def test_welch_is_symmetric_and_sane():
    rng = np.random.default_rng(3)
    a, b = np.log(rng.normal(10, 0.3, 7)), np.log(rng.normal(10.4, 0.8, 12))

    def stats(x):
        return float(len(x)), x.mean(), ((x - x.mean()) ** 2).sum()

    p1, d1 = significance.welch(*map(np.array, stats(a)), *map(np.array, stats(b)))
    p2, d2 = significance.welch(*map(np.array, stats(b)), *map(np.array, stats(a)))
    assert p1 == p2 and d1 == -d2 and 0 < p1 < 1
    p, _ = significance.welch(np.array(5.0), np.array(1.0), np.array(0.0), np.array(5.0), np.array(1.0), np.array(0.0))
    assert p == 1.0  # no variance, same mean
    p, _ = significance.welch(np.array(1.0), np.array(1.0), np.array(0.0), np.array(5.0), np.array(2.0), np.array(0.1))
    assert np.isnan(p)  # one sample: no test


def test_host_timed_rows():
    f = pd.DataFrame({"suite": ["staged", "latency", "handles", "handles", "staged", "copy"],
                      "method": ["mpi_staged", "mpi_staged", "ipc_open_mem_handle_first", "err_open_own_handle",
                                 "shm_staged", "ce"],
                      "direction": ["push", "oneway", "op", "op", "push", "push"], "same_gpu": False,
                      "host": "h", "src_gpu": 0, "bytes": 4,
                      "kind": ["bandwidth", "latency", "op", "error", "bandwidth", "bandwidth"]})
    derive_facts(f, Meta())  # their timing, from what the suites declare
    assert list(f["timing"]) == ["host", "host", "host", "host", "handoff", "gated"]
    assert list(significance.host_timed(f)) == [True, True, True, False, False, False]  # error rows: never judged


# ------------------------------------------------------------------------------------------ verdicts

def test_identical_runs(base_run, new_run, capsys):
    rc, out, err = run_compare(capsys, base_run, new_run)
    assert rc == 0, err
    assert "verdict: no regression" in out and "0 regression" in out and "GPUs matched by UUID" in out
    assert "warning" not in out
    t = api(base_run, new_run).table
    assert set(t["verdict"]) == {"unchanged", "not judged"}
    assert (t["ratio"] == 1.0).all()


def test_degraded_rows_flagged_exactly(base_run, new_run, capsys):
    picks = synth.scale_rows(new_run, lambda r: r["suite"] == "copy" and r["method"] == "ce" and r["bytes"] ==
                             str(64 * M) and r["src_gpu"] == "0" and r["same_gpu"] != "true", 0.7)
    picks += synth.scale_rows(new_run, where(suite="latency", method="sm_pingpong", src_gpu=1, dst_gpu=2,
                                             bytes=8), 0.7)
    rc, t, err = csv_table(capsys, base_run, new_run)
    assert rc == 1 and "verdict: REGRESSION" in err
    reg = t[t["verdict"] == "regression"]
    assert len(reg) == len(picks) == 3 * 3 + 1  # push, pull, bidir to 3 GPUs; one latency row
    bw = reg[reg["unit"] == "GB/s"]
    assert bw["change"].to_numpy() == pytest.approx(-0.3, abs=1e-4)
    lat = reg[reg["unit"] == "µs"]
    assert lat["change"].to_numpy() == pytest.approx(1 / 0.7 - 1, abs=1e-4)  # µs: 43% slower
    assert set(t["verdict"]) == {"regression", "unchanged", "not judged"}
    rc, t, _ = csv_table(capsys, new_run, base_run)  # the other way round: exactly those improve
    assert rc == 0 and (t["verdict"] == "improvement").sum() == len(picks)
    assert_mirrors(base_run, new_run)


def test_unit_per_row_kind(base_run, new_run, capsys):
    _, t, _ = csv_table(capsys, base_run, new_run)
    base = pd.read_csv(base_run / "results.csv", keep_default_na=False, na_values=[""])
    m = t.merge(base.assign(seq=0), on=KEY[:-1] + ["seq"], suffixes=("", "_row"))
    assert len(m) == len(t)
    for kind, unit, col in (("bandwidth", "GB/s", "bw_gbps_median"), ("latency", "µs", "time_us_median"),
                            ("op", "µs", "time_us_median")):
        rows = m[m["kind"] == kind]
        assert len(rows) and (rows["unit"] == unit).all(), kind
        assert rows["base"].to_numpy() == pytest.approx(rows[col].to_numpy(), rel=1e-5), kind
    err = m[m["kind"] == "error"]
    assert len(err) == 2 and err["unit"].isna().all()
    assert (err["verdict"] == "not judged").all() and (err["note"] == "error-path row").all()


def test_old_runs_use_median_and_cv(base_run, new_run, capsys):
    """A run written before kind/samples_us/noise existed (latency rows then had a GB/s value): latency rows are
    still judged in µs, every row's p on its median and cv (test=cv); its missing noise is the floor of the row's
    kind, never zero, said in a warning and in each row's note."""
    synth.old_style(new_run)
    synth.scale_rows(new_run, where(suite="latency", method="ce", src_gpu=0, dst_gpu=1, bytes=8), 0.5)
    rc, out, _ = run_compare(capsys, base_run, new_run)
    top = out.split("Changed rows")[0]
    assert rc == 1 and "row(s) have no noise on a side" in top and "between-runs floor of their kind" in top
    rc, t, _ = csv_table(capsys, base_run, new_run)
    judged = t[t["kind"] != "error"]
    assert set(judged["test"]) == {"cv"}
    row = verdict_of(t, suite="latency", method="ce", src_gpu=0, dst_gpu=1, bytes=8)
    assert row["unit"] == "µs" and row["verdict"] == "regression" and row["change"] == pytest.approx(1.0, abs=1e-4)
    floor = noise.floor_for(SYNTH_GPU, "ce", "gated", 8).fraction
    assert row["note"] == f"no noise in NEW: the ce <= 256K floor ±{pct(floor)}"
    assert (t[t["kind"] == "latency"]["unit"] == "µs").all()
    assert_mirrors(base_run, new_run)


def test_noisy_row_with_a_large_change_regresses(base_run, new_run, capsys):
    """A very noisy row (CV ~60%, 15 samples: the sampler's maximum when the noise target is not met) that
    became 3x slower is a regression; the old rule (the change had to exceed the rows' summed half-spread)
    could never flag it."""
    rng = np.random.default_rng(7)
    noisy = list(100.0 * np.exp(rng.normal(0, 0.6, 15)))
    want = dict(suite="copy", method="ce", direction="push", src_gpu=2, dst_gpu=3, bytes=1 * M)
    bdir = copy_run(base_run, new_run.parent / "noisy-base")
    synth.set_samples(bdir, row_index(bdir, **want), noisy)
    synth.set_samples(new_run, row_index(new_run, **want), [3 * x for x in rng.permutation(noisy)])
    rc, t, _ = csv_table(capsys, bdir, new_run)
    row = verdict_of(t, **want)
    assert row["verdict"] == "regression" and row["p"] < 0.01 and row["test"] == "samples"
    assert row["change"] == pytest.approx(-2 / 3, abs=1e-3)
    assert rc == 1
    half_spread = (max(noisy) - min(noisy)) / (2 * float(np.median(noisy)))
    assert 2 * half_spread > math.log(3)  # the noise bar of the old rule was above this change


def test_small_change_in_a_quiet_row_is_unchanged(base_run, new_run, capsys):
    want = dict(suite="copy", method="ce", direction="pull", src_gpu=1, dst_gpu=0, bytes=64 * M)
    quiet = [1000.0, 1000.5, 999.5, 1000.2, 999.8]
    bdir = copy_run(base_run, new_run.parent / "quiet-base")
    synth.set_samples(bdir, row_index(bdir, **want), quiet)
    synth.set_samples(new_run, row_index(new_run, **want), [x * 1.015 for x in quiet])  # 1.5% slower
    rc, t, _ = csv_table(capsys, bdir, new_run)
    row = verdict_of(t, **want)
    assert row["p"] < 1e-6 and row["bound"] < 0.01  # clearly significant, beyond the rows' noise ...
    assert row["verdict"] == "unchanged" and row["note"] == "within ±2%"  # ... but below the default threshold
    assert rc == 0
    rc, t, _ = csv_table(capsys, bdir, new_run, "--threshold", "1%")
    assert verdict_of(t, **want)["verdict"] == "regression" and rc == 1


def test_a_change_inside_the_rows_noise_is_unchanged_whatever_alpha(base_run, new_run, capsys):
    """10% apart, each row's noise ±11% (samples 8-13 µs; old runs: combined with the ce 256K-64M floor): inside the
    sum of both rows' noise. Welch's p is printed and no longer decides: --alpha 0.5 used to make this row a
    regression."""
    want = dict(suite="copy", method="ce", direction="push", src_gpu=3, dst_gpu=0, bytes=1 * M)
    a = [10.0, 13.0, 8.0, 12.0, 9.0]
    bdir = copy_run(base_run, new_run.parent / "overlap-base")
    synth.set_samples(bdir, row_index(bdir, **want), a)
    synth.set_samples(new_run, row_index(new_run, **want), [x * 1.1 for x in (13.0, 8.0, 12.0, 9.0, 10.0)])
    rc, t, _ = csv_table(capsys, bdir, new_run)
    row = verdict_of(t, **want)
    assert rc == 0 and row["verdict"] == "unchanged" and row["note"] == "within the rows' noise" and row["p"] > 0.01
    within = 1.2533 * float(np.std(a, ddof=1) / np.mean(a)) / math.sqrt(5)
    floor = noise.floor_for(SYNTH_GPU, "ce", "gated", 1 * M).fraction
    assert row["bound"] == pytest.approx(2 * noise.combined(within, floor), rel=1e-3)
    _, t, _ = csv_table(capsys, bdir, new_run, "--alpha", "0.5")
    assert verdict_of(t, **want)["verdict"] == "unchanged"


def test_threshold(base_run, new_run, capsys):
    synth.scale_rows(new_run, where(suite="copy", method="ce", direction="push", src_gpu=0, dst_gpu=1,
                                    bytes=64 * M), 0.93)  # 7% slower
    assert run_compare(capsys, base_run, new_run)[0] == 1
    assert run_compare(capsys, base_run, new_run, "--threshold", "10%")[0] == 0
    assert run_compare(capsys, base_run, new_run, "--threshold", "0.1")[0] == 0
    assert run_compare(capsys, base_run, new_run, "--threshold", "0.05")[0] == 1


def test_the_default_threshold_is_2_percent(base_run, new_run, capsys):
    """Without --threshold, a 3% change of a large copy (its noise far below that) fails the gate, 1.5% passes
    ("within ±2%"), and the summary says 2%."""
    want = dict(suite="copy", method="ce", direction="push", src_gpu=0, dst_gpu=1, bytes=64 * M)
    other = copy_run(new_run, new_run.parent / "new-1.5")
    synth.scale_rows(new_run, where(**want), 1 / 1.03)
    synth.scale_rows(other, where(**want), 1 / 1.015)
    rc, out, _ = run_compare(capsys, base_run, new_run)
    assert rc == 1 and "threshold 2%, alpha 0.01" in out
    rc, t, _ = csv_table(capsys, base_run, other)
    assert rc == 0 and verdict_of(t, **want)["note"] == "within ±2%"
    assert compare.compare([compare.load(base_run)], compare.load(new_run)).exit_code == 1


@pytest.mark.parametrize("bad", ["5", "-0.1", "fast", "150%"])
def test_bad_threshold(bad):
    parser = argparse.ArgumentParser()
    compare_command.add_arguments(parser)
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["a", "b", "--threshold", bad])
    assert e.value.code == 2


@pytest.mark.parametrize("bad", ["0", "0.9", "x"])
def test_bad_alpha(bad):
    parser = argparse.ArgumentParser()
    compare_command.add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["a", "b", "--alpha", bad])


def test_threshold_arg_values():
    assert compare.threshold_arg("5%") == pytest.approx(0.05)
    assert compare.threshold_arg("0.05") == pytest.approx(0.05)
    assert compare.threshold_arg("0") == 0


def test_unverified_in_new_is_a_regression(base_run, new_run, capsys):
    header, records = synth.read_csv(new_run)
    i = row_index(new_run, suite="copy", method="ce", direction="pull", src_gpu=0, dst_gpu=2, bytes=4 * K)
    records[i][header.index("verified")] = "false"
    synth.write_csv(new_run, header, records)
    rc, t, _ = csv_table(capsys, base_run, new_run)
    assert rc == 1
    assert list(t[t["verdict"] == "regression"]["note"]) == ["unverified in NEW"]
    rc, t, _ = csv_table(capsys, new_run, base_run)
    assert rc == 0 and list(t[t["verdict"] == "improvement"]["note"]) == ["verified in NEW only"]
    header, records = synth.read_csv(base_run)  # unverified on both sides, and twice as slow in NEW: not judged
    records[row_index(base_run, suite="copy", method="ce", direction="pull", src_gpu=0, dst_gpu=2, bytes=4 * K)][
        header.index("verified")] = "false"
    synth.write_csv(base_run, header, records)
    synth.scale_rows(new_run, [i], 0.5)
    rc, t, _ = csv_table(capsys, base_run, new_run)
    row = verdict_of(t, suite="copy", method="ce", direction="pull", src_gpu=0, dst_gpu=2, bytes=4 * K)
    assert rc == 0 and (row["verdict"], row["note"]) == ("not judged", "unverified in both")


# ------------------------------------------------------------------------------------------ symmetry

def test_swapping_mirrors_every_check_synthetic(base_run, tmp_path):
    """Many kinds of change at once (faster, slower, within threshold, noisy, unverified, missing rows,
    rows without samples on one side): compare(A, B) and compare(B, A) mirror row by row."""
    a = copy_run(base_run, tmp_path / "a")
    b = copy_run(base_run, tmp_path / "b")
    rng = np.random.default_rng(11)
    header, records = synth.read_csv(b)
    ix = {c: i for i, c in enumerate(header)}
    for r in records:
        if r[ix["kind"]] == "error":
            continue
        f = float(rng.choice([0.5, 0.9, 0.95, 0.97, 1.0, 1.04, 1.06, 1.2, 2.0]))
        for c in ("bw_gbps_median", "bw_gbps_max"):
            if r[ix[c]]:
                r[ix[c]] = f"{float(r[ix[c]]) * f:.6g}"
        for c in ("time_us_median", "time_us_min", "time_us_max"):
            r[ix[c]] = f"{float(r[ix[c]]) / f:.6g}"
        jitter = rng.normal(1, float(rng.choice([0.001, 0.02, 0.3])), 5).clip(0.2)
        r[ix["samples_us"]] = " ".join(f"{float(x) / f * j:.6g}" for x, j in zip(r[ix["samples_us"]].split(), jitter))
        if rng.random() < 0.05:
            r[ix["samples_us"]] = ""
        if rng.random() < 0.02:
            r[ix["verified"]] = "false"
    records = [r for r in records if rng.random() > 0.03]  # some rows missing
    synth.write_csv(b, header, records)
    t = api(a, b).table
    assert {"regression", "improvement", "unchanged", "not judged", "missing"} <= set(t["verdict"])
    assert_mirrors(a, b)


# Every ordered pair of real runs, of one GPU family or two: each side takes the floors of its own GPU model
# (judging/bounds.gpu_model), so swapping them mirrors every verdict. By default a ring of them (each run once as
# BASE, once as NEW), and a pair of runs with no row in common; the other pairs are slow (`pytest -m slow`).
REAL_PAIRS = [p for p in itertools.product(real_runs(), repeat=2) if p[0] != p[1]]
NO_COMMON_ROWS = [p for p in REAL_PAIRS if (p[0].name, p[1].name) == ("h200x1-all-1", "h200x2-all-1")]


@sampled("pair", REAL_PAIRS or [None], keep=0, always=ring_pairs(real_runs()) + NO_COMMON_ROWS,
         ids=lambda p: f"{p[0].name}-vs-{p[1].name}" if p else "none")
def test_swapping_mirrors_every_verdict_real(pair):
    if pair is None:
        pytest.skip(f"no real run under {RESULTS}")
    try:
        assert_mirrors(*pair)
    except UsageError as e:  # runs with no row in common (one GPU against two): refused both ways alike
        assert "no common rows" in str(e)
        with pytest.raises(UsageError, match="no common rows"):
            api(pair[1], pair[0])


def test_the_floors_do_not_depend_on_which_run_is_new():
    """One BASE: swapping the runs must mirror every verdict with the same bound (docs/report.md), also for runs of
    two GPU families (compare warns that the GPU models differ, and judges). Took NEW's model for both sides once:
    an H100 BASE against an H200 NEW was judged with H200's floors, swapped with H100's."""
    a, b = REPO / "tests" / "data" / "h100x2" / "all-1", REPO / "tests" / "data" / "h200x2" / "20261123-090753-vm"
    x, y = keyed(api(a, b).table), keyed(api(b, a).table)
    assert np.array_equal(x["bound"].to_numpy(), y["bound"].to_numpy(), equal_nan=True)


# ------------------------------------------------------------------------------------------ host-timed rows

def _host_rows(r) -> bool:
    return r["method"] == "mpi_staged" or (r["suite"] == "handles" and r["kind"] == "op")


def test_host_timed_rows_need_several_base_runs(base_run, tmp_path, capsys):
    base2 = copy_run(base_run, tmp_path / "base2")
    synth.scale_rows(base2, _host_rows, 1.03)  # a second BASE run: host-timed rows 3% apart
    synth.scale_rows(base2, lambda r: not _host_rows(r), 1.005)
    new = copy_run(base_run, tmp_path / "new")
    n = len(synth.scale_rows(new, _host_rows, 0.5))  # twice as slow
    # one BASE: in-run statistics alone never judge host-timed rows
    rc, t, _ = csv_table(capsys, base_run, new)
    host = t[(t["timing"] == "host") & (t["kind"] != "error")]
    assert rc == 0 and len(host) == n
    assert (host["verdict"] == "not judged").all() and (host["note"] == "host-timed: give 2+ BASE runs").all()
    assert (t[t["kind"] == "error"]["note"] == "error-path row").all()  # timed on the host, but never judged
    rc, out, _ = run_compare(capsys, base_run, new)
    assert "host-timed: give 2+ BASE runs" in out
    # two BASE runs: judged against the tail of their kind (catalogue/noise.HOST_TAIL), never below both sides'
    # noise: for these old runs their within-run noise and the floor of their kind combined (catalogue/noise.py, the
    # largest known for a GPU never measured: the H100's): twice as slow regresses exactly where it is beyond both
    # (mpi_staged at 64M and more: its tail 55%, both sides' floors 60%), and is within them elsewhere (a handle
    # operation: its tail, 450%, above both sides' floors, 190-280%)
    rc, t, _ = csv_table(capsys, base_run, base2, new)
    host = t[(t["timing"] == "host") & (t["kind"] != "error")]
    mpi, api = host[host["method"] == "mpi_staged"], host[host["method"] != "mpi_staged"]
    assert len(mpi) and len(api) and (host["test"] == "runs").all() and (host["rule"] == "tail").all()
    mpi_floor = np.array([noise.floor_for(SYNTH_GPU, "mpi", "host", int(b)).fraction for b in mpi["bytes"]])
    mpi_tail = np.array([noise.host_tail("mpi", int(b)).fraction for b in mpi["bytes"]])
    beyond = 1.0 > np.fmax(2 * mpi_floor + 0.01, mpi_tail)
    assert beyond.any() and ((mpi["verdict"] == "regression") == beyond).all() and rc == 1
    assert (host["base_runs"] == 2).all()
    assert (api["verdict"] == "unchanged").all() and (api["note"] == "within the tail of host-timed rows").all()
    assert (api["bound"] == noise.HOST_TAIL["api"][0]).all()
    assert (t[t["timing"] != "host"]["verdict"] != "regression").all()
    new3 = copy_run(base_run, tmp_path / "new3")
    synth.scale_rows(new3, _host_rows, 0.05)  # 20 times as slow: beyond every host-timed tail (at most 1115%)
    rc, t, _ = csv_table(capsys, base_run, base2, new3)
    host = t[(t["timing"] == "host") & (t["kind"] != "error")]
    assert rc == 1 and (host["verdict"] == "regression").all()


def test_host_timed_rows_within_between_run_variation(base_run, tmp_path, capsys):
    """BASE runs 30% apart on host-timed rows: NEW 20% off the first is within what they vary."""
    base2 = copy_run(base_run, tmp_path / "base2")
    synth.scale_rows(base2, _host_rows, 0.7)
    new = copy_run(base_run, tmp_path / "new")
    synth.scale_rows(new, _host_rows, 0.8)
    rc, t, _ = csv_table(capsys, base_run, base2, new)
    host = t[(t["timing"] == "host") & (t["kind"] != "error")]
    assert rc == 0 and (host["verdict"] == "unchanged").all()
    assert host["spread"].to_numpy() == pytest.approx(1 / 0.7 - 1, abs=1e-3)


def test_device_rows_with_several_base_runs_must_exceed_their_spread(base_run, tmp_path, capsys):
    want = dict(suite="copy", method="ce", direction="push", src_gpu=0, dst_gpu=3, bytes=64 * M)
    base2 = copy_run(base_run, tmp_path / "base2")
    synth.scale_rows(base2, where(**want), 0.9)  # the BASE runs differ by 10% on this row
    new = copy_run(base_run, tmp_path / "new")
    synth.scale_rows(new, where(**want), 0.88)
    _, t, _ = csv_table(capsys, base_run, new)  # one BASE: a regression
    assert verdict_of(t, **want)["verdict"] == "regression"
    _, t, _ = csv_table(capsys, base_run, base2, new)  # 7.5% below the BASE runs' mean, inside their spread
    row = verdict_of(t, **want)
    assert row["verdict"] == "unchanged" and row["note"] == "within the BASE runs' spread"
    assert row["base"] == pytest.approx(math.sqrt(0.9) * float(verdict_of(
        api(base_run, new).table, **want)["base"]), rel=1e-5)  # geometric mean of the BASE runs
    synth.scale_rows(new, where(**want), 0.7 / 0.88)
    rc, t, _ = csv_table(capsys, base_run, base2, new)
    assert verdict_of(t, **want)["verdict"] == "regression" and rc == 1


def test_same_base_twice_is_warned_and_counted_once(base_run, new_run, capsys):
    rc, out, _ = run_compare(capsys, base_run, base_run, new_run)
    assert rc == 0 and "BASE base is the same run as BASE base: counted once" in out
    assert "1 BASE run(s)" in out
    twice, once = api(base_run, base_run, new_run).table, api(base_run, new_run).table
    assert twice.equals(once)  # the same verdicts, p-values and notes as with the BASE given once


def test_new_that_is_a_base_is_refused(base_run, tmp_path, capsys):
    """A run against itself passes any gate: refused, in one line (the same file, or a copy of the run)."""
    _one_line_error(*run_compare(capsys, base_run, base_run), "is the same run as BASE", "give the run to judge")
    shutil.copytree(base_run, tmp_path / "copy")
    _one_line_error(*run_compare(capsys, base_run, tmp_path / "copy"), "is the same run as BASE")


# ------------------------------------------------------------------------------------------ missing / new rows

def test_rows_missing_from_new_fail_unless_subset(base_run, new_run, capsys):
    header, records = synth.read_csv(new_run)
    kept = [r for r in records if r[header.index("suite")] != "latency"]
    synth.write_csv(new_run, header, kept)
    n = len(records) - len(kept)
    rc, t, err = csv_table(capsys, base_run, new_run)
    assert rc == 1 and (t["verdict"] == "missing").sum() == n
    assert set(t[t["verdict"] == "missing"]["suite"]) == {"latency"} and "missing from NEW" in err
    rc, out, _ = run_compare(capsys, base_run, new_run)
    assert rc == 1 and "Missing from NEW" in out and "latency/sm_pingpong oneway" in out
    rc, out, _ = run_compare(capsys, base_run, new_run, "--subset")
    assert rc == 0 and "allowed by --subset" in out
    rc, t, _ = csv_table(capsys, new_run, base_run)  # the other way round: new rows, no failure
    assert rc == 0 and (t["verdict"] == "new").sum() == n


# ------------------------------------------------------------------------------------------ impossible rows

def test_impossible_new_row_fails(base_run, new_run, capsys):
    want = dict(suite="copy", method="ce", direction="push", src_gpu=1, dst_gpu=3, bytes=64 * M)
    t_us = 64 * M / 600e3  # 600 GB/s on a 478 GB/s link
    synth.set_samples(new_run, row_index(new_run, **want), [t_us * f for f in (1.0, 1.001, 0.999, 1.0005, 0.9995)])
    rc, out, _ = run_compare(capsys, base_run, new_run)
    assert rc == 1 and "Impossible numbers in NEW" in out and "above the link's ceiling" in out
    assert "NEW row(s) above a physical ceiling" in out.splitlines()[-1]
    c = api(base_run, new_run)
    assert c.counts()["impossible"] == 1 and c.counts()["regression"] == 0
    row = verdict_of(c.table, **want)
    assert row["verdict"] == "not judged" and row["note"] == "above a physical ceiling in NEW"
    # the same row in BASE: not judged either, and NEW (a possible number) passes
    rc, t, _ = csv_table(capsys, new_run, base_run)
    row = verdict_of(t, **want)
    assert rc == 0 and row["note"] == "above a physical ceiling in BASE"


# ------------------------------------------------------------------------------------------ warnings

def test_option_and_rank_warnings(base_run, tmp_path, capsys):
    new = synth.make_run(tmp_path, run_id="quick", sizes=SIZES, errors=True, suites=["copy", "staged", "latency",
                                                                                     "handles"],
                         options={"samples": None, "min_time_ms": 2.0, "quick": True,
                                  "sampling": {"min_time_ms": 2.0, "min_samples": 3, "max_samples": 5,
                                               "noise": 0.02, "max_time_s": 0.05}}, same_gpu=False)
    meta = json.loads((new / "meta.json").read_text())
    meta["versions"]["driver"] = "590.1"
    meta["ipcbench_version"] = "0.2.0"
    meta["pair_mode"] = {"mode": "concurrent", "requested": "auto", "reason": "r",
                         "serial_pairs": {"coverage": "ring", "requested": "auto", "reason": "r"}}
    for g in meta["gpus"]["hostA"]:
        g["name"] = "NVIDIA H100 80GB HBM3"
    (new / "meta.json").write_text(json.dumps(meta))
    rc, out, _ = run_compare(capsys, base_run, new)
    top = out.split("Changed rows")[0]
    for words in ("options differ", "quick false vs true", "min_time_ms 5.0 vs 2.0", "noise 0.005 vs 0.02",
                  "rank counts differ: 8 rank(s), 2 per GPU vs 4 rank(s), 1 per GPU", "GPU models differ",
                  "driver versions differ: 580.159.04 vs 590.1", "ipcbench versions differ: 0.1.0 vs 0.2.0",
                  "measured every pair vs a ring of pairs (--serial-pairs)", "compare with --subset"):
        assert words in top, words
    _, _, err = csv_table(capsys, base_run, new)
    assert "warning: BASE base vs NEW quick: options differ" in err


# ------------------------------------------------------------------------------------------ matching / formats

def test_uuid_matching_survives_renumbering(base_run, new_run, capsys):
    """NEW enumerates the GPUs in reverse (as after a CUDA_VISIBLE_DEVICES change): matched by UUID, every
    row is unchanged; without UUIDs the same files would be matched by index and differ."""
    meta = json.loads((new_run / "meta.json").read_text())
    n = len(meta["gpus"]["hostA"])
    for g in meta["gpus"]["hostA"]:
        g["index"] = n - 1 - g["index"]
    for r in meta["ranks"]:
        r["gpu"] = n - 1 - r["gpu"]
    for link in meta["topology"]["hostA"]["links"]:
        link["src_gpu"], link["dst_gpu"] = n - 1 - link["src_gpu"], n - 1 - link["dst_gpu"]
    (new_run / "meta.json").write_text(json.dumps(meta))
    header, records = synth.read_csv(new_run)
    for r in records:
        for c in ("src_gpu", "dst_gpu"):
            r[header.index(c)] = str(n - 1 - int(r[header.index(c)]))
    synth.write_csv(new_run, header, records)
    rc, t, err = csv_table(capsys, base_run, new_run)
    assert rc == 0 and (t["ratio"] == 1.0).all() and len(t) == len(records)
    assert "matched by UUID" in err
    (new_run / "meta.json").unlink()
    rc, t, err = csv_table(capsys, base_run, new_run)
    assert "matched by index" in err and (t["ratio"] != 1.0).any()
    assert "no meta.json for NEW" in err


def test_results_csv_paths_and_formats(base_run, new_run, capsys):
    synth.scale_rows(new_run, where(suite="copy", method="ce", bytes=64 * M, src_gpu=0, dst_gpu=1), 0.7)
    rc, text, _ = run_compare(capsys, base_run / "results.csv", new_run / "results.csv")
    assert rc == 1
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("method "))
    assert lines[head].split()[:4] == ["method", "direction", "host", "pair"]
    assert lines[head + 2].split()[-1] == "regression"  # worst first
    assert lines[-1].startswith("verdict: REGRESSION")
    assert "regression, " in lines[-2] and "impossible" in lines[-2]  # the counts line
    rc, md, _ = run_compare(capsys, base_run, new_run, "--format", "md")
    assert rc == 1 and md.startswith("**verdict: REGRESSION") and "| method | direction |" in md
    rc, t, _ = csv_table(capsys, base_run, new_run)
    assert list(t["verdict"][:3]) == ["regression"] * 3
    for c in ("unit", "base", "new", "change", "p", "test", "verdict", "timing", "sliced", "kind"):
        assert c in t.columns


# ------------------------------------------------------------------------------------------ bad input

def _one_line_error(rc, out, err, *words):
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("ipcbench: error: ")
    for w in words:
        assert w in err, err


def test_missing_input(base_run, tmp_path, capsys):
    _one_line_error(*run_compare(capsys, base_run, tmp_path / "nope"), "nope", "no such file")
    (tmp_path / "empty").mkdir()
    _one_line_error(*run_compare(capsys, tmp_path / "empty", base_run), "no results.csv")
    _one_line_error(*run_compare(capsys, base_run, tmp_path / "nope", base_run), "nope")


def test_one_path_is_not_enough():
    parser = argparse.ArgumentParser()
    compare_command.add_arguments(parser)
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["only-one"])
    assert e.value.code == 2
    args = parser.parse_args(["a", "b", "c"])
    assert args.base == ["a", "b"] and args.new == "c"


def test_malformed_input(base_run, new_run, capsys):
    text = (new_run / "results.csv").read_text()
    lines = text.splitlines(keepends=True)
    (new_run / "results.csv").write_text("".join(lines[:5] + [lines[5][:40] + "\n"] + lines[6:]))
    _one_line_error(*run_compare(capsys, base_run, new_run), f"{new_run / 'results.csv'}:6:", "truncated")
    (new_run / "results.csv").write_text(text)
    (new_run / "meta.json").write_text("{\n")
    _one_line_error(*run_compare(capsys, base_run, new_run), f"{new_run / 'meta.json'}:2:")


def test_cut_short_last_line(base_run, new_run, capsys):
    """A last line that a killed writer cut short is dropped by the loader with a warning; that row is then
    missing from NEW, which fails the gate."""
    text = (new_run / "results.csv").read_text()
    (new_run / "results.csv").write_text(text[:-25])
    rc, out, _ = run_compare(capsys, base_run, new_run)
    assert rc == 1 and "cut short" in out.split("Changed rows")[0] and "1 missing" in out


def test_no_common_rows(tmp_path, capsys):
    a = synth.make_run(tmp_path, run_id="a", suites=["copy"], sizes=SIZES)
    b = synth.make_run(tmp_path, run_id="b", suites=["latency"])
    _one_line_error(*run_compare(capsys, a, b), "no common rows")


# ------------------------------------------------------------------------------------------ real runs

def _degradable(run_dir: Path) -> pd.Index:
    """Rows of a real run that a 30% loss must flag: device-timed, quiet, each the only row of its key, of a kind
    whose between-runs floor lets two runs of the same code move less than that (not the H200's event ping-pong,
    whose processes take levels 40% apart: catalogue/noise.py)."""
    df = load_run(run_dir / "results.csv").frame
    key = ["suite", "method", "direction", "src_gpu", "dst_gpu", "bytes"]
    host = significance.host_timed(df) | significance.time_sliced(df)
    model = read_meta(run_dir).gpus.get(str(df["host"].iloc[0]), [None])[0]
    floor = np.array([noise.floor_for(model.name if model else "", e, t, int(b), same_gpu=bool(s)).fraction
                      for e, t, b, s in zip(df["engine"], df["timing"], df["bytes"], df["same_gpu"])])
    ok = (~df.duplicated(key, keep=False) & ~host & (df["kind"] != "error") & (df["cv"] < 0.02) & df["verified"]
          & (df["samples"] >= 3) & (2 * floor < 0.4))
    return df.index[ok]


# Every real run against itself and a degraded copy: by default two runs of each directory (results/, tests/data/*)
# and two more drawn with a fixed seed; the other runs are slow.
@sampled("run_dir", real_runs() or [None], keep=2, always=per_directory(real_runs(), keep=2),
         ids=lambda p: p.name if p else "none")
def test_real_run_compare(run_dir, tmp_path, capsys):
    if run_dir is None:
        pytest.fail(f"no real run under {RESULTS}/*/ (results.csv + meta.json): commit one measured on the GPU "
                    "machine, or point IPCBENCH_RESULTS_DIR at a results directory")
    c = api(run_dir, copy_run(run_dir, tmp_path / "again"))
    assert set(c.table["verdict"]) <= {"unchanged", "not judged"}
    assert c.exit_code == (1 if len(c.impossible) else 0)  # a run with impossible numbers is never blessed
    df = pd.read_csv(run_dir / "results.csv", keep_default_na=False, na_values=[""])
    idx = _degradable(run_dir)
    picks = {int(idx[int(k * (len(idx) - 1) / 3)]) for k in range(4)}
    new = copy_run(run_dir, tmp_path / "new")
    synth.scale_rows(new, picks, 0.7)
    t = api(run_dir, new).table
    reg = t[t["verdict"] == "regression"]
    want = {tuple(df.loc[i, ["suite", "method", "direction", "src_gpu", "dst_gpu", "bytes"]]) for i in picks}
    assert {tuple(r) for r in reg[["suite", "method", "direction", "src_gpu", "dst_gpu", "bytes"]]
            .itertuples(index=False)} == want
    assert (t["verdict"] != "improvement").all()
    assert_mirrors(run_dir, new)


def test_time_sliced_handoffs_need_several_base_runs(tmp_path):
    """Same-GPU hand-off rows without MPS (shm_staged, the ping-pongs, the pipeline) take the GPU scheduler's
    time slice: two H100 runs of the same shm_staged code put its rows 0.48x to 2.3x apart, with tight samples.
    Slowed by 30% in a copy of a real run (tests/data/mps), they are not judged against one BASE run; the
    same rows of a run under MPS (hand-offs concurrent) are regressions; so is the copy engine beside them."""
    data = Path(__file__).parent / "data" / "mps"
    slow = {"shm_staged", "sm_pingpong", "ring_d8"}
    for name, sliced in (("h100-nomps", True), ("h100-mps", False)):
        new = copy_run(data / name, tmp_path / name)
        picked = synth.scale_rows(new, lambda r: r["method"] in slow or (r["method"], r["direction"]) == ("ce", "push"),
                                  0.7)
        assert picked
        t = api(data / name, new).table
        handoff = t[t["method"].isin(slow)]
        ce = t[(t["method"] == "ce") & (t["direction"] == "push")]
        assert len(handoff) and len(ce) and (ce["verdict"] == "regression").all()
        if sliced:
            assert set(handoff["verdict"]) == {"not judged"} and set(handoff["sliced"]) == {True}
            assert set(handoff["note"]) == {"time-sliced hand-off (same GPU, no MPS): give 2+ BASE runs"}
        else:
            assert set(handoff["sliced"]) == {False} and "regression" in set(handoff["verdict"])
        assert set(handoff["timing"]) == {"handoff"}
        assert_mirrors(data / name, new)
    # a run without MPS against one with it: time-sliced on one side is enough (and stays symmetric)
    t = api(data / "h100-nomps", data / "h100-mps").table
    assert set(t[t["method"].isin(slow)]["sliced"]) == {True}
    assert_mirrors(data / "h100-nomps", data / "h100-mps")


# ------------------------------------------------------------------------------------------ recorded cases

def recorded_cases() -> list[Path]:
    return sorted(p.parent for p in Path(CASES).glob("*/case.json")) if CASES else []


@pytest.mark.parametrize("case", recorded_cases() or [None], ids=lambda p: p.name if p else "none")
def test_recorded_case(case, capsys):
    if case is None:
        pytest.skip("no recorded compare cases ($IPCBENCH_COMPARE_CASES not set or empty)")
    spec = json.loads((case / "case.json").read_text())
    paths = [case / p for p in spec["base"]] + [case / spec["new"]]
    rc, t, err = csv_table(capsys, *paths, *spec.get("args", []))
    assert rc == spec.get("exit", 0), err
    n = int((t["verdict"] == "regression").sum())
    lim = spec.get("regressions", {})
    assert lim.get("min", 0) <= n <= lim.get("max", n), (n, lim)
    if len(spec["base"]) == 1:
        assert_mirrors(*paths)

