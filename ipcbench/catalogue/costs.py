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

    @property
    def pct(self) -> float:
        return (self.predicted_s / self.measured_s - 1) * 100


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
    samples_factor=1.0,
    suites={},
    default=SuiteCost(fixed_s=0.031, once_s=0.0),
    shared_gpu_factor=1.4,
    close_s=0.4,
    startup_s=3.0,
    startup_basis="assumed: no wall from mpirun to exit was measured",
    fitted="",
    machines=(),
    runs=(),
)
