"""The report's "At a glance" block speaks with check's voice (issue 37, item 6), over every recorded multi-GPU run
(results/ and tests/data): a run check judges healthy gets a block of at most 25 terminal lines with no warning
(no "!" nor "✗" line: nothing check does not raise too); where check raises something, each evidence line that
warns names a kind of finding check did not pass, one line per kind, and no NVLink link is listed there (the Node
evidence section lists them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import has_cross_gpu_pairs, per_directory, sampled
from ipcbench.judging.evidence_rules import ITEM_WORDS, SOURCE
from ipcbench.record.run import load_run
from ipcbench.report.document import _tables
from ipcbench.report.headline import _run_block, glance_facts
from ipcbench.report.render import Callout, to_text
from ipcbench.status import Status

ROOT = Path(__file__).resolve().parents[1]
MULTI_GPU = sorted(p.parent for d in ("results", "tests/data") for p in (ROOT / d).rglob("results.csv")
                   if has_cross_gpu_pairs(p.parent))
MAX_LINES = 25
WARNING_MARKS = ("  ! ", "  ✗ ")


def glance(run_dir: Path) -> tuple[list[str], dict]:
    """The run's At-a-glance block as the terminal shows it (its title and every item), and its facts."""
    run = load_run(run_dir / "results.csv")
    t = _tables([run])["glance"]
    facts = glance_facts(run, t)
    callout = next(b for b in _run_block(run, t, facts, several=False) if isinstance(b, Callout))
    return to_text([callout]).rstrip("\n").splitlines(), facts


def test_the_recorded_runs_hold_healthy_multi_gpu_runs():
    assert len(MULTI_GPU) > 40


# every run under results/ and one of each recorded set by default; the other recorded runs are slow
@sampled("run_dir", MULTI_GPU, keep=0, ids=lambda p: str(p.relative_to(ROOT)),
         always=[r for r in MULTI_GPU if r.parent == ROOT / "results"] + per_directory(
             [r for r in MULTI_GPU if r.parent != ROOT / "results"]))
def test_the_glance_warns_only_where_check_raises(run_dir):
    lines, facts = glance(run_dir)
    verdict = facts["verdict"]
    warned = [ln for ln in lines if ln.startswith(WARNING_MARKS)]
    assert not [ln for ln in lines if re.search(r"GPU \d+ link \d+", ln)]  # the links: in the Node evidence
    if verdict.status is Status.PASS:
        assert len(lines) <= MAX_LINES, "\n".join(lines)
        assert not warned, warned
        return
    raised = {ITEM_WORDS.get(c.method, c.method) for c in verdict.checks
              if c.source == SOURCE and c.status is not Status.PASS}
    kinds = [text.split("**")[1] for level, text in facts["lines"] if level != "info" and text.startswith("**")]
    evidence = [k for k in kinds if k in ITEM_WORDS.values()]
    assert set(evidence) <= raised and len(evidence) == len(set(evidence)), (evidence, raised)


def test_counters_that_grew_below_checks_rate_are_counted_in_one_healthy_line():
    """tests/data/results-1126/h200x2-all-1: seven links counted 23-119 CRC data errors in a 19 s run, check judged them
    healthy
    (below its 100 a second): one line says so with the counts, the links are in the Node evidence table."""
    lines, facts = glance(ROOT / "tests" / "data" / "results-1126" / "h200x2-all-1")
    assert facts["verdict"].status is Status.PASS
    (line,) = [ln for level, ln in facts["lines"] if "Node evidence" in ln]
    assert line == ("**Node evidence**, as ipcbench check judged it: healthy on 2 GPUs: NVLinks up, their speed, their "
                    "error counters (CRC data errors on 7 links, 23–119 each, at most 6.173/s: below the 100/s check "
                    "fails at), PCIe, clocks, ECC, row remaps, no other job (see Node evidence).")


def crc_run(tmp_path, grew: int) -> Path:
    """A recorded two-H100 run with quiet evidence, GPU 1 link 4 counting `grew` CRC data errors in its 50 s."""
    from dataclasses import replace

    from evidence_synth import RUN, host_of, quiet, run_with
    from ipcbench.evidence.model import Evidence, Item

    ev = quiet(host_of(RUN))
    after = ev.snapshots[1]
    g1 = after.gpus[1]
    links = [replace(ln, errors=Item(dict(ln.errors.value, crc_data=grew))) if ln.link == 4 else ln
             for ln in g1.links.value]
    after = replace(after, gpus=[after.gpus[0], replace(g1, links=Item(links))])
    return run_with(tmp_path, Evidence([ev.snapshots[0], after]))


@pytest.mark.parametrize("grew,level", [(4999, "info"), (5000, "bad")])
def test_a_counter_is_said_as_check_judged_its_rate(tmp_path, grew, level):
    """4,999 CRC data errors in 50 s (99.98/s) is healthy by check's 100/s and counted in the healthy line; 5,000
    (100/s) fails, and the line says check's own words, unhealthy."""
    _, facts = glance(crc_run(tmp_path, grew))
    (got,) = [(lv, ln) for lv, ln in facts["lines"] if "error counters" in ln]
    assert got[0] == level
    if level == "info":
        assert "their error counters (CRC data errors on 1 link, 4999 each, at most 99.98/s: below the 100/s check " \
               "fails at)" in got[1]
    else:
        assert got[1] == ("**NVLink error counters** (unhealthy, ipcbench check): 5000 CRC data errors on GPU 1 link 4 "
                          "during the run (100/s, 100/s fail).")


def test_noisy_rows_of_a_recorded_run_are_those_whose_own_noise_passes_the_floor():
    """tests/data/results-1126/h200x2-all-1 (every row states noise_within): read with plain csv, the rows whose
    within-run noise is
    above today's floor of their kind are the report's noisy rows, 4 of 917 (the CV above 0.05 flagged 134; 7 under
    the H100's floors, which H200 pairs took until four H200s were measured: the pool and VMM rows among them now lie
    under the H200's floors)."""
    import csv

    from ipcbench.catalogue.noise import floor_for

    with open(ROOT / "tests" / "data" / "results-1126" / "h200x2-all-1" / "results.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["kind"] != "error" and r["noise_within"]]
    want = sorted((r["suite"], r["method"], int(r["src_gpu"]), int(r["bytes"])) for r in rows
                  if float(r["noise_within"]) > floor_for("NVIDIA H200", r["engine"], r["timing"], int(r["bytes"]),
                                                          same_gpu=r["same_gpu"] == "true").fraction)
    run = load_run(ROOT / "tests" / "data" / "results-1126" / "h200x2-all-1" / "results.csv")
    noisy = _tables([run])["noisy"]
    assert sorted(zip(noisy["suite"], noisy["method"], noisy["src_gpu"], noisy["bytes"])) == want and len(want) == 4
    _, facts = glance(ROOT / "tests" / "data" / "results-1126" / "h200x2-all-1")
    assert ("info", "**4 noisy rows** (handles 4): their samples spread more than their kind moves between runs; "
                    "quote them with their noise.") in facts["lines"]


def test_a_run_that_stopped_never_says_a_suite_wrote_nothing(tmp_path):
    """A run cut short half way (a killed writer): its headline must not state as facts of the node what the run
    never reached ("no host-staged rows", "the nccl suite wrote none"): it says the run stopped before them."""
    import shutil

    run = tmp_path / "cut"
    shutil.copytree(ROOT / "results" / "h200x2-all-1", run)
    text = (run / "results.csv").read_text()
    (run / "results.csv").write_text(text[: text.index("\n", len(text) // 2) + 30])  # half, its last line cut
    lines, facts = glance(run)
    said = " ".join(lines)
    assert "no host-staged rows (staged suite) to compare with" not in said and "wrote none" not in said, said
    assert "did not complete" in said and "it stopped before its NCCL steps" in said, said
