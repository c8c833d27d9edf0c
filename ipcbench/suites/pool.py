"""Suite `pool`: the copy and kernel methods on pointers imported from peers' IPC memory pools (POSIX fds
over a Unix socket, ipc/pool.py). Should match legacy IPC."""

from __future__ import annotations

from ipcbench.suites.registry import SuiteSpec
from ipcbench.suites.transfer import method_steps


def steps(n: int, sizes: list[int]):
    return method_steps("pool", ["pool_ce", "pool_sm_read", "pool_sm_write"], n, sizes)


SUITE = SuiteSpec("pool", "the copy and kernel methods on pointers imported from peers' IPC memory pools "
                  "(POSIX fds over a Unix socket)", steps)
