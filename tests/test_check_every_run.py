"""check judges every run ipcbench makes, or says exactly why not: every run under results/ and tests/data is judged
by `check --from` (HEALTHY or UNHEALTHY), except those listed below with the words that say why. A `--quick` run
that measured one rank pair per GPU pair (ranks sharing GPUs: meta.json's pair_mode says so) is judged on the rank
pairs it measured; a selftest run is not a check input, and says which command is (one line, exit 2); a missing
row names the GPU pair, the rank pair and the sizes expected; a meta.json the strict record refuses is one line
naming the file and the field (exit 2), never a traceback."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

import synth
from conftest import REPO
from ipcbench.cli import main
from ipcbench.judging import expect, judge
from ipcbench.record.run import load_run
from ipcbench.status import Status

RUNS = sorted(p.parent.relative_to(REPO).as_posix() for top in ("results", "tests/data")
              for p in (REPO / top).rglob("results.csv"))
NOT_AN_INPUT = "is not a check input: `ipcbench check --from RUN` judges a run of `ipcbench check` or `ipcbench all`"
# The runs check cannot judge, and the words that say why (every other run is HEALTHY or UNHEALTHY).
WHY_NOT = {
    "results/h200x1-selftest-1": NOT_AN_INPUT,
    "results/h200x2-selftest-1": NOT_AN_INPUT,
    "results/h200x4-selftest-1": NOT_AN_INPUT,
    "tests/data/results-1126/h100x1-selftest-1": NOT_AN_INPUT,
    "tests/data/results-1126/h200x2-selftest-1": NOT_AN_INPUT,
    "tests/data/results-1126/h200x2-selftest-2": NOT_AN_INPUT,
    "tests/data/h200x1-0126/selftest-1": NOT_AN_INPUT,
    # NVML could not name the far end of the links (an older driver): no link kind, so no expectation
    "tests/data/h100x2/all-2": "REASON: cannot judge: GPU 0 -> GPU 1: link unknown",
    "tests/data/h100x2/all-3": "REASON: cannot judge: GPU 0 -> GPU 1: link unknown",
    # values above their physical ceiling, kept as a test of the validator: the instrument is in doubt
    "tests/data/impossible/20261122-194200-vm": "REASON: cannot judge: GPU 0 -> GPU 1 ce_alltoall push 4M: "
                                                "results.csv:272: bw_gbps_median",
    # measured at 64M-1G only: the 4K rows the expectations name were never measured
    "tests/data/onegpu/h100-samegpu-large": "REASON: cannot judge: GPU 0 ranks 0 -> 1 ce push 4K: no row (the run "
                                            "measured 64M-1G (7 sizes), none in 4K) (+7 more)",
    "tests/data/onegpu/h200-samegpu-large": "REASON: cannot judge: GPU 0 ranks 0 -> 1 ce push 4K: no row (the run "
                                            "measured 64M-1G (7 sizes), none in 4K) (+7 more)",
    # measured at 4K-1M only (a kernel variant against its BASE): the 64M:1G rows the expectations name, never measured
    **{f"tests/data/h200x1-1129/variant/{r}": "REASON: cannot judge: GPU 0 ranks 0 -> 1 ce push 64M:1G: no row (the "
                                              "run measured 4K, 64K, 1M, none in 64M:1G) (+8 more)"
       for r in ("base-1", "base-2", "same-1", "weak-1")},
}
# 4 ranks on 2 H200s, --quick: one rank pair per GPU pair
NP4 = REPO / "tests" / "data" / "results-1126" / "h200x2-np4-quick"


def check(*args: str) -> SimpleNamespace:
    """`ipcbench check ARGS` in this process (the command's own entry: the CLI's, exit status and all)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["check", *args])
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def copy_run(src: Path, dst: Path, edit=None) -> Path:
    """A copy of a recorded run, each row passed through edit(row) (None drops it; its rows count says so)."""
    dst.mkdir(parents=True)
    shutil.copy(src / "meta.json", dst / "meta.json")
    with open(src / "results.csv", newline="") as fi:
        rows = list(csv.DictReader(fi))
    kept = [r for r in (edit(r) if edit else r for r in rows) if r is not None]
    with open(dst / "results.csv", "w", newline="") as fo:
        w = csv.DictWriter(fo, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(kept)
    return synth.counted(dst)


def edit_meta(run: Path, change) -> Path:
    meta = json.loads((run / "meta.json").read_text())
    change(meta)
    (run / "meta.json").write_text(json.dumps(meta))
    return run


# ---- every recorded run --------------------------------------------------------------------------------------

def test_the_recorded_runs_are_found_and_the_exceptions_are_runs():
    assert len(RUNS) >= 80 and any(r.startswith("results/") for r in RUNS)
    assert set(WHY_NOT) <= set(RUNS)


@pytest.mark.parametrize("run", RUNS)
def test_every_recorded_run_is_judged_or_says_exactly_why_not(run):
    p = check("--from", str(REPO / run))
    assert "Traceback" not in p.stderr
    if run not in WHY_NOT:
        assert p.returncode in (0, 1), p.stdout[-2000:] + p.stderr
        assert p.stdout.rstrip().splitlines()[-1].startswith(("REASON: ok: ", "REASON: FAIL: "))
        return
    assert p.returncode == 2
    last = p.stdout.rstrip().splitlines()[-1]
    assert last.startswith("REASON: cannot judge: ") and WHY_NOT[run] in last + p.stderr, (last, p.stderr)


def test_under_results_only_runs_that_are_not_check_inputs_cannot_be_judged():
    assert {r for r in WHY_NOT if r.startswith("results/")} == {r for r in RUNS if "selftest" in r and
                                                                r.startswith("results/")}


# ---- the run's own concurrency guard ----------------------------------------------------------------------------

def test_a_run_whose_concurrency_guard_failed_cannot_be_judged_and_says_which_round(tmp_path):
    run = REPO / "results" / "h200x4-check-1"
    assert check("--from", str(run)).returncode == 0

    def fail_one(meta):
        g = meta["pair_mode"]["check"][-1]
        g["ok"], g["worst_diff"] = False, 0.083
        g["pairs"][0].update(diff=-0.083, tolerance=0.02)
        return g

    dst = copy_run(run, tmp_path / "run")
    failed = {}
    edit_meta(dst, lambda m: failed.update(fail_one(m)))
    p = check("--from", str(dst))
    assert p.returncode == 2, p.stdout[-2000:]
    last = p.stdout.rstrip().splitlines()[-1]
    pair = failed["pairs"][0]
    what = f"{failed['round']} round of {failed['step']} at "
    assert last.startswith(f"REASON: cannot judge: concurrency guard failed: {what}"), last
    assert p.stdout.count(f" on vm: 8.3% from the same pairs one at a time (worst: ranks {pair['src_rank']} -> "
                         f"{pair['dst_rank']}, allowed ±2.0%); measure the pairs one at a time "
                         "(`mpirun -np N ipcbench all --pairs sequential`)\n") == 1, p.stdout


# ---- a selftest run ------------------------------------------------------------------------------------------

def test_a_selftest_run_is_one_line_saying_it_is_not_a_check_input_and_which_command_is():
    run = REPO / "tests" / "data" / "results-1126" / "h200x2-selftest-1"
    p = check("--from", str(run), "--json")
    assert p.returncode == 2 and json.loads(p.stdout)["verdict"] == "cannot judge"  # one object, as a verdict's
    assert p.stderr == (f"ipcbench: error: --from {run}: a run of `ipcbench selftest` (the instrument against its own "
                        f"anchors, at the selftest's sizes and pairs) {NOT_AN_INPUT} (measure one with `mpirun -np N "
                        f"ipcbench check`)\n")


def test_a_selftest_runs_verdict_is_that_alone_so_the_report_says_it_too():
    """judge() (the report's headline reads it through shipped_verdict): one whole-run finding, not judged, saying
    why; no row and no evidence judged."""
    v = judge.shipped_verdict(load_run(REPO / "tests" / "data" / "results-1126" / "h100x1-selftest-1" / "results.csv"))
    (c,) = v.checks
    assert c.status is Status.UNJUDGED and v.exit_code == 2 and NOT_AN_INPUT in c.reason and c.source == "run"
    assert judge.not_a_check_input(load_run(NP4 / "results.csv")) is None


# ---- a --quick run with one rank pair per GPU pair ----------------------------------------------------------

def rank_pairs(run_dir: Path) -> list[tuple[int, int]]:
    """The rank pairs check asks rows of, of the rows it judges (the methods check measures)."""
    run = load_run(run_dir / "results.csv")
    rows = run.frame[run.frame["method"].isin(judge.METHODS_JUDGED)]
    return [(q.src_rank, q.dst_rank) for q in judge._pairs(run, rows)]


def test_a_quick_run_of_ranks_sharing_gpus_is_judged_on_the_rank_pairs_it_measured():
    """Before, check asked every rank pair (0 -> 3, 2 -> 1, ... cross the same link as 0 -> 1) and said 55 rows
    missing, naming only the GPU pair."""
    p = check("--from", str(NP4))
    assert p.returncode == 0 and p.stdout.rstrip().endswith("REASON: ok: 67 checks passed"), p.stdout[-2000:]
    assert "pairs: GPU 0 -> GPU 1 ok, GPU 0 ranks 0 -> 2 ok, GPU 1 -> GPU 0 ok, GPU 1 ranks 1 -> 3 ok" in p.stdout
    assert rank_pairs(NP4) == [(0, 1), (0, 2), (1, 0), (1, 3)]


def test_the_rank_pairs_judged_are_those_measured_not_the_first_of_each_gpu_pair(tmp_path):
    """The same run with its GPU 0 -> GPU 1 rows measured by ranks 2 -> 3 (also GPU 0 -> GPU 1): judged there. (Its
    all-to-all rows stay: ranks 2 -> 3 have their own, and a row twice is no run.)"""
    def moved(r):
        if (r["src_rank"], r["dst_rank"]) == ("0", "1") and r["method"] != "ce_alltoall":
            r["src_rank"], r["dst_rank"] = "2", "3"
        return r
    run = copy_run(NP4, tmp_path / "moved", moved)
    p = check("--from", str(run), "--verbose")
    assert p.returncode == 0, p.stdout[-2000:]
    assert rank_pairs(run) == [(0, 2), (1, 0), (1, 3), (2, 3)]


def test_a_gpu_pair_with_no_row_is_missed_at_the_rank_pair_the_measuring_side_picks(tmp_path):
    """No row of GPU 1 -> GPU 0: its first rank pair (1 -> 0, core/schedule.one_per_gpu_pair's) is named missing,
    with the size the run measured in each expectation's range."""
    run = copy_run(NP4, tmp_path / "run", lambda r: None if (r["src_gpu"], r["dst_gpu"]) == ("1", "0") else r)
    p = check("--from", str(run))
    assert p.returncode == 2
    out = p.stdout.replace("??   ", "?? ")
    for what in ("ce push 256M", "ce pull 256M", "sm_read pull 256M", "sm_write push 256M", "ce push 4K",
                 "sm_write push 4K"):
        assert f"?? [coverage] GPU 1 -> GPU 0 ranks 1 -> 0 {what}: no row\n" in out, what
    assert "ranks 3 -> 0" not in out and "ranks 1 -> 2" not in out and "ranks 3 -> 2" not in out


def test_one_missing_row_of_a_measured_rank_pair_is_named_with_its_size(tmp_path):
    run = copy_run(NP4, tmp_path / "run", lambda r: None if (r["src_rank"], r["dst_rank"], r["method"],
                                                             r["direction"], r["bytes"]) ==
                   ("0", "1", "ce", "push", str(256 << 20)) else r)
    p = check("--from", str(run))
    assert p.returncode == 2
    last = p.stdout.rstrip().splitlines()[-1]
    assert last == "REASON: cannot judge: GPU 0 -> GPU 1 ranks 0 -> 1 ce push 256M: no row"
    judged = judge.judge(load_run(run / "results.csv"), expect.defaults(), ["ce"], peers=False, evidence=[])
    (c,) = [c for c in judged.checks if c.status is Status.UNJUDGED]
    assert c.by.startswith("ipcbench/judging/defaults.toml:") and c.reason.endswith(
        "no row to judge against floor 340 GB/s (NVIDIA H200, nvswitch, ce push 64M:1G: measured 391.8-395.0 GB/s "
        "at 128M-256M (2 x H200, 2026-11-23; nvbandwidth 396.45); 13% below)")


def test_without_the_pair_modes_word_every_rank_pair_is_asked_for(tmp_path):
    """A run that does not say it measured one rank pair per GPU pair is asked for every one: 0 -> 3 crosses the
    same link as 0 -> 1 but has no row, and is named by its ranks."""
    run = edit_meta(copy_run(NP4, tmp_path / "run"), lambda m: m["pair_mode"].pop("rank_pairs"))
    p = check("--from", str(run))
    assert p.returncode == 2
    assert "GPU 0 -> GPU 1 ranks 0 -> 3 ce push 256M: no row" in p.stdout
    assert "GPU 0 -> GPU 1 ranks 0 -> 1 ce push 256M: no row" not in p.stdout


def test_the_pairs_come_from_the_records_ranks():
    """meta.json's ranks (record/meta.RankRecord) make the pairs, so a rank with no row at all is missed; without
    ranks recorded, the pairs the rows name."""
    run = load_run(REPO / "tests" / "data" / "compare" / "quiet1" / "results.csv")
    assert [(q.host, q.src_rank, q.dst_rank, q.src_gpu, q.dst_gpu) for q in judge._pairs(run, run.frame)] == \
        [(r.host, r.rank, o.rank, r.gpu, o.gpu) for r in run.meta.ranks for o in run.meta.ranks if r.rank != o.rank]
    rows = run.frame[run.frame["src_rank"] == 0]
    assert len(judge._pairs(run, rows)) == 2  # from the ranks, not the rows
    run.meta.ranks.clear()
    assert [(q.src_rank, q.dst_rank) for q in judge._pairs(run, rows)] == [(0, 1)]


# ---- a meta.json the strict record refuses ---------------------------------------------------------------------

@pytest.mark.parametrize("change, field", [
    (lambda m: m.__setitem__("ranks", 3), "field ranks: a number (3), expected a list"),
    (lambda m: m["ranks"][0].__setitem__("gpu", "x"), "field ranks[0].gpu: a string ('x'), expected an integer"),
    (lambda m: m.__setitem__("evidence", "x"), "field evidence: a string ('x'), expected an object"),
    (lambda m: m.__setitem__("schema_version", 99), "field schema_version: 99 is not a schema this reader knows"),
])
def test_a_damaged_meta_json_is_one_line_naming_the_file_and_the_field(tmp_path, change, field):
    run = edit_meta(copy_run(REPO / "tests" / "data" / "results-1126" / "h200x2-check-1", tmp_path / "run"), change)
    p = check("--from", str(run))
    assert p.returncode == 2 and p.stdout.startswith(f"REASON: cannot judge: --from {run}: ") \
        and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith(f"ipcbench: error: --from {run}: {run / 'meta.json'}: {field}"), p.stderr
    base = check("--from", str(REPO / "tests" / "data" / "results-1126" / "h200x2-check-2"), "--baseline", str(run))
    assert base.returncode == 2 and base.stderr.startswith(f"ipcbench: error: --baseline: {run / 'meta.json'}: ")


def test_the_sizes_a_missing_row_names():
    """One to three sizes by name, more as their range and count (a REASON line stays short)."""
    assert judge._sizes_words([4096]) == "4K"
    assert judge._sizes_words([4096, 65536, 1 << 20]) == "4K, 64K, 1M"
    assert judge._sizes_words([4096, 65536, 1 << 20, 64 << 20]) == "4K-64M (4 sizes)"
    assert judge._sizes_words([]) == ""


# ---- another job's process on a GPU the record cannot name ---------------------------------------------------

INTRUDER = {"pid": 4242, "used_bytes": 2 << 30, "name": "intruder"}


@pytest.mark.parametrize("where", ["meta.json's GPU", "the snapshot's GPU"])
def test_another_jobs_process_fails_check_on_a_gpu_recorded_without_its_uuid(tmp_path, where):
    """A schema-3 check run of 2 x H200 with another job's process on GPU 1 after the run: UNHEALTHY, naming it. With
    that GPU's UUID missing from meta.json's GPUs, or from NVML's snapshot, the run's GPUs cannot be told from the
    others: every GPU is judged, never fewer (judging/judge._evidence, judging/evidence_rules._host)."""
    run = REPO / "tests" / "data" / "results-1126" / "h200x2-check-1"

    def intrude(meta, drop_uuid: str | None):
        after = next(s for s in meta["evidence"]["snapshots"] if s["when"] == "after")
        gpu1 = next(g for g in after["gpus"] if g["index"] == 1)
        gpu1["processes"]["value"].append(INTRUDER)
        if drop_uuid == "meta.json's GPU":
            next(g for g in meta["gpus"]["vm"] if g["index"] == 1).pop("uuid")
        elif drop_uuid == "the snapshot's GPU":
            for s in meta["evidence"]["snapshots"]:
                next(g for g in s["gpus"] if g["index"] == 1).pop("uuid")

    for drop in (None, where):
        dst = edit_meta(copy_run(run, tmp_path / f"run-{bool(drop)}"), lambda m: intrude(m, drop))
        p = check("--from", str(dst))
        assert p.returncode == 1, (drop, p.stdout[-1500:])
        assert "pid 4242 (intruder)" in p.stdout, (drop, p.stdout[-1500:])
