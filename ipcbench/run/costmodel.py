"""The dry run's cost model: what a plan costs, suite by suite, under the fitted constants of catalogue/costs.py.

Pure arithmetic over the plan (steps, sampling rule, pair mode): no GPU, no MPI. The same plan features feed the
estimate (run/dryrun.py) and the fit (run/costfit.py), so what is fitted is what is estimated. The model and its
terms: catalogue/costs.py; how to refit: docs/suites.md, "How long `all` takes".
"""

from __future__ import annotations

from dataclasses import dataclass

from ipcbench.catalogue.costs import CostModel
from ipcbench.catalogue.methods import TWO_SIDED_ENGINES
from ipcbench.core.pair import sample_seconds
from ipcbench.run.walk import groups_of


@dataclass
class SuitePlan:
    """What one suite of a plan asks of the model: the two sums the per-measurement terms multiply."""

    sample_s: float = 0.0  # sum of walked x cost x min_samples x sample_s: times samples_factor
    weight: float = 0.0  # sum of walked x cost: times the suite's fixed_s


def walked(step, mode) -> int:
    """The measurements a run walks for a step: one per size and group (run/walk.groups_of: a round of disjoint
    pairs is one). Without a mode: every pair, one at a time."""
    if mode is None:
        return step.measurements
    return len(step.sizes) * len(groups_of(step, mode))


def round_checks(steps, mode) -> dict[int, int]:
    """Extra measurements of run/walk.check_rounds, by index of the step that pays them: the largest round's pairs
    one at a time at the largest size, for the first step of each engine walked in rounds (walk's rule, restated
    here because walk applies it inside its loop)."""
    out: dict[int, int] = {}
    if mode is None:
        return out
    checked: set[str] = set()
    for i, s in enumerate(steps):
        groups = groups_of(s, mode)
        kind = s.engine or s.label
        if kind not in checked and groups and groups[0] is not None and max(len(g) for g in groups) > 1:
            checked.add(kind)
            out[i] = max(len(g) for g in groups)
    return out


# Suites whose rows are not samples of --min-time: handle costs are timed one API call at a time (suites/handles.py),
# so their time is per measurement alone.
UNSAMPLED_SUITES = ("handles",)


def suite_plans(steps, rule, mode=None, gpus: int = 0) -> dict[str, SuitePlan]:
    """Each suite's sums, in plan order. Where every rank is on one GPU (`gpus` 1), a two-sided engine's steps (NCCL
    refuses two ranks of one GPU: suites/nccl.py writes no row for such a pair) walk nothing."""
    out: dict[str, SuitePlan] = {}
    extra = round_checks(steps, mode)
    for i, s in enumerate(steps):
        two_sided = s.engine in TWO_SIDED_ENGINES or bool(set(s.needs) & set(TWO_SIDED_ENGINES))
        w = 0 if gpus == 1 and two_sided else (walked(s, mode) + extra.get(i, 0)) * s.cost
        p = out.setdefault(s.suite, SuitePlan())
        if s.suite not in UNSAMPLED_SUITES:
            per_size = [max(sample_seconds(rule, n, two_sided), s.min_sample_s) for n in s.sizes] or [rule.min_time_s]
            p.sample_s += w * rule.min_samples * sum(per_size) / len(per_size)  # shorter samples under 64 MiB
        p.weight += w
    return out


def suite_seconds(model: CostModel, suite: str, plan: SuitePlan, ranks_per_gpu: int = 1, gpus: int = 0) -> float:
    """One suite's expected wall (its meta.json suite_wall_s); a suite that walks nothing here (NCCL's cross-GPU
    pairs on one GPU) pays nothing, not even its one-off cost."""
    if plan.weight <= 0:
        return 0.0
    c = model.suite(suite)
    per_measurement = (model.samples_factor * plan.sample_s if c.samples else 0.0) + c.fixed_s * plan.weight
    return c.once_s + per_measurement * model.gpu_factor(ranks_per_gpu, gpus)  # sharing slows measurements, not set-up


def walk_seconds(model: CostModel, steps, rule, mode=None, ranks_per_gpu: int = 1, gpus: int = 0) -> dict[str, float]:
    """Every suite's expected wall, by suite."""
    return {name: suite_seconds(model, name, p, ranks_per_gpu, gpus)
            for name, p in suite_plans(steps, rule, mode, gpus).items()}


def run_seconds(model: CostModel, steps, rule, mode=None, ranks_per_gpu: int = 1, gpus: int = 0) -> float:
    """meta.json's wall_s: the suites and the closing."""
    return sum(walk_seconds(model, steps, rule, mode, ranks_per_gpu, gpus).values()) + model.close_s


def wall_seconds(model: CostModel, steps, rule, mode=None, ranks_per_gpu: int = 1, gpus: int = 0) -> float:
    """The user's wall, mpirun to exit: the run and its start-up."""
    return run_seconds(model, steps, rule, mode, ranks_per_gpu, gpus) + model.startup_s
