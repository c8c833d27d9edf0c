"""meta.json as a run fills it: the writer's side of record/meta.Meta.

run/meta.base_meta starts a `MetaDraft`, run/runner.py fills its typed fields as the run goes (the machine after
the setup, the plan, the skipped steps, the close), and `write` writes it through `Meta`, the class every reader
reads it with, after the same checks a reader makes (record/meta_schema.py): a writer's mistake fails the run
that made it, never the reader of its file. The fields are in the order meta.json lists them; a field left None
is not written, except those a run writes as null when unknown (ALWAYS_WRITTEN).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ipcbench.catalogue.planned import PlannedStep
from ipcbench.evidence.model import Evidence
from ipcbench.record.meta import Meta
from ipcbench.record.meta_schema import META
from ipcbench.record.meta_parts import GpuRecord, RankRecord, Skipped

ALWAYS_WRITTEN = ("git_commit", "end", "slurm_job_id")  # null where unknown: "not known", not "not recorded"


@dataclass
class MetaDraft:
    """Every field a run writes into meta.json, typed; `meta()` is the record every reader reads."""

    run_id: str
    schema_version: int
    ipcbench_version: str
    git_commit: str | None
    source_digest: str
    command: list[str]
    start: str
    end: str | None = None
    status: str = "running"
    platform: str | None = None
    python_executable: str | None = None
    noise_basis: str | None = None
    hosts: list[str] | None = None
    ranks: list[RankRecord] | None = None
    gpus: dict[str, list[GpuRecord]] | None = None
    ranks_per_gpu: int | None = None
    topology: dict | None = None  # per host: NVML's link table as core/topology.gpu_links gives it
    pair_mode: dict | None = None  # core/schedule.PairMode.as_dict, with per_host (and the concurrency check)
    versions: dict | None = None
    suites: list[str] | None = None
    sizes: list[int] | None = None
    options: dict | None = None  # config.RunConfig.options_meta
    slurm_job_id: str | None = None
    mps: dict | None = None  # per host: core/mps's status as_meta
    plan: list[dict] | None = None  # run/costmodel.PlanStep.as_dict of every step
    planned_rows: list[PlannedStep] | None = None  # every node's steps, pairs, sizes and rows (run/walk.planned)
    skipped: list[Skipped] | None = None
    time_breakdown_s: dict | None = None  # {"rank N": core/phases snapshot}
    evidence: Evidence | None = None
    wall_s: float | None = None
    rows: int | None = None
    failed_rows: int | None = None
    suite_wall_s: dict[str, float] | None = None
    selftest: dict | None = None  # ipcbench selftest's verdict and its anchor measurements

    def as_json(self) -> dict:
        """The meta.json object, its keys in the order of the fields."""
        return {f.name: _json(getattr(self, f.name)) for f in fields(self)
                if getattr(self, f.name) is not None or f.name in ALWAYS_WRITTEN}

    def meta(self) -> Meta:
        """The record as a reader reads it (MetaError, naming the field, where the draft is not one)."""
        return Meta.from_json(self.as_json())

    def write(self, run_dir: str | os.PathLike) -> Path:
        """meta.json of `run_dir`, replaced atomically, through the record class."""
        return self.meta().write(run_dir)


# The draft writes meta_schema.META's fields (the one list of meta.json's fields), each once, in its order
assert tuple(f.name for f in fields(MetaDraft)) == tuple(META.fields), "MetaDraft's fields are not META's"
assert set(ALWAYS_WRITTEN) <= set(META.fields)


def _json(v: Any) -> Any:
    """A field's JSON form: records by their as_json, lists and objects item by item."""
    if hasattr(v, "as_json"):
        return v.as_json()
    if isinstance(v, list):
        return [_json(x) for x in v]
    if isinstance(v, dict):
        return {k: _json(x) for k, x in v.items()}
    return v
