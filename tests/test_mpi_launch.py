"""Run the MPI test suite (tests/mpi/) under mpiexec from a plain pytest run.

tests/mpi/ is only collected under `--with-mpi` (see conftest.py), so this test starts
`mpiexec -n N python -m pytest --with-mpi tests/mpi` itself, for N = 2 and 4, and checks
that it exits 0.  N = 4 may oversubscribe the cores, which MPICH allows.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 240
TAIL_CHARS = 6000


def find_mpiexec() -> str | None:
    """mpiexec next to the interpreter (the venv's mpich wheel), else on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("mpiexec")


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # Never let the children think they belong to an MPI job this process might be part of.
    for key in list(env):
        if key.startswith(("PMI_", "PMIX_", "HYDRA_", "MPIR_", "OMPI_")):
            del env[key]
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


@pytest.mark.parametrize("n", [2, 4])
def test_mpi_suite(n, request):
    if request.config.getoption("--with-mpi", default=False):
        pytest.skip("already running under --with-mpi; not starting a nested mpiexec")
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec next to sys.executable or on PATH (pip install mpich)")
    cmd = [
        mpiexec, "-n", str(n),
        sys.executable, "-m", "pytest", "--with-mpi", "-q", "-p", "no:cacheprovider", "tests/mpi",
    ]
    # Own session, so that on timeout the whole tree (mpiexec, proxies, ranks) can be killed.
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=_child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the group this test started, by its id
        except ProcessLookupError:
            pass
        out, _ = proc.communicate()
    tail = out[-TAIL_CHARS:]
    print(f"$ {' '.join(cmd)}\n(exit code {proc.returncode}{', timed out' if timed_out else ''})\n{tail}")
    assert not timed_out, f"mpiexec -n {n} ran past {TIMEOUT_S} s; output tail:\n{tail}"
    assert proc.returncode == 0, f"mpiexec -n {n} exited {proc.returncode}; output tail:\n{tail}"
