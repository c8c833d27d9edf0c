"""Which pairs are measured at the same time: rounds of disjoint pairs, and when a run may use them.

A pair's number must be that pair's (docs/architecture.md, "Measurement rules"): pairs run one at a
time, or in rounds in which no GPU is in two pairs and no two pairs can share a link. `pair_rounds`
orders a step's pairs by the round-robin tournament (circle method), so that the complete set of N(N-1)
ordered pairs of N ranks falls into 2(N-1) rounds of N/2 pairs (N-1 rounds for the unordered ones), each
round a perfect matching. `decide_mode` says whether a run may use them, and which pairs the steps that
are never walked in rounds (the serial steps: host paths, handle costs, ping-pongs, the pipeline) cover:
all of them, or a ring (`ring_pairs`). Pure logic: no MPI, no CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ipcbench.catalogue.pairing import PAIRS_REQUESTED as MODES, SERIAL_REQUESTED as SERIAL_PAIRS  # the one list


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
    return gpu_rounds(pairs, tuple(range(max(max(p) for p in pairs) + 1)))  # each rank its own "GPU"


def permutation_rounds(pairs: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Split an ordered step's pairs into rounds in which every rank sends at most once and receives at most once.

    The complete set of N(N-1) ordered pairs of N ranks falls into the N-1 cyclic shifts (round k: rank i -> rank
    i+k mod N), each a permutation of every rank: half the rounds of pair_rounds' perfect matchings, every GPU both
    sending and receiving. Any list of ordered pairs is accepted (packed greedily in shift order); each pair lands
    in exactly one round.
    """
    if not pairs:
        return []
    ranks = sorted({r for p in pairs for r in p})
    at = {r: i for i, r in enumerate(ranks)}
    remaining = sorted(dict.fromkeys(pairs), key=lambda p: ((at[p[1]] - at[p[0]]) % len(ranks), at[p[0]]))
    rounds = []
    while remaining:
        senders: set[int] = set()
        receivers: set[int] = set()
        this, rest = [], []
        for a, b in remaining:
            if a in senders or b in receivers:
                rest.append((a, b))
            else:
                this.append((a, b))
                senders.add(a)
                receivers.add(b)
        rounds.append(this)
        remaining = rest
    return rounds


# Where a permutation round (every rank sending once and receiving once: permutation_rounds) leaves a one-way row
# within its noise of the same pair measured alone, by engine: the largest size `--pairs auto` measures that way on
# a node whose GPU pairs are all linked through NVSwitch (one rank per GPU). Larger sizes are measured in rounds of
# disjoint pairs. Measured on 4 x H200 (2026-11-28, two runs each of `copy kernel latency` with --pairs concurrent
# and --pairs permutation): the largest size up to which, for every direction of the engine, the median shift over
# the 12 pairs is at most half the rows' stated noise and no pair's shift exceeds that noise. A GPU that receives
# while it sends costs a one-way row 1-1.5% for writes at every size and, from 1 MiB, 5-10% for reads (copy engine
# pull -5.7%, SM read -10% at 256 MiB, as nvbandwidth's bidirectional SM read); docs/measurement.md, "Permutation
# rounds", has the table.
PERMUTATION_UP_TO: dict[str, int] = {"ce": 256 << 10, "sm": 512 << 10, "sm_bulk": 64 << 10}
ONE_SIDED_ENGINES = ("ce", "sm", "sm_bulk")  # a permutation round's flows each have one driver (core/round.py)


@dataclass(frozen=True)
class Permutation:
    """Which one-way rows a run measures in permutation rounds: by engine, the sizes up to `up_to` (bytes; an
    engine not named: none), and why."""

    up_to: tuple[tuple[str, int], ...] = ()
    reason: str = "not used"

    def limit(self, engine: str) -> int:
        return dict(self.up_to).get(engine, 0)

    def sizes(self, engine: str, sizes: list[int]) -> list[int]:
        """The sizes of a one-way step of `engine` measured in permutation rounds."""
        top = self.limit(engine)
        return [n for n in sizes if n <= top]

    def as_dict(self) -> dict:
        return {"up_to": {e: n for e, n in self.up_to}, "reason": self.reason}


NO_PERMUTATION = Permutation()


def decide_permutation(requested: str, ranks_per_gpu: int, link_kinds: list[str] | None,
                       table: dict[str, int] | None = None) -> Permutation:
    """Which rows a node measures in permutation rounds: every one-sided engine at every size under --pairs
    permutation; under auto and concurrent, where every GPU pair is linked through NVSwitch and each GPU has one rank,
    the engines and sizes PERMUTATION_UP_TO says hold (`table`); none elsewhere. The flows of a permutation round
    meet at each GPU (one out, one in), so a node where they could meet anywhere else (a direct mesh, PCIe,
    an unknown topology) never uses them unasked."""
    table = PERMUTATION_UP_TO if table is None else table
    if requested == "permutation":
        return Permutation(tuple((e, 1 << 62) for e in ONE_SIDED_ENGINES), "--pairs permutation: every one-way row")
    if requested == "sequential" or ranks_per_gpu > 1:
        return Permutation(reason=f"--pairs {requested}" if requested == "sequential" else
                           f"{ranks_per_gpu} ranks per GPU")
    if not link_kinds or not all(k == "nvswitch" for k in link_kinds):
        return Permutation(reason="not every GPU pair is linked through NVSwitch")
    if not table:
        return Permutation(reason="no engine measured to hold in them")
    return Permutation(tuple(sorted(table.items())), "every GPU pair through NVSwitch: the engines and sizes measured "
                                                     "to hold (core/schedule.PERMUTATION_UP_TO)")


def ring_pairs(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The pairs of a step that lie on the ring of its ranks: each rank once as sender and once as receiver.

    The ranks the pairs name, in order, form the ring r0 -> r1 -> ... -> r0. Of an ordered list (one that
    holds some pair both ways) the pairs r_i -> r_i+1 are kept; of an unordered one (bidirectional and
    symmetric steps, a < b) the pairs {r_i, r_i+1}. Two ranks: the ring is every pair. With one rank per
    GPU rank i is GPU i, so on a 2-socket HGX (GPUs 0-3 on one socket, 4-7 on the other) the ring crosses
    the sockets twice (3 -> 4, 7 -> 0): both classes of pair, same socket and across, are measured.
    """
    ranks = sorted({r for p in pairs for r in p})
    nxt = {r: ranks[(i + 1) % len(ranks)] for i, r in enumerate(ranks)}
    have = set(pairs)
    ordered = any((b, a) in have for a, b in have)
    return [(a, b) for a, b in pairs if nxt[a] == b or (not ordered and nxt[b] == a)]


@dataclass(frozen=True)
class Group:
    """What a walk measures at once over some of a step's sizes: one pair `alone`, a round of `disjoint` pairs, a
    `permutation` round (every rank sending at most once and receiving at most once), or `all` ranks of the node
    together (the all-to-all; no flows)."""

    flows: tuple[tuple[int, int], ...] | None
    sizes: tuple[int, ...]
    kind: str

    @property
    def pairs_at_once(self) -> int:
        return len(self.flows) if self.flows is not None else 0

    def as_dict(self) -> dict:
        """How meta.json records it (pair_mode.rounds): which round measured each row."""
        return {"kind": self.kind, "flows": None if self.flows is None else [list(f) for f in self.flows],
                "sizes": list(self.sizes)}


@dataclass(frozen=True)
class SerialPairs:
    """Which pairs the serial steps (never walked in rounds) measure: `all`, or a `ring`, and why.

    Serial steps share something between pairs (host memory and CPUs, the driver's locks) or need both
    GPUs alone, so N(N-1) of them one after another dominate a large node's run; where every pair is
    alike, a ring still measures each GPU as sender and as receiver at an N-th of the cost.
    """

    coverage: str
    requested: str
    reason: str

    @property
    def ring(self) -> bool:
        return self.coverage == "ring"

    def select(self, pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
        return ring_pairs(pairs) if self.ring else list(pairs)

    def as_dict(self) -> dict:
        return {"coverage": self.coverage, "requested": self.requested, "reason": self.reason}

    def describe(self) -> str:
        """One phrase for the progress header and the dry run."""
        what = "a ring (each rank once as sender, once as receiver)" if self.ring else "every pair"
        why = f": {self.reason}" if self.requested == "auto" else ""
        return f"{what} (--serial-pairs {self.requested}{why})"


EVERY_PAIR = SerialPairs("all", "all", "every pair")


def one_per_gpu_pair(pairs: list[tuple[int, int]], gpu_of: tuple[int, ...],
                     ordered: bool | None = None) -> list[tuple[int, int]]:
    """The first rank pair of each GPU pair: where ranks share GPUs, ranks i and i+G drive the same GPU, so the
    rank pairs (0, 1), (0, 3), (2, 1) and (2, 3) of 4 ranks on 2 GPUs all cross the same link from GPU 0 to GPU 1.
    An ordered list keeps one pair per ordered GPU pair; an unordered one (a < b: bidirectional steps) one per
    unordered GPU pair. Same-GPU pairs are GPU pairs too (GPU a with itself): one of them per GPU is kept.
    `ordered`: whether the step's own pairs are ordered (a ring thinned from them holds no pair both ways; None:
    decided from `pairs`)."""
    have = set(pairs)
    if ordered is None:
        ordered = any((b, a) in have for a, b in have)
    seen: set[tuple[int, int]] = set()
    out = []
    for a, b in pairs:
        ga, gb = gpu_of[a], gpu_of[b]
        key = (ga, gb) if ordered else (min(ga, gb), max(ga, gb))
        if key not in seen:
            seen.add(key)
            out.append((a, b))
    return out


@dataclass(frozen=True)
class PairMode:
    """How this run measures pairs: `concurrent` (rounds of disjoint pairs) or `sequential`, and why; which
    pairs its serial steps cover (`serial`); and, where `gpu_of` is set (--quick with ranks sharing GPUs: a fleet
    check measures links, not rank pairs), one rank pair per GPU pair (one_per_gpu_pair)."""

    mode: str
    requested: str
    reason: str
    serial: SerialPairs = EVERY_PAIR
    gpu_of: tuple[int, ...] | None = None
    permutation: Permutation = NO_PERMUTATION

    @property
    def concurrent(self) -> bool:
        return self.mode == "concurrent"

    def select(self, pairs: list[tuple[int, int]], serial_step: bool) -> list[tuple[int, int]]:
        """The pairs of a step this run measures: the serial coverage for a serial step, then one rank pair per GPU
        pair where `gpu_of` says so."""
        chosen = self.serial.select(pairs) if serial_step else list(pairs)
        if self.gpu_of is None:
            return chosen
        have = set(pairs)
        return one_per_gpu_pair(chosen, self.gpu_of, ordered=any((b, a) in have for a, b in have))

    def as_dict(self) -> dict:
        out = {"mode": self.mode, "requested": self.requested, "reason": self.reason,
               "serial_pairs": self.serial.as_dict(), "permutation": self.permutation.as_dict()}
        if self.gpu_of is not None:
            out["rank_pairs"] = "one per GPU pair (--quick with ranks sharing GPUs)"
        return out


def per_gpu_pair(mode: PairMode, wanted: bool, gpu_of: list[int], link_kinds: list[str] | None = None) -> PairMode:
    """The mode of a run that `wanted` one rank pair per GPU pair (RunConfig.gpu_pairs: --quick) where its ranks
    share GPUs (PairMode.gpu_of). A fleet check asks whether each link and each GPU is healthy; the other rank pairs
    of a GPU pair measure the same link again (4 ranks on 2 GPUs: 12 ordered rank pairs, 4 GPU pairs). With one rank
    pair per GPU pair, pairs of disjoint GPUs are as independent as with one rank per GPU, so where every GPU pair
    is linked through NVSwitch (`link_kinds`) and the run did not ask for --pairs sequential they are measured in
    rounds in which no GPU is in two pairs (gpu_rounds), as one rank per GPU would be."""
    if not wanted or len(set(gpu_of)) == len(gpu_of):
        return mode
    out = replace(mode, gpu_of=tuple(gpu_of))
    if mode.requested != "sequential" and link_kinds and all(k == "nvswitch" for k in link_kinds) \
            and len(set(gpu_of)) >= 4:
        out = replace(out, mode="concurrent", reason="--quick with ranks sharing GPUs: one rank pair per GPU pair, "
                                                     "pairs of disjoint GPUs at once (every GPU pair through NVSwitch)")
    return out


def gpu_rounds(pairs: list[tuple[int, int]], gpu_of: tuple[int, ...]) -> list[list[tuple[int, int]]]:
    """Rounds of rank pairs in which no GPU is in two pairs (a same-GPU pair holds its one GPU): the pairs taken in
    circle-method order of their GPUs and packed greedily (pair_rounds is this with each rank its own GPU)."""
    if not pairs:
        return []
    n = max(gpu_of) + 1
    order: dict[tuple[int, int], int] = {}
    for i, p in enumerate(circle_order(n)):
        order.setdefault(p, i)
    last = len(order)  # a same-GPU pair is in no circle: after the others
    key = {p: min(order.get((gpu_of[p[0]], gpu_of[p[1]]), last), order.get((gpu_of[p[1]], gpu_of[p[0]]), last))
           for p in pairs}
    remaining = sorted(dict.fromkeys(pairs), key=lambda p: key[p])
    rounds = []
    while remaining:
        busy: set[int] = set()
        this, rest = [], []
        for p in remaining:
            gpus = {gpu_of[p[0]], gpu_of[p[1]]}
            if gpus & busy:
                rest.append(p)
            else:
                this.append(p)
                busy |= gpus
        rounds.append(this)
        remaining = rest
    return rounds


class ModeError(ValueError):
    """`--pairs concurrent` where pairs would share a GPU."""


def decide_mode(requested: str, ranks_per_gpu: int, link_kinds: list[str] | None, local_size: int,
                serial: str = "auto", quick: bool = False) -> PairMode:
    """The pair mode for a node: `link_kinds` is the NVML link kind of every GPU pair (None: unknown).

    auto runs rounds only where pairs provably cannot share a link: one rank per GPU and every GPU pair
    connected through NVSwitch (each GPU's links go to the switch, which is non-blocking). PCIe trees,
    direct NVLink meshes and unknown topologies (no table, or a pair of kind `unknown`: not proven
    disjoint) are measured one pair at a time. The serial steps' pairs
    are decided here too (decide_serial_pairs), from the same facts.
    """
    if requested not in MODES:
        raise ValueError(f"unknown pair mode {requested!r}")
    cover = decide_serial_pairs(serial, ranks_per_gpu, link_kinds, local_size, quick)
    if requested == "permutation":
        if ranks_per_gpu > 1:
            raise ModeError(f"--pairs permutation: {ranks_per_gpu} ranks share a GPU here, and a rank's flows in and "
                            f"out would share it with another pair's; use --pairs sequential or auto")
        return PairMode("concurrent", requested, "--pairs permutation", cover,
                        permutation=decide_permutation(requested, ranks_per_gpu, link_kinds))
    mode = _decide_rounds(requested, ranks_per_gpu, link_kinds, local_size, cover)
    return replace(mode, permutation=decide_permutation(requested, ranks_per_gpu, link_kinds))


def _decide_rounds(requested: str, ranks_per_gpu: int, link_kinds: list[str] | None, local_size: int,
                   cover: SerialPairs) -> PairMode:
    """decide_mode's rounds of disjoint pairs."""
    if requested == "sequential":
        return PairMode("sequential", requested, "--pairs sequential", cover)
    if ranks_per_gpu > 1:
        if requested == "concurrent":
            raise ModeError(f"--pairs concurrent: {ranks_per_gpu} ranks share a GPU here, and pairs that share a "
                            f"GPU cannot be measured at once; use --pairs sequential or auto")
        return PairMode("sequential", requested, f"{ranks_per_gpu} ranks per GPU: pairs would share a GPU", cover)
    if requested == "concurrent":
        return PairMode("concurrent", requested, "--pairs concurrent", cover)
    if local_size < 4:
        return PairMode("sequential", requested, f"{local_size} ranks: one pair per round anyway", cover)
    if not link_kinds:
        return PairMode("sequential", requested, "topology unknown (no NVML link table)", cover)
    if all(k == "nvswitch" for k in link_kinds):
        return PairMode("concurrent", requested, "every GPU pair is linked through NVSwitch", cover)
    kinds = ", ".join(sorted(set(link_kinds)))
    return PairMode("sequential", requested, f"GPU pairs linked by {kinds}: pairs may share a link", cover)


def decide_serial_pairs(requested: str, ranks_per_gpu: int, link_kinds: list[str] | None, local_size: int,
                        quick: bool = False) -> SerialPairs:
    """Which pairs the serial steps cover. auto: a ring where every pair is alike (one rank per GPU, at
    least 4 of them, every GPU pair through NVSwitch) and under --quick (a fleet check) wherever each GPU
    has one rank; every pair elsewhere. Where ranks share a GPU, same-GPU pairs are the point of the run
    and a ring would miss them (ranks i and i+G share GPU i of G: never neighbours on a ring of more than
    two), so auto keeps every pair.
    """
    if requested not in SERIAL_PAIRS:
        raise ValueError(f"unknown serial-pairs coverage {requested!r}")
    if requested != "auto":
        return SerialPairs(requested, requested, f"--serial-pairs {requested}")
    if ranks_per_gpu > 1:
        return SerialPairs("all", requested, f"{ranks_per_gpu} ranks per GPU: same-GPU pairs are measured")
    if quick:
        return SerialPairs("ring", requested, "--quick, a fleet check")
    if local_size < 4:
        return SerialPairs("all", requested, f"{local_size} ranks: few pairs")
    if not link_kinds:
        return SerialPairs("all", requested, "topology unknown (no NVML link table)")
    if all(k == "nvswitch" for k in link_kinds):
        return SerialPairs("ring", requested, "every GPU pair is linked through NVSwitch: pairs are alike")
    kinds = ", ".join(sorted(set(link_kinds)))
    return SerialPairs("all", requested, f"GPU pairs linked by {kinds}: pairs differ")
