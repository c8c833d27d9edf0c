"""The report's health verdict is `ipcbench check`'s judgement of the run (one record, one verdict): on every
recorded run the two say the same; a multi-run headline counts healthy, unhealthy and not-judged runs and never
calls a run healthy that was not judged; an impossible, infinite, negative or NaN value never drives a headline
number (it is flagged, naming file:line); "quick run" comes from the run's recorded options. No GPU needed."""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import REPO, per_directory, sampled
from ipcbench import cli
from ipcbench.record.run import load_run
from ipcbench.report import command as report
from ipcbench.judging import validity
from ipcbench.report import headline
from ipcbench.status import Status

DATA = REPO / "tests" / "data"
H200X2 = DATA / "h200x2" / "20261123-090753-vm"  # 2 x H200 through NVSwitch; ce push 0->1 256M on line 18
EVERY_RUN = sorted({p.parent for root in (REPO / "results", DATA) for p in root.rglob("results.csv")})
WORDS = {Status.PASS: "✓ **Healthy**", Status.FAIL: "✗ **Unhealthy**", Status.UNJUDGED: "! **Cannot judge**"}


def run_report(tmp_path: Path, *paths) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    report.add_arguments(parser)
    out = tmp_path / "rep"
    rc = report.run(parser.parse_args([*map(str, paths), "--no-figures", "--out", str(out), "--quiet"]))
    return rc, (out / "report.md").read_text(), ""


def check_code(run_dir: Path, capsys) -> int:
    """What `ipcbench check --from RUN` says of the run (in-process), as its exit code."""
    code = cli.main(["check", "--from", str(run_dir), "--any-host", "--json"])
    capsys.readouterr()
    return code


def glance(md: str) -> str:
    """The "At a glance" part of a report."""
    return md.split("## At a glance", 1)[1].split("\n## ", 1)[0]


def edited_copy(src: Path, dst: Path, line: int, **values) -> Path:
    """A copy of a run with the row on `line` of results.csv given new values."""
    shutil.copytree(src, dst)
    with open(dst / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    rows[line - 2].update({k: str(v) for k, v in values.items()})
    with open(dst / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return dst


# ------------------------------------------------------------------------------------------ one verdict

# by default two runs of each directory of runs (results/, each recorded set), the other recorded runs slow
@sampled("run_dir", EVERY_RUN, keep=0, always=per_directory(EVERY_RUN, keep=2), ids=lambda p: str(p.relative_to(REPO)))
def test_the_reports_verdict_is_checks(run_dir, tmp_path, capsys):
    """results/h100-nomps: the report said "No health verdict" where check said HEALTHY."""
    want = {0: Status.PASS, 1: Status.FAIL, 2: Status.UNJUDGED}[check_code(run_dir, capsys)]
    run = load_run(run_dir / "results.csv")
    assert Status(headline.health(run).status) is want
    rc, md, _ = run_report(tmp_path, run_dir)
    g = glance(md)
    if headline.not_a_check_input(run):  # a selftest's run: check refuses it by design, and the report says so
        assert want is Status.UNJUDGED and "- **No check input**" in g and not [w for w in WORDS.values() if w in g]
        return
    assert WORDS[want] in g, g[:800]
    assert not [w for s, w in WORDS.items() if s is not want and w in g]
    assert "No health verdict" not in g and "**Check**" not in g


def test_a_failing_run_names_what_failed(tmp_path):
    rc, md, _ = run_report(tmp_path, DATA / "compare" / "loaded")
    line = next(ln for ln in glance(md).splitlines() if "**Unhealthy**" in ln)
    assert "sm_read pull 128M" in line and "defaults.toml" in line


def test_a_run_that_cannot_be_judged_says_why(tmp_path):
    rc, md, _ = run_report(tmp_path, REPO / "tests" / "data" / "onegpu" / "h100-samegpu-large")
    line = next(ln for ln in glance(md).splitlines() if "**Cannot judge**" in ln)
    assert "no row" in line


def test_the_weakest_pair_is_a_fact_not_a_second_verdict(tmp_path):
    """Two H100s with two ranks per GPU: the report said "✗ Check: 2 weak-pair rows … up to 27% below" beside
    "✓ Weakest pair 1→0 … 0.1% below" while check passed every row. Only check's verdict carries a mark."""
    rc, md, _ = run_report(tmp_path, DATA / "h100x2" / "all-1")
    g = glance(md)
    assert "weak-pair row" not in g
    weakest = next(ln for ln in g.splitlines() if "**Weakest pair**" in ln)
    assert weakest.startswith("- **Weakest pair**")  # an info line: no ✓ or ✗
    assert sum(g.count(w) for w in WORDS.values()) == 1


def test_a_weak_row_of_a_method_check_does_not_judge_is_no_second_verdict(tmp_path, capsys):
    """pool_ce push 0→1 256M of a 2 x H100 run 27% slow (a neighbour on the link while that one row ran): the
    report said "✗ Check: 1 weak-pair row … up to 27% below" beside "✓ Weakest pair … 0.1% below" while check,
    which does not judge pool_ce, passed. The report says check's verdict; the weak row is listed under Flags."""
    run = edited_copy(DATA / "h100x2" / "all-1", tmp_path / "run", 299, bw_gbps_median=396.22 * 0.73)
    assert check_code(run, capsys) == 0
    rc, md, _ = run_report(tmp_path, run)
    g = glance(md)
    assert "✓ **Healthy**" in g and "✗" not in g and "weak-pair" not in g
    assert "Weak links (pairs more than 10% below their method's typical pair: the median, or the stronger of " \
           "two): 1" in md


def test_many_runs_are_counted_by_their_verdicts(tmp_path, capsys):
    """`ipcbench report results/` opened with "✓ All 5 runs healthy" while each run had no health verdict."""
    runs = sorted(p.parent for p in (REPO / "results").glob("*/results.csv"))
    codes = [check_code(r, capsys) for r in runs]
    rc, md, _ = run_report(tmp_path, REPO / "results")
    g = glance(md)
    assert "runs healthy" not in g and "All 5" not in g
    selftests = [r.name for r in runs if headline.not_a_check_input(load_run(r / "results.csv"))]
    judged = [c for r, c in zip(runs, codes) if r.name not in selftests]
    n = {c: judged.count(c) for c in (0, 1, 2)}
    assert (f"**{len(judged)} runs judged by ipcbench check**: {n[0]} healthy, {n[1]} unhealthy, {n[2]} cannot be "
            f"judged") in g
    assert f"**{len(selftests)} runs of ipcbench selftest, no check input by design** ({', '.join(selftests)})" in g
    assert "is not a check input" not in g  # the reason is said once, not once a run
    table = re.findall(r"^\| (\S+) \|.*\| (healthy|unhealthy|cannot judge|no check input) \|", g, flags=re.M)
    assert dict(table) == {r.name: "no check input" if r.name in selftests else
                           ("healthy", "unhealthy", "cannot judge")[c] for r, c in zip(runs, codes)}


def test_a_uniformly_slow_run_is_a_fact_beside_the_counts(tmp_path):
    import synth

    for i, h in enumerate(["h1", "h2", "h3", "h4"]):
        synth.make_run(tmp_path / "results", run_id=f"r{i}-{h}", hosts=(h,), suites=["copy"], same_gpu=False,
                       n_gpus=2, sizes=[4096, 1 << 20], seed=i, host_scale={"h3": 0.8})
    rc, md, _ = run_report(tmp_path, tmp_path / "results")
    g = glance(md)
    assert "runs healthy" not in g and "4 cannot be judged" in g  # synth's H200 NVLink pairs: no expectation
    assert re.search(r"\*\*Slower than the other runs of their GPU model\*\*: r2-h3 \(best path (\d+\.\d)% below "
                     r"the median of 4", g)


# ------------------------------------------------------------------------------------------ invalid values

@pytest.mark.parametrize("value", ["600", "inf", "-5"])  # a "nan" in the CSV: the reader's (record/table.py)
def test_an_invalid_value_never_drives_the_headline(value, tmp_path, capsys):
    """ce push 0->1 256M of a 2 x H200 run set to 600 GB/s (link peak 450): the report said "Weakest pair 1→0 …
    a slow or degraded link", "497.5 GB/s = 110.6% of the link peak", "What IPC buys: 9.8×"; inf gave "inf×";
    a negative rate was shown without a flag."""
    run = edited_copy(H200X2, tmp_path / "run", 18, bw_gbps_median=value)
    code = check_code(run, capsys)
    rc, md, _ = run_report(tmp_path, run)
    g = glance(md)
    assert WORDS[{0: Status.PASS, 1: Status.FAIL, 2: Status.UNJUDGED}[code]] in g  # whatever check says of it
    flag = next(ln for ln in g.splitlines() if "invalid value" in ln)
    assert "results.csv:18" in flag
    assert "inf×" not in md and "nan×" not in md and "110.6%" not in g and "9.8×" not in g
    assert "slow or degraded" not in g
    best = re.search(r"\*\*Best path per pair\*\* at 256M: \*\*([\d.]+) GB/s\*\*.*?\*\*([\d.]+)%\*\* of the link peak",
                     g)
    assert best and float(best.group(1)) < 450 and float(best.group(2)) <= 100
    weakest = re.search(r"\*\*Weakest pair\*\* (\d→\d): [\d.]+ GB/s = [\d.]+% of peak, ([\d.]+)% (below|above)", g)
    assert weakest and float(weakest.group(2)) < 10  # the healthy pair is not blamed
    buys = re.search(r"\*\*What IPC buys\*\*: \*\*([\d.]+)×\*\*", g)
    assert buys and float(buys.group(1)) < 8.5


def test_invalid_values_are_named_with_their_line(tmp_path):
    """Values edited into a copy of a run's results.csv: the reader names each at its line (record/validate.py)
    and the report takes those words and quotes none of the values."""
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(H200X2, run_dir)
    lines = (run_dir / "results.csv").read_text().splitlines()
    header = lines[0].split(",")
    bw, t = header.index("bw_gbps_median"), header.index("time_us_median")

    def edit(line_no: int, col: int, value: str):
        cells = lines[line_no - 1].split(",")
        cells[col] = value
        lines[line_no - 1] = ",".join(cells)

    edit(18, bw, "600")
    edit(5, t, "-1")
    (run_dir / "results.csv").write_text("\n".join(lines) + "\n")
    run = load_run(run_dir / "results.csv")
    got = validity.invalid(run)
    assert sorted(got) == [3, 16]
    assert got[16].startswith("results.csv:18: bw_gbps_median 600 GB/s") and "ceiling" in got[16]
    assert got[3].startswith("results.csv:5: time_us_median -1") and "negative" in got[3]
    clean = validity.valid_frame(run)
    assert clean.loc[16, "bw_gbps_median"] != clean.loc[16, "bw_gbps_median"]  # NaN
    assert clean.loc[16, "invalid"] == got[16] and clean.loc[0, "invalid"] == ""


def test_a_frame_built_without_the_column_is_validated_the_same_way():
    run = load_run(H200X2 / "results.csv")
    frame = run.frame.drop(columns=["invalid"])
    frame.loc[16, "bw_gbps_median"] = 600.0
    run.frame = frame
    got = validity.invalid(run)
    assert list(got) == [16] and got[16].startswith("results.csv:18: bw_gbps_median 600 GB/s")


def test_the_records_invalid_column_is_used_where_the_run_has_it():
    """The record engineer's reader names invalid values itself (run.frame["invalid"], values already NaN):
    the report takes its words and adds none of its own."""
    run = load_run(H200X2 / "results.csv")
    frame = run.frame.copy()
    frame["invalid"] = ""
    frame.loc[16, "invalid"] = "results.csv:18: bw_gbps_median 600 GB/s above the link's ceiling 478.1 GB/s"
    frame.loc[16, "bw_gbps_median"] = float("nan")
    run.frame = frame
    assert validity.invalid(run) == {16: frame.loc[16, "invalid"]}


# ------------------------------------------------------------------------------------------ recorded options

def test_quick_comes_from_the_recorded_options(tmp_path):
    run = load_run(H200X2 / "results.csv")
    assert run.meta.quick is False
    meta = json.loads((H200X2 / "meta.json").read_text())
    assert type(run.meta)(found=True, raw=meta, options={"quick": True}).quick is True
    assert type(run.meta)().quick is None
    quick = DATA / "h200x2" / "20261123-090823-vm"
    rc, md, _ = run_report(tmp_path, quick)
    assert "**quick (--quick) run** (a looser stopping rule, for a health check, not for numbers to quote): " \
        in glance(md)
