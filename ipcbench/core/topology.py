"""NVML topology: how each GPU pair is linked and the theoretical peak of that link, per direction.

NVLink: active links x per-link rate (by NVLink generation); through an NVSwitch every GPU pair gets
the smaller GPU's link count. PCIe: generation x width. No NVML (or no GPU) -> an empty table, never
an error: the report simply leaves out the % of peak.
"""

from __future__ import annotations

# GB/s per link per direction, by NVML's nvmlDeviceGetNvLinkVersion enum (NVML_NVLINK_VERSION_x_y):
# 1 = 1.0 (P100), 2 = 2.0 / 3 = 2.2 (V100), 4 = 3.0 / 5 = 3.1 (A100), 6 = 4.0 (H100/H200: 26.5625 GB/s,
# which `nvidia-smi nvlink -s` prints as 26.562), 7 = 5.0 (B200). Seen on an H200: 18 links, enum 6.
NVLINK_GBPS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 25.0, 6: 26.5625, 7: 50.0}
NVLINK_NAME = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0"}
# GB/s per lane per direction after encoding, by PCIe generation.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def _nvml():
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def _norm_bus(bus: str) -> str:
    """NVML and CUDA spell PCI ids differently (domain width, case): compare on bus:device.function."""
    b = bus.strip().lower()
    parts = b.split(":")
    return ":".join(parts[-2:]) if len(parts) >= 2 else b


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def gpu_links(pci_bus_ids: list[str]) -> dict:
    """{'p2p_nvml': ..., 'links': [...], 'nvml': bool} for the GPUs given in CUDA order by PCI bus id."""
    try:
        nv = _nvml()
    except Exception as e:  # no library, no driver, no permission
        return {"nvml": False, "error": str(e), "links": []}
    try:
        handles = [nv.nvmlDeviceGetHandleByPciBusId(b.encode() if isinstance(b, str) else b) for b in pci_bus_ids]
        per_gpu = []
        for h in handles:
            active, remotes, version = 0, [], None
            for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
                try:
                    if nv.nvmlDeviceGetNvLinkState(h, link) != nv.NVML_FEATURE_ENABLED:
                        continue
                except nv.NVMLError:
                    break
                active += 1
                try:
                    remotes.append(_norm_bus(_s(nv.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)))
                except nv.NVMLError:
                    remotes.append("?")
                if version is None:
                    try:
                        version = nv.nvmlDeviceGetNvLinkVersion(h, link)
                    except nv.NVMLError:
                        pass
            try:
                gen, width = nv.nvmlDeviceGetCurrPcieLinkGeneration(h), nv.nvmlDeviceGetCurrPcieLinkWidth(h)
                maxgen, maxwidth = nv.nvmlDeviceGetMaxPcieLinkGeneration(h), nv.nvmlDeviceGetMaxPcieLinkWidth(h)
            except nv.NVMLError:
                gen = width = maxgen = maxwidth = None
            per_gpu.append(dict(active=active, remotes=remotes, version=version, pcie_gen=gen, pcie_width=width,
                                pcie_max_gen=maxgen, pcie_max_width=maxwidth))
        buses = [_norm_bus(b) for b in pci_bus_ids]
        links = []
        for i, a in enumerate(per_gpu):
            for j, b in enumerate(per_gpu):
                if i == j:
                    continue
                direct = sum(1 for r in a["remotes"] if r == buses[j])
                rate = NVLINK_GBPS.get(a["version"] or 0)
                gens = (a["pcie_max_gen"], b["pcie_max_gen"])
                gen = min(gens) if all(gens) else None
                width = min(a["pcie_max_width"] or 0, b["pcie_max_width"] or 0) or None
                entry = {"src_gpu": i, "dst_gpu": j, "pcie_gen": gen, "pcie_width": width}
                entry["nvlink_version"] = NVLINK_NAME.get(a["version"] or 0)
                if direct:
                    entry.update(kind="nvlink", nvlink_count=direct, per_link_gbps=rate,
                                 peak_gbps=direct * rate if rate else None)
                elif a["active"] and b["active"]:
                    n = min(a["active"], b["active"])
                    entry.update(kind="nvswitch", nvlink_count=n, per_link_gbps=rate,
                                 peak_gbps=n * rate if rate else None)
                else:
                    lane = PCIE_LANE_GBPS.get(gen or 0, 0.0)
                    entry.update(kind="pcie", nvlink_count=0, per_link_gbps=None,
                                 peak_gbps=(lane * width) if width else None)
                links.append(entry)
        return {"nvml": True, "driver": _s(nv.nvmlSystemGetDriverVersion()), "links": links,
                "per_gpu": per_gpu}
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass


def _nvml_query(ask):
    """ask(pynvml) in one NVML session (init, ask, shutdown); None when NVML is missing or the query fails
    (the callers' information is optional: a run without NVML still measures)."""
    try:
        nv = _nvml()
        try:
            return ask(nv)
        finally:
            nv.nvmlShutdown()
    except Exception:
        return None


def nvml_driver_version() -> str | None:
    return _nvml_query(lambda nv: _s(nv.nvmlSystemGetDriverVersion()))


def nvml_gpu_count() -> int | None:
    return _nvml_query(lambda nv: int(nv.nvmlDeviceGetCount()))


def nvml_link_kinds() -> list[str] | None:
    """The link kind (nvlink, nvswitch, pcie) of every GPU pair NVML sees, without CUDA (for the dry run);
    None without NVML or with fewer than two GPUs."""
    buses = _nvml_query(lambda nv: [_s(nv.nvmlDeviceGetPciInfo(nv.nvmlDeviceGetHandleByIndex(i)).busId)
                                    for i in range(nv.nvmlDeviceGetCount())])
    if buses is None or len(buses) < 2:
        return None
    table = gpu_links(buses)
    return [ln["kind"] for ln in table.get("links", [])] or None
