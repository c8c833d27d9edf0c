"""Helpers for the GPU tests: start `ipcbench` under the machine's MPI launcher and read the rows back."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest


def mpiexec_cmd(n: int) -> list[str]:
    """The launcher for n ranks: tools/shm_targets.launcher's ($IPCBENCH_MPIEXEC, else mpirun/mpiexec on PATH, with
    Open MPI's flags as root); skips the test where there is none."""
    from conftest import tool

    try:
        return tool("shm_targets").launcher(n)
    except SystemExit:
        pytest.skip("no mpirun/mpiexec on PATH (set IPCBENCH_MPIEXEC)")


def run_ipcbench(out, n: int, *args: str, timeout: int = 540) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """Run `mpiexec -n n python -m ipcbench ARGS --out out`; return the process and the CSV rows."""
    cmd = mpiexec_cmd(n) + [sys.executable, "-m", "ipcbench", *args, "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    print(p.stdout[-4000:])
    print(p.stderr[-2000:], file=sys.stderr)
    path = os.path.join(str(out), "results.csv")
    rows = list(csv.DictReader(open(path, newline=""))) if os.path.exists(path) else []
    return p, rows
