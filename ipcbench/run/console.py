"""What rank 0 prints: progress with ETA while measuring, and nvbandwidth-style matrices at the end."""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from typing import Any

from ipcbench.sizes import fmt_size


def say(world, *msg) -> None:
    """Print on world rank 0 only."""
    if world.rank == 0:
        print(*msg, flush=True)


class Progress:
    """A progress line per step: done/total measurements of the suite, elapsed and ETA.

    On a terminal the line is rewritten in place; otherwise (mpirun, Slurm logs) a new line is printed
    at most every `every` seconds and at the end of each suite, so logs stay short.
    """

    def __init__(self, totals: dict[str, float], enabled: bool = True, stream=None, every: float = 5.0):
        self.totals = totals  # suite -> cost units
        self.grand = sum(totals.values()) or 1.0
        self.enabled = enabled
        self.out = stream or sys.stdout
        self.tty = self.out.isatty()
        self.every = every
        self.t0 = time.monotonic()
        self.done_units = 0.0
        self.suite_done: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self._last = 0.0

    def advance(self, suite: str, label: str, units: float, measurements: int, total_meas: int) -> None:
        self.done_units += units
        self.suite_done[suite] += units
        self.counts[suite] += measurements
        if not self.enabled:
            return
        now = time.monotonic()
        elapsed = now - self.t0
        eta = elapsed / self.done_units * (self.grand - self.done_units) if self.done_units else 0.0
        finished = self.suite_done[suite] >= self.totals.get(suite, 0) - 1e-9
        line = (f"[{suite:8s}] {self.counts[suite]:5d}/{total_meas:<5d} {label:24s} "
                f"elapsed {elapsed:6.1f} s  ETA {eta:6.1f} s")
        if self.tty:
            self.out.write("\r" + line + ("\n" if finished else ""))
            self.out.flush()
        elif finished or now - self._last >= self.every:
            self.out.write(line + "\n")
            self.out.flush()
            self._last = now


def matrices(rows, host: str | None = None) -> str:
    """GPU x GPU tables of the median bandwidth at the largest size, one per (suite, method, direction)."""
    groups = defaultdict(list)
    for r in rows:
        if r.bw_gbps_median is None or r.src_gpu < 0 or r.dst_gpu < 0:
            continue
        if host and r.host != host:
            continue
        groups[(r.suite, r.method, r.direction)].append(r)
    out = []
    for (suite, method, direction), rs in groups.items():
        big = max(r.bytes for r in rs)
        cells: dict[tuple[int, int], Any] = {}
        for r in rs:
            if r.bytes == big:
                cells.setdefault((r.src_rank, r.dst_rank), r)
        ranks = sorted({k for pair in cells for k in pair})
        if not ranks:
            continue
        gpu_of = {}
        for r in cells.values():
            gpu_of[r.src_rank], gpu_of[r.dst_rank] = r.src_gpu, r.dst_gpu
        arrow = "<->" if direction == "bidir" else "->"
        out.append(f"{suite}/{method} {direction} at {fmt_size(big)}: GB/s, row rank(GPU) {arrow} column")
        out.append("        " + "".join(f"{f'{k}({gpu_of[k]})':>9s}" for k in ranks))
        for a in ranks:
            line = f"{f'{a}({gpu_of[a]})':>8s}"
            for b in ranks:
                r = cells.get((a, b)) or (cells.get((b, a)) if direction == "bidir" else None)
                if a == b or r is None:
                    line += f"{'-':>9s}"
                else:
                    mark = "" if r.verified else "!"
                    line += f"{r.bw_gbps_median:8.1f}{mark or ' '}"
            out.append(line)
        out.append("")
    return "\n".join(out)
