"""evidence/read.py over a fake pynvml (tests/nvml_fake.py): each answer filed as a value, each refusal as a
missing item with why (never a value, never ok), no NVML as a snapshot that says so. Tests the reader's
filing, not a GPU: the real driver's readings come from `python -m ipcbench.evidence.read` on the machine."""

from __future__ import annotations

import json
import time

import pytest
from nvml_fake import FakePynvml, NVMLError, NVMLError_LibraryNotFound, h100

from ipcbench.evidence import read
from ipcbench.evidence.model import GPU_ITEMS, Snapshot


def snap(monkeypatch, nv: FakePynvml, **kw) -> Snapshot:
    monkeypatch.setattr(read, "_nvml", lambda: (nv.nvmlInit(), nv)[1])
    s = read.read_snapshot("before", host="node1", own_pids=[10, 11], **kw)
    assert Snapshot.from_json(json.loads(json.dumps(s.as_json()))) == s  # what is read is what the record holds
    return s


def test_a_healthy_h100_node(monkeypatch):
    nv = FakePynvml([h100(0), h100(1)])
    s = snap(monkeypatch, nv)
    assert (s.host, s.when, s.own_pids, s.missing) == ("node1", "before", [10, 11], "")
    g = s.gpus[1]
    assert (g.index, g.uuid, g.pci_bus_id, g.model) == (1, "GPU-0001", "00000000:2B:00.0", "NVIDIA H100 80GB HBM3")
    links = g.links.value
    assert len(links) == 18 and g.active_links() == 18  # the binding's 36 slots: only the links that answer
    assert {ln.version.value for ln in links} == {"4.0"} and {ln.speed_gbps.value for ln in links} == {26.562}
    assert links[4].errors.value == {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}
    assert (g.pcie_gen.value, g.pcie_width.value, g.pcie_max_gen.value, g.pcie_max_width.value) == (5, 16, 5, 16)
    assert g.clock_events.value == ["idle"]
    assert g.clock_event_ns.value["sw_power_cap"] == 0 and g.clock_event_ns.value["hw_thermal_slowdown"] == 0
    assert (g.ecc_uncorrected_volatile.value, g.ecc_corrected_volatile.value) == (0, 0)
    assert (g.remap_pending.value, g.remap_failure.value, g.remapped_uncorrectable.value) == (False, False, 0)
    assert g.processes.value == []
    assert all(getattr(g, k).ok for k in GPU_ITEMS + ("links", "processes"))
    assert nv.shutdowns == 1


def test_counts_and_reasons_are_read_as_given(monkeypatch):
    gpu = h100(0, errors={4: {0: 12, 2: 3}}, reasons=0x4 | 0x40 | 0x8000, ecc=(5, 1), remap=(2, 1, 1, 0),
               clock_ns={74: 800_000_000, 270: 5})
    g = snap(monkeypatch, FakePynvml([gpu])).gpus[0]
    assert g.links.value[4].errors.value == {"replay": 12, "recovery": 0, "crc_flit": 3, "crc_data": 0}
    assert g.clock_events.value == ["sw_power_cap", "hw_thermal_slowdown", "0x8000"]
    assert g.clock_event_ns.value == {"sw_power_cap": 800_000_000, "hw_thermal_slowdown": 5}
    assert (g.ecc_corrected_volatile.value, g.ecc_uncorrected_volatile.value) == (5, 1)
    assert (g.remap_pending.value, g.remap_failure.value, g.remapped_uncorrectable.value) == (True, False, 1)


def test_a_gpu_with_17_active_links(monkeypatch):
    g = snap(monkeypatch, FakePynvml([h100(3, links=[True] * 3 + [False] + [True] * 14)])).gpus[0]
    assert len(g.links.value) == 18 and g.active_links() == 17
    assert g.links.value[3].active.ok and g.links.value[3].active.value is False


def test_a_driver_without_the_error_counters(monkeypatch):
    """NOT_SUPPORTED from the counters and from the fields: the errors are missing, never zero."""
    g = snap(monkeypatch, FakePynvml([h100(0, error_counter_code=3, fields_code=3)])).gpus[0]
    assert all(not ln.errors.ok and ln.errors.missing == read.NOT_SUPPORTED for ln in g.links.value)
    assert all(ln.errors.value is None for ln in g.links.value)
    # the speed field refused too: the catalogue's rate is shown, but the item is not ok
    sp = g.links.value[0].speed_gbps
    assert not sp.ok and sp.value == 26.5625 and "catalogue" in sp.missing
    assert g.active_links() == 18  # what was read still is


def test_error_counters_from_the_fields_where_the_counter_call_is_not_there(monkeypatch):
    nv = FakePynvml([h100(0, error_counter_code=13, errors={2: {0: 7, 2: 1}})])
    ln = snap(monkeypatch, nv).gpus[0].links.value[2]
    assert ln.errors.ok and ln.errors.value == {"replay": 7, "recovery": 0, "crc": 1}


def test_a_binding_without_the_calls(monkeypatch):
    """An older pynvml: no ClocksEventReasons (falls back to ThrottleReasons), no RemappedRows, no field values."""
    nv = FakePynvml([h100(0, reasons=0x4)], missing=("nvmlDeviceGetCurrentClocksEventReasons",
                                                     "nvmlDeviceGetRemappedRows", "nvmlDeviceGetFieldValues"))
    g = snap(monkeypatch, nv).gpus[0]
    assert g.clock_events.value == ["sw_power_cap"]
    for item in (g.remap_pending, g.remap_failure, g.remapped_uncorrectable, g.clock_event_ns):
        assert not item.ok and item.missing == read.NOT_IN_BINDING and item.value is None


def test_a_gpu_without_nvlink_and_refusals_per_item(monkeypatch):
    """A PCIe GPU (every link state NOT_SUPPORTED), ECC off (NOT_SUPPORTED), processes refused (NO_PERMISSION)."""
    nv = FakePynvml([h100(0, links=[None] * 12)])
    monkeypatch.setattr(nv, "nvmlDeviceGetTotalEccErrors", lambda *a: (_ for _ in ()).throw(NVMLError(3)))
    monkeypatch.setattr(nv, "nvmlDeviceGetComputeRunningProcesses", lambda h: (_ for _ in ()).throw(NVMLError(4)))
    g = snap(monkeypatch, nv).gpus[0]
    assert not g.links.ok and g.links.missing == read.NOT_SUPPORTED  # link 0's reason
    assert g.active_links() is None
    assert g.ecc_uncorrected_volatile.missing == read.NOT_SUPPORTED and not g.ecc_corrected_volatile.ok
    assert g.processes.missing == "no permission"
    assert g.pcie_gen.ok  # the next item is still read


@pytest.mark.parametrize("error, why", [
    (NVMLError_LibraryNotFound(), "no NVML: NVMLError_LibraryNotFound: NVML Shared Library Not Found"),
    (ImportError("No module named 'pynvml'"), "no NVML: ImportError: No module named 'pynvml'"),
    (NVMLError(4), "no NVML: no permission"),
])
def test_no_nvml_is_a_snapshot_that_says_so(monkeypatch, error, why):
    s = snap(monkeypatch, FakePynvml([h100(0)], init_error=error))
    assert s.missing == why and s.gpus == [] and s.own_pids == [10, 11]


def test_processes_with_their_memory_and_name(monkeypatch):
    nv = FakePynvml([h100(0, processes=[(10, 600 << 20), (4242, 2 << 30), (4_999_999, None)])], names={4242: "python3"})
    procs = snap(monkeypatch, nv).gpus[0].processes.value
    assert [(p.pid, p.used_bytes) for p in procs] == [(10, 600 << 20), (4242, 2 << 30), (4_999_999, None)]
    assert procs[1].name == "python3"
    assert procs[2].name == ""  # no NVML name, no /proc/PID: above any pid_max


def test_a_name_from_proc_where_nvml_gives_none(monkeypatch):
    import os

    assert read.process_name(FakePynvml([]), os.getpid()) != ""


def test_eight_gpus_read_quickly(monkeypatch):
    nv = FakePynvml([h100(i) for i in range(8)])
    t0 = time.perf_counter()
    s = snap(monkeypatch, nv)
    assert time.perf_counter() - t0 < 0.3 and len(s.gpus) == 8
    assert nv.calls < 8 * 160  # about 6 NVML calls per link, a few per GPU


def test_the_entry_point_prints_json_and_what_is_missing(monkeypatch, capsys):
    nv = FakePynvml([h100(0, error_counter_code=3, fields_code=3)])
    monkeypatch.setattr(read, "_nvml", lambda: nv)
    assert read.main([]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["gpus"][0]["index"] == 0 and doc["read_s"] >= 0
    assert "link errors: missing 18x (not supported by the driver)" in err


def test_a_gpu_without_a_handle_has_every_item_missing(monkeypatch):
    nv = FakePynvml([h100(0), h100(1)])
    real = nv.nvmlDeviceGetHandleByIndex
    monkeypatch.setattr(nv, "nvmlDeviceGetHandleByIndex", lambda i: real(i) if i == 0 else (_ for _ in ()).throw(
        NVMLError(15)))
    s = snap(monkeypatch, nv)
    assert s.gpus[0].links.ok and s.gpus[1].index == 1
    assert {getattr(s.gpus[1], k).missing for k in GPU_ITEMS + ("links", "processes")} == {
        "no handle for GPU 1: GPU is lost"}


def test_a_driver_without_clock_event_reasons_answers_through_the_older_call(monkeypatch):
    nv = FakePynvml([h100(0, reasons=0x40)])
    monkeypatch.setattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", lambda h: (_ for _ in ()).throw(NVMLError(13)))
    assert snap(monkeypatch, nv).gpus[0].clock_events.value == ["hw_thermal_slowdown"]
    monkeypatch.setattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", lambda h: (_ for _ in ()).throw(NVMLError(3)))
    item = snap(monkeypatch, nv).gpus[0].clock_events
    assert not item.ok and item.missing == "not in this driver's NVML (function not found)"
