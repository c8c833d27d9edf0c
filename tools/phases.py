"""`python tools/phases.py RUN_DIR...`: where each recorded run's time went (meta.json's time_breakdown_s, as
core/phases.table lays it out), one table per run.

A tool of the project beside tools/costfit.py, not of the installed package: it reads a run's meta.json through
the record (record/meta.read_meta, every field checked), which core/ may not import (tests/test_layering.py), so
the reading lives here and the table where the phases are timed.
"""

from __future__ import annotations

import signal
import sys

from ipcbench.core.phases import table
from ipcbench.errors import ResultsError
from ipcbench.record.meta import read_meta


def main(argv: list[str]) -> int:
    """Each run's breakdown; exit 2 where a run has no readable meta.json (the others still printed)."""
    status = 0
    for d in argv:
        try:
            meta = read_meta(d)
        except ResultsError as e:
            print(f"ipcbench: {d}: no readable meta.json ({e})", file=sys.stderr)
            status = 2
            continue
        if not meta.found:
            print(f"ipcbench: {d}: no meta.json", file=sys.stderr)
            status = 2
            continue
        print(f"== {d}: {meta.rows} rows, wall_s {meta.wall_s} (from the end of the run's start)")
        if not meta.time_breakdown_s:
            print("   no time breakdown recorded (a run of an older version)")
            continue
        print(table(meta.time_breakdown_s, meta.wall_s, top=40))
    return status


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... | head` ends the listing quietly
    raise SystemExit(main(sys.argv[1:]))
