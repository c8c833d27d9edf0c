"""NVML topology: how each GPU pair is linked, and that link's peak and ceiling per direction.

The kind of a pair comes from what NVML says is at the far end of each active NVLink
(nvmlDeviceGetNvLinkRemoteDeviceType): links whose far end is the other GPU are direct (`nvlink`, counted
from whichever side names more of them); a pair with no direct link is `nvswitch` only when both GPUs
have links to a switch (the smaller of the two counts: a pair can use no more links than either GPU has
on the switch); otherwise `pcie`. Where NVML cannot name a far end that is none of these GPUs (an old
driver or binding without the call, or a reading of "unknown"), a pair that might reach a switch through
it is `unknown`, never a guess, and `kind_reason` says why: a health gate must not judge it, and the pair
mode treats it as not proven disjoint. Rates: core/link_rates.py. No NVML (or no GPU) -> an empty table,
never an error: the report leaves out the % of peak. So pynvml is imported in `_nvml`, inside the callers'
tries: a missing module is one more way of having no NVML.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ipcbench.core.link_rates import NVML_ENUM, link_rates

# NVML_NVLINK_DEVICE_TYPE_* (nvml.h; pynvml's constants of the same names): what a link's far end is.
REMOTE_GPU, REMOTE_IBMNPU, REMOTE_SWITCH, REMOTE_UNKNOWN = 0, 1, 2, 255
REMOTE_NAME = {REMOTE_GPU: "gpu", REMOTE_IBMNPU: "cpu", REMOTE_SWITCH: "switch"}  # anything else: "unknown"


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


@dataclass
class FarEnds:
    """One GPU's active NVLinks by what is at their far end: GPUs of this table (by bus id), switches,
    CPUs (IBM NPU), and links NVML does not name (`unknown`; `unknown_ends`: their bus ids and why)."""

    gpus: Counter = field(default_factory=Counter)
    switch: int = 0
    cpu: int = 0
    unknown: int = 0
    unknown_ends: dict = field(default_factory=dict)  # far-end bus id -> what NVML said of its type

    @property
    def unknown_why(self) -> str:
        why = sorted(set(self.unknown_ends.values()))
        return f"far ends {', '.join(sorted(self.unknown_ends))}, none of these GPUs; {'; '.join(why)}"


def far_ends(remote_types: list[str | None], remote_buses: list[str], our_buses: list[str]) -> FarEnds:
    """Sort one GPU's links by far end. remote_types[k] is _remote_type's answer; remote_buses[k] the far
    end's normalized bus id ('?' unread). A link NVML cannot type still counts as direct when its far end
    is one of our GPUs; a GPU outside the table (not visible to this run) is no path between our GPUs and
    is left out."""
    ends = FarEnds()
    ours = set(our_buses)
    for kind, bus in zip(remote_types, remote_buses):
        if kind == "switch":
            ends.switch += 1
        elif kind == "cpu":
            ends.cpu += 1
        elif bus in ours:
            ends.gpus[bus] += 1
        elif kind == "gpu" and bus != "?":
            continue  # a GPU this run does not see
        else:
            ends.unknown += 1
            ends.unknown_ends[bus] = ("a GPU, bus id unread" if kind == "gpu" else
                                      "remote device type UNKNOWN" if kind == "unknown" else
                                      "remote device type not readable here")
    return ends


def classify_pair(i: int, j: int, a: FarEnds, b: FarEnds, bus_a: str, bus_b: str) -> tuple[str, int, str]:
    """(kind, nvlink_count, kind_reason) of GPU pair i, j from both GPUs' far ends."""
    direct = max(a.gpus[bus_b], b.gpus[bus_a])
    if direct:
        return "nvlink", direct, f"{direct} direct NVLinks between GPU {i} and GPU {j}"
    if (a.unknown and (b.switch or b.unknown)) or (b.unknown and (a.switch or a.unknown)):
        g, e = (i, a) if a.unknown else (j, b)
        return "unknown", 0, (f"cannot tell NVSwitch from PCIe: GPU {g} has {e.unknown} NVLinks whose far end "
                              f"NVML does not name ({e.unknown_why})")
    if a.switch and b.switch:
        n = min(a.switch, b.switch)
        return "nvswitch", n, f"both on NVSwitch: min({a.switch}, {b.switch}) switch links"
    if a.cpu and b.cpu:
        return "unknown", 0, ("both GPUs have NVLinks to a CPU (IBM NPU): the path may run over NVLink through "
                              "the CPUs, which this table does not model")
    return "pcie", 0, "no NVLink path between them: PCIe"


def _remote_type(nv, h, link) -> str | None:
    """What is at the far end of a link: 'gpu' | 'switch' | 'cpu', 'unknown' where NVML answers so, None
    where this binding or driver cannot ask (no nvmlDeviceGetNvLinkRemoteDeviceType in the binding, or an
    NVML error such as NVML_ERROR_FUNCTION_NOT_FOUND from a driver older than the call)."""
    ask = getattr(nv, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
    if ask is None:
        return None
    try:
        return REMOTE_NAME.get(int(ask(h, link)), "unknown")
    except nv.NVMLError:
        return None


def _read_gpu(nv, h) -> dict:
    """One GPU's NVML facts: active links, each link's far end (bus, type), NVLink version, PCIe."""
    active, remotes, types, version = 0, [], [], None
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
        types.append(_remote_type(nv, h, link))
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
    return dict(active=active, remotes=remotes, remote_types=types, version=version, pcie_gen=gen,
                pcie_width=width, pcie_max_gen=maxgen, pcie_max_width=maxwidth)


def link_entry(i: int, j: int, a: dict, b: dict, ends_a: FarEnds, ends_b: FarEnds, bus_a: str, bus_b: str) -> dict:
    """The link entry of pair i -> j (meta.json's topology links): its kind and why, the facts its rates
    come from (NVLink count and version, PCIe generation and width: the smaller of the two GPUs' maxima,
    as the link trains down when idle) and the rates (core/link_rates.LinkRates.as_dict)."""
    kind, count, reason = classify_pair(i, j, ends_a, ends_b, bus_a, bus_b)
    gen = min(a["pcie_max_gen"], b["pcie_max_gen"]) if a["pcie_max_gen"] and b["pcie_max_gen"] else None
    width = min(a["pcie_max_width"] or 0, b["pcie_max_width"] or 0) or None
    version = NVML_ENUM.get(a["version"] or b["version"] or 0)
    entry = {"src_gpu": i, "dst_gpu": j, "kind": kind, "kind_reason": reason, "nvlink_count": count,
             "nvlink_version": version, "pcie_gen": gen, "pcie_width": width}
    entry.update(link_rates(kind, count, version, gen, width).as_dict())
    return entry


def gpu_links(pci_bus_ids: list[str]) -> dict:
    """{'nvml': bool, 'driver': ..., 'links': [...], 'per_gpu': [...]} for the GPUs given in CUDA order by
    PCI bus id: one link entry per ordered pair (link_entry)."""
    try:
        nv = _nvml()
    except Exception as e:  # no library, no driver, no permission
        return {"nvml": False, "error": str(e), "links": []}
    try:
        handles = [nv.nvmlDeviceGetHandleByPciBusId(b.encode() if isinstance(b, str) else b) for b in pci_bus_ids]
        per_gpu = [_read_gpu(nv, h) for h in handles]
        buses = [_norm_bus(b) for b in pci_bus_ids]
        ends = [far_ends(g["remote_types"], g["remotes"], buses) for g in per_gpu]
        for g, far in zip(per_gpu, ends):
            g.update(gpu_links=sum(far.gpus.values()), switch_links=far.switch, cpu_links=far.cpu,
                     unknown_links=far.unknown)
        links = [link_entry(i, j, per_gpu[i], per_gpu[j], ends[i], ends[j], buses[i], buses[j])
                 for i in range(len(per_gpu)) for j in range(len(per_gpu)) if i != j]
        return {"nvml": True, "driver": _s(nv.nvmlSystemGetDriverVersion()), "links": links, "per_gpu": per_gpu}
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


def nvml_mig_modes(pci_bus_ids: list[str]) -> list[dict] | None:
    """Each GPU's MIG mode (nvmlDeviceGetMigMode): {'current': 0|1, 'pending': 0|1}, or {'error': ...} where
    NVML refuses (NVML_ERROR_NOT_SUPPORTED: a GPU without MIG); None without NVML."""
    def ask(nv):
        out: list[dict] = []
        for b in pci_bus_ids:
            try:
                current, pending = nv.nvmlDeviceGetMigMode(nv.nvmlDeviceGetHandleByPciBusId(b.encode()))
                out.append({"current": int(current), "pending": int(pending)})
            except nv.NVMLError as e:
                out.append({"current": None, "pending": None, "error": _s(e) or type(e).__name__})
        return out

    return _nvml_query(ask)


def nvml_link_kinds() -> list[str] | None:
    """The link kind (nvlink, nvswitch, pcie, unknown) of every GPU pair NVML sees, without CUDA (for the
    dry run and the pair mode: core/schedule runs rounds only where every kind is nvswitch); None without
    NVML or with fewer than two GPUs."""
    buses = _nvml_query(lambda nv: [_s(nv.nvmlDeviceGetPciInfo(nv.nvmlDeviceGetHandleByIndex(i)).busId)
                                    for i in range(nv.nvmlDeviceGetCount())])
    if buses is None or len(buses) < 2:
        return None
    table = gpu_links(buses)
    return [ln["kind"] for ln in table.get("links", [])] or None
