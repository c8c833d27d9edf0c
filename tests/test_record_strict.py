"""The record read strictly (issue 37, item 2): a meta.json field present with the wrong type, out of range, an
unknown schema_version or a count that disagrees with another field is one error naming the file and the field
(record/meta.MetaError, a ResultsError), never a traceback and never a run read as if the field were fine; a
field absent because the run predates it stays unknown. A results.csv whose last line was cut anywhere (at a
field boundary too) is incomplete. Each case of the issue is a test here; the end-to-end ones run report,
compare and check --from in-process on a damaged copy of a recorded run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

from ipcbench.errors import ResultsError
from ipcbench.record.run import load_run

ROOT = Path(__file__).resolve().parents[1]
# a check run of 2 x H200 with its node evidence: check says HEALTHY
BASE = ROOT / "tests" / "data" / "results-1126" / "h200x2-check-1"
# another run of the same check on the same machine: compare's BASE
OTHER = ROOT / "tests" / "data" / "results-1126" / "h200x2-check-2"


def copy_of(tmp_path: Path, name: str = "bad") -> Path:
    dst = tmp_path / name
    shutil.copytree(BASE, dst)
    return dst


def damaged(tmp_path: Path, mutate: Callable[[dict], Any], name: str = "bad") -> Path:
    """A copy of BASE whose meta.json `mutate` changed."""
    run = copy_of(tmp_path, name)
    meta = json.loads((run / "meta.json").read_text())
    mutate(meta)
    (run / "meta.json").write_text(json.dumps(meta, indent=1))
    return run


def meta_error(run: Path, field: str) -> ResultsError:
    """load_run's one error: a ResultsError naming meta.json and `field`."""
    with pytest.raises(ResultsError) as e:
        load_run(run / "results.csv")
    text = str(e.value)
    assert str(run / "meta.json") in text and field in text and "\n" not in text, text
    assert getattr(e.value, "field", None) == field, text
    return e.value


def set_path(path: str, value: Any) -> Callable[[dict], None]:
    """A mutation: the key path ("ranks[0].gpu") set to `value`."""
    def mutate(meta: dict) -> None:
        *parents, last = _steps(path)
        node: Any = meta
        for step in parents:
            node = node[step]
        node[last] = value
    return mutate


def _steps(path: str) -> list:
    out: list = []
    for part in path.replace("]", "").split("."):
        name, *indices = part.split("[")
        out += [name] + [int(i) for i in indices]
    return out


# The cases: (mutation, the field the error names)
CASES: dict[str, tuple[Callable[[dict], None], str]] = {
    "ranks is a number": (set_path("ranks", 3), "ranks"),
    "ranks[0] is a string": (set_path("ranks[0]", "x"), "ranks[0]"),
    "ranks[0].gpu is a string": (set_path("ranks[0].gpu", "0"), "ranks[0].gpu"),
    "ranks[0].gpu is a list": (set_path("ranks[0].gpu", [0]), "ranks[0].gpu"),
    "ranks[0].gpu is null": (set_path("ranks[0].gpu", None), "ranks[0].gpu"),
    "ranks[0].gpu is a dict": (set_path("ranks[0].gpu", {"index": 0}), "ranks[0].gpu"),
    "pair_mode.mode is 5": (set_path("pair_mode.mode", 5), "pair_mode.mode"),
    "evidence.snapshots[0] is {}": (set_path("evidence.snapshots[0]", {}), "evidence.snapshots[0]"),
    "evidence is a string": (set_path("evidence", "x"), "evidence"),
    "evidence is a list": (set_path("evidence", []), "evidence"),
    "evidence.snapshots is a string": (set_path("evidence.snapshots", "x"), "evidence.snapshots"),
    "schema_version 99": (set_path("schema_version", 99), "schema_version"),
    "hosts is 5": (set_path("hosts", 5), "hosts"),
    "options.quick is 'yes'": (set_path("options.quick", "yes"), "options.quick"),
    "hosts disagree with ranks": (set_path("hosts", ["another-host"]), "hosts"),
    "a rank on a GPU gpus does not list": (set_path("ranks[0].gpu", 7), "ranks[0].gpu"),
    "ranks_per_gpu disagrees with ranks": (set_path("ranks_per_gpu", 3), "ranks_per_gpu"),
}


# ---- each case, read by the record ------------------------------------------------------------------------------

def test_ranks_a_number_is_an_error(tmp_path):
    meta_error(damaged(tmp_path, set_path("ranks", 3)), "ranks")


def test_a_rank_that_is_a_string_is_an_error(tmp_path):
    meta_error(damaged(tmp_path, set_path("ranks[0]", "x")), "ranks[0]")


@pytest.mark.parametrize("gpu", ["0", [0], None, {"index": 0}], ids=["string", "list", "null", "dict"])
def test_a_rank_gpu_not_an_integer_is_an_error(tmp_path, gpu):
    meta_error(damaged(tmp_path, set_path("ranks[0].gpu", gpu)), "ranks[0].gpu")


def test_pair_mode_mode_5_is_an_error(tmp_path):
    meta_error(damaged(tmp_path, set_path("pair_mode.mode", 5)), "pair_mode.mode")


def test_an_empty_snapshot_is_an_error(tmp_path):
    meta_error(damaged(tmp_path, set_path("evidence.snapshots[0]", {})), "evidence.snapshots[0]")


@pytest.mark.parametrize("evidence", ["x", []], ids=["string", "list"])
def test_evidence_not_an_object_is_an_error(tmp_path, evidence):
    meta_error(damaged(tmp_path, set_path("evidence", evidence)), "evidence")


def test_snapshots_a_string_is_an_error(tmp_path):
    meta_error(damaged(tmp_path, set_path("evidence.snapshots", "x")), "evidence.snapshots")


def test_an_unknown_schema_version_is_an_error(tmp_path):
    e = meta_error(damaged(tmp_path, set_path("schema_version", 99)), "schema_version")
    assert "99" in str(e)


def test_hosts_a_number_is_an_error(tmp_path):
    meta_error(damaged(tmp_path, set_path("hosts", 5)), "hosts")


def test_options_quick_yes_is_an_error(tmp_path):
    meta_error(damaged(tmp_path, set_path("options.quick", "yes")), "options.quick")


def test_hosts_that_disagree_with_the_ranks_are_an_error(tmp_path):
    meta_error(damaged(tmp_path, set_path("hosts", ["another-host"])), "hosts")


def test_a_rank_on_a_gpu_the_gpu_list_lacks_is_an_error(tmp_path):
    meta_error(damaged(tmp_path, set_path("ranks[0].gpu", 7)), "ranks[0].gpu")


def test_ranks_per_gpu_that_disagrees_with_the_ranks_is_an_error(tmp_path):
    meta_error(damaged(tmp_path, set_path("ranks_per_gpu", 3)), "ranks_per_gpu")


def cut_at_a_field_boundary(run: Path) -> int:
    """results.csv's last line cut right after one of its fields (no newline): what a killed writer can leave.
    Returns that line's number."""
    csv = run / "results.csv"
    text = csv.read_text()
    head, last = text[:-1].rsplit("\n", 1)
    cut = last[: last.rindex(",") + 1]  # every field, the last one (a column that may be empty) not begun
    csv.write_text(head + "\n" + cut)
    return text.count("\n")


def test_a_results_csv_cut_at_a_field_boundary_is_incomplete(tmp_path):
    run = copy_of(tmp_path)
    line = cut_at_a_field_boundary(run)
    got = load_run(run / "results.csv")
    assert "cut" in got.incomplete, got.incomplete
    assert any(f"results.csv:{line}: last line cut short" in n for n in got.notes), got.notes
    assert len(got.frame) == line - 2  # the rows before it kept, the cut one dropped (its last field may be cut)


def test_a_results_csv_whose_last_line_only_lacks_its_newline_is_incomplete(tmp_path):
    """The writer ends every row with a newline and flushes it: a last line without one was cut, even where it
    still parses (a number cut short is still a number)."""
    run = copy_of(tmp_path)
    csv = run / "results.csv"
    csv.write_text(csv.read_text()[:-1])
    got = load_run(csv)
    assert "cut" in got.incomplete and len(got.frame) == csv.read_text().count("\n") - 1


def test_a_field_absent_because_the_run_predates_it_stays_unknown(tmp_path):
    """Older runs lack evidence, schema_version, noise_basis, skipped, ranks_per_gpu: unknown, not errors."""
    def older(meta: dict) -> None:
        for key in ("evidence", "schema_version", "noise_basis", "skipped", "ranks_per_gpu", "mps", "plan"):
            meta.pop(key, None)

    got = load_run(damaged(tmp_path, older) / "results.csv")
    assert not got.meta.evidence and got.meta.schema_version == 1 and got.meta.noise_basis == "within-run"
    assert got.meta.ranks_per_gpu == 1  # counted from the ranks


# ---- end to end: report, compare, check --from on each case -------------------------------------------------------

def cli(capsys, *argv) -> tuple[int, str, str]:
    from ipcbench.cli import main

    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


E2E = {**{name: case for name, case in CASES.items()}, "results.csv cut at a field boundary": (None, "results.csv")}


def _damaged_case(tmp_path: Path, name: str) -> tuple[Path, str]:
    mutate, field = E2E[name]
    if mutate is None:
        run = copy_of(tmp_path)
        cut_at_a_field_boundary(run)
        return run, field
    return damaged(tmp_path, mutate), field


@pytest.mark.parametrize("name", sorted(E2E))
def test_check_from_a_damaged_run_never_passes(tmp_path, capsys, name):
    """check --from: exit 2 naming the file and the field where meta.json is wrong; a cut results.csv is judged
    as the incomplete run it is, never HEALTHY."""
    run, field = _damaged_case(tmp_path, name)
    rc, out, err = cli(capsys, "check", "--from", run)
    assert "Traceback" not in out + err
    assert rc != 0, out[-1500:]
    if field != "results.csv":
        assert rc == 2 and str(run / "meta.json") in err and field in err, (rc, err)


@pytest.mark.parametrize("name", sorted(CASES))
def test_compare_with_a_damaged_run_is_refused(tmp_path, capsys, name):
    mutate, field = CASES[name]
    run = damaged(tmp_path, mutate)
    rc, out, err = cli(capsys, "compare", OTHER, run)
    assert "Traceback" not in out + err
    assert rc == 2 and str(run / "meta.json") in err and field in err, (rc, err[-1500:])


@pytest.mark.parametrize("name", sorted(CASES))
def test_report_skips_a_damaged_run_and_reports_the_others(tmp_path, capsys, name):
    mutate, field = CASES[name]
    shutil.copytree(BASE, tmp_path / "runs" / "good")
    bad = damaged(tmp_path / "runs", mutate)
    rc, out, err = cli(capsys, "report", tmp_path / "runs", "--no-figures", "--out", tmp_path / "report")
    assert "Traceback" not in out + err
    assert rc == 1 and str(bad / "meta.json") in err and field in err, (rc, err[-1500:])
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Run good" in md and "## Run bad" not in md
