"""The dry run's cost model: what a plan costs, suite by suite, under the fitted constants of catalogue/costs.py.

Pure arithmetic over the plan (steps, sampling rule, pair mode): no GPU, no MPI. The same plan features feed the
estimate (run/dryrun.py) and the fit (tools/costfit.py), so what is fitted is what is estimated. The model and its
terms: catalogue/costs.py; how to refit: docs/suites.md, "How long `all` takes".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from ipcbench.catalogue.costs import CostModel
from ipcbench.catalogue.methods import TWO_SIDED_ENGINES
from ipcbench.core.pair import sample_seconds
from ipcbench.run.walk import groups_of, guarded


@dataclass
class SuitePlan:
    """What one suite of a plan asks of the model: the two sums the per-measurement terms multiply."""

    sample_s: float = 0.0  # sum of walked x cost x min_samples x sample_s: times samples_factor
    weight: float = 0.0  # sum of walked x cost: times the suite's fixed_s
    # the part of both sums from steps whose two ranks both drive (PlanStep.both_drive): what ranks sharing a GPU
    # slow down (CostModel.gpu_factor)
    both_sample_s: float = 0.0
    both_weight: float = 0.0


def walked(step, mode) -> int:
    """The measurements a run walks for a step: one per size and group (run/walk.groups_of: a round of pairs at once
    is one). Without a mode: every pair, one at a time."""
    if mode is None:
        return step.measurements
    return sum(len(g.sizes) for g in groups_of(step, mode))


def round_checks(steps, mode) -> dict[int, int]:
    """Extra measurements of the concurrency guard (run/walk.guarded, the walk's own plan of it), by index of the
    step that pays them: each checked round's pairs one at a time at one size."""
    if mode is None:
        return {}
    return {i: sum(g.pairs_at_once for g in checks) for i, checks in guarded(steps, mode).items()}


# An SM copy from 4 x the GPU's L2 up loops in one launch and samples core/pair.loop_sample_s
# (core/gpu.LOOP_IN_KERNEL_L2_FACTOR); a dry run has no GPU to ask, so the model assumes an H100's 50 MiB L2 (an
# H200's 60 MiB loops at the same sizes of every default sweep: 256 MiB and up).
MODEL_LOOP_BYTES = 4 * (50 << 20)


def sample_length_s(step, rule, nbytes: int) -> float:
    """How long the model takes one sample of a step's row of `nbytes` to last: the run's rule (core/pair.
    sample_seconds) on an assumed GPU, at least the step's own shortest sample."""
    return max(sample_seconds(rule, nbytes, step.engine, step.two_sided, MODEL_LOOP_BYTES), step.min_sample_s)


@dataclass(frozen=True)
class PlanStep:
    """What the model needs of one step of a plan, with the measurements the run walks for it: meta.json keeps a
    run's list (`plan`), so the fit (tools/costfit.py) costs any command's recorded plan as the dry run did."""

    suite: str
    label: str
    engine: str
    two_sided: bool
    cost: float
    sizes: tuple[int, ...]
    min_sample_s: float
    walked: int  # measurements (round checks included; 0 for a two-sided step where every rank is on one GPU)
    all_ranks: bool = False  # every rank of the node at once (the all-to-all): every rank drives

    @property
    def both_drive(self) -> bool:
        """Both ranks of a pair drive the step's transfers (bidirectional, two-sided, ping-pongs, the pipeline's
        ring, the host-staged paths' two halves): where they share a GPU, their work is time-sliced. A one-way
        copy or kernel (one rank drives, the other waits) is not."""
        return (self.two_sided or self.all_ranks or self.label.endswith("bidir")
                or self.suite in ("latency", "pipeline", "staged"))

    def as_dict(self) -> dict:
        return {**asdict(self), "sizes": list(self.sizes)}

    @classmethod
    def from_dict(cls, d: dict) -> "PlanStep":
        """A step as meta.json keeps it; a key a later version adds is not used, one this version added later
        takes its default (ValueError where a key it needs is missing or not a number)."""
        known = {f.name for f in fields(cls)}
        kept = {k: v for k, v in d.items() if k in known}
        if "all_ranks" not in d and isinstance(d.get("label"), str):  # the plans of 2026-11-26 before the key:
            kept["all_ranks"] = d["label"].endswith("all-to-all")  # the all-to-all is their one step of every rank
        try:
            return cls(**{**kept, "sizes": tuple(int(n) for n in d["sizes"])})
        except (KeyError, TypeError) as e:
            raise ValueError(f"a step of meta.json's plan is not one ({type(e).__name__}: {e})") from None


def plan_steps(steps, mode=None, gpus: int = 0) -> list[PlanStep]:
    """The plan as the model sees it. Where every rank is on one GPU (`gpus` 1), a two-sided engine's steps (NCCL
    refuses two ranks of one GPU: suites/nccl.py writes no row for such a pair) walk nothing."""
    extra = round_checks(steps, mode)
    out = []
    for i, s in enumerate(steps):
        two_sided = s.engine in TWO_SIDED_ENGINES or bool(set(s.needs) & set(TWO_SIDED_ENGINES))
        n = 0 if gpus == 1 and two_sided else walked(s, mode) + extra.get(i, 0)
        out.append(PlanStep(s.suite, s.label, s.engine or "", two_sided, float(s.cost), tuple(s.sizes),
                            float(s.min_sample_s), n, bool(s.all_ranks)))
    return out


# Suites whose rows are not samples of --min-time: handle costs are timed one API call at a time (suites/handles.py),
# so their time is per measurement alone.
UNSAMPLED_SUITES = ("handles",)


def suite_plans(steps, rule, mode=None, gpus: int = 0) -> dict[str, SuitePlan]:
    """Each suite's sums, in plan order (plan_steps, then sums_of)."""
    return sums_of(plan_steps(steps, mode, gpus), rule)


def sums_of(planned: list[PlanStep], rule) -> dict[str, SuitePlan]:
    """Each suite's sums over a plan as the model sees it (a dry run's, or the one meta.json kept)."""
    out: dict[str, SuitePlan] = {}
    for s in planned:
        w = s.walked * s.cost
        p = out.setdefault(s.suite, SuitePlan())
        sample_s = 0.0
        if s.suite not in UNSAMPLED_SUITES:
            per_size = [sample_length_s(s, rule, n) for n in s.sizes] or [rule.min_time_s]
            sample_s = w * rule.min_samples * sum(per_size) / len(per_size)  # shorter samples under 64 MiB
        p.sample_s += sample_s
        p.weight += w
        if s.both_drive:
            p.both_sample_s += sample_s
            p.both_weight += w
    return out


def suite_seconds(model: CostModel, suite: str, plan: SuitePlan, ranks_per_gpu: int = 1, gpus: int = 0) -> float:
    """One suite's expected wall (its meta.json suite_wall_s); a suite that walks nothing here (NCCL's cross-GPU
    pairs on one GPU) pays nothing, not even its one-off cost."""
    if plan.weight <= 0:
        return 0.0
    alone, both = measurement_seconds(model, suite, plan)
    # sharing a GPU slows the measurements both ranks drive, not one rank's, nor the set-up
    return model.suite(suite).once_s + alone + both * model.gpu_factor(ranks_per_gpu, gpus)


def measurement_seconds(model: CostModel, suite: str, plan: SuitePlan) -> tuple[float, float]:
    """A suite's measurements with one rank per GPU: (those one rank drives, those both ranks drive)."""
    c = model.suite(suite)

    def cost(sample_s: float, weight: float) -> float:
        return (model.samples_factor * sample_s if c.samples else 0.0) + c.fixed_s * weight

    both = cost(plan.both_sample_s, plan.both_weight)
    return cost(plan.sample_s, plan.weight) - both, both


def walk_seconds(model: CostModel, steps, rule, mode=None, ranks_per_gpu: int = 1, gpus: int = 0) -> dict[str, float]:
    """Every suite's expected wall, by suite."""
    return {name: suite_seconds(model, name, p, ranks_per_gpu, gpus)
            for name, p in suite_plans(steps, rule, mode, gpus).items()}


def run_seconds(model: CostModel, steps, rule, mode=None, ranks_per_gpu: int = 1, gpus: int = 0) -> float:
    """meta.json's wall_s: the suites and the closing."""
    return sum(walk_seconds(model, steps, rule, mode, ranks_per_gpu, gpus).values()) + \
        model.close_for(node_ranks(ranks_per_gpu, gpus))


def wall_seconds(model: CostModel, steps, rule, mode=None, ranks_per_gpu: int = 1, gpus: int = 0) -> float:
    """The user's wall, mpirun to exit: the run and its start-up."""
    return run_seconds(model, steps, rule, mode, ranks_per_gpu, gpus) + \
        model.startup_for(node_ranks(ranks_per_gpu, gpus))


def node_ranks(ranks_per_gpu: int, gpus: int) -> int:
    """The ranks of a node of `gpus` GPUs (0: not known, taken as two: the smallest node of several)."""
    return ranks_per_gpu * (gpus if gpus > 0 else 2)


def check_seconds(model: CostModel, ranks: int) -> float:
    """What `ipcbench check` adds to the model of its suites on a node of `ranks` ranks: its verdict after the run
    (reading it back, judging, the outputs) and its own closing, in place of the closing of `all` (close_for: the
    NCCL communicators and the many handles of the suites check does not run; check closes in 0.2-0.4 s at 2, 4 and 8
    ranks, `all` in 0.4 s at 2 and 2 s at 4), and what the suites' constants miss for its small plan: a line in the
    ranks, since more ranks are more pairs to judge (0 where never fitted)."""
    if model.check_s is None:
        return 0.0
    return check_own_seconds(model, ranks) - model.close_for(ranks)


def check_own_seconds(model: CostModel, ranks: int) -> float:
    """check's own time after its suites on a node of `ranks` ranks (its verdict and its closing): the fitted line
    in the ranks, never below 0 (a duration); 0 where never fitted."""
    if model.check_s is None:
        return 0.0
    return max(0.0, model.check_s + model.check_rank_s * ranks)


def anchor_seconds(model: CostModel, units: int, gpus: int = 0) -> float:
    """What `ipcbench selftest`'s anchors add on a node of `gpus` GPUs: `units` anchor measurements
    (selftest/plan.anchor_units; 0 where never fitted)."""
    return units * (model.anchor_for(gpus) or 0.0)
