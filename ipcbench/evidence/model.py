"""The node's evidence as a typed record: what meta.json's "evidence" key holds (pure: no NVML here).

An item the driver, the binding or the VM does not give is an `Item` with `missing` set to why, never a value
and never ok: a reader (report, check) says "not available" with the reason, and a gate that needs the item
cannot judge it (docs/architecture.md, "Node evidence"). Every class writes itself (`as_json`) and reads itself
back (`from_json`) exactly; a key that is missing reads as "not recorded", so an old meta.json without evidence
reads as `Evidence([])`. A malformed one never reaches here from a file: the record refuses it, naming the field
(record/meta_schema.py); read from anything else it reads as "not recorded", never as an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

NA = "not available"  # how a reader names an item the driver/binding/VM does not give; never treated as ok
NOT_RECORDED = "not recorded"  # an item absent from (or malformed in) the record itself


def _same(v: Any) -> Any:
    return v


@dataclass(frozen=True)
class Item:
    """One reading: its value, or why there is none (`missing`)."""

    value: Any = None  # int/float/str/bool/list/dict; None when missing
    missing: str = ""  # "" when read; else why not ("not supported by the driver", "no NVML: ...")

    @property
    def ok(self) -> bool:
        """Read, with a value: a reading without one (Item(), or {"value": null} in a meta.json) is never ok."""
        return self.missing == "" and self.value is not None

    @classmethod
    def na(cls, why: str) -> "Item":
        return cls(None, why or NA)

    def as_json(self, encode: Callable[[Any], Any] = _same) -> dict:
        """{"value": v} when read, {"missing": why} when not (`encode` writes a value that is not plain JSON)."""
        if self.missing == "":
            return {"value": None if self.value is None else encode(self.value)}
        out: dict = {"missing": self.missing}
        if self.value is not None:
            out["value"] = encode(self.value)
        return out

    @classmethod
    def from_json(cls, v: Any, decode: Callable[[Any], Any] = _same) -> "Item":
        """An Item from its JSON form; anything else reads as missing ("not recorded")."""
        if not isinstance(v, dict) or ("value" not in v and not v.get("missing")):
            return cls(None, NOT_RECORDED)
        missing = str(v.get("missing") or "")
        try:
            value = decode(v["value"]) if v.get("value") is not None else None
        except (TypeError, ValueError, KeyError, AttributeError):
            return cls(None, NOT_RECORDED)
        return cls(value, missing)


def _int(v: Any, default: int = -1) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _dict(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list:
    return v if isinstance(v, list) else []


@dataclass(frozen=True)
class LinkReading:
    """One NVLink of one GPU: up or down, its generation (catalogue/links.py's name), its rate per direction,
    and its error counters (counter name -> count: "replay", "recovery", "crc_flit", "crc_data" where exposed)."""

    link: int
    active: Item = field(default_factory=Item)  # bool
    version: Item = field(default_factory=Item)  # str: "4.0"
    speed_gbps: Item = field(default_factory=Item)  # float, per direction
    errors: Item = field(default_factory=Item)  # dict name -> int

    def as_json(self) -> dict:
        return {"link": self.link, "active": self.active.as_json(), "version": self.version.as_json(),
                "speed_gbps": self.speed_gbps.as_json(), "errors": self.errors.as_json()}

    @classmethod
    def from_json(cls, v: Any) -> "LinkReading":
        d = _dict(v)
        return cls(_int(d.get("link")), Item.from_json(d.get("active")), Item.from_json(d.get("version")),
                   Item.from_json(d.get("speed_gbps")), Item.from_json(d.get("errors")))


@dataclass(frozen=True)
class ProcessReading:
    """A compute process on a GPU: its pid, the GPU memory it holds (None where NVML does not say), its name."""

    pid: int
    used_bytes: int | None = None
    name: str = ""

    def as_json(self) -> dict:
        return {"pid": self.pid, "used_bytes": self.used_bytes, "name": self.name}

    @classmethod
    def from_json(cls, v: Any) -> "ProcessReading":
        d = _dict(v)
        used = d.get("used_bytes")
        return cls(_int(d.get("pid")), _int(used) if used is not None else None, str(d.get("name") or ""))


GPU_ITEMS = ("pcie_gen", "pcie_width", "pcie_max_gen", "pcie_max_width", "clock_events", "clock_event_ns",
             "ecc_uncorrected_volatile", "ecc_corrected_volatile", "remap_pending", "remap_failure",
             "remapped_uncorrectable")  # the plain items of a GpuReading (links and processes hold objects)


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment, as NVML numbers it (index: NVML's, not CUDA_VISIBLE_DEVICES')."""

    index: int
    uuid: str = ""
    pci_bus_id: str = ""
    model: str = ""
    links: Item = field(default_factory=Item)  # list[LinkReading]; missing without NVLink queries
    pcie_gen: Item = field(default_factory=Item)
    pcie_width: Item = field(default_factory=Item)
    pcie_max_gen: Item = field(default_factory=Item)
    pcie_max_width: Item = field(default_factory=Item)
    clock_events: Item = field(default_factory=Item)  # list[str]: active clocks-event (throttle) reasons
    clock_event_ns: Item = field(default_factory=Item)  # dict reason -> cumulative ns
    ecc_uncorrected_volatile: Item = field(default_factory=Item)
    ecc_corrected_volatile: Item = field(default_factory=Item)
    remap_pending: Item = field(default_factory=Item)
    remap_failure: Item = field(default_factory=Item)
    remapped_uncorrectable: Item = field(default_factory=Item)
    processes: Item = field(default_factory=Item)  # list[ProcessReading]: every compute process on this GPU

    def as_json(self) -> dict:
        out: dict = {"index": self.index, "uuid": self.uuid, "pci_bus_id": self.pci_bus_id, "model": self.model,
                     "links": self.links.as_json(lambda ls: [ln.as_json() for ln in ls])}
        out.update({k: getattr(self, k).as_json() for k in GPU_ITEMS})
        out["processes"] = self.processes.as_json(lambda ps: [p.as_json() for p in ps])
        return out

    @classmethod
    def from_json(cls, v: Any) -> "GpuReading":
        d = _dict(v)
        items = {k: Item.from_json(d.get(k)) for k in GPU_ITEMS}
        return cls(_int(d.get("index")), str(d.get("uuid") or ""), str(d.get("pci_bus_id") or ""),
                   str(d.get("model") or ""),
                   links=Item.from_json(d.get("links"), lambda ls: [LinkReading.from_json(x) for x in _list(ls)]),
                   processes=Item.from_json(d.get("processes"),
                                            lambda ps: [ProcessReading.from_json(x) for x in _list(ps)]),
                   **items)

    def active_links(self) -> int | None:
        """How many NVLinks are up; None where the link states were not read."""
        if not self.links.ok:
            return None
        return sum(1 for ln in self.links.value if ln.active.ok and ln.active.value)


@dataclass(frozen=True)
class Snapshot:
    """Every GPU of one host at one moment ("before" the first measurement or "after" the last). `own_pids`: the
    run's own ranks on this host, so a process that is not one of them is another job's. `missing`: the whole
    snapshot failed (no NVML library, nvmlInit refused), every item then missing with this reason."""

    host: str
    when: str  # "before" | "after"
    time: float  # unix seconds
    gpus: list[GpuReading] = field(default_factory=list)
    own_pids: list[int] = field(default_factory=list)
    missing: str = ""

    def as_json(self) -> dict:
        out: dict = {"host": self.host, "when": self.when, "time": self.time,
                     "gpus": [g.as_json() for g in self.gpus], "own_pids": list(self.own_pids)}
        if self.missing:
            out["missing"] = self.missing
        return out

    @classmethod
    def from_json(cls, v: Any) -> "Snapshot":
        d = _dict(v)
        try:
            t = float(d.get("time"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            t = 0.0
        return cls(str(d.get("host") or ""), str(d.get("when") or ""), t,
                   [GpuReading.from_json(g) for g in _list(d.get("gpus"))],
                   [p for p in (_int(x, -1) for x in _list(d.get("own_pids"))) if p >= 0],
                   str(d.get("missing") or ""))

    def gpu(self, index: int) -> GpuReading | None:
        return next((g for g in self.gpus if g.index == index), None)


@dataclass(frozen=True)
class Evidence:
    """What a run recorded of its nodes: a snapshot per host before the first measurement and after the last."""

    snapshots: list[Snapshot] = field(default_factory=list)

    def as_json(self) -> dict:
        return {"snapshots": [s.as_json() for s in self.snapshots]}

    @classmethod
    def from_json(cls, v: Any) -> "Evidence":
        return cls([Snapshot.from_json(s) for s in _list(_dict(v).get("snapshots")) if isinstance(s, dict)])

    def _one(self, host: str, when: str) -> Snapshot | None:
        return next((s for s in self.snapshots if s.host == host and s.when == when), None)

    def before(self, host: str) -> Snapshot | None:
        return self._one(host, "before")

    def after(self, host: str) -> Snapshot | None:
        return self._one(host, "after")

    def hosts(self) -> list[str]:
        """The hosts with a snapshot, in the order first recorded."""
        return list(dict.fromkeys(s.host for s in self.snapshots))

    def __bool__(self) -> bool:
        return bool(self.snapshots)
