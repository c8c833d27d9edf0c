"""A row's verdict in a comparison of runs (compare's engine, judging/compare.py): one vocabulary, and the one place
where it is read as the node's Status (ipcbench/status.py) by check's baseline (judging/judge.py)."""

from __future__ import annotations

from enum import Enum

from ipcbench.status import Status


class RowVerdict(str, Enum):
    """What compare found of one row key; its value is the word the outputs print (the CSV's `verdict`)."""

    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    UNCHANGED = "unchanged"
    NOT_JUDGED = "not judged"  # decided before its value: an error-path row, above a ceiling, invalid, unverified...
    MISSING = "missing"  # in BASE, not in NEW
    NEW = "new"  # only in NEW

    # a member is its word: printed, hashed and compared as it (pandas groups, maps and writes the column so)
    __hash__ = str.__hash__

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def status(self) -> Status | None:
        """What the row says of the node as a baseline judges it: a regression fails, a row as good or better
        passes, a row the baseline has and the run lacks cannot be judged; a row not judged or only in the run
        says nothing (its thresholds judge it)."""
        return _STATUS[self]


_STATUS: dict[RowVerdict, Status | None] = {
    RowVerdict.REGRESSION: Status.FAIL,
    RowVerdict.IMPROVEMENT: Status.PASS,
    RowVerdict.UNCHANGED: Status.PASS,
    RowVerdict.MISSING: Status.UNJUDGED,
    RowVerdict.NOT_JUDGED: None,
    RowVerdict.NEW: None,
}

# the order the outputs count them in (compare's summary line)
ORDER = (RowVerdict.REGRESSION, RowVerdict.IMPROVEMENT, RowVerdict.UNCHANGED, RowVerdict.NOT_JUDGED,
         RowVerdict.MISSING, RowVerdict.NEW)
