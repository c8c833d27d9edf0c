"""Where a rank's wall time goes: named phases, timed on the host, nested, each second counted once.

A run that must characterise a node in seconds has to know which of its seconds are measurement (docs/suites.md,
"Where a run's time goes"). Every rank keeps one `Phases` (`PHASES`); code marks its spans with
`with PHASES.phase("fill"):`. Nesting makes paths ("sample/gpu"): a second is charged to the innermost open
phase only, so the paths of a rank add up to the time the rank was inside any phase. The cost is two
perf_counter calls and a dict update per span (under 1 µs): spans are placed per sample or per segment, never
per transfer. The run gathers every rank's totals into meta.json (`time_breakdown_s`); `python tools/phases.py
RUN_DIR` prints a recorded run's table (`table`).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator


class Phases:
    """Exclusive time per phase path of one process. Each thread nests its own phases (its own stack and mark: a
    helper thread, or the CPU tests' ranks run as threads, never charges another thread's span, so no time is
    negative); the totals are the process's, added under a lock."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self.totals: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self._local = threading.local()
        self._lock = threading.Lock()

    @property
    def _stack(self) -> list[str]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
            self._local.mark = 0.0
        return stack

    def _charge(self, now: float) -> None:
        stack = self._stack
        if stack:
            path = "/".join(stack)
            with self._lock:
                self.totals[path] = self.totals.get(path, 0.0) + (now - self._local.mark)
        self._local.mark = now

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self._charge(self.clock())
        stack = self._stack
        stack.append(name)
        path = "/".join(stack)
        with self._lock:
            self.counts[path] = self.counts.get(path, 0) + 1
        try:
            yield
        finally:
            self._charge(self.clock())
            stack.pop()

    def wrap(self, name: str):
        """A decorator: every call of the function is one span of phase `name`."""
        def deco(fn):
            @functools.wraps(fn)
            def inner(*a, **kw):
                with self.phase(name):
                    return fn(*a, **kw)
            return inner
        return deco

    def reset(self) -> None:
        with self._lock:
            self.totals.clear()
            self.counts.clear()
        self._local = threading.local()

    def snapshot(self) -> dict[str, dict[str, float]]:
        """{path: {"s": seconds, "n": spans}}, rounded for meta.json."""
        return {p: {"s": round(s, 4), "n": self.counts.get(p, 0)}
                for p, s in sorted(self.totals.items(), key=lambda kv: -kv[1])}


PHASES = Phases()


def process_age_s() -> float | None:
    """Seconds since this process was created (Linux /proc; None elsewhere): at the start of a run, what the
    interpreter, the imports and the launcher cost before any of the run's own phases."""
    try:
        with open("/proc/self/stat") as f:
            started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def table(per_rank: dict[str, dict[str, dict[str, float]]], wall_s: float | None = None, top: int = 25) -> str:
    """The breakdown as a person reads it: one line per phase path, seconds on each rank and the share of the
    run's wall (rank 0's), the largest first."""
    ranks = list(per_rank)
    paths = sorted({p for r in per_rank.values() for p in r},
                   key=lambda p: -max(per_rank[r].get(p, {}).get("s", 0.0) for r in ranks))
    lines = [f"{'phase':40s} " + " ".join(f"{r:>9s}" for r in ranks) + ("   share" if wall_s else "")]
    for p in paths[:top]:
        secs = [per_rank[r].get(p, {}).get("s", 0.0) for r in ranks]
        share = f"  {secs[0] / wall_s:6.1%}" if wall_s else ""
        lines.append(f"{p:40s} " + " ".join(f"{s:9.3f}" for s in secs) + share)
    return "\n".join(lines)
