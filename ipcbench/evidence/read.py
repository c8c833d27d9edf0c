"""One snapshot of this host's GPUs through NVML (nvidia-ml-py, `import pynvml`): the node's evidence.

Each item is read on its own: an item the driver, the binding or the VM does not give (NVML_ERROR_NOT_SUPPORTED,
NO_PERMISSION, FUNCTION_NOT_FOUND; a binding without the function: AttributeError) is `Item.na(why)`, never a
value and never ok, and the next item is still read. No pynvml module, no NVML library or an nvmlInit that fails
(a login node, a container without the driver's library) give a Snapshot whose `missing` says why, with no GPU:
every item of it is then missing. NVML is optional everywhere: a run without it still measures.

What is read per GPU, and from which call (pynvml's names; docs/architecture.md, "Node evidence"):

- links: nvmlDeviceGetNvLinkState for links 0..NVML_NVLINK_MAX_LINKS-1, the links that answer (past the GPU's
  last link a driver answers INVALID_ARGUMENT or NOT_SUPPORTED); nvmlDeviceGetNvLinkVersion, named as
  catalogue/links.NVML_ENUM names it.
- link speed: field NVML_FI_DEV_NVLINK_GET_SPEED per link (MB/s), else NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON;
  where neither answers, the generation's rate from catalogue/links.py is kept beside `missing` (shown, never ok).
- link errors: nvmlDeviceGetNvLinkErrorCounter (replay, recovery, crc_flit, crc_data); where it gives no replay
  or recovery count, the fields NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY / _RECOVERY / _CRC ("crc") per link.
- PCIe: nvmlDeviceGetCurrPcieLinkGeneration / Width, nvmlDeviceGetMaxPcieLinkGeneration / Width.
- clock events: nvmlDeviceGetCurrentClocksEventReasons (an older binding: ...ClocksThrottleReasons) as names;
  their time: fields NVML_FI_DEV_CLOCKS_EVENT_REASON_* and NVML_FI_DEV_PERF_POLICY_* (cumulative ns).
- ECC: nvmlDeviceGetTotalEccErrors (volatile; corrected, uncorrected). Row remaps: nvmlDeviceGetRemappedRows
  (corrected, uncorrected, pending, failure).
- processes: nvmlDeviceGetComputeRunningProcesses (pid, usedGpuMemory); the name from nvmlSystemGetProcessName,
  else /proc/PID/comm.

Cost: one NVML session (init, the reads, shutdown); per GPU about 6 calls per NVLink answered (state, version,
four error counters) plus two field-value calls and ten others, so 18 links make ~120 calls. With the fake NVML
of tests/test_evidence_read.py 8 GPUs take well under 0.1 s; on a real driver each call is a driver ioctl (tens
of microseconds to a millisecond): run `python -m ipcbench.evidence.read` to see this host's time ("read_s").
The runner reads it on each node's local rank 0 outside every timed region (evidence/take.py).
"""

from __future__ import annotations

import json
import socket
import sys
import time
from typing import Any, Callable

from ipcbench.catalogue.links import NVLINK, NVML_ENUM
from ipcbench.evidence.model import GPU_ITEMS, GpuReading, Item, LinkReading, ProcessReading, Snapshot

# NVML return codes (nvml.h; pynvml's NVML_ERROR_*) -> why an item is missing
NOT_SUPPORTED = "not supported by the driver"
WHY = {1: "NVML not initialised", 2: "invalid argument", 3: NOT_SUPPORTED, 4: "no permission",
       13: "not in this driver's NVML (function not found)", 15: "GPU is lost", 999: "unknown NVML error"}
NOT_IN_BINDING = "not in this pynvml binding"

# nvmlDeviceGetNvLinkErrorCounter's counters (NVML_NVLINK_ERROR_DL_*)
ERROR_COUNTERS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}
# per-link field ids for the same counters on drivers that give them as fields (scopeId = link)
ERROR_FIELDS = {"replay": ("NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY", 161),
                "recovery": ("NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY", 162),
                "crc": ("NVML_FI_DEV_NVLINK_ERROR_DL_CRC", 163)}
SPEED_FIELD = ("NVML_FI_DEV_NVLINK_GET_SPEED", 164)  # MB/s, scopeId = link
SPEED_COMMON_FIELD = ("NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON", 90)  # MB/s, every link
# nvmlClocksEventReason* bits (the same bits as nvmlClocksThrottleReason*) -> the recorded names
CLOCK_EVENT_BITS = {0x1: "idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                    0x80: "hw_power_brake", 0x100: "display_clock", 0x200: "board_limit", 0x400: "reliability"}
# cumulative time (ns) a reason held the clocks down, as field values: the newer names where the binding has them,
# the older NVML_FI_DEV_PERF_POLICY_* (same ids for power and sync boost) otherwise
CLOCK_EVENT_FIELDS = {"sw_power_cap": ("NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP", 74),
                      "thermal": ("NVML_FI_DEV_PERF_POLICY_THERMAL", 75),
                      "sync_boost": ("NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST", 76),
                      "board_limit": ("NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT", 77),
                      "reliability": ("NVML_FI_DEV_PERF_POLICY_RELIABILITY", 79),
                      "sw_thermal_slowdown": ("NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN", 269),
                      "hw_thermal_slowdown": ("NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN", 270),
                      "hw_power_brake": ("NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN", 271)}
MAX_LINKS = 18  # where the binding has no NVML_NVLINK_MAX_LINKS (H100/H200/B200 SXM have 18)


def _nvml():
    """pynvml, initialised (the caller shuts it down); raises where there is no NVML."""
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def why(e: BaseException) -> str:
    """Why an item is missing, from what NVML or the binding raised."""
    if isinstance(e, AttributeError):
        return NOT_IN_BINDING
    code = getattr(e, "value", None)
    if code in WHY:
        return WHY[code]
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _item(ask: Callable[[], Any], convert: Callable[[Any], Any] = lambda v: v) -> Item:
    """One reading on its own try: its value, or why not."""
    try:
        return Item(convert(ask()))
    except Exception as e:  # NVMLError, AttributeError (binding without the call), a malformed answer
        return Item.na(why(e))


def _s(v) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def _field_value(f) -> Any:
    """A c_nvmlFieldValue_t's value by its valueType (NVML_VALUE_TYPE_*)."""
    kind = int(f.valueType)
    name = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(kind, "ullVal")
    return getattr(f.value, name)


def fields(nv, h, wanted: list[tuple[int, int]]) -> dict[tuple[int, int], Item]:
    """{(field id, scope): Item} from one nvmlDeviceGetFieldValues call; a field the driver refuses is missing
    with its own reason, and a call that fails makes every field missing with that call's reason."""
    if not wanted:
        return {}
    try:
        got = nv.nvmlDeviceGetFieldValues(h, list(wanted))
    except Exception as e:
        return {k: Item.na(why(e)) for k in wanted}
    out = {}
    for k, f in zip(wanted, got):
        ret = int(getattr(f, "nvmlReturn", 0))
        out[k] = Item(_field_value(f)) if ret == 0 else Item.na(WHY.get(ret, f"NVML error {ret}"))
    return out


def _fid(nv, name_and_id: tuple[str, int]) -> int:
    name, fallback = name_and_id
    return int(getattr(nv, name, fallback))


def link_states(nv, h) -> Item:
    """[(link, active Item)] of the links of one GPU that answer nvmlDeviceGetNvLinkState (a link that fails
    between two that answer is kept, its state missing); missing, with the driver's reason, where none does."""
    states: list[tuple[int, Item]] = []
    for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", MAX_LINKS))):
        states.append((link, _item(lambda: nv.nvmlDeviceGetNvLinkState(h, link),
                                   lambda v: int(v) == int(getattr(nv, "NVML_FEATURE_ENABLED", 1)))))
    last_why = NOT_SUPPORTED
    while states and not states[-1][1].ok:  # past the GPU's last link the driver refuses
        last_why = states.pop()[1].missing
    return Item(states) if states else Item.na(last_why)


def decode_reasons(mask: int) -> list[str]:
    """Names of the clocks-event (throttle) reason bits set in `mask`; an unknown bit by its value."""
    return [CLOCK_EVENT_BITS.get(1 << b, f"0x{1 << b:x}") for b in range(64) if mask >> b & 1]


def _clock_events(nv, h) -> list[str]:
    """The active clocks-event reasons; the older ...ClocksThrottleReasons where the binding or the driver has no
    ...ClocksEventReasons (the same bits). Raises the first call's error when neither answers."""
    try:
        mask = nv.nvmlDeviceGetCurrentClocksEventReasons(h)
    except Exception as first:
        try:
            mask = nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)
        except Exception:
            raise first from None
    return decode_reasons(int(mask))


def _processes(nv, h) -> list[ProcessReading]:
    out = []
    for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
        pid = int(p.pid)
        used = getattr(p, "usedGpuMemory", None)
        out.append(ProcessReading(pid, int(used) if used is not None else None, process_name(nv, pid)))
    return out


def process_name(nv, pid: int) -> str:
    """The process's name: NVML's, else /proc/PID/comm, else "" (another PID namespace, gone)."""
    try:
        name = _s(nv.nvmlSystemGetProcessName(pid)).strip()
        if name:
            return name
    except Exception:
        pass
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def _links_with_rates(nv, h, states: list[tuple[int, Item]]) -> list[LinkReading]:
    """Every link that answered its state, with its version, speed and error counters (each on its own try)."""
    links = [ln for ln, _ in states]
    speed_id, common_id = _fid(nv, SPEED_FIELD), _fid(nv, SPEED_COMMON_FIELD)
    err_ids = {name: _fid(nv, f) for name, f in ERROR_FIELDS.items()}
    wanted = [(speed_id, ln) for ln in links] + [(common_id, 0)]
    counters: dict[int, dict[str, Item]] = {}
    for ln in links:
        counters[ln] = {name: _item(lambda: nv.nvmlDeviceGetNvLinkErrorCounter(h, ln, code), int)
                        for name, code in ERROR_COUNTERS.items()}
        if not counters[ln]["replay"].ok or not counters[ln]["recovery"].ok:
            wanted += [(err_ids[name], ln) for name in ERROR_FIELDS]
    got = fields(nv, h, wanted)
    out = []
    for ln, active in states:
        version = _item(lambda: nv.nvmlDeviceGetNvLinkVersion(h, ln),
                        lambda v: NVML_ENUM.get(int(v)) or f"enum {int(v)}")
        speed = _speed(got.get((speed_id, ln)), got.get((common_id, 0)), version)
        errors = {k: c.value for k, c in counters[ln].items() if c.ok}
        for name in ERROR_FIELDS:
            f = got.get((err_ids[name], ln))
            if f is not None and f.ok and name not in errors:
                errors[name] = int(f.value)
        reasons = sorted({c.missing for c in counters[ln].values() if not c.ok})
        out.append(LinkReading(ln, active, version, speed,
                               Item(errors) if errors else Item.na("; ".join(reasons) or NOT_SUPPORTED)))
    return out


def _speed(per_link: Item | None, common: Item | None, version: Item) -> Item:
    """The link's rate per direction in GB/s as NVML reads it (MB/s / 1000); where NVML gives none, the
    generation's signalling rate from the catalogue beside why it was not read (a value that is not ok)."""
    for f in (per_link, common):
        if f is not None and f.ok and f.value:
            return Item(round(float(f.value) / 1000, 6))
    missing = (per_link.missing if per_link is not None and not per_link.ok else NOT_SUPPORTED)
    gen = NVLINK.get(version.value) if version.ok else None
    if gen is not None and gen.ceiling_gbps is not None:
        return Item(gen.ceiling_gbps, f"not read ({missing}): NVLink {gen.name}'s rate per link from the catalogue")
    return Item.na(missing)


def read_gpu(nv, index: int) -> GpuReading:
    """Every item of GPU `index` (NVML's numbering), each on its own try."""
    h = nv.nvmlDeviceGetHandleByIndex(index)
    ident = {k: _item(ask, _s) for k, ask in (("uuid", lambda: nv.nvmlDeviceGetUUID(h)),
                                               ("pci_bus_id", lambda: nv.nvmlDeviceGetPciInfo(h).busId),
                                               ("model", lambda: nv.nvmlDeviceGetName(h)))}
    states = link_states(nv, h)
    links = _item(lambda: _links_with_rates(nv, h, states.value)) if states.ok else states
    remap = _item(lambda: nv.nvmlDeviceGetRemappedRows(h), lambda v: [int(x) for x in v])  # corr, unc, pend, fail
    clock_ids = {name: _fid(nv, f) for name, f in CLOCK_EVENT_FIELDS.items()}
    clock = fields(nv, h, sorted({(fid, 0) for fid in clock_ids.values()}))
    clock_ns = {name: int(clock[(fid, 0)].value) for name, fid in clock_ids.items() if clock[(fid, 0)].ok}
    volatile = int(getattr(nv, "NVML_VOLATILE_ECC", 0))
    items = {
        "pcie_gen": _item(lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(h), int),
        "pcie_width": _item(lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(h), int),
        "pcie_max_gen": _item(lambda: nv.nvmlDeviceGetMaxPcieLinkGeneration(h), int),
        "pcie_max_width": _item(lambda: nv.nvmlDeviceGetMaxPcieLinkWidth(h), int),
        "clock_events": _item(lambda: _clock_events(nv, h)),
        "clock_event_ns": Item(clock_ns) if clock_ns else Item.na(
            "; ".join(sorted({c.missing for c in clock.values()})) or NOT_SUPPORTED),
        "ecc_uncorrected_volatile": _item(lambda: nv.nvmlDeviceGetTotalEccErrors(
            h, int(getattr(nv, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)), volatile), int),
        "ecc_corrected_volatile": _item(lambda: nv.nvmlDeviceGetTotalEccErrors(
            h, int(getattr(nv, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)), volatile), int),
        "remap_pending": Item(bool(remap.value[2])) if remap.ok else remap,
        "remap_failure": Item(bool(remap.value[3])) if remap.ok else remap,
        "remapped_uncorrectable": Item(remap.value[1]) if remap.ok else remap,
    }
    assert set(items) == set(GPU_ITEMS)
    return GpuReading(index, ident["uuid"].value or "", ident["pci_bus_id"].value or "", ident["model"].value or "",
                      links=links, processes=_item(lambda: _processes(nv, h)), **items)


def read_snapshot(when: str, host: str | None = None, own_pids: list[int] | None = None) -> Snapshot:
    """Every GPU of this host now, in one NVML session; a Snapshot with `missing` set (and no GPU) where there
    is no NVML. Never raises."""
    host = host or socket.gethostname().split(".")[0]
    t = time.time()
    pids = list(own_pids or [])
    try:
        nv = _nvml()
    except Exception as e:  # no module, no library, no driver, no permission
        return Snapshot(host, when, t, [], pids, f"no NVML: {why(e)}")
    try:
        try:
            n = int(nv.nvmlDeviceGetCount())
        except Exception as e:
            return Snapshot(host, when, t, [], pids, f"NVML cannot count the GPUs: {why(e)}")
        gpus = []
        for i in range(n):
            try:
                gpus.append(read_gpu(nv, i))
            except Exception as e:  # no handle for this GPU (lost, no permission): its items all missing
                reason = f"no handle for GPU {i}: {why(e)}"
                nothing: dict[str, Any] = {k: Item.na(reason) for k in GPU_ITEMS + ("links", "processes")}
                gpus.append(GpuReading(i, **nothing))
        return Snapshot(host, when, t, gpus, pids)
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass


def main(argv: list[str] | None = None) -> int:
    """`python -m ipcbench.evidence.read`: this host's snapshot as JSON on stdout (with the seconds it took,
    "read_s"), and on stderr each item that is missing on some GPU, with why: what this driver and VM give."""
    t0 = time.perf_counter()
    snap = read_snapshot("now")
    out = {**snap.as_json(), "read_s": round(time.perf_counter() - t0, 4)}
    print(json.dumps(out, indent=1))
    for line in missing_summary(snap):
        print(line, file=sys.stderr)
    return 0


def missing_summary(snap: Snapshot) -> list[str]:
    """One line per item (and link item) that is missing on some GPU: 'item: missing on N of M GPUs (why)'."""
    if snap.missing:
        return [f"snapshot: {snap.missing}"]
    seen: dict[str, dict[str, int]] = {}

    def note(name: str, item: Item) -> None:
        if not item.ok:
            seen.setdefault(name, {}).setdefault(item.missing, 0)
            seen[name][item.missing] += 1

    for g in snap.gpus:
        for k in GPU_ITEMS + ("links", "processes"):
            note(k, getattr(g, k))
        for ln in g.links.value if g.links.ok else []:
            for k in ("active", "version", "speed_gbps", "errors"):
                note(f"link {k}", getattr(ln, k))
    return [f"{k}: missing {n}x ({w})" for k, reasons in seen.items() for w, n in reasons.items()] or \
        [f"every item read on {len(snap.gpus)} GPU(s)"]


if __name__ == "__main__":
    sys.exit(main())
