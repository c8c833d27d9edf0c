"""compare's noise rule, clause by clause (docs/report.md, "How a verdict is reached"), on synthetic runs whose
`noise` the test sets: a regression must exceed what its row is known to move between runs and --threshold.

- Both runs "between-runs" (meta.json "noise_basis"): the bound is the sum of both rows' noise, no floor.
- Either run older (no key, or "within-run"): each side's within-run noise and the between-runs floor of its kind
  (catalogue/noise.py, by GPU family, engine, timing and size band) combined: sqrt(noise^2 + floor^2).
- A missing noise is the floor, never zero, and the row's note says so.
- Several BASE runs: their spread, never below both sides' honest noise (never stricter than one BASE).
- Swapping BASE and NEW mirrors every verdict.
- The verdict says which rule judged and, per kind of row, the smallest change it would have caught.
- An invalid NEW value (the reader's `invalid` column, or NaN, infinite, zero, negative) fails the gate.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from ipcbench.record.meta import MetaError

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synth  # noqa: E402
from ipcbench.catalogue import noise  # noqa: E402
from ipcbench.judging import compare  # noqa: E402
from ipcbench.judging.bounds import pct  # noqa: E402
from ipcbench.report.compare_view import catches_line  # noqa: E402
from conftest import MIRROR, run_compare as cli

K, M = 1 << 10, 1 << 20
GPU = "NVIDIA H100 80GB HBM3"  # the runs' GPUs: the family whose floors are largest (sm <= 256K: 10%)
SIZES = [4 * K, 1 * M, 64 * M]
SM4K = dict(suite="kernel", method="sm_write", direction="push", src_gpu=0, dst_gpu=1, bytes=4 * K)
CE64M = dict(suite="copy", method="ce", direction="push", src_gpu=0, dst_gpu=1, bytes=64 * M)
SM4K_FLOOR = noise.floor_for(GPU, "sm", "gated", 4 * K).fraction
CE64M_FLOOR = noise.floor_for(GPU, "ce", "gated", 64 * M).fraction


def make(tmp_path: Path, name: str, basis: str | None = "between-runs", stated: float | None = 0.01) -> Path:
    """A run of copy and kernel rows (4 GPUs, GPU) whose meta.json says `basis` (None: no key) and whose every row
    states `stated` as its noise (None: the column left as synth wrote it)."""
    run = synth.make_run(tmp_path, run_id=name, suites=["copy", "kernel", "staged"], sizes=SIZES, same_gpu=False)
    meta = json.loads((run / "meta.json").read_text())
    if basis is not None:
        meta["noise_basis"] = basis
    for gs in meta["gpus"].values():
        for g in gs:
            g["name"] = GPU
    (run / "meta.json").write_text(json.dumps(meta))
    if stated is not None:
        set_noise(run, lambda r: True, stated)
    return run


def another(run: Path, dst: Path) -> Path:
    """The same rows under a run id of their own (compare counts a run given twice once)."""
    shutil.copytree(run, dst)
    meta = json.loads((dst / "meta.json").read_text())
    (dst / "meta.json").write_text(json.dumps({**meta, "run_id": dst.name, "start": dst.name}))
    return dst


def set_noise(run: Path, pick, value) -> None:
    """Set the `noise` text of the rows pick(record) selects: a number, or "" (missing)."""
    header, records = synth.read_csv(run)
    i = header.index("noise")
    for r in records:
        if pick(dict(zip(header, r))):
            r[i] = "" if value == "" else f"{value:g}" if isinstance(value, float) else str(value)
    synth.write_csv(run, header, records)


def set_within(run: Path, pick, value: float) -> None:
    """Give the rows pick(record) selects a `noise_within` (the column appended if the run has none)."""
    header, records = synth.read_csv(run)
    if "noise_within" not in header:
        header = header + ["noise_within"]
        records = [r + [""] for r in records]
    i = header.index("noise_within")
    for r in records:
        if pick(dict(zip(header, r))):
            r[i] = f"{value:g}"
    synth.write_csv(run, header, records)


def where(**want):
    return lambda r: all(str(r[k]) == str(v) for k, v in want.items())


def judge(*paths, threshold=compare.DEFAULT_THRESHOLD, **kw) -> compare.Comparison:
    runs = [compare.load(p) for p in paths]
    return compare.compare(runs[:-1], runs[-1], threshold=threshold, **kw)


def row(c: compare.Comparison, **want):
    t = c.table
    for k, v in want.items():
        t = t[t[k].astype(str) == str(v)]
    assert len(t) == 1, want
    return t.iloc[0]


# ------------------------------------------------------------------------------------------ the noise basis

def test_noise_basis_reads_meta_json_and_defaults_to_within_run(tmp_path):
    new = make(tmp_path, "new")
    old = make(tmp_path, "old", basis=None)
    other = make(tmp_path, "other", basis="something else")
    assert compare.noise_basis(compare.load(new)) == "between-runs"
    assert compare.noise_basis(compare.load(old)) == "within-run"
    with pytest.raises(MetaError, match="field noise_basis"):  # a basis no writer writes: the record refuses it
        compare.load(other)
    shutil.copy(new / "results.csv", tmp_path / "rows.csv")
    assert compare.noise_basis(compare.load(tmp_path / "rows.csv")) == "within-run"  # a bare CSV: no meta.json


# ------------------------------------------------------------------------------------------ one BASE

def test_between_runs_runs_are_judged_on_the_sum_of_both_rows_noise(tmp_path, capsys):
    """BASE noise 2%, NEW 3% on one row: 4.8% slower is inside 5%, 5.3% beyond it (threshold 2%). No floor: the
    same 5.3% on an sm 4K row (its floor 10% on H100) is a regression too."""
    base = make(tmp_path, "base")
    set_noise(base, where(**CE64M), 0.02)
    for factor, verdict in ((1 / 1.048, "unchanged"), (1 / 1.053, "regression")):
        new = another(base, tmp_path / f"new{factor:.4f}")
        set_noise(new, where(**CE64M), 0.03)
        synth.scale_rows(new, where(**CE64M), factor)
        c = judge(base, new, threshold=0.02)
        r = row(c, **CE64M)
        assert r["bound"] == pytest.approx(0.05) and r["rule"] == "noise"
        assert r["verdict"] == verdict, (factor, r["note"])
        assert c.info["noise_basis"] == "between-runs" and c.info["noise_rule"] == "between-runs noise"
    new = another(base, tmp_path / "sm")
    synth.scale_rows(new, where(**SM4K), 1 / 1.053)
    r = row(judge(base, new, threshold=0.02), **SM4K)
    assert 1.053 - 1 < SM4K_FLOOR
    assert r["bound"] == pytest.approx(0.02) and r["verdict"] == "regression"
    rc, out, _ = cli(capsys, base, new, "--threshold", "2%")
    assert rc == 1 and "noise rule: between-runs noise\n" in out


@pytest.mark.parametrize("old_side", ["base", "new"])
def test_a_run_older_than_the_between_runs_noise_gets_the_floors(tmp_path, capsys, old_side):
    """The same 5.3% on an sm 4K row, one of the runs without "noise_basis": its stated 1% is known to be too
    small, so that side is its stated noise and the sm <= 256K floor (10% on H100) combined as independent levels,
    sqrt(noise^2 + floor^2) (catalogue/noise.combined); the other side states a noise that holds its floors (and
    no noise_within), taken as stated: unchanged. Combined, not the larger of the two: a ce 64M
    row stating 1% (its floor 0.25%) gets a little more than 1% a side, and 20% a side on the sm row gives
    2 x 22.4%, not 40%."""
    base = make(tmp_path, "base", basis=None if old_side == "base" else "between-runs")
    new = make(tmp_path, "new", basis=None if old_side == "new" else "between-runs")
    synth.scale_rows(new, where(**SM4K), 1 / 1.053)
    c = judge(base, new, threshold=0.02)
    r = row(c, **SM4K)
    assert r["bound"] == pytest.approx(noise.combined(0.01, SM4K_FLOOR) + 0.01) and r["rule"] == "noise+floor"
    assert (r["verdict"], r["note"]) == ("unchanged", "within the rows' noise")
    assert c.info["noise_basis"] == "within-run"
    ce = row(c, **CE64M)["bound"]
    assert ce == pytest.approx(noise.combined(0.01, CE64M_FLOOR) + 0.01, rel=1e-9) and ce > 0.02 + 1e-5
    rc, out, _ = cli(capsys, base, new)
    assert ("noise rule: within-run noise + between-runs floors for runs older than the between-runs noise\n"
            in out)
    set_noise(base, where(**SM4K), 0.2)
    set_noise(new, where(**SM4K), 0.2)
    assert row(judge(base, new), **SM4K)["bound"] == pytest.approx(noise.combined(0.2, SM4K_FLOOR) + 0.2)
    assert 2 * noise.combined(0.2, SM4K_FLOOR) == pytest.approx(2 * (0.2 ** 2 + SM4K_FLOOR ** 2) ** 0.5)


def test_a_missing_noise_is_the_floor_never_zero(tmp_path):
    """Between-runs runs, NEW's noise empty on an sm 4K row that moved 8% (threshold 2%), BASE's 0.1%: taken as
    zero the bound would be 0.1% and the row a regression; it is the sm <= 256K floor, and the note says so."""
    base = make(tmp_path, "base", stated=0.001)
    new = another(base, tmp_path / "new")
    set_noise(new, where(**SM4K), "")
    synth.scale_rows(new, where(**SM4K), 1 / 1.08)
    c = judge(base, new, threshold=0.02)
    r = row(c, **SM4K)
    said = f"no noise in NEW: the sm <= 256K floor ±{pct(SM4K_FLOOR)}"
    assert r["bound"] == pytest.approx(0.001 + SM4K_FLOOR) and r["rule"] == "noise"
    assert (r["verdict"], r["note"]) == ("unchanged", f"within the rows' noise; {said}")
    assert c.info["no_noise"] == 1 and any("1 row(s) have no noise on a side" in w for w in c.warnings)
    # the other side, and both: the note names them; a regression says it too
    set_noise(base, where(**SM4K), "nan")
    synth.scale_rows(new, where(**SM4K), 1 / 1.3)
    r = row(judge(base, new, threshold=0.02), **SM4K)
    assert r["bound"] == pytest.approx(2 * SM4K_FLOOR)
    assert (r["verdict"], r["note"]) == ("regression", said.replace("in NEW", "in BASE and NEW"))
    set_noise(new, where(**SM4K), "-0.01")  # negative: no noise either
    assert row(judge(base, new, threshold=0.02), **SM4K)["note"].startswith("no noise in BASE and NEW")
    # an old run: a missing noise is the floor alone (not combined with anything)
    old_b, old_n = make(tmp_path / "old", "b", basis=None, stated=0.001), make(tmp_path / "old", "n", basis=None)
    set_noise(old_n, where(**SM4K), "")
    r = row(judge(old_b, old_n), **SM4K)
    assert r["bound"] == pytest.approx(noise.combined(0.001, SM4K_FLOOR) + SM4K_FLOOR) and r["rule"] == "noise+floor"


def test_unchanged_code_is_symmetric(tmp_path):
    """Swapping BASE and NEW mirrors every verdict, with the same bound, under both rules."""
    for basis in ("between-runs", None):
        a = make(tmp_path / str(basis), "a", basis=basis, stated=None)
        b = another(a, tmp_path / str(basis) / "b")
        rng = np.random.default_rng(5)
        header, records = synth.read_csv(b)
        picks = [i for i in range(len(records)) if rng.random() < 0.3]
        for i in picks:
            synth.scale_rows(b, [i], float(rng.choice([0.5, 0.9, 0.97, 1.03, 1.1, 2.0])))
        set_noise(b, lambda r: rng.random() < 0.1, "")
        x, y = judge(a, b, threshold=0.02).table, judge(b, a, threshold=0.02).table
        key = ["suite", "method", "direction", "src_gpu", "dst_gpu", "bytes", "seq"]
        x, y = x.set_index(key).sort_index(), y.set_index(key).sort_index()
        assert (x["verdict"].map(MIRROR) == y["verdict"]).all()
        assert np.array_equal(x["bound"].to_numpy(), y["bound"].to_numpy(), equal_nan=True)
        assert {"regression", "unchanged"} <= set(x["verdict"])


# ------------------------------------------------------------------------------------------ several BASE runs

def test_several_base_runs_are_never_stricter_than_one(tmp_path):
    """Two BASE runs 1% apart on a row, each stating 2%, NEW 2%: one BASE allows 4% (both rows' noise); two allow
    as much (their spread is only 1%): 3.5% off their mean is unchanged, 5% a regression. Their spread alone, or
    at least NEW's own noise (2%), would have failed the 3.5%. BASE runs 6% apart: their spread is the bound."""
    b1 = make(tmp_path, "b1", stated=0.02)
    b2 = another(b1, tmp_path / "b2")
    synth.scale_rows(b2, where(**CE64M), 1 / 1.01)
    mean = 1 / np.sqrt(1.01)  # the BASE runs' geometric mean, relative to b1
    for change, verdict in ((1.035, "unchanged"), (1.05, "regression")):
        new = another(b1, tmp_path / f"new{change}")
        synth.scale_rows(new, where(**CE64M), mean / change)
        r = row(judge(b1, b2, new, threshold=0.02), **CE64M)
        assert r["spread"] == pytest.approx(0.01, abs=1e-4)
        assert r["bound"] == pytest.approx(0.04) and r["rule"] == "spread" and r["verdict"] == verdict
        assert r["bound"] == pytest.approx(row(judge(b1, new, threshold=0.02), **CE64M)["bound"])  # one BASE's
        if verdict == "unchanged":
            assert r["note"] == "within the rows' noise"
    b3 = another(b1, tmp_path / "b3")
    set_noise(b3, lambda r: True, 0.002)
    set_noise(b1, lambda r: True, 0.002)
    synth.scale_rows(b3, where(**CE64M), 1 / 1.06)
    new = another(b1, tmp_path / "new-wide")
    synth.scale_rows(new, where(**CE64M), 1 / 1.06 ** 0.5 / 1.055)
    r = row(judge(b1, b3, new, threshold=0.02), **CE64M)
    assert r["change"] == pytest.approx(-1 + 1 / 1.055, abs=1e-4)
    assert r["bound"] == pytest.approx(0.06, abs=1e-4) and r["spread"] == pytest.approx(0.06, abs=1e-4)
    assert (r["verdict"], r["note"]) == ("unchanged", "within the BASE runs' spread")


def test_several_old_base_runs_never_below_the_floor(tmp_path):
    """Old runs: two BASE runs identical on an sm 4K row (spread 0), stating 0.1%; NEW 8% slower, as back-to-back
    runs of the same code on 2 x H100 moved: inside both sides' honest noise (each 0.1% and the sm <= 256K floor
    combined), even at --threshold 0."""
    b1 = make(tmp_path, "b1", basis=None, stated=0.001)
    b2 = another(b1, tmp_path / "b2")
    new = another(b1, tmp_path / "new")
    synth.scale_rows(new, where(**SM4K), 1 / 1.08)
    r = row(judge(b1, b2, new, threshold=0.0), **SM4K)
    assert r["spread"] == 0 and r["bound"] == pytest.approx(2 * noise.combined(0.001, SM4K_FLOOR))
    assert (r["verdict"], r["note"]) == ("unchanged", "within the rows' noise")


# ------------------------------------------------------------------------------------------ what a pass covers

def test_the_check_says_the_smallest_change_caught_per_kind(tmp_path, capsys):
    """Every row states 1%: each bound is 2%. At --threshold 5% every band is at the threshold, said once per
    band; at 1% each kind says 2%. The info dict holds the same, per kind (engine x size band)."""
    base = make(tmp_path, "base")
    new = another(base, tmp_path / "new")
    c = judge(base, new, threshold=0.05)
    assert catches_line(c) == ("smallest change caught (typical per kind of row): every engine <= 256K: 5% "
                                       "(the threshold); every engine 256K-64M: 5% (the threshold); every engine "
                                       ">= 64M: 5% (the threshold)")
    c = judge(base, new, threshold=0.01)
    kinds = {x["kind"]: x for x in c.info["catches"]}
    assert set(kinds) == {f"{e} {b}" for e in ("ce", "sm", "shm") for b in ("<= 256K", "256K-64M", ">= 64M")}
    assert all(x["smallest_change"] == pytest.approx(0.02) and not x["at_threshold"] for x in kinds.values())
    line = catches_line(c)
    assert line.startswith("smallest change caught (typical per kind of row): ce <= 256K: 2%; sm <= 256K: 2%; "
                           "shm <= 256K: 2%; ce 256K-64M: 2%;")
    # the sm 4K rows state 10%: their kind says 20%, the others stay
    set_noise(base, lambda r: r["method"].startswith("sm") and r["bytes"] == str(4 * K), 0.1)
    set_noise(new, lambda r: r["method"].startswith("sm") and r["bytes"] == str(4 * K), 0.1)
    c = judge(base, new, threshold=0.05)
    assert "sm <= 256K: 20%; shm <= 256K: 5% (the threshold);" in catches_line(c)
    for fmt in ("text", "md"):
        rc, out, _ = cli(capsys, base, new, "--format", fmt, "--threshold", "5%")
        assert rc == 0 and catches_line(c) in out and "noise rule: between-runs noise" in out
    rc, out, err = cli(capsys, base, new, "--format", "csv", "--threshold", "5%")
    assert catches_line(c) in err and "noise rule: between-runs noise" in err


def test_rows_decided_before_their_size_are_not_counted_as_covered(tmp_path):
    """Host-timed rows with one BASE, and unverified rows, have no bound and no rule: not in what a pass covers."""
    base = make(tmp_path, "base")
    new = another(base, tmp_path / "new")
    c = judge(base, new)
    host = c.table[c.table["timing"] == "host"]
    assert len(host) and host["bound"].isna().all() and (host["rule"] == "").all()
    assert not any(x["engine"] == "mpi" for x in c.info["catches"])


# ------------------------------------------------------------------------------------------ invalid values

@pytest.mark.parametrize("text, words", [("-3.5", "results.csv:4: bw_gbps_median -3.5 GB/s is negative"),  # reader
                                         ("", "results.csv:4: bw_gbps_median is empty"),  # the reader's
                                         ("nan", "results.csv:4: bw_gbps_median is NaN"),  # the reader's
                                         ("0", "bw_gbps_median 0 GB/s is zero")])  # the reader names zero too
def test_an_invalid_new_value_fails_the_gate_naming_it(tmp_path, capsys, text, words):
    """A negative rate was "no value to compare", not judged, exit 0: corrupt data passed the gate."""
    base = make(tmp_path, "base")
    new = another(base, tmp_path / "new")
    header, records = synth.read_csv(new)
    i = next(i for i, r in enumerate(records) if where(**CE64M)(dict(zip(header, r))))
    records[i][header.index("bw_gbps_median")] = text
    synth.write_csv(new, header, records)
    c = judge(base, new)
    r = row(c, **CE64M)
    assert c.exit_code == 1 and c.counts()["invalid"] == 1 and c.failures() == {"invalid": 1}
    assert (r["verdict"], r["note"]) == ("not judged", "invalid in NEW") and words in r["invalid"]
    rc, out, _ = cli(capsys, base, new)
    assert rc == 1 and "Invalid values in NEW: 1 row(s)" in out and words in out
    assert out.splitlines()[-1] == "verdict: FAIL (1 NEW row(s) with an invalid value)"
    assert "0 impossible, 1 invalid" in out
    # the same row invalid in BASE: not judged, named, and the gate passes
    c = judge(new, base)
    r = row(c, **CE64M)
    assert c.exit_code == 0 and r["verdict"] == "not judged" and r["note"].startswith("invalid in BASE: ")
    assert words in r["note"] and r["invalid"] == ""


def test_an_infinite_rate_is_counted_once(tmp_path):
    """An infinite rate: the reader names it invalid (record/validate.py): counted once, as invalid (which fails
    the gate), not also as impossible."""
    base = make(tmp_path, "base")
    new = another(base, tmp_path / "new")
    header, records = synth.read_csv(new)
    i = next(i for i, r in enumerate(records) if where(**CE64M)(dict(zip(header, r))))
    records[i][header.index("bw_gbps_median")] = "inf"
    synth.write_csv(new, header, records)
    c = judge(base, new)
    assert c.exit_code == 1 and c.failures() == {"invalid": 1} and c.counts()["impossible"] == 0
    r = row(c, **CE64M)
    assert r["note"] == "invalid in NEW" and "bw_gbps_median is infinite" in r["invalid"]


def test_the_readers_invalid_column_fails_the_gate(tmp_path):
    """COMMON interface 2: the reader names an impossible value in `invalid` (and blanks the value). A row it
    named fails the gate with the reader's message, also when only NEW has it; in BASE it is not judged."""
    base = make(tmp_path, "base")
    new = another(base, tmp_path / "new")
    b, n = compare.load(base), compare.load(new)
    said = "results.csv:17: bw_gbps_median 600 GB/s above the link's ceiling 478.1 GB/s"
    sel = np.ones(len(n.frame), dtype=bool)
    for k, v in CE64M.items():
        sel &= n.frame[k].astype(str).to_numpy() == str(v)
    n.frame["invalid"] = np.where(sel, said, "")
    c = compare.compare([b], n)
    r = row(c, **CE64M)
    assert c.exit_code == 1 and c.counts()["invalid"] == 1 and r["invalid"] == said
    c = compare.compare([n], b)
    r = row(c, **CE64M)
    assert c.exit_code == 0 and r["note"] == f"invalid in BASE: {said}"
    # a NEW row with no BASE row: still fails
    b.frame = b.frame[~sel].reset_index(drop=True)
    c = compare.compare([b], n)
    assert c.exit_code == 1 and row(c, **CE64M)["verdict"] == "new" and c.failures() == {"invalid": 1}


def test_a_runs_own_within_noise_takes_todays_floors(tmp_path):
    """A run of the current code writes noise_within beside its noise: compare combines that within-run noise with
    the floor the catalogue states today, so a floor measured after the run was made applies to it too (one GPU's
    copy rows were first written with a pair's 2.5%; the same-GPU floor measured later is 12%)."""
    base = make(tmp_path, "base", stated=0.01)
    new = another(base, tmp_path / "new")
    for run in (base, new):
        set_within(run, where(**SM4K), 0.002)
    synth.scale_rows(new, where(**SM4K), 1 / 1.05)
    r = row(judge(base, new, threshold=0.02), **SM4K)
    assert r["bound"] == pytest.approx(2 * noise.combined(0.002, SM4K_FLOOR))  # not the stated 1% a side
    assert r["verdict"] == "unchanged"
