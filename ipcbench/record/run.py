"""A recorded run, read back: its rows (record/table.py), its meta.json (record/meta.py), whether it is
complete, and which of its values cannot be true (record/validate.py: named file:line in `Run.invalid` and the
frame's `invalid` column, the values NaN). The one loader of `ipcbench report`, `ipcbench compare` and `ipcbench
check --from`; it imports nothing of the measuring side (tests/test_layering.py).

A run is incomplete when meta.json does not say it completed, when its last line was cut short, or when
rows of a fleet run's other nodes had to be recovered from <run>/nodes/<host>.csv (they write there as they
measure and hand their rows to rank 0 only at the end; run/collect.py). Its rows are held to its record
(record/agreement.py): rows that disagree with it (a row lost from a complete run, one doubled, one not planned, a
rows count or ranks that are not the rows') are a ResultsError naming them, as a malformed file is. Rows of runs
written before the row facts existed get them derived here, from the catalogue (catalogue/suites.row_facts)
and from meta.json (MPS per GPU, pair mode), never from a note.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ipcbench.catalogue.suites import row_facts
from ipcbench.errors import ResultsError, UsageError
from ipcbench.record.agreement import agree
from ipcbench.record.meta import Meta, read_meta
from ipcbench.record.table import Frame, read_lines
from ipcbench.record.validate import validate
from ipcbench.results import CSV_NAME, META_NAME, described


@dataclass
class Run:
    """One run: `label` names it (unique within a report), `notes` are said as warnings, `incomplete` says
    why the run did not complete ("" when it did), `lost` the node part files that could not be read."""

    label: str
    dir: Path
    csv: Path
    meta: Meta
    frame: Frame  # the columns of results.COLUMNS
    notes: list[str] = field(default_factory=list)
    incomplete: str = ""
    lost: list[str] = field(default_factory=list)
    # every value that cannot be true (above a physical ceiling, negative, NaN, infinite), file:line first;
    # the rows say it in frame["invalid"] and their values are NaN (record/validate.py)
    invalid: list[str] = field(default_factory=list)
    # what its record cannot check of its rows (a run older than the planned rows: record/agreement.unchecked)
    unchecked: str = ""

    @property
    def remarks(self) -> list[str]:
        """What a reader must be told about this run, the most important first: that it did not complete."""
        head = f"the run did not complete ({self.incomplete}): these are the rows measured before it stopped"
        return ([head] if self.incomplete else []) + self.notes

    @property
    def identity(self) -> str:
        """What makes two paths the same run: meta.json's run id and start time, else the file itself."""
        if self.meta.run_id and self.meta.start:
            return f"{self.meta.run_id}@{self.meta.start}"
        return str(self.csv.resolve())


def load_run(csv_path: str | os.PathLike, label: str | None = None) -> Run:
    """The run of one results.csv (or of any CSV of rows, without meta.json); ResultsError when unusable."""
    csv_path = Path(csv_path)
    run_dir = csv_path.parent
    whole = csv_path.name == CSV_NAME
    cut: list[str] = []
    table = read_lines(csv_path, cut)
    frame = table.frame
    meta = read_meta(run_dir) if whole else Meta()
    if frame.empty:
        raise ResultsError(f"{csv_path}: no rows (only a header)")
    derive_facts(frame, meta)
    validate(frame, meta, csv_path.name, table.lines, table.nan_text)
    notes = [f"no {META_NAME} beside {csv_path}"] if whole and not meta.found else []
    notes += cut
    why = ["its last line was cut short"] if cut else []
    lost: list[str] = []
    written = len(frame)  # results.csv's own rows, which meta.json's rows counts
    if whole:
        frame, recovered = _recover_node_parts(run_dir, frame, meta, lost)
        notes += recovered
        why += ["rows of other nodes recovered from nodes/"] if recovered else []
        if meta.status not in (None, "complete"):
            why.insert(0, f"meta.json status: {meta.status}")
    agreed = agree(frame, meta, csv_path, run_dir / META_NAME, bool(why), written)  # an error where they disagree
    why += [agreed.held] if agreed.held else []
    notes += agreed.notes
    incomplete = "; ".join(why)
    invalid = [m for m in frame["invalid"] if m]
    return Run(label or (run_dir.name if whole else csv_path.stem), run_dir, csv_path, meta, frame, notes, incomplete,
               lost, invalid, agreed.unchecked)


def find_runs(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Every directory under the given paths that holds a results.csv, sorted, without duplicates."""
    found: set[Path] = set()
    for p in map(Path, paths):
        if p.is_file() and p.name == CSV_NAME:
            found.add(p.parent.resolve())
        elif p.is_dir():
            found.update(f.parent.resolve() for f in p.rglob(CSV_NAME))
    return sorted(found)


def locate(path: str | os.PathLike) -> Path:
    """The results.csv of exactly one run: a run directory, a tree holding one run, or a CSV file."""
    p = Path(path)
    if p.is_file():
        return p
    if not p.is_dir():
        raise UsageError(f"{p}: no such file or directory")
    if (p / CSV_NAME).is_file():
        return p / CSV_NAME
    runs = find_runs([p])
    if len(runs) != 1:
        raise UsageError(f"{p}: no {CSV_NAME} in this directory or below" if not runs else
                         f"{p}: holds {len(runs)} runs; name one run directory")
    return runs[0] / CSV_NAME


def load_runs(paths: Iterable[str | os.PathLike]) -> tuple[list[Run], list[str]]:
    """Every run under the paths, with unique labels; those that cannot be read are left out and their
    errors returned."""
    files: list[Path] = []
    for p in map(Path, paths):
        files += [p.resolve()] if p.is_file() else [d / CSV_NAME for d in find_runs([p])]
    runs: list[Run] = []
    skipped: list[str] = []
    seen: dict[str, int] = {}
    for csv_path in dict.fromkeys(files):
        try:
            run = load_run(csv_path)
        except ResultsError as e:
            skipped.append(str(e))
            continue
        skipped += run.lost
        seen[run.label] = seen.get(run.label, 0) + 1
        if seen[run.label] > 1:
            run.label = f"{run.label}-{seen[run.label]}"
        runs.append(run)
    return runs, skipped


def _recover_node_parts(run_dir: Path, frame: Frame, meta: Meta, lost: list[str]) -> tuple[Frame, list[str]]:
    """Fleet runs: the rows of <run>/nodes/<host>.csv of hosts that never reached results.csv, their facts
    derived and values validated as results.csv's (the errors of part files that cannot be read go to `lost`)."""
    import pandas as pd

    notes, extra = [], []
    have = set(frame["host"])
    for part in sorted((run_dir / "nodes").glob("*.csv")):
        cut: list[str] = []
        try:
            table = read_lines(part, cut)
        except ResultsError as e:
            lost.append(str(e))
            continue
        rows = table.frame
        derive_facts(rows, meta)
        validate(rows, meta, part.relative_to(run_dir).as_posix(), table.lines, table.nan_text)
        hosts = set(rows["host"]) - have
        if hosts:
            extra.append(rows[rows["host"].isin(hosts)])
            notes += cut + [f"rows of {', '.join(sorted(hosts))} recovered from {part.relative_to(run_dir)}: the "
                            "job ended before rank 0 gathered them"]
    return (pd.concat([frame, *extra], ignore_index=True) if extra else frame), notes


def derive_facts(frame, meta: Meta) -> None:
    """Fill the row facts of rows written before them (schema 1): engine, access, mechanism, pattern and
    timing from what the suites declare for (suite, method); mps from meta.json's MPS record of the row's
    source GPU; round_pairs 1 where pairs were measured one at a time, the flows of one size for an
    all-to-all, unknown where meta.json says some steps ran in rounds (the note says which)."""
    import numpy as np
    import pandas as pd

    for c, empty in (("engine", ""), ("access", ""), ("mechanism", ""), ("pattern", ""), ("timing", ""),
                     ("mps", pd.NA), ("round_pairs", np.nan)):
        if c not in frame.columns:  # a frame made by hand (tests, tools)
            frame[c] = pd.array([empty] * len(frame), dtype="boolean") if c == "mps" else empty
    old = (frame["engine"] == "").to_numpy()
    if old.any():
        keys = ["suite", "method", "direction", "same_gpu"]
        combos = frame.loc[old, keys].drop_duplicates()
        facts = [described(row_facts(s, m), d, bool(g)) for s, m, d, g in combos.itertuples(index=False)]
        table = pd.concat([combos.reset_index(drop=True),
                           pd.DataFrame(facts, columns=["engine", "access", "mechanism", "pattern", "timing"])], axis=1)
        filled = frame.loc[old, keys].merge(table, on=keys, how="left")
        for c in ("engine", "access", "mechanism", "pattern", "timing"):
            frame.loc[old, c] = filled[c].to_numpy()
    no_mps = frame["mps"].isna().to_numpy()
    if no_mps.any() and meta.mps:
        known = np.array([meta.mps.get((h, int(g))) for h, g in zip(frame["host"], frame["src_gpu"])], dtype=object)
        frame["mps"] = pd.array(np.where(no_mps, known, frame["mps"].to_numpy(dtype=object)), dtype="boolean")
    no_round = frame["round_pairs"].isna().to_numpy()
    if no_round.any():
        flows = frame.groupby(["host", "suite", "method", "direction", "bytes"])["bytes"].transform("size")
        alone = 1.0 if meta.pair_mode.get("mode") != "concurrent" else np.nan
        derived = np.where(frame["pattern"].to_numpy() == "alltoall", flows.to_numpy(dtype=float), alone)
        frame["round_pairs"] = np.where(no_round, derived, frame["round_pairs"].to_numpy())
