"""Steps that could not run leave a trace in the run: run/walk.py records each skipped step with its reason, the
runner writes them to meta.json through the record class, and a reader reads them back typed (record/meta.Skipped).
End to end on the fakes of tests/test_run_on_fakes.py (threads for ranks, host memory for GPUs)."""

from __future__ import annotations

import json

from test_run_on_fakes import cfg, fake_job  # noqa: F401 (a fixture)

from ipcbench.record.meta import Meta, Skipped, read_meta


def test_a_run_records_the_steps_it_skipped_and_why(fake_job, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    statuses, _ = fake_job(cfg(out, quiet=True))
    assert statuses == [0, 0]
    raw = json.loads((out / "meta.json").read_text())
    labels = [s["step"] for s in raw["skipped"]]
    assert labels == ["pool_ce push", "pool_ce pull", "pool_ce bidir", "pool_sm_read pull", "pool_sm_read bidir",
                      "pool_sm_write push", "pool_sm_write bidir", "core_ce push", "core_ce pull"]
    meta = read_meta(out)
    assert meta.skipped[0] == Skipped("pool", "pool_ce push", "no IPC pools on a fake GPU", "fakehost")
    assert set(meta.skipped_by_suite()) == {"pool"}
    # what the runner wrote through the record class reads back equal, with the command as the list it was given
    assert Meta.from_json(raw) == meta and Meta.from_json(meta.as_json()) == meta
    assert meta.command == ["ipcbench", "copy", "pool"] and meta.status == "complete"


def test_a_run_that_skipped_nothing_records_an_empty_list(fake_job, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    statuses, _ = fake_job(cfg(out, suites=("copy",), quiet=True))
    assert statuses == [0, 0]
    assert json.loads((out / "meta.json").read_text())["skipped"] == [] and read_meta(out).skipped == []
