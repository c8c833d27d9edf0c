"""`ipcbench report` shows the node's evidence beside the numbers (report/evidence_view.py): each GPU's NVLinks,
their speed, PCIe against its maximum, ECC, remaps, clocks and other processes; what changed during the run; every
item not available with why; and a run recorded before evidence says "no node evidence recorded". On a real
recorded run (results/) with synthetic evidence written into its meta.json."""

from __future__ import annotations

from dataclasses import replace

from evidence_synth import NS, RUN, gpu, host_of, quiet, run_with, troubled, without_nvml

from conftest import run_report
from ipcbench.evidence.model import Evidence, Item, Snapshot
from ipcbench.judging.evidence_notes import notable
from ipcbench.judging.judge import shipped_verdict
from ipcbench.record.run import load_run
from ipcbench.report import evidence_view as view
from ipcbench.report.render import Para, Table, to_text
from ipcbench.status import Status


def text(ev: Evidence) -> str:
    return to_text(view.evidence_blocks(ev))


def test_each_gpu_as_it_was_at_the_end_and_what_changed_during_the_run():
    t = text(troubled("node1"))
    assert "Node evidence" in t
    assert "18 of 18 active" in t and "17 of 18 active" in t and "26.562 GB/s" in t
    assert "gen5 x16 (max gen5 x16)" in t and "gen5 x8 (max gen5 x16)" in t
    assert "pid 4242 (train.py, 2.0 GiB)" in t and "sw_power_cap" in t
    assert ("during the run: GPU 0 throttled for power for 0.8 s of the run; another process, pid 4242 (train.py, "
            "2.0 GiB), appeared on GPU 1 during the run; NVLink error counters grew on 1 link (below)") in t
    counters = next(b for b in view.evidence_blocks(troubled("node1")) if isinstance(b, Table) and "grew" in b.columns)
    assert counters.columns == ["GPU", "link", "counter", "before", "after", "grew", "per second"]
    assert counters.rows == [["1", "4", "replays", "0", "12", "12", "0.24"]]  # 12 in the 50 s between snapshots
    assert counters.caption == "NVLink error counters that grew during the run (1 link)"
    assert f"not available: uncorrectable ECC count (GPU 1): {NS}; corrected ECC count (GPU 1): {NS}" in t


def test_a_gpu_row_names_each_item():
    g = gpu(1, down=(9,), width=8)
    row = view._gpu_row(g, Snapshot("n", "after", 0.0, [g], []))
    assert row == ["1", "17 of 18 active", "26.562 GB/s", "gen5 x8 (max gen5 x16)", "0 uncorrectable, 0 corrected "
                   "(volatile)", "none pending, 0 rows remapped (uncorrectable)", "none", "none"]
    bare = gpu(0, links=Item.na(NS), pcie_gen=Item.na(NS), pcie_width=Item.na(NS), pcie_max_gen=Item.na(NS),
               pcie_max_width=Item.na(NS), clock_events=Item.na(NS), remap_pending=Item.na(NS),
               remapped_uncorrectable=Item.na(NS))
    bare = replace(bare, processes=Item.na("no permission"))
    assert view._gpu_row(bare, Snapshot("n", "after", 0.0, [bare], []))[1:] == [
        "not available", "not available", "not available", "0 uncorrectable, 0 corrected (volatile)",
        "not available", "not available", "not available"]


def test_a_quiet_node_says_nothing_changed_and_warns_nothing(tmp_path):
    t = text(quiet("node1"))
    assert "nothing changed in what was read" in t and "not available" not in t
    assert notable(quiet("node1")) == {}
    run = load_run(run_with(tmp_path, quiet(host_of(RUN))) / "results.csv")
    assert view.glance_lines(run.meta, shipped_verdict(run)) == [
        ("info", "**Node evidence**, as ipcbench check judged it: healthy on 2 GPUs: NVLinks up, their speed, their "
                 "error counters, PCIe, clocks, ECC, row remaps (see Node evidence).")]  # processes: GPUs not the run's


def test_a_node_without_nvml_says_so():
    assert text(without_nvml("node1")).count("every item not available: no NVML: NVMLError_LibraryNotFound") == 1


def test_a_run_recorded_before_evidence():
    assert view.evidence_blocks(Evidence([])) == [Para("**node evidence** no node evidence recorded", terminal=True)]


def test_link_speeds_that_differ_are_named_by_link():
    g = gpu(0)
    links = [ln if ln.link != 3 else type(ln)(3, ln.active, ln.version, Item(13.281), ln.errors)
             for ln in g.links.value]
    g = replace(g, links=Item(links))
    assert view.speed_text(g).endswith("13.281 GB/s (link 3)")


def test_the_headline_says_each_kind_of_finding_as_check_judged_it(tmp_path):
    """Troubled evidence: one line per kind of finding check did not pass, with check's own words and level
    (unhealthy ✗, cannot judge !), one line for the kinds it passed, its notes; nothing of its own."""
    run = load_run(run_with(tmp_path, troubled(host_of(RUN))) / "results.csv")
    verdict = shipped_verdict(run)
    lines = view.glance_lines(run.meta, verdict)
    assert [(level, words.split("**")[1]) for level, words in lines] == [
        ("bad", "NVLink state"), ("bad", "NVLink error counters"), ("bad", "PCIe link generation and width"),
        ("warn", "volatile ECC counts"), ("info", "Node evidence"), ("info", "check notes")]
    assert lines[0][1] == ("**NVLink state** (unhealthy, ipcbench check): GPU 1: 17 of 18 NVLinks active (link 9 "
                           "down).")
    assert lines[3][1].startswith("**volatile ECC counts** (cannot judge, ipcbench check): GPU 1: ")
    assert "healthy on 2 GPUs: their speed, clocks, row remaps (see Node evidence)." in lines[4][1]
    assert lines[5][1].startswith("**check notes**: GPU 0 throttled for power for 0.8 s of the run: explains")
    raised = {c.method for c in verdict.checks if c.source == "evidence" and c.status is not Status.PASS}
    assert len([x for x in lines if x[0] != "info"]) == len(raised) == 4
    assert notable(troubled("node1")).keys() == {"throttling", "counters", "links", "pcie", "process"}


def test_the_report_of_a_run_shows_its_evidence(tmp_path, capsys):
    src = run_with(tmp_path, troubled("placeholder"))
    host = host_of(src)
    run = run_with(tmp_path, troubled(host), "with-evidence", source=src)
    rc, out, err = run_report(capsys, run, "--no-figures", "--out", tmp_path / "report")
    assert rc == 0, err
    assert "Node evidence" in out and "17 of 18 active" in out and "NVLink error counters grew on 1 link" in out
    assert "GPU 0 throttled for power for 0.8 s of the run" in out and "pid 4242 (train.py, 2.0 GiB)" in out
    assert "**NVLink state**" not in out and "  ✗ NVLink state (unhealthy, ipcbench check)" in out  # as text
    md = (tmp_path / "report" / "report.md").read_text()
    html = (tmp_path / "report" / "report.html").read_text()
    for doc in (md, html):
        assert "17 of 18 active" in doc and "NVLink error counters grew on 1 link" in doc


def test_the_report_of_an_old_run_says_no_evidence_was_recorded(tmp_path, capsys):
    rc, out, err = run_report(capsys, run_with(tmp_path, None), "--no-figures", "--out", tmp_path / "report")
    assert rc == 0, err
    assert "node evidence no node evidence recorded" in out and "Node evidence, as" not in out
    assert "check notes: no node evidence recorded" in out


def test_the_table_is_one_row_per_gpu():
    tables = [b for b in view.evidence_blocks(troubled("n")) if isinstance(b, Table) and "NVLinks" in b.columns]
    assert len(tables) == 1 and [r[0] for r in tables[0].rows] == ["0", "1"]


def test_every_counter_that_grew_is_listed_largest_first():
    """One row per link and counter in the files; the terminal the largest 8, saying how many more the files hold."""
    from ipcbench.evidence.delta import Change

    grown = [Change("n", 0, "link_error", k, {"crc_data": 100}, {"crc_data": 100 + 10 * k}, "") for k in range(1, 11)]
    blocks = view.counter_blocks(grown, 20.0)
    files = next(b for b in blocks if isinstance(b, Table) and b.files)
    terminal = next(b for b in blocks if isinstance(b, Table) and not b.files)
    assert [r[1] for r in files.rows] == [str(k) for k in range(10, 0, -1)]
    assert files.rows[0] == ["0", "10", "CRC data errors", "100", "200", "100", "5"]
    assert terminal.rows == files.rows[:8] and terminal.terminal and not files.terminal
    assert Para("… and 2 more links in the report.", terminal=True, files=False) in blocks
    assert view.counter_blocks([], 20.0) == []
