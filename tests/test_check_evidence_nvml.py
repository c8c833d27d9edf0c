"""check's evidence rules on what evidence/read.py reads through a fake pynvml (tests/nvml_fake.py): a quiet H100
pair passes; a link retrying, a link going down, another job's process, a driver without the counters, no NVML,
each as the real binding would answer, judged end to end (read -> record -> judge)."""

from __future__ import annotations

import json

from nvml_fake import FakePynvml, NVMLError, NVMLError_LibraryNotFound, h100

from ipcbench.judging import evidence_rules, expect
from ipcbench.evidence import read
from ipcbench.evidence.model import Evidence
from ipcbench.status import Status

H100 = "NVIDIA H100 80GB HBM3"
OWN = [10, 11]


def judged(monkeypatch, nv: FakePynvml, change=None) -> evidence_rules.Judged:
    """Read the node before and after (`change(nv)` between: what happened during the run), record it as
    meta.json would, read it back and judge it with the shipped expectations."""
    monkeypatch.setattr(read, "_nvml", lambda: (nv.nvmlInit(), nv)[1])
    before = read.read_snapshot("before", host="node1", own_pids=OWN)
    if change is not None:
        change(nv)
    after = read.read_snapshot("after", host="node1", own_pids=OWN)
    ev = Evidence.from_json(json.loads(json.dumps(Evidence([before, after]).as_json())))
    return evidence_rules.judge(ev, expect.evidence_defaults(), {"node1": {0: H100, 1: H100}})


def bad(j: evidence_rules.Judged) -> list[tuple[Status, str]]:
    return [(f.status, f.brief) for f in j.findings if f.status is not Status.PASS]


def test_a_quiet_h100_pair_read_through_nvml_passes(monkeypatch):
    j = judged(monkeypatch, FakePynvml([h100(0, processes=[(10, 1 << 30)]), h100(1, processes=[(11, 1 << 30)])]))
    assert bad(j) == [] and not j.notes
    assert len(j.findings) == 16  # eight rules on each GPU


def test_a_link_that_retried_and_one_that_went_down_are_named(monkeypatch):
    def run(nv):
        nv.gpus[1].errors = {4: {0: 12}}  # NVML_NVLINK_ERROR_DL_REPLAY on link 4
        nv.gpus[1].links = [True] * 7 + [False] + [True] * 10

    j = judged(monkeypatch, FakePynvml([h100(0), h100(1)]), run)
    assert sorted(bad(j)) == [(Status.FAIL, "12 replays on GPU 1 link 4 during the run"),
                              (Status.FAIL, "GPU 1: 17 of 18 NVLinks active (link 7 went down during the run)")]


def test_a_second_process_holding_gpu_1_fails_naming_its_pid(monkeypatch):
    def run(nv):
        nv.gpus[1].processes = [(11, 1 << 30), (4242, 3 << 29)]

    nv = FakePynvml([h100(0), h100(1)], names={4242: "python"})
    assert bad(judged(monkeypatch, nv, run)) == [(Status.FAIL, "pid 4242 (python) holds 1.5 GiB on GPU 1")]


def test_a_driver_without_the_error_counters_cannot_be_judged_healthy(monkeypatch):
    nv = FakePynvml([h100(0, error_counter_code=3, fields_code=3), h100(1)])
    j = judged(monkeypatch, nv)  # the fields refused too: no speed either (the catalogue's rate is no reading)
    assert bad(j) == [(Status.UNJUDGED, "GPU 0: the speed of NVLink links 0-17 not available (not read (not "
                                        "supported by the driver): NVLink 4.0's rate per link from the catalogue)"),
                      (Status.UNJUDGED, "GPU 0: the error counters of NVLink links 0-17 not available (not "
                                        "supported by the driver)")]


def test_a_binding_without_the_process_call_cannot_be_judged_healthy(monkeypatch):
    j = judged(monkeypatch, FakePynvml([h100(0), h100(1)], missing=("nvmlDeviceGetComputeRunningProcesses",)))
    assert {(f.status, f.method, f.src_gpu) for f in j.findings if f.status is not Status.PASS} == \
        {(Status.UNJUDGED, "processes", 0), (Status.UNJUDGED, "processes", 1)}


def test_no_nvml_cannot_judge_the_required_items_and_fails_nothing(monkeypatch):
    nv = FakePynvml([h100(0)], init_error=NVMLError_LibraryNotFound())
    j = judged(monkeypatch, nv)
    assert j.findings and {f.status for f in j.findings} == {Status.UNJUDGED}
    assert all(f.brief.startswith(f"GPU {f.src_gpu}: ") and "no NVML" in f.brief for f in j.findings)


def test_a_thermal_slowdown_read_from_the_fields_fails(monkeypatch):
    def run(nv):
        nv.gpus[0].clock_ns = {**nv.gpus[0].clock_ns, 270: 800_000_000}  # HW_THERM_SLOWDOWN, ns

    j = judged(monkeypatch, FakePynvml([h100(0), h100(1)]), run)
    assert bad(j) == [(Status.FAIL, "GPU 0 slowed down for heat (hardware) for 0.8 s of the run")]


def test_an_error_on_one_item_is_that_items_alone(monkeypatch):
    nv = FakePynvml([h100(0), h100(1)])
    monkeypatch.setattr(nv, "nvmlDeviceGetTotalEccErrors", lambda *a: (_ for _ in ()).throw(NVMLError(4)))
    j = judged(monkeypatch, nv)
    assert {(f.status, f.method) for f in j.findings if f.status is not Status.PASS} == {(Status.UNJUDGED, "ecc")}
