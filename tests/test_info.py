"""`ipcbench info`'s report text from given data (a fake device count and a synthetic collect() result):
this tests the formatting and the no-GPU answers, not a GPU."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

from ipcbench import info, readiness
from ipcbench.core import gpu as gpumod

NOT_PERMITTED = (False, "CUDA_ERROR_NOT_PERMITTED: no IMEX channel, /dev/nvidia-caps-imex-channels absent")
READY = [readiness.Item("pid_namespace", "PID namespace", "pid:[4026532601], not the host's", None, "compare it",
                        {"id": "pid:[4026532601]"}),
         readiness.mig_item(0, {"current": 0, "pending": 0}), readiness.mig_item(1, {"current": 1, "pending": 1}),
         readiness.fabric_item(0, True, NOT_PERMITTED),
         readiness.fabric_item(1, "no (GPU 1 does not support fabric handles)", None),
         *readiness.p2p_items([[1, 1], [0, 1]])]

DATA = {
    "readiness": [i.as_dict() for i in READY],
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
        {"src_gpu": 0, "dst_gpu": 1, "kind": "nvswitch", "nvlink_version": "4.0", "nvlink_count": 18,
         "per_link_gbps": 25.0, "peak_gbps": 450.0, "ceiling_gbps": 478.125},
        {"src_gpu": 1, "dst_gpu": 0, "kind": "pcie", "pcie_gen": 5, "pcie_width": 16, "peak_gbps": None},
        {"src_gpu": 0, "dst_gpu": 2, "kind": "pcie", "pcie_gen": 5, "pcie_width": 16, "peak_gbps": 63.015,
         "ceiling_gbps": 63.015},
        {"src_gpu": 2, "dst_gpu": 0, "kind": "unknown", "kind_reason": "cannot tell NVSwitch from PCIe: why",
         "peak_gbps": None}],
        "per_gpu": [{"active": 18, "version": 6, "pcie_gen": 5, "pcie_width": 16, "pcie_max_gen": 5,
                     "pcie_max_width": 16, "gpu_links": 0, "switch_links": 18, "cpu_links": 0, "unknown_links": 0}]},
    "versions": {"driver": "570.1", "cuda_driver": 12080, "cuda_runtime": 13020, "cupy": "14.2.0",
                 "cuda_python": "13.0", "mpi4py": "4.1", "mpi_library": "MPICH 5"},
}


def fake_host(monkeypatch, tmp_path):
    """readiness.host_items over a fake /proc (a container's PID namespace, Yama at 1) and a 64 MiB /dev/shm."""
    from test_readiness import Usage, fake_proc

    proc = fake_proc(tmp_path, pid="pid:[4026532601]", ptrace="1")
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "cuda.shm.0.7ffffff0.1").write_bytes(b"\0" * (80 << 10))  # a driver's event file, its process ended
    real = readiness.host_items
    monkeypatch.setattr(readiness, "host_items",
                        lambda: real(proc, str(shm), {}, lambda p: Usage(64 << 20, 1 << 20, 63 << 20)))
    return shm


def test_no_gpu_is_exit_2_after_the_host_items(monkeypatch, capsys, tmp_path):
    shm = fake_host(monkeypatch, tmp_path)
    monkeypatch.setattr(gpumod, "device_count", lambda: 0)
    assert info.run(SimpleNamespace(json=False)) == 2
    got = capsys.readouterr()
    assert got.err == "ipcbench: error: no CUDA GPU visible (CUDA_VISIBLE_DEVICES, driver?)\n"
    lines = got.out.splitlines()
    assert lines[0] == info.READINESS_HEAD and len(lines) == 7
    assert lines[1].startswith("  ??  PID namespace: pid:[4026532601], not the host's (a container's or a pod's): "
                               "ranks in different PID namespaces")
    assert lines[2].startswith("  ok  IPC namespace: ipc:[4026531839], the host's: ")
    assert lines[3].startswith(f"  ok  {shm}: 64.0 MiB, 63.0 MiB free; the host-staged path needs 48.1 MiB")
    assert lines[4].startswith(f"  ??  CUDA event files in {shm}: 1 left by ended processes, 80 KiB: "
                               "cuda.shm.0.7ffffff0.1 (pid 2147483632): the CUDA driver's files")
    assert lines[4].endswith(f"remove them with: rm -f {shm}/cuda.shm.0.7ffffff0.1")
    assert lines[5].startswith("  ok  ptrace_scope: 1 (restricted): ipcbench passes fds over a Unix socket")
    assert lines[6] == "  ??  GPU items (MIG, fabric handles, P2P): not checked, no GPU"
    data = info.collect()
    assert data["gpus"] == [] and [i["name"] for i in data["readiness"]] == ["pid_namespace", "ipc_namespace",
                                                                             "dev_shm", "event_files", "ptrace_scope"]
    assert (shm / "cuda.shm.0.7ffffff0.1").exists()  # named, never removed


def test_no_gpu_as_json(monkeypatch, capsys, tmp_path):
    fake_host(monkeypatch, tmp_path)
    monkeypatch.setattr(gpumod, "device_count", lambda: 0)
    assert info.run(SimpleNamespace(json=True)) == 2
    got = capsys.readouterr()
    data = json.loads(got.out)
    assert data["gpus"] == [] and data["error"] == "no CUDA GPU visible (CUDA_VISIBLE_DEVICES, driver?)"
    assert data["readiness"][0]["facts"] == {"id": "pid:[4026532601]", "inode": 4026532601, "host": False}
    assert data["readiness"][2]["facts"]["need_bytes"] == (64 << 10) + 3 * (16 << 20)
    assert data["readiness"][3]["facts"] == {"count": 1, "bytes": 80 << 10, "running": 0, "files": [
        {"name": "cuda.shm.0.7ffffff0.1", "pid": 0x7FFFFFF0, "bytes": 80 << 10}]}
    assert got.err.startswith("ipcbench: error: no CUDA GPU visible")


def test_a_broken_cuda_stack_is_exit_2(monkeypatch, capsys, tmp_path):
    def broken():
        raise RuntimeError("driver exploded\nmore")

    fake_host(monkeypatch, tmp_path)
    monkeypatch.setattr(gpumod, "device_count", broken)
    assert info.run(SimpleNamespace(json=False)) == 2
    got = capsys.readouterr()
    assert got.err.strip() == "ipcbench: error: no usable CUDA GPU here (RuntimeError: driver exploded)"
    assert "  ok  ptrace_scope: 1 (restricted)" in got.out


def test_report_text(monkeypatch, capsys):
    monkeypatch.setattr(gpumod, "device_count", lambda: 2)
    monkeypatch.setattr(info, "collect", lambda: DATA)
    assert info.run(SimpleNamespace(json=False)) == 0
    out = capsys.readouterr().out
    assert "driver 570.1  CUDA driver API 12080  runtime 13020" in out and "MPI: MPICH 5" in out
    assert "  0  NVIDIA H200 with a very  9.0   132   150.0Gi  00000000:1b:00.0 GPU-aaaa" in out
    assert "GPU 0: legacy yes, events yes, pools yes, posix-fd yes, UVA yes" in out
    assert "GPU 1: legacy no (cudaErrorNotSupported), events no, pools no, posix-fd no, UVA yes" in out
    assert "GPU 0: vmm yes, granularity 2M minimum / 2M recommended\n" in out
    assert "GPU 1: vmm no (GPU 1 cannot export cuMemCreate allocations as POSIX file descriptors)\n" in out
    assert out.index(info.READINESS_HEAD) < out.index("IPC features:")
    assert "  ??  PID namespace: pid:[4026532601], not the host's: compare it\n" in out
    assert "  ok  MIG, GPU 0: off: the GPU is one device to every rank\n" in out
    assert "  NO  MIG, GPU 1: on: no CUDA IPC or P2P across MIG instances" in out
    assert ("  NO  fabric handles, GPU 0: supported by the device; NOT permitted here (CUDA_ERROR_NOT_PERMITTED: no "
            "IMEX channel, /dev/nvidia-caps-imex-channels absent): fabric handles carry memory") in out
    assert "  NO  fabric handles, GPU 1: not supported by the device (GPU 1 does not support fabric handles)" in out
    assert "    0     -  yes" in out and "    1    NO    -" in out
    p2p = out.index("    1    NO    -\n") + len("    1    NO    -\n")
    assert out[p2p:].startswith("  NO  P2P, GPU 1 -> GPU 0: none: GPU 1 cannot reach GPU 0's memory directly")
    assert out.count("P2P, GPU") == 1
    assert "GPU 0 -> GPU 1: nvswitch NVLink 4.0 x18  peak  450.0 GB/s, ceiling  478.1 GB/s" in out
    assert "GPU 1 -> GPU 0: PCIe gen5 x16: rate unknown" in out
    assert "GPU 0 -> GPU 2: PCIe gen5 x16            peak   63.0 GB/s, ceiling   63.0 GB/s" in out
    assert "GPU 2 -> GPU 0: unknown (cannot tell NVSwitch from PCIe: why): no peak, no ceiling" in out
    assert ("GPU 0: 18 active NVLinks: 0 to these GPUs, 18 to switches, 0 to CPUs, 0 not named by NVML (NVML "
            "version enum 6), PCIe gen5 x16 (max gen5 x16)") in out


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


def fake_vmm(monkeypatch, vmm_ok=True, fabric_ok=False, broken=None, permitted=NOT_PERMITTED, context=None):
    """ipc/vmm's driver-attribute checks and fabric probe, answered without a driver (or failing with
    `broken`; `context`: what ensure_context raises). Returns the calls of ensure_context and the probe."""
    from ipcbench.ipc import vmm

    calls = []

    def answer(ok, why):
        def check(index):
            if broken is not None:
                raise broken
            return (True, None) if ok else (False, why.format(index))
        return check

    def ensure_context(index, rank):
        calls.append(("ensure_context", index, rank))
        if context is not None:
            raise context

    monkeypatch.setattr(vmm, "vmm_support", answer(vmm_ok, "GPU {} does not support CUDA VMM"))
    monkeypatch.setattr(vmm, "fabric_support", answer(fabric_ok, "GPU {} does not support fabric handles"))
    monkeypatch.setattr(vmm, "granularity", lambda index: (2 << 20, 2 << 20))
    monkeypatch.setattr(vmm, "ensure_context", ensure_context)
    monkeypatch.setattr(vmm, "fabric_permitted", lambda index: calls.append(("fabric_permitted", index)) or permitted)
    return calls


ATTRS = {41: 1, 115: 1, 119: 0x9}  # unified addressing, pools, handle types POSIX fd | fabric


def test_features_of_a_capable_device(monkeypatch, tmp_path):
    from fakes import FakeCudaIpc
    from ipcbench.ipc import event_files

    def take_handle(self, ev, real=FakeCudaIpc.ipcGetEventHandle):  # the driver's file, as on the GPU image
        (tmp_path / f"cuda.shm.0.{os.getpid():x}.1").touch()
        return real(self, ev)

    monkeypatch.setattr(FakeCudaIpc, "ipcGetEventHandle", take_handle)
    monkeypatch.setattr(event_files, "SHM_DIR", str(tmp_path))
    node = fake_cuda(monkeypatch, ATTRS)
    assert info._features(0) == {"unified_addressing": 1, "memory_pools": 1, "pool_handle_types": 9,
                                 "pool_posix_fd": True, "legacy_ipc": True, "event_ipc": True, "vmm": True,
                                 "vmm_granularity": [2 << 20, 2 << 20],
                                 "fabric_handles": "no (GPU 0 does not support fabric handles)",
                                 "fabric_permitted": None}
    assert node.memory.live() == set()  # the probe buffer was freed
    assert list(tmp_path.iterdir()) == []  # and its event's file in /dev/shm removed (issue 43)


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
    monkeypatch.setattr(gpumod, "device_info",
                        lambda i: gpumod.GpuInfo(i, "g", f"GPU-{i}", f"0000:0{i}:00.0", 1, 1, "9.0"))
    monkeypatch.setattr(runtime, "deviceCanAccessPeer", lambda i, j: 0)
    monkeypatch.setattr(topology, "_nvml", lambda: (_ for _ in ()).throw(OSError("no NVML here")))
    monkeypatch.setattr(meta, "library_versions", lambda: {"mpi4py": "x"})
    data = info.collect()
    assert [g["uuid"] for g in data["gpus"]] == ["GPU-0", "GPU-1"]
    assert all(g["features"]["legacy_ipc"] is True for g in data["gpus"])
    assert data["p2p_matrix"] == [[1, 0], [0, 1]]
    assert data["topology"] == {"nvml": False, "error": "no NVML here", "links": []}
    ready = data["readiness"]
    assert [i["name"] for i in ready] == ["pid_namespace", "ipc_namespace", "dev_shm", "event_files", "ptrace_scope",
                                          "mig", "mig", "fabric_handles", "fabric_handles", "p2p", "p2p"]
    assert [i["value"] for i in ready if i["name"] == "mig"] == ["unknown (no NVML)"] * 2
    assert [i["facts"]["gpu"] for i in ready if i["name"] == "fabric_handles"] == [0, 1]
    assert [(i["facts"]["src_gpu"], i["facts"]["dst_gpu"]) for i in ready if i["name"] == "p2p"] == [(0, 1), (1, 0)]
    assert data["versions"]["mpi4py"] == "x" and "cuda_runtime" in data["versions"]


def test_vmm_features_without_support_or_driver(monkeypatch):
    """No VMM: no granularity; a driver that cannot answer (cuda.bindings finds no libcuda) is a "no" that
    names the error, not a crash of `ipcbench info`."""
    calls = fake_vmm(monkeypatch, vmm_ok=False, fabric_ok=True)
    assert info._vmm_features(3) == {"vmm": "no (GPU 3 does not support CUDA VMM)", "vmm_granularity": None,
                                     "fabric_handles": True, "fabric_permitted": list(NOT_PERMITTED)}
    assert calls == [("ensure_context", 3, None), ("fabric_permitted", 3)]  # the context first: cuMemCreate needs it
    fake_vmm(monkeypatch, broken=OSError("libcuda.so.1 not found\ndetails"))
    assert info._vmm_features(0) == {"vmm": "no (OSError: libcuda.so.1 not found)", "vmm_granularity": None,
                                     "fabric_handles": "no (OSError: libcuda.so.1 not found)", "fabric_permitted": None}


def test_the_fabric_probe_never_fails_info(monkeypatch):
    """Fabric handles supported: the probe's answer is kept; a context that cannot be made is the probe's
    'not known', not an error of `ipcbench info`; unsupported: nothing is tried."""
    from ipcbench.errors import ShareError

    fake_vmm(monkeypatch, fabric_ok=True, permitted=(True, "permitted"))
    assert info._vmm_features(0)["fabric_permitted"] == [True, "permitted"]
    calls = fake_vmm(monkeypatch, fabric_ok=True, context=ShareError("cudaSetDevice(0) failed (x)"))
    assert info._vmm_features(0)["fabric_permitted"] == [None, "no (ShareError: cudaSetDevice(0) failed (x))"]
    assert calls == [("ensure_context", 0, None)]
    calls = fake_vmm(monkeypatch, fabric_ok=False)
    assert info._vmm_features(0)["fabric_permitted"] is None and calls == []
