"""The rows' side of the fuzz (issue 44's target): results.csv and meta.json damaged one way at a time (a row deleted,
doubled or changed in one of its key's columns, the rows reordered, the CSV cut at a line boundary, a field of
meta.json to depth 2 removed, its type swapped or its number moved), on a run of schema 4 (rows count and ranks, no
planned rows) and the same run made one of schema 5 (synth.with_planned_rows). For every case:

- reading the run (record/run.load_run, what report, compare and check --from all read through) refuses it with one
  ResultsError, or reads it whole (every row of the run once), or reads it as the partial run it says it is (check
  cannot judge it, compare takes it for no whole BASE); a run of schema 4 may read a row whose key was changed as
  measured, which it says (Run.unchecked), and never more or fewer rows than it has;
- any other exception is a traceback a user would see: the case fails where it happens;
- end to end (the first cases that read): `check --from` passes only a run read whole with the undamaged run's
  verdict, `compare` passes only a run read whole (as NEW and as BASE), `report` never tracebacks (the exhaustive
  run; what refuses a run is the reader all three read through).

By default a sample with a fixed seed (a few seconds); every case of the 22-row and the 917-row runs, each end to end,
with `python -m pytest -m slow tests/test_rows_fuzz.py` (the README's test section: before a release).
"""

from __future__ import annotations

import csv
import io
import json
import random
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Callable, Iterator

import pytest

import synth
from ipcbench.cli import main
from ipcbench.errors import ResultsError
from ipcbench.record.run import load_run
from ipcbench.results import CSV_NAME, META_NAME, RUN_KEY

ROOT = Path(__file__).resolve().parents[1]
SMALL, LARGE = ROOT / "results" / "h200x2-check-1", ROOT / "results" / "h200x2-all-1"  # 22 and 917 rows
SEED = 44
PER_KIND = 2  # sampled cases of each kind, per run and schema (meta.json's fields: three times as many)
SWAPS = {"str": "x", "int": 7, "float": 2.5, "list": [], "dict": {}, "null": None, "bool": True}

Case = tuple[str, str, Callable]  # (kind, what, damage(work dir))


def kind_of(v) -> str:
    return ("null" if v is None else "bool" if isinstance(v, bool) else "int" if isinstance(v, int) else
            "float" if isinstance(v, float) else "str" if isinstance(v, str) else
            "list" if isinstance(v, list) else "dict")


# ---- the damage ----------------------------------------------------------------------------------------------------

def _rows(work: Path) -> tuple[str, list[str]]:
    header, *rows = (work / CSV_NAME).read_text().splitlines(keepends=True)
    return header, rows


def _write(work: Path, header: str, rows: list[str]) -> None:
    (work / CSV_NAME).write_text(header + "".join(rows))


def _with_rows(change: Callable[[list[str]], list[str]]) -> Callable:
    def damage(work: Path) -> None:
        header, rows = _rows(work)
        _write(work, header, change(rows))
    return damage


def _changed(line: str, column: int, value: str) -> str:
    fields = next(csv.reader(io.StringIO(line)))
    fields[column] = value
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(fields)
    return out.getvalue()


def row_cases(run: Path) -> Iterator[Case]:
    header, rows = _rows(run)
    columns = next(csv.reader(io.StringIO(header)))
    values = {c: sorted({next(csv.reader(io.StringIO(r)))[columns.index(c)] for r in rows}) for c in RUN_KEY}
    for i in range(len(rows)):
        yield "deleted", f"row {i} deleted", _with_rows(lambda rs, i=i: rs[:i] + rs[i + 1:])
        yield "doubled", f"row {i} doubled", _with_rows(lambda rs, i=i: rs[:i + 1] + rs[i:])
        yield "cut", f"cut after {i} rows", _with_rows(lambda rs, i=i: rs[:i])
        for c in RUN_KEY:
            field = next(csv.reader(io.StringIO(rows[i])))[columns.index(c)]
            other = [v for v in values[c] if v != field]
            new = other[i % len(other)] if other else (str(int(field) + 1) if field.lstrip("-").isdigit() else
                                                         field + "x")
            yield "key changed", f"row {i} {c} {field} -> {new}", _with_rows(
                lambda rs, i=i, c=columns.index(c), new=new: rs[:i] + [_changed(rs[i], c, new)] + rs[i + 1:])
    for seed in range(3):
        yield "reordered", f"rows shuffled ({seed})", _with_rows(lambda rs, seed=seed: random.Random(seed).sample(
            rs, len(rs)))


def _with_meta(path: tuple, new) -> Callable:
    def damage(work: Path) -> None:
        meta = json.loads((work / META_NAME).read_text())
        node = meta
        for step in path[:-1]:
            node = node[step]
        if new is REMOVE:
            del node[path[-1]]
        else:
            node[path[-1]] = new
        (work / META_NAME).write_text(json.dumps(meta))
    return damage


REMOVE = object()


def _values(v) -> Iterator[tuple[str, object]]:
    for name, swap in SWAPS.items():
        if name != kind_of(v):
            yield f"a {name}", swap
    if kind_of(v) in ("int", "float"):
        yield from (("one more", v + 1), ("one less", v - 1), ("zero", 0), ("5", 5))


def meta_cases(run: Path) -> Iterator[Case]:
    """Every field to depth 2 (a list's first and last entries) removed and given other values."""
    meta = json.loads((run / META_NAME).read_text())
    for key, v in meta.items():
        yield "meta", f"{key} removed", _with_meta((key,), REMOVE)
        for name, new in _values(v):
            yield "meta", f"{key} {name}", _with_meta((key,), new)
        children = (v.items() if isinstance(v, dict) else
                    [(i, v[i]) for i in sorted({0, len(v) - 1})] if isinstance(v, list) and v else [])
        for sub, x in children:
            yield "meta", f"{key}[{sub!r}] removed", _with_meta((key, sub), REMOVE)
            for name, new in _values(x):
                yield "meta", f"{key}[{sub!r}] {name}", _with_meta((key, sub), new)


def cases_of(run: Path, sample: bool) -> list[Case]:
    every = list(row_cases(run)) + list(meta_cases(run))
    if not sample:
        return every
    rng = random.Random(f"{SEED}-{run.name}")
    by: dict[str, list[Case]] = {}
    for c in every:
        by.setdefault(c[0], []).append(c)
    return [c for kind in sorted(by) for c in rng.sample(by[kind], min(PER_KIND * (3 if kind == "meta" else 1),
                                                                         len(by[kind])))]


# ---- what a reader may make of it ----------------------------------------------------------------------------------

def keys(run) -> Counter:
    return Counter(zip(*(run.frame[c].tolist() for c in RUN_KEY)))


def whole(run, rows: Counter) -> bool:
    """The run read as the whole of itself: every row once, or (a run without planned rows, which says it cannot
    tell: Run.unchecked) as many rows, one of whose keys may have changed."""
    got = keys(run)
    return got == rows or bool(run.unchecked) and sum(got.values()) == sum(rows.values())


def read_wrongly(work: Path, rows: Counter) -> str | None:
    """Why the reader got the damaged run wrong (None: it refused it, or read what the run is)."""
    try:
        run = load_run(work / CSV_NAME)
    except ResultsError:
        return None
    if whole(run, rows) or run.incomplete:
        return None  # the whole run, or a partial one that says so (check and compare refuse it as a whole)
    return f"read {len(run.frame)} rows as the whole run of {sum(rows.values())}"


def cli(*argv) -> tuple[int, str]:
    import contextlib

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in argv])
    assert "Traceback" not in out.getvalue() + err.getvalue(), err.getvalue()
    return rc, out.getvalue()


def verdict(out: str) -> str:
    return "\n".join(re.findall(r"^(?:\d+ checks: .*|verdict: .*)$", out, flags=re.M))


def judged_wrongly(w: dict, rows: Counter, report: bool = True) -> str | None:
    """What check, compare and report made of the damaged run that they may not: check passes only the whole run with
    the undamaged run's verdict, compare only the whole run."""
    try:
        read = whole(load_run(w["work"] / CSV_NAME), rows)
    except ResultsError:
        read = False
    rc, out = cli("check", "--from", w["work"])
    if rc == 0 and not (read and verdict(out) == w["verdict"]):
        return f"check passed it: {verdict(out)}"
    for argv in (["compare", w["twin"], w["work"]], ["compare", w["work"], w["twin"]]):
        rc, out = cli(*argv)
        if rc == 0 and not read:
            return f"{argv[0]} passed part of the run as the whole"
    if report:
        cli("report", w["work"], "--no-figures", "--quiet", "--out", w["work"].parent / "report")
    return None


@pytest.fixture(scope="module")
def workdirs(tmp_path_factory) -> Callable[[Path, int], dict]:
    """Per run and schema, made once: the run (schema 5: with its planned rows), a copy to damage, a twin (the same
    rows, another start) for compare, and check's verdict of the undamaged run."""
    made: dict = {}

    def get(src: Path, schema: int) -> dict:
        if (src, schema) not in made:
            root = tmp_path_factory.mktemp(f"{src.name}-{schema}")
            run = root / "run"
            shutil.copytree(src, run, ignore=shutil.ignore_patterns("report"))
            if schema == 5:
                synth.with_planned_rows(run)
            twin = root / "twin"
            shutil.copytree(run, twin)
            meta = json.loads((twin / META_NAME).read_text())
            (twin / META_NAME).write_text(json.dumps({**meta, "start": meta["start"] + " (twin)"}))
            work = root / "work"
            shutil.copytree(run, work)
            made[src, schema] = dict(run=run, twin=twin, work=work, whole=keys(load_run(run / CSV_NAME)),
                                     verdict=verdict(cli("check", "--from", run)[1]))
        return made[src, schema]

    return get


def fuzz(w: dict, cases: list[Case], end_to_end: Callable[[int], bool], report: bool = True) -> list[str]:
    """What the reader, and for the cases `end_to_end` picks (by their number among those read) check, compare and
    report, got wrong of each case."""
    wrong, read = [], 0
    for kind, what, damage in cases:
        for name in (CSV_NAME, META_NAME):
            shutil.copy(w["run"] / name, w["work"] / name)
        damage(w["work"])
        why = read_wrongly(w["work"], w["whole"])
        if why is None and _reads(w["work"]):
            read += 1
            why = judged_wrongly(w, w["whole"], report) if end_to_end(read - 1) else None
        if why:
            wrong.append(f"{kind}: {what}: {why}")
    return wrong


def _reads(work: Path) -> bool:
    try:
        load_run(work / CSV_NAME)
        return True
    except ResultsError:
        return False


@pytest.mark.parametrize("schema", [4, 5])
def test_a_sample_of_damaged_runs_is_refused_or_read_for_what_it_is(workdirs, schema):
    w = workdirs(SMALL, schema)
    cases = cases_of(SMALL, sample=True)
    assert {k for k, _, _ in cases} == {"deleted", "doubled", "cut", "key changed", "reordered", "meta"}
    assert fuzz(w, cases, end_to_end=lambda n: n < 1, report=False) == []


def test_a_key_changed_in_a_run_of_schema_5_is_always_refused(workdirs):
    """Where schema 4 can only say what it cannot check, the planned rows catch every row whose key changed."""
    w = workdirs(SMALL, 5)
    changed = [c for c in row_cases(SMALL) if c[0] == "key changed"]
    for _, what, damage in random.Random(SEED).sample(changed, 12):
        for name in (CSV_NAME, META_NAME):
            shutil.copy(w["run"] / name, w["work"] / name)
        damage(w["work"])
        with pytest.raises(ResultsError):
            load_run(w["work"] / CSV_NAME)


@pytest.mark.slow
@pytest.mark.parametrize("schema", [4, 5])
@pytest.mark.parametrize("src", [SMALL, LARGE], ids=["22 rows", "917 rows"])
def test_every_damaged_run_is_refused_or_read_for_what_it_is(workdirs, src, schema):
    """Every case, each that reads end to end (the 917-row run: every 20th)."""
    w = workdirs(src, schema)
    every = 1 if src == SMALL else 20
    assert fuzz(w, cases_of(src, sample=False), end_to_end=lambda n: n % every == 0) == []
