"""Suite `staged`: the host paths that CUDA IPC replaces, measured for every ordered pair (push rows).

shm_staged (pipelined through pinned POSIX shared memory, device-side flags, no Python timed) and
mpi_staged (pinned host buffers + MPI Isend/Irecv, chunked and pipelined by the ranks). The report
divides every IPC method's bandwidth by the best of these. The methods live in staged.py; this
module only plans (no CUDA import). Chunk sizes and slot counts: IPCBENCH_{SHM,MPI}_{CHUNK,SLOTS}.
"""

from __future__ import annotations

from .suites import Step, register
from .world import ordered_pairs

ABOUT = ("host-staged baselines: shm_staged (D2H/H2D pipelined through pinned POSIX shared memory with "
         "device-side flags) and mpi_staged (pinned host buffers + MPI Isend/Irecv, chunked)")


def _params() -> dict[str, int]:
    from .runner import UsageError
    from .staged import staged_params

    try:
        return staged_params()
    except ValueError as e:
        raise UsageError(str(e)) from None


def staged_steps(n: int, sizes: list[int]) -> list[Step]:
    p = _params()
    pairs = ordered_pairs(n)

    def shm(ctx, src, dst, sizes):
        from .staged import run_shm_staged

        return run_shm_staged(ctx, src, dst, sizes, chunk=p["shm_chunk"], slots=p["shm_slots"])

    def mpi(ctx, src, dst, sizes):
        from .staged import run_mpi_staged

        return run_mpi_staged(ctx, src, dst, sizes, chunk=p["mpi_chunk"], slots=p["mpi_slots"])

    return [Step("staged", "shm_staged push", pairs, sizes, shm, needs=(), cost=1.5),
            Step("staged", "mpi_staged push", pairs, sizes, mpi, needs=(), cost=2.0)]


register("staged", ABOUT, staged_steps)
