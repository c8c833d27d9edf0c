"""MPS detection (core/mps.py): the decision from every rank's readings (pure), the CUDA reads behind a
faked driver, the runner's wiring on fakes (ctx.mps, meta.json, one refusal on every rank), the notes of
same-GPU rows, and `ipcbench info`. No GPU: what a real driver reports is checked on a GPU machine
(docs/suites.md, "When MPS matters")."""

from __future__ import annotations

import csv
import json
import threading
from types import SimpleNamespace

import pytest

from fakes import FakeNode, run_ranks
from ipcbench import info
from ipcbench.core import gpu as gpumod
from ipcbench.core import mps
from ipcbench.errors import UsageError
from ipcbench.run import runner
from test_run_on_fakes import cfg, fake_job  # noqa: F401 - fake_job is a fixture

A = mps.ATTRIBUTE


def rd(gpu=0, on=True, mode=0, pipe=None, control=None, rank=None, expect=None, error=None):
    """One rank's readings as mps.read returns them (on=None: the attribute was unreadable)."""
    r = {"gpu": gpu, "mps_enabled": on, "read_by": None if on is None else "cuda.bindings cuDeviceGetAttribute",
         "error": error if on is None else None, "compute_mode": mode, "pipe_dir": pipe,
         "control_pipe": bool(on) if control is None else control, "expect": expect}
    if rank is not None:
        r["rank"] = rank
    return r


# ---- the decision ---------------------------------------------------------------------------------

def test_two_ranks_on_one_gpu_under_mps():
    st = mps.decide([rd(mode=3, rank=0), rd(mode=3, rank=1)], "h")
    assert st.gpus == {0: True} and st.source == A and st.error is None
    assert st.note == (f"GPU 0: MPS (2 ranks; {A}=1; compute mode EXCLUSIVE_PROCESS; pipe /tmp/nvidia-mps); "
                       "same-GPU kernels run concurrently")
    assert st.as_meta() == {"gpus": {"0": True}, "source": A, "note": st.note, "readings": st.readings}
    json.dumps(st.as_meta())  # meta.json can hold it


def test_two_ranks_on_one_gpu_without_mps():
    st = mps.decide([rd(on=False), rd(on=False)])
    assert st.gpus == {0: False} and st.error is None
    assert st.note == f"GPU 0: no MPS (2 ranks; {A}=0; compute mode DEFAULT); same-GPU kernels are time-sliced"


def test_mps_in_default_compute_mode_is_said_not_refused():
    st = mps.decide([rd(mode=0), rd(mode=0)])
    assert st.gpus == {0: True} and st.error is None
    assert "GPU 0 is under MPS in compute mode DEFAULT (EXCLUSIVE_PROCESS is usual with MPS; not required)" in st.note


def test_exclusive_process_without_mps_is_said():
    st = mps.decide([rd(on=False, mode=3)])
    assert st.gpus == {0: False} and "GPU 0 is in compute mode EXCLUSIVE_PROCESS but not under MPS" in st.note


def test_unreadable_compute_mode_is_no_disagreement():
    st = mps.decide([rd(mode=None), rd(mode=None)])
    assert "compute mode unreadable" in st.note and "usual" not in st.note


@pytest.mark.parametrize("control, status", [(True, True), (False, False)])
def test_unreadable_attribute_falls_back_to_the_control_pipe(control, status):
    why = "cuda.bindings: DynamicLibNotFoundError: no driver"
    st = mps.decide([rd(on=None, control=control, error=why, rank=3)])
    assert st.gpus == {0: status} and st.source == mps.PIPE_SOURCE and st.error is None
    assert f"attribute unreadable, control pipe {'found' if control else 'absent'}" in st.note
    assert f"rank 3: {A} unreadable ({why}); MPS inferred from the control pipe in /tmp/nvidia-mps" in st.note


def test_attribute_and_control_pipe_that_disagree_are_said():
    st = mps.decide([rd(on=True, control=False, pipe="/p", rank=0), rd(on=True, control=False, pipe="/p", rank=1)])
    assert st.gpus == {0: True} and "ranks 0, 1: the driver reports MPS but there is no control pipe in /p" in st.note
    st = mps.decide([rd(on=False, control=True, rank=4)])
    assert st.gpus == {0: False}
    assert "rank 4: an MPS control pipe exists in /tmp/nvidia-mps but the driver reports no MPS" in st.note


def test_an_empty_pipe_directory_without_mps_says_nothing_more():
    """IPCBENCH_MPS=off points the ranks at an empty private pipe directory: no disagreement there."""
    st = mps.decide([rd(on=False, pipe="/tmp/ipcb-mps.1.x/none", expect="0")] * 2)
    assert st.error is None and st.note == f"GPU 0: no MPS (2 ranks; {A}=0; compute mode DEFAULT); " \
                                           "same-GPU kernels are time-sliced"


def test_ranks_that_share_a_gpu_but_disagree_are_an_error():
    st = mps.decide([rd(on=True, pipe="/a", rank=0), rd(on=False, pipe="/b", rank=1), rd(gpu=1, on=False, rank=2)],
                    "node7")
    assert st.error == ("GPU 0 on node7 is shared by ranks that do not agree on MPS: rank 0 runs under MPS, rank 1 "
                        "does not (pipe directories rank 0: /a; rank 1: /b); same-GPU numbers would mix two "
                        "setups: give every rank the same MPS environment (CUDA_MPS_PIPE_DIRECTORY)")
    assert st.gpus == {0: False, 1: False}


def test_ranks_on_different_gpus_may_differ():
    st = mps.decide([rd(gpu=0, on=True, mode=3), rd(gpu=1, on=False)])
    assert st.error is None and st.gpus == {0: True, 1: False}
    assert st.note.endswith("no GPU has two ranks, so MPS changes no row")


def test_gpus_with_the_same_story_share_one_clause():
    st = mps.decide([rd(gpu=g, on=False) for g in range(4)])
    assert st.note == (f"GPUs 0, 1, 2, 3: no MPS (1 rank; {A}=0; compute mode DEFAULT); "
                       "no GPU has two ranks, so MPS changes no row")
    st = mps.decide([rd(gpu=g, on=None, control=False, error="no driver", rank=g) for g in range(3)])
    assert st.note.count("unreadable (no driver)") == 1  # one remark for every rank it is about
    assert st.note.endswith(f"ranks 0, 1, 2: {A} unreadable (no driver); MPS inferred from the control pipe in "
                            "/tmp/nvidia-mps")


@pytest.mark.parametrize("expect, on, error", [
    ("1", True, None), ("0", False, None),
    ("1", False, "IPCBENCH_EXPECT_MPS=1 (the job asked for MPS) but GPU 0 on h does not run under MPS"),
    ("0", True, "IPCBENCH_EXPECT_MPS=0 (the job asked for no MPS) but GPU 0 on h runs under MPS"),
    ("yes", True, "IPCBENCH_EXPECT_MPS=yes: must be 0 or 1"),
])
def test_what_the_job_asked_for_is_checked(expect, on, error):
    st = mps.decide([rd(on=on, expect=expect)] * 2, "h")
    assert (st.error or "").startswith(error or "") and bool(st.error) == bool(error)


def test_summary_of_several_hosts():
    one = mps.decide([rd()]).as_meta()
    assert mps.summary({"a": one}) == one["note"]
    assert mps.summary({"a": one, "b": one}) == f"a: {one['note']}; b: {one['note']}"


# ---- the CUDA reads, behind a faked driver ---------------------------------------------------------

@pytest.fixture
def fake_driver(monkeypatch):
    """cuda.bindings' driver calls and CuPy's cudaDeviceGetAttribute, answering from `values`."""
    from cuda.bindings import driver
    from cupy.cuda import runtime

    ok, bad = driver.CUresult.CUDA_SUCCESS, driver.CUresult.CUDA_ERROR_INVALID_VALUE
    values = {"driver": 1, "runtime": None, "mode": 3}
    monkeypatch.setattr(driver, "cuInit", lambda flags: (ok,))
    monkeypatch.setattr(driver, "cuDeviceGet", lambda i: (ok, i))
    monkeypatch.setattr(driver, "cuDeviceGetAttribute",
                        lambda attr, dev: (ok, values["driver"]) if values["driver"] is not None else (bad, 0))

    def attribute(attr, index):
        key = "mode" if attr == runtime.cudaDevAttrComputeMode else "runtime" if attr == mps.ATTR_MPS_ENABLED else None
        if key is None or values[key] is None:
            raise runtime.CUDARuntimeError(1)
        return values[key]

    monkeypatch.setattr(runtime, "deviceGetAttribute", attribute)
    return values


def test_read_through_the_driver_api(fake_driver, tmp_path):
    (tmp_path / "control").write_text("")
    r = mps.read(2, {"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path), "IPCBENCH_EXPECT_MPS": "1"})
    assert r == {"gpu": 2, "mps_enabled": True, "read_by": "cuda.bindings cuDeviceGetAttribute", "error": None,
                 "compute_mode": 3, "pipe_dir": str(tmp_path), "control_pipe": True, "expect": "1"}


def test_read_falls_back_to_the_runtime_then_gives_up(fake_driver, monkeypatch, tmp_path):
    fake_driver.update(driver=None, runtime=0)
    r = mps.read(0, {"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)})
    assert (r["mps_enabled"], r["read_by"], r["control_pipe"], r["expect"]) == (False, "cupy cudaDeviceGetAttribute",
                                                                               False, None)
    fake_driver.update(runtime=None, mode=None)
    r = mps.read(0, {})
    assert r["mps_enabled"] is None and r["compute_mode"] is None and r["pipe_dir"] is None
    assert r["error"].startswith("cuDeviceGetAttribute: CUDA_ERROR_INVALID_VALUE; cudaDeviceGetAttribute(133)")
    monkeypatch.setattr(mps, "ATTRIBUTE", "CU_DEVICE_ATTRIBUTE_FROM_THE_FUTURE")  # older cuda-bindings
    fake_driver.update(runtime=1)
    r = mps.read(0, {})
    assert r["mps_enabled"] is True and r["read_by"] == "cupy cudaDeviceGetAttribute"


def test_the_installed_bindings_know_the_attribute():
    from cuda.bindings import driver

    assert int(getattr(driver.CUdevice_attribute, mps.ATTRIBUTE)) == mps.ATTR_MPS_ENABLED


def test_read_never_raises_here():
    """This machine's real stack (no GPU, or one): an answer, never an exception."""
    r = mps.read(0)
    assert set(r) == {"gpu", "mps_enabled", "read_by", "error", "compute_mode", "pipe_dir", "control_pipe", "expect"}
    assert (r["mps_enabled"] is None) == bool(r["error"])


# ---- the runner on fakes ----------------------------------------------------------------------------

@pytest.fixture
def readings(monkeypatch):
    """mps.read on fake rank r answers per_rank[r] (the ranks are threads named fake-rank-<r>)."""
    per_rank: dict[int, dict] = {}

    def read(index, environ=None):
        r = int(threading.current_thread().name.rsplit("-", 1)[1])
        return {**per_rank[r], "gpu": index}

    monkeypatch.setattr(mps, "read", read)
    return per_rank


def rows_of(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("on", [True, False])
def test_runner_sets_ctx_and_meta_and_notes(fake_job, readings, tmp_path, monkeypatch, capsys, on):  # noqa: F811
    monkeypatch.setattr(gpumod, "device_count", lambda: 1)  # both ranks on GPU 0
    readings.update({0: rd(on=on, mode=3 if on else 0), 1: rd(on=on, mode=3 if on else 0)})
    seen = []
    real_walk = runner.walk

    def walk(ctx, *a, **kw):
        seen.append(ctx.mps)
        return real_walk(ctx, *a, **kw)

    monkeypatch.setattr(runner, "walk", walk)
    out = tmp_path / "run"
    statuses, _ = fake_job(cfg(out, suites=("kernel",), sizes=(4096,), quiet=True))
    assert statuses == [0, 0] and seen == [on, on]
    m = json.loads((out / "meta.json").read_text())["mps"]
    assert set(m) == {"fakehost"} and m["fakehost"]["gpus"] == {"0": on} and m["fakehost"]["source"] == A
    assert [r["rank"] for r in m["fakehost"]["readings"]] == [0, 1]
    assert (f"MPS: GPU 0: {'MPS' if on else 'no MPS'} (2 ranks; {A}={int(on)}" in capsys.readouterr().out)
    bidir = [r for r in rows_of(out / "results.csv") if r["direction"] == "bidir"]
    assert bidir and all(r["same_gpu"] == "true" for r in bidir)
    for r in bidir:
        if on:
            assert "run concurrently (MPS)" in r["note"] and "no MPS" not in r["note"]
        else:
            assert "time-sliced (no MPS)" in r["note"] and "concurrently" not in r["note"]


@pytest.mark.parametrize("second, expect, message", [
    (rd(on=False), None, "GPU 0 on fakehost is shared by ranks that do not agree on MPS: rank 0 runs under MPS, "
                         "rank 1 does not"),
    (rd(on=True), "0", "IPCBENCH_EXPECT_MPS=0 (the job asked for no MPS) but GPU 0 on fakehost runs under MPS"),
])
def test_runner_refuses_on_every_rank_alike(fake_job, readings, tmp_path, monkeypatch, second, expect,  # noqa: F811
                                            message):
    monkeypatch.setattr(gpumod, "device_count", lambda: 1)
    readings.update({0: rd(on=True, expect=expect), 1: {**second, "expect": expect}})
    statuses, node = fake_job(cfg(tmp_path / "run"))
    assert statuses[0] == statuses[1] and statuses[0].startswith(f"UsageError: {message}")
    assert not (tmp_path / "run").exists() and node.gpus[0].fills == []


def test_a_refusal_on_one_node_ends_every_node(readings):
    """Node b's ranks disagree; node a's are fine: all four ranks raise the same error."""
    readings.update({0: rd(), 1: rd(), 2: rd(on=True), 3: rd(on=False)})

    def rank(world):
        try:
            return runner._detect_mps(world, 0)
        except UsageError as e:
            return f"UsageError: {e}"

    got = run_ranks(rank, n=4, hosts=["a", "a", "b", "b"])
    assert len(set(got)) == 1 and got[0].startswith("UsageError: GPU 0 on b is shared by ranks that do not agree")
    readings[3] = rd(on=True)
    got = run_ranks(rank, n=4, hosts=["a", "a", "b", "b"])
    assert [g[0] for g in got] == [True] * 4
    assert set(got[0][1]) == {"a", "b"} and got[0][1]["b"]["gpus"] == {"0": True}


# ---- the notes of same-GPU rows ---------------------------------------------------------------------

def test_same_gpu_notes_follow_mps_in_every_suite():
    from ipcbench.suites import latency, pipeline, staged
    from ipcbench.suites.staged_plan import plan_chunks

    node = FakeNode(n=3, gpu_of=[0, 0, 1])
    ctx = node.ctx(SimpleNamespace(local_rank=0, node_ranks=[0, 1, 2]))
    plan = plan_chunks(4096, 1 << 20, 3)

    def notes():
        return [latency._same_gpu_note(ctx, 0, 1), pipeline._same_gpu_note(ctx, 0, 1, 16),
                staged._shm_note(ctx, 0, 1, plan)]

    assert all("time-slice" in n and "no MPS" in n for n in notes())
    ctx.mps = True
    assert all("concurrently" in n and "MPS" in n and "no MPS" not in n and "time-slice" not in n for n in notes())
    assert pipeline._same_gpu_note(ctx, 0, 2, 16) == "" and latency._same_gpu_note(ctx, 0, 2) == ""
    assert "MPS" not in staged._shm_note(ctx, 0, 2, plan)


# ---- ipcbench info -----------------------------------------------------------------------------------

def test_info_shows_mps_per_gpu(monkeypatch, capsys):
    from test_info import DATA

    data = json.loads(json.dumps(DATA))
    data["gpus"][0]["mps"] = {"enabled": True, "source": A, "reading": rd(on=True, mode=3, pipe="/run/mps")}
    data["gpus"][1]["mps"] = {"enabled": False, "source": mps.PIPE_SOURCE,
                              "reading": rd(gpu=1, on=None, mode=None, control=False, error="no driver")}
    monkeypatch.setattr(gpumod, "device_count", lambda: 2)
    monkeypatch.setattr(info, "collect", lambda: data)
    assert info.run(SimpleNamespace(json=False)) == 0
    out = capsys.readouterr().out
    assert "MPS (processes sharing one GPU: kernels run concurrently under MPS, time-sliced without it)" in out
    assert (f"  GPU 0: on ({A}=1), compute mode EXCLUSIVE_PROCESS, CUDA_MPS_PIPE_DIRECTORY /run/mps: "
            "control pipe found") in out
    assert ("  GPU 1: off (attribute unreadable: no driver; inferred from the control pipe), compute mode "
            "unreadable, default pipe directory /tmp/nvidia-mps: no control daemon") in out
    assert info.run(SimpleNamespace(json=True)) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["gpus"][0]["mps"]["enabled"] is True and got["gpus"][1]["mps"]["reading"]["error"] == "no driver"


def test_info_collects_mps_for_every_gpu(monkeypatch):
    from cupy.cuda import runtime

    from ipcbench.core import topology
    from ipcbench.run import meta
    from test_info import ATTRS, fake_cuda

    fake_cuda(monkeypatch, {**ATTRS, mps.ATTR_MPS_ENABLED: 1, runtime.cudaDevAttrComputeMode: 3})
    from cuda.bindings import driver

    monkeypatch.setattr(driver, "cuInit", lambda flags: (driver.CUresult.CUDA_ERROR_NO_DEVICE,))
    monkeypatch.setattr(gpumod, "device_count", lambda: 2)
    monkeypatch.setattr(gpumod, "device_info",
                        lambda i: gpumod.GpuInfo(i, "g", f"GPU-{i}", f"0000:0{i}:00.0", 1, 1, "9.0"))
    monkeypatch.setattr(runtime, "deviceCanAccessPeer", lambda i, j: 0)
    monkeypatch.setattr(topology, "_nvml", lambda: (_ for _ in ()).throw(OSError("no NVML here")))
    monkeypatch.setattr(meta, "library_versions", lambda: {"mpi4py": "x"})
    data = info.collect()
    for g in data["gpus"]:
        assert g["mps"]["enabled"] is True and g["mps"]["source"] == A
        assert g["mps"]["reading"]["read_by"] == "cupy cudaDeviceGetAttribute"
        assert g["mps"]["reading"]["compute_mode"] == 3 and g["mps"]["reading"]["gpu"] == g["index"]
