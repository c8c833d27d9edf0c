"""Suite `kernel`: SM kernels reading (sm_read) and writing (sm_write) a peer's memory over P2P with 16-byte
loads and stores, and the same through Hopper's bulk asynchronous copies (sm_bulk_read, sm_bulk_write:
kernels/bulk.cu, core/bulk.py; skipped with the reason on GPUs below compute capability 9.0)."""

from __future__ import annotations

from ipcbench.catalogue.suites import SUITE_METHODS
from ipcbench.suites.registry import SuiteSpec
from ipcbench.suites.transfer import method_steps

METHOD_NAMES = list(SUITE_METHODS["kernel"])  # the catalogue's (catalogue/suites.py)


def steps(n: int, sizes: list[int]):
    return method_steps("kernel", METHOD_NAMES, n, sizes)


SUITE = SuiteSpec("kernel", "SM kernels reading (sm_read) and writing (sm_write) a peer's memory over P2P, and "
                            "the same with Hopper's bulk copies (sm_bulk_read, sm_bulk_write)", steps)
