"""VMM sharing costs for the `handles` suite: every step of sharing one cuMemCreate allocation (ipc/vmm.py),
through the one sharing-cost protocol (share_costs.py: a FRESH allocation per repetition, the fd over the
pair's Unix socket, failures reported to the other side, the importer's check on every row). The allocation
is the size class rounded up to the recommended granularity (2 MiB on Hopper), so the small classes map the
same size; the note says how much. Rows (direction `op`, `bytes` = the size class):
  vmm_create          cuMemCreate                                                exporter
  vmm_export_fd       cuMemExportToShareableHandle (POSIX fd)                    exporter
  vmm_fd_transfer     sending the fd over the pair's Unix socket (SCM_RIGHTS):   exporter's send call
  vmm_import          cuMemImportFromShareableHandle                             importer
  vmm_map             cuMemAddressReserve + cuMemMap                             importer
  vmm_set_access      cuMemSetAccess (read/write for the importer's GPU)         importer
  vmm_unmap_release   cuMemUnmap + cuMemRelease + cuMemAddressFree               importer
Each repetition's data is checked by the importer through its mapping (a GPU kernel), before the unmap.
"""

from __future__ import annotations

import os
import time

from ipcbench.catalogue.suites import SHARE_COST_ROWS
from ipcbench.errors import ShareError
from ipcbench.sizes import fmt_size
from ipcbench.suites.share_costs import ShareCosts, measure_share_costs, us_between

# CUDA and MPI are imported in the functions that measure: plans and the report import this (suites/registry.py).

EXPORTER_ROWS, IMPORTER_ROWS = SHARE_COST_ROWS["vmm"]  # the catalogue's (catalogue/suites.py)


def _open(ctx) -> int:
    """This rank's context current; the allocation granularity (the recommended one) it rounds sizes to."""
    from ipcbench.ipc import vmm

    vmm.ensure_context(ctx.gpu.index, ctx.world.rank)
    return vmm.granularity(ctx.gpu.index)[1]


def _export_once(ctx, granule: int, io, nbytes: int, seed: int):
    """Create, map for itself, fill, export, send; the release unmaps and frees after the importer is done."""
    from ipcbench.ipc import vmm

    w, gpu = ctx.world, ctx.gpu
    size = vmm.round_up(nbytes, granule)
    handle = ptr = None
    try:
        t0 = time.perf_counter_ns()
        handle = vmm.create(size, gpu.index, w.rank)
        t1 = time.perf_counter_ns()
        ptr = vmm.reserve_and_map(handle, size, granule, w.rank, "own allocation")
        vmm.set_access(ptr, size, gpu.index, w.rank, "own allocation")
        gpu.fill(ptr, nbytes, seed)
        gpu.wait(what="fill before VMM export")
        t2 = time.perf_counter_ns()
        fd = vmm.export_fd(handle, w.rank)
        t3 = time.perf_counter_ns()
        try:
            io.send((size, granule))
            sent_us = io.send_fd(fd)
        finally:
            os.close(fd)
    except BaseException:
        if handle is not None:
            vmm.discard(handle, ptr, size, mapped=ptr is not None)
        raise
    return ({"vmm_create": us_between(t0, t1), "vmm_export_fd": us_between(t2, t3), "vmm_fd_transfer": sent_us},
            lambda: vmm.unmap_release(ptr, size, handle, w.rank, "own allocation"))


def _import_once(ctx, granule: int, io, data, fd: int, nbytes: int, seed: int):
    """Import, map, grant access, check the data, unmap and release; every resource freed on any failure."""
    from ipcbench.ipc import vmm

    w, gpu = ctx.world, ctx.gpu
    size, owner_granule = data
    owner = ctx.world_rank(io.peer)
    what = f"allocation of rank {owner}"
    t, bad = {}, None
    t0 = time.perf_counter_ns()
    handle = vmm.import_fd(fd, w.rank, owner)
    t1 = time.perf_counter_ns()
    t["vmm_import"] = us_between(t0, t1)
    try:
        t0 = time.perf_counter_ns()
        ptr = vmm.reserve_and_map(handle, size, vmm.reserve_alignment(owner_granule, granule), w.rank, what)
        t1 = time.perf_counter_ns()
    except ShareError:
        vmm.discard(handle)
        raise
    t["vmm_map"] = us_between(t0, t1)
    try:
        t0 = time.perf_counter_ns()
        vmm.set_access(ptr, size, gpu.index, w.rank, what)
        t1 = time.perf_counter_ns()
        t["vmm_set_access"] = us_between(t0, t1)
        if ctx.verify:
            bad = gpu.verify(ptr, nbytes, seed)
    except BaseException:
        vmm.discard(handle, ptr, size, mapped=True)
        raise
    t0 = time.perf_counter_ns()
    vmm.unmap_release(ptr, size, handle, w.rank, what)
    t1 = time.perf_counter_ns()
    t["vmm_unmap_release"] = us_between(t0, t1)
    return t, bad


def _supported(ctx) -> bool:
    from ipcbench.ipc import vmm

    return vmm.vmm_support(ctx.gpu.index)[0]


def _note(ctx, nbytes: int) -> str:
    from ipcbench.ipc import vmm

    granule = vmm.granularity(ctx.gpu.index)[1]
    return (f"data checked through the importer's mapping; {fmt_size(vmm.round_up(nbytes, granule))} mapped "
            f"(recommended granularity {fmt_size(granule)})")


VMM_COSTS = ShareCosts(
    label="vmm", exporter_rows=EXPORTER_ROWS, importer_rows=IMPORTER_ROWS, tags=(61, 62), supported=_supported,
    export_once=_export_once, import_once=_import_once, awaits="release the VMM mapping", note=_note, open=_open)


def measure_vmm_handles(ctx, src: int, dst: int, sizes: list[int]):
    """Both ranks of the pair call this; src returns the rows ([] where either GPU lacks VMM fd sharing:
    the vmm suite's skip message says why)."""
    return measure_share_costs(ctx, VMM_COSTS, src, dst, sizes)
