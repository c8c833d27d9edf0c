"""Suite `vmm`: the copy and kernel methods on peers' cuMemCreate allocations, each exported as a POSIX fd,
passed over a Unix socket, imported and mapped with cuMemMap (ipc/vmm.py): the path of PyTorch's expandable
segments and NCCL's cuMem buffers. Should match legacy IPC; a GPU without VMM or POSIX-fd export support
writes no rows and says why."""

from __future__ import annotations

from ipcbench.catalogue.suites import SUITE_METHODS
from ipcbench.suites.registry import SuiteSpec
from ipcbench.suites.transfer import method_steps

METHOD_NAMES = list(SUITE_METHODS["vmm"])  # the catalogue's (catalogue/suites.py)


def steps(n: int, sizes: list[int]):
    return method_steps("vmm", METHOD_NAMES, n, sizes)


SUITE = SuiteSpec("vmm", "the copy and kernel methods on peers' cuMemCreate allocations (VMM: POSIX fd over a "
                  "Unix socket, cuMemImportFromShareableHandle, cuMemMap)", steps)
