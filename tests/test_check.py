"""ipcbench check (judging/expect.py, judge.py, outputs.py, command.py) on recorded real runs (tests/data: 2 x H200
through NVSwitch, quiet and with a neighbour loading one link; results/: one H100, two ranks) and on fakes for
the measuring path. A fake GPU says nothing about a node's health: tests/test_gpu_check.py runs the real one."""

from __future__ import annotations

import csv
import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest

import synth
from conftest import REPO, ipcbench_cli, launcher_free_env
from ipcbench.check import plan
from ipcbench.judging import expect, judge
from ipcbench.errors import UsageError
from ipcbench.status import Status
from ipcbench.catalogue.costs import COSTS
from test_run_on_fakes import FAST, fake_job  # noqa: F401 - fake_job is a fixture

DATA = REPO / "tests" / "data"
QUIET, QUIET2, LOADED = DATA / "compare" / "quiet1", DATA / "compare" / "quiet2", DATA / "compare" / "loaded"
H200X2 = DATA / "h200x2" / "20261123-090753-vm"


def check(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return ipcbench_cli("check", *args, cwd=REPO, timeout=timeout, env=launcher_free_env())


def copy_run(src: Path, dst: Path, drop=None) -> Path:
    """A copy of a recorded run, without the rows for which drop(row) is true (its rows count says so)."""
    dst.mkdir(parents=True)
    shutil.copy(src / "meta.json", dst / "meta.json")
    with open(src / "results.csv", newline="") as fi, open(dst / "results.csv", "w", newline="") as fo:
        r = csv.DictReader(fi)
        w = csv.DictWriter(fo, fieldnames=r.fieldnames)
        w.writeheader()
        for row in r:
            if not (drop and drop(row)):
                w.writerow(row)
    return synth.counted(dst)


def with_gpu_name(run: Path, name: str) -> Path:
    """The run (a copy), its GPUs renamed in meta.json: a GPU model the expectations do or do not know."""
    meta = json.loads((run / "meta.json").read_text())
    for g in meta["gpus"]["vm"]:
        g["name"] = name
    (run / "meta.json").write_text(json.dumps(meta))
    return run


# ---- the thresholds file -------------------------------------------------------------------------------

GOOD = """
# a comment
[[expect]]
gpu = "NVIDIA H200"
link = "nvswitch"
method = "ce"
direction = "push"
sizes = "64M:1G"
floor_gbps = 340
why = "measured 395"

[[expect]]
gpu = "*H100*"
link = "pcie"
method = "sm_read"
direction = "pull"
sizes = "4K"
max_us = 5
why = "twice 2.5"
"""


def test_a_thresholds_file_reads_every_expectation():
    a, b = expect.parse(GOOD, "t.toml")
    assert (a.gpu, a.link, a.method, a.direction, a.lo, a.hi, a.floor_gbps) == (
        "NVIDIA H200", "nvswitch", "ce", "push", 64 << 20, 1 << 30, 340.0)
    assert a.where == "t.toml:3" and b.where == "t.toml:12" and b.max_us == 5.0 and b.lo == b.hi == 4096
    assert a.matches("NVIDIA H200", "nvswitch", "ce", "push", 256 << 20)
    assert not a.matches("NVIDIA H200", "nvswitch", "ce", "push", 4096)  # outside its sizes
    assert not a.matches("NVIDIA H200 NVL", "nvswitch", "ce", "push", 256 << 20)  # another model
    assert b.matches("NVIDIA H100 PCIe", "pcie", "sm_read", "pull", 4096)  # a wildcard


@pytest.mark.parametrize("change, line, words", [
    (('floor_gbps = 340', 'floor_gbps = 340\ncolour = "red"'), 10, "colour: unknown key"),
    (('floor_gbps = 340', 'floor_gbps = "340 GB/s"'), 9, "floor_gbps: must be a number (GB/s, no unit in the value"),
    (('max_us = 5', 'max_us = -1'), 18, "max_us: -1 is out of range"),
    (('floor_gbps = 340', 'floor_peak = 1.5'), 9, "floor_peak: 1.5 is out of range (0 < value <= 1)"),
    (('floor_gbps = 340', 'floor_gbps = 340\nmax_us = 2'), 10, "max_us: give exactly one of"),
    (('link = "nvswitch"', 'link = "infiniband"'), 5, "link: 'infiniband' is not one of"),
    (('sizes = "64M:1G"', 'sizes = "1G:64M"'), 8, "sizes: '1G:64M': the first size must not exceed the second"),
    (('sizes = "64M:1G"', 'sizes = "lots"'), 8, "sizes: not a size"),
    (('why = "measured 395"\n', ''), 3, "[[expect]]: why is missing"),
    (('gpu = "*H100*"', 'gpu = "NVIDIA H200"\nlink = "nvswitch"\nmethod = "ce"\ndirection = "push"\nsizes = '
                        '"64M:1G"\nfloor_gbps = 1\nwhy = "x"\n[[expect]]\ngpu = "*H100*"'), 12,
     "the same gpu, link, method, direction and sizes as t.toml:3"),
])
def test_a_bad_thresholds_file_names_the_file_the_line_and_the_key(change, line, words):
    with pytest.raises(UsageError) as e:
        expect.parse(GOOD.replace(*change, 1), "t.toml")
    assert str(e.value).startswith(f"t.toml:{line}: ") and words in str(e.value), str(e.value)


def test_toml_that_does_not_parse_is_refused():
    with pytest.raises(UsageError, match=r"^t.toml: not TOML: .*line 2"):
        expect.parse("[[expect]]\ngpu = \n", "t.toml")


def test_the_shipped_expectations_read_and_say_why():
    shipped = expect.defaults()
    assert {e.gpu for e in shipped} == {"NVIDIA H200", "NVIDIA H100 80GB HBM3"}
    assert all(e.why and e.where.startswith("ipcbench/judging/defaults.toml:") for e in shipped)
    # every method the check measures by default has a floor on every link kind it ships, for both GPUs
    for gpu in ("NVIDIA H200", "NVIDIA H100 80GB HBM3"):
        for link in ("nvswitch", "same_gpu"):
            for m, d in (("ce", "push"), ("ce", "pull"), ("ce", "bidir"), ("sm_read", "pull"), ("sm_write", "push")):
                assert expect.find(shipped, gpu, link, m, d, 256 << 20), (gpu, link, m, d)


def test_a_users_expectation_wins_over_the_shipped_one_of_the_same_row():
    mine = expect.parse(GOOD, "mine.toml")
    both = expect.combine(expect.defaults(), mine)
    (e,) = expect.find(both, "NVIDIA H200", "nvswitch", "ce", "push", 256 << 20)
    assert e.where == "mine.toml:3"


# ---- judging recorded runs ---------------------------------------------------------------------------

def test_a_quiet_node_is_healthy():
    p = check("--from", str(QUIET), "--any-host")
    assert p.returncode == 0, p.stdout + p.stderr
    # 42: 26 rows against the shipped thresholds (the 4K rows across GPUs of ce, sm_read and sm_write among them), 16
    # against their peers
    assert p.stdout.rstrip().splitlines()[-1] == "REASON: ok: 42 checks passed"
    assert "verdict: HEALTHY (exit 0)" in p.stdout and "thresholds shipped with ipcbench" in p.stdout


def test_the_committed_h200_run_is_healthy():
    p = check("--from", str(H200X2), "--any-host")
    assert p.returncode == 0, p.stdout + p.stderr


def test_a_loaded_pair_is_unhealthy_and_named():
    """The recorded run with a neighbour copying GPU 0 -> GPU 1: exit 1, the pair named, by how much, against
    which expectation, and one REASON line (the worst shortfall first: the 4 KiB copy at 4.6 us, 66% above the
    H200's 2.77 us ceiling across GPUs)."""
    p = check("--from", str(LOADED), "--any-host")
    assert p.returncode == 1, p.stdout + p.stderr
    last = p.stdout.rstrip().splitlines()[-1]
    assert last == "REASON: FAIL: GPU 0 -> GPU 1 ce push 4K 4.6 µs > 2.77 µs (+22 more)"
    assert "FAIL [thresholds] GPU 0 -> GPU 1 sm_read pull 128M 131 GB/s < 320 GB/s" in p.stdout
    assert "FAIL [thresholds] GPU 0 -> GPU 1 ce push 128M 196 GB/s < 340 GB/s" in p.stdout
    assert "floor 340 GB/s (NVIDIA H200, nvswitch, ce push 64M:1G: measured 391.8-395.0" in p.stdout
    assert "FAIL [peers] GPU 0 -> GPU 1 ce push 128M 49% below the other pair" in p.stdout
    assert p.stderr.startswith("ipcbench check: FAIL: GPU 0 -> GPU 1")


def test_a_run_with_rows_removed_cannot_be_judged(tmp_path):
    run = copy_run(QUIET, tmp_path / "run", drop=lambda r: r["method"] == "sm_write" and r["src_rank"] == "1")
    p = check("--from", str(run), "--any-host")
    assert p.returncode == 2, p.stdout
    # the GPU pair, the rank pair and the sizes expected (the run's own in the expectation's 64M:1G)
    assert "?? [coverage] GPU 1 -> GPU 0 ranks 1 -> 0 sm_write push 128M, 512M: no row" in p.stdout.replace("??   ",
                                                                                                          "?? ")
    assert "?? [coverage] GPU 1 -> GPU 0 ranks 1 -> 0 sm_write push 4K: no row" in p.stdout.replace("??   ", "?? ")
    assert p.stdout.rstrip().splitlines()[-1].startswith("REASON: cannot judge: GPU 1 -> GPU 0 ranks 1 -> 0 sm_write "
                                                         "push")


def test_a_run_whose_last_line_was_cut_cannot_be_judged(tmp_path):
    run = copy_run(QUIET, tmp_path / "run")
    data = (run / "results.csv").read_bytes()
    (run / "results.csv").write_bytes(data[:-40])
    p = check("--from", str(run), "--any-host")
    assert p.returncode == 2 and "the run did not complete (its last line was cut short)" in p.stdout + p.stderr


def test_a_gpu_nobody_measured_cannot_be_judged(tmp_path):
    run = with_gpu_name(copy_run(QUIET, tmp_path / "run"), "NVIDIA A100-SXM4-80GB")
    p = check("--from", str(run), "--any-host")
    assert p.returncode == 2 and "no expectation for NVIDIA A100-SXM4-80GB on nvswitch" in p.stdout


def test_an_unknown_link_cannot_be_judged(tmp_path):
    run = copy_run(QUIET, tmp_path / "run")
    meta = json.loads((run / "meta.json").read_text())
    meta["topology"] = {}
    (run / "meta.json").write_text(json.dumps(meta))
    p = check("--from", str(run), "--any-host")
    assert p.returncode == 2 and "the link between the GPUs is unknown" in check("--from", str(run), "--any-host",
                                                                                "--verbose").stdout


def test_a_row_that_failed_verification_fails(tmp_path):
    src = QUIET / "results.csv"
    run = copy_run(QUIET, tmp_path / "run")
    rows = list(csv.DictReader(open(src, newline="")))
    rows[0]["verified"] = "false"
    with open(run / "results.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert check("--from", str(run), "--any-host").returncode == 1


def test_floors_as_a_fraction_of_the_link_peak_and_latency_ceilings(tmp_path):
    """A user's file alone (--no-defaults): 90% of the 450 GB/s NVLink 4.0 x 18 peak (405) fails the H200's
    ~392 GB/s; 85% (383) passes; a 1 us latency ceiling fails the 2.3 us 4 KiB copy."""
    def run_with(body: str) -> subprocess.CompletedProcess:
        f = tmp_path / f"t{abs(hash(body))}.toml"
        f.write_text(body)
        return check("--from", str(QUIET), "--any-host", "--no-defaults", "--no-peers", "--thresholds", str(f),
                     "--methods", "ce")
    floor = ('[[expect]]\ngpu = "NVIDIA H200"\nlink = "nvswitch"\nmethod = "ce"\ndirection = "push"\n'
             'sizes = "128M"\nfloor_peak = {}\nwhy = "test"\n')
    hi, lo = run_with(floor.format(0.90)), run_with(floor.format(0.85))
    assert hi.returncode == 1 and "< 405 GB/s" in hi.stdout and "floor 90% of the 450 GB/s peak" in hi.stdout
    assert lo.returncode == 0, lo.stdout
    lat = run_with(floor.format(0.85).replace('sizes = "128M"', 'sizes = "4K"').replace("floor_peak = 0.85",
                                                                                        "max_us = 1"))
    assert lat.returncode == 1 and "ce push 4K 2.3" in lat.stdout and "µs > 1 µs" in lat.stdout


def test_peers_hold_each_pair_against_the_typical_pair_of_its_kind():
    """Synthetic: four pairs through a switch at 100, 101, 99 and 70 GB/s: the 70 (30% below the median) fails,
    the others pass; with a 40% drop allowed every pair passes."""
    import pandas as pd

    from ipcbench.record.meta import parse_meta
    from ipcbench.record.run import Run

    links = [{"src_gpu": s, "dst_gpu": d, "kind": "nvswitch", "nvlink_count": 18, "nvlink_version": "4.0"}
             for s in range(4) for d in range(4) if s != d]
    meta = parse_meta({"hosts": ["h"], "topology": {"h": {"links": links}}})
    frame = pd.DataFrame([dict(host="h", method="ce", direction="push", kind="bandwidth", timing="gated",
                               bytes=256 << 20, src_rank=s, dst_rank=d, src_gpu=s, dst_gpu=d, verified=True,
                               bw_gbps_median=bw, time_us_median=1.0, note="", same_gpu=False)
                          for (s, d), bw in zip([(0, 1), (1, 2), (2, 3), (3, 0)], [100.0, 101.0, 99.0, 70.0])])
    run = Run("r", Path("r"), Path("r/results.csv"), meta, frame)
    got = judge._peers(run, frame, 0.2)
    assert [c.status for c in got] == ["pass", "pass", "pass", "fail"]
    assert got[3].brief == "GPU 3 -> GPU 0 ce push 256M 30% below the typical nvswitch pair"
    assert all(c.status == "pass" for c in judge._peers(run, frame, 0.4))


def peer_run(pairs, link: str = "nvswitch", **row):
    """A run of one host whose GPU pairs (src, dst, GB/s) are all linked `link`, one ce push row each (`row` over
    the defaults: 256M, gated, bandwidth)."""
    import pandas as pd

    from ipcbench.record.meta import parse_meta
    from ipcbench.record.run import Run

    gpus = {g for s, d, _ in pairs for g in (s, d)}
    links = [{"src_gpu": s, "dst_gpu": d, "kind": link, "nvlink_count": 18, "nvlink_version": "4.0"}
             for s in gpus for d in gpus if s != d]
    meta = parse_meta({"hosts": ["h"], "topology": {"h": {"links": links}}})
    frame = pd.DataFrame([{**dict(host="h", method="ce", direction="push", kind="bandwidth", timing="gated",
                                  bytes=256 << 20, src_rank=s, dst_rank=d, src_gpu=s, dst_gpu=d, verified=True,
                                  bw_gbps_median=bw, time_us_median=1.0, note="", same_gpu=False), **row}
                          for s, d, bw in pairs])
    return Run("r", Path("r"), Path("r/results.csv"), meta, frame), frame


def test_two_peers_hold_each_other_and_the_bound_itself_passes():
    """Of two pairs, each is held against the other (not their mean): 100 and 79 GB/s, the 79 fails 20% below 100
    while the 100 passes above 80% of 79; a pair exactly at (1 - drop) x the typical pair passes."""
    run, frame = peer_run([(0, 1, 100.0), (1, 0, 79.0)])
    fast, slow = judge._peers(run, frame, 0.2)
    assert (fast.status, slow.status) == (Status.PASS, Status.FAIL)
    assert (fast.expected, slow.expected) == (pytest.approx(0.8 * 79.0), pytest.approx(80.0))
    assert fast.reason == "GPU 0 -> GPU 1 ce push 256M: within 20% of the other pair"
    assert slow.reason == ("GPU 1 -> GPU 0 ce push 256M 79 GB/s is 21% below the other pair (100 GB/s; peers fail "
                           "past 20%)")
    run, frame = peer_run([(0, 1, 100.0), (1, 2, 100.0), (2, 0, 75.0)])
    assert [c.status for c in judge._peers(run, frame, 0.25)] == [Status.PASS] * 3  # 75 = 0.75 x the median 100
    assert judge._peers(run, frame, 0.25)[2].reason.endswith("within 25% of the typical nvswitch pair")


@pytest.mark.parametrize("row, judged", [(dict(bytes=64 << 20), True), (dict(bytes=(64 << 20) - 4096), False),
                                         (dict(timing="handoff"), False), (dict(timing="host"), False),
                                         (dict(kind="latency"), False)])
def test_peers_hold_only_large_gated_bandwidth_rows(row, judged):
    """Peers are compared where a transfer is bandwidth-bound and its time the pair's own: 64 MiB and up
    (judge.PEER_MIN_BYTES), gated rows, bandwidth rows; a pair whose link is unknown is held against none."""
    run, frame = peer_run([(0, 1, 100.0), (1, 2, 50.0), (2, 0, 101.0)], **row)
    got = judge._peers(run, frame, 0.2)
    assert [c.status for c in got] == ([Status.PASS, Status.FAIL, Status.PASS] if judged else [])
    run, frame = peer_run([(0, 1, 100.0), (1, 2, 50.0), (2, 0, 101.0)], link="unknown")
    assert judge._peers(run, frame, 0.2) == []
    run, frame = peer_run([(0, 1, 100.0)])
    assert judge._peers(run, frame, 0.2) == []  # one pair of its kind: no peer


@pytest.mark.parametrize("bound, gbps, us, status, rel", [
    (dict(floor_gbps=100.0), 100.0, 1.0, Status.PASS, ">="), (dict(floor_gbps=100.0), 99.9, 1.0, Status.FAIL, "<"),
    (dict(floor_peak=0.5), 225.0, 1.0, Status.PASS, ">="), (dict(floor_peak=0.5), 224.9, 1.0, Status.FAIL, "<"),
    (dict(max_us=5.0), 1.0, 5.0, Status.PASS, "<="), (dict(max_us=5.0), 1.0, 5.01, Status.FAIL, ">")])
def test_a_row_at_its_floor_or_ceiling_passes_and_past_it_fails(bound, gbps, us, status, rel):
    """A floor (GB/s, or a share of the link's peak: 18 NVLink 4 links, 450 GB/s) holds a row at it; a latency
    ceiling too; only past it does the row fail."""
    run, frame = peer_run([(0, 1, gbps)], time_us_median=us)
    e = expect.Expectation("*", "nvswitch", "ce", "push", 1, 1 << 30, why="w", where="f:1", **bound)
    c = judge._against(run, next(frame.itertuples()), e)
    assert (c.status, c.expected) == (status, 5.0 if "max_us" in bound else pytest.approx(100.0 if "floor_gbps" in
                                                                                          bound else 225.0))
    assert f" {rel} " in c.brief and c.value == (us if "max_us" in bound else gbps)


def test_a_floor_of_the_links_peak_cannot_judge_a_pair_whose_peak_is_unknown():
    run, frame = peer_run([(0, 1, 100.0)], link="pcie")
    run.meta.links.clear()
    e = expect.Expectation("*", "nvswitch", "ce", "push", 1, 1 << 30, floor_peak=0.5, why="w", where="f:1")
    c = judge._against(run, next(frame.itertuples()), e)
    assert c.status is Status.UNJUDGED and c.brief.endswith("link peak unknown") and c.expected is None


def test_both_ways_is_judged_once_per_pair_from_its_lower_rank_and_a_missing_row_is_named():
    """Every ordered pair of ranks is judged against its expectations; a bidirectional row is measured once per
    unordered pair, from its lower rank, so the pair 1 -> 0 owes no bidir row; a row an expectation names that the
    run lacks cannot be judged, and says which."""
    import pandas as pd

    from ipcbench.record.meta import parse_meta
    from ipcbench.record.run import Run

    links = [{"src_gpu": s, "dst_gpu": d, "kind": "nvswitch", "nvlink_count": 18, "nvlink_version": "4.0"}
             for s, d in ((0, 1), (1, 0))]
    meta = parse_meta({"hosts": ["h"], "topology": {"h": {"links": links}},
                       "ranks": [{"rank": r, "host": "h", "gpu": r} for r in (0, 1)]})

    def row(s, d, direction):
        return dict(host="h", method="ce", direction=direction, kind="bandwidth", timing="gated", bytes=256 << 20,
                    src_rank=s, dst_rank=d, src_gpu=s, dst_gpu=d, verified=True, bw_gbps_median=300.0,
                    time_us_median=1.0, note="", same_gpu=False)

    frame = pd.DataFrame([row(0, 1, "push"), row(1, 0, "push"), row(0, 1, "bidir")])
    run = Run("r", Path("r"), Path("r/results.csv"), meta, frame)
    want = [expect.Expectation("*", "nvswitch", "ce", d, 1 << 20, 1 << 30, floor_gbps=100.0, why="w", where="f:1")
            for d in ("push", "bidir")]
    got = judge._coverage_and_floors(run, frame, want, ["ce"], set())
    assert [(c.pair, c.direction, c.status) for c in got] == [("GPU 0 -> GPU 1", "push", Status.PASS),
                                                              ("GPU 0 -> GPU 1", "bidir", Status.PASS),
                                                              ("GPU 1 -> GPU 0", "push", Status.PASS)]
    got = judge._coverage_and_floors(run, frame.iloc[1:], want, ["ce"], set())
    assert [(c.pair, c.direction, c.status) for c in got][:2] == [("GPU 0 -> GPU 1", "push", Status.UNJUDGED),
                                                                  ("GPU 0 -> GPU 1", "bidir", Status.PASS)]
    assert got[0].brief == "GPU 0 -> GPU 1 ranks 0 -> 1 ce push 1M:1G: no row"  # which ranks: ranks may share GPUs
    # an expectation judges the rows of its method, direction and sizes (both ends included), no other
    sizes = [(1 << 20) - 4096, 1 << 20, 1 << 30, (1 << 30) + 4096]
    frame = pd.DataFrame([{**row(0, 1, "push"), "bytes": b} for b in sizes] +
                         [{**row(0, 1, "pull"), "bytes": 1 << 20}, {**row(0, 1, "push"), "method": "sm_write"}])
    run = Run("r", Path("r"), Path("r/results.csv"), meta, frame)
    got = judge._coverage_and_floors(run, frame, want[:1], ["ce", "sm_write"], set())
    assert [(c.pair, c.method, c.direction, c.bytes) for c in got if c.status is Status.PASS] == [
        ("GPU 0 -> GPU 1", "ce", "push", 1 << 20), ("GPU 0 -> GPU 1", "ce", "push", 1 << 30)]


def test_the_pairs_are_meta_jsons_ranks_else_the_rows_and_each_pair_is_judged_on_its_own_rows():
    """Three ranks on a host: every ordered pair of meta.json's ranks is judged on its own rows only (not another
    pair's with the same source or destination, nor another host's with the same ranks); without ranks in
    meta.json the pairs are those the rows name."""
    import pandas as pd

    from ipcbench.record.meta import parse_meta
    from ipcbench.record.run import Run

    links = [{"src_gpu": s, "dst_gpu": d, "kind": "nvswitch", "nvlink_count": 18, "nvlink_version": "4.0"}
             for s in range(3) for d in range(3) if s != d]

    def row(host, s, d, bw):
        return dict(host=host, method="ce", direction="push", kind="bandwidth", timing="gated", bytes=256 << 20,
                    src_rank=s, dst_rank=d, src_gpu=s, dst_gpu=d, verified=True, bw_gbps_median=bw,
                    time_us_median=1.0, note="", same_gpu=False)

    frame = pd.DataFrame([row("h", 0, 1, 300.0), row("h", 2, 1, 50.0), row("h", 0, 2, 60.0), row("x", 0, 1, 70.0)])
    want = [expect.Expectation("*", "nvswitch", "ce", "push", 1 << 20, 1 << 30, floor_gbps=100.0, why="w",
                               where="f:1")]
    ranks = [{"rank": r, "host": "h", "gpu": r} for r in range(3)]
    for meta in (parse_meta({"hosts": ["h"], "topology": {"h": {"links": links}}, "ranks": ranks}),
                 parse_meta({"hosts": ["h"], "topology": {"h": {"links": links}}})):
        run = Run("r", Path("r"), Path("r/results.csv"), meta, frame[frame["host"] == "h"])
        got = judge._coverage_and_floors(run, frame, want, ["ce"], set())
        judged = {(c.pair, c.value): c.status for c in got if c.source == "thresholds"}
        assert judged == {("GPU 0 -> GPU 1", 300.0): Status.PASS, ("GPU 2 -> GPU 1", 50.0): Status.FAIL,
                          ("GPU 0 -> GPU 2", 60.0): Status.FAIL}
        missing = sorted((c.host, c.pair) for c in got if c.source == "coverage")
        assert missing == ([("h", "GPU 1 -> GPU 0"), ("h", "GPU 1 -> GPU 2"), ("h", "GPU 2 -> GPU 0")]
                           if meta.raw.get("ranks") else [("x", "GPU 0 -> GPU 1")])  # x: no link table


def test_a_pairs_link_is_its_own_on_its_own_host():
    """judge.link_of: the link table's entry of this host and this pair, either way round; same_gpu for two ranks of
    one GPU; unknown where the table has none (or names no kind)."""
    from ipcbench.record.meta import parse_meta
    from ipcbench.record.run import Run

    def link(s, d, kind):
        named = {"kind": kind} if kind else {}
        return {"src_gpu": s, "dst_gpu": d, "nvlink_count": 4, "nvlink_version": "4.0", **named}

    meta = parse_meta({"hosts": ["a", "b"], "topology": {"a": {"links": [link(0, 1, "pcie"), link(1, 2, "nvlink"),
                                                                           link(0, 2, "")]},
                                                          "b": {"links": [link(0, 1, "nvswitch")]}}})
    run = Run("r", Path("r"), Path("r/results.csv"), meta, None)
    assert [judge.link_of(run, h, s, d) for h, s, d in [("a", 0, 1), ("a", 1, 0), ("a", 2, 1), ("b", 0, 1),
                                                         ("b", 1, 2), ("a", 0, 2), ("a", 3, 3)]] == [
        "pcie", "pcie", "nvlink", "nvswitch", "unknown", "unknown", "same_gpu"]


def test_a_baseline_judges_with_the_compare_statistics():
    ok = check("--from", str(QUIET2), "--any-host", "--baseline", str(QUIET), str(DATA / "compare" / "quiet3"))
    assert ok.returncode == 0, ok.stdout
    assert "baseline " in ok.stdout and "(compare, threshold 10%)" in ok.stdout
    bad = check("--from", str(LOADED), "--any-host", "--no-defaults", "--no-peers", "--baseline", str(QUIET))
    assert bad.returncode == 1 and "below the baseline" in bad.stdout


def test_each_row_verdict_of_a_baseline_is_one_status():
    """A baseline's row verdicts (judging/row_verdict.RowVerdict) read as the node's Status in one place: a regression
    fails, an improvement or an unchanged row passes, a row the baseline has and the run lacks cannot be judged, a row
    compare did not judge or only the run has gives no baseline finding (its thresholds judge it)."""
    import pandas as pd

    from ipcbench.judging.compare import Comparison
    from ipcbench.judging.row_verdict import ORDER, RowVerdict
    from ipcbench.record.run import load_run

    want = {RowVerdict.REGRESSION: Status.FAIL, RowVerdict.IMPROVEMENT: Status.PASS, RowVerdict.UNCHANGED: Status.PASS,
            RowVerdict.NOT_JUDGED: None, RowVerdict.MISSING: Status.UNJUDGED, RowVerdict.NEW: None}
    assert {v: v.status for v in RowVerdict} == want and set(ORDER) == set(RowVerdict)
    run = load_run(QUIET2 / "results.csv")
    r = run.frame[(run.frame["method"] == "ce") & (run.frame["bytes"] == 128 << 20)].iloc[0]
    table = pd.DataFrame([dict(host=r["host"], src_gpu=r["src_gpu"], dst_gpu=r["dst_gpu"], method=m,
                               direction=r["direction"], bytes=r["bytes"], unit="GB/s", base=300.0, new=200.0,
                               change=-1 / 3, p=0.001, verdict=v) for v in RowVerdict for m in ("ce", "sm_read")])
    comparison = Comparison(table, table.iloc[0:0], info={"base_labels": ["known-good"]})
    v = judge.judge(run, [], ["ce"], comparison, peers=False, evidence=[])
    got = [c for c in v.checks if c.source == "baseline"]  # the rows of the methods judged only
    assert [c.status for c in got] == [s for s in want.values() if s is not None]
    assert got[0].brief.endswith("33% below the baseline") and got[-1].brief.endswith(": not measured")
    assert got[1].reason.endswith(": as the baseline (known-good)") and got[1].value == 200.0


def test_a_baseline_of_another_gpu_is_refused(tmp_path):
    other = with_gpu_name(copy_run(QUIET, tmp_path / "other"), "NVIDIA H100 80GB HBM3")
    p = check("--from", str(QUIET2), "--any-host", "--baseline", str(other))
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert "NVIDIA H100 80GB HBM3 on nvswitch, this run NVIDIA H200 on nvswitch" in p.stderr
    assert check("--from", str(QUIET2), "--any-host", "--baseline", str(other), "--other-baseline").returncode in (0, 1)


# ---- outputs ---------------------------------------------------------------------------------------------

def test_json_junit_and_prometheus_say_the_same_verdict(tmp_path):
    from junitparser import JUnitXml
    from prometheus_client.parser import text_string_to_metric_families

    junit, prom = tmp_path / "check.xml", tmp_path / "ipcbench.prom"
    p = check("--from", str(LOADED), "--any-host", "--json", "--junit", str(junit), "--prometheus", str(prom))
    assert p.returncode == 1
    d = json.loads(p.stdout)
    assert d["verdict"] == "unhealthy" and d["exit_code"] == 1 and d["reason"].startswith("FAIL: GPU 0 -> GPU 1")
    assert d["expectations"][0].startswith("thresholds shipped") and d["gpu_models"] == ["NVIDIA H200"]
    assert {"host": "vm", "gpu": 0, "status": "fail"} in d["gpus"]
    failed = [c for c in d["checks"] if c["status"] == "fail"]
    assert len(failed) == 23 and all(c["reason"] and c["pair"] for c in failed)
    assert {"pair": "GPU 0 -> GPU 1", "status": "fail", "host": "vm"} in d["pairs"]
    suite = next(iter(JUnitXml.fromfile(str(junit))))
    assert (suite.tests, suite.failures, suite.errors) == (len(d["checks"]), 23, 0)
    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    assert [s.value for s in fams["ipcbench_check_verdict"].samples] == [1.0]
    passes = [s for s in fams["ipcbench_check_pass"].samples]
    assert sum(s.value == 0 for s in passes) == 23 and {s.labels["host"] for s in passes} == {"vm"}
    assert any(s.labels["pair"] == "GPU 0 -> GPU 1" and s.labels["method"] == "ce" and s.value == pytest.approx(196.155)
               for s in fams["ipcbench_check_value"].samples)


def test_the_reason_line_is_one_short_line():
    v = judge.Verdict([judge.Finding(source="thresholds", host="h", pair="GPU 0 -> GPU 1", src_gpu=0, dst_gpu=1,
                                   link="nvswitch", method="ce", direction="push", bytes=1 << 28, value=1.0,
                                   unit="GB/s", expected=340.0, status=Status.FAIL, reason="x" * 500,
                                   brief="y" * 500)] * 3)
    r = v.reason()
    assert "\n" not in r and len(r) <= judge.REASON_CHARS and r.endswith("… (+2 more)")


# ---- the command's input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["--from", "nowhere"], "--from nowhere: "),
    (["--topology", "pcie"], "--topology plans a node that is not this machine: it goes with --dry-run"),
    (["--methods", "nope"], "--methods: nope: choose from"),
    (["--peer-drop", "150%"], "--peer-drop:"),
    (["--no-defaults", "--from", str(QUIET)], "nothing to judge against"),
])
def test_bad_input_is_one_line_and_exit_2(args, words):
    p = check(*args)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and words in p.stderr, p.stderr


def test_a_bad_thresholds_file_stops_the_command(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text(GOOD.replace('floor_gbps = 340', 'floor_gbps = "fast"'))
    p = check("--from", str(QUIET), "--any-host", "--thresholds", str(f))
    assert p.returncode == 2 and f"{f}:9: floor_gbps: must be a number" in p.stderr


# ---- the plan and its time ------------------------------------------------------------------------------

def test_the_plan_measures_every_pair_with_the_judged_engines():
    steps = plan.make_steps(plan.check_methods(None), [4096, 256 << 20])(4, None)
    assert sorted(s.label for s in steps) == ["ce bidir", "ce pull", "ce push", "sm_read bidir", "sm_read pull",
                                             "sm_write bidir", "sm_write push"]
    assert all(s.rounds_ok and s.sizes == [4096, 256 << 20] for s in steps)
    assert len(next(s for s in steps if s.label == "ce push").pairs) == 12


def test_the_check_fits_a_health_check_on_an_8_gpu_nvswitch_node():
    """The dry run's estimate (run/dryrun.py, fitted to real runs) of `mpirun -np 8 ipcbench check` on an
    NVSwitch node, start-up included: within 30 s (Slurm kills a HealthCheckProgram after 60)."""
    from types import SimpleNamespace

    from ipcbench.check.command import Options
    from ipcbench.core.schedule import decide_mode
    from ipcbench.run.dryrun import estimate_seconds

    ns = SimpleNamespace(from_run=None, thresholds=None, no_defaults=False, baseline=None, other_baseline=False,
                         threshold="10%", no_peers=False, peer_drop="20%", methods=None, sizes=plan.SIZES,
                         json=False, junit=None, prometheus=None, verbose=False, any_host=False, out=None,
                         timeout=120.0, dry_run=True, topology="nvswitch", ranks=None, quiet=True)
    opts = Options(ns, [])
    cfg = opts.config()
    mode = decide_mode(cfg.pairs, 1, ["nvswitch"] * 56, 8, cfg.serial_pairs, cfg.quick)
    est = estimate_seconds(plan.make_steps(opts.methods, list(cfg.sizes))(8, None), cfg.rule, mode, gpus=8)
    from ipcbench.check.command import check_tail
    from ipcbench.run.costmodel import check_seconds

    after, said = check_tail(list(range(8)), list(range(8)))  # what the dry run adds: check's own term
    assert after == check_seconds(COSTS, 8) and said.startswith("check's verdict and its own closing, ")
    assert mode.concurrent and est + after <= 30.0, est + after


def test_a_dry_run_of_check_counts_its_own_term_on_fakes(fake_job, monkeypatch, tmp_path, capsys):  # noqa: F811
    """`mpirun -np 2 ipcbench check --dry-run --json`: the estimate is the model's for its plan plus check's own term
    (catalogue/costs.py check_s), which the plan names (logic only: nothing is measured)."""
    from types import SimpleNamespace

    from ipcbench.check import command
    from ipcbench.core import topology

    monkeypatch.setattr(topology, "nvml_gpu_count", lambda: 2)
    ns = SimpleNamespace(from_run=None, thresholds=None, no_defaults=False, baseline=None, other_baseline=False,
                         threshold="10%", no_peers=False, peer_drop="20%", methods=None, sizes=plan.SIZES,
                         json=True, junit=None, prometheus=None, verbose=False, any_host=False, out=None,
                         timeout=30.0, dry_run=True, topology="nvswitch", ranks=None, quiet=True)
    opts = command.Options(ns, [])
    statuses, _ = fake_job(opts.config(), entry=lambda c: command.run(opts))
    assert statuses == [0, 0]
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    from ipcbench.run.costmodel import check_seconds

    assert got["after_suites_s"] == round(check_seconds(COSTS, 2), 1)  # two ranks: its term less all's closing
    said = f"check's verdict and its own closing, {check_seconds(COSTS, 2) + COSTS.close_for(2):.1f} s at 2 ranks"
    assert any(a.startswith(said) for a in got["assumptions"])
    import dataclasses

    from ipcbench.catalogue import costs

    monkeypatch.setattr(costs, "COSTS", dataclasses.replace(COSTS, check_s=100.0))  # the term is in the estimate
    fake_job(opts.config(), entry=lambda c: command.run(opts))
    more = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert more["after_suites_s"] == round(100.0 + 2 * COSTS.check_rank_s - COSTS.close_for(2), 1)
    assert more["estimated_s"] == pytest.approx(got["estimated_s"] + 100.0 - COSTS.check_s, abs=0.11)


# ---- measuring, then judging, on fakes --------------------------------------------------------------------

def _measure_on_fakes(fake_job, monkeypatch, tmp_path, floor: float):  # noqa: F811
    """`mpirun -np 2 ipcbench check` on two fake ranks sharing one fake GPU ("Fake GPU", 1 us per transfer),
    judged against a thresholds file for that GPU alone."""
    from types import SimpleNamespace

    from ipcbench.check import command
    from ipcbench.core import gpu as gpumod

    monkeypatch.setattr(gpumod, "device_count", lambda: 1)
    f = tmp_path / "fake.toml"
    f.write_text("".join(f'[[expect]]\ngpu = "Fake GPU"\nlink = "same_gpu"\nmethod = "{m}"\ndirection = "{d}"\n'
                         f'sizes = "4K:64K"\nfloor_gbps = {floor}\nwhy = "a fake"\n'
                         for m, d in (("ce", "push"), ("ce", "pull"), ("ce", "bidir"), ("sm_read", "pull"),
                                      ("sm_write", "push"))))
    ns = SimpleNamespace(from_run=None, thresholds=str(f), no_defaults=True, baseline=None, other_baseline=False,
                         threshold="10%", no_peers=False, peer_drop="20%", methods=None, sizes="4K,64K",
                         json=False, junit=str(tmp_path / "j.xml"), prometheus=None, verbose=False, any_host=False,
                         out=str(tmp_path / "run"), timeout=30.0, dry_run=False, topology=None, ranks=None, quiet=True)
    opts = command.Options(ns, [])
    cfg = dataclasses.replace(opts.config(), rule=FAST)
    monkeypatch.setattr(command.Options, "config", lambda self: cfg)
    return fake_job(cfg, entry=lambda c: command.run(opts), gpu_of=[0, 0])


def test_measured_then_judged_healthy_on_every_rank(fake_job, monkeypatch, tmp_path, capsys):  # noqa: F811
    statuses, _ = _measure_on_fakes(fake_job, monkeypatch, tmp_path, floor=1.0)
    out = capsys.readouterr().out
    assert statuses == [0, 0], out
    assert "verdict: HEALTHY (exit 0)" in out and (tmp_path / "run" / "results.csv").exists()
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["command"][:2] == ["ipcbench", "check"]
    assert (tmp_path / "j.xml").exists()
    # the plan as the cost model saw it, which the fit reads back: every direction of ce, sm_read and sm_write
    assert [p["label"] for p in meta["plan"]] == ["ce push", "ce pull", "ce bidir", "sm_read pull", "sm_read bidir",
                                                 "sm_write push", "sm_write bidir"]
    from conftest import tool

    costfit = tool("costfit")

    recorded = costfit.load_run(tmp_path / "run")
    assert recorded.kind == "check" and set(recorded.plans) == {"copy", "kernel"} and recorded.anchor_units == 0


def test_measured_then_judged_unhealthy_on_every_rank(fake_job, monkeypatch, tmp_path, capsys):  # noqa: F811
    statuses, _ = _measure_on_fakes(fake_job, monkeypatch, tmp_path, floor=1000.0)
    out = capsys.readouterr().out
    assert statuses == [1, 1] and "verdict: UNHEALTHY (exit 1)" in out
    assert "REASON: FAIL: GPU 0 ranks" in out



@pytest.mark.parametrize("statuses, code", [(["pass", "pass"], 0), (["pass", "unknown"], 2), (["unknown", "fail"], 1),
                                            (["fail", "pass"], 1), ([], 2)])
def test_a_failure_outranks_what_was_not_judged_and_nothing_judged_is_not_healthy(statuses, code):
    checks = [judge.Finding(source="thresholds", host="h", pair="p", src_gpu=0, dst_gpu=1, link="nvswitch",
                            method="ce", direction="push", bytes=1, value=1.0, unit="GB/s", expected=1.0,
                            status=Status(s), reason="r", brief="b") for s in statuses]
    v = judge.Verdict(checks)
    assert v.exit_code == code and v.status is Status.of(map(Status, statuses)) and v.word == judge.VERDICTS[v.status]


def test_each_node_gets_its_worst_status_and_a_whole_run_check_counts_for_every_node():
    def c(host, src, status):
        return judge.Finding(source="thresholds", host=host, pair="p", src_gpu=src,
                             dst_gpu=src + 1 if src >= 0 else -1, link="nvswitch", method="ce", direction="push",
                             bytes=1, value=1.0, unit="GB/s", expected=1.0, status=Status(status), reason="r",
                             brief="b")
    v = judge.Verdict([c("a", 0, "pass"), c("a", 1, "fail"), c("b", 0, "pass")])
    assert v.nodes() == {"a": "fail", "b": "pass"}
    assert v.as_dict()["nodes"] == [{"host": "a", "status": "fail"}, {"host": "b", "status": "pass"}]
    v.checks.append(c("", -1, "unknown"))  # e.g. the run is incomplete: no node of it can be called healthy
    assert v.nodes() == {"a": "fail", "b": "unknown"}


def test_checks_verdict_is_the_one_status_vocabulary_and_its_words_stay():
    """Each finding's status and the verdict are ipcbench.status.Status (exit codes from it); JSON, JUnit and
    Prometheus keep their documented words and values; check's class is not named as selftest's `Check`."""
    from ipcbench.record.run import load_run
    from ipcbench.selftest import verdict as selftest_verdict

    v = judge.judge(load_run(QUIET / "results.csv"), expect.defaults(), list(plan.METHODS_JUDGED))
    assert all(isinstance(c.status, Status) for c in v.checks) and v.status is Status.PASS and v.exit_code == 0
    d = json.loads(json.dumps(v.as_dict(), default=str))
    assert {c["status"] for c in d["checks"]} == {"pass"} and d["verdict"] == "healthy"
    assert not hasattr(selftest_verdict, "Check") and not hasattr(judge, "Check")  # two classes, two names


def _users_ce_push(tmp_path, floor: float) -> Path:
    f = tmp_path / f"ce-push-{floor:g}.toml"
    f.write_text('[[expect]]\ngpu = "NVIDIA H200"\nlink = "nvswitch"\nmethod = "ce"\ndirection = "push"\n'
                 f'sizes = "64M:1G"\nfloor_gbps = {floor}\nwhy = "this site\'s own"\n')
    return f


def test_a_users_looser_floor_replaces_the_shipped_one_and_the_row_passes(tmp_path):
    """The loaded run's GPU 0 -> GPU 1 ce push rows (196-198 GB/s) fail the shipped 340 GB/s floor; a user's
    100 GB/s for the same key replaces it (not applied on top of it): they pass, each judged once."""
    args = ("--from", str(LOADED), "--no-peers", "--methods", "ce", "--verbose")
    shipped = check(*args)
    assert "FAIL [thresholds] GPU 0 -> GPU 1 ce push 128M 196 GB/s < 340 GB/s" in shipped.stdout
    mine = check(*args, "--thresholds", str(_users_ce_push(tmp_path, 100)))
    def pushes(out: str) -> list[str]:
        return [ln for ln in out.splitlines() if "[thresholds] GPU 0 -> GPU 1 ce push" in ln and "GB/s" in ln]
    assert pushes(mine.stdout) and all(ln.lstrip().startswith("ok") and ">= 100 GB/s" in ln
                                       for ln in pushes(mine.stdout)), pushes(mine.stdout)
    assert len(pushes(mine.stdout)) == len(pushes(shipped.stdout))  # each row judged once, by the user's floor
    assert not any("ce push" in ln and "340 GB/s" in ln for ln in mine.stdout.splitlines())


def test_a_users_stricter_floor_replaces_the_shipped_one_and_a_quiet_row_fails(tmp_path):
    """The quiet run's ce push rows (392-395 GB/s) pass the shipped 340 floor; a user's 420 for the same key
    fails them."""
    p = check("--from", str(QUIET), "--no-peers", "--methods", "ce", "--thresholds",
              str(_users_ce_push(tmp_path, 420)))
    assert p.returncode == 1, p.stdout
    assert "FAIL [thresholds] GPU 0 -> GPU 1 ce push 128M" in p.stdout and "< 420 GB/s" in p.stdout
