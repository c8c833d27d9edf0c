"""Physical ceilings, as the report, compare and check ask for them: the rows of a run above what the hardware
described in its meta.json can move. The logic is the record's (record/validate.py), which applies it once
when a run is read: a frame read by record/run.load_run carries what each row was above (`above_*` columns; its
values are blanked), and impossible_rows gives those rows back as recorded; a frame of values (tests, tools) is
checked here and now.
"""

from __future__ import annotations

from ipcbench.record.meta import Meta
from ipcbench.record.table import Frame
from ipcbench.record.validate import COLUMNS, TOLERANCE, ceiling_hits

__all__ = ["COLUMNS", "TOLERANCE", "impossible_rows"]


def impossible_rows(frame: Frame, meta: Meta, tolerance: float = TOLERANCE) -> Frame:
    """The rows of one run above a physical ceiling: the offending rows (their index and columns kept, the
    bandwidth as recorded) plus `check` (link | memory | alltoall, several joined by '+'), `ceiling_gbps` (the
    lowest), `value_gbps` and a one-line `reason`. Empty (same columns) when nothing is impossible or meta.json
    has none of the numbers."""
    import pandas as pd

    if "above_check" not in frame.columns:
        return ceiling_hits(frame, meta, tolerance)
    hit = frame["above_check"].astype(str) != ""
    out = frame[hit].copy()
    if out.empty:
        return frame.iloc[0:0].assign(**{c: pd.Series(dtype=object) for c in COLUMNS})
    out["check"] = out["above_check"]
    out["ceiling_gbps"] = out["above_ceiling_gbps"].astype(float)
    out["value_gbps"] = out["above_value_gbps"].astype(float)
    out["bw_gbps_median"] = out["above_bw_gbps"].astype(float)  # as recorded (the validated frame holds NaN)
    out["reason"] = out["invalid"]
    return out
