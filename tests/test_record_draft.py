"""record/meta_draft.py: a run fills a typed MetaDraft and writes it through record/meta.Meta. What it writes is
byte for byte what the runner's dict wrote before (the committed runs of the current writer are the reference:
each is filled field by field as run/runner.py fills it and written again), and a writer's mistake is the
reader's MetaError at the moment it is written, never a file a reader cannot read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ipcbench.evidence.model import Evidence
from ipcbench.record.meta import MetaError, read_meta
from ipcbench.record.meta_draft import MetaDraft
from ipcbench.record.meta_parts import GpuRecord, RankRecord, Skipped
from ipcbench.run import meta as run_meta

ROOT = Path(__file__).resolve().parents[1]
# runs written by the current writer (schema 3, the evidence, the plan, the skipped steps), one per command
WRITTEN_NOW = ["tests/data/results-1126/h200x2-check-1", "tests/data/results-1126/h200x2-selftest-1",
               "tests/data/results-1126/h100x1-all-1",
               "tests/data/results-1126/h200x2-np4-quick"]


def filled_as_the_runner_fills(raw: dict) -> MetaDraft:
    """A draft holding what `raw` records, each field set the way run/runner.py sets it."""
    d = MetaDraft(run_id=raw["run_id"], schema_version=raw["schema_version"], ipcbench_version=raw["ipcbench_version"],
                  git_commit=raw["git_commit"], source_digest=raw["source_digest"], command=raw["command"],
                  start=raw["start"], platform=raw["platform"], python_executable=raw["python_executable"],
                  noise_basis=raw["noise_basis"])
    d.hosts = raw["hosts"]
    d.ranks = [RankRecord.from_json(r) for r in raw["ranks"]]
    d.gpus = {h: [GpuRecord.from_json(g) for g in gs] for h, gs in raw["gpus"].items()}
    d.ranks_per_gpu, d.topology, d.pair_mode = raw["ranks_per_gpu"], raw["topology"], raw["pair_mode"]
    d.versions, d.suites, d.sizes, d.options = raw["versions"], raw["suites"], raw["sizes"], raw["options"]
    d.slurm_job_id, d.mps, d.plan = raw["slurm_job_id"], raw["mps"], raw["plan"]
    d.skipped = [Skipped(**s) for s in raw["skipped"]]
    d.time_breakdown_s, d.evidence = raw["time_breakdown_s"], Evidence.from_json(raw["evidence"])
    d.end, d.status, d.wall_s = raw["end"], raw["status"], raw["wall_s"]
    d.rows, d.failed_rows, d.suite_wall_s = raw["rows"], raw["failed_rows"], raw["suite_wall_s"]
    d.selftest = raw.get("selftest")
    return d


@pytest.mark.parametrize("run", WRITTEN_NOW)
def test_the_draft_writes_what_the_runner_wrote_byte_for_byte(tmp_path, run):
    recorded = (ROOT / run / "meta.json").read_bytes()
    filled_as_the_runner_fills(json.loads(recorded)).write(tmp_path)
    assert (tmp_path / "meta.json").read_bytes() == recorded


def test_a_field_left_unknown_is_not_written_except_those_written_as_null():
    d = run_meta.base_meta("rid", ["copy"])
    d.git_commit = None
    written = d.as_json()
    assert list(written) == ["run_id", "schema_version", "ipcbench_version", "git_commit", "source_digest", "command",
                             "start", "end", "status", "platform", "python_executable", "noise_basis", "slurm_job_id"]
    assert written["git_commit"] is None and written["end"] is None and written["status"] == "running"


@pytest.mark.parametrize("field,value,named", [
    ("hosts", ["a"], "hosts"),  # the ranks ran on "h"
    ("ranks_per_gpu", 2, "ranks_per_gpu"),
    ("pair_mode", {"mode": "rounds"}, "pair_mode.mode"),
    ("sizes", [0], "sizes[0]"),
])
def test_a_writers_mistake_is_the_readers_error_when_written(tmp_path, field, value, named):
    d = run_meta.base_meta("rid", ["copy"])
    d.hosts, d.ranks = ["h"], [RankRecord(0, "h", 0, 0, 1), RankRecord(1, "h", 1, 1, 2)]
    d.gpus, d.ranks_per_gpu = {"h": [GpuRecord(0, uuid="GPU-0"), GpuRecord(1, uuid="GPU-1")]}, 1
    d.planned_rows = []
    d.write(tmp_path)  # a draft that is one
    setattr(d, field, value)
    with pytest.raises(MetaError) as e:
        d.write(tmp_path / "again")
    assert e.value.field == named
    assert read_meta(tmp_path).ranks_per_gpu == 1  # what was written before stays readable
