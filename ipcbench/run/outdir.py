"""Where a run's results go: one run per directory, decided by world rank 0 and agreed by every rank.

A run goes only into a new or an empty directory, so a user's results are never appended to or overwritten
and nothing of theirs is mixed with a run: an explicit --out that holds anything is refused (a run's
results.csv, the meta.json of a run that never got to its results, the runs of a results/ tree, or files of
the user's own); a default run id (time stamp or Slurm job id + host) gets a -2, -3, ... suffix past used
directories. Nothing is created here: the runner creates the directory only once the run has passed its setup,
so a failed start leaves nothing behind. A dry run checks its --out here too (run/runner.start).
"""

from __future__ import annotations

import os
from pathlib import Path

from ipcbench.results import CSV_NAME, META_NAME


def out_problem(path: Path) -> str | None:
    """Why an existing --out cannot take a run (None: it can). Most telling reason first."""
    if not path.is_dir():
        return "exists and is not a directory"
    if (path / CSV_NAME).exists():
        return (f"already holds a run ({CSV_NAME}); ipcbench never appends to or overwrites results: "
                f"choose a new directory")
    if (path / META_NAME).exists():
        return (f"holds {META_NAME} of a run that has no {CSV_NAME} (it failed, or is running): "
                f"choose a new directory")
    runs = sorted(p.parent.name for p in path.glob(f"*/{CSV_NAME}"))
    if runs:
        return (f"holds runs ({runs[0]}{', …' if len(runs) > 1 else ''}): it is where runs go, not a run: "
                f"name a new directory in it, e.g. {path / 'NAME'}")
    entries = sorted(p.name for p in path.iterdir())
    if entries:
        return (f"is not empty (holds {entries[0]}{', …' if len(entries) > 1 else ''}): a run goes only into a new "
                f"or empty directory")
    return None


def choose_run_dir(out: str | None, default_id: str, root: str = "results") -> tuple[Path | None, str | None]:
    """(run directory, None) or (None, a one-line reason). Checks only; creates nothing."""
    if out:
        path = Path(out)
        problem = out_problem(path) if path.exists() else None
        if problem is None and path.resolve() == Path(root).resolve():  # empty, or not there yet
            problem = f"is where runs go ({root}/<run-id>), not a run: name a new directory in it, e.g. {path / 'NAME'}"
        if problem:
            return None, f"--out {out}: {problem}"
    else:
        base = Path(root) / default_id
        path, k = base, 1
        while path.exists() and out_problem(path):
            k += 1
            path = base.with_name(f"{base.name}-{k}")
    probe = path.resolve()
    while not probe.exists():
        probe = probe.parent
    where = f"--out {out}" if out else f"results directory {path}"
    if not probe.is_dir():
        return None, f"{where}: {probe} is a file, not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return None, f"{where}: {probe} is not writable"
    return path, None
