"""How a run was measured, in what makes two runs' numbers differ: its sizes, the sizes each of its steps planned, and
whether it was a --quick run (from meta.json, older runs from their rows). compare's warnings and its rows of sizes a
run never planned (judging/matching.py) and the report's options (report/options.py) read them here."""

from __future__ import annotations

from ipcbench.record.meta import Meta
from ipcbench.sizes import fmt_size


def sizes_of(meta: Meta, frame=None) -> list[int]:
    """The run's sizes from meta.json, else (older runs) from its rows."""
    return meta.sizes or (sorted(int(b) for b in set(frame["bytes"]) if b > 0) if frame is not None else [])


def sizes_text(sizes: list[int]) -> str:
    """"17 sizes, 4K–256M"."""
    return f"{len(sizes)} sizes, {fmt_size(min(sizes))}–{fmt_size(max(sizes))}" if sizes else "not recorded"


# a plan step's label is "METHOD DIRECTION" for the steps of one method and direction ("ce push", "nccl one-way"); the
# others ("memory handles", "ring depth 2", "ce all-to-all") name no row key, so their suite's sizes stand for them
LABEL_DIRECTIONS = {"push": "push", "pull": "pull", "bidir": "bidir", "one-way": "oneway"}


def planned_sizes(meta: Meta, sweep: list[int] | None = None):
    """planned(suite, method, direction, bytes): whether the run planned a row of that size, from meta.json's plan
    (each step's sizes; a step whose label names no row key by its suite's sizes); a row without a size (0 bytes:
    event handles, error paths) always, and so a row of a suite the run did not plan at all (a suite left out is
    no size left out: its rows stay missing, or new). A run without a recorded plan planned its sweep (meta.json's
    sizes) and every size outside `sweep` (the other run's sweep): rows of a suite's own sizes count as planned; one
    that recorded no sizes either (no meta.json) planned every row, so that a suite it lost stays missing."""
    by_key: dict[tuple[str, str, str], set[int]] = {}
    by_suite: dict[str, set[int]] = {}
    for step in meta.plan or []:
        if not isinstance(step, dict):
            continue
        sizes = {int(s) for s in step.get("sizes") or []}
        words = str(step.get("label", "")).split()
        if len(words) == 2 and words[1] in LABEL_DIRECTIONS:
            by_key.setdefault((str(step.get("suite")), words[0], LABEL_DIRECTIONS[words[1]]), set()).update(sizes)
        else:
            by_suite.setdefault(str(step.get("suite")), set()).update(sizes)
    own, other = set(meta.sizes), set(sweep or [])
    suites = {k[0] for k in by_key} | set(by_suite)

    def planned(suite: str, method: str, direction: str, nbytes: int) -> bool:
        if nbytes <= 0:
            return True
        if not meta.plan:  # no plan recorded: its sweep (none recorded, no meta.json: every size) and the rest
            return not own or nbytes in own or nbytes not in other
        key = (suite, method, direction)
        if key in by_key:
            return nbytes in by_key[key]
        return nbytes in by_suite[suite] if suite in by_suite else suite not in suites

    return planned


def is_quick(meta: Meta) -> bool | None:
    """Whether the run was measured with --quick, from its recorded options (None: not recorded)."""
    quick = meta.options.get("quick")
    return quick if isinstance(quick, bool) else None
