"""cuda.core sharing costs for the `handles` suite: each step of sharing through cuda.core's own API
(ipc/cucore.py), beside the raw-bindings pool rows of handles_pool.py, through the one sharing-cost
protocol (share_costs.py: a FRESH IPC-enabled DeviceMemoryResource and buffer per repetition, the fd over
the pair's Unix socket, the descriptor over MPI, failures reported to the other side). Rows (direction
`op`, `bytes` = the size class):
  core_export_pool    DeviceMemoryResource.allocation_handle (the pool's POSIX fd)            exporter
  core_export_buffer  Buffer.ipc_descriptor                                                  exporter
  core_import_pool    DeviceMemoryResource.from_allocation_handle + peer_accessible_by.add   importer
  core_import_buffer  Buffer.from_ipc_descriptor                                             importer
The importer checks the exporter's data through the imported buffer with a GPU kernel (`verified`).
"""

from __future__ import annotations

import pickle
import time

from ipcbench.catalogue.suites import SHARE_COST_ROWS
from ipcbench.ipc import cucore
from ipcbench.suites.share_costs import ShareCosts, measure_share_costs, us_between

# CUDA and MPI are imported in the functions that measure: plans and the report import this (suites/registry.py).


def _open(ctx):
    """This rank's cuda.core device, current, and a stream of it."""
    from cuda.core import Device

    device = Device(ctx.gpu.index)
    device.set_current()
    return device, device.create_stream()


def _close(state) -> None:
    if state is not None:
        state[1].close()


def _export_once(ctx, state, io, nbytes: int, seed: int):
    """Fresh resource and buffer, filled; times the two exports; ships descriptor and fd."""
    device, stream = state
    mr = cucore.make_resource(device)
    buf = None

    def release():
        if buf is not None:
            buf.close(stream)
            stream.sync()
        mr.close()

    try:
        buf = mr.allocate(nbytes, stream=stream)
        stream.sync()
        ctx.gpu.fill(int(buf.handle), nbytes, seed)
        ctx.gpu.wait(what="fill before cuda.core export")
        t0 = time.perf_counter_ns()
        fd = int(mr.allocation_handle)  # the resource owns this fd: it is not closed here
        t1 = time.perf_counter_ns()
        desc = buf.ipc_descriptor
        t2 = time.perf_counter_ns()
        io.send((pickle.dumps(desc), ctx.gpu.index))
        io.send_fd(fd)
    except BaseException:
        release()
        raise
    return {"core_export_pool": us_between(t0, t1), "core_export_buffer": us_between(t1, t2)}, release


def _import_once(ctx, state, io, data, fd: int, nbytes: int, seed: int):
    """Times the two imports, checks the data, releases."""
    from cuda.core import Buffer

    _, stream = state
    blob, owner_gpu = data
    t0 = time.perf_counter_ns()
    mr = cucore.import_resource(fd, owner_gpu, ctx.gpu.index)
    t1 = time.perf_counter_ns()
    try:
        buf = Buffer.from_ipc_descriptor(mr, pickle.loads(blob), stream=stream)
        t2 = time.perf_counter_ns()
        bad = ctx.gpu.verify(int(buf.handle), nbytes, seed) if ctx.verify else None
        buf.close(stream)
        stream.sync()
    finally:
        mr.close()
    return {"core_import_pool": us_between(t0, t1), "core_import_buffer": us_between(t1, t2)}, bad


def _supported(ctx) -> bool:
    return cucore.core_support(ctx.gpu.index)[0]


CORE_COSTS = ShareCosts(
    label="core", exporter_rows=SHARE_COST_ROWS["core"][0],
    importer_rows=SHARE_COST_ROWS["core"][1], tags=(41, 42), supported=_supported,
    export_once=_export_once, import_once=_import_once, awaits="release the buffer",
    note=lambda ctx, nbytes: "data checked through the imported buffer", open=_open, close=_close)


def measure_core_handles(ctx, src: int, dst: int, sizes: list[int]):
    """Both ranks of the pair call this; src returns the rows."""
    return measure_share_costs(ctx, CORE_COSTS, src, dst, sizes)
