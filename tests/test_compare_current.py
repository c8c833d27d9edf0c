"""compare on runs of the current measuring code (tests/data/h100x2-current, tests/data/h100x1: back-to-back runs of
source 2a9b3a71e193df54 on two H100s and on one): unchanged code passes in every order and with two BASE runs; a
neighbour loading the link, a weaker SM kernel shape and a 3% slower large copy fail, naming the right rows. The
between-runs floors (catalogue/noise.py) were fitted on these runs among others: this pins that they hold them,
not that they hold runs yet to come."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest

from ipcbench.report import compare

DATA = Path(__file__).resolve().parent / "data"
SETS = {"all": [DATA / "h100x2-current" / f"all-{i}" for i in range(1, 6)],
        "quick": [DATA / "h100x2-current" / f"quick-{i}" for i in range(1, 6)],
        "one-gpu": [DATA / "h100x1" / f"one-{i}" for i in range(1, 6)]}


def judge(*paths, subset: bool = False) -> compare.Comparison:
    runs = [compare.load(p) for p in paths]
    return compare.compare(runs[:-1], runs[-1], subset=subset)


@pytest.mark.parametrize("name, a, b", [(n, a, b) for n in SETS for a, b in itertools.permutations(range(5), 2)])
def test_every_ordered_pair_of_unchanged_code_passes(name, a, b):
    c = judge(SETS[name][a], SETS[name][b])
    assert c.exit_code == 0, c.table[c.table["verdict"] == "regression"].head().to_string()


@pytest.mark.parametrize("name, new", [(n, i) for n in SETS for i in range(5)])
def test_two_base_runs_of_unchanged_code_pass(name, new):
    bases = [p for i, p in enumerate(SETS[name]) if i != new][:2]
    c = judge(*bases, SETS[name][new])
    assert c.exit_code == 0, c.table[c.table["verdict"] == "regression"].head().to_string()


def changed(c: compare.Comparison):
    t = c.table
    return t[t["verdict"] == "regression"]


def test_a_neighbour_loading_the_link_fails_naming_copy_and_kernel_rows():
    c = judge(SETS["all"][0], DATA / "h100x2-current" / "nb-copy", subset=True)
    bad = changed(c)
    assert c.exit_code == 1 and len(bad) > 40
    assert {"ce", "sm_read", "sm_write"} <= set(bad["method"])
    assert ((bad["method"] == "ce") & (bad["bytes"] == 4096)).any()  # small messages too


def test_a_weaker_sm_kernel_shape_fails_sm_rows_and_no_copy_engine_row():
    c = judge(SETS["all"][0], DATA / "h100x2-current" / "weak-sm", subset=True)
    bad = changed(c)
    assert c.exit_code == 1 and len(bad) > 0
    assert set(bad["method"]) <= {"sm_read", "sm_write", "sm_bulk_read", "sm_bulk_write"}


def test_a_3_percent_slower_large_copy_fails_naming_exactly_those_rows(tmp_path):
    """NEW: a copy of all-2 with every copy-engine row of 64 MiB and more 3% slower (rate / 1.03, time x 1.03)."""
    import csv

    new = tmp_path / "new"
    shutil.copytree(SETS["all"][1], new)
    rows = list(csv.DictReader(open(new / "results.csv", newline="")))
    slowed = set()
    for i, r in enumerate(rows):
        if r["engine"] == "ce" and int(r["bytes"]) >= 64 << 20 and r["kind"] == "bandwidth":
            r["bw_gbps_median"] = f"{float(r['bw_gbps_median']) / 1.03:.6g}"
            r["time_us_median"] = f"{float(r['time_us_median']) * 1.03:.6g}"
            slowed.add((r["suite"], r["method"], r["direction"], int(r["src_gpu"]), int(r["dst_gpu"]), int(r["bytes"])))
    with open(new / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (new / "meta.json").write_text((SETS["all"][1] / "meta.json").read_text().replace('"run_id": "', '"run_id": "x'))
    c = judge(SETS["all"][0], new)
    bad = changed(c)
    got = {(r.suite, r.method, r.direction, r.src_gpu, r.dst_gpu, r.bytes) for r in bad.itertuples()}
    assert c.exit_code == 1 and got == slowed and len(slowed) >= 20


RESULTS = Path(__file__).resolve().parents[1] / "results"
CUT = DATA / "h100x2-cut"
CUT_SETS = {"machine of results/": [RESULTS / f"h100x2-all-{i}" for i in (1, 2, 3)],
            "another machine": [CUT / "call3-all-1", CUT / "call3-all-2"]}
BEFORE = {"machine of results/": CUT / "before-4465724", "another machine": CUT / "call3-before-4465724"}


@pytest.mark.parametrize("machine, a, b", [(m, a, b) for m, runs in CUT_SETS.items()
                                           for a, b in itertools.permutations(range(len(runs)), 2)])
def test_runs_of_the_cut_code_pass_each_other_in_every_order(machine, a, b):
    """Back-to-back runs of the code that cut the host's work (prepared launches, waits, floor-share stopping,
    short samples under 64 MiB): unchanged code passes. NCCL's 1 KiB one-way latency moved 9-17% between them,
    which the first fit of the floors (3%) did not hold."""
    c = judge(CUT_SETS[machine][a], CUT_SETS[machine][b])
    assert c.exit_code == 0, c.table[c.table["verdict"] == "regression"].head().to_string()


@pytest.mark.parametrize("machine, new", [(m, i) for m, runs in CUT_SETS.items() for i in range(len(runs))])
def test_the_cut_changed_no_number(machine, new):
    """`ipcbench compare BEFORE AFTER` on one machine: the code before the cuts against each run after them."""
    c = judge(BEFORE[machine], CUT_SETS[machine][new])
    assert c.exit_code == 0, c.table[c.table["verdict"] == "regression"].head().to_string()
    assert len(c.table) == 917
