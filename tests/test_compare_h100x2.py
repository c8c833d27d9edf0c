"""`ipcbench compare` on three back-to-back `all` runs of unchanged code on 2 x H100 (tests/data/h100x2/README.md:
the old code, its `noise` within-run). The old rule flagged 2 to 73 regressions in every ordered pair and in
both two-BASE compares (back-to-back-compares.txt); the rule of docs/report.md passes them all (at the default
--threshold 2%, and at 0: tests/test_compare_floors.py for the ordered pairs), and still fails a real change at the
default threshold: every copy-engine row of 64M and more slowed 3%, or a NEW value made negative or NaN. SM rows
slowed 3% at 4K stay within what such rows move between runs. No GPU needed: the runs are files."""

from __future__ import annotations

import itertools
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synth  # noqa: E402
from ipcbench.catalogue import noise  # noqa: E402
from ipcbench.record.run import load_run  # noqa: E402
from ipcbench.judging import compare  # noqa: E402
from ipcbench.judging.bounds import pct  # noqa: E402
from conftest import MIRROR, run_compare as cli

DATA = Path(__file__).resolve().parent / "data" / "h100x2"
RUNS = ["all-1", "all-2", "all-3"]
GPU = "NVIDIA H100 80GB HBM3"  # all-1's meta.json (all-2 and all-3 have none: compare takes all-1's model)
KEY = ["suite", "method", "direction", "src_gpu", "dst_gpu", "bytes", "seq"]


def judge(*paths, threshold=compare.DEFAULT_THRESHOLD) -> compare.Comparison:
    runs = [compare.load(p) for p in paths]
    return compare.compare(runs[:-1], runs[-1], threshold=threshold)


def copy_of_all_1(dst: Path) -> Path:
    """all-1 under a run id of its own: another run with the same rows."""
    shutil.copytree(DATA / "all-1", dst)
    meta = json.loads((dst / "meta.json").read_text())
    (dst / "meta.json").write_text(json.dumps({**meta, "run_id": dst.name, "start": dst.name}))
    return dst


def rows_of(pick) -> list[int]:
    """Indices of all-1's rows (results.csv order) that pick(frame) selects."""
    f = load_run(DATA / "all-1" / "results.csv").frame
    return [int(i) for i in np.flatnonzero(pick(f).to_numpy())]


def keys(t) -> set:
    return {tuple(r) for r in t[KEY[:-1]].astype(str).itertuples(index=False)}


@pytest.mark.parametrize("base,new", list(itertools.permutations(RUNS, 2)))
def test_every_ordered_pair_of_unchanged_code_passes(capsys, base, new):
    rc, out, _ = cli(capsys, DATA / base, DATA / new)
    assert rc == 0, out[-3000:]
    assert out.splitlines()[-1] == "verdict: no regression"
    assert ("noise rule: within-run noise + between-runs floors for runs older than the between-runs noise"
            in out)


@pytest.mark.parametrize("threshold", ["2%", "0"])
@pytest.mark.parametrize("new", RUNS)
def test_two_base_runs_of_unchanged_code_pass(capsys, new, threshold):
    bases = [DATA / r for r in RUNS if r != new]
    rc, out, _ = cli(capsys, *bases, DATA / new, "--threshold", threshold)
    assert rc == 0, out[-3000:]
    assert "2 BASE run(s)" in out and out.splitlines()[-1] == "verdict: no regression"


@pytest.mark.parametrize("a,b", list(itertools.combinations(RUNS, 2)))
def test_swapping_mirrors_every_verdict(a, b):
    x, y = judge(DATA / a, DATA / b).table.set_index(KEY).sort_index(), \
        judge(DATA / b, DATA / a).table.set_index(KEY).sort_index()
    assert x.index.equals(y.index)
    assert (x["verdict"].map(MIRROR) == y["verdict"]).all()
    assert np.array_equal(x["bound"].to_numpy(), y["bound"].to_numpy(), equal_nan=True)


def test_a_pass_says_what_it_covers(capsys):
    """Per kind of row, the smallest change the gate would have caught (default threshold): about twice the H100
    floor of the kind (catalogue/noise.py; the within-run noise of these runs is 0.1-0.4%), the SM engines at
    4K-256K moving most; a large copy is held to the threshold."""
    rc, out, _ = cli(capsys, DATA / "all-1", DATA / "all-2")
    line = next(x for x in out.splitlines() if x.startswith("smallest change caught"))
    assert "ce >= 64M: 2% (the threshold)" in line
    c = judge(DATA / "all-1", DATA / "all-2")
    caught = {x["kind"]: x["smallest_change"] for x in c.info["catches"]}
    for kind, engine, nbytes in (("sm <= 256K", "sm", 4096), ("ce <= 256K", "ce", 4096),
                                 ("sm_bulk <= 256K", "sm_bulk", 4096), ("sm 256K-64M", "sm", 1 << 20)):
        twice = 2 * noise.floor_for(GPU, engine, "gated", nbytes).fraction
        assert twice <= caught[kind] < twice * 1.03, kind
        assert f"{kind}: {pct(caught[kind])}" in line
    # all-2's meta.json names no GPU model: its rows take the largest floors known, the H200's event ping-pong's (40%)
    # among them, so that kind is caught only beyond 0.06 + 0.40 and more
    assert caught["event <= 256K"] >= 0.46
    assert max((k for k in caught if k != "event <= 256K"), key=caught.get) in ("sm <= 256K", "shm 256K-64M",
                                                                                "shm >= 64M")
    t = c.table[c.table["rule"] != ""]
    sm = t[(t["bytes"] <= 256 << 10) & t["method"].isin(["sm_read", "sm_write"])]
    assert np.median(np.fmax(sm["bound"], 0.02)) == pytest.approx(caught["sm <= 256K"], rel=1e-3)


@pytest.mark.parametrize("base", RUNS)
def test_every_large_copy_engine_row_slowed_3_percent_fails(tmp_path, capsys, base):
    """NEW: all-1 with every copy-engine row of 64M and more 3% slower, judged at the default --threshold (2%):
    exactly those rows regress, against each of the three runs."""
    new = copy_of_all_1(tmp_path / "slow-ce")
    picks = rows_of(lambda f: (f["engine"] == "ce") & (f["bytes"] >= 64 << 20))
    assert len(picks) >= 40
    synth.scale_rows(new, picks, 1 / 1.03)
    f = load_run(DATA / "all-1" / "results.csv").frame
    want = keys(f.iloc[picks])
    c = judge(DATA / base, new)
    reg = c.table[c.table["verdict"] == "regression"]
    assert keys(reg) == want and c.exit_code == 1
    assert (reg["bound"] < 0.02).all()  # the bar was the threshold: 64M+ copy rows move < 0.3% between runs
    rc, out, _ = cli(capsys, DATA / base, new)
    assert rc == 1 and out.splitlines()[-1].startswith(f"verdict: REGRESSION ({len(picks)} row(s) worse")


@pytest.mark.parametrize("base", RUNS)
def test_sm_rows_slowed_3_percent_at_4k_pass(tmp_path, base):
    """The same 3% on the SM engines at 4K is within what they move between runs (the H100 sm <= 256K floor, 10%,
    and sm_bulk's, 6.5%, on each side): not a regression, even at --threshold 0."""
    new = copy_of_all_1(tmp_path / "slow-sm")
    picks = rows_of(lambda f: f["engine"].isin(["sm", "sm_bulk"]) & (f["bytes"] == 4096))
    assert len(picks) >= 20
    synth.scale_rows(new, picks, 1 / 1.03)
    for threshold in (0.02, 0.0):
        c = judge(DATA / base, new, threshold=threshold)
        assert c.exit_code == 0 and c.counts()["regression"] == 0


@pytest.mark.parametrize("text", ["-387.2", ""])
def test_a_corrupt_new_value_fails(tmp_path, capsys, text):
    """A negative (or empty) rate in NEW was skipped ("no value to compare") and the gate passed."""
    new = copy_of_all_1(tmp_path / "corrupt")
    i = rows_of(lambda f: (f["method"] == "ce") & (f["direction"] == "push") & (f["bytes"] == 64 << 20)
                & (f["src_gpu"] == 0))[0]
    header, records = synth.read_csv(new)
    records[i][header.index("bw_gbps_median")] = text
    synth.write_csv(new, header, records)
    rc, out, err = cli(capsys, DATA / "all-2", new)
    assert rc == 1 and "Invalid values in NEW: 1 row(s)" in out, err
    assert out.splitlines()[-1] == "verdict: FAIL (1 NEW row(s) with an invalid value)"
    section = out.split("Invalid values in NEW")[1]
    assert "copy/ce" in section and "0→1" in section and "64M" in section


def test_a_nan_new_value_fails():
    """NaN in NEW's frame (the reader blanks a value it names invalid; a frame made otherwise may hold NaN)."""
    base, new = compare.load(DATA / "all-2"), compare.load(DATA / "all-1")
    f = new.frame
    sel = (f["method"] == "sm_read") & (f["direction"] == "pull") & (f["bytes"] == 4096) & (f["src_gpu"] == 1)
    assert sel.sum() == 1
    f.loc[sel, "bw_gbps_median"] = float("nan")
    c = compare.compare([base], new)
    bad = c.table[c.table["invalid"] != ""]
    assert c.exit_code == 1 and c.failures() == {"invalid": 1}
    assert list(bad["method"]) == ["sm_read"] and list(bad["invalid"]) == ["bw_gbps_median is empty or NaN"]
