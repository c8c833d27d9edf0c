"""The one verdict vocabulary: what check, selftest, compare and the report's headline say of a row, a check
or a whole run, and the exit code it means. Every judging place returns a Status; none translates another's
words (docs/architecture.md, "One verdict").

PASS: judged and within what was expected. FAIL: judged and not (exit 1). UNJUDGED: could not be judged
(a missing or invalid row, no expectation, an incomplete run): a gate that cannot judge fails closed (exit 2
for check and selftest, 1 for compare's CI gate), and never reads as PASS.
"""

from __future__ import annotations

from enum import Enum
from typing import Iterable


class Status(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    UNJUDGED = "unknown"  # check's JSON word since its first release; said "cannot judge" (`word`)

    @property
    def exit_code(self) -> int:
        """A health gate's exit code: 0 healthy, 1 unhealthy, 2 cannot judge."""
        return {Status.PASS: 0, Status.FAIL: 1, Status.UNJUDGED: 2}[self]

    @property
    def passed(self) -> bool:
        return self is Status.PASS

    @classmethod
    def of(cls, statuses: Iterable["Status"]) -> "Status":
        """The status of a whole made of parts: FAIL if any part failed, else UNJUDGED if any part could not be
        judged (or there is no part at all: nothing judged is not a pass), else PASS."""
        seen = set(statuses)
        if Status.FAIL in seen:
            return Status.FAIL
        if Status.UNJUDGED in seen or not seen:
            return Status.UNJUDGED
        return Status.PASS

    @property
    def word(self) -> str:
        """How a person is told: "pass", "fail", "cannot judge"."""
        return "cannot judge" if self is Status.UNJUDGED else self.value

    def __str__(self) -> str:
        return self.value
