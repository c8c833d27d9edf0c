"""`ipcbench check` on a real GPU machine: two ranks on GPU 0 (the same-GPU pair every machine has), judged by
the shipped expectations of its GPU (check/defaults.toml). A quiet GPU is healthy (exit 0); with a neighbour
process copying on the same GPU (tests/neighbour_load.py) the check exits 1 and names the rows. The wall time,
start-up included, is printed (read with -s): the 15 s target is a benchmark's, not an assertion. Skipped
without a GPU, and where the GPU has no shipped expectation."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpu_mpi import mpiexec_cmd

NEIGHBOUR = Path(__file__).with_name("neighbour_load.py")


def _check(out: Path) -> tuple[subprocess.CompletedProcess, dict, float]:
    cmd = mpiexec_cmd(2) + [sys.executable, "-m", "ipcbench", "check", "--out", str(out), "--json"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    wall = time.monotonic() - t0
    print(f"check wall time, start-up included: {wall:.1f} s")
    print(p.stdout[-3000:])
    print(p.stderr[-2000:], file=sys.stderr)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("{")), None)
    verdict = json.loads(line) if line else {}
    return p, verdict, wall


def _skip_without_expectations(verdict: dict) -> None:
    if any("no expectation for" in c["reason"] for c in verdict.get("checks", [])):
        pytest.skip("no shipped expectation for this GPU (give --thresholds)")


@pytest.mark.gpu
@pytest.mark.timeout(320)
def test_check_on_a_quiet_gpu_is_healthy(tmp_path):
    p, verdict, _ = _check(tmp_path / "check")
    _skip_without_expectations(verdict)
    assert p.returncode == 0, p.stderr[-2000:]
    assert verdict["verdict"] == "healthy"
    judged = {(c["method"], c["direction"], c["bytes"]) for c in verdict["checks"] if c["source"] == "thresholds"}
    assert ("ce", "push", 256 << 20) in judged and ("sm_read", "pull", 4096) in judged
    assert all(c["status"] == "pass" for c in verdict["checks"])


@pytest.mark.gpu
@pytest.mark.timeout(320)
def test_a_neighbour_copying_on_the_gpu_makes_it_unhealthy(tmp_path):
    load = subprocess.Popen([sys.executable, str(NEIGHBOUR), "120", "0", "0"], stdout=subprocess.PIPE, text=True)
    try:
        assert load.stdout is not None and "loading" in load.stdout.readline()
        p, verdict, _ = _check(tmp_path / "check")
    finally:
        load.terminate()
        load.wait(timeout=30)
    _skip_without_expectations(verdict)
    assert p.returncode == 1, p.stderr[-2000:]
    failed = [c for c in verdict["checks"] if c["status"] == "fail"]
    assert failed and all(c["link"] == "same_gpu" and c["pair"].startswith("GPU 0 ranks") for c in failed)
    assert verdict["reason"].startswith("FAIL: GPU 0 ranks")
