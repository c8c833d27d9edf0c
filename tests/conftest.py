"""Shared test setup: GPU tests skip cleanly without a GPU; tests/mpi/ is only collected under mpiexec."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

collect_ignore = []
REPO = Path(__file__).resolve().parents[1]
# Real runs the report and compare tests read: results/ (runs of the current code, shipped) and runs recorded
# with earlier code (2 x H200: cross-GPU pairs; one H100 and one H200: two ranks on one GPU, with and without MPS).
# IPCBENCH_RESULTS_DIR: only that.
RECORDED_REAL_RUNS = [REPO / "tests" / "data" / "h200x2", REPO / "tests" / "data" / "onegpu"]


def tool(name: str):
    """A module of tools/ (the project's own tools, outside the installed package: tools/costfit.py), by its path."""
    import importlib.util
    import sys

    key = f"ipcbench_tools.{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, REPO / "tools" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        sys.modules[key] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[key]


def real_runs() -> list[Path]:
    """Every real run directory (results.csv + meta.json) the real-run tests cover."""
    roots = ([Path(os.environ["IPCBENCH_RESULTS_DIR"])] if os.environ.get("IPCBENCH_RESULTS_DIR")
             else [REPO / "results", *RECORDED_REAL_RUNS])
    return [p.parent for root in roots for p in sorted(root.glob("*/results.csv"))
            if (p.parent / "meta.json").is_file()]


def has_cross_gpu_pairs(run_dir: Path) -> bool:
    import csv

    with open(run_dir / "results.csv", newline="") as f:
        return any(r["same_gpu"].lower() == "false" and r["src_gpu"] != r["dst_gpu"] for r in csv.DictReader(f))


def pytest_configure(config):
    # tests/mpi/ holds tests that must run under `mpiexec -n N python -m pytest --with-mpi tests/mpi`.
    # A plain `pytest` run reaches them through tests/test_mpi_launch.py, which starts mpiexec itself.
    if not config.getoption("--with-mpi", default=False):
        collect_ignore.append("mpi")


def gpu_count() -> int:
    """How many CUDA devices this process can use (0 without a driver, a device or cupy)."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


def pytest_collection_modifyitems(config, items):
    if gpu_count() > 0:
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def mpiexec_or_skip() -> str:
    """mpiexec next to the interpreter (the venv's mpich wheel), else on PATH; skip the test without one."""
    import os
    import shutil
    import sys

    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    exe = here if os.path.exists(here) else shutil.which("mpiexec")
    if not exe:
        pytest.skip("no mpiexec next to sys.executable or on PATH (pip install mpich)")
    return exe


def launcher_free_env() -> dict[str, str]:
    """This process's environment without the variables of an MPI job it may be part of, so that a child
    mpiexec starts a job of its own."""
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "HYDRA_", "MPIR_", "OMPI_"))}


# How a swapped compare names each verdict (the mirror of a verdict when BASE and NEW change places).
MIRROR = {"regression": "improvement", "improvement": "regression", "missing": "new", "new": "missing",
          "unchanged": "unchanged", "not judged": "not judged"}


def _in_process(module: str, capsys, argv) -> tuple[int, str, str]:
    """`ipcbench COMMAND ARGV` of the command in ipcbench.report.<module>, in-process: (exit status, stdout, stderr)."""
    import argparse
    import importlib

    command = importlib.import_module(f"ipcbench.report.{module}")
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    rc = command.run(parser.parse_args([str(a) for a in argv]))
    out, err = capsys.readouterr()
    return rc, out, err


def run_report(capsys, *argv) -> tuple[int, str, str]:
    """`ipcbench report ARGV` in-process: (exit status, stdout, stderr)."""
    return _in_process("command", capsys, argv)


def run_compare(capsys, *argv) -> tuple[int, str, str]:
    """`ipcbench compare ARGV` in-process: (exit status, stdout, stderr)."""
    return _in_process("compare_command", capsys, argv)
