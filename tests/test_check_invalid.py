"""check and values that cannot be true (issue 27; docs/architecture.md, interface "invalid values"): a row
above its link's ceiling, negative, NaN or infinite -- or one the reader marked in the run's `invalid` column --
is a finding of status UNJUDGED naming the file:line (exit 2 unless something failed), and is never held
against, nor used to judge, another pair. Copies of the committed 2 x H200 run, edited in a tmp dir."""

from __future__ import annotations

import csv
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, ipcbench_cli, launcher_free_env
from ipcbench.check import plan
from ipcbench.judging import expect, judge
from ipcbench.record.run import load_run
from ipcbench.status import Status

H200X2 = REPO / "tests" / "data" / "h200x2" / "20261123-090753-vm"
ROW = dict(method="ce", direction="push", src_gpu="0", dst_gpu="1", bytes=str(256 << 20))  # ce push 0->1 256M


def check(*args: str) -> subprocess.CompletedProcess:
    return ipcbench_cli("check", *args, cwd=REPO, env=launcher_free_env())


def edited(tmp_path: Path, value: str, row: dict = ROW, note: str = "") -> tuple[Path, int]:
    """A copy of the run with the row's bandwidth set to `value` (and the first row's note set to `note`);
    (run dir, the physical line the row starts on in results.csv)."""
    run = tmp_path / "run"
    shutil.copytree(H200X2, run)
    with open(H200X2 / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    (i,) = [i for i, r in enumerate(rows) if all(r[k] == v for k, v in row.items())]
    rows[i]["bw_gbps_median"] = value
    if note:
        rows[0]["note"] = note
    with open(run / "results.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return run, i + 2 + note.count("\n")


@pytest.mark.parametrize("value", ["600", "-5", "inf"])
def test_an_impossible_value_is_not_judged_and_never_blamed_on_the_other_pair(tmp_path, value):
    """600 GB/s (link ceiling 478 GB/s) on ce push GPU 0 -> GPU 1 at 256M made check fail GPU 1 -> GPU 0 "34%
    below the other pair"; a negative one gave "100% below": the healthy pair blamed. Now: exit 2, the row named
    with its file:line, no other pair failed."""
    run, line = edited(tmp_path, value)
    p = check("--from", str(run), "--verbose")
    assert p.returncode == 2, p.stdout[-3000:]
    assert "FAIL" not in p.stdout.replace("verdict:", ""), [ln for ln in p.stdout.splitlines() if "FAIL" in ln]
    bad = [ln for ln in p.stdout.splitlines() if f"results.csv:{line}" in ln and not ln.startswith("REASON")]
    assert bad and all("GPU 0 -> GPU 1 ce push 256M" in ln and ln.lstrip().startswith("??") for ln in bad), bad
    assert "GPU 1 -> GPU 0 ce push 256M: within 20% of the other pair" not in p.stdout  # not judged by it either
    assert p.stdout.rstrip().splitlines()[-1].startswith("REASON: cannot judge: GPU 0 -> GPU 1 ce push 256M")


def test_an_empty_rate_is_not_judged_and_never_blamed_on_the_other_pair(tmp_path):
    """A bandwidth row without its rate (an empty field): the reader names it at its line (record/validate.py),
    check leaves it UNJUDGED and out of the peers, where a NaN once read as a pass or a pair far below."""
    run, line = edited(tmp_path, "")
    v = judge.judge(load_run(run / "results.csv"), expect.defaults(), list(plan.METHODS_JUDGED))
    (mark,) = [c for c in v.checks if c.status is Status.UNJUDGED]
    assert mark.pair == "GPU 0 -> GPU 1" and f"results.csv:{line}: bw_gbps_median is empty" in mark.reason
    assert v.exit_code == 2 and not [c for c in v.checks if c.status is Status.FAIL]


def test_a_row_the_reader_marked_invalid_is_unjudged_and_left_out_of_the_peers(tmp_path):
    """The record's `invalid` column (ipcbench.record.run.load_run, when it names a row): that row is a
    finding UNJUDGED with the reader's message, and not a peer of any other pair, even where its value looks
    ordinary (the reader kept it out: e.g. NaN'd)."""


    run = load_run(H200X2 / "results.csv")
    f = run.frame
    hit = (f["method"] == "ce") & (f["direction"] == "push") & (f["src_gpu"] == 0) & (f["bytes"] == 256 << 20)
    f["invalid"] = ""
    f.loc[hit, "invalid"] = "results.csv:9: bw_gbps_median 600 GB/s above the link's ceiling 478.1 GB/s"
    f.loc[hit, "bw_gbps_median"] = 10.0  # far below its peer: it must not make GPU 1 -> GPU 0 the typical pair
    v = judge.judge(run, expect.defaults(), list(plan.METHODS_JUDGED))
    assert v.status is Status.UNJUDGED and v.exit_code == 2
    (mark,) = [c for c in v.checks if "results.csv:9" in c.reason]
    assert mark.status is Status.UNJUDGED and mark.pair == "GPU 0 -> GPU 1" and mark.bytes == 256 << 20
    assert not [c for c in v.checks if c.status is Status.FAIL]
    assert not [c for c in v.checks if c.source == "peers" and c.bytes == 256 << 20 and c.method == "ce"
                and c.direction == "push"]


def test_a_frame_without_the_invalid_column_is_judged_as_before():


    run = load_run(H200X2 / "results.csv")
    assert "invalid" not in run.frame.columns or not run.frame["invalid"].astype(bool).any()
    assert judge.judge(run, expect.defaults(), list(plan.METHODS_JUDGED)).status is Status.PASS


def test_a_bad_value_of_a_method_not_judged_still_stops_the_verdict(tmp_path):
    """A negative rate anywhere in the run is a reading the instrument cannot stand behind: exit 2."""
    run, line = edited(tmp_path, "-1", dict(method="pool_ce", direction="push", src_gpu="0", dst_gpu="1",
                                              bytes=str(256 << 20)))
    p = check("--from", str(run))
    assert p.returncode == 2 and f"results.csv:{line}" in p.stdout, p.stdout[-2000:]


def test_the_line_named_is_the_rows_line_when_a_note_before_it_spans_lines(tmp_path):
    run, line = edited(tmp_path, "-5", note="a note\nover\nthree lines")
    p = check("--from", str(run))
    assert p.returncode == 2 and f"results.csv:{line}: bw_gbps_median -5 GB/s is negative" in p.stdout, p.stdout[-2000:]


def test_a_zero_rate_is_cannot_judge_as_compare_calls_it_invalid(tmp_path):
    """A 0 GB/s row read as a failure of its pair in check (exit 1, the node drained) while compare called it
    invalid: the one validator (record/validate.py) names zero too, so check cannot judge it (exit 2)."""
    run, line = edited(tmp_path, "0")
    p = check("--from", str(run))
    assert p.returncode == 2 and f"results.csv:{line}: bw_gbps_median 0 GB/s is zero" in p.stdout, p.stdout[-2000:]
