"""Suite `pool`: the copy and kernel methods on pointers imported from peers' IPC memory pools (POSIX fds
over a Unix socket, ipc/pool.py), and the copy engine on buffers shared through cuda.core's own IPC API
(ipc/cucore.py: the same pools, as a cuda.core user gets them). Both should match legacy IPC."""

from __future__ import annotations

from ipcbench.catalogue.suites import SUITE_METHODS
from ipcbench.suites.registry import SuiteSpec
from ipcbench.suites.transfer import method_steps

METHOD_NAMES = list(SUITE_METHODS["pool"])  # the catalogue's (catalogue/suites.py)


def steps(n: int, sizes: list[int]):
    return method_steps("pool", METHOD_NAMES, n, sizes)


SUITE = SuiteSpec("pool", "the copy and kernel methods on pointers imported from peers' IPC memory pools "
                  "(POSIX fds over a Unix socket), and the copy engine on buffers shared through cuda.core", steps)
