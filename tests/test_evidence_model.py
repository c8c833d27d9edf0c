"""evidence/model.py: the node's evidence writes itself and reads itself back exactly (through JSON text, as
meta.json carries it), and what is missing or malformed in a record reads as missing, never as ok."""

from __future__ import annotations

import json

import pytest

from ipcbench.evidence.model import (NA, NOT_RECORDED, Evidence, GpuReading, Item, LinkReading, ProcessReading,
                                     Snapshot)

NOT_SUPPORTED = "not supported by the driver"


def link(i: int, active: bool = True, replay: int = 0) -> LinkReading:
    return LinkReading(i, Item(active), Item("4.0"), Item(26.5625),
                       Item({"replay": replay, "recovery": 0, "crc_flit": 0, "crc_data": 0}))


def h100(index: int, links: int = 18, down: tuple = (), processes: list | None = None) -> GpuReading:
    return GpuReading(index, f"GPU-{index:08x}", f"00000000:{0x1b + index:02X}:00.0", "NVIDIA H100 80GB HBM3",
                      links=Item([link(k, k not in down) for k in range(links)]),
                      pcie_gen=Item(5), pcie_width=Item(16), pcie_max_gen=Item(5), pcie_max_width=Item(16),
                      clock_events=Item(["idle"]), clock_event_ns=Item({"sw_power_cap": 800_000_000}),
                      ecc_uncorrected_volatile=Item(0), ecc_corrected_volatile=Item(3),
                      remap_pending=Item(False), remap_failure=Item(False), remapped_uncorrectable=Item(0),
                      processes=Item(processes or []))


def unsupported(index: int) -> GpuReading:
    """A GPU whose driver gives nothing but its identity."""
    return GpuReading(index, "GPU-x", "0000:01:00.0", "Tesla T4",
                      **{k: Item.na(NOT_SUPPORTED) for k in ("links", "pcie_gen", "pcie_width", "pcie_max_gen",
                                                             "pcie_max_width", "clock_events", "clock_event_ns",
                                                             "ecc_uncorrected_volatile", "ecc_corrected_volatile",
                                                             "remap_pending", "remap_failure",
                                                             "remapped_uncorrectable", "processes")})


def evidence() -> Evidence:
    procs = [ProcessReading(4242, 1 << 30, "python3"), ProcessReading(77, None, "")]
    return Evidence([
        Snapshot("node1", "before", 1_764_100_000.25, [h100(0), h100(1, down=(4,), processes=procs)], [100, 101]),
        Snapshot("node1", "after", 1_764_100_050.5, [h100(0), h100(1, down=(4,))], [100, 101]),
        Snapshot("login", "before", 1.0, [unsupported(0)], [9]),
        Snapshot("nonvml", "before", 2.0, [], [], missing="no NVML: libnvidia-ml.so.1 not found"),
    ])


def through_text(d: dict) -> dict:
    return json.loads(json.dumps(d))


def test_evidence_round_trips_exactly_through_json_text():
    ev = evidence()
    assert Evidence.from_json(through_text(ev.as_json())) == ev


@pytest.mark.parametrize("obj", [Item(3), Item(None), Item.na("no permission"), Item(False),
                                 Item({"replay": 2}), Item(["hw_slowdown"]), ProcessReading(1, None, ""),
                                 ProcessReading(5, 123, "x"), link(3, False, 12)])
def test_each_part_round_trips(obj):
    assert type(obj).from_json(through_text(obj.as_json())) == obj


def test_each_reading_round_trips():
    for g in (h100(2), unsupported(0)):
        assert GpuReading.from_json(through_text(g.as_json())) == g
    for s in evidence().snapshots:
        assert Snapshot.from_json(through_text(s.as_json())) == s


def test_a_missing_item_is_never_ok_and_says_why():
    assert Item(0).ok and Item(False).ok and not Item(None).ok  # a reading without a value is none
    assert not Item.na(NOT_SUPPORTED).ok and Item.na(NOT_SUPPORTED).missing == NOT_SUPPORTED
    assert Item.na("").missing == NA
    assert Item.from_json(Item.na(NOT_SUPPORTED).as_json()) == Item(None, NOT_SUPPORTED)


@pytest.mark.parametrize("bad", [None, 3, "x", [], {}, {"missing": ""}])
def test_an_item_absent_or_malformed_in_the_record_reads_as_not_recorded(bad):
    item = Item.from_json(bad)
    assert not item.ok and item.missing == NOT_RECORDED


def test_an_old_meta_without_evidence_reads_as_empty():
    assert Evidence.from_json(None) == Evidence([])
    assert Evidence.from_json({}) == Evidence([]) and not Evidence.from_json({})
    assert Evidence.from_json({"snapshots": ["junk", 3]}) == Evidence([])


def test_missing_keys_read_as_unknown_not_as_errors():
    g = GpuReading.from_json({"index": 3})
    assert g.index == 3 and g.uuid == "" and not g.links.ok and not g.processes.ok and not g.pcie_gen.ok
    s = Snapshot.from_json({"host": "n", "own_pids": [1, "2", "x"]})
    assert (s.when, s.time, s.gpus, s.own_pids, s.missing) == ("", 0.0, [], [1, 2], "")
    assert LinkReading.from_json({}).link == -1 and not LinkReading.from_json({}).errors.ok


def test_lookups():
    ev = evidence()
    assert ev.hosts() == ["node1", "login", "nonvml"]
    assert ev.before("node1").time == 1_764_100_000.25 and ev.after("node1").time == 1_764_100_050.5
    assert ev.after("login") is None and ev.before("nowhere") is None
    assert ev.before("node1").gpu(1).active_links() == 17 and ev.before("node1").gpu(7) is None
    assert unsupported(0).active_links() is None


def test_the_record_carries_it(tmp_path):
    """record/meta.Meta writes and reads meta.json's "evidence" through these classes; a run recorded before it
    reads as Evidence([]) and writes no "evidence" key."""
    from ipcbench.record.meta import Meta, MetaError, read_meta

    ev = evidence()
    Meta.from_json({"run_id": "r", "evidence": ev.as_json()}).write(tmp_path)
    back = read_meta(tmp_path)
    assert back.evidence == ev and back.as_json()["evidence"] == through_text(ev.as_json())
    old = Meta.from_json({"run_id": "old"})
    assert old.evidence == Evidence([]) and "evidence" not in old.as_json()
    with pytest.raises(MetaError, match="field evidence: a string"):  # the record refuses it, naming the field
        Meta.from_json({"evidence": "junk"})


def test_a_reading_without_a_value_is_never_available():
    """{"value": null} with no reason is no reading: it reads as "not recorded", never ok (a check rule would otherwise
    take None for a value)."""
    from ipcbench.evidence.model import NOT_RECORDED, Item

    assert not Item.from_json({"value": None}).ok and not Item().ok
    assert not Item.from_json({}).ok and Item.from_json({}).missing == NOT_RECORDED
    assert Item.from_json({"value": 0}).ok and Item.from_json({"value": []}).value == []
