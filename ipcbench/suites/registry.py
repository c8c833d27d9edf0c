"""The suite registry: what a suite is (a list of Steps), which suites exist, and in which order.

`ORDER` is the one list of suite names (catalogue/suites.py, with what each suite's rows are): the CLI's
help, `all`, the dry run and the report all read it.
Each name is a module of this package that defines `SUITE = SuiteSpec(...)`; modules are imported only
when a plan is made, so importing this registry pulls in no CUDA, MPI or suite code (no import circle:
suites import `Step` from here, this module imports suites by name). See docs/architecture.md.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Mapping

from ipcbench.catalogue.planned import RowShape
from ipcbench.catalogue.suites import ORDER, ROWS, row_facts
from ipcbench.results import RowFacts

__all__ = ["ORDER", "Step", "SuiteSpec", "UnknownSuite", "spec", "row_facts", "describe_rows", "resolve", "plan",
           "thinned", "TWIN_STRIDE"]


@dataclass
class Step:
    """One thing measured over the node's pair schedule.

    For each pair the two ranks of the pair call `run(ctx, src, dst, sizes)` while the other ranks wait
    (a pair step), or every rank of the node calls `run(ctx, sizes)` together (an all-ranks step: the
    all-to-all; not to be confused with a run's pairs measured at once, core/schedule.PairMode.concurrent).
    """

    suite: str
    label: str
    pairs: list[tuple[int, int]]  # node-local (src, dst); [] for an all-ranks step
    sizes: list[int]
    run: Callable
    all_ranks: bool = False  # every rank of the node runs it together (run(ctx, sizes))
    # buffer kinds (ipc/sharers.BUFFER_KINDS), libraries (sharers.LIBRARIES: "nccl") and GPU features
    # (sharers.GPU_FEATURES: "bulk_copy") it needs
    needs: tuple[str, ...] = ()
    cost: float = 1.0  # relative cost of one measurement, for the ETA
    # May its pairs be measured in rounds of disjoint pairs (core/schedule.py) when the run allows? Only
    # GPU-to-GPU transfers: host paths share the host's memory and CPUs, handle costs the driver's locks.
    rounds_ok: bool = False
    min_sample_s: float = 0.0  # its samples last at least this long whatever --min-time says (the estimate)
    # Work it needs done before anything is measured, started at the run's setup so that it runs beside it:
    # prelude(ctx, pairs) -> wait(), which the runner calls once the setup is done, before the first measurement
    # (suites/handles.py: the child process whose handle is the exited owner's).
    prelude: Callable | None = None
    # Its sizes under --quick, for a step whose sizes do not follow --sizes (latency's small messages):
    # quick is a fleet check, and fewer of them keep it short.
    quick_sizes: list[int] | None = None
    # A twin: a legacy method's engine on peer memory shared another way (pool, vmm, cuda.core). Same memory,
    # same links, so its question is "does the mechanism change the number?", which every other size of
    # the default sweep answers as well as all of them (TWIN_STRIDE); an explicit --sizes gets every size.
    twin: bool = False
    # What moves its bytes (core/methods.ENGINES: ce, sm, sm_bulk, nccl; "" for the others): the first step of
    # each engine walked in rounds is checked against its pairs alone (run/walk.check_rounds).
    engine: str = ""
    # A one-way step of a one-sided engine: run_round(ctx, flows, sizes) measures a permutation round's flows at once
    # (core/round.measure_round), every rank of the node calling it; None: never in permutation rounds.
    run_round: Callable | None = None
    # The rows it writes for each pair at each size (catalogue/planned.RowShape): what meta.json's planned_rows
    # records for it (run/walk.planned), and what the reader holds results.csv to (record/agreement.py).
    writes: tuple[RowShape, ...] = ()
    # Its pairs of ranks sharing a GPU write no row (NCCL refuses two ranks of one GPU): they are not planned.
    cross_gpu: bool = False

    @property
    def serial(self) -> bool:
        """Never walked in rounds: measured one pair at a time, over the pairs --serial-pairs leaves it."""
        return not self.all_ranks and not self.rounds_ok

    @property
    def measurements(self) -> int:
        """Over every pair of the step; what a run measures after its --serial-pairs is run/walk.measured."""
        return len(self.sizes) * (1 if self.all_ranks else len(self.pairs))


@dataclass(frozen=True)
class SuiteSpec:
    name: str
    about: str
    steps: Callable[[int, list[int]], list[Step]]  # (node-local ranks, sizes) -> steps

    @property
    def rows(self) -> Mapping[str, RowFacts]:
        """Every method its rows name -> what those rows are: the catalogue's declaration
        (catalogue/suites.ROWS), which rows are described by when written (describe_rows) and when read."""
        return ROWS[self.name]


class UnknownSuite(KeyError):
    """A suite name that is not in ORDER; the message lists the known ones."""


def spec(name: str) -> SuiteSpec:
    """The SuiteSpec declared by module ipcbench.suites.<name> (imported on first use)."""
    if name not in ORDER:
        raise UnknownSuite(f"unknown suite {name!r} (known: all, {', '.join(ORDER)})")
    module = importlib.import_module(f"ipcbench.suites.{name}")
    s = module.SUITE
    if s.name != name:
        raise RuntimeError(f"ipcbench.suites.{name} declares suite {s.name!r}")
    return s


def describe_rows(rows: list, mps: bool, round_pairs: int) -> None:
    """Give each row its facts (results.described) before it is written: its method's, this node's MPS
    state, and how many pairs were measured at the same time (1: alone)."""
    for r in rows:
        r.describe(row_facts(r.suite, r.method), mps, round_pairs)


def resolve(names: list[str]) -> list[str]:
    """Expand `all`, keep the given order otherwise, drop repeats, reject unknown names."""
    out: list[str] = []
    for n in names:
        if n == "all":
            out.extend(s for s in ORDER if s not in out)
        elif n in ORDER:
            if n not in out:
                out.append(n)
        else:
            raise UnknownSuite(f"unknown suite {n!r} (known: all, {', '.join(ORDER)})")
    return out


TWIN_STRIDE = 2  # twins under the default sweep: every 2nd size (x4 apart), counted down from the largest


def thinned(sizes: list[int], stride: int = TWIN_STRIDE) -> list[int]:
    """Every `stride`-th size counted down from the largest (which is always kept), in ascending order."""
    return sorted(sorted(sizes)[::-1][::stride])


def plan(names: list[str], n_local: int, sizes: list[int], quick: bool = False,
         thin_twins: bool = False) -> list[Step]:
    """Every step of the named suites for n_local ranks per node, in suite order (with --quick, each step's
    quick_sizes where it has them; with thin_twins, twin steps at every TWIN_STRIDE-th size)."""
    steps: list[Step] = []
    for name in resolve(names):
        steps.extend(spec(name).steps(n_local, sizes))
    for s in steps:
        if quick:
            s.sizes = list(s.quick_sizes or s.sizes)
        elif thin_twins and s.twin:
            s.sizes = thinned(s.sizes)
    return steps
