"""`ipcbench compare` on runs recorded on a 2x H200 machine (tests/data/compare/README.md): three quiet
runs of the same build compare clean in all six orders and as two BASE runs against the third (at the default
--threshold, 2%, and at 0: the catalogue's H200 floors cover them), and a run with a neighbour process loading the
link is caught, naming the slowed rows. No GPU needed: the runs are files."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from conftest import ipcbench_cli

DATA = Path(__file__).resolve().parent / "data" / "compare"
QUIET = ["quiet1", "quiet2", "quiet3"]


def compare(*args: str, fmt: str = "csv", options: tuple[str, ...] = ()):
    return ipcbench_cli("compare", *(DATA / a for a in args), "--format", fmt, *options)


def verdicts(out: str) -> dict:
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(out)))
    return {(r["suite"], r["method"], r["direction"], r["src_gpu"], r["dst_gpu"], r["seq"], r["bytes"]): r["verdict"]
            for r in rows}


@pytest.mark.parametrize("threshold", [(), ("--threshold", "0")], ids=["default", "0"])
@pytest.mark.parametrize("base,new", list(itertools.permutations(QUIET, 2)))
def test_quiet_runs_compare_clean_in_every_order(base, new, threshold):
    p = compare(base, new, fmt="text", options=threshold)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "verdict: no regression" in p.stdout
    assert f"threshold {'0' if threshold else '2'}%" in p.stdout


def test_quiet_runs_mirror():
    ab, ba = verdicts(compare("quiet1", "quiet2").stdout), verdicts(compare("quiet2", "quiet1").stdout)
    assert ab.keys() == ba.keys() and len(ab) > 150
    mirror = {"regression": "improvement", "improvement": "regression"}
    for k, v in ab.items():
        assert ba[k] == mirror.get(v, v), k


def test_a_loaded_link_is_caught_and_named():
    p = compare("quiet1", "loaded", fmt="text")
    assert p.returncode == 1 and "REGRESSION" in p.stdout
    v = verdicts(compare("quiet1", "loaded").stdout)
    regressed = {k for k, x in v.items() if x == "regression"}
    # the neighbour copied GPU0 -> GPU1 with the copy engine: the large transfers over that link slowed down
    assert any(k[:3] == ("kernel", "sm_read", "pull") and k[-1] == str(512 << 20) for k in regressed)
    assert any(k[:3] == ("copy", "ce", "push") for k in regressed)
    assert not any(x == "improvement" for x in v.values())


def test_loaded_as_base_shows_improvements_only():
    p = compare("loaded", "quiet1", fmt="text")
    assert p.returncode == 0 and "verdict: no regression" in p.stdout
    v = verdicts(compare("loaded", "quiet1").stdout)
    assert "regression" not in v.values() and "improvement" in v.values()


@pytest.mark.parametrize("threshold", [(), ("--threshold", "0")], ids=["default", "0"])
@pytest.mark.parametrize("new", QUIET)
def test_two_quiet_base_runs_pass_the_third(new, threshold):
    p = compare(*[q for q in QUIET if q != new], new, fmt="text", options=threshold)
    assert p.returncode == 0, p.stdout[-2000:]
    assert "2 BASE run(s)" in p.stdout and "verdict: no regression" in p.stdout


def test_several_base_runs_catch_the_loaded_link():
    p = compare("quiet1", "quiet2", "quiet3", "loaded", fmt="text")
    assert p.returncode == 1 and "REGRESSION" in p.stdout
    v = verdicts(compare("quiet1", "quiet2", "quiet3", "loaded").stdout)
    regressed = {k for k, x in v.items() if x == "regression"}
    assert any(k[:3] == ("kernel", "sm_read", "pull") and k[-1] == str(512 << 20) for k in regressed)
    assert any(k[:3] == ("copy", "ce", "push") for k in regressed)
    assert not any(x == "improvement" for x in v.values())


def test_a_base_given_twice_counts_once():
    """`compare quiet1 quiet1 quiet2` used to take quiet1's own numbers as the spread between BASE runs (zero)
    and fail the gate with 5 regressions, while quiet1 given once passes: now it is the same comparison."""
    twice, once = compare("quiet1", "quiet1", "quiet2", fmt="text"), compare("quiet1", "quiet2", fmt="text")
    assert twice.returncode == once.returncode == 0, twice.stdout[-2000:]
    assert twice.stdout.startswith("warning: BASE quiet1 is the same run as BASE quiet1: counted once\n")
    assert twice.stdout.splitlines()[2:] == once.stdout.splitlines()  # the warning and a blank line first


def test_a_run_against_itself_is_refused():
    """`compare quiet1 quiet1` passed silently: a run always matches itself, so it is bad input (exit 2)."""
    p = compare("quiet1", "quiet1", fmt="text")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("ipcbench: error: NEW quiet1 is the same run as BASE quiet1")


def test_compare_writes_microseconds_as_the_report_does():
    """compare printed `us` where the report prints `µs`."""
    p = compare("quiet1", "loaded", fmt="text")
    assert " µs " in p.stdout and " us " not in p.stdout
    assert "µs" in compare("quiet1", "loaded").stdout
