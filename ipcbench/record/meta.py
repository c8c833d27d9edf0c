"""A run's meta.json as one typed record: the class that writes it is the class that reads it.

`Meta.as_json()` is what run/meta.write_meta writes (every run, check and selftest included); `Meta.from_json()`
is what every reader reads (report, compare, check --from). What the writer writes reads back equal
(tests/test_record_meta.py), as pyperf's Run owns both `_as_json` and `_json_load`.

meta.json grew over the project's life, so every field is optional: a field that is missing or not of its
type reads as unknown (None, empty), never as an error; only a file that is not JSON, or not an object,
is a ResultsError (file:line). What older writers got wrong reads as what they meant: a command written as a
string ("check") reads as [that string]. The measured facts the record does not type (ranks, the topology's
link table, GPU details) are carried as recorded (`raw`) and read through the views below.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ipcbench.catalogue.links import rates_of_entry
from ipcbench.catalogue.noise import NOISE_BASIS, OLD_BASIS
from ipcbench.errors import ResultsError
from ipcbench.evidence.model import Evidence
from ipcbench.results import META_NAME, write_meta


@dataclass(frozen=True)
class GpuRecord:
    """One GPU of a host as meta.json lists it (NVML and CUDA at the start of the run)."""

    index: int
    name: str = "?"
    uuid: str | None = None
    cc: str | None = None
    sm_count: int | None = None
    memory_bytes: int | None = None
    l2_bytes: int | None = None
    mem_bw_gbps: float | None = None


@dataclass(frozen=True)
class Link:
    """One GPU pair of a host's NVML link table: its kind (nvlink, nvswitch, pcie, unknown) and its one-way
    peak and ceiling, recomputed from the recorded facts with the one convention (catalogue/links.py), so runs
    recorded under an older convention read the same as new ones."""

    host: str
    src_gpu: int
    dst_gpu: int
    kind: str
    peak_gbps: float | None  # the quoted data rate: what "% of peak" divides by
    nvlink_count: int | None = None
    nvlink_version: str | None = None
    per_link_gbps: float | None = None  # one NVLink's peak
    ceiling_gbps: float | None = None  # the physical rate no measurement may exceed
    per_link_ceiling_gbps: float | None = None  # one NVLink's ceiling


@dataclass(frozen=True)
class Skipped:
    """A step that could not run, and why (a GPU feature missing, NCCL unavailable): run/walk.py records it, so
    a reader can say why some rows are absent instead of guessing (nvbandwidth writes WAIVED)."""

    suite: str
    step: str
    reason: str
    host: str = ""

    def as_json(self) -> dict:
        return {"suite": self.suite, "step": self.step, "reason": self.reason, "host": self.host}

    @classmethod
    def from_json(cls, v) -> "Skipped | None":
        """None for an entry that is not an object with a suite, a step and a reason."""
        if not isinstance(v, dict) or not all(isinstance(v.get(k), str) for k in ("suite", "step", "reason")):
            return None
        return cls(v["suite"], v["step"], v["reason"], str(v.get("host") or ""))


NOISE_BASES = (OLD_BASIS, NOISE_BASIS)  # what a row's `noise` covers (catalogue/noise.py, docs/results.md)


@dataclass(frozen=True)
class Meta:
    found: bool = False
    raw: dict = field(default_factory=dict, compare=False)  # the object as recorded: what as_json carries on
    run_id: str | None = None
    start: str | None = None
    end: str | None = None
    status: str | None = None
    command: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    gpus: dict[str, list[GpuRecord]] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)
    active_links: dict[tuple[str, int], int] = field(default_factory=dict)  # NVLinks up per (host, GPU)
    mps: dict[tuple[str, int], bool] = field(default_factory=dict)  # ran under MPS, per (host, GPU)
    n_ranks: int | None = None
    ranks_per_gpu: int | None = None
    options: dict = field(default_factory=dict)
    sampling: dict = field(default_factory=dict)
    sizes: list[int] = field(default_factory=list)
    pair_mode: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    suites: list[str] | None = None
    schema_version: int = 1
    # what the `noise` column covers: "within-run" (runs without the key: the spread of one run's samples) or
    # "between-runs" (how far the row moves between runs of the same code on the same node)
    noise_basis: str = "within-run"
    skipped: list[Skipped] = field(default_factory=list)  # steps that could not run, with the reason
    # the node's own evidence, read through NVML before the first measurement and after the last (evidence/model.py);
    # a run recorded before it: Evidence([]), which a report says as "no node evidence recorded"
    evidence: Evidence = field(default_factory=Evidence)

    # ---------------------------------------------------------------------------------- the JSON form

    @classmethod
    def from_json(cls, raw: dict) -> "Meta":
        """A meta.json object as a Meta: each field typed, or unknown where it is missing or malformed."""
        return parse_meta(raw)

    def as_json(self) -> dict:
        """The meta.json object of this record: what it carries as recorded, with its typed fields written in
        their one form (a key left out where the field is unknown)."""
        out = dict(self.raw)
        typed = {"run_id": self.run_id, "schema_version": self.schema_version, "command": list(self.command),
                 "start": self.start, "end": self.end, "status": self.status, "hosts": list(self.hosts),
                 "ranks_per_gpu": self.ranks_per_gpu, "pair_mode": self.pair_mode, "versions": self.versions,
                 "suites": None if self.suites is None else list(self.suites), "sizes": list(self.sizes),
                 "options": self.options,
                 "noise_basis": self.noise_basis, "skipped": [s.as_json() for s in self.skipped]}
        for k, v in typed.items():
            if k in out or v not in (None, [], {}) and not (k == "noise_basis" and v == "within-run"):
                out[k] = v  # written where recorded or known; a run without noise_basis stays without
        if self.evidence or "evidence" in out:
            out["evidence"] = self.evidence.as_json()
        return out

    def write(self, run_dir: str | os.PathLike) -> Path:
        """meta.json of `run_dir`, replaced atomically (results.write_meta)."""
        return write_meta(run_dir, self.as_json())

    def skipped_by_suite(self) -> dict[str, list[str]]:
        """{suite: ["step: reason", ...]} of the steps that could not run (a step once per reason, over hosts)."""
        out: dict[str, list[str]] = {}
        for s in self.skipped:
            text = f"{s.step}: {s.reason}"
            if text not in out.setdefault(s.suite, []):
                out[s.suite].append(text)
        return out

    # ---------------------------------------------------------------------------------- derived views

    @property
    def serial_ring(self) -> bool:
        """The serial steps measured a ring of pairs (--serial-pairs), not every pair."""
        sp = self.pair_mode.get("serial_pairs")
        return isinstance(sp, dict) and sp.get("coverage") == "ring"

    @property
    def ipcbench_version(self) -> str | None:
        return _text(self.raw.get("ipcbench_version") or self.versions.get("ipcbench"))

    def link_peaks(self) -> dict[tuple[str, int, int], float]:
        """{(host, src_gpu, dst_gpu): one-way peak GB/s}, both orders (a link listed one way holds both)."""
        return self._both_ways({(ln.host, ln.src_gpu, ln.dst_gpu): ln.peak_gbps for ln in self.links if ln.peak_gbps})

    def link_ceilings(self) -> dict[tuple[str, int, int], float]:
        """{(host, src_gpu, dst_gpu): one-way ceiling GB/s, the rate no measurement may exceed}, both orders."""
        return self._both_ways({(ln.host, ln.src_gpu, ln.dst_gpu): ln.ceiling_gbps for ln in self.links
                                if ln.ceiling_gbps})

    @staticmethod
    def _both_ways(out: dict[tuple[str, int, int], float]) -> dict[tuple[str, int, int], float]:
        for (h, s, d), v in list(out.items()):
            out.setdefault((h, d, s), v)
        return out

    def nvlink_aggregate(self) -> dict[tuple[str, int], tuple[float, int, float]]:
        """{(host, GPU): (one-way NVLink ceiling of all its active links GB/s, active links, ceiling per link)}."""
        rate: dict[tuple[str, int], float] = {}
        for ln in self.links:
            if ln.per_link_ceiling_gbps:
                rate.setdefault((ln.host, ln.src_gpu), ln.per_link_ceiling_gbps)
        return {k: (n * rate[k], n, rate[k]) for k, n in self.active_links.items() if n and k in rate}

    def gpu(self, host: str, index: int) -> GpuRecord | None:
        return next((g for g in self.gpus.get(host, []) if g.index == index), None)

    def uuids(self) -> dict[tuple[str, int], str]:
        return {(h, g.index): g.uuid for h, gs in self.gpus.items() for g in gs if g.uuid}

    def gpu_models(self) -> str | None:
        """"2 × NVIDIA H200" over every host (None without a GPU list)."""
        c = Counter(g.name for gs in self.gpus.values() for g in gs)
        return ", ".join(f"{n} × {name}" for name, n in sorted(c.items())) or None

    def mps_state(self, host: str) -> bool | None:
        """True / False when every GPU of `host` ran with / without MPS; None when unknown or mixed."""
        states = {v for (h, _), v in self.mps.items() if h == host}
        return states.pop() if len(states) == 1 else None


def read_meta(run_dir: str | os.PathLike) -> Meta:
    """The run's meta.json (Meta(found=False) when there is none); ResultsError (file:line) when it is not
    a JSON object."""
    path = Path(run_dir) / META_NAME
    if not path.exists():
        return Meta()
    try:
        raw = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
    except OSError as e:
        raise ResultsError(f"{path}: cannot open ({e.strerror or e})") from None
    if not isinstance(raw, dict):
        raise ResultsError(f"{path}:1: not a JSON object")
    return Meta.from_json(raw)


def parse_meta(raw: dict) -> Meta:
    """A meta.json object as a Meta: each field typed, or unknown where it is missing or malformed."""
    options = _dict(raw.get("options"))
    ranks = raw.get("ranks") if isinstance(raw.get("ranks"), list) else None
    return Meta(
        found=True, raw=raw, run_id=_text(raw.get("run_id")), start=_text(raw.get("start")),
        end=_text(raw.get("end")), status=_text(raw.get("status")), command=_command(raw.get("command")),
        hosts=[str(h) for h in _list(raw.get("hosts"))], gpus=_gpus(raw.get("gpus")),
        links=_links(raw.get("topology")), active_links=_active(raw.get("topology")), mps=_mps(raw.get("mps")),
        n_ranks=len(ranks) if ranks is not None else None,
        ranks_per_gpu=_ranks_per_gpu(raw.get("ranks_per_gpu"), ranks), options=options,
        sampling=_dict(options.get("sampling")), sizes=[int(s) for s in _list(raw.get("sizes")) if isinstance(s, int)],
        pair_mode=_dict(raw.get("pair_mode")),
        versions=_dict(raw.get("versions")),
        suites=[str(s) for s in raw["suites"]] if isinstance(raw.get("suites"), list) else None,
        schema_version=raw["schema_version"] if isinstance(raw.get("schema_version"), int) else 1,
        noise_basis=raw["noise_basis"] if raw.get("noise_basis") in NOISE_BASES else "within-run",
        skipped=[s for v in _list(raw.get("skipped")) if (s := Skipped.from_json(v)) is not None],
        evidence=Evidence.from_json(raw.get("evidence")))


def _command(v) -> list[str]:
    """The command line as a list; a string (check and selftest wrote "check" before) as [that string]."""
    if isinstance(v, str):
        return [v]
    return [str(c) for c in v] if isinstance(v, list) else []


def _text(v) -> str | None:
    return None if v is None else str(v)


def _dict(v) -> dict:
    return v if isinstance(v, dict) else {}


def _list(v) -> list:
    return v if isinstance(v, list) else []


def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _num(v) -> float | None:
    """A positive finite number, else None."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if x == x and 0 < x < float("inf") else None


def _gpus(v) -> dict[str, list[GpuRecord]]:
    return {str(host): [GpuRecord(i, str(g.get("name", "?")), _text(g.get("uuid")) or None, _text(g.get("cc")),
                                  _int(g.get("sm_count")), _int(g.get("memory_bytes")), _int(_num(g.get("l2_bytes"))),
                                  _num(g.get("mem_bw_gbps")))
                        for g in _list(lst) if isinstance(g, dict) and (i := _int(g.get("index"))) is not None]
            for host, lst in _dict(v).items()}


def _links(topology) -> list[Link]:
    return [_link(str(host), s, d, ln)
            for host, t in _dict(topology).items() for ln in _list(_dict(t).get("links")) if isinstance(ln, dict)
            and (s := _int(ln.get("src_gpu"))) is not None and (d := _int(ln.get("dst_gpu"))) is not None]


def _link(host: str, src: int, dst: int, entry: dict) -> Link:
    """A link entry read with today's rate convention (catalogue/links.rates_of_entry), whatever the run
    recorded. Where its facts give no rate (an entry without the NVLink generation, say), the recorded
    rates are kept, the recorded peak standing for the ceiling when none was recorded; a malformed value
    reads as unknown, never as an error."""
    count, gen, width = _int(entry.get("nvlink_count")), _int(entry.get("pcie_gen")), _int(entry.get("pcie_width"))
    version, kind = _text(entry.get("nvlink_version")), _text(entry.get("kind"))
    r = rates_of_entry({"kind": kind, "nvlink_count": count, "nvlink_version": version, "pcie_gen": gen,
                        "pcie_width": width})
    if r.peak_gbps is None and r.ceiling_gbps is None:
        peak, per_link = _num(entry.get("peak_gbps")), _num(entry.get("per_link_gbps"))
        return Link(host, src, dst, kind or "", peak, count, version, per_link,
                    _num(entry.get("ceiling_gbps")) or peak, _num(entry.get("per_link_ceiling_gbps")) or per_link)
    return Link(host, src, dst, r.kind, r.peak_gbps, count, version, r.per_link_gbps, r.ceiling_gbps,
                r.per_link_ceiling_gbps)


def _active(topology) -> dict[tuple[str, int], int]:
    return {(str(host), i): int(n) for host, t in _dict(topology).items()
            for i, g in enumerate(_list(_dict(t).get("per_gpu"))) if (n := _num(_dict(g).get("active"))) is not None}


def _mps(v) -> dict[tuple[str, int], bool]:
    return {(str(host), i): state for host, m in _dict(v).items() for gpu, state in _dict(_dict(m).get("gpus")).items()
            if isinstance(state, bool) and (i := _int(gpu)) is not None}


def _ranks_per_gpu(value, ranks: list | None) -> int | None:
    """meta.json's ranks_per_gpu, or (older runs) counted from its ranks; None when unknown."""
    if isinstance(value, int) and value > 0:
        return value
    if ranks and all(isinstance(r, dict) and "gpu" in r for r in ranks):
        return max(Counter((str(r.get("host")), r.get("gpu")) for r in ranks).values())
    return None
