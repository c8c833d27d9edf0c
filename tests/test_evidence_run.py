"""Every measuring command records the node's evidence in meta.json: a snapshot on each node's local rank 0
before the first measurement and after the last, with the run's own pids, read back through the record. On fakes
(tests/fakes.py ranks as threads, tests/nvml_fake.py for NVML): the orchestration, not a GPU."""

from __future__ import annotations

import json
import os

import pytest
from nvml_fake import FakePynvml, NVMLError_LibraryNotFound, h100
from test_check import _measure_on_fakes
from test_run_on_fakes import cfg, fake_job  # noqa: F401 - fake_job is a fixture
from test_selftest import _selftest_on_fakes

from ipcbench.evidence import read
from ipcbench.evidence.delta import changes
from ipcbench.record.meta import read_meta
from ipcbench.run import runner
from ipcbench.selftest import anchor


@pytest.fixture
def nvml(monkeypatch):
    """A fake NVML of two H100s whose second session (the after snapshot) sees another job's process on GPU 1;
    `events` records each NVML session and each walk, in order."""
    events: list[str] = []
    nv = FakePynvml([h100(0), h100(1)])

    nv.gpus[0].processes = [(os.getpid(), 1 << 29)]  # the fake ranks (threads of this process) hold a context

    def session():
        events.append("nvml")
        if events.count("nvml") == 2:
            nv.gpus[1].processes = [(4242, 2 << 30)]
        return nv

    monkeypatch.setattr(read, "_nvml", session)
    real_walk = runner.walk

    def walk(*a, **k):
        events.append("walk")
        return real_walk(*a, **k)

    monkeypatch.setattr(runner, "walk", walk)
    return events


def recorded(run_dir):
    meta = read_meta(run_dir)
    ev = meta.evidence
    assert ev.hosts() == ["fakehost"]
    before, after = ev.before("fakehost"), ev.after("fakehost")
    assert before is not None and after is not None and before.time <= after.time
    assert before.own_pids == after.own_pids == [os.getpid()]  # the fake ranks are threads of this process
    assert len(before.gpus) == 2 and before.gpus[0].active_links() == 18
    return meta, before, after


def test_a_run_records_its_node_before_the_first_measurement_and_after_the_last(fake_job, nvml, tmp_path):  # noqa: F811
    statuses, _ = fake_job(cfg(tmp_path / "run", suites=("copy",), argv=("copy",)))
    assert statuses == [0, 0]
    assert nvml == ["nvml", "walk", "walk", "nvml"]  # one snapshot per node (local rank 0), around both ranks' walk
    meta, before, after = recorded(tmp_path / "run")
    assert [c.text for c in changes(before, after)] == [
        "another process, pid 4242 (2.0 GiB), appeared on GPU 1 during the run"]
    # what was written reads back and writes again unchanged
    assert meta.as_json()["evidence"] == json.loads((tmp_path / "run" / "meta.json").read_text())["evidence"]


def test_a_run_without_nvml_records_why(fake_job, monkeypatch, tmp_path):  # noqa: F811
    def no_nvml():
        raise NVMLError_LibraryNotFound()

    monkeypatch.setattr(read, "_nvml", no_nvml)
    statuses, _ = fake_job(cfg(tmp_path / "run", suites=("copy",), argv=("copy",)))
    assert statuses == [0, 0]
    ev = read_meta(tmp_path / "run").evidence
    assert [(s.when, s.missing) for s in ev.snapshots] == [
        ("before", "no NVML: NVMLError_LibraryNotFound: NVML Shared Library Not Found"),
        ("after", "no NVML: NVMLError_LibraryNotFound: NVML Shared Library Not Found")]


def test_check_records_its_node(fake_job, nvml, monkeypatch, tmp_path):  # noqa: F811
    statuses, _ = _measure_on_fakes(fake_job, monkeypatch, tmp_path, floor=1.0)
    assert statuses == [0, 0]
    assert nvml[0] == "nvml" and nvml[-1] == "nvml" and "walk" in nvml
    recorded(tmp_path / "run")


def test_selftest_records_its_node_after_the_anchors(fake_job, nvml, monkeypatch, tmp_path):  # noqa: F811
    real = anchor.measure

    def measure(*a, **k):
        nvml.append("anchor")
        return real(*a, **k)

    monkeypatch.setattr(anchor, "measure", measure)
    statuses, _ = _selftest_on_fakes(fake_job, monkeypatch, tmp_path)
    assert statuses == [0, 0]
    assert nvml[0] == "nvml" and nvml[-1] == "nvml" and nvml.index("anchor") < len(nvml) - 1
    recorded(tmp_path / "st")


def test_the_snapshots_are_read_while_the_run_sets_up_and_releases_never_while_it_measures(fake_job, nvml,  # noqa: F811
                                                                                         monkeypatch, tmp_path):
    """The before snapshot is read on a helper thread while the ranks set up their buffers, and done before the
    first walk; the after one while they release what they hold, started after the last walk. The fake setup (and
    the fake release) goes on only once NVML has been read beside it: read one after the other, after the setup,
    it would wait in vain (logic only: fake GPUs and a fake NVML)."""
    import threading

    from ipcbench.core.context import Ctx

    read_now = {"before": threading.Event(), "after": threading.Event()}
    real_setup, real_clean_up, real_session = runner._setup_buffers, Ctx.clean_up, read._nvml

    def setup(*a, **k):
        assert read_now["before"].wait(timeout=10), "the before snapshot was not read beside the setup"
        nvml.append("setup")
        return real_setup(*a, **k)

    def clean_up(self):
        assert read_now["after"].wait(timeout=10), "the after snapshot was not read beside the release"
        nvml.append("release")
        return real_clean_up(self)

    def session():
        when = "after" if "walk" in nvml else "before"
        nv = real_session()
        read_now[when].set()
        return nv

    monkeypatch.setattr(runner, "_setup_buffers", setup)
    monkeypatch.setattr(Ctx, "clean_up", clean_up)
    monkeypatch.setattr(read, "_nvml", session)
    statuses, _ = fake_job(cfg(tmp_path / "run", suites=("copy",), argv=("copy",)))
    assert statuses == [0, 0]
    assert nvml == ["nvml", "setup", "setup", "walk", "walk", "nvml", "release", "release"]
    recorded(tmp_path / "run")


def test_a_process_the_setup_started_is_the_runs_own_in_the_evidence(fake_job, nvml, monkeypatch,  # noqa: F811
                                                                     tmp_path):
    """A prelude's process (Step.prelude; the handles suite's exporting child) may hold a context while NVML reads
    the node: its pid is among the run's own, not another job's (logic only: fake GPUs, a fake NVML)."""
    from dataclasses import replace

    from ipcbench.config import RunConfig

    def prelude(ctx, pairs):
        ctx.helper_pids.append(4343)
        return lambda: None

    real_steps = RunConfig.steps
    monkeypatch.setattr(RunConfig, "steps", lambda self, n: [replace(s, prelude=prelude)
                                                             for s in real_steps(self, n)][:1])
    statuses, _ = fake_job(cfg(tmp_path / "run", suites=("copy",), argv=("copy",)))
    assert statuses == [0, 0]
    ev = read_meta(tmp_path / "run").evidence
    assert ev.before("fakehost").own_pids == ev.after("fakehost").own_pids == sorted([os.getpid(), 4343])
    # where the after snapshot is taken at the close (selftest's: its anchors follow the release), the same pids
    from ipcbench.run import runner as runner_mod

    real_release = runner_mod.release
    monkeypatch.setattr(runner_mod, "release", lambda s, more_to_measure=False: real_release(s, True))
    statuses, _ = fake_job(cfg(tmp_path / "late", suites=("copy",), argv=("copy",)))
    assert statuses == [0, 0]
    ev = read_meta(tmp_path / "late").evidence
    assert ev.before("fakehost").own_pids == ev.after("fakehost").own_pids == sorted([os.getpid(), 4343])
