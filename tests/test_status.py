"""The one verdict vocabulary (ipcbench/status.py): how parts make a whole, and the exit codes."""

from ipcbench.status import Status


def test_fail_wins_then_unjudged_then_pass():
    assert Status.of([Status.PASS, Status.FAIL, Status.UNJUDGED]) is Status.FAIL
    assert Status.of([Status.PASS, Status.UNJUDGED]) is Status.UNJUDGED
    assert Status.of([Status.PASS, Status.PASS]) is Status.PASS


def test_nothing_judged_is_not_a_pass():
    assert Status.of([]) is Status.UNJUDGED


def test_exit_codes_and_words():
    assert [s.exit_code for s in Status] == [0, 1, 2]
    assert Status.UNJUDGED.word == "cannot judge" and Status.UNJUDGED.value == "unknown"
    assert Status("fail") is Status.FAIL
