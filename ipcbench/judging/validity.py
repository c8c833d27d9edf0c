"""Values the report never quotes: a rate or time that is NaN, infinite, negative, or above a physical ceiling
of its run's meta.json (ceilings.py). Each is named once with its file:line and left out of every number the
report shows (its value becomes NaN), so a corrupt row cannot make a best path, a weakest pair, a % of peak or
a speedup.

The reader names them (record/run.load_run through record/validate.py: the frame's `invalid` column, "" for a
good row, the values already NaN); a frame built without that column goes through the same validation here
(docs/report.md, "Invalid values").
"""

from __future__ import annotations

import csv

from ipcbench.record.run import Run
from ipcbench.record.table import Frame

RATE, TIME = "bw_gbps_median", "time_us_median"


def _csv_lines(run: Run) -> list[int]:
    """The physical line each record of the run's CSV starts on (a note may span lines); [] when unreadable."""
    try:
        with open(run.csv, newline="", encoding="utf-8", errors="replace") as fh:
            reader = csv.reader(fh)
            next(reader, None)
            starts, prev = [], reader.line_num
            for record in reader:
                if record:
                    starts.append(prev + 1)
                prev = reader.line_num
            return starts
    except OSError:
        return []


def _where(run: Run, lines: list[int], i) -> str:
    pos = run.frame.index.get_loc(i)
    if isinstance(pos, int) and pos < len(lines):
        return f"{run.csv.name}:{lines[pos]}"
    return f"{run.csv.name} (a row recovered from nodes/)"


def invalid(run: Run) -> dict:
    """{frame index: "results.csv:LINE: what is wrong"} of the run's invalid values, one message per row: the
    record's words (record/validate.py names them when a run is read: the frame's `invalid` column); a frame
    built by hand, without that column, is validated here by the same function."""
    f = run.frame
    if "invalid" not in f.columns:
        from ipcbench.record.validate import validate

        f = f.copy()
        lines = _csv_lines(run)
        lines += [0] * (len(f) - len(lines))
        validate(f, run.meta, run.csv.name, lines)
    named = f["invalid"].fillna("").astype(str)
    return {i: m for i, m in named.items() if m}


def valid_frame(run: Run) -> Frame:
    """The run's rows with every invalid value NaN and the `invalid` column ("" for a good row): what every
    number of the report is made of."""
    bad = invalid(run)
    f = run.frame.copy()
    f["invalid"] = ""
    if bad:
        idx = list(bad)
        f.loc[idx, "invalid"] = [bad[i] for i in idx]
        f.loc[idx, [RATE, TIME]] = float("nan")  # a row with a wrong rate or time has neither worth quoting
    return f
