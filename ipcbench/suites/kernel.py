"""Suite `kernel`: SM kernels reading (sm_read) and writing (sm_write) a peer's memory over P2P."""

from __future__ import annotations

from ipcbench.suites.registry import SuiteSpec
from ipcbench.suites.transfer import method_steps


def steps(n: int, sizes: list[int]):
    return method_steps("kernel", ["sm_read", "sm_write"], n, sizes)


SUITE = SuiteSpec("kernel", "SM kernels reading (sm_read) and writing (sm_write) a peer's memory over P2P",
                  steps)
