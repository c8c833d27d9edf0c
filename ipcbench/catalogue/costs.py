"""What a run costs: the fitted constants of the dry run's cost model (run/costmodel.py), with where they come from.

The model, per suite of a plan (docs/suites.md, "How long `all` takes"):

    suite_s = once_s + sum over its steps of walked x step.cost x (samples_factor x min_samples x sample_s + fixed_s)

`walked`: the measurements the run walks (a round of disjoint pairs costs one); `sample_s`: max(--min-time, the
step's min_sample_s); `samples_factor`: samples a measurement takes, as a multiple of the rule's minimum (counted in
results.csv); `fixed_s` (per suite): the work around the samples (calibration, fill, verify, barriers, the row's
bookkeeping); `once_s` (per suite): what a suite pays once (NCCL communicators, kernels loaded). Ranks sharing a GPU
multiply it all by `shared_gpu_factor`. A run adds `close_s` (meta.json's wall_s less its suites' walls: releasing
and closing) and `startup_s` (the user's wall, mpirun to exit, less wall_s: Python, MPI and CUDA start, buffers).

Everything below the marker is written by `python -m ipcbench.run.costfit RUN_DIR... --walls FILE --write`:
never edit it by hand, refit.
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
    shared_gpu_factor: float  # ranks sharing a GPU: every suite's time x this
    close_s: float  # meta.json wall_s - sum(suite_wall_s)
    startup_s: float  # the user's wall - wall_s
    startup_basis: str  # how startup_s was had: "measured (--walls, N runs)" or "assumed: ..."
    fitted: str  # the date of the fit
    machines: tuple[str, ...]  # the machine kinds of the runs fitted
    runs: tuple[str, ...]  # the run directories fitted, as given
    residuals: tuple[Residual, ...] = field(default_factory=tuple)

    def suite(self, name: str) -> SuiteCost:
        return self.suites.get(name, self.default)

    @property
    def worst_residual_pct(self) -> float:
        return max((abs(r.pct) for r in self.residuals), default=0.0)


# --- fitted table (written by python -m ipcbench.run.costfit --write) ---
COSTS = CostModel(
    samples_factor=1.2676,
    suites={
        'copy': SuiteCost(fixed_s=0.00381, once_s=0.146),
        'kernel': SuiteCost(fixed_s=0.02204, once_s=1.2),
        'pool': SuiteCost(fixed_s=0.01268, once_s=0.597),
        'vmm': SuiteCost(fixed_s=0.01288, once_s=0.572),
        'staged': SuiteCost(fixed_s=0.02563, once_s=0.046),
        'nccl': SuiteCost(fixed_s=0.00279, once_s=1.745),
        'latency': SuiteCost(fixed_s=0.01916, once_s=0.0),
        'handles': SuiteCost(fixed_s=0.01907, once_s=0.0, samples=False),
        'pipeline': SuiteCost(fixed_s=0.00418, once_s=0.0),
    },
    default=SuiteCost(fixed_s=0.01358, once_s=0.478),
    shared_gpu_factor=1.4118,
    close_s=0.24,
    startup_s=3.0,
    startup_basis='assumed: no wall from mpirun to exit was measured',
    fitted='2026-11-25',
    machines=(
        '2 x NVIDIA H100 80GB HBM3, 2 ranks',
        '1 x NVIDIA H100 80GB HBM3, 2 ranks',
    ),
    runs=(
        'tests/data/h100x2-current/all-1',
        'tests/data/h100x2-current/all-2',
        'tests/data/h100x2-current/all-3',
        'tests/data/h100x2-current/all-4',
        'tests/data/h100x2-current/all-5',
        'tests/data/h100x2-current/quick-1',
        'tests/data/h100x2-current/quick-2',
        'tests/data/h100x2-current/quick-3',
        'tests/data/h100x2-current/quick-4',
        'tests/data/h100x2-current/quick-5',
        'tests/data/h100x1/one-1',
        'tests/data/h100x1/one-2',
        'tests/data/h100x1/one-3',
        'tests/data/h100x1/one-4',
        'tests/data/h100x1/one-5',
    ),
    residuals=(
        Residual('all-1', 'ipcbench all --quiet --out all-1',
                 '2 x NVIDIA H100 80GB HBM3, 2 ranks', 46.08, 43.92, False, 2),
        Residual('all-2', 'ipcbench all --quiet --out all-2',
                 '2 x NVIDIA H100 80GB HBM3, 2 ranks', 43.95, 43.92, False, 2),
        Residual('all-3', 'ipcbench all --quiet --out all-3',
                 '2 x NVIDIA H100 80GB HBM3, 2 ranks', 43.29, 43.92, False, 2),
        Residual('all-4', 'ipcbench all --quiet --out all-4',
                 '2 x NVIDIA H100 80GB HBM3, 2 ranks', 43.61, 43.92, False, 2),
        Residual('all-5', 'ipcbench all --quiet --out all-5',
                 '2 x NVIDIA H100 80GB HBM3, 2 ranks', 45.62, 43.92, False, 2),
        Residual('quick-1', 'ipcbench all --quick --quiet --out quick-1',
                 '2 x NVIDIA H100 80GB HBM3, 2 ranks', 11.81, 11.11, False, 2),
        Residual('quick-2', 'ipcbench all --quick --quiet --out quick-2',
                 '2 x NVIDIA H100 80GB HBM3, 2 ranks', 11.09, 11.11, False, 2),
        Residual('quick-3', 'ipcbench all --quick --quiet --out quick-3',
                 '2 x NVIDIA H100 80GB HBM3, 2 ranks', 11.41, 11.11, False, 2),
        Residual('quick-4', 'ipcbench all --quick --quiet --out quick-4',
                 '2 x NVIDIA H100 80GB HBM3, 2 ranks', 11.03, 11.11, False, 2),
        Residual('quick-5', 'ipcbench all --quick --quiet --out quick-5',
                 '2 x NVIDIA H100 80GB HBM3, 2 ranks', 11.27, 11.11, False, 2),
        Residual('one-1', 'ipcbench copy kernel latency --quiet --out one-1',
                 '1 x NVIDIA H100 80GB HBM3, 2 ranks', 29.7, 27.34, False, 1),
        Residual('one-2', 'ipcbench copy kernel latency --quiet --out one-2',
                 '1 x NVIDIA H100 80GB HBM3, 2 ranks', 27.54, 27.34, False, 1),
        Residual('one-3', 'ipcbench copy kernel latency --quiet --out one-3',
                 '1 x NVIDIA H100 80GB HBM3, 2 ranks', 27.2, 27.34, False, 1),
        Residual('one-4', 'ipcbench copy kernel latency --quiet --out one-4',
                 '1 x NVIDIA H100 80GB HBM3, 2 ranks', 25.94, 27.34, False, 1),
        Residual('one-5', 'ipcbench copy kernel latency --quiet --out one-5',
                 '1 x NVIDIA H100 80GB HBM3, 2 ranks', 26.84, 27.34, False, 1),
    ),
)
