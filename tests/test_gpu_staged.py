"""End-to-end `staged` suite (shm_staged, mpi_staged) under MPI on a GPU machine (skipped without a GPU).

Runs `MPIEXEC -n 2 ipcbench staged --sizes 4K,1M,64M --samples 3 --out TMP` and checks that every row is
verified and its numbers plausible. mpiexec: $IPCBENCH_MPIEXEC, else `mpirun` on PATH, else `mpiexec`;
Open MPI run as root gets --allow-run-as-root --oversubscribe.
"""

from __future__ import annotations

import csv
import os
import shlex
import shutil
import subprocess
import sys

import pytest

SIZES = (4096, 1 << 20, 64 << 20)


def mpiexec_cmd(n: int) -> list[str]:
    env = os.environ.get("IPCBENCH_MPIEXEC")
    if env:
        base = shlex.split(env)
    else:
        exe = shutil.which("mpirun") or shutil.which("mpiexec")
        if exe is None:
            pytest.skip("no mpirun/mpiexec on PATH (set IPCBENCH_MPIEXEC)")
        base = [exe]
    try:
        version = subprocess.run(base + ["--version"], capture_output=True, text=True, timeout=30)
        open_mpi = "Open MPI" in version.stdout + version.stderr
    except (OSError, subprocess.TimeoutExpired):
        open_mpi = False
    extra = ["--allow-run-as-root", "--oversubscribe"] if open_mpi and os.geteuid() == 0 else []
    return base + extra + ["-n", str(n)]


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_staged_suite_end_to_end(tmp_path):
    out = tmp_path / "run"
    cmd = mpiexec_cmd(2) + [sys.executable, "-m", "ipcbench", "staged", "--sizes", "4K,1M,64M", "--samples", "3",
                            "--timeout", "120", "--out", str(out)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=840, env=env)
    print(p.stdout[-4000:], p.stderr[-4000:])
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    rows = list(csv.DictReader(open(out / "results.csv", newline="")))
    got = {(r["method"], int(r["src_rank"]), int(r["dst_rank"]), int(r["bytes"])) for r in rows}
    want = {(m, a, b, s) for m in ("shm_staged", "mpi_staged") for a, b in ((0, 1), (1, 0)) for s in SIZES}
    assert got == want, f"missing {want - got}, extra {got - want}"
    for r in rows:
        assert r["suite"] == "staged" and r["direction"] == "push", r
        assert r["verified"] == "true", r
        assert int(r["samples"]) == 3 and int(r["iterations"]) >= 1, r
        t = float(r["time_us_median"])
        assert 0 < float(r["time_us_min"]) <= t <= float(r["time_us_max"]) < 1e7, r
        bw = float(r["bw_gbps_median"])
        assert 0 < bw < 200, r  # through host memory: nowhere near NVLink rates
        assert r["note"], r
        if r["method"] == "shm_staged":
            assert "shm" in r["note"] and "slots" in r["note"], r
            if int(r["bytes"]) == 64 << 20:
                assert bw > 5, f"shm_staged at 64M only {bw} GB/s: {r}"
        else:
            assert "Isend/Irecv" in r["note"], r
