"""What a run costs: the fitted constants of the dry run's cost model (run/costmodel.py), with where they come from.

The model, per suite of a plan (docs/suites.md, "How long `all` takes"):

    suite_s = once_s + sum over its steps of walked x step.cost x (samples_factor x min_samples x sample_s + fixed_s)

`walked`: the measurements the run walks (a round of disjoint pairs costs one); `sample_s`: the rule's sample length
for each size (SamplingRule.sample_s; 3 ms at least for a two-sided step), at least the step's min_sample_s;
`samples_factor`: samples a measurement takes, as a multiple of the rule's minimum (counted in results.csv); `fixed_s`
(per suite): the work around the samples (calibration, fill, verify, barriers, the row's bookkeeping); `once_s` (per
suite): what a suite pays once (NCCL communicators, kernels loaded). Ranks sharing GPUs multiply the measurements both
ranks of a pair drive (run/costmodel.PlanStep.both_drive; not one rank's, nor `once_s`) by `shared_gpu_factor`,
every rank on one GPU by `one_gpu_factor`. A run adds `close_s` (meta.json's wall_s less its suites' walls:
releasing and closing) and `startup_s` (the user's wall, mpirun to exit, less wall_s: Python, MPI and CUDA start,
buffers; a one-GPU node's its own, `one_gpu_startup_s`). Two commands add what they do beyond their suites, each
fitted to that command's runs against the model of its suites: `ipcbench check` `check_s` (its verdict after the
run: reading the run back, judging it, writing its outputs; and what the suites' constants, fitted on `all`, miss
for check's small plan), `ipcbench selftest` `anchor_s` per anchor measurement (one size at one place of its
buffers, selftest/plan.anchor_units; a one-GPU node's, copies within the GPU, its own: `one_gpu_anchor_s`).

Everything below the marker is written by `python tools/costfit.py RUN_DIR... --walls FILE --write`: never edit
it by hand, refit.
"""

from __future__ import annotations

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
    close_s: float  # meta.json wall_s - sum(suite_wall_s)
    startup_s: float  # the user's wall - wall_s
    startup_basis: str  # how startup_s was had: "measured (--walls, N runs)" or "assumed: ..."
    fitted: str  # the date of the fit
    machines: tuple[str, ...]  # the machine kinds of the runs fitted
    runs: tuple[str, ...]  # the run directories fitted, as given
    residuals: tuple[Residual, ...] = field(default_factory=tuple)
    # every rank on one GPU (a one-GPU machine): its own factor, since no pair crosses a link and the two ranks' kernels
    # are time-sliced on every measurement; None: shared_gpu_factor
    one_gpu_factor: float | None = None
    # ipcbench check: the user's wall less what the model says of its suites, closing and start-up; None: never fitted
    check_s: float | None = None
    # ipcbench selftest: seconds per anchor measurement (selftest/plan.anchor_units), in wall_s; None: never fitted
    anchor_s: float | None = None
    # a one-GPU node (every rank on one GPU), fitted on its own runs: its start-up (one GPU's context, NVML and
    # buffers; 2.0 s against 2.9 on two GPUs) and its selftest anchors (copies within the GPU, whose 512-transfer
    # repetitions of small sizes are shorter than a link's); None: startup_s, anchor_s
    one_gpu_startup_s: float | None = None
    one_gpu_anchor_s: float | None = None

    def startup_for(self, gpus: int) -> float:
        """The start-up of a node of `gpus` GPUs (0: not known, a node of several)."""
        return self.one_gpu_startup_s if gpus == 1 and self.one_gpu_startup_s is not None else self.startup_s

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


# --- fitted table (written by python tools/costfit.py --write) ---
COSTS = CostModel(
    samples_factor=1.053,
    suites={
        'copy': SuiteCost(fixed_s=0.00279, once_s=0.087),
        'kernel': SuiteCost(fixed_s=0.00149, once_s=0.163),
        'pool': SuiteCost(fixed_s=0.00189, once_s=0.138),
        'vmm': SuiteCost(fixed_s=0.0015, once_s=0.098),
        'staged': SuiteCost(fixed_s=0.02332, once_s=0.3, samples=False),
        'nccl': SuiteCost(fixed_s=0.00043, once_s=0.395),
        'latency': SuiteCost(fixed_s=0.00609, once_s=0.0),
        'handles': SuiteCost(fixed_s=0.00346, once_s=0.079, samples=False),
        'pipeline': SuiteCost(fixed_s=0.00789, once_s=0.0),
    },
    default=SuiteCost(fixed_s=0.00543, once_s=0.14),
    shared_gpu_factor=2.0941,
    one_gpu_factor=1.9553,
    check_s=0.01,
    anchor_s=0.04225,
    one_gpu_anchor_s=0.03409,
    close_s=0.241,
    startup_s=2.527,
    one_gpu_startup_s=2.038,
    startup_basis='measured: mpirun to exit less wall_s, 18 run(s) of --walls',
    fitted='2026-11-26',
    machines=(
        '1 x NVIDIA H100 80GB HBM3, 2 ranks',
        '2 x NVIDIA H200, 2 ranks',
        '2 x NVIDIA H200, 4 ranks',
    ),
    runs=(
        'results/h100x1-all-1',
        'results/h100x1-all-2',
        'results/h100x1-check-1',
        'results/h100x1-check-2',
        'results/h100x1-quick-1',
        'results/h100x1-selftest-1',
        'results/h200x2-all-1',
        'results/h200x2-all-2',
        'results/h200x2-all-3',
        'results/h200x2-check-1',
        'results/h200x2-check-2',
        'results/h200x2-check-3',
        'results/h200x2-np4-quick',
        'results/h200x2-quick-1',
        'results/h200x2-quick-2',
        'results/h200x2-quick-3',
        'results/h200x2-selftest-1',
        'results/h200x2-selftest-2',
        'tests/data/h200x2-0126/all-1',
        'tests/data/h200x2-0126/all-2',
        'tests/data/h200x2-0126/all-3',
        'tests/data/h200x2-0126/all-4',
        'tests/data/h200x2-0126/all-5',
        'tests/data/h200x2-0126/quick-1',
        'tests/data/h200x2-0126/quick-2',
        'tests/data/h200x2-0126/quick-3',
    ),
    residuals=(
        Residual('h100x1-all-1', 'ipcbench all --quiet --out results/h100x1-all-1',
                 '1 x NVIDIA H100 80GB HBM3, 2 ranks', 24.57, 24.71, True, 1, 2),
        Residual('h100x1-all-2', 'ipcbench all --quiet --out results/h100x1-all-2',
                 '1 x NVIDIA H100 80GB HBM3, 2 ranks', 23.92, 24.71, True, 1, 2),
        Residual('h100x1-check-1', 'ipcbench check --quiet --out results/h100x1-check-1',
                 '1 x NVIDIA H100 80GB HBM3, 2 ranks', 2.92, 3.02, True, 1, 2),
        Residual('h100x1-check-2', 'ipcbench check --quiet --out results/h100x1-check-2',
                 '1 x NVIDIA H100 80GB HBM3, 2 ranks', 2.63, 3.02, True, 1, 2),
        Residual('h100x1-quick-1', 'ipcbench all --quick --quiet --out results/h100x1-quick-1',
                 '1 x NVIDIA H100 80GB HBM3, 2 ranks', 6.05, 5.83, True, 1, 2),
        Residual('h100x1-selftest-1', 'ipcbench selftest --quiet --out results/h100x1-selftest-1',
                 '1 x NVIDIA H100 80GB HBM3, 2 ranks', 13.89, 14.21, True, 1, 2),
        Residual('h200x2-all-1', 'ipcbench all --quiet --out results/h200x2-all-1',
                 '2 x NVIDIA H200, 2 ranks', 21.7, 18.83, True, 2, 2),
        Residual('h200x2-all-2', 'ipcbench all --quiet --out results/h200x2-all-2',
                 '2 x NVIDIA H200, 2 ranks', 21.19, 18.83, True, 2, 2),
        Residual('h200x2-all-3', 'ipcbench all --quiet --out results/h200x2-all-3',
                 '2 x NVIDIA H200, 2 ranks', 20.86, 18.83, True, 2, 2),
        Residual('h200x2-check-1', 'ipcbench check --quiet --out results/h200x2-check-1',
                 '2 x NVIDIA H200, 2 ranks', 4.13, 3.36, True, 2, 2),
        Residual('h200x2-check-2', 'ipcbench check --quiet --out results/h200x2-check-2',
                 '2 x NVIDIA H200, 2 ranks', 3.28, 3.36, True, 2, 2),
        Residual('h200x2-check-3', 'ipcbench check --quiet --out results/h200x2-check-3',
                 '2 x NVIDIA H200, 2 ranks', 3.16, 3.36, True, 2, 2),
        Residual('h200x2-np4-quick', 'ipcbench all --quick --quiet --out results/h200x2-np4-quick',
                 '2 x NVIDIA H200, 4 ranks', 16.21, 15.32, True, 2, 4),
        Residual('h200x2-quick-1', 'ipcbench all --quick --quiet --out results/h200x2-quick-1',
                 '2 x NVIDIA H200, 2 ranks', 7.2, 6.77, True, 2, 2),
        Residual('h200x2-quick-2', 'ipcbench all --quick --quiet --out results/h200x2-quick-2',
                 '2 x NVIDIA H200, 2 ranks', 7.5, 6.77, True, 2, 2),
        Residual('h200x2-quick-3', 'ipcbench all --quick --quiet --out results/h200x2-quick-3',
                 '2 x NVIDIA H200, 2 ranks', 7.41, 6.77, True, 2, 2),
        Residual('h200x2-selftest-1', 'ipcbench selftest --quiet --out results/h200x2-selftest-1',
                 '2 x NVIDIA H200, 2 ranks', 28.59, 28.98, True, 2, 2),
        Residual('h200x2-selftest-2', 'ipcbench selftest --quiet --out results/h200x2-selftest-2',
                 '2 x NVIDIA H200, 2 ranks', 29.11, 28.98, True, 2, 2),
        Residual('all-1', 'ipcbench all --quiet --out tests/data/h200x2-0126/all-1',
                 '2 x NVIDIA H200, 2 ranks', 18.99, 18.83, True, 2, 2),
        Residual('all-2', 'ipcbench all --quiet --out tests/data/h200x2-0126/all-2',
                 '2 x NVIDIA H200, 2 ranks', 17.71, 18.83, True, 2, 2),
        Residual('all-3', 'ipcbench all --quiet --out tests/data/h200x2-0126/all-3',
                 '2 x NVIDIA H200, 2 ranks', 18.03, 18.83, True, 2, 2),
        Residual('all-4', 'ipcbench all --quiet --out tests/data/h200x2-0126/all-4',
                 '2 x NVIDIA H200, 2 ranks', 17.77, 18.83, True, 2, 2),
        Residual('all-5', 'ipcbench all --quiet --out tests/data/h200x2-0126/all-5',
                 '2 x NVIDIA H200, 2 ranks', 17.51, 18.83, True, 2, 2),
        Residual('quick-1', 'ipcbench all --quick --quiet --out tests/data/h200x2-0126/quick-1',
                 '2 x NVIDIA H200, 2 ranks', 6.26, 6.77, True, 2, 2),
        Residual('quick-2', 'ipcbench all --quick --quiet --out tests/data/h200x2-0126/quick-2',
                 '2 x NVIDIA H200, 2 ranks', 6.33, 6.77, True, 2, 2),
        Residual('quick-3', 'ipcbench all --quick --quiet --out tests/data/h200x2-0126/quick-3',
                 '2 x NVIDIA H200, 2 ranks', 6.29, 6.77, True, 2, 2),
    ),
)
