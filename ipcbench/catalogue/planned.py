"""What a run plans to measure, declared once for the writer and the reader.

Each step of a suite declares the rows it writes for one pair at one size (`RowShape`: its method, direction and, where
it is not the size, its bytes). A run records, before its first measurement, every step's pairs on its hosts and its
sizes (`PlannedStep`, meta.json's `planned_rows`: run/walk.planned writes it from the pairs the walk measures); the
reader expands that record into the row keys results.csv must hold (`PlannedStep.keys`, record/agreement.py), each
planned row once, unless its step was skipped with a reason (meta.json's `skipped`). Writer and reader share this
module, so what the run planned and what the reader expects cannot drift apart. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from ipcbench.results import RUN_KEY

__all__ = ["RUN_KEY", "RowShape", "PlannedStep", "merged"]


@dataclass(frozen=True)
class RowShape:
    """The row a step writes for each of its pairs at each of its sizes: `method` and `direction` as the row names
    them, `bytes` where the row's size is not the step's (an event handed over: 0). `unless`: why a pair may write
    none of these rows (every size of the pair, or none of them: a mechanism a GPU pair cannot use, a call the driver
    refuses); "" where every planned row is written."""

    method: str
    direction: str
    bytes: int | None = None
    unless: str = ""

    def as_json(self) -> dict:
        out: dict = {"method": self.method, "direction": self.direction}
        if self.bytes is not None:
            out["bytes"] = self.bytes
        if self.unless:
            out["unless"] = self.unless
        return out

    @classmethod
    def from_json(cls, d: dict) -> "RowShape":
        return cls(d["method"], d["direction"], d.get("bytes"), d.get("unless", ""))


# (host, node-local rank) -> (world rank, GPU), None where the run's ranks do not list it
RankOf = Callable[[str, int], tuple[int, int] | None]


@dataclass(frozen=True)
class PlannedStep:
    """One step of a run's plan as meta.json records it: on each of `hosts`, each of `pairs` (node-local ranks, src
    and dst; every ordered pair of the node for a step of all ranks) writes one row of each shape of `rows` at each of
    `sizes`."""

    suite: str
    step: str
    hosts: tuple[str, ...]
    pairs: tuple[tuple[int, int], ...]
    sizes: tuple[int, ...]
    rows: tuple[RowShape, ...]

    def as_json(self) -> dict:
        return {"suite": self.suite, "step": self.step, "hosts": list(self.hosts),
                "pairs": [list(p) for p in self.pairs], "sizes": list(self.sizes),
                "rows": [r.as_json() for r in self.rows]}

    @classmethod
    def from_json(cls, d: dict) -> "PlannedStep":
        """An entry record/meta_schema.py has checked (every key present, of its type)."""
        return cls(d["suite"], d["step"], tuple(d["hosts"]), tuple((int(a), int(b)) for a, b in d["pairs"]),
                   tuple(d["sizes"]), tuple(RowShape.from_json(r) for r in d["rows"]))

    def keys(self, rank_of: RankOf, hosts: tuple[str, ...] | None = None) -> Iterator[tuple[tuple, tuple | None]]:
        """(row key in RUN_KEY's order, its unit) of every planned row on `hosts` (default: all of the step's). A
        row's unit is None where it is always written, else (host, suite, step, pair, unless): the rows of a shape
        with an `unless` that a pair writes all of or none of. KeyError naming the host and node-local rank where
        `rank_of` does not know one."""
        for host in self.hosts if hosts is None else hosts:
            for a, b in self.pairs:
                src, dst = _rank(rank_of, host, a), _rank(rank_of, host, b)
                for shape in self.rows:
                    unit = (host, self.suite, self.step, (a, b), shape.unless) if shape.unless else None
                    for size in self.sizes:
                        nbytes = size if shape.bytes is None else shape.bytes
                        yield (host, self.suite, shape.method, shape.direction, src[0], dst[0], src[1], dst[1],
                               nbytes), unit


def _rank(rank_of: RankOf, host: str, local: int) -> tuple[int, int]:
    got = rank_of(host, local)
    if got is None:
        raise KeyError(f"node-local rank {local} of {host}")
    return got


def merged(steps: list[PlannedStep]) -> list[PlannedStep]:
    """The steps of every host, in plan order, one entry for the hosts whose entries are alike but for the host (a
    fleet's nodes plan alike): meta.json grows with the plan's variety, not with the fleet."""
    out: dict[tuple, PlannedStep] = {}
    for s in steps:
        key = (s.suite, s.step, s.pairs, s.sizes, s.rows)
        have = out.get(key)
        out[key] = s if have is None else PlannedStep(s.suite, s.step, have.hosts + tuple(h for h in s.hosts
                                                                                          if h not in have.hosts),
                                                      s.pairs, s.sizes, s.rows)
    return list(out.values())
