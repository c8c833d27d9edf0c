"""Node evidence for tests of the reading side (report, compare): snapshots built from plain arguments, and a
recorded run with them written into its meta.json through the record (record/meta.Meta)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

from ipcbench.evidence.model import Evidence, GpuReading, Item, LinkReading, ProcessReading, Snapshot
from ipcbench.record.meta import read_meta

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "tests" / "data" / "h100x2-current" / "all-1"  # a real two-H100 run recorded before the evidence was
NS = "not supported by the driver"


def link(i: int, active: bool = True, replay: int = 0) -> LinkReading:
    return LinkReading(i, Item(active), Item("4.0"), Item(26.562),
                       Item({"replay": replay, "recovery": 0, "crc_flit": 0, "crc_data": 0}))


def gpu(index: int, down: tuple = (), replays: dict | None = None, power_ns: int = 0, width: int = 16,
        processes: list | None = None, events: list | None = None, **items) -> GpuReading:
    base = dict(links=Item([link(k, k not in down, (replays or {}).get(k, 0)) for k in range(18)]),
                pcie_gen=Item(5), pcie_width=Item(width), pcie_max_gen=Item(5), pcie_max_width=Item(16),
                clock_events=Item(events or []), clock_event_ns=Item({"sw_power_cap": power_ns,
                                                                      "hw_thermal_slowdown": 0}),
                ecc_uncorrected_volatile=Item(0), ecc_corrected_volatile=Item(0), remap_pending=Item(False),
                remap_failure=Item(False), remapped_uncorrectable=Item(0), processes=Item(processes or []))
    base.update(items)
    return GpuReading(index, f"GPU-{index}", f"00000000:{0x1B + index:02X}:00.0", "NVIDIA H100 80GB HBM3", **base)


def quiet(host: str = "h100x2") -> Evidence:
    own = [ProcessReading(100, 600 << 20, "python3"), ProcessReading(101, 600 << 20, "python3")]
    return Evidence([Snapshot(host, "before", 100.0, [gpu(0, processes=own[:1]), gpu(1, processes=own[1:])],
                              [100, 101]),
                     Snapshot(host, "after", 150.0, [gpu(0, processes=own[:1]), gpu(1, processes=own[1:])],
                              [100, 101])])


def troubled(host: str = "h100x2") -> Evidence:
    """GPU 0 throttled for power 0.8 s; GPU 1 with 17 of 18 links, 12 replays on link 4, another job's process,
    its PCIe at x8, and a driver without ECC counts."""
    other = ProcessReading(4242, 2 << 30, "train.py")
    no_ecc = dict(ecc_uncorrected_volatile=Item.na(NS), ecc_corrected_volatile=Item.na(NS))
    before = [gpu(0, power_ns=1_000), gpu(1, down=(9,), width=8, **no_ecc)]
    after = [gpu(0, power_ns=800_001_000, events=["sw_power_cap"]),
             gpu(1, down=(9,), replays={4: 12}, width=8, processes=[other], **no_ecc)]
    return Evidence([Snapshot(host, "before", 100.0, before, [100, 101]),
                     Snapshot(host, "after", 150.0, after, [100, 101])])


def without_nvml(host: str = "h100x2") -> Evidence:
    why = "no NVML: NVMLError_LibraryNotFound: NVML Shared Library Not Found"
    return Evidence([Snapshot(host, w, 1.0, [], [7], why) for w in ("before", "after")])


def run_with(tmp: Path, ev: Evidence | None, name: str = "run", source: Path = RUN) -> Path:
    """A copy of a recorded run with `ev` as its node evidence (None: as recorded, without any)."""
    out = tmp / name
    shutil.copytree(source, out)
    if ev is not None:
        meta = read_meta(out)
        meta = replace(meta, evidence=ev)
        meta.write(out)
        assert json.loads((out / "meta.json").read_text())["evidence"] == ev.as_json()
    return out


def host_of(run_dir: Path) -> str:
    return read_meta(run_dir).hosts[0]
