"""compare warns where NEW's node evidence differs from BASE's in a way that explains a changed row (clocks held
down, another job's process, NVLinks, PCIe width, counters that moved), in its text output and on stderr with
--format csv, and never changes the exit status: the rows decide it. Two recorded runs of the same code on the
same node (tests/data/h100x2-current/all-1 and -2, which compare passes), different evidence written into their
meta.json."""

from __future__ import annotations

import pytest

from evidence_synth import RUN, host_of, quiet, run_with, troubled

from conftest import run_compare
from ipcbench.evidence.model import Evidence
from ipcbench.judging.evidence_notes import NO_EVIDENCE, compare_warnings


def pair(tmp_path, base_ev, new_ev):
    host = host_of(RUN)
    return (run_with(tmp_path, base_ev(host) if base_ev else None, "base", source=RUN),
            run_with(tmp_path, new_ev(host) if new_ev else None, "new", source=RUN.with_name("all-2")))


def test_evidence_that_differs_is_named_without_changing_the_exit_status(tmp_path, capsys):
    base, new = pair(tmp_path, quiet, troubled)
    rc, out, err = run_compare(capsys, base, new)
    assert rc == 0, out  # as without evidence: the rows decide
    who = "BASE base vs NEW new: node evidence differs"
    assert f"warning: {who} (clocks held down): NEW vm: GPU 0 throttled for power for 0.8 s of the run; BASE none" \
           in out
    assert f"{who} (another job's process): NEW vm: another process on GPU 1: pid 4242 (train.py, 2.0 GiB)" in out
    assert f"{who} (NVLinks not all active): NEW vm: GPU 1: 17 of 18 NVLinks active; BASE none" in out
    assert f"{who} (PCIe narrower than its maximum): NEW vm: GPU 1: PCIe gen5 x8 (max gen5 x16); BASE none" in out
    assert f"{who} (NVLink error counters moved): NEW vm: 12 replays on GPU 1 link 4 during the run" in out
    rc, out, err = run_compare(capsys, base, new, "--format", "csv")
    assert rc == 0 and f"ipcbench: warning: {who} (clocks held down)" in err


def test_the_same_evidence_both_sides_warns_nothing(tmp_path, capsys):
    base, new = pair(tmp_path, troubled, troubled)
    rc, out, _ = run_compare(capsys, base, new)
    assert rc == 0 and "node evidence differs" not in out


def test_either_order_is_named_from_its_side():
    (line,) = [w for w in compare_warnings("a", troubled("h"), "b", quiet("h")) if "clocks" in w]
    assert line.endswith("NEW none; BASE h: GPU 0 throttled for power for 0.8 s of the run: read the changed rows "
                         "against it")


def test_a_side_without_evidence_says_so_and_two_without_say_nothing():
    lines = compare_warnings("old", Evidence([]), "new", troubled("h"))
    assert lines and all(f"BASE {NO_EVIDENCE}" in w for w in lines)
    assert compare_warnings("old", Evidence([]), "new", quiet("h")) == []
    assert compare_warnings("a", Evidence([]), "b", Evidence([])) == []


def test_an_old_pair_of_runs_has_no_evidence_warning(tmp_path, capsys):
    base, new = pair(tmp_path, None, None)
    rc, out, _ = run_compare(capsys, base, new)
    assert rc == 0 and "node evidence" not in out


def test_malformed_evidence_is_said_never_a_traceback(tmp_path):
    """A counter of the wrong type in meta.json (edited by hand): the record refuses the run, naming the field (the
    report skips it, compare and check exit 2: tests/test_reading_fuzz.py); compare's warnings say it unreadable
    should one reach them."""
    import json

    from ipcbench.judging.evidence_notes import compare_warnings
    from ipcbench.record.meta import MetaError, read_meta

    run = run_with(tmp_path, quiet(host_of(RUN)), "bad")
    meta = json.loads((run / "meta.json").read_text())
    meta["evidence"]["snapshots"][1]["gpus"][0]["links"]["value"][0]["errors"]["value"]["replay"] = "x"
    (run / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(MetaError) as e:  # the record refuses it, naming the field (tests/test_record_strict.py)
        read_meta(run)
    assert e.value.field == "evidence.snapshots[1].gpus[0].links.value[0].errors.value.replay"
    ev = Evidence.from_json(meta["evidence"])  # the views still say it, should one reach them
    good = quiet(host_of(RUN))
    assert "unreadable" in compare_warnings("base", good, "new", ev)[0]


def test_counters_that_grew_on_many_links_are_one_line_per_counter():
    """compare's warning sums the NVLink counters that grew, one text per counter (judging/evidence_notes._grown): a
    single link keeps its own sentence; several links of a counter say how many, on which GPUs, and the range."""
    from ipcbench.evidence.delta import Change
    from ipcbench.judging.evidence_notes import _grown

    def grew(gpu, link, name, n):
        return Change("vm", gpu, "link_error", link, {name: 100}, {name: 100 + n},
                      f"{n} {name} on GPU {gpu} link {link}")

    crc = [grew(g, k, "crc_data", 91 + 7 * (4 * g + k)) for g in range(4) for k in range(4)]
    assert _grown(crc + [grew(1, 2, "replay", 12)]) == [
        "CRC data errors on 16 links of GPUs 0, 1, 2, 3, 91–196 each, during the run", "12 replay on GPU 1 link 2"]
    assert _grown([grew(0, 0, "recovery", 5), grew(0, 1, "recovery", 5)]) == [
        "recoveries on 2 links of GPU 0, 5 each, during the run"]
