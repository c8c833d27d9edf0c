"""A run's rows held to its record (issue 44, "The run knows what it should hold"): record/agreement.py, the planned
rows a run writes (run/walk.planned, catalogue/planned.py) and what report, compare and check --from do with a run
whose rows disagree with its record.

First the failures a new user found on results/h200x2-all-1 (917 rows, schema 4: no planned rows, so its rows count
and ranks are what hold it): each passed as HEALTHY before. Then a copy of it made a schema-5 run (synth.with_planned_
rows) for the planned rows' own checks, and the writer on fakes: what a run plans is what it writes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import synth
from ipcbench.cli import main
from ipcbench.record.agreement import RowsError
from ipcbench.record.meta import MetaError
from ipcbench.record.run import load_run
from ipcbench.results import CSV_NAME, META_NAME

ROOT = Path(__file__).resolve().parents[1]
ALL = ROOT / "results" / "h200x2-all-1"  # 917 rows, check passes it: 89 checks
GOOD = ROOT / "results" / "h200x2-all-2"
CE_256M = ",copy,ce,push,0,1,0,1,"  # the row the user deleted: GPU 0 -> 1 ce push 256M (with ",268435456,")


def cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err
    return rc, out, err


def copy_of(tmp_path: Path, src: Path = ALL, name: str = "run") -> Path:
    dst = tmp_path / name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("report"))
    return dst


def lines(run: Path) -> list[str]:
    return (run / CSV_NAME).read_text().splitlines(keepends=True)


def write_lines(run: Path, text: list[str]) -> None:
    (run / CSV_NAME).write_text("".join(text))


def edit_meta(run: Path, change) -> None:
    meta = json.loads((run / META_NAME).read_text())
    change(meta)
    (run / META_NAME).write_text(json.dumps(meta))


def ce_256m(text: list[str]) -> int:
    return next(i for i, ln in enumerate(text) if CE_256M in ln and ",268435456," in ln)


# ---- the user's cases, on a run of schema 4 ------------------------------------------------------------------------

def _cut(run: Path) -> None:
    write_lines(run, lines(run)[:459])  # the header and 458 rows: cut at a line boundary


def _deleted(run: Path) -> None:
    text = lines(run)
    write_lines(run, text[:ce_256m(text)] + text[ce_256m(text) + 1:])


def _doubled(run: Path) -> None:
    text = lines(run)
    write_lines(run, text + [text[ce_256m(text)]])


USER_CASES = {
    "cut at a line boundary": (_cut, "meta.json: field rows: 917, but results.csv holds 458 row(s)"),
    "one row deleted": (_deleted, "meta.json: field rows: 917, but results.csv holds 916 row(s)"),
    "one row doubled": (_doubled, "results.csv: 1 row(s) written twice or more (copy/ce push rank 0->1 (GPU 0->1) "
                                  "256M)"),
    "rows: 5": (lambda r: edit_meta(r, lambda m: m.update(rows=5)), "field rows: 5, but results.csv holds 917"),
    "ranks: []": (lambda r: edit_meta(r, lambda m: m.update(ranks=[])), "field ranks: lists 0 rank(s), but 917 row(s)"),
    "ranks[0] deleted": (lambda r: edit_meta(r, lambda m: m["ranks"].pop(0)),
                         "field ranks: lists 1 rank(s) (1), but 917 row(s) of results.csv name rank 0"),
    # a reviewer's case: the count removed too, so that nothing would hold the cut rows (every complete run of
    # schema 4 recorded carries it)
    "rows removed, cut": (lambda r: (edit_meta(r, lambda m: m.pop("rows")), _cut(r)), "field rows"),
}


@pytest.mark.parametrize("case", sorted(USER_CASES))
def test_check_from_refuses_a_run_whose_rows_disagree_with_its_record(tmp_path, capsys, case):
    """Each passed check before (exit 0, "89 checks passed"; ranks[0] deleted: HEALTHY with 54 of 89 checks)."""
    damage, said = USER_CASES[case]
    run = copy_of(tmp_path)
    damage(run)
    rc, out, err = cli(capsys, "check", "--from", run)
    assert rc == 2 and said in err and "HEALTHY" not in out, (out, err)


def test_report_refuses_a_cut_run_and_reports_the_good_one_beside_it(tmp_path, capsys):
    """The report said "✓ Healthy" of the cut run, and "No NCCL rows" and "no host-staged rows", both false."""
    runs = tmp_path / "runs"
    _cut(copy_of(runs, name="cut"))
    rc, out, err = cli(capsys, "report", runs / "cut", "--no-figures", "--quiet", "--out", tmp_path / "r1")
    assert rc == 2 and "field rows: 917, but results.csv holds 458 row(s)" in err and "(run skipped)" in err
    copy_of(runs, GOOD, "good")
    rc, out, err = cli(capsys, "report", runs, "--no-figures", "--quiet", "--out", tmp_path / "r2")
    md = (tmp_path / "r2" / "report.md").read_text()
    assert rc == 1 and "## Run good" in md and "## Run cut" not in md


def test_compare_refuses_a_cut_base(tmp_path, capsys):
    """compare said "verdict: no regression" of a truncated BASE against a good NEW: 459 NEW rows counted as new."""
    base = copy_of(tmp_path, name="base")
    _cut(base)
    rc, out, err = cli(capsys, "compare", base, GOOD)
    assert rc == 2 and "no regression" not in out and "field rows: 917, but results.csv holds 458 row(s)" in err


def test_a_run_in_another_order_is_the_same_run(tmp_path, capsys):
    """A row's identity is its key, not its line: rows reordered are judged as before, and the check of a run
    older than the planned rows says what its record cannot check."""
    run = copy_of(tmp_path)
    text = lines(run)
    write_lines(run, text[:1] + text[1:][::-1])
    rc, out, _ = cli(capsys, "check", "--from", run)
    assert rc == 0 and "89 checks: 89 passed" in out
    assert "rows checked against meta.json's rows count and ranks: a run of schema 4 records no planned rows" in out


# ---- a run of schema 5: its planned rows -------------------------------------------------------------------------

@pytest.fixture
def planned(tmp_path) -> Path:
    """A copy of the 917-row run, made one of schema 5 (its rows, as planned)."""
    return synth.with_planned_rows(copy_of(tmp_path))


def refused(run: Path, error=RowsError) -> str:
    with pytest.raises(error) as e:
        load_run(run / CSV_NAME)
    return str(e.value)


def test_a_run_that_holds_its_planned_rows_is_checked_whole(planned, capsys):
    run = load_run(planned / CSV_NAME)
    assert run.unchecked == "" and run.incomplete == "" and len(run.meta.planned_rows) > 50
    rc, out, _ = cli(capsys, "check", "--from", planned)
    assert rc == 0 and "89 checks: 89 passed" in out and "records no planned rows" not in out


def test_a_planned_row_lost_is_named(planned):
    _deleted(planned)
    assert refused(planned).endswith("results.csv: disagrees with meta.json's planned_rows: 1 planned row(s) missing "
                                     "(copy/ce push rank 0->1 (GPU 0->1) 256M)")


def test_a_row_whose_key_changed_is_one_not_planned_and_one_missing(planned):
    text = lines(planned)
    i = ce_256m(text)
    text[i] = text[i].replace(",268435456,", ",268435457,", 1)
    write_lines(planned, text)
    assert "1 row(s) not planned (copy/ce push rank 0->1 (GPU 0->1) 268435457); 1 planned row(s) missing " \
           "(copy/ce push rank 0->1 (GPU 0->1) 256M)" in refused(planned)


def test_many_rows_lost_are_counted_after_the_first_few(planned, capsys):
    _cut(planned)
    assert "459 planned row(s) missing (" in refused(planned) and ", and 456 more)" in refused(planned)
    rc, _, err = cli(capsys, "compare", planned, GOOD)
    assert rc == 2 and "459 planned row(s) missing" in err


def test_a_count_off_from_rows_that_are_all_planned_is_the_counts_error(planned):
    edit_meta(planned, lambda m: m.update(rows=918))
    assert "field rows: 918, but results.csv holds 917 row(s): every one of them planned, once" in \
        refused(planned, MetaError)


@pytest.mark.parametrize("field", ["planned_rows", "rows"])
def test_a_run_of_schema_5_lacks_neither_its_plan_nor_its_count(planned, field):
    edit_meta(planned, lambda m: m.pop(field))
    assert f"field {field}: absent from a run of schema 5, whose writer always writes it" in \
        refused(planned, MetaError)


def test_a_plan_naming_a_rank_the_run_lacks_is_refused(planned):
    edit_meta(planned, lambda m: m["planned_rows"][0]["pairs"].append([0, 7]))
    assert "field planned_rows[0].pairs: names node-local rank 7 of vm, which ranks does not list" in \
        refused(planned, MetaError)


def test_a_row_that_moves_a_rank_to_another_gpu_is_named(planned):
    text = lines(planned)
    i = ce_256m(text)
    text[i] = text[i].replace(CE_256M, ",copy,ce,push,0,1,1,1,", 1)
    write_lines(planned, text)
    assert "1 row(s) put a rank where neither meta.json's ranks nor its other rows do (copy/ce push rank 0->1 " \
           "(GPU 1->1) 256M)" in refused(planned)


def test_a_partial_run_is_readable_says_how_much_it_holds_and_is_no_input(planned, capsys):
    """A run killed before it completed: the report shows it, check cannot judge it, compare takes no part of a run
    as a whole BASE."""
    _cut(planned)
    edit_meta(planned, lambda m: (m.update(status="running"), m.pop("rows"), m.pop("evidence")))
    run = load_run(planned / CSV_NAME)
    assert run.incomplete == "meta.json status: running; 458 of its 917 planned rows"
    rc, out, _ = cli(capsys, "check", "--from", planned)
    assert rc == 2 and "the run did not complete (meta.json status: running; 458 of its 917 planned rows)" in out
    rc, _, err = cli(capsys, "compare", planned, GOOD)
    assert rc == 2 and "BASE run did not complete" in err and "NEW's rows it lacks would go unjudged" in err
    rc, _, err = cli(capsys, "compare", GOOD, planned, "--subset")
    assert rc == 2 and "NEW run did not complete" in err
    rc, out, err = cli(capsys, "report", planned, "--no-figures", "--out", planned.parent / "report")
    assert rc == 0 and "458 of its 917 planned rows" in out


def test_a_partial_run_still_holds_each_row_once_and_only_planned_ones(planned):
    edit_meta(planned, lambda m: m.update(status="running"))
    _doubled(planned)
    assert "1 row(s) written twice or more" in refused(planned)


def test_a_skipped_step_is_planned_and_excused_but_writes_no_row(planned):
    skip = {"suite": "kernel", "step": "bulk", "reason": "the GPU cannot run bulk copies", "host": "vm"}
    synth.with_planned_rows(planned, skipped=[skip])
    assert load_run(planned / CSV_NAME).meta.skipped[0].step == "bulk"
    text = lines(planned)
    row = text[ce_256m(text)].replace(CE_256M, ",kernel,sm_read,push,0,1,0,1,", 1).replace(",268435456,", ",4096,")
    write_lines(planned, text + [row])
    edit_meta(planned, lambda m: m.update(rows=m["rows"] + 1))
    assert "1 row(s) not planned (kernel/sm_read push rank 0->1 (GPU 0->1) 4K), 1 of a step recorded as " \
           "skipped" in refused(planned)


def test_a_row_of_a_method_its_suite_never_writes_is_refused_in_any_schema(tmp_path):
    """A suite or method changed in a run older than the planned rows: no suite writes kernel/ce."""
    run = copy_of(tmp_path)
    text = lines(run)
    text[ce_256m(text)] = text[ce_256m(text)].replace(",copy,ce,", ",kernel,ce,", 1)
    write_lines(run, text)
    assert "1 row(s) of a method no suite writes under that name (kernel/ce push rank 0->1 (GPU 0->1) 256M)" in \
        refused(run)


def test_rows_a_step_may_leave_out_are_all_there_or_none(planned):
    """A pair that cannot share memory a way writes none of that step's rows (RowShape.unless): said, not an error;
    part of them is rows lost."""
    def optional(m):
        for p in m["planned_rows"]:
            if p["suite"] == "handles" and p["rows"][0]["method"].startswith("pool_"):
                p["rows"][0]["unless"] = "a GPU of the pair cannot share memory this way (pool)"

    edit_meta(planned, optional)
    text = lines(planned)
    pool = [i for i, ln in enumerate(text) if ",handles,pool_export_fd,op,0,1," in ln]
    write_lines(planned, [ln for i, ln in enumerate(text) if i not in pool])
    edit_meta(planned, lambda m: m.update(rows=m["rows"] - len(pool)))
    run = load_run(planned / CSV_NAME)
    assert any("wrote no rows for 1 of its pairs (node-local ranks 0->1), as the step may where a GPU of the pair "
               "cannot share memory this way (pool)" in n for n in run.notes), run.notes
    write_lines(planned, [ln for i, ln in enumerate(text) if i != pool[0]])
    edit_meta(planned, lambda m: m.update(rows=m["rows"] + len(pool) - 1))
    assert "1 planned row(s) missing (handles/pool_export_fd op rank 0->1" in refused(planned)
