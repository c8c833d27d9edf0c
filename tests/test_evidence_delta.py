"""evidence/delta.py: what changed on a host between its snapshot before a run and after it, one Change per
thing with its GPU, link and count; a counter that went back is a reset, never growth; an item missing on a
side is no change but is named by not_compared (never taken as "nothing happened")."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ipcbench.evidence.delta import KINDS, UNREAD, changes, describe, foreign, links_text, not_compared, ranges
from ipcbench.evidence.model import GpuReading, Item, LinkReading, ProcessReading, Snapshot

NS = "not supported by the driver"


def link(i: int, active: bool = True, **errors) -> LinkReading:
    counts = {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0, **errors}
    return LinkReading(i, Item(active), Item("4.0"), Item(26.562), Item(counts))


def gpu(index: int, links: list | None = None, **items) -> GpuReading:
    base = dict(links=Item(links if links is not None else [link(k) for k in range(18)]),
                pcie_gen=Item(5), pcie_width=Item(16), pcie_max_gen=Item(5), pcie_max_width=Item(16),
                clock_events=Item(["idle"]), clock_event_ns=Item({"sw_power_cap": 1_000, "hw_thermal_slowdown": 0}),
                ecc_uncorrected_volatile=Item(0), ecc_corrected_volatile=Item(0), remap_pending=Item(False),
                remap_failure=Item(False), remapped_uncorrectable=Item(0), processes=Item([]))
    base.update(items)
    return GpuReading(index, f"GPU-{index}", f"0000:{index:02x}:00.0", "NVIDIA H100 80GB HBM3", **base)


def snaps(before: list[GpuReading], after: list[GpuReading], own=(10, 11)) -> tuple[Snapshot, Snapshot]:
    return (Snapshot("node1", "before", 100.0, before, list(own)), Snapshot("node1", "after", 150.0, after, list(own)))


def test_a_quiet_run_changes_nothing_and_compares_everything():
    b, a = snaps([gpu(0), gpu(1)], [gpu(0), gpu(1)])
    assert changes(b, a) == [] and not_compared(b, a) == []


def test_a_grown_counter_names_its_gpu_link_and_count():
    links = [link(k) for k in range(18)]
    grown = [link(k, replay=12 if k == 4 else 0, crc_flit=1 if k == 4 else 0) for k in range(18)]
    (c1, c2) = changes(*snaps([gpu(0), gpu(1, links)], [gpu(0), gpu(1, grown)]))
    assert (c1.host, c1.gpu, c1.kind, c1.link, c1.before, c1.after) == ("node1", 1, "link_error", 4, {"replay": 0},
                                                                        {"replay": 12})
    assert c1.text == "12 replays on GPU 1 link 4 during the run"
    assert c2.text == "1 CRC flit error on GPU 1 link 4 during the run"


def test_a_counter_that_went_back_is_a_reset_not_growth():
    before = [link(k, replay=40 if k == 2 else 0) for k in range(18)]
    (c,) = changes(*snaps([gpu(0, before)], [gpu(0)]))
    assert (c.kind, c.link, c.before, c.after) == ("counter_reset", 2, 40, 0)
    assert c.text == ("the replay counter of GPU 0 link 2 went back from 40 to 0 during the run (reset): its growth "
                      "is unknown")


def test_a_counter_missing_on_one_side_is_no_change_but_is_not_compared():
    after = [replace(link(k, replay=99), errors=Item.na(NS)) if k == 4 else link(k) for k in range(18)]
    b, a = snaps([gpu(0)], [gpu(0, after)])
    assert changes(b, a) == []
    (n,) = not_compared(b, a)
    assert n.kind == UNREAD and n.text == f"GPU 0 link 4 not compared (error counters: after: {NS})"


def test_a_driver_without_counters_is_not_compared_once_per_gpu():
    none = [replace(link(k), errors=Item.na(NS)) for k in range(18)]
    b, a = snaps([gpu(0, none)], [gpu(0, none)])
    assert changes(b, a) == []
    assert [n.text for n in not_compared(b, a)] == [f"GPU 0 links 0-17 not compared (error counters: {NS})"]


def test_a_link_that_went_down():
    down = [link(k, active=k != 7) for k in range(18)]
    (c,) = changes(*snaps([gpu(3)], [gpu(3, down)]))
    assert (c.kind, c.gpu, c.link, c.text) == ("link_down", 3, 7, "GPU 3 link 7 went down during the run")
    # down before and after: no change (the snapshot itself shows 17 of 18; check judges that)
    assert changes(*snaps([gpu(3, down)], [gpu(3, down)])) == []


def test_new_uncorrectable_ecc_and_a_pending_remap():
    b, a = snaps([gpu(2)], [gpu(2, ecc_uncorrected_volatile=Item(3), remap_pending=Item(True))])
    ecc, remap = changes(b, a)
    assert (ecc.kind, ecc.before, ecc.after, ecc.text) == ("ecc_uncorrected", 0, 3,
                                                           "3 new uncorrectable ECC errors on GPU 2 during the run")
    assert (remap.kind, remap.text) == ("remap_pending", "GPU 2: a row remap became pending during the run (a reset "
                                                         "applies it)")
    # pending before and after: no change
    assert changes(*snaps([gpu(2, remap_pending=Item(True))], [gpu(2, remap_pending=Item(True))])) == []


def test_throttling_time_during_the_run_and_a_reason_seen_at_the_end():
    after = gpu(0, clock_event_ns=Item({"sw_power_cap": 800_001_000, "hw_thermal_slowdown": 0}),
                clock_events=Item(["sw_power_cap", "idle", "hw_slowdown"]))
    power, slow = changes(*snaps([gpu(0)], [after]))
    assert (power.kind, power.before, power.after) == ("clock_event", {"sw_power_cap": 1_000},
                                                       {"sw_power_cap": 800_001_000})
    assert power.text == "GPU 0 throttled for power for 0.8 s of the run"
    assert (slow.kind, slow.after, slow.text) == ("clock_event", "hw_slowdown",
                                                  "GPU 0 slowed down by hardware at the end of the run")


def test_an_idle_gpu_is_no_clock_event():
    assert changes(*snaps([gpu(0)], [gpu(0, clock_events=Item(["idle", "applications_clocks"]))])) == []


def test_a_process_of_another_job_that_appeared():
    mine = [ProcessReading(10, 600 << 20, "python3"), ProcessReading(11, 600 << 20, "python3")]
    theirs = ProcessReading(4242, 2 << 30, "train.py")
    b, a = snaps([gpu(1, processes=Item(mine))], [gpu(1, processes=Item(mine + [theirs]))])
    (c,) = changes(b, a)
    assert (c.kind, c.gpu, c.after["pid"]) == ("process", 1, 4242)
    assert c.text == "another process, pid 4242 (train.py, 2.0 GiB), appeared on GPU 1 during the run"
    # there before and after: no change (foreign() names it; check judges it)
    b2, a2 = snaps([gpu(1, processes=Item(mine + [theirs]))], [gpu(1, processes=Item(mine + [theirs]))])
    assert changes(b2, a2) == [] and foreign(a2) == [(1, theirs)]


def test_the_mps_server_and_the_runs_own_ranks_are_not_foreign():
    procs = [ProcessReading(10, None, "python3"), ProcessReading(55, 32 << 20, "nvidia-cuda-mps-server")]
    s = Snapshot("n", "after", 0.0, [gpu(0, processes=Item(procs))], [10])
    assert foreign(s) == []
    assert describe(ProcessReading(5, None, "")) == "pid 5"


def test_a_snapshot_without_nvml_is_not_compared_and_changes_nothing():
    b = Snapshot("n", "before", 0.0, [], [], "no NVML: NVMLError_LibraryNotFound: NVML Shared Library Not Found")
    a = Snapshot("n", "after", 1.0, [gpu(0)], [])
    assert changes(b, a) == []
    assert [n.text for n in not_compared(b, a)] == [f"before the run: {b.missing}"]


def test_items_missing_per_gpu_are_named_with_their_side():
    b, a = snaps([gpu(0)], [gpu(0, processes=Item.na("no permission"), clock_event_ns=Item.na(NS))])
    assert [n.text for n in not_compared(b, a)] == [
        f"GPU 0 clock event time: not compared (after: {NS})",
        "GPU 0 processes: not compared (after: no permission)"]


def test_every_kind_is_declared():
    grown = [link(k, replay=1 if k == 0 else 0, active=k != 1) for k in range(18)]
    reset = [link(k, replay=5 if k == 2 else 0) for k in range(18)]
    b, a = snaps([gpu(0, reset)], [gpu(0, grown, ecc_uncorrected_volatile=Item(1), remap_pending=Item(True),
                                        clock_events=Item(["hw_slowdown"]),
                                        processes=Item([ProcessReading(9, None, "x")]))])
    kinds = {c.kind for c in changes(b, a)}
    assert kinds == set(KINDS)


@pytest.mark.parametrize("ns, text", [([0, 1, 2, 5], "0-2, 5"), ([3], "3"), ([4, 5], "4, 5"), ([], "")])
def test_ranges(ns, text):
    assert ranges(ns) == text
    assert links_text(ns) == f"link{'s' if len(set(ns)) > 1 else ''} {text}"  # check's sentences name links so
