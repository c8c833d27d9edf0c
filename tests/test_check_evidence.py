"""check judges the node's own evidence (judging/evidence_rules.py, the [[evidence]] tables of judging/expect.py and
defaults.toml): every rule on hand-built Evidence of an H100 node; each failure named once, with its GPU, link
and count; "not available" never passes where required; the verdict, REASON line, JSON, JUnit and Prometheus
outputs carry them; the shipped numbers are pinned."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from ipcbench.check import command, outputs, plan
from ipcbench.judging import evidence_rules, expect, judge
from ipcbench.errors import UsageError
from ipcbench.evidence import delta
from ipcbench.evidence.model import Evidence, GpuReading, Item, LinkReading, ProcessReading, Snapshot
from ipcbench.record.run import load_run
from ipcbench.status import Status

H100 = "NVIDIA H100 80GB HBM3"
HOST = "node1"
OWN = [1000, 1001]
QUIET = Path(__file__).parent / "data" / "h100x2-current" / "all-1"  # a healthy H100 pair's run, rows only
NS = {"hw_slowdown": 0, "hw_thermal_slowdown": 0, "sw_thermal_slowdown": 0, "hw_power_brake": 0, "sw_power_cap": 0}


def link(i: int, active=True, speed=26.5625, **errors) -> LinkReading:
    counts = {"replay": 0, "recovery": 0, "crc_flit": 0, **errors}
    return LinkReading(i, Item(active), Item("4.0"), Item(speed), Item(counts))


def gpu(i: int, links=None, **items) -> GpuReading:
    links = links if links is not None else [link(j) for j in range(18)]
    base = dict(links=links if isinstance(links, Item) else Item(links), pcie_gen=Item(5),
                pcie_width=Item(16), pcie_max_gen=Item(5), pcie_max_width=Item(16), clock_events=Item(["idle"]),
                clock_event_ns=Item(dict(NS)), ecc_uncorrected_volatile=Item(0), ecc_corrected_volatile=Item(3),
                remap_pending=Item(False), remap_failure=Item(False), remapped_uncorrectable=Item(0),
                processes=Item([ProcessReading(OWN[i % 2], 600 << 20, "python")]))
    base.update(items)
    return GpuReading(i, f"GPU-{i}", f"00000000:{i + 0x18:02X}:00.0", H100, **base)


def node(n: int = 2, before: dict | None = None, after: dict | None = None, host: str = HOST) -> Evidence:
    """A quiet H100 node of n GPUs; `before`/`after`: {gpu index: GpuReading} replacing that GPU's reading."""
    b = [(before or {}).get(i, gpu(i)) for i in range(n)]
    a = [(after or {}).get(i, gpu(i)) for i in range(n)]
    return Evidence([Snapshot(host, "before", 1.0, b, OWN), Snapshot(host, "after", 9.0, a, OWN)])


def run_rules(ev, tables=None, n: int = 2) -> evidence_rules.Judged:
    return evidence_rules.judge(ev, expect.evidence_defaults() if tables is None else tables,
                                {HOST: {i: H100 for i in range(n)}})


def failed(j: evidence_rules.Judged) -> list[str]:
    return [f.brief for f in j.findings if f.status is Status.FAIL]


def unjudged(j: evidence_rules.Judged) -> list[str]:
    return [f.brief for f in j.findings if f.status is Status.UNJUDGED]


def mine(text: str) -> list[expect.EvidenceExpectation]:
    """A user's [[evidence]] tables before the shipped ones, as check combines them."""
    return expect.combine_evidence(expect.evidence_defaults(), expect.parse_evidence(text, "site.toml"))


# ---- a quiet node passes --------------------------------------------------------------------------------

def test_a_healthy_h100_pair_passes_every_rule_on_every_gpu():
    j = run_rules(node())
    assert {f.status for f in j.findings} == {Status.PASS} and not j.notes
    rules = {(f.src_gpu, f.method) for f in j.findings}
    assert rules == {(g, r) for g in (0, 1) for r in ("nvlinks", "nvlink_speed", "nvlink_errors", "pcie", "ecc",
                                                      "remap", "processes", "clock_events")}
    assert all(f.source == "evidence" and f.host == HOST for f in j.findings)
    assert any(f.reason == "GPU 1: 18 of 18 NVLinks active before and after the run" for f in j.findings)


# ---- NVLink state, speed, counters ----------------------------------------------------------------------

def test_a_link_down_names_the_gpu_the_count_and_the_link():
    links = [link(j, active=j != 7) for j in range(18)]
    j = run_rules(node(4, before={3: gpu(3, links)}, after={3: gpu(3, links)}), n=4)
    assert failed(j) == ["GPU 3: 17 of 18 NVLinks active (link 7 down)"]


def test_a_link_that_went_down_during_the_run_fails_once():
    links = [link(j, active=j != 7) for j in range(18)]
    j = run_rules(node(2, after={1: gpu(1, links)}))
    assert failed(j) == ["GPU 1: 17 of 18 NVLinks active (link 7 went down during the run)"]


def test_a_link_that_went_down_fails_even_where_the_model_has_no_link_count():
    links = [link(j, active=j != 2) for j in range(18)]
    tables = [t for t in expect.evidence_defaults() if t.gpu == "*"]
    j = run_rules(node(2, after={0: gpu(0, links)}), tables)
    assert failed(j) == ["GPU 0: 17 NVLinks active (link 2 went down during the run)"]


def test_a_slow_link_fails_naming_its_speed():
    links = [link(j, speed=13.28125 if j == 4 else 26.5625) for j in range(18)]
    j = run_rules(node(2, after={1: gpu(1, links)}))
    assert failed(j) == ["GPU 1 link 4 at 13.28 GB/s, expected at least 25 GB/s"]


def test_a_counter_that_grew_is_named_with_its_gpu_link_and_count():
    links = [link(j, replay=12 if j == 4 else 0) for j in range(18)]
    j = run_rules(node(2, after={1: gpu(1, links)}))
    assert failed(j) == ["12 replays on GPU 1 link 4 during the run"]
    (f,) = [f for f in j.findings if f.status is Status.FAIL]
    assert (f.value, f.unit, f.expected, f.src_gpu) == (12, "replay", 0, 1)


def test_every_recovery_fails():
    before = [link(j, recovery=5) for j in range(18)]
    after = [link(j, recovery=7 if j == 0 else 5) for j in range(18)]
    j = run_rules(node(2, before={0: gpu(0, before)}, after={0: gpu(0, after)}))
    assert failed(j) == ["2 recoveries on GPU 0 link 0 during the run"]


@pytest.mark.parametrize("counter, words", [("crc_flit", "CRC flit errors"), ("crc_data", "CRC data errors"),
                                            ("crc", "CRC errors")])
def test_crc_errors_fail_at_100_a_second_of_the_run(counter, words):
    """DCGM's rule: CRC errors matter at 100 a second or more (a link moving data counts some that its replays
    absorb: the quiet H100 pair, 13-146 CRC data errors a link in 22 s). The window is 8 s: 799 pass, 800 fail."""
    before = [link(j, **{counter: 5}) for j in range(18)]

    def judged(grew):
        after = [link(j, **{counter: 5 + grew if j == 0 else 5}) for j in range(18)]
        return run_rules(node(2, before={0: gpu(0, before)}, after={0: gpu(0, after)}))

    quiet = judged(799)
    assert not failed(quiet)
    (note,) = [f.reason for f in quiet.findings if f.status is Status.PASS and f.source.endswith("nvlink_errors")
               and f.src_gpu == 0] or [f.reason for f in quiet.findings if "CRC errors below" in f.reason]
    assert "link 0 799 (99.9/s)" in note
    assert failed(judged(800)) == [f"800 {words} on GPU 0 link 0 during the run (100/s, 100/s fail)"]


def test_a_counter_that_was_high_before_the_run_and_did_not_grow_passes():
    links = [link(j, replay=500) for j in range(18)]
    j = run_rules(node(2, before={0: gpu(0, links)}, after={0: gpu(0, links)}))
    assert not failed(j)


def test_the_allowance_of_a_counter_is_a_thresholds_key():
    links = [link(j, replay=12 if j == 4 else 0) for j in range(18)]
    ev = node(2, after={1: gpu(1, links)})
    allow = '[[evidence]]\ngpu = "*"\nlink_errors_allowed = {{replay = {}}}\nwhy = "site"\n'
    assert not failed(run_rules(ev, mine(allow.format(12))))
    assert failed(run_rules(ev, mine(allow.format(11)))) == ["12 replays on GPU 1 link 4 during the run"]
    crc = [link(j, crc_flit=1 if j == 4 else 0) for j in range(18)]
    assert not failed(run_rules(node(2, after={1: gpu(1, crc)}), mine(allow.format(12))))  # 1 in 8 s: below 100/s
    rate = '[[evidence]]\ngpu = "*"\nlink_error_rate_allowed = {crc_flit = 0.1}\nwhy = "site"\n'
    assert failed(run_rules(node(2, after={1: gpu(1, crc)}), mine(rate))) == \
        ["1 CRC flit error on GPU 1 link 4 during the run (0.125/s, 0.1/s fail)"]


def test_a_counter_that_went_back_cannot_be_judged():
    before = [link(j, replay=9) for j in range(18)]
    j = run_rules(node(2, before={0: gpu(0, before)}))
    assert unjudged(j) == [f"the replay counter of GPU 0 link {n} went back from 9 to 0 during the run (reset): its "
                           f"growth is unknown" for n in range(18)]


def test_each_failure_is_named_once():
    """A link down that also retried and is slow: each thing once, nothing said twice."""
    links = [link(j, active=j != 7, speed=20.0 if j == 3 else 26.5625, replay=4 if j == 3 else 0)
             for j in range(18)]
    j = run_rules(node(2, after={1: gpu(1, links)}))
    assert sorted(failed(j)) == sorted(["GPU 1: 17 of 18 NVLinks active (link 7 went down during the run)",
                                        "GPU 1 link 3 at 20 GB/s, expected at least 25 GB/s",
                                        "4 replays on GPU 1 link 3 during the run"])


# ---- PCIe ----------------------------------------------------------------------------------------------

def test_a_downtrained_pcie_link_fails():
    j = run_rules(node(3, after={2: gpu(2, pcie_gen=Item(4), pcie_width=Item(8))}), n=3)
    assert failed(j) == ["GPU 2 PCIe gen4 x8, expected gen5 x16"]
    assert failed(run_rules(node(3, before={2: gpu(2, pcie_gen=Item(4))}), n=3)) == \
        ["GPU 2 PCIe gen4 x16, expected gen5 x16"]  # the H100's gen5 at rest (defaults.toml)


def test_a_lower_generation_at_rest_is_said_not_failed_where_no_table_sets_pcie_gen():
    ev = node(3, after={2: gpu(2, pcie_gen=Item(4))})
    site = mine('[[evidence]]\ngpu = "NVIDIA H100*"\npcie_gen = 1\nwhy = "our H100s idle at gen1"\n')
    assert not failed(run_rules(ev, site, n=3))
    generic = [t for t in expect.evidence_defaults() if t.gpu == "*"]
    j = run_rules(ev, generic, n=3)
    assert not failed(j)
    assert any("gen4 of gen5 at rest" in f.reason and f.status is Status.PASS for f in j.findings)
    narrow = node(3, after={2: gpu(2, pcie_gen=Item(4), pcie_width=Item(8))})
    assert failed(run_rules(narrow, generic, n=3)) == ["GPU 2 PCIe gen4 x8, expected x16"]


def test_without_a_width_key_the_width_is_held_to_the_gpus_maximum():
    tables = [t for t in expect.evidence_defaults() if t.gpu == "*"]
    j = run_rules(node(2, after={0: gpu(0, pcie_width=Item(8))}), tables)
    assert failed(j) == ["GPU 0 PCIe gen5 x8, expected x16"]


# ---- ECC and row remaps -------------------------------------------------------------------------------

def test_new_uncorrectable_ecc_errors_fail_and_old_ones_do_not():
    assert failed(run_rules(node(2, after={0: gpu(0, ecc_uncorrected_volatile=Item(2))}))) == \
        ["2 new uncorrectable ECC errors on GPU 0 during the run"]
    old = gpu(0, ecc_uncorrected_volatile=Item(2))
    assert not failed(run_rules(node(2, before={0: old}, after={0: old})))


def test_a_pending_or_failed_row_remap_fails():
    assert failed(run_rules(node(2, before={1: gpu(1, remap_pending=Item(True))}))) == \
        ["GPU 1: a row remap is pending (the GPU needs a reset)"]
    assert failed(run_rules(node(2, after={1: gpu(1, remap_failure=Item(True))}))) == \
        ["GPU 1: a row remap failed (the GPU needs service)"]


# ---- other jobs' processes -----------------------------------------------------------------------------

def test_another_jobs_process_fails_naming_its_pid_name_and_memory():
    procs = Item([ProcessReading(OWN[1], 600 << 20, "python"), ProcessReading(4242, int(1.2 * (1 << 30)), "python")])
    j = run_rules(node(2, after={1: gpu(1, processes=procs)}))
    assert failed(j) == ["pid 4242 (python) holds 1.2 GiB on GPU 1"]


def test_the_runs_own_ranks_and_the_mps_server_are_not_another_job():
    procs = Item([ProcessReading(OWN[0], 1 << 30, "python"), ProcessReading(77, 30 << 20, "nvidia-cuda-mps-server")])
    assert not failed(run_rules(node(2, before={0: gpu(0, processes=procs)}, after={0: gpu(0, processes=procs)})))


def test_a_process_seen_before_and_after_is_named_once_with_its_largest_memory():
    j = run_rules(node(2, before={0: gpu(0, processes=Item([ProcessReading(5, 1 << 30, "train")]))},
                       after={0: gpu(0, processes=Item([ProcessReading(5, 3 << 30, "train")]))}))
    assert failed(j) == ["pid 5 (train) holds 3.0 GiB on GPU 0"]


def test_foreign_processes_allowed_is_a_thresholds_key():
    ev = node(2, after={0: gpu(0, processes=Item([ProcessReading(5, None, "")]))})
    assert failed(run_rules(ev)) == ["pid 5 (name unknown) holds an unreported amount of memory on GPU 0"]
    assert not failed(run_rules(ev, mine('[[evidence]]\ngpu = "*"\nforeign_processes_allowed = 1\nwhy = "x"\n')))


# ---- clock events --------------------------------------------------------------------------------------

def test_a_thermal_slowdown_during_the_run_fails_with_its_duration():
    j = run_rules(node(2, after={0: gpu(0, clock_event_ns=Item({**NS, "hw_thermal_slowdown": 800_000_000}))}))
    assert failed(j) == ["GPU 0 slowed down for heat (hardware) for 0.8 s of the run"]


@pytest.mark.parametrize("reason", ["hw_slowdown", "sw_thermal_slowdown", "hw_power_brake"])
def test_a_slowdown_seen_active_fails_where_no_duration_is_read(reason):
    g = gpu(0, clock_events=Item([reason]), clock_event_ns=Item.na("not supported by the driver"))
    j = run_rules(node(2, after={0: g}))
    assert failed(j) == [f"GPU 0 {delta.REASON_WORDS[reason]} at the end of the run"]
    assert not unjudged(j)  # the durations are not required by the shipped expectations


def test_a_power_cap_is_a_pass_with_a_note_never_a_failure_by_itself():
    j = run_rules(node(2, after={0: gpu(0, clock_events=Item(["sw_power_cap"]),
                                           clock_event_ns=Item({**NS, "sw_power_cap": 800_000_000}))}))
    assert not failed(j) and not unjudged(j)
    assert j.notes == ["GPU 0 throttled for power for 0.8 s of the run: explains slower rows, not a failure by "
                       "itself"]


# ---- not available: never a pass where required ---------------------------------------------------------

ITEMS = {"nvlinks": dict(links=Item.na("not supported by the driver")),
         "pcie": dict(pcie_width=Item.na("not supported by the driver")),
         "clock_events": dict(clock_events=Item.na("not supported by the driver")),
         "ecc": dict(ecc_uncorrected_volatile=Item.na("ECC disabled")),
         "remap": dict(remap_pending=Item.na("not supported by the driver")),
         "processes": dict(processes=Item.na("no permission"))}


@pytest.mark.parametrize("item", sorted(ITEMS))
def test_a_required_item_not_available_cannot_be_judged_and_is_named(item):
    j = run_rules(node(2, after={1: gpu(1, **ITEMS[item])}))
    bad = [f for f in j.findings if f.status is not Status.PASS]
    assert len(bad) == 1 and bad[0].status is Status.UNJUDGED and bad[0].src_gpu == 1
    assert "GPU 1: " in bad[0].brief and "not available (" in bad[0].brief
    assert all(f.method != item or f.status is not Status.PASS for f in j.findings if f.src_gpu == 1)


@pytest.mark.parametrize("item", sorted(ITEMS))
def test_an_item_not_required_that_is_missing_is_no_finding(item):
    site = mine('[[evidence]]\ngpu = "NVIDIA H100*"\nrequire = []\nwhy = "our VM hides them"\n')
    j = run_rules(node(2, after={1: gpu(1, **ITEMS[item])}), site)
    assert not failed(j) and not unjudged(j)


def test_link_counters_not_available_are_named_with_the_links():
    links = [dataclasses.replace(link(j), errors=Item.na("not supported by the driver")) for j in range(18)]
    j = run_rules(node(2, after={0: gpu(0, links)}))
    assert unjudged(j) == ["GPU 0: the error counters of NVLink links 0-17 not available (not supported by the "
                           "driver)"]


def test_no_nvml_at_all_cannot_judge_only_the_required_items():
    ev = Evidence([Snapshot(HOST, w, 1.0, [], OWN, missing="no NVML: libnvidia-ml.so.1 not found")
                   for w in ("before", "after")])
    j = run_rules(ev)
    assert not failed(j)
    required = ["nvlinks", "nvlink_speed", "nvlink_errors", "pcie", "clock_events", "ecc", "remap", "processes"]
    assert sorted(f.method for f in j.findings) == sorted(required * 2)  # per GPU the run's meta.json names
    assert all(f.status is Status.UNJUDGED and "no NVML: libnvidia-ml.so.1 not found" in f.reason for f in j.findings)
    unknown = evidence_rules.judge(ev, expect.evidence_defaults(), {HOST: {0: "Some GPU"}})
    assert not unknown.findings  # a model nothing requires anything of


def test_no_snapshot_after_the_run_cannot_judge_what_needs_both():
    ev = Evidence([Snapshot(HOST, "before", 1.0, [gpu(0), gpu(1)], OWN)])
    j = run_rules(ev)
    assert sorted({f.method for f in j.findings if f.status is Status.UNJUDGED}) == ["ecc", "nvlink_errors"]
    assert not failed(j)


def test_a_run_recorded_without_evidence_is_judged_by_its_rows_with_a_note():
    j = run_rules(Evidence([]))
    assert not j.findings and j.notes == [f"{evidence_rules.NO_EVIDENCE}: judged by its rows alone"]


def test_a_run_recorded_without_evidence_cannot_be_judged_where_recorded_is_required():
    site = mine('[[evidence]]\ngpu = "NVIDIA H100*"\nrequire = ["recorded", "nvlinks", "processes"]\nwhy = "x"\n')
    j = run_rules(Evidence([]), site)
    assert sorted(f.method for f in j.findings) == ["nvlinks", "nvlinks", "processes", "processes"]
    assert all(f.status is Status.UNJUDGED and evidence_rules.NO_EVIDENCE in f.brief for f in j.findings)


# ---- the thresholds: shipped numbers pinned, keys validated, user's win key by key -----------------------

def test_the_shipped_evidence_expectations_are_pinned():
    for model in (H100, "NVIDIA H200"):
        r = expect.resolve(expect.evidence_defaults(), model)
        assert {k: s.value for k, s in r.items()} == {
            "nvlinks": 18, "nvlink_gbps": 25.0, "pcie_gen": 5, "pcie_width": 16,
            "require": ("nvlinks", "nvlink_speed", "nvlink_errors", "pcie", "clock_events", "ecc", "remap",
                        "processes"),
            "link_errors_allowed": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0, "crc": 0},
            "link_error_rate_allowed": {"crc_flit": 100.0, "crc_data": 100.0, "crc": 100.0},
            "slowdowns": ("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake", "thermal"),
            "foreign_processes_allowed": 0}, model
        assert all(s.table.why and s.table.where.startswith("ipcbench/judging/defaults.toml:") for s in r.values())
    other = expect.resolve(expect.evidence_defaults(), "NVIDIA H100 PCIe")  # 12 links, not the SXM's 18
    assert "nvlinks" not in other and other["require"].value == ()


def test_a_users_key_wins_and_the_shipped_rest_stays():
    r = expect.resolve(mine('[[evidence]]\ngpu = "NVIDIA H100*"\nnvlinks = 16\nwhy = "two links fused"\n'), H100)
    assert r["nvlinks"].value == 16 and r["nvlinks"].table.where == "site.toml:1"
    assert r["nvlink_gbps"].value == 25.0 and r["nvlink_gbps"].table.where.startswith("ipcbench/judging/defaults")
    links = [link(j, active=j < 16) for j in range(18)]
    assert not failed(run_rules(node(2, before={0: gpu(0, links)}, after={0: gpu(0, links)}), mine(
        '[[evidence]]\ngpu = "NVIDIA H100*"\nnvlinks = 16\nwhy = "two links fused"\n')))


GOOD_EV = '''[[evidence]]
gpu = "NVIDIA H100*"
nvlinks = 18
nvlink_gbps = 25.0
pcie_width = 16
require = ["nvlinks"]
why = "site"
'''


@pytest.mark.parametrize("change, line, words", [
    (("nvlinks = 18", "nvlinks = 18\ncolour = 1"), 4, "colour: unknown key"),
    (("nvlinks = 18", 'nvlinks = "18"'), 3, "nvlinks: must be a whole number"),
    (("nvlinks = 18", "nvlinks = 18.0"), 3, "nvlinks: must be a whole number"),
    (("nvlink_gbps = 25.0", 'nvlink_gbps = "25 GB/s"'), 4, "nvlink_gbps: must be a number"),
    (("nvlink_gbps = 25.0", "nvlink_gbps = 0"), 4, "nvlink_gbps: 0 is out of range"),
    (("pcie_width = 16", "pcie_width = 64"), 5, "pcie_width: 64 is out of range"),
    (('require = ["nvlinks"]', 'require = ["nvlink"]'), 6, "require: 'nvlink' is not one of"),
    (('require = ["nvlinks"]', 'require = "nvlinks"'), 6, "require: must be a list of names"),
    (('require = ["nvlinks"]', 'link_errors_allowed = {replays = 1}'), 6, "link_errors_allowed: 'replays' is not"),
    (('require = ["nvlinks"]', 'link_errors_allowed = -1'), 6, "link_errors_allowed: -1 is out of range"),
    (('require = ["nvlinks"]', 'slowdowns = ["hot"]'), 6, "slowdowns: 'hot' is not one of"),
    (('why = "site"\n', ''), 1, "[[evidence]]: why is missing"),
])
def test_a_bad_evidence_table_names_the_file_the_line_and_the_key(change, line, words):
    text = "# mine\n" + GOOD_EV.replace(*change, 1)
    with pytest.raises(UsageError) as e:
        expect.parse_evidence(text, "t.toml")
    assert str(e.value).startswith(f"t.toml:{line + 1}: ") and words in str(e.value), str(e.value)
    with pytest.raises(UsageError):
        expect.parse(text, "t.toml")  # a file is refused whole, whichever table is read


def test_a_file_of_evidence_tables_only_is_a_thresholds_file():
    assert expect.parse(GOOD_EV, "t.toml") == [] and len(expect.parse_evidence(GOOD_EV, "t.toml")) == 1
    with pytest.raises(UsageError, match="sets nothing"):
        expect.parse_evidence('[[evidence]]\ngpu = "*"\nwhy = "x"\n', "t.toml")


# ---- through the verdict: exit codes, REASON, JSON, JUnit, Prometheus -----------------------------------

def recorded(ev: Evidence | None):
    """The healthy H100 pair's recorded run with this evidence (as meta.json's "evidence" would give it)."""
    run = load_run(QUIET / "results.csv")
    object.__setattr__(run.meta, "evidence", ev if ev is not None else Evidence([]))
    return run


def host_of(run) -> str:
    return run.meta.hosts[0]


def as_recorded(ev: Evidence, host: str, uuids: list[str]) -> Evidence:
    """The evidence as that run's node would have given it: its host name and its GPUs' UUIDs."""
    return Evidence([dataclasses.replace(s, host=host, gpus=[dataclasses.replace(g, uuid=uuids[g.index])
                                                            for g in s.gpus]) for s in ev.snapshots])


def quiet_node(run, **kw) -> Evidence:
    return as_recorded(node(**kw), host_of(run), [g.uuid for g in run.meta.gpus[host_of(run)]])


def options(*args: str) -> command.Options:
    p = argparse.ArgumentParser()
    command.add_arguments(p)
    return command.Options(p.parse_args(["--from", str(QUIET), *args]), ["--from", str(QUIET), *args])


def test_exit_codes_healthy_unhealthy_cannot_judge():
    run = recorded(None)
    v = judge.judge(run, expect.defaults(), list(plan.METHODS_JUDGED))
    assert v.exit_code == 0 and v.notes == [f"{evidence_rules.NO_EVIDENCE}: judged by its rows alone"]
    object.__setattr__(run.meta, "evidence", quiet_node(run))
    v = judge.judge(run, expect.defaults(), list(plan.METHODS_JUDGED))
    assert v.exit_code == 0 and sum(c.source == "evidence" for c in v.checks) == 16
    links = [link(j, replay=12 if j == 4 else 0) for j in range(18)]
    object.__setattr__(run.meta, "evidence", quiet_node(run, after={1: gpu(1, links)}))
    v = judge.judge(run, expect.defaults(), list(plan.METHODS_JUDGED))
    assert v.exit_code == 1 and v.reason() == "FAIL: 12 replays on GPU 1 link 4 during the run"
    object.__setattr__(run.meta, "evidence", quiet_node(run, after={1: gpu(1, processes=Item.na("no permission"))}))
    v = judge.judge(run, expect.defaults(), list(plan.METHODS_JUDGED))
    assert v.exit_code == 2 and v.reason() == "cannot judge: GPU 1: compute processes not available (no permission)"


def test_the_reason_line_names_the_evidence_first_and_counts_the_rest(capsys):
    run = recorded(None)
    links = [link(j, active=j != 7) for j in range(18)]
    procs = Item([ProcessReading(4242, int(1.2 * (1 << 30)), "python")])
    object.__setattr__(run.meta, "evidence", quiet_node(run, after={1: gpu(1, links, processes=procs)}))
    code = command.report(options(), run)
    out = capsys.readouterr()
    assert code == 1
    assert out.out.splitlines()[-1] == ("REASON: FAIL: GPU 1: 17 of 18 NVLinks active (link 7 went down during the "
                                        "run) (+1 more)")
    assert "  FAIL [evidence] pid 4242 (python) holds 1.2 GiB on GPU 1" in out.out.splitlines()
    assert out.out.count("link 7") == 2  # the finding and the REASON line, nothing else


def test_a_foreign_process_exits_1_naming_its_pid_in_json(capsys):
    run = recorded(None)
    procs = Item([ProcessReading(OWN[1], 1 << 30, "python"), ProcessReading(4242, 1 << 30, "python")])
    object.__setattr__(run.meta, "evidence", quiet_node(run, after={1: gpu(1, processes=procs)}))
    assert command.report(options("--json"), run) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_code"] == 1 and doc["reason"] == "FAIL: pid 4242 (python) holds 1.0 GiB on GPU 1"
    (c,) = [c for c in doc["checks"] if c["status"] == "fail"]
    assert (c["source"], c["method"], c["src_gpu"], c["pair"]) == ("evidence", "processes", 1, "GPU 1")
    assert all(p["pair"].startswith("GPU 0 -> ") or p["pair"].startswith("GPU 1 -> ") for p in doc["pairs"])


def test_a_power_cap_note_is_in_the_summary_and_json(capsys):
    run = recorded(None)
    object.__setattr__(run.meta, "evidence", quiet_node(run, after={0: gpu(0, clock_events=Item(["sw_power_cap"]))}))
    assert command.report(options(), run) == 0
    assert "  note GPU 0 throttled for power at the end of the run: explains slower rows, not a failure by " \
           "itself" in capsys.readouterr().out.splitlines()


def test_a_thresholds_file_overrides_the_evidence_through_the_command(tmp_path, capsys):
    site = tmp_path / "site.toml"
    site.write_text('[[evidence]]\ngpu = "NVIDIA H100*"\nlink_errors_allowed = {replay = 20}\nwhy = "known flaky"\n')
    run = recorded(None)
    links = [link(j, replay=12 if j == 4 else 0) for j in range(18)]
    object.__setattr__(run.meta, "evidence", quiet_node(run, after={1: gpu(1, links)}))
    assert command.report(options("--thresholds", str(site)), run) == 0
    assert command.report(options(), run) == 1
    capsys.readouterr()


def test_junit_and_prometheus_carry_the_evidence(tmp_path, capsys):
    from junitparser import Failure, JUnitXml
    from prometheus_client.parser import text_string_to_metric_families

    run = recorded(None)
    before_links = [link(j, replay=3) for j in range(18)]
    after_links = [link(j, replay=15 if j == 4 else 3, active=j != 9) for j in range(18)]
    procs = Item([ProcessReading(OWN[1], 1 << 30, "python"), ProcessReading(4242, 1 << 30, "python")])
    ev = quiet_node(run, before={1: gpu(1, before_links)},
                    after={1: gpu(1, after_links, processes=procs, ecc_uncorrected_volatile=Item(2),
                                  pcie_gen=Item(4), clock_event_ns=Item({**NS, "sw_power_cap": 500_000_000}))})
    object.__setattr__(run.meta, "evidence", ev)
    junit, prom = tmp_path / "c.xml", tmp_path / "c.prom"
    assert command.report(options("--junit", str(junit), "--prometheus", str(prom)), run) == 1
    capsys.readouterr()
    failures = [case.name for suite in JUnitXml.fromfile(str(junit)) for case in suite
                if any(isinstance(r, Failure) for r in case.result)]
    assert sorted(failures) == sorted(["nvlinks [evidence]: GPU 1: 17 of 18 NVLinks active (link 9 went down "
                                       "during the run)",
                                       "nvlink_errors [evidence]: 12 replays on GPU 1 link 4 during the run",
                                       "ecc [evidence]: 2 new uncorrectable ECC errors on GPU 1 during the run",
                                       "processes [evidence]: pid 4242 (python) holds 1.0 GiB on GPU 1",
                                       "pcie [evidence]: GPU 1 PCIe gen4 x16, expected gen5 x16"])
    notes = [prop.value for suite in JUnitXml.fromfile(str(junit)) for prop in suite.properties()]
    assert notes == ["GPU 1 throttled for power for 0.5 s of the run: explains slower rows, not a failure by itself"]
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(prom.read_text()) for s in fam.samples}
    h = host_of(run)

    def at(name, **labels):
        return samples[(name, tuple(sorted({"host": h, **labels}.items())))]

    assert at("ipcbench_nvlink_errors", gpu="1", link="4", counter="replay") == 15
    assert at("ipcbench_nvlink_errors_delta", gpu="1", link="4", counter="replay") == 12
    assert at("ipcbench_nvlink_errors_delta", gpu="1", link="5", counter="replay") == 0
    assert at("ipcbench_nvlinks_active", gpu="1") == 17 and at("ipcbench_nvlinks_active", gpu="0") == 18
    assert at("ipcbench_nvlink_speed_gbps", gpu="0", link="3") == 26.5625
    assert (at("ipcbench_pcie_gen", gpu="1"), at("ipcbench_pcie_max_gen", gpu="1")) == (4, 5)
    assert (at("ipcbench_pcie_width", gpu="1"), at("ipcbench_pcie_max_width", gpu="1")) == (16, 16)
    assert at("ipcbench_ecc_uncorrected_volatile", gpu="1") == 2
    assert at("ipcbench_ecc_uncorrected_volatile_delta", gpu="1") == 2
    assert at("ipcbench_ecc_corrected_volatile", gpu="1") == 3
    assert at("ipcbench_remap", gpu="0", state="pending") == 0
    assert (at("ipcbench_foreign_processes", gpu="1"), at("ipcbench_foreign_processes", gpu="0")) == (1, 0)
    assert at("ipcbench_clock_event_seconds", gpu="1", reason="sw_power_cap") == 0.5
    assert at("ipcbench_check_verdict") == 1


def test_prometheus_says_which_items_were_not_available(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    run = recorded(None)
    ev = quiet_node(run, after={0: gpu(0, links=Item.na("not supported"), ecc_uncorrected_volatile=Item.na("off"))})
    v = judge.judge(run, expect.defaults(), list(plan.METHODS_JUDGED))
    prom = tmp_path / "c.prom"
    outputs.write_prometheus(str(prom), v, host_of(run), ev)
    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    gone = {(s.labels["gpu"], s.labels["item"]) for s in fams["ipcbench_evidence_missing"].samples}
    assert gone == {("0", "nvlinks"), ("0", "ecc")}
    assert {s.labels["gpu"] for s in fams["ipcbench_nvlinks_active"].samples} == {"1"}  # no 0 for "not available"


def test_prometheus_growth_is_delta_s_and_needs_both_snapshots(tmp_path):
    """The gauges' growth is evidence/delta's: the GPUs paired by UUID (delta.paired) even where NVML numbered them
    otherwise after the run; with only one snapshot a growth is unknown, so it is no sample (never 0)."""
    from prometheus_client.parser import text_string_to_metric_families

    run = recorded(None)
    v = judge.judge(run, expect.defaults(), list(plan.METHODS_JUDGED))
    renumbered = quiet_node(run, before={0: gpu(0, [link(j, replay=1) for j in range(18)])},
                            after={0: gpu(0, [link(j, replay=4) for j in range(18)])})
    b, a = renumbered.snapshots  # after the run, NVML named GPU 0 "1" and GPU 1 "0": the UUIDs still pair them
    a = dataclasses.replace(a, gpus=[dataclasses.replace(g, index=1 - g.index) for g in a.gpus])

    def samples(ev) -> dict:
        prom = tmp_path / "c.prom"
        prom.unlink(missing_ok=True)
        outputs.write_prometheus(str(prom), v, host_of(run), ev)
        return {(s.name, s.labels.get("gpu"), s.labels.get("link"), s.labels.get("counter")): s.value
                for f in text_string_to_metric_families(prom.read_text()) for s in f.samples}

    got = samples(Evidence([b, a]))
    assert got[("ipcbench_nvlink_errors_delta", "1", "2", "replay")] == 3  # GPU-0's links, named 1 after the run
    assert got[("ipcbench_nvlink_errors_delta", "0", "2", "replay")] == 0
    for one in ([b], [a]):
        got = samples(Evidence(one))
        assert got[("ipcbench_nvlinks_active", "0", None, None)] == 18
        assert not [k for k in got if k[0].endswith("_delta") or k[0] == "ipcbench_clock_event_seconds"]


# ---- check --from a recorded run: meta.json's "evidence" read through record/meta.Meta ------------------

def recorded_dir(tmp_path: Path, ev: Evidence | None) -> Path:
    """A copy of the quiet H100 pair's run with this evidence in its meta.json (None: as recorded, without)."""
    import shutil

    dst = tmp_path / "run"
    shutil.copytree(QUIET, dst)
    if ev is not None:
        meta = json.loads((dst / "meta.json").read_text())
        host = meta["hosts"][0]
        meta["evidence"] = as_recorded(ev, host, [g["uuid"] for g in meta["gpus"][host]]).as_json()
        (dst / "meta.json").write_text(json.dumps(meta))
    return dst


def check_from(run: Path, *args: str):

    from conftest import REPO, ipcbench_cli, launcher_free_env

    return ipcbench_cli("check", "--from", run, *args, cwd=REPO, env=launcher_free_env())


def test_check_from_a_recorded_run_with_a_foreign_process_exits_1_naming_its_pid(tmp_path):
    procs = Item([ProcessReading(OWN[1], 1 << 30, "python"), ProcessReading(4242, int(1.2 * (1 << 30)), "python")])
    r = check_from(recorded_dir(tmp_path, node(after={1: gpu(1, processes=procs)})))
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == "REASON: FAIL: pid 4242 (python) holds 1.2 GiB on GPU 1"
    assert "Traceback" not in r.stderr


def test_check_from_exit_codes_quiet_old_and_not_available(tmp_path):
    quiet = check_from(recorded_dir(tmp_path / "a", node()))
    assert quiet.returncode == 0 and quiet.stdout.splitlines()[-1] == "REASON: ok: 75 checks passed", quiet.stdout
    old = check_from(recorded_dir(tmp_path / "b", None))  # recorded before ipcbench recorded evidence: as before
    assert old.returncode == 0 and f"  note {evidence_rules.NO_EVIDENCE}: judged by its rows alone" in old.stdout
    hidden = check_from(recorded_dir(tmp_path / "c", node(after={0: gpu(0, remap_pending=Item.na("no permission"))})))
    assert hidden.returncode == 2
    assert hidden.stdout.splitlines()[-1] == \
        "REASON: cannot judge: GPU 0: row remap state not available (no permission)"


def test_another_jobs_process_on_a_gpu_the_run_did_not_use_is_theirs():
    """On a node shared by jobs, a run on GPUs 0 and 1 judges the processes there only; a link is judged on
    every GPU (the node's fault whoever uses it)."""
    other = Item([ProcessReading(4242, 1 << 30, "python")])
    links = [link(j, active=j != 7) for j in range(18)]
    ev = node(4, after={2: gpu(2, processes=other), 3: gpu(3, links)})
    j = evidence_rules.judge(ev, expect.evidence_defaults(), {HOST: {0: H100, 1: H100}}, {HOST: {"GPU-0", "GPU-1"}})
    assert failed(j) == ["GPU 3: 17 of 18 NVLinks active (link 7 went down during the run)"]
    assert {f.src_gpu for f in j.findings if f.method == "processes"} == {0, 1}
    everywhere = evidence_rules.judge(ev, expect.evidence_defaults(), {HOST: {0: H100, 1: H100}})
    assert "pid 4242 (python) holds 1.0 GiB on GPU 2" in failed(everywhere)  # no UUIDs recorded: every GPU


def test_a_host_of_the_run_without_a_snapshot_cannot_be_judged_where_items_are_required():
    j = evidence_rules.judge(node(), expect.evidence_defaults(), {HOST: {0: H100, 1: H100}, "node2": {0: H100}})
    lost = [f for f in j.findings if f.host == "node2"]
    assert len(lost) == 8 and {f.status for f in lost} == {Status.UNJUDGED}
    assert all(f.brief.endswith("not available (no node evidence recorded for node2)") for f in lost)
    assert {f.status for f in j.findings if f.host == HOST} == {Status.PASS}



def test_a_gpu_alone_on_its_host_has_no_link_count_judged():
    """A one-GPU VM (tests/data/h100x1: 0 NVLinks active, the fabric not given to it) passes; a link that went
    down still fails, and links NVML does not answer for are no finding."""
    down = [link(j, active=False) for j in range(18)]
    ev = Evidence([Snapshot(HOST, w, 1.0, [gpu(0, down)], OWN) for w in ("before", "after")])
    j = run_rules(ev, n=1)
    assert not failed(j) and not unjudged(j)
    assert "GPU 0: 0 NVLinks active before and after the run (the only GPU of its host: no peer to link to, the " \
           "count is not judged)" in [f.reason for f in j.findings]
    hidden = Evidence([Snapshot(HOST, w, 1.0, [gpu(0, Item.na("not supported"))], OWN) for w in ("before", "after")])
    assert not failed(run_rules(hidden, n=1)) and not unjudged(run_rules(hidden, n=1))
    went = Evidence([Snapshot(HOST, "before", 1.0, [gpu(0)], OWN), Snapshot(HOST, "after", 2.0, [gpu(0, down)], OWN)])
    assert failed(run_rules(went, n=1)) == ["GPU 0: 0 NVLinks active (links 0-17 went down during the run)"]


def test_an_item_without_a_value_is_never_read_as_healthy():
    """Item() (no value and no reason: a reader's slip) is taken as not available, never as a pass."""
    j = run_rules(node(2, after={0: gpu(0, ecc_uncorrected_volatile=Item(), remap_failure=Item())}))
    assert sorted(unjudged(j)) == ["GPU 0: row remap state not available (no value)",
                                   "GPU 0: volatile ECC counts not available (no value)"]
