"""Rows that describe themselves (results.py FACT_COLUMNS): the facts are declared once per (suite, method) by
the method table and the suites (SuiteSpec.rows), written by the runner (run/walk.py) and derived the same
way for runs written before them (record/run.derive_facts). No GPU: the runner on fakes, and recorded runs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from fakes import FakeNccl
from ipcbench.ipc import nccl as ncclmod
from ipcbench.record.meta import Meta, parse_meta
from ipcbench.record.run import derive_facts, load_run
from ipcbench.record.table import read_table
from ipcbench.results import FACT_COLUMNS, SCHEMA_VERSION, RowFacts, described
from ipcbench.suites.registry import ORDER, row_facts, spec
from test_run_on_fakes import cfg, fake_job  # noqa: F401 - fake_job is a fixture

REPO = Path(__file__).resolve().parents[1]
RECORDED = sorted(p.parent for p in [*REPO.glob("results/*/results.csv"), *REPO.glob("tests/data/**/results.csv")])
FACTS = ["engine", "access", "mechanism", "pattern", "timing"]


def rederived(frame: pd.DataFrame, meta: Meta) -> pd.DataFrame:
    """The frame with its facts blanked and derived again, as for a run written before them."""
    old = frame.drop(columns=list(FACT_COLUMNS))
    derive_facts(old, meta)
    return old


def test_the_rule_adds_what_depends_on_the_row():
    ce = row_facts("copy", "ce")
    assert described(ce, "push", False) == ("ce", "write", "legacy", "batch", "gated")
    assert described(ce, "pull", False)[1] == "read"  # the destination's engine reads the peer
    assert described(ce, "bidir", True)[4] == "window"  # both processes on one GPU: one window on its clock
    assert described(row_facts("kernel", "sm_read"), "bidir", False)[:2] == ("sm", "read")  # its style
    assert described(row_facts("staged", "shm_staged"), "push", True) == ("shm", "", "shm", "batch", "handoff")
    assert described(None, "push", False) == ("",) * 5  # a method nobody declared says nothing


def test_every_method_the_committed_and_recorded_runs_hold_is_declared():
    """A new method must be declared in its suite (SuiteSpec.rows): else its rows would not say what they are."""
    for run_dir in RECORDED:
        frame = read_table(run_dir / "results.csv")
        undeclared = {(s, m) for s, m in zip(frame["suite"], frame["method"]) if row_facts(s, m) is None}
        assert not undeclared, (run_dir.name, sorted(undeclared))


def test_the_suites_declare_with_the_method_table():
    from ipcbench.core.methods import METHODS

    for name in ORDER:
        for method, facts in spec(name).rows.items():
            assert isinstance(facts, RowFacts) and facts.engine and facts.mechanism, (name, method)
            if method in METHODS:  # engine and sharing from the one method table, never from the name
                m = METHODS[method]
                assert (facts.engine, facts.mechanism) == (m.engine, m.engine if m.two_sided else m.buffers)


@pytest.mark.parametrize("run_dir", RECORDED, ids=lambda p: p.name)
def test_recorded_runs_get_their_facts_on_read(run_dir):
    run = load_run(run_dir / "results.csv")
    f = run.frame
    assert (f["engine"] != "").all() and (f["timing"] != "").all()
    if not run.meta.found:  # results.csv alone (tests/data/h100x2/all-2, all-3 lost their meta.json): as written
        assert f["mps"].notna().all()
        return
    if run.meta.schema_version >= 2:  # the runner wrote the facts: what the table derives for an older run
        frame = read_table(run_dir / "results.csv")
        again = rederived(frame, run.meta)
        for c in FACTS:
            assert frame[c].tolist() == again[c].tolist(), c
    else:  # recorded before the facts existed: derived, from the table
        assert run.meta.schema_version == 1
    if run.meta.mps:
        assert f["mps"].notna().all()
    else:  # older than MPS detection: not recorded, and said so
        assert f["mps"].isna().all()
    assert set(f.loc[f["pattern"] == "alltoall", "timing"]) <= {"window"}
    assert set(f.loc[f["method"].isin(["mpi_staged"]), "timing"]) <= {"host"}


def test_the_runner_writes_the_facts_the_reader_derives(fake_job, tmp_path):  # noqa: F811
    """copy and kernel on the fakes: every row carries its facts, exactly what the table gives an older run."""
    out = tmp_path / "run"
    statuses, _ = fake_job(cfg(out, suites=("copy", "kernel"), sizes=(4096,), quiet=True))
    assert statuses == [0, 0]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["schema_version"] == SCHEMA_VERSION
    frame = read_table(out / "results.csv")
    assert (frame["engine"] != "").all() and frame["round_pairs"].eq(1).all() and frame["mps"].eq(False).all()
    again = rederived(frame, parse_meta(meta))
    for c in FACTS:
        assert frame[c].tolist() == again[c].tolist(), c
    kernels = frame[frame["method"] == "sm_read"]
    assert set(kernels["engine"]) == {"sm"} and set(kernels["access"]) == {"read"}


def test_nccl_rows_say_nccl(fake_job, tmp_path, monkeypatch):  # noqa: F811
    lib = FakeNccl()  # one library for every rank: a send meets its receive
    monkeypatch.setattr(ncclmod, "load", lambda: lib)
    out = tmp_path / "run"
    statuses, _ = fake_job(cfg(out, suites=("nccl",), argv=("nccl",), quiet=True))
    assert statuses == [0, 0]
    frame = read_table(out / "results.csv")
    assert set(frame["engine"]) == {"nccl"} and set(frame["mechanism"]) == {"nccl"}
    assert set(frame.loc[frame["method"] == "nccl_pingpong", "pattern"]) == {"pingpong"}
