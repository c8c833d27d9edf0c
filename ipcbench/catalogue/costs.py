"""What a run costs: the fitted constants of the dry run's cost model (run/costmodel.py), with where they come from.

The model, per suite of a plan (docs/suites.md, "How long `all` takes"):

    suite_s = once_s + sum over its steps of walked x step.cost x (samples_factor x min_samples x sample_s + fixed_s)

`walked`: the measurements the run walks (a round of disjoint pairs costs one); `sample_s`: the rule's sample length
for each size (SamplingRule.sample_s; 3 ms at least for a two-sided step), at least the step's min_sample_s;
`samples_factor`: samples a measurement takes, as a multiple of the rule's minimum (counted in results.csv); `fixed_s`
(per suite): the work around the samples (calibration, fill, verify, barriers, the row's bookkeeping); `once_s` (per
suite): what a suite pays once (NCCL communicators, kernels loaded). Ranks sharing GPUs multiply the measurements both
ranks of a pair drive (run/costmodel.PlanStep.both_drive; not one rank's, nor `once_s`) by `shared_gpu_factor`,
every rank on one GPU by `one_gpu_factor`. A run adds `close_s` (meta.json's wall_s
less its suites' walls: releasing and closing) and `startup_s` (the user's wall, mpirun to exit, less wall_s: Python,
MPI and CUDA start, buffers). Two commands add what they do beyond their suites, each fitted to that command's runs
against the model of its suites: `ipcbench check` `check_s` (its verdict after the run: reading the run back, judging
it, writing its outputs; and what the suites' constants, fitted on `all`, miss for check's small plan), `ipcbench
selftest` `anchor_s` per anchor measurement (one size at one place of its buffers, selftest/plan.anchor_units).

Everything below the marker is written by `python -m ipcbench.run.costfit RUN_DIR... --walls FILE --write`: never edit
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


# --- fitted table (written by python -m ipcbench.run.costfit --write) ---
COSTS = CostModel(
    samples_factor=1.081,
    suites={
        'copy': SuiteCost(fixed_s=0.00383, once_s=0.067),
        'kernel': SuiteCost(fixed_s=0.00151, once_s=0.129),
        'pool': SuiteCost(fixed_s=0.00246, once_s=0.078),
        'vmm': SuiteCost(fixed_s=0.00157, once_s=0.079),
        'staged': SuiteCost(fixed_s=0.02431, once_s=0.236, samples=False),
        'nccl': SuiteCost(fixed_s=0.00207, once_s=0.297),
        'latency': SuiteCost(fixed_s=0.00578, once_s=0.0),
        'handles': SuiteCost(fixed_s=0.00477, once_s=0.1, samples=False),
        'pipeline': SuiteCost(fixed_s=0.00735, once_s=0.0),
    },
    default=SuiteCost(fixed_s=0.00596, once_s=0.11),
    shared_gpu_factor=1.9425,
    one_gpu_factor=2.2245,
    check_s=-0.168,
    anchor_s=0.04921,
    close_s=0.328,
    startup_s=2.423,
    startup_basis='measured: mpirun to exit less wall_s, 9 run(s) of --walls',
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
        'results/h200x2-selftest-1',
        'results/h200x2-selftest-2',
    ),
    residuals=(
        Residual('h100x1-all-1', 'ipcbench all --quiet --out results/h100x1-all-1',
                 '1 x NVIDIA H100 80GB HBM3, 2 ranks', 29.48, 28.38, True, 1, 2),
        Residual('h100x1-all-2', 'ipcbench all --quiet --out results/h100x1-all-2',
                 '1 x NVIDIA H100 80GB HBM3, 2 ranks', 27.43, 28.38, True, 1, 2),
        Residual('h100x1-check-1', 'ipcbench check --quiet --out results/h100x1-check-1',
                 '1 x NVIDIA H100 80GB HBM3, 2 ranks', 3.17, 3.33, True, 1, 2),
        Residual('h100x1-check-2', 'ipcbench check --quiet --out results/h100x1-check-2',
                 '1 x NVIDIA H100 80GB HBM3, 2 ranks', 2.95, 3.33, True, 1, 2),
        Residual('h100x1-quick-1', 'ipcbench all --quick --quiet --out results/h100x1-quick-1',
                 '1 x NVIDIA H100 80GB HBM3, 2 ranks', 6.21, 6.71, True, 1, 2),
        Residual('h100x1-selftest-1', 'ipcbench selftest --quiet --out results/h100x1-selftest-1',
                 '1 x NVIDIA H100 80GB HBM3, 2 ranks', 16.66, 17.38, True, 1, 2),
        Residual('h200x2-all-1', 'ipcbench all --quiet --out results/h200x2-all-1',
                 '2 x NVIDIA H200, 2 ranks', 20.3, 19.46, True, 2, 2),
        Residual('h200x2-all-2', 'ipcbench all --quiet --out results/h200x2-all-2',
                 '2 x NVIDIA H200, 2 ranks', 19.45, 19.46, True, 2, 2),
        Residual('h200x2-all-3', 'ipcbench all --quiet --out results/h200x2-all-3',
                 '2 x NVIDIA H200, 2 ranks', 20.64, 19.46, True, 2, 2),
        Residual('h200x2-check-1', 'ipcbench check --quiet --out results/h200x2-check-1',
                 '2 x NVIDIA H200, 2 ranks', 3.59, 3.13, True, 2, 2),
        Residual('h200x2-check-2', 'ipcbench check --quiet --out results/h200x2-check-2',
                 '2 x NVIDIA H200, 2 ranks', 3.25, 3.13, True, 2, 2),
        Residual('h200x2-check-3', 'ipcbench check --quiet --out results/h200x2-check-3',
                 '2 x NVIDIA H200, 2 ranks', 3.09, 3.13, True, 2, 2),
        Residual('h200x2-np4-quick', 'ipcbench all --quick --quiet --out results/h200x2-np4-quick',
                 '2 x NVIDIA H200, 4 ranks', 15.45, 14.94, True, 2, 4),
        Residual('h200x2-quick-1', 'ipcbench all --quick --quiet --out results/h200x2-quick-1',
                 '2 x NVIDIA H200, 2 ranks', 6.62, 6.79, True, 2, 2),
        Residual('h200x2-quick-2', 'ipcbench all --quick --quiet --out results/h200x2-quick-2',
                 '2 x NVIDIA H200, 2 ranks', 6.36, 6.79, True, 2, 2),
        Residual('h200x2-selftest-1', 'ipcbench selftest --quiet --out results/h200x2-selftest-1',
                 '2 x NVIDIA H200, 2 ranks', 32.0, 31.65, True, 2, 2),
        Residual('h200x2-selftest-2', 'ipcbench selftest --quiet --out results/h200x2-selftest-2',
                 '2 x NVIDIA H200, 2 ranks', 31.47, 31.65, True, 2, 2),
    ),
)
