"""check's shipped expectations for two H100 80GB HBM3 through NVSwitch, from this project's own runs
(tests/data/h100x2: three back-to-back `all` runs; five fresh runs' spread), small messages across GPUs
included: a neighbour copying over NVLink slowed the 4K-256K copy-engine rows by 25-33% and check, judging
cross-GPU pairs at 256M only, said HEALTHY. The quiet runs pass; the same run with its cross-GPU 4K rows 25%
slower fails, naming them."""

from __future__ import annotations

import csv
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, ipcbench_cli, launcher_free_env
from ipcbench.judging import expect

H100X2 = REPO / "tests" / "data" / "h100x2"
MODEL = "NVIDIA H100 80GB HBM3"


def check(*args: str) -> subprocess.CompletedProcess:
    return ipcbench_cli("check", *args, cwd=REPO, env=launcher_free_env())


def recorded(tmp_path: Path, n: int, slow=None) -> Path:
    """Run all-N (with all-1's meta.json: the same machine, the others kept none), each row for which
    slow(row) gives a factor made that many times slower (time x f, rate / f)."""
    run = tmp_path / f"all-{n}"
    run.mkdir(parents=True)
    shutil.copy(H100X2 / "all-1" / "meta.json", run / "meta.json")
    with open(H100X2 / f"all-{n}" / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        f = slow(r) if slow else None
        if f:
            r["time_us_median"] = repr(float(r["time_us_median"]) * f)
            r["bw_gbps_median"] = repr(float(r["bw_gbps_median"]) / f)
    with open(run / "results.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return run


def _cross_4k(r: dict, methods: tuple[str, ...]) -> bool:
    return r["src_gpu"] != r["dst_gpu"] and r["bytes"] == "4096" and r["method"] in methods \
        and r["kind"] == "bandwidth"


def test_the_h100_nvswitch_expectations_come_from_this_projects_runs_with_small_messages():
    shipped = [e for e in expect.defaults() if e.gpu == MODEL and e.link == "nvswitch"]
    assert all("tests/data/h100x2" in e.why for e in shipped), [e.why for e in shipped if "h100x2" not in e.why]
    small = {(e.method, e.direction) for e in shipped if e.lo == e.hi == 4096 and e.max_us}
    assert small >= {("ce", "push"), ("ce", "pull"), ("sm_read", "pull"), ("sm_write", "push")}


@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_quiet_h100_pair_is_healthy_small_messages_judged(tmp_path, n):
    p = check("--from", str(recorded(tmp_path, n)), "--verbose")
    assert p.returncode == 0, p.stdout[-3000:]
    for what in ("GPU 0 -> GPU 1 ce push 4K", "GPU 1 -> GPU 0 ce pull 4K", "GPU 0 -> GPU 1 sm_read pull 4K",
                 "GPU 1 -> GPU 0 sm_write push 4K", "GPU 0 -> GPU 1 ce push 256M"):
        assert f"ok   [thresholds] {what}" in p.stdout, what


@pytest.mark.parametrize("n", [1, 2, 3])
def test_cross_gpu_4k_copy_engine_rows_25_percent_slower_fail_naming_them(tmp_path, n):
    """The NVLink neighbour's effect on a quiet run: every cross-GPU 4K copy-engine row takes 25% longer."""
    p = check("--from", str(recorded(tmp_path, n, lambda r: 1.25 if _cross_4k(r, ("ce",)) else None)))
    assert p.returncode == 1, p.stdout[-3000:]
    failed = [ln for ln in p.stdout.splitlines() if ln.lstrip().startswith("FAIL")]
    for what in ("GPU 0 -> GPU 1 ce push 4K", "GPU 1 -> GPU 0 ce push 4K", "GPU 0 -> GPU 1 ce pull 4K",
                 "GPU 1 -> GPU 0 ce pull 4K"):
        assert any(f"[thresholds] {what}" in ln for ln in failed), (what, failed)
    assert all(" 4K " in ln for ln in failed), failed  # nothing else was touched, nothing else fails


def test_cross_gpu_4k_sm_rows_at_a_rate_35_percent_lower_fail(tmp_path):
    """SM rows move up to ~11% between runs of unchanged code, so their ceilings keep more room: a rate 35%
    lower (time x 1/0.65) fails them, in every recorded run, and a rate 15% lower does not."""
    for n in (1, 2, 3):
        ok = check("--from", str(recorded(tmp_path / f"ok{n}", n,
                                          lambda r: 1 / 0.85 if _cross_4k(r, ("sm_read", "sm_write")) else None)))
        assert ok.returncode == 0, ok.stdout[-3000:]
        p = check("--from", str(recorded(tmp_path / str(n), n,
                                         lambda r: 1 / 0.65 if _cross_4k(r, ("sm_read", "sm_write")) else None)))
        assert p.returncode == 1, p.stdout[-3000:]
        for what in ("GPU 0 -> GPU 1 sm_read pull 4K", "GPU 1 -> GPU 0 sm_read pull 4K",
                     "GPU 0 -> GPU 1 sm_write push 4K", "GPU 1 -> GPU 0 sm_write push 4K"):
            assert f"FAIL [thresholds] {what}" in p.stdout, (n, what)
