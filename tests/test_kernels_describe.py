"""core/gpu.py's host-side parts that need no GPU: the kernels the code names exist in kernels/*.cu, the
device description is formatted from the properties CUDA reports (given here), the launch grid size."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from cupy.cuda import runtime

import ipcbench
from ipcbench.core import gpu as gpumod


def test_every_kernel_the_code_launches_exists():
    """Every gpu.function("module", "kernel") call names a kernel defined in kernels/<module>.cu."""
    root = Path(ipcbench.__file__).parent
    calls = set()
    for py in root.rglob("*.py"):
        for module, rest in re.findall(r'function\(\s*"(\w+)",\s*([^)]*)\)', py.read_text()):
            for name in re.findall(r'"(\w+)"', rest):
                calls.add((module, name))
    assert ("pattern", "verify") in calls and ("pipeline", "pipe_consumer") in calls and len(calls) >= 13
    for module, name in sorted(calls):
        src, include = gpumod.kernel_source(module)
        assert Path(include).is_dir()
        defined = re.findall(r'__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)\s*\(', src)
        assert name in defined, f"kernels/{module}.cu defines no kernel {name} (has {defined})"


def props(uuid):
    return {"uuid": uuid, "name": b"NVIDIA H200", "pciDomainID": 0, "pciBusID": 0x1B, "pciDeviceID": 0,
            "multiProcessorCount": 132, "totalGlobalMem": 150 << 30, "major": 9, "minor": 0, "l2CacheSize": 60 << 20}


def test_describe_formats_the_device(monkeypatch):
    raw = bytes(range(1, 17))
    monkeypatch.setattr(runtime, "getDeviceProperties", lambda i: props(raw))
    info = gpumod.device_info(3)
    assert info == gpumod.GpuInfo(3, "NVIDIA H200", "GPU-01020304-0506-0708-090a-0b0c0d0e0f10", "00000000:1b:00.0",
                                  132, 150 << 30, "9.0", 60 << 20)
    assert info.as_dict()["pci_bus_id"] == "00000000:1b:00.0"


def test_describe_recovers_a_uuid_cut_at_a_zero_byte(monkeypatch):
    """CuPy cuts the 16 raw bytes at a zero byte; the driver API's are used instead, or a placeholder."""
    monkeypatch.setattr(runtime, "getDeviceProperties", lambda i: props(b"\x12\x34"))
    monkeypatch.setattr(gpumod, "_uuid_bytes", lambda i: bytes(16))
    assert gpumod.device_info(0).uuid == "GPU-00000000-0000-0000-0000-000000000000"
    monkeypatch.setattr(gpumod, "_uuid_bytes", lambda i: None)
    assert gpumod.device_info(2).uuid == "GPU-unknown-2"


def test_uuid_from_the_driver_api_of_a_device_that_does_not_exist():
    assert gpumod._uuid_bytes(10**6) is None


def test_device_count(monkeypatch):
    monkeypatch.setattr(runtime, "getDeviceCount", lambda: 3)
    assert gpumod.device_count() == 3

    def no_driver():
        raise runtime.CUDARuntimeError(35)  # cudaErrorInsufficientDriver

    monkeypatch.setattr(runtime, "getDeviceCount", no_driver)
    assert gpumod.device_count() == 0


@pytest.mark.parametrize("nbytes, expect", [(0, 1), (1, 1), (512 * 16, 1), (512 * 16 + 1, 2),
                                            (1 << 30, 132 * 4)])
def test_blocks_for(nbytes, expect):
    assert gpumod.Gpu.blocks_for(SimpleNamespace(sm_count=132), nbytes, 16) == expect


def test_blocks_for_shape():
    gpu = SimpleNamespace(sm_count=10)
    assert gpumod.Gpu.blocks_for(gpu, 1 << 30, 64, per_sm=8, threads=1024) == 80
    assert gpumod.Gpu.blocks_for(gpu, 3 * 1024 * 64, 64, per_sm=8, threads=1024) == 3
