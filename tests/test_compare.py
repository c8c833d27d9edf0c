"""`ipcbench compare BASE NEW`: verdicts, noise awareness, UUID matching, formats and exit codes.

test_real_run_compare runs on every real run committed under results/*/ (or $IPCBENCH_RESULTS_DIR): a copy
in which the test degrades a few rows must be flagged on exactly those rows.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synth  # noqa: E402
from ipcbench import compare  # noqa: E402
from ipcbench.results import COLUMNS  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(os.environ.get("IPCBENCH_RESULTS_DIR", REPO / "results"))
KEY = ["suite", "method", "direction", "src_gpu", "dst_gpu", "bytes"]


def real_runs() -> list[Path]:
    return sorted(p.parent for p in RESULTS.glob("*/results.csv") if (p.parent / "meta.json").is_file())


def run_compare(capsys, *argv) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    compare.add_arguments(parser)
    rc = compare.run(parser.parse_args([str(a) for a in argv]))
    out, err = capsys.readouterr()
    return rc, out, err


def as_table(out: str) -> pd.DataFrame:
    return pd.read_csv(io.StringIO(out), keep_default_na=False, na_values=[""])


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("report"))
    return dst


def edit_rows(run_dir: Path, picks: dict[int, float]) -> None:
    """Scale the performance of the given data rows (0-based record index -> factor < 1 = slower): bandwidth
    columns times factor, time columns divided by it. Other rows keep their exact text."""
    path = run_dir / "results.csv"
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    header = rows[0]
    ix = {c: header.index(c) for c in COLUMNS}
    for i, f in picks.items():
        r = rows[i + 1]
        for c in ("bw_gbps_median", "bw_gbps_max"):
            if r[ix[c]]:
                r[ix[c]] = f"{float(r[ix[c]]) * f:.6g}"
        for c in ("time_us_median", "time_us_min", "time_us_max"):
            if r[ix[c]]:
                r[ix[c]] = f"{float(r[ix[c]]) / f:.6g}"
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)


def row_noise(r) -> float:
    """A row's relative half-spread, computed here independently of compare.py."""
    med, lo, hi = r["time_us_median"], r["time_us_min"], r["time_us_max"]
    if all(isinstance(v, float) and math.isfinite(v) for v in (med, lo, hi)) and med > 0:
        return (hi - lo) / (2 * med)
    return r["cv"] if isinstance(r["cv"], float) and math.isfinite(r["cv"]) else 0.0


def pick_rows(run_dir: Path, n_bw: int = 3, n_time: int = 1) -> list[int]:
    """Rows to degrade: a few bandwidth rows and a few time-only rows, quiet enough that a 30% loss is far
    outside their noise, and each the only row of its key."""
    df = pd.read_csv(run_dir / "results.csv", keep_default_na=False, na_values=[""])
    unique = ~df.duplicated(KEY, keep=False)
    quiet = df.apply(row_noise, axis=1) < 0.05
    has_bw = df["bw_gbps_median"].notna() & (df["bw_gbps_median"] > 0)
    time_only = df["bw_gbps_median"].isna() & df["time_us_median"].notna() & (df["time_us_median"] > 0)
    bw_idx = df.index[unique & quiet & has_bw]
    t_idx = df.index[unique & quiet & time_only]
    # spread the picks over the file (different methods/sizes)
    chosen = [bw_idx[int(k * (len(bw_idx) - 1) / max(1, n_bw - 1))] for k in range(min(n_bw, len(bw_idx)))]
    chosen += [t_idx[int(k * (len(t_idx) - 1) / max(1, n_time - 1))] for k in range(min(n_time, len(t_idx)))]
    assert chosen, f"{run_dir}: no row quiet enough to degrade"
    return sorted(set(int(i) for i in chosen))


def keys_of(run_dir: Path, idx: list[int]) -> set[tuple]:
    df = pd.read_csv(run_dir / "results.csv", keep_default_na=False, na_values=[""])
    return {tuple(df.loc[i, KEY]) for i in idx}


def check_degraded_copy(base: Path, tmp: Path, capsys) -> None:
    new = copy_run(base, tmp / "new")
    picks = pick_rows(base)
    edit_rows(new, {i: 0.7 for i in picks})
    rc, out, err = run_compare(capsys, base, new, "--format", "csv")
    assert rc == 1, err
    t = as_table(out)
    reg = t[t["verdict"] == "regression"]
    assert {tuple(r) for r in reg[KEY].itertuples(index=False)} == keys_of(base, picks)
    assert (t["verdict"] != "improvement").all()
    assert reg["change"].to_numpy() == pytest.approx(-0.3, abs=0.002)
    unchanged = t[t["verdict"] == "unchanged"]
    assert (unchanged["ratio"] == 1.0).all()
    assert "regression" in err  # the summary line goes to stderr with --format csv
    # the same comparison the other way round is all improvements
    rc, out, _ = run_compare(capsys, new, base, "--format", "csv")
    t = as_table(out)
    assert rc == 0 and (t["verdict"] == "improvement").sum() == len(picks)


# ------------------------------------------------------------------------------------------ synthetic

@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    return synth.make_run(tmp_path_factory.mktemp("base"), run_id="base", suites=["copy", "latency", "handles"])


def test_identical_runs(base_run, tmp_path, capsys):
    new = copy_run(base_run, tmp_path / "new")
    rc, out, err = run_compare(capsys, base_run, new)
    assert rc == 0, err
    assert "verdict: no regression" in out and "0 regression(s)" in out and "GPUs matched by UUID" in out


def test_degraded_rows_flagged_exactly(base_run, tmp_path, capsys):
    check_degraded_copy(base_run, tmp_path, capsys)


def test_within_noise_is_unchanged(base_run, tmp_path, capsys):
    new = copy_run(base_run, tmp_path / "new")
    df = pd.read_csv(base_run / "results.csv", keep_default_na=False, na_values=[""])
    noisy = df.index[(df["direction"] == "push") & (df["bytes"] == 1 << 20)][0]
    # widen the row's spread to +-10% on both sides, then lose 8%: inside the noise (20%) -> unchanged
    wide_base = copy_run(base_run, tmp_path / "wide-base")
    for run_dir in (wide_base, new):
        path = run_dir / "results.csv"
        rows = list(csv.reader(open(path, newline="")))
        r = rows[noisy + 1]
        med = float(r[COLUMNS.index("time_us_median")])
        r[COLUMNS.index("time_us_min")] = f"{med * 0.9:.6g}"
        r[COLUMNS.index("time_us_max")] = f"{med * 1.1:.6g}"
        with open(path, "w", newline="") as fh:
            csv.writer(fh).writerows(rows)
    edit_rows(new, {int(noisy): 0.92})
    rc, out, _ = run_compare(capsys, wide_base, new, "--format", "csv")
    t = as_table(out)
    assert rc == 0
    row = t[(t["change"] < -0.07)]
    assert len(row) == 1 and row.iloc[0]["verdict"] == "unchanged"
    assert row.iloc[0]["noise"] == pytest.approx(0.2, abs=1e-3)
    # a 25% loss is outside the noise
    edit_rows(new, {int(noisy): 0.8})
    rc, out, _ = run_compare(capsys, wide_base, new, "--format", "csv")
    assert rc == 1


def test_threshold(base_run, tmp_path, capsys):
    new = copy_run(base_run, tmp_path / "new")
    i = pick_rows(base_run, n_bw=1, n_time=0)[0]
    edit_rows(new, {i: 0.93})  # 7% slower
    assert run_compare(capsys, base_run, new)[0] == 1
    assert run_compare(capsys, base_run, new, "--threshold", "10%")[0] == 0
    assert run_compare(capsys, base_run, new, "--threshold", "0.1")[0] == 0
    assert run_compare(capsys, base_run, new, "--threshold", "0.05")[0] == 1


@pytest.mark.parametrize("bad", ["5", "-0.1", "fast", "150%"])
def test_bad_threshold(bad):
    parser = argparse.ArgumentParser()
    compare.add_arguments(parser)
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["a", "b", "--threshold", bad])
    assert e.value.code == 2


def test_threshold_arg_values():
    assert compare.threshold_arg("5%") == pytest.approx(0.05)
    assert compare.threshold_arg("0.05") == pytest.approx(0.05)
    assert compare.threshold_arg("0") == 0


def test_unverified_in_new_is_a_regression(base_run, tmp_path, capsys):
    new = copy_run(base_run, tmp_path / "new")
    path = new / "results.csv"
    rows = list(csv.reader(open(path, newline="")))
    rows[5][COLUMNS.index("verified")] = "false"
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    rc, out, _ = run_compare(capsys, base_run, new, "--format", "csv")
    t = as_table(out)
    assert rc == 1
    assert list(t[t["verdict"] == "regression"]["note"]) == ["unverified in NEW"]


def test_uuid_matching_survives_renumbering(base_run, tmp_path, capsys):
    """NEW enumerates the GPUs in reverse (as after a CUDA_VISIBLE_DEVICES change): matched by UUID, every
    row is unchanged; without UUIDs the same files would be matched by index and differ."""
    new = copy_run(base_run, tmp_path / "new")
    meta = json.loads((new / "meta.json").read_text())
    n = len(meta["gpus"]["hostA"])
    for g in meta["gpus"]["hostA"]:
        g["index"] = n - 1 - g["index"]
    (new / "meta.json").write_text(json.dumps(meta))
    path = new / "results.csv"
    rows = list(csv.reader(open(path, newline="")))
    for r in rows[1:]:
        for c in ("src_gpu", "dst_gpu"):
            r[COLUMNS.index(c)] = str(n - 1 - int(r[COLUMNS.index(c)]))
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    rc, out, err = run_compare(capsys, base_run, new, "--format", "csv")
    t = as_table(out)
    assert rc == 0 and (t["ratio"] == 1.0).all() and len(t) == len(rows) - 1
    assert "matched by UUID" in err
    (new / "meta.json").unlink()
    rc, out, err = run_compare(capsys, base_run, new, "--format", "csv")
    assert "matched by index" in err and (as_table(out)["ratio"] != 1.0).any()


def test_results_csv_paths_and_formats(base_run, tmp_path, capsys):
    new = copy_run(base_run, tmp_path / "new")
    edit_rows(new, {i: 0.7 for i in pick_rows(base_run)})
    rc, text, _ = run_compare(capsys, base_run / "results.csv", new / "results.csv")
    assert rc == 1
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["method", "direction", "host"]
    assert lines[2].split()[-1] == "regression"  # worst first
    assert lines[-1].startswith("verdict: REGRESSION")
    rc, md, _ = run_compare(capsys, base_run, new, "--format", "md")
    assert rc == 1 and md.startswith("**verdict: REGRESSION") and "| method | direction |" in md
    rc, out, _ = run_compare(capsys, base_run, new, "--format", "csv")
    t = as_table(out)
    assert list(t["verdict"][:4]) == ["regression"] * 4
    order = list(zip(t["verdict"].map({"regression": 0, "unchanged": 1, "improvement": 2}), t["change"]))
    assert order == sorted(order)  # worst first


# ------------------------------------------------------------------------------------------ bad input

def _one_line_error(rc, out, err, *words):
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("ipcbench compare: error: ")
    for w in words:
        assert w in err, err


def test_missing_input(base_run, tmp_path, capsys):
    _one_line_error(*run_compare(capsys, base_run, tmp_path / "nope"), "nope", "no such file")
    (tmp_path / "empty").mkdir()
    _one_line_error(*run_compare(capsys, tmp_path / "empty", base_run), "no results.csv")


def test_malformed_input(base_run, tmp_path, capsys):
    new = copy_run(base_run, tmp_path / "new")
    text = (new / "results.csv").read_text()
    (new / "results.csv").write_text(text[:-25])
    n = text.count("\n")
    _one_line_error(*run_compare(capsys, base_run, new), f"{new / 'results.csv'}:{n}:", "truncated")
    (new / "results.csv").write_text(text)
    (new / "meta.json").write_text("{\n")
    _one_line_error(*run_compare(capsys, base_run, new), f"{new / 'meta.json'}:2:")


def test_no_common_rows(tmp_path, capsys):
    a = synth.make_run(tmp_path, run_id="a", suites=["copy"])
    b = synth.make_run(tmp_path, run_id="b", suites=["latency"])
    _one_line_error(*run_compare(capsys, a, b), "no common rows")


# ------------------------------------------------------------------------------------------ real runs

@pytest.mark.parametrize("run_dir", real_runs() or [None], ids=lambda p: p.name if p else "none")
def test_real_run_compare(run_dir, tmp_path, capsys):
    if run_dir is None:
        pytest.fail(f"no real run under {RESULTS}/*/ (results.csv + meta.json): commit one measured on the GPU "
                    "machine, or point IPCBENCH_RESULTS_DIR at a results directory")
    rc, out, err = run_compare(capsys, run_dir, run_dir)
    assert rc == 0, err
    check_degraded_copy(run_dir, tmp_path, capsys)
