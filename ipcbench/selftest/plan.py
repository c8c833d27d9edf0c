"""What `ipcbench selftest` measures, and against which anchor (pure: no GPU, no MPI).

ipcbench's own rows: every one-way method (push, pull) of the copy, kernel, pool and vmm suites, over a
sweep of the sizes people pick (powers of two and the sizes between them) plus three small ones for the
per-transfer cost, on these pairs of node-local ranks, measured one pair at a time (in rounds of disjoint pairs where
the node allows them, --pairs auto: every GPU pair through NVSwitch, one rank per GPU):
  - on every GPU that two or more ranks share: its two lowest ranks (a, b) -- push is a's process writing
    into b's memory, pull is b's process reading a's;
  - across GPUs: the lowest rank of each GPU on a ring of the GPUs (`--cross ring`, each GPU once as sender
    and once as receiver), or every ordered pair of GPUs (`--cross all`).
Bidirectional rows are not checked: one process's two streams on one GPU run concurrently, two processes'
copies on one GPU are time-sliced (docs/measurement.md), so no one-process anchor times the same thing.

The anchor of a row (`anchor_key`): the same engine (copy engine, SM kernel, bulk kernel) moving the same
number of bytes in ONE process, between buffers it allocated itself with cudaMalloc (no IPC), enqueued on a
stream between events behind a spin kernel (selftest/anchor.py): on one GPU a local copy, which serves both
directions and every twin (pool, VMM, cuda.core memory); across GPUs a peer copy driven from the driver's
GPU (push: the source's, pull: the destination's). It is measured in the process of each rank that drives
such rows (`anchor_jobs`; push: the source rank, pull: the destination rank) while every other rank waits (or,
where the rows ran in rounds of disjoint pairs, measures an anchor of other GPUs: `anchor_rounds`), so that the
anchor differs from the row in how the memory is reached and timed, not in which process
launches; a row is held against its transfer's anchors of every driver combined (verdict.by_transfer): on
one GPU both ranks' processes, whose difference is part of how well the transfer can be known.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ipcbench.core.methods import METHODS
from ipcbench.core.sampler import SHORT_BELOW
from ipcbench.suites import transfer

DEFAULT_SIZES = "4K,64K,1M,64M,128M,256M,384M,512M,768M,1G"
# The methods checked: every method of these engines that has a one-way direction (NCCL is two-sided: no
# one-process anchor does what a send and its receive do).
CHECKED_ENGINES = ("ce", "sm", "sm_bulk")
CROSS = ("ring", "all")
TOLERANCE = 0.02  # beyond both noises: the bound, and what a user may expect an instrument to hold
# Transfers the anchor times in under SMALL_US microseconds are held to SMALL_TOLERANCE: a few-microsecond
# copy's rate takes levels by where its buffers lie and how they were mapped (IPC, pool, VMM), up to 9.5%
# apart on one H200 where every size from 64 MiB up agreed within 1% (docs/measurement.md); an instrument's
# own artifact at those sizes is of another order (a graph node vs a stream enqueue: 2x at 4 KiB).
SMALL_TOLERANCE = 0.10
SMALL_US = 10.0
# An anchor is measured at PLACEMENTS places of its buffers under SHORT_BELOW (64 MiB), where a small transfer's
# rate depends on where its buffer lies (selftest/anchor.OFFSETS); from there up, where it does not (under 0.1%
# for SM kernels and 64 KiB copies already), at LARGE_PLACEMENTS: two moments of the sweep still; on two GPUs
# 348 anchor measurements instead of 600 (16 s instead of 29 on two H200s).
PLACEMENTS = 5
LARGE_PLACEMENTS = 2


def placements(nbytes: int) -> int:
    """How many places of its buffers the anchor of a transfer of `nbytes` is measured at."""
    return PLACEMENTS if nbytes < SHORT_BELOW else LARGE_PLACEMENTS


@dataclass(frozen=True)
class Tolerance:
    """What a row may differ from its anchor beyond both noises: `large`, or `small` where the anchor moves
    the transfer in under `small_us` microseconds."""

    large: float = TOLERANCE
    small: float = SMALL_TOLERANCE
    small_us: float = SMALL_US

    def of(self, nbytes: int, anchor_gbps: float) -> float:
        """The tolerance of a transfer of `nbytes` that the anchor moves at `anchor_gbps`."""
        us = nbytes / (anchor_gbps * 1e3) if anchor_gbps > 0 else float("inf")
        return self.small if us < self.small_us else self.large

    def describe(self) -> str:
        return f"{self.large:.1%} ({self.small:.0%} where the anchor takes under {self.small_us:g} us)"


def methods() -> list[str]:
    """The methods the selftest checks, in the method table's order."""
    return [m.name for m in METHODS.values() if m.engine in CHECKED_ENGINES and set(m.directions) & {"push", "pull"}]


def suite_of(method: str) -> str:
    """The suite whose rows a method's are (suites/transfer.suite_of)."""
    return transfer.suite_of(method)


def leaders(gpu_of: list[int]) -> dict[int, list[int]]:
    """GPU -> its node-local ranks, lowest first."""
    out: dict[int, list[int]] = {}
    for r, g in enumerate(gpu_of):
        out.setdefault(g, []).append(r)
    return dict(sorted(out.items()))


def pairs(gpu_of: list[int], cross: str = "ring") -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(same-GPU pairs, cross-GPU pairs) of node-local ranks the selftest measures."""
    if cross not in CROSS:
        raise ValueError(f"cross must be one of {', '.join(CROSS)}")
    by_gpu = leaders(gpu_of)
    same = [(rs[0], rs[1]) for rs in by_gpu.values() if len(rs) >= 2]
    heads = [rs[0] for rs in by_gpu.values()]
    if len(heads) < 2:
        return same, []
    if cross == "all":
        return same, [(a, b) for a in heads for b in heads if a != b]
    ring = [(heads[i], heads[(i + 1) % len(heads)]) for i in range(len(heads))]
    if len(heads) == 2:  # a ring of two is both directions of its one pair
        ring = [(heads[0], heads[1]), (heads[1], heads[0])]
    return same, ring


@dataclass(frozen=True)
class AnchorKey:
    """What one anchor measures: `engine` moving bytes from GPU `src_gpu` to GPU `dst_gpu`, driven from the
    source's GPU (push) or the destination's (pull), or on one GPU ("local"), in the process of world rank
    `driver`."""

    engine: str
    style: str  # "local", "push" or "pull"
    src_gpu: int
    dst_gpu: int
    driver: int  # the world rank whose process measures it (the rank that drove the rows it serves)

    @property
    def driver_gpu(self) -> int:
        return self.dst_gpu if self.style == "pull" else self.src_gpu

    def transfer(self) -> AnchorKey:
        """The transfer alone, whoever measures it (driver -1): what a row is judged against."""
        return replace(self, driver=-1)

    def describe(self, drivers: list[int] | None = None) -> str:
        where = (f"on GPU {self.src_gpu}" if self.style == "local"
                 else f"{self.style} GPU {self.src_gpu} -> {self.dst_gpu}")
        ranks = drivers if drivers is not None else [self.driver] if self.driver >= 0 else []
        who = f" (rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))})" if ranks else ""
        return f"{self.engine} {where}{who}"


def anchor_key(method: str, direction: str, src_rank: int, dst_rank: int, src_gpu: int, dst_gpu: int) -> AnchorKey:
    """The anchor a one-way row of `method` (world ranks and GPUs of its pair) is judged against."""
    engine = METHODS[method].engine
    driver = src_rank if direction == "push" else dst_rank
    if src_gpu == dst_gpu:
        return AnchorKey(engine, "local", src_gpu, src_gpu, driver)
    return AnchorKey(engine, direction, src_gpu, dst_gpu, driver)


def anchor_jobs(gpu_of: list[int], node_ranks: list[int], same: list[tuple[int, int]],
                cross: list[tuple[int, int]], method_names: list[str]) -> list[tuple[int, AnchorKey]]:
    """(node-local rank that measures it, key) for every anchor the rows of these node-local pairs need, in
    one order every rank shares: the rank that drove the rows measures it. `node_ranks`: node-local ->
    world rank."""
    keys: set[tuple[int, AnchorKey]] = set()
    for name in method_names:
        m = METHODS[name]
        for d in ("push", "pull"):
            if d not in m.directions:
                continue
            for a, b in same + cross:
                key = anchor_key(name, d, node_ranks[a], node_ranks[b], gpu_of[a], gpu_of[b])
                keys.add((a if d == "push" else b, key))
    return sorted(keys, key=lambda j: (CHECKED_ENGINES.index(j[1].engine), j[1].style, j[1].src_gpu, j[1].dst_gpu,
                                       j[0]))


def anchor_rounds(jobs: list[tuple[int, AnchorKey]], at_once: bool) -> list[list[tuple[int, AnchorKey]]]:
    """The anchor jobs in rounds measured at the same time, in the jobs' order: where the run measures pairs of
    disjoint GPUs at once (`at_once`: its pair mode is concurrent, every GPU pair through NVSwitch), jobs whose GPUs
    are disjoint share a round (so do their measuring ranks, one per GPU: each job stays alone on its GPUs, as
    the rows' rounds of disjoint pairs are); elsewhere one job a round."""
    rounds: list[list[tuple[int, AnchorKey]]] = []
    busy: list[set[int]] = []
    for job in jobs:
        gpus = {job[1].src_gpu, job[1].dst_gpu}
        i = next((k for k, b in enumerate(busy) if at_once and not b & gpus), None)
        if i is None:
            rounds.append([job])
            busy.append(set(gpus))
        else:
            rounds[i].append(job)
            busy[i] |= gpus
    return rounds


def anchor_units(gpu_of: list[int], node_ranks: list[int], method_names: list[str], cross: str,
                 sizes: list[int], at_once: bool = False) -> int:
    """What the anchors of a selftest cost, in anchor measurements (one size at one place: selftest/anchor.py) of
    its rounds (anchor_rounds: jobs measured at once cost one): the dry run's cost model counts with it
    (run/costmodel.py)."""
    same, across = pairs(gpu_of, cross)
    jobs = anchor_jobs(gpu_of, node_ranks, same, across, method_names)
    return len(anchor_rounds(jobs, at_once)) * sum(placements(n) for n in sizes)
