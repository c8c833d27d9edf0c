"""Which pairs are measured at the same time: rounds of disjoint pairs, and when a run may use them.

A pair's number must be that pair's (docs/architecture.md, "Measurement rules"): pairs run one at a
time, or in rounds in which no GPU is in two pairs and no two pairs can share a link. `pair_rounds`
orders a step's pairs by the round-robin tournament (circle method), so that the complete set of N(N-1)
ordered pairs of N ranks falls into 2(N-1) rounds of N/2 pairs (N-1 rounds for the unordered ones), each
round a perfect matching. `decide_mode` says whether a run may use them. Pure logic: no MPI, no CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("auto", "sequential", "concurrent")


def circle_order(n: int) -> list[tuple[int, int]]:
    """Every ordered pair of n ranks, round by round: the circle method's n-1 (n even; n odd: n) perfect
    matchings one way, then the same matchings the other way."""
    m = n + (n % 2)  # odd n: a dummy rank m-1 sits out one rank per round
    others = list(range(1, m))
    rounds = []
    for _ in range(m - 1):
        ring = [0] + others
        rounds.append([(ring[i], ring[m - 1 - i]) for i in range(m // 2)])
        others = others[-1:] + others[:-1]
    order = []
    for flip in (False, True):
        for matches in rounds:
            for a, b in matches:
                if a < n and b < n:
                    order.append((b, a) if flip else (a, b))
    return order


def pair_rounds(pairs: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Split a step's pairs into rounds in which every rank is in at most one pair.

    Pairs are taken in circle-method order and packed greedily, so a complete set of ordered pairs gives
    2(N-1) perfect matchings and the unordered set (a < b, bidirectional steps) N-1. Any list of pairs
    is accepted; each pair lands in exactly one round.
    """
    if not pairs:
        return []
    n = max(max(p) for p in pairs) + 1
    rank = {}
    for i, p in enumerate(circle_order(n)):
        rank.setdefault(p, i)
    # an unordered pair (a, b) takes the place of whichever orientation comes first
    key = {p: min(rank.get(p, len(rank)), rank.get((p[1], p[0]), len(rank))) for p in pairs}
    remaining = sorted(dict.fromkeys(pairs), key=lambda p: key[p])
    rounds = []
    while remaining:
        busy: set[int] = set()
        this, rest = [], []
        for p in remaining:
            if p[0] in busy or p[1] in busy:
                rest.append(p)
            else:
                this.append(p)
                busy.update(p)
        rounds.append(this)
        remaining = rest
    return rounds


@dataclass(frozen=True)
class PairMode:
    """How this run measures pairs: `concurrent` (rounds of disjoint pairs) or `sequential`, and why."""

    mode: str
    requested: str
    reason: str

    @property
    def concurrent(self) -> bool:
        return self.mode == "concurrent"

    def as_dict(self) -> dict:
        return {"mode": self.mode, "requested": self.requested, "reason": self.reason}


class ModeError(ValueError):
    """`--pairs concurrent` where pairs would share a GPU."""


def decide_mode(requested: str, ranks_per_gpu: int, link_kinds: list[str] | None, local_size: int) -> PairMode:
    """The pair mode for a node: `link_kinds` is the NVML link kind of every GPU pair (None: unknown).

    auto runs rounds only where pairs provably cannot share a link: one rank per GPU and every GPU pair
    connected through NVSwitch (each GPU's links go to the switch, which is non-blocking). PCIe trees,
    direct NVLink meshes and unknown topologies are measured one pair at a time.
    """
    if requested not in MODES:
        raise ValueError(f"unknown pair mode {requested!r}")
    if requested == "sequential":
        return PairMode("sequential", requested, "--pairs sequential")
    if ranks_per_gpu > 1:
        if requested == "concurrent":
            raise ModeError(f"--pairs concurrent: {ranks_per_gpu} ranks share a GPU here, and pairs that share a "
                            f"GPU cannot be measured at once; use --pairs sequential or auto")
        return PairMode("sequential", requested, f"{ranks_per_gpu} ranks per GPU: pairs would share a GPU")
    if requested == "concurrent":
        return PairMode("concurrent", requested, "--pairs concurrent")
    if local_size < 4:
        return PairMode("sequential", requested, f"{local_size} ranks: one pair per round anyway")
    if not link_kinds:
        return PairMode("sequential", requested, "topology unknown (no NVML link table)")
    if all(k == "nvswitch" for k in link_kinds):
        return PairMode("concurrent", requested, "every GPU pair is linked through NVSwitch")
    kinds = ", ".join(sorted(set(link_kinds)))
    return PairMode("sequential", requested, f"GPU pairs linked by {kinds}: pairs may share a link")
