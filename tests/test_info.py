"""`ipcbench info`'s report text from given data (a fake device count and a synthetic collect() result):
this tests the formatting and the no-GPU answers, not a GPU."""

from __future__ import annotations

import json
from types import SimpleNamespace

from ipcbench import info
from ipcbench.core import gpu as gpumod

DATA = {
    "gpus": [
        {"index": 0, "name": "NVIDIA H200 with a very long marketing name", "uuid": "GPU-aaaa", "cc": "9.0",
         "sm_count": 132, "memory_bytes": 150 << 30, "pci_bus_id": "00000000:1b:00.0",
         "features": {"legacy_ipc": True, "event_ipc": True, "memory_pools": 1, "pool_posix_fd": True,
                      "unified_addressing": 1, "vmm": True, "vmm_granularity": [2 << 20, 2 << 20],
                      "fabric_handles": True}},
        {"index": 1, "name": "NVIDIA H200", "uuid": "GPU-bbbb", "cc": "9.0", "sm_count": 132,
         "memory_bytes": 150 << 30, "pci_bus_id": "00000000:43:00.0",
         "features": {"legacy_ipc": "no (cudaErrorNotSupported)", "event_ipc": False, "memory_pools": 0,
                      "pool_posix_fd": False, "unified_addressing": 1,
                      "vmm": "no (GPU 1 cannot export cuMemCreate allocations as POSIX file descriptors)",
                      "vmm_granularity": None, "fabric_handles": "no (GPU 1 does not support fabric handles)"}},
    ],
    "p2p_matrix": [[1, 1], [0, 1]],
    "topology": {"nvml": True, "links": [
        {"src_gpu": 0, "dst_gpu": 1, "kind": "nvlink", "nvlink_version": "4.0", "nvlink_count": 18,
         "per_link_gbps": 26.5625, "peak_gbps": 478.125},
        {"src_gpu": 1, "dst_gpu": 0, "kind": "pcie", "pcie_gen": 5, "pcie_width": 16, "peak_gbps": None}],
        "per_gpu": [{"active": 18, "version": 6, "pcie_gen": 5, "pcie_width": 16, "pcie_max_gen": 5,
                     "pcie_max_width": 16}]},
    "versions": {"driver": "570.1", "cuda_driver": 12080, "cuda_runtime": 13020, "cupy": "14.2.0",
                 "cuda_python": "13.0", "mpi4py": "4.1", "mpi_library": "MPICH 5"},
}


def test_no_gpu_is_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(gpumod, "device_count", lambda: 0)
    assert info.run(SimpleNamespace(json=False)) == 2
    assert "no CUDA GPU visible" in capsys.readouterr().err
    assert info.collect() == {"gpus": []}


def test_a_broken_cuda_stack_is_exit_2(monkeypatch, capsys):
    def broken():
        raise RuntimeError("driver exploded\nmore")

    monkeypatch.setattr(gpumod, "device_count", broken)
    assert info.run(SimpleNamespace(json=False)) == 2
    assert capsys.readouterr().err.strip() == "ipcbench info: no usable CUDA GPU here (RuntimeError: driver exploded)"


def test_report_text(monkeypatch, capsys):
    monkeypatch.setattr(gpumod, "device_count", lambda: 2)
    monkeypatch.setattr(info, "collect", lambda: DATA)
    assert info.run(SimpleNamespace(json=False)) == 0
    out = capsys.readouterr().out
    assert "driver 570.1  CUDA driver API 12080  runtime 13020" in out and "MPI: MPICH 5" in out
    assert "  0  NVIDIA H200 with a very  9.0   132   150.0Gi  00000000:1b:00.0 GPU-aaaa" in out
    assert "GPU 0: legacy yes, events yes, pools yes, posix-fd yes, UVA yes" in out
    assert "GPU 1: legacy no (cudaErrorNotSupported), events no, pools no, posix-fd no, UVA yes" in out
    assert "GPU 0: vmm yes, granularity 2M minimum / 2M recommended, fabric handles yes" in out
    assert ("GPU 1: vmm no (GPU 1 cannot export cuMemCreate allocations as POSIX file descriptors), fabric handles "
            "no (GPU 1 does not support fabric handles)") in out
    assert "only through IMEX; ipcbench shares within a node (POSIX fds)" in out
    assert "    0     -  yes" in out and "    1    NO    -" in out
    assert "GPU 0 -> GPU 1: nvlink NVLink 4.0 18 x 26.562 GB/s peak 478.1 GB/s" in out
    assert "GPU 1 -> GPU 0: PCIe gen5 x16" in out and "GPU 1 -> GPU 0: PCIe gen5 x16 " not in out
    assert "GPU 0: 18 active NVLinks (NVML version enum 6), PCIe gen5 x16 (max gen5 x16)" in out


def test_report_without_nvml_and_as_json(monkeypatch, capsys):
    monkeypatch.setattr(gpumod, "device_count", lambda: 2)
    monkeypatch.setattr(info, "collect", lambda: {**DATA, "topology": {"nvml": False, "error": "no libnvidia-ml"}})
    assert info.run(SimpleNamespace(json=False)) == 0
    assert capsys.readouterr().out.rstrip().endswith("NVML not available: no libnvidia-ml")
    monkeypatch.setattr(info, "collect", lambda: DATA)
    assert info.run(SimpleNamespace(json=True)) == 0
    assert json.loads(capsys.readouterr().out) == DATA


def fake_cuda(monkeypatch, attrs: dict, **drv_kw):
    """A fake device (attributes as given) and IPC driver (fakes.FakeCudaIpc) behind cupy's runtime."""
    from cupy.cuda import runtime

    from fakes import FakeCudaIpc, HostMemory

    node = SimpleNamespace(memory=HostMemory(), gpus=[])
    FakeCudaIpc(node, **drv_kw).install(monkeypatch)

    def attribute(attr, index):
        if attrs.get(attr) is None:
            raise runtime.CUDARuntimeError(1)
        return attrs[attr]

    monkeypatch.setattr(runtime, "deviceGetAttribute", attribute)
    monkeypatch.setattr(runtime, "setDevice", lambda i: None)
    monkeypatch.setattr(runtime, "malloc", node.memory.alloc)
    monkeypatch.setattr(runtime, "free", node.memory.free)
    fake_vmm(monkeypatch)
    return node


def fake_vmm(monkeypatch, vmm_ok=True, fabric_ok=False, broken=None):
    """ipc/vmm's driver-attribute checks, answered without a driver (or failing with `broken`)."""
    from ipcbench.ipc import vmm

    def answer(ok, why):
        def check(index):
            if broken is not None:
                raise broken
            return (True, None) if ok else (False, why.format(index))
        return check

    monkeypatch.setattr(vmm, "vmm_support", answer(vmm_ok, "GPU {} does not support CUDA VMM"))
    monkeypatch.setattr(vmm, "fabric_support", answer(fabric_ok, "GPU {} does not support fabric handles"))
    monkeypatch.setattr(vmm, "granularity", lambda index: (2 << 20, 2 << 20))


ATTRS = {41: 1, 115: 1, 119: 0x9}  # unified addressing, pools, handle types POSIX fd | fabric


def test_features_of_a_capable_device(monkeypatch):
    node = fake_cuda(monkeypatch, ATTRS)
    assert info._features(0) == {"unified_addressing": 1, "memory_pools": 1, "pool_handle_types": 9,
                                 "pool_posix_fd": True, "legacy_ipc": True, "event_ipc": True, "vmm": True,
                                 "vmm_granularity": [2 << 20, 2 << 20],
                                 "fabric_handles": "no (GPU 0 does not support fabric handles)"}
    assert node.memory.live() == set()  # the probe buffer was freed


def test_features_that_are_missing(monkeypatch):
    fake_cuda(monkeypatch, {41: 1, 115: 0, 119: None}, fail_export=True)
    f = info._features(0)
    assert f["pool_handle_types"] is None and f["pool_posix_fd"] is False and f["memory_pools"] == 0
    assert f["legacy_ipc"] == "no (cudaErrorInvalidValue: invalid argument)" and f["event_ipc"] is True


def test_collect_every_gpu(monkeypatch):
    from cupy.cuda import runtime

    from ipcbench.core import topology
    from ipcbench.run import meta

    fake_cuda(monkeypatch, ATTRS)
    monkeypatch.setattr(gpumod, "device_count", lambda: 2)
    monkeypatch.setattr(gpumod, "describe",
                        lambda i: gpumod.GpuInfo(i, "g", f"GPU-{i}", f"0000:0{i}:00.0", 1, 1, "9.0"))
    monkeypatch.setattr(runtime, "deviceCanAccessPeer", lambda i, j: 0)
    monkeypatch.setattr(topology, "_nvml", lambda: (_ for _ in ()).throw(OSError("no NVML here")))
    monkeypatch.setattr(meta, "library_versions", lambda: {"mpi4py": "x"})
    data = info.collect()
    assert [g["uuid"] for g in data["gpus"]] == ["GPU-0", "GPU-1"]
    assert all(g["features"]["legacy_ipc"] is True for g in data["gpus"])
    assert data["p2p_matrix"] == [[1, 0], [0, 1]]
    assert data["topology"] == {"nvml": False, "error": "no NVML here", "links": []}
    assert data["versions"]["mpi4py"] == "x" and "cuda_runtime" in data["versions"]


def test_vmm_features_without_support_or_driver(monkeypatch):
    """No VMM: no granularity; a driver that cannot answer (cuda.bindings finds no libcuda) is a "no" that
    names the error, not a crash of `ipcbench info`."""
    fake_vmm(monkeypatch, vmm_ok=False, fabric_ok=True)
    assert info._vmm_features(3) == {"vmm": "no (GPU 3 does not support CUDA VMM)", "vmm_granularity": None,
                                     "fabric_handles": True}
    fake_vmm(monkeypatch, broken=OSError("libcuda.so.1 not found\ndetails"))
    assert info._vmm_features(0) == {"vmm": "no (OSError: libcuda.so.1 not found)", "vmm_granularity": None,
                                     "fabric_handles": "no (OSError: libcuda.so.1 not found)"}
