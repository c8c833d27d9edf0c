"""A run's meta.json as one typed record: the class that writes it is the class that reads it.

A run fills a record/meta_draft.MetaDraft as it goes and writes it through `Meta` (run/meta.write_meta), whose
`from_json()` is what every reader reads (report, compare, check --from, the cost fit, the phases table): what
the writer writes reads back equal (tests/test_record_meta.py), as pyperf's Run owns both `_as_json` and
`_json_load`.

Read strictly, once: record/meta_schema.py checks every field a reader reads before any is typed here. A field
of the wrong type, out of range, an unknown schema_version or a count that disagrees with another field is one
MetaError naming the file and the field (a ResultsError: report skips the run, compare and check exit 2); a
field absent because the run predates it reads as unknown (None, empty), never as an error; a file that is not
JSON, or not an object, is a ResultsError (file:line). What older writers got wrong reads as what they meant: a
command written as a string ("check") reads as [that string]. The facts the record does not type (the
topology's P2P matrix, the MPS readings, ...) are carried as recorded (`raw`).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ipcbench.catalogue.planned import PlannedStep
from ipcbench.evidence.model import Evidence
from ipcbench.record.meta_parts import GpuRecord, Link, PairingRecord, RankRecord, SamplingRecord, Skipped
from ipcbench.record.meta_schema import NOISE_BASES, MetaError, check_meta
from ipcbench.errors import ResultsError
from ipcbench.results import META_NAME, write_meta

# How Meta holds meta.json's fields (record/meta_schema.META, the one list of them): each under its own name, but
# these, read into the fields named here, and those carried as recorded in `raw`, which no reader reads. A field of
# META that is none of these is one no reader was taught (tests/test_record_declared_once.py).
HELD_AS = {"ranks": ("ranks", "n_ranks", "ranks_per_gpu"), "options": ("options", "sampling"),
           "topology": ("links", "active_links"), "selftest": ("anchor_units",),
           "versions": ("versions", "ipcbench_version")}
CARRIED = ("platform", "python_executable", "slurm_job_id")

__all__ = ["GpuRecord", "Link", "Meta", "MetaError", "NOISE_BASES", "PairingRecord", "RankRecord", "SamplingRecord",
           "Skipped", "parse_meta", "read_meta"]


@dataclass(frozen=True)
class Meta:
    """meta.json, typed: every field a reader reads, each of its type or unknown (None, empty)."""

    found: bool = False
    raw: dict = field(default_factory=dict, compare=False)  # the object as recorded: what as_json carries on
    run_id: str | None = None
    start: str | None = None
    end: str | None = None
    status: str | None = None
    command: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    ranks: list[RankRecord] = field(default_factory=list)  # every rank: host, GPU, node-local rank, pid
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
    ipcbench_version: str | None = None  # the version that ran (meta.json's, else its versions')
    git_commit: str | None = None
    source_digest: str | None = None  # the sources that ran (run/meta.source_digest)
    wall_s: float | None = None  # from the end of the run's start to its close (runner.finish)
    rows: int | None = None
    failed_rows: int | None = None
    suite_wall_s: dict[str, float] | None = None  # each suite's wall, s (None: not recorded)
    plan: list[dict] | None = None  # the plan as the cost model saw it (run/costmodel.PlanStep.from_dict reads each)
    # what the run planned to write (schema 5 on; None before): results.csv is held to it (record/agreement.py)
    planned_rows: list[PlannedStep] | None = None
    time_breakdown_s: dict = field(default_factory=dict)  # {"rank N": {phase path: {"s", "n"}}} (core/phases.py)
    anchor_units: int | None = None  # a selftest's anchor measurements (meta.json's selftest.anchor_units)

    # ---------------------------------------------------------------------------------- the JSON form

    @classmethod
    def from_json(cls, raw: dict, source: str | os.PathLike = META_NAME) -> "Meta":
        """A meta.json object as a Meta, every field checked (MetaError naming `source` and the field)."""
        return parse_meta(raw, source)

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
    def quick(self) -> bool | None:
        """Measured with --quick (None: not recorded)."""
        return self.options.get("quick")

    @property
    def verify(self) -> bool | None:
        """Every row's destination checked (False: --no-verify; None: not recorded)."""
        return self.options.get("verify")

    @property
    def rule(self) -> SamplingRecord | None:
        """The sampling rule as recorded (None: no options recorded)."""
        return SamplingRecord.from_options(self.options) if self.options else None

    @property
    def pairing(self) -> PairingRecord | None:
        """How the pairs were measured (None: no pair mode recorded)."""
        return PairingRecord.from_json(self.pair_mode)

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
    a JSON object, MetaError (file, field) when a field is not what the record says (record/meta_schema.py)."""
    path = Path(run_dir) / META_NAME
    if not path.exists():
        return Meta()
    try:
        raw = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
    except OSError as e:
        raise ResultsError(f"{path}: cannot open ({e.strerror or e})") from None
    except RecursionError:
        raise ResultsError(f"{path}: nested too deep to be a meta.json") from None
    if not isinstance(raw, dict):
        raise ResultsError(f"{path}:1: not a JSON object")
    return parse_meta(raw, path)


def parse_meta(raw: dict, source: str | os.PathLike = META_NAME) -> Meta:
    """A meta.json object as a Meta, every field checked first (MetaError naming `source` and the field)."""
    check_meta(raw, source)
    options = raw.get("options", {})
    return Meta(
        found=True, raw=raw, run_id=raw.get("run_id"), start=raw.get("start"), end=raw.get("end"),
        status=raw.get("status"), command=_command(raw.get("command")), options=options,
        sampling=options.get("sampling", {}), sizes=list(raw.get("sizes", [])), pair_mode=raw.get("pair_mode", {}),
        versions=raw.get("versions", {}), suites=list(raw["suites"]) if "suites" in raw else None,
        schema_version=raw.get("schema_version", 1), noise_basis=raw.get("noise_basis", "within-run"),
        skipped=[Skipped.from_json(v) for v in raw.get("skipped", [])],
        evidence=Evidence.from_json(raw.get("evidence")), **_machine(raw), **_run_facts(raw))


def _machine(raw: dict) -> dict:
    """Where the run ran: hosts, ranks, GPUs, the links between them (NVML's table), MPS per GPU."""
    ranks = [RankRecord.from_json(r) for r in raw["ranks"]] if "ranks" in raw else None
    topology = raw.get("topology", {})
    return dict(
        hosts=list(raw.get("hosts", [])), ranks=ranks or [], n_ranks=len(ranks) if ranks is not None else None,
        ranks_per_gpu=_ranks_per_gpu(raw.get("ranks_per_gpu"), ranks),
        gpus={h: [GpuRecord.from_json(g) for g in gs] for h, gs in raw.get("gpus", {}).items()},
        links=[Link.from_json(h, ln) for h, t in topology.items() for ln in t.get("links", [])],
        active_links={(h, i): g["active"] for h, t in topology.items() for i, g in enumerate(t.get("per_gpu", []))
                      if "active" in g},
        mps={(h, int(gpu)): on for h, m in raw.get("mps", {}).items() for gpu, on in m.get("gpus", {}).items()})


def _run_facts(raw: dict) -> dict:
    """What the run says of itself and of its time: its code, its walls, its rows, its plan."""
    versions = raw.get("versions", {})
    recorded = raw.get("ipcbench_version") or versions.get("ipcbench")
    return dict(ipcbench_version=None if recorded is None else str(recorded), git_commit=raw.get("git_commit"),
                source_digest=raw.get("source_digest"), wall_s=_float(raw.get("wall_s")), rows=raw.get("rows"),
                failed_rows=raw.get("failed_rows"),
                suite_wall_s={k: float(v) for k, v in raw["suite_wall_s"].items()} if "suite_wall_s" in raw else None,
                plan=raw.get("plan"),
                planned_rows=[PlannedStep.from_json(p) for p in raw["planned_rows"]] if "planned_rows" in raw else None,
                time_breakdown_s=raw.get("time_breakdown_s", {}),
                anchor_units=raw.get("selftest", {}).get("anchor_units"))


def _command(v) -> list[str]:
    """The command line as a list; a string (check and selftest wrote "check" before) as [that string]."""
    if isinstance(v, str):
        return [v]
    return list(v) if v is not None else []


def _float(v) -> float | None:
    return None if v is None else float(v)


def _ranks_per_gpu(value: int | None, ranks: list[RankRecord] | None) -> int | None:
    """meta.json's ranks_per_gpu, or (older runs) counted from its ranks; None when unknown."""
    if value is not None:
        return value
    if ranks:
        return max(Counter((r.host, r.gpu) for r in ranks).values())
    return None
