"""`ipcbench info`: one process, no MPI. IPC readiness (readiness.py), GPUs, NVML topology, P2P matrix, IPC
feature checks, MPS, versions. Without a GPU it says what it can of the host (namespaces, /dev/shm,
ptrace) and exits 2: IPC itself cannot be checked. So CuPy (core/gpu.py) and cuda.bindings (ipc/vmm.py)
are imported inside the functions that ask the GPU, where a failed import is an answer, not a crash."""

from __future__ import annotations

import json
import sys

from ipcbench import readiness
from ipcbench.core import mps, topology
from ipcbench.ipc import event_files
from ipcbench.readiness import Item
from ipcbench.run import meta as run_meta
from ipcbench.errors import error_line
from ipcbench.sizes import fmt_size


def _features(index: int) -> dict:
    """What this GPU supports for sharing memory across processes (device attributes + a real probe)."""
    from cupy.cuda import runtime

    feats = {}
    attr = {
        "unified_addressing": getattr(runtime, "cudaDevAttrUnifiedAddressing", 41),
        "memory_pools": getattr(runtime, "cudaDevAttrMemoryPoolsSupported", 115),
        "pool_handle_types": getattr(runtime, "cudaDevAttrMemoryPoolSupportedHandleTypes", 119),
    }
    for k, a in attr.items():
        try:
            feats[k] = runtime.deviceGetAttribute(a, index)
        except runtime.CUDARuntimeError:
            feats[k] = None
    ht = feats.get("pool_handle_types") or 0
    feats["pool_posix_fd"] = bool(ht & 0x1)
    runtime.setDevice(index)
    try:
        ptr = runtime.malloc(1 << 20)
        try:
            runtime.ipcGetMemHandle(ptr)
            feats["legacy_ipc"] = True
        except runtime.CUDARuntimeError as e:
            feats["legacy_ipc"] = f"no ({e})"
        finally:
            runtime.free(ptr)
        ev = runtime.eventCreateWithFlags(runtime.eventInterprocess | runtime.eventDisableTiming)
        try:
            runtime.ipcGetEventHandle(ev)
            feats["event_ipc"] = True
        except runtime.CUDARuntimeError as e:
            feats["event_ipc"] = f"no ({e})"
        finally:
            runtime.eventDestroy(ev)
            event_files.remove_own()  # the file the driver made for the handle outlives the event (issue 43)
    except runtime.CUDARuntimeError as e:
        feats["legacy_ipc"] = f"no ({e})"
    feats.update(_vmm_features(index))
    return feats


def _vmm_features(index: int) -> dict:
    """CUDA virtual memory management (the vmm suite): POSIX-fd sharing, granularity (minimum, recommended)
    from driver attributes; fabric handles: the device attribute (`fabric_handles`) and, where the device
    supports them, whether this process may create one (`fabric_permitted`: vmm.fabric_permitted's answer,
    one small allocation released at once). A driver that cannot answer is a "no"."""

    def no(e) -> str:
        first = (str(e).splitlines() or [""])[0]
        return f"no ({type(e).__name__}: {first})"

    feats: dict = {"vmm": None, "vmm_granularity": None, "fabric_handles": None, "fabric_permitted": None}
    try:
        from ipcbench.ipc import vmm

        ok, why = vmm.vmm_support(index)
        feats["vmm"] = True if ok else f"no ({why})"
        if ok:
            feats["vmm_granularity"] = list(vmm.granularity(index))
        fabric, fwhy = vmm.fabric_support(index)
        feats["fabric_handles"] = True if fabric else f"no ({fwhy})"
        if fabric:
            try:
                vmm.ensure_context(index, None)
                feats["fabric_permitted"] = list(vmm.fabric_permitted(index))
            except Exception as e:  # the probe is optional: say why it did not run
                feats["fabric_permitted"] = [None, no(e)]
    except Exception as e:  # e.g. no libcuda for cuda.bindings: report it, the other checks still count
        for k in ("vmm", "fabric_handles"):
            if feats[k] is None:
                feats[k] = no(e)
    return feats


def _vmm_line(index: int, f: dict) -> str:
    def yn(x) -> str:
        return "yes" if x is True else (x or "unknown")

    gran = f.get("vmm_granularity")
    sizes = f", granularity {fmt_size(gran[0])} minimum / {fmt_size(gran[1])} recommended" if gran else ""
    return f"  GPU {index}: vmm {yn(f.get('vmm'))}{sizes}"


def _mps(index: int) -> dict:
    """Does this process's context on GPU `index` run under MPS (core/mps.py)? What a rank started with
    the same environment would see: status, how it was known, and the raw readings."""
    reading = mps.read(index)
    enabled, source = mps.rank_status(reading)
    return {"enabled": enabled, "source": source, "reading": reading}


def _mps_line(index: int, m: dict) -> str:
    r = m.get("reading", {})
    how = (f"{mps.ATTRIBUTE}={int(r['mps_enabled'])}" if r.get("mps_enabled") is not None
           else f"attribute unreadable: {r.get('error')}; inferred from the control pipe")
    pipe = r.get("pipe_dir") or mps.DEFAULT_PIPE_DIR
    where = "CUDA_MPS_PIPE_DIRECTORY" if r.get("pipe_dir") else "default pipe directory"
    return (f"  GPU {index}: {'on' if m.get('enabled') else 'off'} ({how}), compute mode "
            f"{mps.mode_name(r.get('compute_mode'))}, {where} {pipe}: "
            f"{'control pipe found' if r.get('control_pipe') else 'no control daemon'}")


def collect(host: list | None = None) -> dict:
    """Everything `info` reports, as data: the readiness items (host ones given or read here, then MIG,
    fabric handles and P2P per GPU), GPUs with their features and MPS, the P2P matrix, NVML's links."""
    from ipcbench.core import gpu as gpumod

    host = readiness.host_items() if host is None else host
    n = gpumod.device_count()
    if n == 0:
        return {"gpus": [], "readiness": [i.as_dict() for i in host]}
    from cupy.cuda import runtime

    gpus = [gpumod.device_info(i).as_dict() for i in range(n)]
    for g in gpus:
        g["features"] = _features(g["index"])
        g["mps"] = _mps(g["index"])  # after the probes: this process has a context on the GPU
    p2p = [[1 if i == j else int(runtime.deviceCanAccessPeer(i, j)) for j in range(n)] for i in range(n)]
    buses = [g["pci_bus_id"] for g in gpus]
    links = topology.gpu_links(buses)
    modes = topology.nvml_mig_modes(buses)
    mig: list[dict | None] = list(modes) if modes else [None] * n
    items = [*host, *(readiness.mig_item(g["index"], m) for g, m in zip(gpus, mig)),
             *(readiness.fabric_item(g["index"], g["features"].get("fabric_handles"),
                                     g["features"].get("fabric_permitted")) for g in gpus),
             *readiness.p2p_items(p2p)]
    return {"readiness": [i.as_dict() for i in items], "gpus": gpus, "p2p_matrix": p2p, "topology": links,
            "versions": {**run_meta.cuda_versions(), **run_meta.library_versions()}}


def _readiness_lines(items: list[dict], names: tuple[str, ...] | None = None) -> list[str]:
    return [Item(**i).line() for i in items if names is None or i["name"] in names]


READINESS_HEAD = "IPC readiness (can processes here share GPU memory? ok / NO / ?? = cannot tell)"
READINESS_NAMES = ("pid_namespace", "ipc_namespace", "dev_shm", "event_files", "ptrace_scope", "mig",
                   "fabric_handles")  # P2P: printed under its matrix


def _no_gpu(args, why: str) -> int:
    """No GPU: the host's readiness items (stdout, or the JSON with `error`), then why on stderr; exit 2."""
    host = [i.as_dict() for i in readiness.host_items()]
    if args.json:
        print(json.dumps({"gpus": [], "readiness": host, "error": why}, indent=2, default=str))
    else:
        print(READINESS_HEAD)
        print("\n".join(_readiness_lines(host)))
        print("  ??  GPU items (MIG, fabric handles, P2P): not checked, no GPU")
    print(error_line(why), file=sys.stderr)
    return 2


def _link_line(link: dict) -> str:
    """One line per GPU pair of the NVML link table (core/topology.link_entry): kind, what it is made of,
    peak and ceiling, and why where the kind is unknown."""
    pair = f"  GPU {link['src_gpu']} -> GPU {link['dst_gpu']}: "
    if link["kind"] == "unknown":
        return pair + f"unknown ({link.get('kind_reason')}): no peak, no ceiling"
    if link["kind"] in ("nvlink", "nvswitch"):
        desc = f"{link['kind']} NVLink {link.get('nvlink_version')} x{link['nvlink_count']}"
    else:
        desc = f"PCIe gen{link.get('pcie_gen')} x{link.get('pcie_width')}"
    peak, ceiling = link.get("peak_gbps"), link.get("ceiling_gbps")
    if not peak:
        return pair + f"{desc}: rate unknown"
    return pair + f"{desc:24s} peak {peak:6.1f} GB/s, ceiling " + (f"{ceiling:6.1f} GB/s" if ceiling else "unknown")


def run(args) -> int:
    try:
        import cupy  # noqa: F401
        from ipcbench.core import gpu as gpumod

        n = gpumod.device_count()
    except Exception as e:  # no cupy / no driver
        return _no_gpu(args, f"no usable CUDA GPU here ({type(e).__name__}: {str(e).splitlines()[0]})")
    if n == 0:
        return _no_gpu(args, "no CUDA GPU visible (CUDA_VISIBLE_DEVICES, driver?)")
    data = collect()
    if args.json:
        print(json.dumps(data, indent=2, default=str))
        return 0
    _print_gpus_and_features(data)
    _print_p2p(data)
    return _print_links(data["topology"])


def _print_gpus_and_features(data: dict) -> None:
    """Versions, the GPUs, IPC readiness, IPC features, VMM and MPS, as `ipcbench info` prints them."""
    v = data["versions"]
    print(f"driver {v.get('driver')}  CUDA driver API {v.get('cuda_driver')}  runtime {v.get('cuda_runtime')}  "
          f"cupy {v.get('cupy')}  cuda-python {v.get('cuda_python')}  mpi4py {v.get('mpi4py')}")
    print(f"MPI: {v.get('mpi_library', 'unknown')}")
    print()
    print(f"{'GPU':>3s}  {'name':24s} {'cc':4s} {'SMs':>4s} {'memory':>9s}  {'PCI':16s} uuid")
    for g in data["gpus"]:
        print(f"{g['index']:>3d}  {g['name'][:24]:24s} {g['cc']:4s} {g['sm_count']:>4d} "
              f"{g['memory_bytes'] / 2**30:7.1f}Gi  {g['pci_bus_id']:16s} {g['uuid']}")
    print()
    print(READINESS_HEAD)
    print("\n".join(_readiness_lines(data.get("readiness", []), READINESS_NAMES)))
    print()
    print("IPC features: legacy (cudaIpcMemHandle), event handles, memory pools, POSIX-fd pool handles")
    for g in data["gpus"]:
        f = g["features"]
        yn = lambda x: "yes" if x is True or (isinstance(x, int) and x > 0 and x is not False) else (x or "no")  # noqa: E731
        print(f"  GPU {g['index']}: legacy {yn(f.get('legacy_ipc'))}, events {yn(f.get('event_ipc'))}, "
              f"pools {yn(f.get('memory_pools'))}, posix-fd {yn(f.get('pool_posix_fd'))}, "
              f"UVA {yn(f.get('unified_addressing'))}")
    print()
    print("VMM: cuMemCreate allocations shared as POSIX fds within a node (the vmm suite)")
    for g in data["gpus"]:
        print(_vmm_line(g["index"], g["features"]))
    if any("mps" in g for g in data["gpus"]):
        print()
        print("MPS (processes sharing one GPU: kernels run concurrently under MPS, time-sliced without it)")
        for g in data["gpus"]:
            if "mps" in g:
                print(_mps_line(g["index"], g["mps"]))


def _print_p2p(data: dict) -> None:
    """cudaDeviceCanAccessPeer's matrix and its readiness lines."""
    print()
    n = len(data["gpus"])
    print("P2P access (cudaDeviceCanAccessPeer), row -> column")
    print("      " + "".join(f"{j:>5d}" for j in range(n)))
    for i, row in enumerate(data["p2p_matrix"]):
        print(f"{i:>5d} " + "".join(f"{'-' if i == j else ('yes' if x else 'NO'):>5s}" for j, x in enumerate(row)))
    for line in _readiness_lines(data.get("readiness", []), ("p2p",)):
        print(line)


def _print_links(topo: dict) -> int:
    """NVML's links, their peaks and ceilings, and each GPU's NVLinks and PCIe; exit status 0."""
    print()
    if not topo.get("nvml"):
        print(f"NVML not available: {topo.get('error')}")
        return 0
    print("Links (NVML), per direction: peak (the quoted data rate, what % of peak divides by) and ceiling "
          "(the signalling rate no measurement may exceed); docs/architecture.md, Link rates")
    for link in topo["links"]:
        print(_link_line(link))
    for i, pg in enumerate(topo.get("per_gpu", [])):
        ends = (f": {pg.get('gpu_links', 0)} to these GPUs, {pg.get('switch_links', 0)} to switches, "
                f"{pg.get('cpu_links', 0)} to CPUs, {pg.get('unknown_links', 0)} not named by NVML"
                if pg["active"] and "switch_links" in pg else "")
        print(f"  GPU {i}: {pg['active']} active NVLinks{ends} (NVML version enum {pg['version']}), PCIe "
              f"gen{pg['pcie_gen']} x{pg['pcie_width']} (max gen{pg['pcie_max_gen']} x{pg['pcie_max_width']})")
    return 0
