"""check's shipped small-message expectations for H200 pairs through NVSwitch, measured as the H100's were
(tests/test_check_h100.py): six runs by this project on 4 x H200 and 2 x H200 (2026-11-28), the time per 4 KiB
transfer across GPUs over every pair and run; the copy engine's ceilings ~15% above the slowest, the SM kernels'
~29%. Before, they were "about twice" what one copy took, so a neighbour copying over NVLink (tests/data/compare/
loaded: the 4K copy at 4.6 us, twice the quiet 2.3) passed its 4K rows. The committed quiet H200 runs pass; the
same runs with their cross-GPU 4K rows 25% slower (copy engine) or at a rate 35% lower (SM kernels) fail, naming
them, and 15% slower passes."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import REPO
from ipcbench.cli import main
from ipcbench.judging import expect

RESULTS = REPO / "tests" / "data" / "results-1126"  # the H200 pair runs of 2026-11-26
QUIET = ["h200x2-check-1", "h200x2-check-2", "h200x2-check-3", "h200x2-all-1", "h200x2-all-2", "h200x2-all-3"]
MODEL = "NVIDIA H200"
# (method, direction): (ceiling us, fastest and slowest us measured, 2026-11-28) as the shipped table holds them
SMALL = {("ce", "push"): (2.77, 2.284, 2.398), ("ce", "pull"): (3.5, 2.922, 3.025),
         ("sm_read", "pull"): (3.78, 2.690, 2.927), ("sm_write", "push"): (3.28, 2.326, 2.545),
         ("sm_bulk_read", "pull"): (4.72, 3.438, 3.662), ("sm_bulk_write", "push"): (4.06, 2.894, 3.150)}
CE, SM = ("ce",), ("sm_read", "sm_write")
BULK = ("sm_bulk_read", "sm_bulk_write")


def check(*args: str) -> SimpleNamespace:
    """`ipcbench check ARGS` in this process (the command's own entry, without an interpreter's start per call:
    tests/test_check_h100.py runs it as a subprocess)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["check", *args])
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def slowed(tmp_path: Path, name: str, methods: tuple[str, ...], factor: float) -> Path:
    """A copy of results/NAME whose cross-GPU 4K bandwidth rows of `methods` take `factor` times as long."""
    run = tmp_path / name
    run.mkdir(parents=True)
    shutil.copy(RESULTS / name / "meta.json", run / "meta.json")
    with open(RESULTS / name / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        if r["src_gpu"] != r["dst_gpu"] and r["bytes"] == "4096" and r["method"] in methods \
                and r["kind"] == "bandwidth":
            r["time_us_median"] = repr(float(r["time_us_median"]) * factor)
            r["bw_gbps_median"] = repr(float(r["bw_gbps_median"]) / factor)
    with open(run / "results.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return run


def test_the_h200_4k_ceilings_across_gpus_keep_the_h100s_margins_over_the_2026_11_28_runs():
    shipped = {(e.method, e.direction): e for e in expect.defaults()
               if e.gpu == MODEL and e.link == "nvswitch" and e.lo == e.hi == 4096}
    assert set(shipped) == set(SMALL)
    for key, (ceiling, fastest, slowest) in SMALL.items():
        e = shipped[key]
        assert e.max_us == ceiling, key
        assert f"measured {fastest:.3f}-{slowest:.3f} us" in e.why and "2026-11-28" in e.why, e.why
        assert f"spread {slowest / fastest - 1:.1%}" in e.why, e.why
        margin = ceiling / slowest - 1
        assert (0.14 <= margin <= 0.17) if key[0] == "ce" else (0.28 <= margin <= 0.30), (key, margin)
        slower = 1.25 if key[0] == "ce" else 1 / 0.65  # what a neighbour on the link costs must fail
        assert fastest * slower > ceiling, key
    assert "about twice" not in " ".join(e.why for e in shipped.values())


@pytest.mark.parametrize("name", QUIET + ["h200x2-quick-1", "h200x2-np4-quick"])
def test_a_quiet_h200_pair_is_healthy_its_4k_rows_across_gpus_judged(name):
    p = check("--from", str(RESULTS / name), "--verbose")
    assert p.returncode == 0, p.stdout[-3000:]
    for what in ("GPU 0 -> GPU 1 ce push 4K", "GPU 1 -> GPU 0 ce pull 4K", "GPU 0 -> GPU 1 sm_read pull 4K",
                 "GPU 1 -> GPU 0 sm_write push 4K"):
        assert f"ok   [thresholds] {what}" in p.stdout, what


@pytest.mark.parametrize("name", QUIET)
def test_cross_gpu_4k_copy_engine_rows_25_percent_slower_fail_naming_them(tmp_path, name):
    p = check("--from", str(slowed(tmp_path, name, CE, 1.25)))
    assert p.returncode == 1, p.stdout[-3000:]
    failed = [ln for ln in p.stdout.splitlines() if ln.lstrip().startswith("FAIL")]
    for what in ("GPU 0 -> GPU 1 ce push 4K", "GPU 1 -> GPU 0 ce push 4K", "GPU 0 -> GPU 1 ce pull 4K",
                 "GPU 1 -> GPU 0 ce pull 4K"):
        assert any(f"[thresholds] {what}" in ln for ln in failed), (what, failed)
    assert all(" 4K " in ln for ln in failed), failed  # nothing else was touched, nothing else fails


@pytest.mark.parametrize("name", QUIET)
def test_cross_gpu_4k_copy_engine_rows_15_percent_slower_pass(tmp_path, name):
    assert check("--from", str(slowed(tmp_path, name, CE, 1.15))).returncode == 0


@pytest.mark.parametrize("name", QUIET)
def test_cross_gpu_4k_sm_rows_at_a_rate_35_percent_lower_fail_and_15_percent_lower_pass(tmp_path, name):
    ok = check("--from", str(slowed(tmp_path / "ok", name, SM, 1 / 0.85)))
    assert ok.returncode == 0, ok.stdout[-3000:]
    p = check("--from", str(slowed(tmp_path, name, SM, 1 / 0.65)))
    assert p.returncode == 1, p.stdout[-3000:]
    for what in ("GPU 0 -> GPU 1 sm_read pull 4K", "GPU 1 -> GPU 0 sm_read pull 4K",
                 "GPU 0 -> GPU 1 sm_write push 4K", "GPU 1 -> GPU 0 sm_write push 4K"):
        assert f"FAIL [thresholds] {what}" in p.stdout, what


@pytest.mark.parametrize("name", ["h200x2-all-1", "h200x2-all-3", "h200x2-quick-1"])
def test_the_bulk_copy_kernels_4k_rows_are_judged_when_asked_for(tmp_path, name):
    """check measures ce, sm_read and sm_write; `--methods sm_bulk_read,sm_bulk_write` judges the bulk-copy kernels'
    4K rows across GPUs by their ceilings (H200 ships no floor for them at 256M): quiet passes, a rate 35% lower
    fails, 15% lower passes."""
    args = ("--methods", "sm_bulk_read,sm_bulk_write", "--no-peers", "--json")
    quiet = check("--from", str(RESULTS / name), *args)
    assert quiet.returncode == 0, quiet.stdout[-2000:]
    judged = {(c["method"], c["pair"]) for c in json.loads(quiet.stdout)["checks"] if c["source"] == "thresholds"}
    assert {("sm_bulk_read", "GPU 0 -> GPU 1"), ("sm_bulk_write", "GPU 1 -> GPU 0")} <= judged, judged
    assert check("--from", str(slowed(tmp_path / "ok", name, BULK, 1 / 0.85)), *args).returncode == 0
    slow = check("--from", str(slowed(tmp_path, name, BULK, 1 / 0.65)), *args)
    assert slow.returncode == 1
    failed = {(c["method"], c["bytes"]) for c in json.loads(slow.stdout)["checks"] if c["status"] == "fail"}
    assert failed == {("sm_bulk_read", 4096), ("sm_bulk_write", 4096)}


def test_the_neighbour_on_nvlink_now_fails_the_4k_rows_it_slowed():
    """tests/data/compare/loaded (2 x H200, another process copying GPU 0 -> GPU 1): its 4K rows across GPUs
    passed the old "about twice" ceilings; now they fail, and the 256M floors still do."""
    p = check("--from", str(REPO / "tests" / "data" / "compare" / "loaded"), "--no-peers", "--json")
    assert p.returncode == 1
    failed = {(c["pair"], c["method"], c["direction"], c["bytes"]) for c in json.loads(p.stdout)["checks"]
              if c["status"] == "fail"}
    assert {("GPU 0 -> GPU 1", "ce", "push", 4096), ("GPU 1 -> GPU 0", "ce", "pull", 4096),
            ("GPU 1 -> GPU 0", "sm_read", "pull", 4096)} <= failed, failed
    assert ("GPU 0 -> GPU 1", "ce", "push", 128 << 20) in failed
