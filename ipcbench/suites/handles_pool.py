"""Pool sharing costs for the `handles` suite: every step of sharing a stream-ordered memory pool, through
the one sharing-cost protocol (share_costs.py: fresh export per repetition, fd over the pair's Unix
socket, failures reported to the other side, importer's check on every row). Rows (direction `op`,
`bytes` = the size class):
  pool_export_fd        cudaMemPoolExportToShareableHandle (POSIX fd)            exporter
  pool_export_pointer   cudaMemPoolExportPointer (64-byte export data)            exporter
  fd_transfer           sending the fd over the pair's Unix socket (SCM_RIGHTS):  exporter's send call
  pool_import           cudaMemPoolImportFromShareableHandle + cudaMemPoolSetAccess importer
  pool_import_pointer   cudaMemPoolImportPointer                                  importer (verified: the
                        importer checks the exporter's data through the imported pointer with a GPU kernel)
"""

from __future__ import annotations

import os
import time

from ipcbench.catalogue.suites import SHARE_COST_ROWS
from ipcbench.suites.share_costs import ShareCosts, measure_share_costs, us_between

# CUDA and MPI are imported in the functions that measure: plans and the report import this (suites/registry.py).


def _open(ctx):
    from cuda.bindings import runtime as rt

    from ipcbench.ipc.pool import unwrap

    unwrap(rt.cudaSetDevice(ctx.gpu.index), "cudaSetDevice", ctx.world.rank)
    return unwrap(rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking), "cudaStreamCreate", ctx.world.rank)


def _close(stream) -> None:
    from cuda.bindings import runtime as rt

    rt.cudaStreamDestroy(stream)


def _export_once(ctx, stream, io, nbytes: int, seed: int):
    from cuda.bindings import runtime as rt

    from ipcbench.ipc.pool import unwrap, create_pool, export_data_bytes

    w, gpu = ctx.world, ctx.gpu
    pool = create_pool(gpu.index, w.rank)
    ptr = None

    def release():
        if ptr is not None:
            rt.cudaFreeAsync(ptr, stream)
            rt.cudaStreamSynchronize(stream)
        rt.cudaMemPoolDestroy(pool)

    try:
        ptr = int(unwrap(rt.cudaMallocFromPoolAsync(nbytes, pool, stream), "cudaMallocFromPoolAsync", w.rank))
        unwrap(rt.cudaStreamSynchronize(stream), "cudaStreamSynchronize", w.rank)
        gpu.fill(ptr, nbytes, seed)
        gpu.wait(what="fill before pool export")
        t0 = time.perf_counter_ns()
        fd = int(unwrap(rt.cudaMemPoolExportToShareableHandle(
            pool, rt.cudaMemAllocationHandleType.cudaMemHandleTypePosixFileDescriptor, 0),
            "cudaMemPoolExportToShareableHandle", w.rank))
        t1 = time.perf_counter_ns()
        try:
            data = unwrap(rt.cudaMemPoolExportPointer(ptr), "cudaMemPoolExportPointer", w.rank)
            t2 = time.perf_counter_ns()
            io.send(export_data_bytes(data))
            sent_us = io.send_fd(fd)
        finally:
            os.close(fd)
    except BaseException:
        release()
        raise
    return {"pool_export_fd": us_between(t0, t1), "pool_export_pointer": us_between(t1, t2),
            "fd_transfer": sent_us}, release


def _import_once(ctx, stream, io, blob, fd: int, nbytes: int, seed: int):
    from cuda.bindings import runtime as rt

    from ipcbench.ipc.pool import unwrap, export_data_from, import_pool

    w, gpu = ctx.world, ctx.gpu
    owner = ctx.world_rank(io.peer)
    t0 = time.perf_counter_ns()
    ipool = import_pool(fd, gpu.index, w.rank, owner)
    try:
        t1 = time.perf_counter_ns()
        iptr = int(unwrap(rt.cudaMemPoolImportPointer(ipool, export_data_from(blob)),
                         f"cudaMemPoolImportPointer (buffer of rank {owner})", w.rank))
        t2 = time.perf_counter_ns()
        try:
            bad = gpu.verify(iptr, nbytes, seed) if ctx.verify else None
        finally:
            unwrap(rt.cudaFree(iptr), "cudaFree (imported pointer)", w.rank)
    finally:
        unwrap(rt.cudaMemPoolDestroy(ipool), "cudaMemPoolDestroy (imported pool)", w.rank)
    return {"pool_import": us_between(t0, t1), "pool_import_pointer": us_between(t1, t2)}, bad


def _supported(ctx) -> bool:
    from ipcbench.ipc.pool import pool_support

    return pool_support(ctx.gpu.index)[0]


POOL_COSTS = ShareCosts(
    label="pool", exporter_rows=SHARE_COST_ROWS["pool"][0],
    importer_rows=SHARE_COST_ROWS["pool"][1], tags=(31, 32), supported=_supported,
    export_once=_export_once, import_once=_import_once, awaits="release the pool",
    note=lambda ctx, nbytes: "data checked through the imported pointer", open=_open, close=_close)


def measure_pool_handles(ctx, src: int, dst: int, sizes: list[int]):
    """Both ranks of the pair call this; src returns the rows."""
    return measure_share_costs(ctx, POOL_COSTS, src, dst, sizes)
