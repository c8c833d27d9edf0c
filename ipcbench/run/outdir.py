"""Where a run's results go: one run per directory, decided by world rank 0 and agreed by every rank.

A directory that already holds a results.csv is never written into (a user's results are never appended
to or overwritten): an explicit --out is refused, a default run id (time stamp or Slurm job id + host)
gets a -2, -3, ... suffix. Nothing is created here: the runner creates the directory only once the run
has passed its setup, so a failed start leaves nothing behind.
"""

from __future__ import annotations

import os
from pathlib import Path

from ipcbench.results import CSV_NAME


def choose_run_dir(out: str | None, default_id: str, root: str = "results") -> tuple[Path | None, str | None]:
    """(run directory, None) or (None, a one-line reason). Checks only; creates nothing."""
    if out:
        path = Path(out)
        if path.exists() and not path.is_dir():
            return None, f"--out {out}: exists and is not a directory"
        if (path / CSV_NAME).exists():
            return None, (f"--out {out}: already holds a run ({CSV_NAME}); ipcbench never appends to or "
                          f"overwrites results: choose a new directory")
    else:
        base = Path(root) / default_id
        path, k = base, 1
        while (path / CSV_NAME).exists() or (path.exists() and any(path.iterdir())):
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
