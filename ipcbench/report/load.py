"""Finding and loading the runs of `ipcbench report`: every results.csv under the paths, as DataFrames.

A malformed results.csv or meta.json skips that run (its error, naming file:line, is kept for the warning
and the report's "Skipped inputs"); the other runs are still loaded. A fleet run whose job died before the
final gather gets back the other nodes' rows from <run>/nodes/<host>.csv (run/collect.py writes them; see
docs/architecture.md). No MPI or CUDA; pandas only inside the functions that need it.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ipcbench.results import CSV_NAME, META_NAME
from ipcbench.results_load import ResultsError, find_runs, load_frame, read_meta_optional


@dataclass
class Run:
    """One loaded run; `label` is unique within a report, `notes` are said as warnings and in the report."""

    label: str
    dir: Path
    csv: Path
    meta: dict | None
    frame: object  # pandas.DataFrame
    notes: list[str] = field(default_factory=list)


def _warn(msg: str) -> None:
    print(f"ipcbench report: warning: {msg}", file=sys.stderr)


def _csv_files(paths) -> list[Path]:
    files = []
    for p in map(Path, paths):
        if p.is_file():
            files.append(p.resolve())
        else:
            files += [d / CSV_NAME for d in find_runs([p])]
    return list(dict.fromkeys(files))


def load_runs(paths) -> tuple[list[Run], list[str]]:
    """Every run under the paths; malformed ones are left out and their errors returned."""
    runs, skipped, labels = [], [], Counter()
    for csv_path in _csv_files(paths):
        run_dir = csv_path.parent
        cut: list[str] = []
        try:
            frame = load_frame(csv_path, cut)
            meta = read_meta_optional(run_dir) if csv_path.name == CSV_NAME else None
        except ResultsError as e:
            skipped.append(str(e))
            continue
        if frame.empty:
            skipped.append(f"{csv_path}: no rows (only a header)")
            continue
        label = run_dir.name if csv_path.name == CSV_NAME else csv_path.stem
        labels[label] += 1
        if labels[label] > 1:
            label = f"{label}-{labels[label]}"
        notes = [] if meta is not None or csv_path.name != CSV_NAME else [f"no {META_NAME} beside {csv_path}"]
        notes += cut
        if csv_path.name == CSV_NAME:
            frame, recovered = _recover_node_parts(run_dir, frame, skipped)
            notes += recovered
            if meta is not None and meta.get("status") not in (None, "complete"):
                notes.append(f"the run did not complete (meta.json status: {meta.get('status')}): "
                             f"these are the rows measured before it stopped")
        runs.append(Run(label, run_dir, csv_path, meta, frame, notes))
    return runs, skipped


def _recover_node_parts(run_dir: Path, frame, skipped: list[str]):
    """Fleet runs: add rows from <run>/nodes/<host>.csv for hosts that never reached results.csv.

    Other nodes' leaders write their rows there as they measure and hand them to rank 0 only at the end,
    so after a job that died those files are where the other nodes' measurements are.
    """
    import pandas as pd

    notes = []
    parts = sorted((run_dir / "nodes").glob("*.csv")) if (run_dir / "nodes").is_dir() else []
    have = set(frame["host"].astype(str)) if len(frame) else set()
    extra = []
    for part in parts:
        cut: list[str] = []
        try:
            f = load_frame(part, cut)
        except ResultsError as e:
            skipped.append(str(e))
            continue
        hosts = set(f["host"].astype(str)) - have
        if hosts and len(f):
            extra.append(f[f["host"].astype(str).isin(hosts)])
            notes += cut
            notes.append(f"rows of {', '.join(sorted(hosts))} recovered from {part.relative_to(run_dir)}: "
                         f"the job ended before rank 0 gathered them")
    if extra:
        frame = pd.concat([frame, *extra], ignore_index=True)
    return frame, notes


def warn_about(runs: list[Run], skipped: list[str]) -> None:
    """One warning on stderr per skipped input and per note of a loaded run (recovered rows, incomplete run)."""
    for s in skipped:
        _warn(f"{s} (run skipped)")
    for r in runs:
        for note in r.notes:
            _warn(note)
