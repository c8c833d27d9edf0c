"""A row's honest noise: how far its median moves between runs of the same code on the same node.

Within one process a row's samples agree to 0.1-0.4%; between processes the same row moves up to 10%
(docs/measurement.md, "What moves a row between runs"). Measured on two H100s (tests/bench_variance.py): not the
SM clock (1,980 MHz in every gate of every process), not the CPU core (bound or not: the same spread), not time
within a process (0.05-0.1% over seconds), not the loaded module (reloaded: 0.1%), not where in its allocation a
buffer lies (0.1-3% within a process, and the median over five places moves between processes as much as one
place does). What is left is the process itself, which no repetition inside one run can sample: as Kalibera and
Jones put it, a level of variance whose repetitions a run cannot make. So that level is measured across runs
(five or more processes of the same code on the same node), once, and stated here as a floor per kind of row;
a row's `noise` is its within-run noise and its kind's floor, combined as independent levels:
sqrt(within^2 + floor^2). Runs that state it say `"noise_basis": "between-runs"` in meta.json.

The floors (fractions of the median): the 95th percentile, over the rows of a kind, of the largest move of a
run's median from the common median of the runs, rounded up, from: 2 x H100 80GB HBM3 through NVSwitch,
`mpirun -np 2 ipcbench all`, three runs of source 585e3e69ffcd6bf4 (tests/data/h100x2) and five of the placement
experiment (2026-11-25); 2 x H200 through NVSwitch, three `copy kernel latency staged` runs (tests/data/compare
quiet1-3). A GPU whose rows were never measured takes the largest floor of any measured GPU for its kind (and says
so: `basis`).
"""

from __future__ import annotations

from dataclasses import dataclass

NOISE_BASIS = "between-runs"  # meta.json's noise_basis of runs whose noise holds the floors below
OLD_BASIS = "within-run"  # runs without noise_basis: their noise is the within-run interval alone

SMALL, MID, LARGE = "<= 256K", "256K-64M", ">= 64M"
BANDS = (SMALL, MID, LARGE)


def band(nbytes: int) -> str:
    """The size band of a transfer: where a row's run-to-run movement changes character."""
    if nbytes <= 256 << 10:
        return SMALL
    if nbytes < 64 << 20:
        return MID
    return LARGE


# {gpu family: {(engine, timing): (small, mid, large)}}; timing: gated (events around a gated batch), window
# (both processes of one GPU on its clock), handoff (a hand-off between two processes' kernels), host (host clock)
FLOORS: dict[str, dict[tuple[str, str], tuple[float, float, float]]] = {
    "H100": {
        ("ce", "gated"): (0.025, 0.012, 0.0025),
        ("sm", "gated"): (0.10, 0.045, 0.0025),
        ("sm_bulk", "gated"): (0.065, 0.040, 0.0025),
        ("nccl", "gated"): (0.035, 0.020, 0.010),
        ("nccl", "handoff"): (0.035, 0.020, 0.010),
        ("sm", "handoff"): (0.08, 0.035, 0.035),
        ("event", "handoff"): (0.06, 0.06, 0.06),
        ("shm", "handoff"): (0.08, 0.25, 0.25),
        ("mpi", "host"): (0.65, 0.40, 0.35),
        ("api", "host"): (0.70, 0.65, 0.70),
    },
    "H200": {
        ("ce", "gated"): (0.015, 0.005, 0.002),
        ("sm", "gated"): (0.003, 0.005, 0.002),
        ("mpi", "host"): (0.25, 0.10, 0.10),
        ("shm", "handoff"): (0.01, 0.01, 0.005),
    },
}
# Same-GPU hand-offs without MPS (`timing` handoff, same GPU, no MPS): their time is the GPU scheduler's time slice,
# and two H100 runs minutes apart of the same shm_staged code put their rows 0.48x to 2.3x of each other
# (docs/report.md): sqrt(2.3) - 1 = 52% from their middle, with a margin, in every band.
TIME_SLICED = 0.65
# Kinds measured nowhere (a same-GPU window, a time-sliced hand-off on one GPU): the largest floor of any kind in
# the band, so that a row nobody measured never claims to hold still.
UNKNOWN_KIND = "largest floor of the size band (this kind of row was never measured across runs)"


@dataclass(frozen=True)
class Floor:
    fraction: float  # the between-runs level of a row's noise, a fraction of its median
    basis: str  # where the number comes from


def family(gpu_model: str) -> str | None:
    """'NVIDIA H100 80GB HBM3' -> 'H100' (the families FLOORS knows), None for any other GPU."""
    for f in FLOORS:
        if f in str(gpu_model):
            return f
    return None


def _largest(kind: tuple[str, str], i: int) -> float | None:
    vals = [t[kind][i] for t in FLOORS.values() if kind in t]
    return max(vals) if vals else None


def floor_for(gpu_model: str, engine: str, timing: str, nbytes: int, time_sliced: bool = False) -> Floor:
    """The between-runs floor of a row of this GPU, engine, timing and size (`time_sliced`: a hand-off between two
    processes of one GPU without MPS)."""
    if time_sliced:
        return Floor(TIME_SLICED, "a time-sliced hand-off (same GPU, no MPS): the GPU scheduler's time slice")
    i = BANDS.index(band(nbytes))
    kind = (engine, timing if timing != "window" else "gated")
    fam = family(gpu_model)
    if fam is not None and kind in FLOORS[fam]:
        return Floor(FLOORS[fam][kind][i], f"measured on {fam} pairs")
    largest = _largest(kind, i)
    if largest is not None:
        what = f"{fam} never measured for {engine}/{timing}" if fam else f"{gpu_model or 'this GPU'} never measured"
        return Floor(largest, f"largest of the measured GPUs ({what})")
    return Floor(max(t[k][i] for t in FLOORS.values() for k in t), UNKNOWN_KIND)


def combined(within: float | None, floor: float) -> float | None:
    """The row's honest noise: its within-run noise and the between-runs floor as independent levels. None where
    the within-run noise could not be estimated (fewer than two samples): the row says so, never zero."""
    if within is None:
        return None
    return (within * within + floor * floor) ** 0.5
