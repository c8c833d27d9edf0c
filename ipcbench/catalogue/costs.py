"""What a run costs: the fitted constants of the dry run's cost model (run/costmodel.py), with where they come from.

The model, per suite of a plan (docs/suites.md, "How long `all` takes"):

    suite_s = once_s + sum over its steps of walked x step.cost x (samples_factor x min_samples x sample_s + fixed_s)

`walked`: the measurements the run walks (a round of disjoint pairs costs one); `sample_s`: the rule's sample length
for each size (SamplingRule.sample_s; 3 ms at least for a two-sided step), at least the step's min_sample_s;
`samples_factor`: samples a measurement takes, as a multiple of the rule's minimum (counted in results.csv); `fixed_s`
(per suite): the work around the samples (calibration, fill, verify, barriers, the row's bookkeeping); `once_s` (per
suite): what a suite pays once (NCCL communicators, kernels loaded). Ranks sharing GPUs multiply the measurements both
ranks of a pair drive (run/costmodel.PlanStep.both_drive; not one rank's, nor `once_s`) by `shared_gpu_factor`,
every rank on one GPU by `one_gpu_factor`. A run adds its closing (meta.json's wall_s less its suites' walls:
releasing and closing) and its start-up (the user's wall, mpirun to exit, less wall_s: Python, MPI and CUDA start,
buffers). The closing is a line in the node's ranks (`close_s + close_rank_s x ranks`: each rank closes the handles
and communicators of every peer), the start-up a line in their doublings (`startup_s + startup_rank_s x log2(ranks)`:
the ranks start their interpreters, MPI, CUDA contexts and NVML side by side, each doubling adding the same; on
4 x H200, 2026-11-28, runs of `all` and `--quick`: 3.3 s for 2 ranks, 4.8 s for 4, 6.5 s for 8). Two commands add what
they do beyond their suites, each fitted to that command's runs against the model of its suites: `ipcbench check`
`check_s + check_rank_s x ranks` in place of the closing (its verdict after the run: reading the run back, judging
it, writing its outputs, more pairs on more ranks; its own closing; and what the suites' constants, fitted on `all`,
miss for check's small plan), `ipcbench selftest` `anchor_s` per anchor measurement (one size at one place of its
buffers, selftest/plan.anchor_units; a one-GPU node's, copies within the GPU, its own: `one_gpu_anchor_s`).

Everything below the marker is written by `python tools/costfit.py RUN_DIR... --walls FILE --write`: never edit
it by hand, refit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SuiteCost:
    """One suite's constants, for one rank per GPU."""

    fixed_s: float  # per cost-weighted measurement, beyond its samples
    once_s: float = 0.0  # once per run that walks the suite
    # Its measurements last samples of --min-time (the sample term applies); False where its rows are timed
    # otherwise (handle costs: one call at a time), and fixed_s and once_s hold all of its time.
    samples: bool = True


def plan_command(command: str) -> str:
    """A run's command without what does not change its plan (--out DIR, --quiet)."""
    out: list[str] = []
    words = iter(command.split())
    for w in words:
        if w == "--out":
            next(words, None)
        elif w != "--quiet" and not w.startswith("--out="):
            out.append(w)
    return " ".join(out)


@dataclass(frozen=True)
class Residual:
    """How far the fitted model is from one recorded run: the user's wall (mpirun to exit) where the fit was
    given it, else meta.json's wall_s against the model less its startup_s."""

    run: str  # the run directory's name, as given to the fit
    command: str  # meta.json's command
    machine: str  # e.g. "2 x NVIDIA H100 80GB HBM3, 2 ranks"
    measured_s: float
    predicted_s: float
    start_included: bool = False  # measured_s is the user's wall, start-up included
    gpus: int = 0  # the GPUs of its node
    ranks: int = 0  # the ranks on its node (more than `gpus`: ranks shared GPUs)

    @property
    def pct(self) -> float:
        return (self.predicted_s / self.measured_s - 1) * 100

    @property
    def plan_command(self) -> str:
        return plan_command(self.command)


@dataclass(frozen=True)
class CostModel:
    samples_factor: float  # samples per measurement / the rule's min_samples
    suites: dict[str, SuiteCost]
    default: SuiteCost  # a suite the fit never saw: the mean of the fitted ones
    shared_gpu_factor: float  # ranks sharing GPUs of a node of several: the measurements both ranks drive x this
    close_s: float  # meta.json wall_s - sum(suite_wall_s), less close_rank_s x ranks
    startup_s: float  # the user's wall - wall_s, less startup_rank_s x log2(ranks)
    startup_basis: str  # how the start-up was had: "measured (--walls, N runs)" or "assumed: ..."
    fitted: str  # the date of the fit
    machines: tuple[str, ...]  # the machine kinds of the runs fitted
    runs: tuple[str, ...]  # the run directories fitted, as given
    residuals: tuple[Residual, ...] = field(default_factory=tuple)
    # every rank on one GPU (a one-GPU machine): its own factor, since no pair crosses a link and the two ranks' kernels
    # are time-sliced on every measurement; None: shared_gpu_factor
    one_gpu_factor: float | None = None
    # ipcbench check: the user's wall less what the model says of its suites and start-up (its verdict and closing),
    # a line in the node's ranks with check_rank_s; None: never fitted
    check_s: float | None = None
    # ipcbench selftest: seconds per anchor measurement (selftest/plan.anchor_units), in wall_s; None: never fitted
    anchor_s: float | None = None
    # a one-GPU node (every rank on one GPU), fitted on its own runs: its selftest anchors (copies within the GPU,
    # whose 512-transfer repetitions of small sizes are shorter than a link's); None: anchor_s
    one_gpu_anchor_s: float | None = None
    startup_rank_s: float = 0.0  # the start-up's seconds per doubling of the node's ranks
    close_rank_s: float = 0.0  # the closing's seconds per rank of the node
    check_rank_s: float = 0.0  # check's own term's seconds per rank of the node (more pairs and checks to judge)

    def startup_for(self, ranks: int) -> float:
        """The start-up (mpirun to the run's first step) of a node of `ranks` ranks."""
        return self.startup_s + self.startup_rank_s * math.log2(max(ranks, 1))

    def close_for(self, ranks: int) -> float:
        """The closing (after the suites: releasing, closing, writing) of a node of `ranks` ranks."""
        return self.close_s + self.close_rank_s * ranks

    def anchor_for(self, gpus: int) -> float | None:
        """Seconds per selftest anchor measurement on a node of `gpus` GPUs (0: not known, a node of several)."""
        return self.one_gpu_anchor_s if gpus == 1 and self.one_gpu_anchor_s is not None else self.anchor_s

    def gpu_factor(self, ranks_per_gpu: int, gpus: int = 0) -> float:
        """What every suite's time is multiplied by: 1 with one rank per GPU; one_gpu_factor where every rank shares
        the node's one GPU; shared_gpu_factor elsewhere (gpus 0: not known, a node of several)."""
        if ranks_per_gpu <= 1:
            return 1.0
        if gpus == 1 and self.one_gpu_factor is not None:
            return self.one_gpu_factor
        return self.shared_gpu_factor

    def suite(self, name: str) -> SuiteCost:
        return self.suites.get(name, self.default)

    @property
    def worst_residual_pct(self) -> float:
        return max((abs(r.pct) for r in self.residuals), default=0.0)

    def command_residuals(self) -> list[tuple[str, str, int, float, float]]:
        """Per command and machine, in the order first fitted: (command, machine, runs, their mean measured wall,
        the model's). What the estimate is held to: the wall a command takes there, where its single runs spread
        on their own (three `check`s on one machine: 3.09-3.59 s)."""
        groups: dict[tuple[str, str, bool], list[Residual]] = {}
        for r in self.residuals:  # the user's walls and meta.json's wall_s are not averaged together
            groups.setdefault((r.plan_command, r.machine, r.start_included), []).append(r)
        return [(cmd, machine, len(rs), sum(r.measured_s for r in rs) / len(rs),
                 sum(r.predicted_s for r in rs) / len(rs)) for (cmd, machine, _), rs in groups.items()]

    @property
    def worst_command_pct(self) -> float:
        """The largest |residual| of a command's mean wall on a machine (command_residuals)."""
        return max((abs(p / m - 1) * 100 for _, _, _, m, p in self.command_residuals()), default=0.0)


# What a rank's green contexts cost to make (core/gpu.Gpu.lanes), each: measured on one H200, 2026-11-29 (twelve per
# rank, tests/data/contexts-h200x1-1129 green12: 19 ms and 120 MiB for twelve), what the dry run states beside K.
CONTEXT_MAKE_S = 0.0016
CONTEXT_MIB = 10


# --- fitted table (written by python tools/costfit.py --write) ---
COSTS = CostModel(
    samples_factor=1.056,
    suites={
        'copy': SuiteCost(fixed_s=0.00452, once_s=0.066),
        'kernel': SuiteCost(fixed_s=0.00351, once_s=0.116),
        'pool': SuiteCost(fixed_s=0.0044, once_s=0.068),
        'vmm': SuiteCost(fixed_s=0.00396, once_s=0.066),
        'staged': SuiteCost(fixed_s=0.0026, once_s=0.424),
        'nccl': SuiteCost(fixed_s=0.00585, once_s=0.44),
        'latency': SuiteCost(fixed_s=0.00695, once_s=0.0),
        'handles': SuiteCost(fixed_s=0.00722, once_s=0.0, samples=False),
        'pipeline': SuiteCost(fixed_s=0.01093, once_s=0.0),
        'alltoall': SuiteCost(fixed_s=0.00747, once_s=0.278, samples=False),
    },
    default=SuiteCost(fixed_s=0.00574, once_s=0.146),
    shared_gpu_factor=1.5265,
    one_gpu_factor=2.1161,
    check_s=0.214,
    check_rank_s=0.1346,
    anchor_s=0.04142,
    one_gpu_anchor_s=0.03887,
    close_s=-0.619,
    close_rank_s=0.489,
    startup_s=1.252,
    startup_rank_s=1.7546,
    startup_basis='measured: mpirun to exit less wall_s, 21 run(s) of --walls',
    fitted='2026-11-29',
    machines=(
        '1 x NVIDIA H200, 2 ranks',
        '2 x NVIDIA H200, 2 ranks',
        '4 x NVIDIA H200, 4 ranks',
        '4 x NVIDIA H200, 8 ranks',
    ),
    runs=(
        'results/h200x1-all-1',
        'results/h200x1-check-1',
        'results/h200x1-quick-1',
        'results/h200x1-selftest-1',
        'results/h200x2-all-1',
        'results/h200x2-all-2',
        'results/h200x2-all-3',
        'results/h200x2-check-1',
        'results/h200x2-quick-1',
        'results/h200x2-selftest-1',
        'results/h200x4-all-1',
        'results/h200x4-check-1',
        'results/h200x4-check-2',
        'results/h200x4-np8-check',
        'results/h200x4-np8-quick',
        'results/h200x4-quick-1',
        'results/h200x4-selftest-1',
        'tests/data/h200x4-1128/all-2',
        'tests/data/h200x4-1128/all-3',
        'tests/data/h200x4-1128/all-4',
        'tests/data/h200x4-1128/all-5',
        'tests/data/h200x4-1128/all-6',
        'tests/data/h200x1-1129/all-1',
        'tests/data/h200x1-1129/all-2',
        'tests/data/h200x1-1129/all-3',
        'tests/data/h200x1-1129/all-4',
        'tests/data/h200x1-1129/all-5',
        'tests/data/h200x1-1129/all-6',
        'tests/data/h200x1-1129/quick-1',
        'tests/data/h200x1-1129/check-1',
    ),
    residuals=(
        Residual('h200x1-all-1', 'ipcbench all --out h200x1-all-1',
                 '1 x NVIDIA H200, 2 ranks', 30.62, 30.59, True, 1, 2),
        Residual('h200x1-check-1', 'ipcbench check --out h200x1-check-1',
                 '1 x NVIDIA H200, 2 ranks', 4.37, 4.25, True, 1, 2),
        Residual('h200x1-quick-1', 'ipcbench all --quick --out h200x1-quick-1',
                 '1 x NVIDIA H200, 2 ranks', 6.94, 7.44, True, 1, 2),
        Residual('h200x1-selftest-1', 'ipcbench selftest --out h200x1-selftest-1',
                 '1 x NVIDIA H200, 2 ranks', 15.86, 16.34, True, 1, 2),
        Residual('h200x2-all-1', 'ipcbench all --out results/h200x2-all-1 --quiet',
                 '2 x NVIDIA H200, 2 ranks', 20.37, 20.64, True, 2, 2),
        Residual('h200x2-all-2', 'ipcbench all --out results/h200x2-all-2 --quiet',
                 '2 x NVIDIA H200, 2 ranks', 21.31, 20.64, True, 2, 2),
        Residual('h200x2-all-3', 'ipcbench all --out results/h200x2-all-3 --quiet',
                 '2 x NVIDIA H200, 2 ranks', 20.3, 20.64, True, 2, 2),
        Residual('h200x2-check-1', 'ipcbench check --out results/h200x2-check-1',
                 '2 x NVIDIA H200, 2 ranks', 3.7, 4.06, True, 2, 2),
        Residual('h200x2-quick-1', 'ipcbench all --quick --out results/h200x2-quick-1 --quiet',
                 '2 x NVIDIA H200, 2 ranks', 7.67, 7.61, True, 2, 2),
        Residual('h200x2-selftest-1', 'ipcbench selftest --out results/h200x2-selftest-1 --quiet',
                 '2 x NVIDIA H200, 2 ranks', 29.65, 29.88, True, 2, 2),
        Residual('h200x4-all-1', 'ipcbench all --out results/h200x4-all-1 --quiet',
                 '4 x NVIDIA H200, 4 ranks', 57.02, 51.66, True, 4, 4),
        Residual('h200x4-check-1', 'ipcbench check --out results/h200x4-check-1',
                 '4 x NVIDIA H200, 4 ranks', 6.65, 6.86, True, 4, 4),
        Residual('h200x4-check-2', 'ipcbench check --out results/h200x4-check-2',
                 '4 x NVIDIA H200, 4 ranks', 6.75, 6.86, True, 4, 4),
        Residual('h200x4-np8-check', 'ipcbench check --out results/h200x4-np8-check',
                 '4 x NVIDIA H200, 8 ranks', 21.54, 21.43, True, 4, 8),
        Residual('h200x4-np8-quick', 'ipcbench all --quick --out results/h200x4-np8-quick --quiet',
                 '4 x NVIDIA H200, 8 ranks', 36.72, 36.74, True, 4, 8),
        Residual('h200x4-quick-1', 'ipcbench all --quick --out results/h200x4-quick-1 --quiet',
                 '4 x NVIDIA H200, 4 ranks', 17.2, 15.79, True, 4, 4),
        Residual('h200x4-selftest-1', 'ipcbench selftest --out results/h200x4-selftest-1 --quiet',
                 '4 x NVIDIA H200, 4 ranks', 33.29, 32.88, True, 4, 4),
        Residual('all-2', 'ipcbench all --out tests/data/h200x4-1128/all-2 --quiet',
                 '4 x NVIDIA H200, 4 ranks', 54.7, 51.66, True, 4, 4),
        Residual('all-3', 'ipcbench all --out tests/data/h200x4-1128/all-3 --quiet',
                 '4 x NVIDIA H200, 4 ranks', 53.13, 51.66, True, 4, 4),
        Residual('all-4', 'ipcbench all --out tests/data/h200x4-1128/all-4 --quiet',
                 '4 x NVIDIA H200, 4 ranks', 51.21, 51.66, True, 4, 4),
        Residual('all-5', 'ipcbench all --out tests/data/h200x4-1128/all-5 --quiet',
                 '4 x NVIDIA H200, 4 ranks', 51.23, 51.66, True, 4, 4),
        Residual('all-6', 'ipcbench all --out tests/data/h200x4-1128/all-6 --quiet',
                 '4 x NVIDIA H200, 4 ranks', 52.77, 51.66, True, 4, 4),
        Residual('all-1', 'ipcbench all --out all-1',
                 '1 x NVIDIA H200, 2 ranks', 31.82, 30.59, True, 1, 2),
        Residual('all-2', 'ipcbench all --out all-2',
                 '1 x NVIDIA H200, 2 ranks', 28.82, 30.59, True, 1, 2),
        Residual('all-3', 'ipcbench all --out all-3',
                 '1 x NVIDIA H200, 2 ranks', 28.98, 30.59, True, 1, 2),
        Residual('all-4', 'ipcbench all --out all-4',
                 '1 x NVIDIA H200, 2 ranks', 30.99, 30.59, True, 1, 2),
        Residual('all-5', 'ipcbench all --out all-5',
                 '1 x NVIDIA H200, 2 ranks', 30.64, 30.59, True, 1, 2),
        Residual('all-6', 'ipcbench all --out all-6',
                 '1 x NVIDIA H200, 2 ranks', 31.25, 30.59, True, 1, 2),
        Residual('quick-1', 'ipcbench all --quick --out quick-1',
                 '1 x NVIDIA H200, 2 ranks', 7.07, 7.44, True, 1, 2),
        Residual('check-1', 'ipcbench check --out check-1',
                 '1 x NVIDIA H200, 2 ranks', 4.72, 4.25, True, 1, 2),
    ),
)
