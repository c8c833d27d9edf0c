"""Steps shared by the suites whose rows come from a transfer method (copy, kernel, pool, vmm): every
direction the method supports, over ordered pairs (unordered for bidir), measured by core.pair. A method on
memory shared other than by legacy IPC is a twin step (registry.Step.twin)."""

from __future__ import annotations

from ipcbench.catalogue.methods import facts_of, method_facts, suite_of
from ipcbench.catalogue.planned import RowShape
from ipcbench.core.methods import METHODS
from ipcbench.core.pair import measure_pair
from ipcbench.core.round import measure_round
from ipcbench.core.world import ordered_pairs, unordered_pairs
from ipcbench.suites.registry import Step

# the facts (facts_of, method_facts, suite_of): the catalogue's
__all__ = ["facts_of", "method_facts", "suite_of", "method_steps", "pair_runner", "round_runner"]


def method_steps(suite: str, method_names: list[str], n: int, sizes: list[int]) -> list[Step]:
    steps = []
    for name in method_names:
        m = METHODS[name]
        for d in m.directions:
            pairs = unordered_pairs(n) if d == "bidir" else ordered_pairs(n)
            steps.append(Step(suite, f"{name} {d}", pairs, sizes, pair_runner(suite, name, d),
                              needs=(m.buffers, *m.gpu_needs), cost=2.0 if d == "bidir" else 1.0, rounds_ok=True,
                              twin=m.buffers != "legacy", engine=m.engine, run_round=round_runner(suite, name, d),
                              writes=(RowShape(name, d),)))
    return steps


def round_runner(suite: str, method_name: str, direction: str, **labels):
    """A one-way step's run_round(ctx, flows, sizes): a permutation round's flows at once (core/round.py); None for
    a bidirectional step or a two-sided method (their rounds are of disjoint pairs). `labels`: measure_pair's row
    labels (row_direction, kind, note)."""
    if direction == "bidir" or METHODS[method_name].two_sided:
        return None

    def run(ctx, flows, sizes):
        return measure_round(ctx, suite, METHODS[method_name], direction, flows, sizes, **labels)

    return run


def pair_runner(suite: str, method_name: str, direction: str):
    """A step's run(ctx, src, dst, sizes): one pair's sweep of the method in one direction (core/pair.py)."""
    def run(ctx, src, dst, sizes):
        return measure_pair(ctx, suite, METHODS[method_name], direction, src, dst, sizes)

    return run

