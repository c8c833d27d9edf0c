"""Evidence rules that no test pinned (issue 44), each with a test that fails when the rule is broken:

- an [[evidence]] expectation asking for more than the hardware has (`nvlinks = 19` on an 18-link H200, a link speed
  above its signalling rate, a PCIe width above the GPU's widest) is exit 2, "the expectation is wrong", as a floor
  above a link's ceiling is, never exit 1 (item 2);
- a replay or recovery counter grown by exactly one, with 0 allowed, fails naming the GPU and the link;
- another job's process seen only *before* the run fails, naming its pid;
- an uncorrectable ECC count that went back (3 -> 1) is a reset: one counter-reset change, no new-errors change, a
  finding that cannot judge, never a FAIL.
On hand-built evidence (tests/test_check_evidence.py's H100 node) and, for item 2, on the shipped 4 x H200 check run
through the command line."""

from __future__ import annotations

import json

import pytest

from conftest import REPO
from ipcbench import cli
from ipcbench.evidence import delta
from ipcbench.evidence.model import Item, ProcessReading
from ipcbench.status import Status
from test_check_evidence import OWN, failed, gpu, link, mine, node, run_rules, unjudged

H200_CHECK = REPO / "results" / "h200x4-check-1"


# ---- an expectation beyond the hardware is wrong (item 2) ------------------------------------------------------

@pytest.mark.parametrize("key, value, words", [
    ("nvlinks", "19", "GPU {i}: nvlinks = 19 asks for more than the 18 NVLinks a GPU of NVLink 4.0 has: the "
                      "expectation is wrong"),
    ("nvlink_gbps", "27", "GPU {i}: nvlink_gbps = 27 asks for more than the 26.5625 GB/s signalling rate of an "
                          "NVLink 4.0 link: the expectation is wrong"),
    ("pcie_width", "32", "GPU {i}: pcie_width = 32 asks for more than the GPU's widest PCIe link, x16 (NVML): the "
                         "expectation is wrong"),
    ("pcie_gen", "6", "GPU {i}: pcie_gen = 6 asks for more than the GPU's highest PCIe generation, gen5 (NVML): the "
                      "expectation is wrong"),
])
def test_an_expectation_beyond_the_hardware_cannot_judge_and_says_why(key, value, words):
    j = run_rules(node(), mine(f'[[evidence]]\ngpu = "*"\n{key} = {value}\nwhy = "site"\n'))
    assert not failed(j)
    assert unjudged(j) == [words.format(i=i) for i in (0, 1)]


def test_an_expectation_at_the_hardware_still_judges_the_node():
    """18 links asked of an 18-link GPU with one link down fails (the rule above takes only what no GPU has)."""
    links = [link(j, active=j != 3) for j in range(18)]
    j = run_rules(node(after={1: gpu(1, links)}), mine('[[evidence]]\ngpu = "*"\nnvlinks = 18\nwhy = "site"\n'))
    assert failed(j) == ["GPU 1: 17 of 18 NVLinks active (link 3 went down during the run)"] and not unjudged(j)


def test_a_link_down_still_fails_beside_a_wrong_link_count():
    links = [link(j, active=j != 3) for j in range(18)]
    j = run_rules(node(after={1: gpu(1, links)}), mine('[[evidence]]\ngpu = "*"\nnvlinks = 19\nwhy = "site"\n'))
    assert failed(j) == ["GPU 1: 17 NVLinks active (link 3 went down during the run)"]
    assert len(unjudged(j)) == 2


def test_nvlinks_19_on_the_shipped_h200_run_is_exit_2_not_1(tmp_path, capsys):
    """`[[evidence]] nvlinks = 19` on an 18-link H200 drained a healthy node (exit 1)."""
    site = tmp_path / "site.toml"
    site.write_text('[[evidence]]\ngpu = "NVIDIA H200"\nnvlinks = 19\nwhy = "a typo"\n')
    assert cli.main(["check", "--from", str(H200_CHECK), "--thresholds", str(site)]) == 2
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith("REASON: cannot judge: GPU ") and "nvlinks = 19 asks for more than the 18 NVLinks a GPU " \
        "of NVLink 4.0 has" in last, last


# ---- NVLink counters: one more than allowed fails ----------------------------------------------------------

@pytest.mark.parametrize("counter, words", [("replay", "1 replay"), ("recovery", "1 recovery")])
def test_a_counter_grown_by_exactly_one_fails_with_none_allowed(counter, words):
    """0 allowed (the shipped tables): the first replay or recovery fails, naming the GPU and the link; a rule that
    read `>=` for `>`, or allowed one, passes it."""
    before = [link(j, **{counter: 4}) for j in range(18)]
    after = [link(j, **{counter: 5 if j == 11 else 4}) for j in range(18)]
    j = run_rules(node(before={1: gpu(1, before)}, after={1: gpu(1, after)}))
    assert failed(j) == [f"{words} on GPU 1 link 11 during the run"]
    (f,) = [f for f in j.findings if f.status is Status.FAIL]
    assert (f.src_gpu, f.value, f.expected, f.unit, f.link) == (1, 1, 0, counter, "nvlink")
    allow = mine(f'[[evidence]]\ngpu = "*"\nlink_errors_allowed = {{{counter} = 1}}\nwhy = "site"\n')
    assert not failed(run_rules(node(before={1: gpu(1, before)}, after={1: gpu(1, after)}), allow))


# ---- other jobs: a process seen only before the run ------------------------------------------------------

def test_another_jobs_process_seen_only_before_the_run_fails_naming_its_pid():
    """A job that held the GPU when the run began and left before it ended still shared the GPU with the first
    measurements: the before snapshot counts as the after one does."""
    procs = Item([ProcessReading(OWN[0], 600 << 20, "python"), ProcessReading(5150, 3 << 30, "train.py")])
    j = run_rules(node(before={0: gpu(0, processes=procs)}))
    assert failed(j) == ["pid 5150 (train.py) holds 3.0 GiB on GPU 0"]
    (f,) = [f for f in j.findings if f.status is Status.FAIL]
    assert (f.method, f.src_gpu, f.value, f.expected) == ("processes", 0, 1, 0)


# ---- ECC: a count that went back is a reset --------------------------------------------------------------

def test_an_uncorrectable_ecc_count_that_went_back_is_a_reset_never_a_failure():
    before, after = gpu(0, ecc_uncorrected_volatile=Item(3)), gpu(0, ecc_uncorrected_volatile=Item(1))
    ev = node(before={0: before}, after={0: after})
    snaps = {s.when: s for s in ev.snapshots}
    changes = [c for c in delta.changes(snaps["before"], snaps["after"]) if c.gpu == 0]
    assert [c.kind for c in changes] == ["counter_reset"] and "ECC" in changes[0].text
    assert (changes[0].before, changes[0].after) == (3, 1)
    j = run_rules(ev)
    assert not failed(j)
    ecc = [f for f in j.findings if f.method == "ecc" and f.src_gpu == 0]
    assert [f.status for f in ecc] == [Status.UNJUDGED] and "went back from 3 to 1" in ecc[0].brief, ecc


def test_a_reset_ecc_count_is_exit_2_through_the_verdict():
    from test_check_evidence import recorded, quiet_node
    from ipcbench.check import plan
    from ipcbench.judging import expect, judge

    run = recorded(None)
    ev = quiet_node(run, before={0: gpu(0, ecc_uncorrected_volatile=Item(3))},
                    after={0: gpu(0, ecc_uncorrected_volatile=Item(1))})
    object.__setattr__(run.meta, "evidence", ev)
    v = judge.judge(run, expect.defaults(), list(plan.METHODS_JUDGED))
    assert v.exit_code == 2 and json.dumps(v.as_dict(), default=str).count('"status": "fail"') == 0
