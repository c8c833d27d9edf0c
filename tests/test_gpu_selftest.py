"""`ipcbench selftest` on a real GPU machine: every one-way row of the copy, kernel, pool and vmm suites within
its noise plus 2% of the independent anchor (one process, no IPC, stream enqueue behind a spin kernel), 10%
where the anchor takes under 10 us (selftest/plan.Tolerance), at 4K, 64K, 1M and 64M-1G, including the
sizes between the powers of two (384M, 768M). Two ranks share one GPU (the same-GPU paths: the first GPU
alone is made visible, so two ranks share it on a machine of any GPU count); where there are two or more GPUs
a second run covers pairs across GPUs, one rank per GPU. The table is printed (read with -s). Skipped without
a GPU."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from conftest import gpu_count
from gpu_mpi import mpiexec_cmd


def _selftest(out, n: int, *args: str, env: dict | None = None):
    cmd = mpiexec_cmd(n) + [sys.executable, "-m", "ipcbench", "selftest", "--out", str(out), "--quiet", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=580, env=env)
    print(p.stdout[-8000:])
    print(p.stderr[-3000:], file=sys.stderr)
    return p


def one_gpu_env() -> dict:
    """The environment with only the first GPU this process sees visible (ranks inherit it from mpirun): on
    a machine of two GPUs or more, two ranks would otherwise take one GPU each and measure no same-GPU pair."""
    seen = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return {**os.environ, "CUDA_VISIBLE_DEVICES": seen or "0"}


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_selftest_passes_on_one_gpu(tmp_path):
    p = _selftest(tmp_path / "st", 2, env=one_gpu_env())
    assert p.returncode == 0, p.stderr[-2000:]
    checks = list(csv.DictReader(open(tmp_path / "st" / "selftest.csv", newline="")))
    assert checks and all(c["src_gpu"] == c["dst_gpu"] for c in checks)  # the same-GPU paths, whatever the machine
    sizes = {int(c["bytes"]) for c in checks}
    assert {384 << 20, 512 << 20, 768 << 20, 1 << 30} <= sizes
    assert {c["method"] for c in checks} >= {"ce", "sm_read", "sm_write", "pool_ce", "vmm_ce", "core_ce"}
    assert all(c["ok"] == "True" and c["status"] == "pass" for c in checks)
    assert all(float(c["tolerance"]) == 0.02 for c in checks if int(c["bytes"]) >= 64 << 20)  # big ones: tight
    meta = json.loads((tmp_path / "st" / "meta.json").read_text())
    assert meta["selftest"]["mismatches"] == 0 and meta["selftest"]["rows"] == len(checks)
    assert meta["selftest"]["status"] == "pass" and meta["selftest"]["unjudged"] == 0


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_selftest_across_gpus(tmp_path):
    n = gpu_count()
    if n < 2:
        pytest.skip("one GPU: no pair across GPUs")
    p = _selftest(tmp_path / "st", n, "--sizes", "4K,1M,64M,256M,384M,512M,768M,1G")
    assert p.returncode == 0, p.stderr[-2000:]
    checks = list(csv.DictReader(open(tmp_path / "st" / "selftest.csv", newline="")))
    assert checks and all(c["src_gpu"] != c["dst_gpu"] and c["status"] == "pass" for c in checks)  # one rank per GPU
