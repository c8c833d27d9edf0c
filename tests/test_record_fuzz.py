"""The record's side of the fuzz test (issue 37's target): every field of meta.json, one at a time, removed, its
type swapped or set out of range, and results.csv's last line cut at every field boundary and more, over recorded
runs that between them hold every key path of every run under results/ and tests/data (the subset is checked to
cover them; IPCBENCH_FUZZ_FULL=1 fuzzes every run). For every case `record.run.load_run` either loads a Run or
raises the one MetaError naming the file and the field (or a field it belongs to), never another exception; and
where it loads after a change no recorded run holds (a type never recorded at that key, a negative count, an
infinite or too large number, an unknown schema version), the typed meta reads exactly as before: the field is one
the record carries as recorded, never one a reader reads. A sample of the damaged copies goes end to end through
check --from and report. The default run damages each field twice (removed, and one other way drawn with a fixed
seed: 1,031 of the 4,090 cases); `python -m pytest -m slow` every way.

The types each key holds in the recorded runs are the ground truth (computed here, not taken from the schema),
with the forms a writer writes that no committed run happens to hold (WRITER_FORMS).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator

import pytest

from ipcbench.record.meta import MetaError
from ipcbench.record.run import load_run
from ipcbench.results import META_NAME

ROOT = Path(__file__).resolve().parents[1]
RECORDED = sorted(p.parent for d in ("results", "tests/data") for p in (ROOT / d).rglob(META_NAME)
                  if (p.parent / "results.csv").is_file())
# one run of each kind: --quick of 8 ranks on 4 GPUs (schema 4: permutation rounds, each step's rounds, the
# concurrency guard's checks, skipped steps), a check with evidence (clock events), a selftest on one GPU, --quick of
# 4 ranks on 2 GPUs (rank pairs), a full run, an old run (no schema_version, evidence, plan), MPS on one GPU, and a
# check of schema 5 on one GPU (the rows it planned)
SUBSET = ["results/h200x4-np8-quick", "results/h200x2-check-1", "tests/data/results-1126/h100x1-selftest-1",
          "tests/data/results-1126/h200x2-np4-quick", "tests/data/results-1126/h100x1-all-1",
          "tests/data/h200x2/20261123-090753-vm", "tests/data/onegpu/h100-mps", "results/h200x1-check-1",
          "tests/data/h200x1-1129/check-1"]
RUNS = RECORDED if os.environ.get("IPCBENCH_FUZZ_FULL") else [ROOT / r for r in SUBSET]
# objects whose keys are names (hosts, GPU indices, ranks, suites, libraries, counters), not fields
MAPS = ("gpus", "topology", "pair_mode.rounds", "mps", "mps.*.gpus", "pair_mode.per_host", "versions", "suite_wall_s",
        "time_breakdown_s", "time_breakdown_s.*", "evidence.snapshots[].gpus[].links.value[].errors.value",
        "evidence.snapshots[].gpus[].clock_event_ns.value")
# what a writer writes that no committed run holds: null where a fact is unknown (a run still running, a GPU whose
# NVML gives no memory clock, a link of unknown kind, no time limit, a process whose memory NVML does not say, an
# evidence item read without a value), and a
# command an older check wrote as a string (docs/results.md)
WRITER_FORMS = {"end": {"null"}, "command": {"str"}, "gpus.*[].mem_bw_gbps": {"null"},
                "evidence.snapshots[].gpus[].processes.value[].used_bytes": {"null"},
                "options.sampling.max_time_s": {"null"},
                **{f"topology.*.links[].{k}": {"null"} for k in (
                    "nvlink_count", "nvlink_version", "pcie_gen", "pcie_width", "peak_gbps", "per_link_gbps",
                    "ceiling_gbps", "per_link_ceiling_gbps")}}
SWAPS = {"str": "x", "int": 7, "float": 2.5, "list": [], "dict": {}, "null": None, "bool": True}


def kind(v: Any) -> str:
    return ("null" if v is None else "bool" if isinstance(v, bool) else "int" if isinstance(v, int) else
            "float" if isinstance(v, float) else "str" if isinstance(v, str) else
            "list" if isinstance(v, list) else "dict")


def walk(v: Any, path: tuple = (), shape: str = "") -> Iterator[tuple[tuple, str, Any]]:
    """(concrete path, shape, value) of every node: a list's first and last element, a map's every key."""
    yield path, shape, v
    if isinstance(v, dict):
        for k, x in v.items():
            step = "*" if shape in MAPS else k
            yield from walk(x, path + (k,), f"{shape}.{step}" if shape else step)
    elif isinstance(v, list):
        for i in sorted({0, len(v) - 1}) if v else []:
            yield from walk(v[i], path + (i,), shape + "[]")


def dotted(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else f".{p}" if out else str(p)
    return out


def ground_truth() -> tuple[dict[str, set[str]], set[str]]:
    """({shape: the kinds it holds}, the shapes whose every value is a number >= 0) over every recorded run, an
    int standing for a float too (JSON numbers)."""
    seen: dict[str, set[str]] = defaultdict(set)
    negative: set[str] = set()
    for run in RECORDED:
        for _, shape, v in walk(json.loads((run / META_NAME).read_text())):
            seen[shape].add(kind(v))
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                negative.add(shape)
    for shape, kinds in seen.items():
        kinds.update({"int"} if "float" in kinds else set())
    for shape, extra in WRITER_FORMS.items():
        seen[shape] |= extra
    for shape in seen:  # an evidence item read without a value: Item(), never ok (evidence/model.py)
        seen[shape] |= {"null"} if shape.startswith("evidence.") and shape.endswith(".value") else set()
    return seen, set(seen) - negative


TRUTH, NONNEGATIVE = ground_truth()


def first_holder() -> dict[str, Path]:
    """{shape: the first fuzzed run that holds it}: a shape is fuzzed in that run, save those whose meaning depends
    on the run's layout (EVERY_RUN), fuzzed in each."""
    out: dict[str, Path] = {}
    for run in RUNS:
        for _, shape, _ in walk(json.loads((run / META_NAME).read_text())):
            out.setdefault(shape, run)
    return out


EVERY_RUN = ("hosts", "ranks", "gpus", "ranks_per_gpu", "pair_mode", "schema_version")  # counted, paired, versioned
HOLDER = first_holder()


def mutations(meta: dict, run: Path) -> Iterator[tuple[str, tuple, str, Any, bool]]:
    """(name, path, shape, new value or REMOVE, whether no recorded run holds such a value there), each shape once."""
    done: set[str] = set()
    for path, shape, v in walk(meta):
        if not path or shape in done or (HOLDER[shape] != run and not shape.startswith(EVERY_RUN)):
            continue
        done.add(shape)
        if isinstance(path[-1], str):
            yield "removed", path, shape, REMOVE, False
        for name, new in SWAPS.items():
            if name != kind(v) and not (name == "int" and kind(v) == "float"):
                yield f"a {name}", path, shape, new, name not in TRUTH[shape]
        if kind(v) in ("int", "float"):
            yield from _out_of_range(path, shape, v)


def sample_of(cases: list) -> list:
    """The meta.json cases the default run tries: of each shape, its removal and one other damage drawn with a fixed
    seed (the shape's name seeds it: the draw of one shape does not move with the others); every case is slow."""
    import random

    from conftest import SAMPLE_SEED

    out = []
    for shape in dict.fromkeys(c[2] for c in cases):
        mine = [c for c in cases if c[2] == shape]
        others = [c for c in mine if c[0] != "removed"]
        out += [c for c in mine if c[0] == "removed"] + random.Random(f"{SAMPLE_SEED}:{shape}").sample(others, 1)
    return out


def _out_of_range(path: tuple, shape: str, v: Any) -> Iterator[tuple[str, tuple, str, Any, bool]]:
    if shape in NONNEGATIVE:
        yield "negative", path, shape, -1 if isinstance(v, int) else -1.5, True
    yield ("too large for int64", path, shape, 2**64, True) if isinstance(v, int) else \
        ("infinite", path, shape, math.inf, True)
    if isinstance(v, float):
        yield "NaN", path, shape, math.nan, True
    if shape == "schema_version":
        yield "99", path, shape, 99, True


REMOVE = object()


def mutated(meta: dict, path: tuple, new: Any) -> str:
    """meta.json's text with the value at `path` replaced by `new` (or removed); `meta` itself left as it was."""
    node: Any = meta
    for step in path[:-1]:
        node = node[step]
    old = node[path[-1]]
    if new is REMOVE:
        node = {k: v for k, v in node.items() if k != path[-1]} if isinstance(node, dict) else node
        parent: Any = meta
        for step in path[:-2]:
            parent = parent[step]
        if len(path) == 1:
            return json.dumps(node)
        parent[path[-2]], kept = node, parent[path[-2]]
        try:
            return json.dumps(meta)
        finally:
            parent[path[-2]] = kept
    node[path[-1]] = new
    try:
        return json.dumps(meta)
    finally:
        node[path[-1]] = old


def related(field: str, path: str) -> bool:
    """The error names the mutated field, a field above it (an entry that lacks it) or below it, or a field it is
    counted against (hosts, ranks, GPUs per host, ranks per GPU, and the planned rows' pairs, which name ranks)."""
    def within(a: str, b: str) -> bool:
        return a == b or a.startswith(b + ".") or a.startswith(b + "[")

    counted = ("hosts", "ranks", "gpus", "ranks_per_gpu", "planned_rows")
    return within(path, field) or within(field, path) or (any(within(path, c) for c in counted)
                                                          and any(within(field, c) for c in counted))


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> dict[Path, Path]:
    """Each fuzzed run copied with its results.csv cut to its header and first rows, or whole where it records the
    rows it planned (the meta.json cases read the same rows; the CSV cases cut the last of them)."""
    out = {}
    for run in RUNS:
        dst = tmp_path_factory.mktemp("fuzz") / run.name
        dst.mkdir()
        lines = (run / "results.csv").read_text().splitlines(keepends=True)
        meta = json.loads((run / META_NAME).read_text())
        if "planned_rows" not in meta:  # a run of schema 5 keeps every row it planned (record/agreement.py)
            lines = lines[:4]
            if "rows" in meta:  # the rows kept: a complete run is held to its count
                meta["rows"] = 3
        (dst / "results.csv").write_text("".join(lines))
        (dst / META_NAME).write_text(json.dumps(meta))
        out[run] = dst
    return out


def test_the_subset_holds_every_key_of_every_recorded_run():
    fuzzed = {s for run in RUNS for _, s, _ in walk(json.loads((run / META_NAME).read_text()))}
    assert set(TRUTH) - set(WRITER_FORMS) <= fuzzed


def outcome(csv: Path):
    """load_run's Run, or its MetaError; any other exception fails the test where it happens."""
    try:
        return load_run(csv)
    except MetaError as e:
        return e


@pytest.fixture
def rows_read_once(monkeypatch):
    """The meta.json cases change meta.json only: the rows of results.csv, the same text in every case, are read
    (record/table.read_lines, three quarters of a case's time) once per file and text; each case gets a copy."""
    import copy

    from ipcbench.record import run as run_module

    real, seen = run_module.read_lines, {}

    def read_lines(csv_path, warnings=None):
        key = (str(csv_path), Path(csv_path).read_bytes())
        if key not in seen:
            cut: list[str] = []
            seen[key] = (real(csv_path, cut), cut)
        table, cut = seen[key]
        if warnings is not None:
            warnings += cut
        return copy.deepcopy(table)

    monkeypatch.setattr(run_module, "read_lines", read_lines)


@pytest.mark.parametrize("every", [pytest.param(False, id="sample"),
                                   pytest.param(True, id="every-case", marks=pytest.mark.slow)])
@pytest.mark.parametrize("run", RUNS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_meta_field_damaged_is_read_or_named(copies, run, every, rows_read_once):
    """Every field (every shape of the record) damaged every way: by default each field removed and damaged one
    other way (sample_of), every way with `-m slow`."""
    work = copies[run]
    meta = json.loads((work / META_NAME).read_text())
    before = load_run(work / "results.csv").meta
    cases = 0
    every_case = list(mutations(meta, run))
    for name, path, shape, new, unrecorded in every_case if every else sample_of(every_case):
        (work / META_NAME).write_text(mutated(meta, path, new))
        got = outcome(work / "results.csv")
        where = f"{dotted(path)} {name}"
        if isinstance(got, MetaError):
            assert got.path == str(work / META_NAME) and got.field in str(got), where
            assert related(got.field, dotted(path)), (where, str(got))
        elif unrecorded:
            assert got.meta == before, f"{where}: read as a changed record instead of an error"
        cases += 1
    (work / META_NAME).write_text(json.dumps(meta))
    assert cases > 50


def cuts(line: str) -> list[int]:
    """Where to cut the last line: at every field boundary (before and after each comma), right before its
    newline, and at evenly spaced bytes between."""
    commas = [i for i, c in enumerate(line) if c == ","]
    spaced = range(1, len(line) - 1, max(1, len(line) // 12))
    return sorted({*commas, *(i + 1 for i in commas), len(line) - 1, *spaced} - {0})


@pytest.mark.parametrize("run", RUNS[:3], ids=lambda p: str(p.relative_to(ROOT)))
def test_a_last_line_cut_anywhere_is_an_incomplete_run_and_nothing_else_is_lost(copies, run):
    work = copies[run]
    csv = work / "results.csv"
    whole = csv.read_text()
    full = load_run(csv).frame
    head, last = whole[: whole.rindex("\n", 0, len(whole) - 1) + 1], whole[whole.rindex("\n", 0, len(whole) - 1) + 1:]
    for at in cuts(last):
        csv.write_text(head + last[:at])
        got = load_run(csv)
        assert "last line was cut short" in got.incomplete, at
        assert got.frame.drop(columns="invalid").equals(full.iloc[:-1].drop(columns="invalid")), at
    csv.write_text(whole)


# (the field damaged, its new value, the field the error names)
E2E_SAMPLE = [("ranks[1].host", "x-other-host", "hosts"), ("gpus", [], "gpus"),
              ("options.sampling.noise", "0.5", "options.sampling.noise"),
              ("evidence.snapshots[1].gpus[0].pcie_gen.value", -1, "evidence.snapshots[1].gpus[0].pcie_gen.value"),
              ("topology", {"vm": 3}, "topology.vm"), ("suite_wall_s", None, "suite_wall_s")]


@pytest.mark.parametrize("field,value,named", E2E_SAMPLE, ids=[f for f, _, _ in E2E_SAMPLE])
def test_damaged_copies_end_to_end(tmp_path, capsys, field, value, named):
    """check --from exits 2 naming the file and the field; report reports the good run beside it and exits 1."""
    from ipcbench.cli import main

    from test_record_strict import BASE, _steps

    run = tmp_path / "runs" / "bad"
    shutil.copytree(BASE, run)
    shutil.copytree(BASE, tmp_path / "runs" / "good")
    meta = json.loads((run / META_NAME).read_text())
    (run / META_NAME).write_text(mutated(meta, tuple(_steps(field)), value))
    rc = main(["check", "--from", str(run)])
    out, err = capsys.readouterr()
    assert rc == 2 and "Traceback" not in out + err and f"{run / META_NAME}: field {named}:" in err, err
    rc = main(["report", str(tmp_path / "runs"), "--no-figures", "--out", str(tmp_path / "report")])
    out, err = capsys.readouterr()
    assert rc == 1 and "Traceback" not in out + err and f"{run / META_NAME}: field {named}:" in err, err
    assert "## Run good" in (tmp_path / "report" / "report.md").read_text()
