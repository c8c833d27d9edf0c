"""One thing check found (pure): a row's, a pair's, the run's or one GPU's evidence, with its Status and why. Its
own module so that judge.py (rows) and evidence_rules.py (the node's evidence) both make findings without
importing each other (tests/test_layering.py: no import circles)."""

from __future__ import annotations

from dataclasses import dataclass

from ipcbench.sizes import fmt_size
from ipcbench.status import Status


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One thing check found about a row, a pair or the run: its status and why (selftest's is another). Made by
    keyword: what a finding of the whole node or of one GPU does not have (a method, a size, a value) is left out.
    The fields' order is check's JSON (outputs.as_json)."""

    source: str  # thresholds | baseline | peers | coverage | run | verification | evidence
    host: str
    pair: str  # "GPU 0 -> GPU 1" (ranks where two share a GPU: judging/row_key.pair_name), "GPU 3", "node"
    src_gpu: int
    dst_gpu: int
    link: str = ""  # nvswitch | nvlink | pcie | same_gpu | unknown
    method: str = ""  # an evidence finding: its rule (nvlinks, pcie, ...)
    direction: str = ""
    bytes: int = 0
    value: float | None = None
    unit: str = ""  # GB/s | µs | ""
    expected: float | None = None  # the bound the value was held against
    status: Status
    reason: str  # what, by how much, against which expectation (one line, with the expectation's why)
    brief: str = ""  # the same in a few words (the summary's lines, the REASON line)
    against: str = ""  # the expectation a thresholds check held the row against, with its why and where
    by: str = ""  # what judged the row: its expectation's FILE:LINE, "baseline" or "peers" (check --verbose says it)

    @property
    def shortfall(self) -> float:
        """How far a failed value is from its bound (a fraction; 0 where there is none)."""
        if self.value is None or not self.expected:
            return 0.0
        return abs(self.value / self.expected - 1)

    @property
    def what(self) -> str:
        return f"{self.pair} {self.method} {self.direction} {fmt_size(self.bytes)}" if self.method else self.pair
