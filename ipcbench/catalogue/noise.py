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

The floors (fractions of the median): over the rows of a kind, the largest half-spread of a row's medians across
a set of back-to-back runs of the same code on one machine (in log terms: sqrt(max/min) - 1), x 1.25, rounded up.
A compare of two runs allows both sides' noise, so any two processes of such a set pass with a margin. From 2 x
H100 80GB HBM3 through NVSwitch (2026-11-25), five sets of default runs: `mpirun -np 2 ipcbench all`, three of
source 585e3e69ffcd6bf4 (tests/data/h100x2), five of source 2a9b3a71e193df54 (tests/data/h100x2-current) and five
`--quick`; `copy kernel --sizes 4K,64K,1M,64M`, two sets of five (bound to cores, and not); and, refitted the same
way, two sets of `all` of the code that cut a run's host work (2026-11-25: three runs and two, on two machines; its
NCCL rows' shortened samples excepted, see ("nccl", "gated")). A GPU whose rows were never measured takes the
largest floor of any measured GPU for its kind (and says so: `basis`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# the size bands of every floor below: catalogue/row_kind.py, the one place a row's kind is computed
from ipcbench.catalogue.row_kind import BANDS, LARGE, MID, SMALL, RowKind, band  # noqa: F401  (the floors' bands)

NOISE_BASIS = "between-runs"  # meta.json's noise_basis of runs whose noise holds the floors below
OLD_BASIS = "within-run"  # runs without noise_basis: their noise is the within-run interval alone


# {gpu family: {(engine, timing): (small, mid, large)}}; timing: gated (events around a gated batch), window
# (both processes of one GPU on its clock), handoff (a hand-off between two processes' kernels), host (host clock)
FLOORS: dict[str, dict[tuple[str, str], tuple[float, float, float]]] = {
    "H100": {
        ("ce", "gated"): (0.065, 0.02, 0.0025),
        ("sm", "gated"): (0.08, 0.04, 0.005),
        ("sm_bulk", "gated"): (0.055, 0.035, 0.002),
        # NCCL's one-way 1 KiB latency read 5.19-6.18 us in runs whose two-sided samples were shortened to 1 ms
        # (2026-11-25); those samples are 3 ms again (core/pair.TWO_SIDED_MIN_SAMPLE_S), as in the runs fitted here
        ("nccl", "gated"): (0.03, 0.025, 0.01),
        ("nccl", "handoff"): (0.02, 0.025, 0.01),
        ("sm", "handoff"): (0.08, 0.035, 0.025),
        ("event", "handoff"): (0.06, 0.06, 0.06),
        ("shm", "handoff"): (0.16, 0.17, 0.155),
        # host-timed (Python in the loop): one --quick run's 64 KiB MPI latency read 5.3x the others' (the rule
        # gives 1.65 for small sizes; 2.5 lets two BASE runs hold such a process: these rows say little)
        ("mpi", "host"): (3.5, 0.7, 0.3),
        ("api", "host"): (1.4, 1.2, 0.95),
    },
    # H200 pairs (4 x H200, NV18 through NVSwitch, one machine, 2026-11-28; tests/data/h200x4-1128 all-1..6: six
    # `mpirun -np 4 ipcbench all` of one code, five back to back, 12 ordered pairs each): the same rule over that set,
    # but one set of one machine, so where its fit is under the H100's the H100's stays (as for one H200's same-GPU rows
    # below). It raised the copy engine's mid band (a 1 MiB bidirectional copy 0 <-> 3 read 5.2% apart: 3.5% against 2%)
    # and large one (0.3%), an SM or bulk copy's large band (0.7% and 0.3%), the SM ping-pong's small band (a 64 KiB 2
    # -> 3 ring latency 8.5 and 10.1 us: 11.5% against 8%); and measured a kind no pair had: the all-to-all's copies
    # timed in one window of every flow (suites/alltoall.py: its 8 MiB flows read 67.2-73.2 GB/s, a level each run took;
    # none under 256K, where it keeps the gated floor), which took the gated floors before. The cross-process event
    # ping-pong (one size) takes levels on two H200s, 6.15-6.7 us one way in most processes and 8.4-8.6 or 10.7-10.75 us
    # in some, in 2 of 16 `latency --quick` runs back to back on one machine (10.71 and 8.63 us: sqrt(10.71 / 6.15) - 1
    # = 0.32, x 1.25) and in 1 of 8 runs of `all` and `--quick` on another (8.54 us), 2026-11-26; on H100s it read
    # 6.15-6.73 us in every run.
    "H200": {
        ("ce", "gated"): (0.065, 0.035, 0.003),
        ("ce", "window"): (0.065, 0.055, 0.007),
        ("sm", "gated"): (0.08, 0.04, 0.007),
        ("sm_bulk", "gated"): (0.055, 0.035, 0.003),
        ("nccl", "gated"): (0.03, 0.025, 0.01),
        ("sm", "handoff"): (0.115, 0.035, 0.025),
        ("event", "handoff"): (0.40, 0.40, 0.40),
    },
}

# Rows of two ranks sharing one GPU (`same_gpu`): the driver runs a same-GPU copy as a kernel, and the two
# processes' kernels share the SMs, so they move more than a pair's. The same rule (rounded up to 0.5%, 0.1% under
# 2%), over five sets of back-to-back runs on one H100 each: five `mpirun -np 2 ipcbench copy kernel latency`
# (tests/data/h100x1, 2026-11-25) and four pairs of `mpirun -np 2 ipcbench all` (2026-11-26, tests/data/h100x1-0126).
# Under 64 MiB each new pair set a new largest move for some engine, each time 5.5-7.1% (half-spread), most often in
# the pool, VMM and cuda.core twins (a 4 MiB VMM copy-engine push 1,209.7 and 1,388.2 GB/s in two processes, a
# 16 MiB pool SM write 2,354 and 2,052, 1 MiB copies of every mechanism 455-458 or 502-513 GB/s by process): what
# moves there is where two processes of one GPU land, not the engine, so those bands take the largest of every
# engine of their timing. From 64 MiB up each engine keeps its own (a copy engine's 0.7%, a bidirectional SM
# copy's 3%).
SAME_GPU_FLOORS: dict[str, dict[tuple[str, str], tuple[float, float, float]]] = {
    "H100": {
        ("ce", "gated"): (0.09, 0.09, 0.009),
        ("ce", "window"): (0.085, 0.08, 0.01),
        ("sm", "gated"): (0.09, 0.09, 0.007),
        ("sm", "window"): (0.085, 0.08, 0.04),
        ("sm_bulk", "gated"): (0.09, 0.09, 0.004),
        ("sm_bulk", "window"): (0.085, 0.08, 0.04),
    },
    # One H200 (2026-11-26, tests/data/h200x1-0126): six back-to-back `mpirun -np 2 ipcbench all`. Its same-GPU
    # rows take levels by process that the H100's floors could not hold: all-4 read small rows slow, and every run
    # against it failed under them (the copy engine's one-way latency from rank 1 to rank 0, 4-256 B, 1.47-1.53 us in
    # the five other runs and 1.75 us in all-4: a 9.2% half-spread against the H100's 9%; 4 KiB SM copies and SM
    # latencies, 1.66-2.03 us). The same rule over that set, but one set of one machine: where its fit is under the
    # H100's (the gated mid band 6.5% against 9%, a bulk copy's window from 64 MiB 0.8% against 4%), the H100's
    # stays, as each new H100 set raised some floor that one set had fitted lower. A second set (2026-11-29,
    # tests/data/h200x1-1129 all-1..6, its rows of one context) raised the large band of SM and bulk copies one way (a
    # 128 MiB SM write read 1,928 and 1,887 GB/s in two of its runs: 1.1% half-spread, 1.4% against 0.9%; a bulk copy
    # 0.8% against 0.7%) and the window's mid band (a 1 MiB bulk copy both ways, 7.3%: 9.5% against 8%).
    "H200": {
        ("ce", "gated"): (0.12, 0.09, 0.012),
        ("ce", "window"): (0.105, 0.095, 0.012),
        ("sm", "gated"): (0.12, 0.09, 0.014),
        ("sm", "window"): (0.105, 0.095, 0.04),
        ("sm_bulk", "gated"): (0.12, 0.09, 0.008),
        ("sm_bulk", "window"): (0.105, 0.095, 0.04),
    },
}
# Rows sampled over K contexts (core/lanes.py, `contexts` > 1): the mean over the contexts moves between processes
# less than one context does, but more than its standard error says: on one H200 (2026-11-29, two ranks, six
# back-to-back `mpirun -np 2 ipcbench all` sampling 48 green contexts, each row's mean over its first 16 as a run of
# 16 would take it) the means of 58% of the rows' runs lay within two standard errors of the runs' median, and the
# largest half-spread of a kind did not shrink past 16 contexts (docs/measurement.md: what K buys). The same rule as
# the floors above over those means: the copy engine 4.3% (<= 256K, a 1 KiB one-way latency) and 3.9% (a 16 MiB pool
# copy), SM copies 5.3% (a 4 KiB VMM SM read) and 2.4%, bulk copies 1.4% and 2.7%, x 1.25, rounded up to 0.5%. Six
# runs of the final code (16 contexts, tests/data/h200x1-1129 all-1..6) then stayed inside these in every
# kind but one, the SM copies' mid band (a 2.7% half-spread: 3.4% against 3%), which the two sets together raised to
# 3.5%. A row's between-runs noise is the larger of its own contexts' (noise_contexts) and its kind's here. Only two
# ranks of one H200 without MPS were measured so: a pair of GPUs, or another GPU, keeps the one-context floors above;
# under MPS (not measured over contexts) two ranks of one H200 take these.
CONTEXT_FLOORS_FROM = 8  # rows of fewer contexts keep the one-context floors: these were fitted on rows of 10-16
CONTEXT_FLOORS: dict[str, dict[tuple[str, str], tuple[float, float]]] = {
    "H200": {
        ("ce", "gated"): (0.055, 0.05),
        ("sm", "gated"): (0.07, 0.035),
        ("sm_bulk", "gated"): (0.02, 0.035),
    },
}
# Same-GPU hand-offs without MPS (`timing` handoff, same GPU, no MPS): their time is the GPU scheduler's time slice.
# Two H100 runs minutes apart of the same shm_staged code put their rows 0.48x to 2.3x of each other
# (docs/report.md), and five runs on one H100 (2026-11-25) a one-way shm_staged latency up to twice the runs'
# common median (99% from it): 120%, in every band. Six runs on one H200 (2026-11-29, tests/data/h200x1-1129
# all-1..6) put a 4 KiB and an 8 KiB shm_staged push at two levels 4.1x apart (0.0024 against 0.0097 GB/s: two runs
# of six slow), which two BASE runs of one level and a NEW of the other must pass: 160%, as two sides summed allow
# 4.2x (2 x 1.6 + 1).
TIME_SLICED = 1.6
# Host-timed rows (timing `host`, Python in the loop) against two or more BASE runs (`ipcbench compare`, rule `tail`):
# how far one run of unchanged code reads a row from the BASE runs' geometric mean. A host API call or an MPI
# message takes levels by process (whole methods 2-2.5x in one run of six, tests/data/h200x1-0126 all-4; a 64 B MPI
# latency 6.6, 94 and 13.7 us in three runs, tests/data/h100x2-cut call4-all-1..3), so two BASE runs that agree say
# nothing of NEW's tail. Over the thirteen recorded sets of three or more back-to-back runs of one machine and command
# (tests/test_compare_host_timed.py: each run as NEW against every choice of two or more of the others), the largest
# move of a kind, (exp|log NEW - mean log BASE| - 1) x 1.25, rounded up to 5%: MPI staging per size band (a small
# message's latency 9.9x, a 256K-64M transfer 2.3x, 64M and more 1.4x), an API call's cost one level in every band
# (up to 4.6x, a handle operation on four H200s, 2026-11-28: its moves follow the process, not the buffer's size).
HOST_TAIL: dict[str, tuple[float, float, float]] = {
    "mpi": (11.15, 1.65, 0.55),
    "api": (4.5, 4.5, 4.5),
}
# Kinds measured nowhere (a same-GPU window, a time-sliced hand-off on one GPU): the largest floor of any kind in
# the band, so that a row nobody measured never claims to hold still.
UNKNOWN_KIND = "largest floor of the size band (this kind of row was never measured across runs)"


@dataclass(frozen=True)
class Floor:
    fraction: float  # the between-runs level of a row's noise, a fraction of its median
    basis: str  # where the number comes from


def family(gpu_model: str) -> str | None:
    """'NVIDIA H100 80GB HBM3' -> 'H100' (the families FLOORS knows, as a word: a GH200 is none of them), None for
    any other GPU."""
    for f in FLOORS:
        if re.search(rf"\b{f}\b", str(gpu_model)):
            return f
    return None


def _largest(kind: tuple[str, str], i: int) -> float | None:
    vals = [t[kind][i] for t in FLOORS.values() if kind in t]
    return max(vals) if vals else None


def floor_for(gpu_model: str, engine: str, timing: str, nbytes: int, time_sliced: bool = False,
              same_gpu: bool = False, contexts: int = 1) -> Floor:
    """The between-runs floor of a row of this GPU, engine, timing and size (`same_gpu`: two ranks of one GPU;
    `time_sliced`: a hand-off between two processes of one GPU without MPS; `contexts`: the contexts its samples
    spread over: CONTEXT_FLOORS from CONTEXT_FLOORS_FROM where measured)."""
    if time_sliced:
        return Floor(TIME_SLICED, "a time-sliced hand-off (same GPU, no MPS): the GPU scheduler's time slice")
    i = BANDS.index(band(nbytes))
    fam = family(gpu_model)
    over = CONTEXT_FLOORS.get(fam or "", {})
    if contexts >= CONTEXT_FLOORS_FROM and same_gpu and i < 2 and (engine, timing) in over:
        return Floor(over[(engine, timing)][i], f"measured over contexts on one {fam} (two ranks)")
    if same_gpu:
        fam = family(gpu_model)
        if fam in SAME_GPU_FLOORS and (engine, timing) in SAME_GPU_FLOORS[fam]:
            return Floor(SAME_GPU_FLOORS[fam][(engine, timing)][i], f"measured on one {fam} (two ranks)")
        known = [t[(engine, timing)][i] for t in SAME_GPU_FLOORS.values() if (engine, timing) in t]
        if known:
            return Floor(max(known), f"largest of the GPUs measured with two ranks ({gpu_model or 'this GPU'} never)")
    fam = family(gpu_model)
    # a window of a pair's copies (the all-to-all's flows, every flow of the node timed at once): its family's own
    # floor where measured; else, where some GPU measured it, the largest of those (a GPU never measured for a kind
    # takes the largest known, as below); else the gated floor of its engine, the same copies one pair at a time
    measured_window = timing == "window" and any((engine, timing) in t for t in FLOORS.values())
    kind = (engine, timing if timing != "window" or measured_window else "gated")
    if fam is not None and kind in FLOORS[fam]:
        return Floor(FLOORS[fam][kind][i], f"measured on {fam} pairs")
    largest = _largest(kind, i)
    if largest is not None:
        what = f"{fam} never measured for {engine}/{timing}" if fam else f"{gpu_model or 'this GPU'} never measured"
        return Floor(largest, f"largest of the measured GPUs ({what})")
    return Floor(max(t[k][i] for t in FLOORS.values() for k in t), UNKNOWN_KIND)


def floor_of(gpu_model: str, kind: RowKind) -> Floor:
    """The between-runs floor of a row of this kind on this GPU model: what the sampler stops at a share of
    (core/context.py), what a row states (core/rows.py) and what compare allows (judging/significance.py)."""
    return floor_for(gpu_model, kind.engine, kind.timing, kind.nbytes, time_sliced=kind.time_sliced,
                     same_gpu=kind.same_gpu, contexts=kind.contexts)


def host_tail(engine: str, nbytes: int) -> Floor:
    """How far a host-timed row of this engine and size moves from the mean of two or more BASE runs (HOST_TAIL);
    an engine measured nowhere takes the largest tail of the size band."""
    i = BANDS.index(band(nbytes))
    if engine in HOST_TAIL:
        return Floor(HOST_TAIL[engine][i], f"host-timed {engine} rows of the recorded sets")
    return Floor(max(t[i] for t in HOST_TAIL.values()), f"largest host-timed tail of the size band ({engine} never)")


def combined(within: float | None, floor: float) -> float | None:
    """The row's honest noise: its within-run noise and the between-runs floor as independent levels. None where
    the within-run noise could not be estimated (fewer than two samples): the row says so, never zero."""
    if within is None:
        return None
    return (within * within + floor * floor) ** 0.5
