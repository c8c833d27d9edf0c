"""Suite `copy`: the copy engine (cudaMemcpyAsync) into and out of a peer's legacy-IPC buffer, and all
pairs of the node at once (all-to-all, from 4 MiB, with three or more ranks)."""

from __future__ import annotations

from ipcbench.core.methods import METHODS
from ipcbench.suites.alltoall import measure_alltoall
from ipcbench.suites.registry import Step, SuiteSpec
from ipcbench.suites.transfer import method_steps

ALLTOALL_MIN_BYTES = 4 << 20


def alltoall_steps(method_name: str, n: int, sizes: list[int]) -> list[Step]:
    if n < 3:
        return []  # with two ranks all-to-all is the bidirectional pair, already measured
    big = [s for s in sizes if s >= ALLTOALL_MIN_BYTES] or sizes[-1:]

    def run(ctx, sizes):
        return measure_alltoall(ctx, METHODS[method_name], sizes, "copy")

    return [Step("copy", f"{method_name} all-to-all", [], big, run, all_ranks=True, needs=("legacy",),
                 cost=float(n))]


def steps(n: int, sizes: list[int]) -> list[Step]:
    return method_steps("copy", ["ce"], n, sizes) + alltoall_steps("ce", n, sizes)


SUITE = SuiteSpec("copy", "copy engine (cudaMemcpyAsync) into and out of a peer's legacy-IPC buffer: push, "
                  "pull, bidir, and all pairs at once", steps)
