"""Shared test setup: GPU tests skip cleanly without a GPU; tests/mpi/ is only collected under mpiexec."""

from __future__ import annotations

import pytest

collect_ignore = []


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
