"""Values the report never quotes: a rate or time that is NaN, infinite, negative, or above a physical ceiling
of its run's meta.json (ceilings.py). Each is named once with its file:line and left out of every number the
report shows (its value becomes NaN), so a corrupt row cannot make a best path, a weakest pair, a % of peak or
a speedup.

The reader names them itself where it can (record/run.load_run: the frame's `invalid` column, "" for a good
row, the values already NaN); for a frame without that column this guard applies the same rule, so the report
holds either way (docs/report.md, "Invalid values").
"""

from __future__ import annotations

import csv
import math

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


def _bad(value: float, needed: bool) -> str:
    """Why a value is invalid ("" when it is fine); `needed`: NaN is invalid too (a bandwidth row's rate)."""
    if math.isnan(value):
        return "is not a number" if needed else ""
    if math.isinf(value):
        return "is infinite"
    return "is negative" if value < 0 else ""


def invalid(run: Run) -> dict:
    """{frame index: "results.csv:LINE: what is wrong"} of the run's invalid values, one message per row."""
    import numpy as np

    f = run.frame
    if "invalid" in f.columns:
        named = f["invalid"].fillna("").astype(str)
        return {i: m for i, m in named.items() if m}
    from ipcbench.report.ceilings import impossible_rows

    out: dict = {}
    kinds = f["kind"].astype(str).to_numpy()
    for col, unit in ((RATE, "GB/s"), (TIME, "µs")):
        values = f[col].to_numpy(dtype=float)
        needed = kinds == "bandwidth" if col == RATE else kinds != "error"
        suspect = ~np.isfinite(values) | (values < 0)
        for pos in np.flatnonzero(suspect):
            why = _bad(float(values[pos]), bool(needed[pos]))
            if why and f.index[pos] not in out:
                out[f.index[pos]] = f"{col} {values[pos]:g} {unit} {why}" if not math.isnan(values[pos]) \
                    else f"{col} {why}"
    finite = f[~f.index.isin(list(out))]
    for i, r in impossible_rows(finite, run.meta).iterrows():
        out[i] = f"{RATE} {r['reason']}"
    lines = _csv_lines(run) if out else []
    return {i: f"{_where(run, lines, i)}: {m}" for i, m in sorted(out.items(), key=lambda kv: f.index.get_loc(kv[0]))}


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
