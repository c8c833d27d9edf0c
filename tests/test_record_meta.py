"""record/meta.py: the one typed record of meta.json. The class that writes it (Meta.as_json, through
run/meta.py) is the class that reads it (Meta.from_json): what the writer writes reads back equal, old files read
as before, and what an older writer got wrong (a command as a string) reads as what it meant."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ipcbench.record.meta import Meta, MetaError, Skipped, read_meta
from ipcbench.results import META_NAME
from ipcbench.run import meta as run_meta

ROOT = Path(__file__).resolve().parents[1]
RECORDED = sorted(p.parent for d in ("results", "tests/data") for p in (ROOT / d).rglob(META_NAME))


def _who_ran(draft):
    """What the runner fills before its first write (run/runner.start): the hosts, ranks and GPUs (schema 4 requires
    them: record/meta_schema.check_required), and the planned rows (schema 5)."""
    from ipcbench.record.meta_parts import GpuRecord, RankRecord

    draft.hosts, draft.ranks = ["h"], [RankRecord(0, "h", 0, 0, 1)]
    draft.gpus, draft.planned_rows = {"h": [GpuRecord(0, uuid="GPU-0")]}, []
    return draft


def test_what_the_writer_writes_reads_back_equal(tmp_path):
    draft = _who_ran(run_meta.base_meta("rid", ["copy", "--quick"]))
    draft.skipped = [Skipped("nccl", "nccl push", "no NCCL", "h")]
    draft.write(tmp_path)
    m = read_meta(tmp_path)
    assert m.command == ["ipcbench", "copy", "--quick"] and m.run_id == "rid" and m.status == "running"
    assert m.skipped == [Skipped("nccl", "nccl push", "no NCCL", "h")]
    assert m == draft.meta()
    assert Meta.from_json(m.as_json()) == m
    assert Meta.from_json(json.loads(json.dumps(m.as_json()))) == m  # through the JSON text too


@pytest.mark.parametrize("run_dir", RECORDED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_recorded_meta_round_trips(run_dir):
    """Every meta.json under results/ and tests/data/ reads the same after being written by the record class."""
    m = read_meta(run_dir)
    assert m.found and Meta.from_json(m.as_json()) == m
    raw = json.loads((run_dir / META_NAME).read_text())
    again = m.as_json()
    assert {k: again[k] for k in raw if k != "command"} == {k: v for k, v in raw.items() if k != "command"}


def test_a_command_written_as_a_string_reads_as_a_list():
    """check and selftest once wrote "command": "check"; it read as [] (the command lost)."""
    assert Meta.from_json({"command": "check"}).command == ["check"]
    assert Meta.from_json({"command": ["ipcbench", "check", "--from", "x"]}).command == ["ipcbench", "check", "--from",
                                                                                       "x"]
    with pytest.raises(MetaError, match="field command: a number"):
        Meta.from_json({"command": 7})


def test_the_record_never_writes_a_command_string(tmp_path):
    Meta.from_json({**_who_ran(run_meta.base_meta("rid", ["check"])).as_json(), "command": "check"}).write(tmp_path)
    assert json.loads((tmp_path / META_NAME).read_text())["command"] == ["check"]


def test_noise_basis_defaults_to_within_run_and_round_trips():
    assert Meta().noise_basis == "within-run" and Meta.from_json({}).noise_basis == "within-run"
    m = Meta.from_json({"noise_basis": "between-runs"})
    assert m.noise_basis == "between-runs" and Meta.from_json(m.as_json()).noise_basis == "between-runs"
    with pytest.raises(MetaError, match="field noise_basis"):
        Meta.from_json({"noise_basis": 3})


def test_skipped_steps_are_typed_and_a_malformed_one_is_an_error():
    m = Meta.from_json({"skipped": [{"suite": "kernel", "step": "sm_bulk_read pull", "reason": "needs cc 9.0"}]})
    assert m.skipped == [Skipped("kernel", "sm_bulk_read pull", "needs cc 9.0")]
    assert m.as_json()["skipped"] == [{"suite": "kernel", "step": "sm_bulk_read pull", "reason": "needs cc 9.0",
                                       "host": ""}]
    for bad, field in (("junk", "skipped[0]"), ({"suite": "x"}, "skipped[0]")):
        with pytest.raises(MetaError) as e:
            Meta.from_json({"skipped": [bad]})
        assert e.value.field == field
    assert Meta.from_json({}).skipped == []
    assert m.skipped_by_suite() == {"kernel": ["sm_bulk_read pull: needs cc 9.0"]}
