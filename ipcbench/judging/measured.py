"""How a run was measured, in what makes two runs' numbers differ: its sizes and whether it was a --quick run (from
meta.json, older runs from their rows). compare's warnings (judging/matching.py) and the report's options
(report/options.py) both read them here."""

from __future__ import annotations

from ipcbench.record.meta import Meta
from ipcbench.sizes import fmt_size


def sizes_of(meta: Meta, frame=None) -> list[int]:
    """The run's sizes from meta.json, else (older runs) from its rows."""
    return meta.sizes or (sorted(int(b) for b in set(frame["bytes"]) if b > 0) if frame is not None else [])


def sizes_text(sizes: list[int]) -> str:
    """"17 sizes, 4K–256M"."""
    return f"{len(sizes)} sizes, {fmt_size(min(sizes))}–{fmt_size(max(sizes))}" if sizes else "not recorded"


def is_quick(meta: Meta) -> bool | None:
    """Whether the run was measured with --quick, from its recorded options (None: not recorded)."""
    quick = meta.options.get("quick")
    return quick if isinstance(quick, bool) else None
