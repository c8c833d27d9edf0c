"""selftest speaks the one verdict vocabulary (ipcbench/status.Status): each row against its anchor is pass,
fail or cannot judge, the whole is Status.of them, and its words and exit codes stay what the README says
(0 every row within its anchor's tolerance, 1 a row is not or failed verification, 2 cannot judge)."""

from __future__ import annotations

import csv

from ipcbench.selftest import verdict
from ipcbench.selftest.plan import AnchorKey, Tolerance
from ipcbench.status import Status
from test_selftest import anchors_of, row


def test_the_row_check_is_not_named_as_checks_class():
    """Two classes named `Check` (judging/judge.Check and selftest/verdict.Check) judged different things."""
    assert not hasattr(verdict, "Check")
    (c,) = verdict.judge([row()], anchors_of(), Tolerance())
    assert type(c) is verdict.RowVsAnchor


def test_each_row_is_a_status():
    (good,) = verdict.judge([row(gbps=101.0)], anchors_of(), Tolerance())
    (slow,) = verdict.judge([row(gbps=90.0)], anchors_of(), Tolerance())
    (unverified,) = verdict.judge([row(verified=False)], anchors_of(), Tolerance())
    (bad_anchor,) = verdict.judge([row()], anchors_of(mismatches=3), Tolerance())
    (no_anchor,) = verdict.judge([row(nbytes=4096)], anchors_of(), Tolerance())
    (elsewhere,) = verdict.judge([row(host="other")], anchors_of(), Tolerance())
    assert good.status is Status.PASS and good.ok
    assert slow.status is unverified.status is bad_anchor.status is Status.FAIL
    assert no_anchor.status is elsewhere.status is Status.UNJUDGED and not no_anchor.ok
    assert no_anchor.why == "no anchor was measured"


def test_the_whole_is_the_status_of_its_rows():
    rows = {s: verdict.judge([row(**kw)], anchors_of(), Tolerance())
            for s, kw in ((Status.PASS, {}), (Status.FAIL, {"gbps": 90.0}), (Status.UNJUDGED, {"nbytes": 4096}))}
    assert verdict.overall(rows[Status.PASS]) is Status.PASS
    assert verdict.overall(rows[Status.PASS] + rows[Status.UNJUDGED]) is Status.UNJUDGED
    assert verdict.overall(rows[Status.UNJUDGED] + rows[Status.FAIL]) is Status.FAIL
    assert verdict.overall([]) is Status.UNJUDGED  # nothing judged is never a pass
    assert [verdict.overall(rows[s]).exit_code for s in Status] == [0, 1, 2]


def test_the_csv_and_meta_say_the_status(tmp_path):
    checks = verdict.judge([row(), row(gbps=90.0, nbytes=1 << 30), row(nbytes=4096)],
                           {**anchors_of(), **anchors_of(nbytes=1 << 30)}, Tolerance())
    verdict.write_csv(tmp_path / "s.csv", checks)
    with open(tmp_path / "s.csv", newline="") as fh:
        got = list(csv.DictReader(fh))
    assert [(g["status"], g["ok"]) for g in got] == [("pass", "True"), ("fail", "False"), ("unknown", "False")]
    s = verdict.summary(checks, Tolerance())
    assert (s["status"], s["rows"], s["mismatches"], s["unjudged"]) == ("fail", 3, 1, 1)


def test_a_cross_gpu_row_meets_its_anchor():
    key = AnchorKey("sm", "pull", 0, 1, 1)
    (c,) = verdict.judge([row("sm_read", "pull", src_gpu=0, dst_gpu=1)], anchors_of(key=key), Tolerance())
    assert c.status is Status.PASS
