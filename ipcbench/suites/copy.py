"""Suite `copy`: the copy engine (cudaMemcpyAsync) into and out of a peer's legacy-IPC buffer. (Every pair of the
node at once is the alltoall suite's: runs before it have copy/ce_alltoall rows.)"""

from __future__ import annotations

from ipcbench.suites.registry import Step, SuiteSpec
from ipcbench.suites.transfer import method_steps


def steps(n: int, sizes: list[int]) -> list[Step]:
    return method_steps("copy", ["ce"], n, sizes)


SUITE = SuiteSpec("copy", "copy engine (cudaMemcpyAsync) into and out of a peer's legacy-IPC buffer: push, "
                  "pull and bidir", steps)
