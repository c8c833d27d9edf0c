"""Run metadata for meta.json: who ran what, where, on which GPUs, drivers and libraries.

meta.json is written only through the record class that reads it: base_meta starts the run's typed draft
(record/meta_draft.MetaDraft), the runner fills it, and it is written through record/meta.Meta, so what a run
writes is what every reader reads.

`ipcbench --version` imports this module (source_digest), so it imports CuPy and mpi4py only inside the
functions that read versions from them (importing mpi4py.MPI initialises MPI).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata, resources
from pathlib import Path

from ipcbench import __version__
from ipcbench.core import topology
from ipcbench.catalogue.noise import NOISE_BASIS
from ipcbench.record.meta_draft import MetaDraft
from ipcbench.results import SCHEMA_VERSION


def clean(text: str) -> str:
    """A library's string as text: NUL bytes and surrounding white space removed (MPI pads with NULs)."""
    return str(text).replace("\x00", "").strip()


def mem_bandwidth_gbps(pci_bus_id: str) -> float | None:
    """Theoretical DRAM bandwidth (GB/s) from NVML: max memory clock x bus width x 2 (DDR) / 8."""
    try:
        nv = topology._nvml()
        h = nv.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
        mhz = nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)
        bits = nv.nvmlDeviceGetMemoryBusWidth(h)
        return round(mhz * 1e6 * bits * 2 / 8 / 1e9, 1)
    except Exception:
        return None


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def make_run_id(host: str | None = None) -> str:
    host = host or socket.gethostname().split(".")[0]
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        return f"{job}-{host}"
    return dt.datetime.now().strftime("%Y%m%d-%H%M%S") + f"-{host}"


def _pkg(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def git_commit() -> str | None:
    here = Path(__file__).resolve().parents[2]
    if not (here / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
        if out.returncode == 0:
            return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def library_versions() -> dict:
    """Versions of the Python stack and the MPI library (call after MPI is initialised)."""
    v = {
        "python": platform.python_version(),
        "ipcbench": __version__,
        "cupy": _pkg("cupy-cuda13x") or _pkg("cupy"),
        "cuda_python": _pkg("cuda-python"),
        "cuda_bindings": _pkg("cuda-bindings"),
        "mpi4py": _pkg("mpi4py"),
        "pandas": _pkg("pandas"),
        "nvidia_ml_py": _pkg("nvidia-ml-py"),
        "nvidia_nccl": _pkg("nvidia-nccl-cu13"),  # the NCCL wheel of the nccl extra (suites/nccl.py); None without
    }
    try:
        from mpi4py import MPI

        v["mpi_library"] = clean(MPI.Get_library_version()).splitlines()[0]
        v["mpi_standard"] = "%d.%d" % MPI.Get_version()
    except Exception:
        pass
    return v


def cuda_versions() -> dict:
    from cupy.cuda import runtime

    return {"driver": topology.nvml_driver_version(), "cuda_driver": runtime.driverGetVersion(),
            "cuda_runtime": runtime.runtimeGetVersion()}


SOURCE_SUFFIXES = (".py", ".cu", ".cuh")


def source_digest() -> str:
    """sha256 (16 hex digits) of the code that ran: every .py of the ipcbench package and every kernel source
    it compiles (package ipcbench.kernels), by relative path and content. Unlike the git commit it is known
    for a wheel install and cannot be stale: `ipcbench --version` prints it for the installed code, so a run's
    meta.json can be matched to the code that made it."""
    h = hashlib.sha256()
    for name, root in (("ipcbench", Path(__file__).resolve().parents[1]),
                       ("ipcbench.kernels", Path(str(resources.files("ipcbench.kernels"))))):
        files = sorted(p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES and "__pycache__" not in p.parts
                       and (name == "ipcbench.kernels" or "kernels" not in p.relative_to(root).parts[:1]))
        for p in files:
            h.update(f"{name}/{p.relative_to(root).as_posix()}".encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def base_meta(run_id: str, argv: list[str]) -> MetaDraft:
    """The start of a run's meta.json: `argv` the command's arguments (a list: ["check", ...] for check)."""
    return MetaDraft(run_id=run_id, schema_version=SCHEMA_VERSION, ipcbench_version=__version__,
                     git_commit=git_commit(), source_digest=source_digest(), command=["ipcbench", *argv],
                     start=now_iso(), platform=platform.platform(), python_executable=os.path.basename(sys.executable),
                     noise_basis=NOISE_BASIS)
