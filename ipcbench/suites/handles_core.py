"""cuda.core sharing costs for the `handles` suite: each step of sharing through cuda.core's own API
(ipc/cucore.py), beside the raw-bindings pool rows of handles_pool.py.

Per ordered pair (exporter src, importer dst), per size class, each repetition uses a FRESH
IPC-enabled DeviceMemoryResource and buffer, like the pool rows. Host-side costs, timed with
time.perf_counter_ns() around the one cuda.core call (handles.py says why). Rows (direction `op`,
`bytes` = the size class):
  core_export_pool    DeviceMemoryResource.allocation_handle (the pool's POSIX fd)            exporter
  core_export_buffer  Buffer.ipc_descriptor                                                  exporter
  core_import_pool    DeviceMemoryResource.from_allocation_handle + peer_accessible_by.add   importer
  core_import_buffer  Buffer.from_ipc_descriptor                                             importer
The importer checks the exporter's data through the imported buffer with a GPU kernel (`verified`).
The fd goes over a Unix socket of just the pair (handles_pool._pair_comm), the descriptor over MPI.
"""

from __future__ import annotations

import os
import pickle
import time

from ipcbench.core.stats import seed_for

TAG_DATA, TAG_ACK = 41, 42
METHODS = ("core_export_pool", "core_export_buffer", "core_import_pool", "core_import_buffer")


def _us(t0: int, t1: int) -> float:
    return (t1 - t0) / 1e3


def _export_one(ctx, device, stream, nbytes: int, seed: int, send):
    """Exporter's repetition: fresh resource and buffer, filled; times the two exports; `send(desc, fd)`
    ships them; returns ({method: µs}, resource, buffer) for the caller to release after the ack."""
    from ipcbench.ipc.cucore import make_resource

    mr = make_resource(device)
    buf = mr.allocate(nbytes, stream=stream)
    stream.sync()
    ctx.gpu.fill(int(buf.handle), nbytes, seed)
    ctx.gpu.wait(what="fill before cuda.core export")
    t0 = time.perf_counter_ns()
    fd = int(mr.allocation_handle)
    t1 = time.perf_counter_ns()
    desc = buf.ipc_descriptor
    t2 = time.perf_counter_ns()
    send(pickle.dumps(desc), fd)
    return {"core_export_pool": _us(t0, t1), "core_export_buffer": _us(t1, t2)}, mr, buf


def _import_one(ctx, stream, blob: bytes, fd: int, owner_gpu: int, nbytes: int, seed: int):
    """Importer's repetition: times the two imports, checks the data, releases. -> ({method: µs}, bad, checks)"""
    from cuda.core import Buffer

    from ipcbench.ipc.cucore import import_resource

    t0 = time.perf_counter_ns()
    mr = import_resource(fd, owner_gpu, ctx.gpu.index)
    t1 = time.perf_counter_ns()
    try:
        buf = Buffer.from_ipc_descriptor(mr, pickle.loads(blob), stream=stream)
        t2 = time.perf_counter_ns()
        bad = checks = 0
        if ctx.verify:
            bad, checks = ctx.gpu.verify(int(buf.handle), nbytes, seed), 1
        buf.close(stream)
        stream.sync()
    finally:
        mr.close()
    return {"core_import_pool": _us(t0, t1), "core_import_buffer": _us(t1, t2)}, bad, checks


def measure_core_handles(ctx, src: int, dst: int, sizes: list[int]):
    """Both ranks of the pair call this; src returns the rows."""
    from cuda.core import Device

    from ipcbench.core.rows import make_row
    from ipcbench.errors import ShareError
    from ipcbench.ipc.cucore import core_support
    from ipcbench.ipc.fdpass import FdExchange
    from ipcbench.suites.handles_pool import _pair_comm

    w = ctx.world
    me = w.local_rank
    peer = dst if me == src else src
    ok, _ = core_support(ctx.gpu.index)
    # Exchange first, always: a rank that short-circuited here would leave its peer waiting in exchange.
    if not (w.exchange(ok, peer, tag=TAG_ACK + 20) and ok):
        return []  # cuda.core cannot share here: the pool suite's skip message says why
    n = max(5, ctx.rule.min_samples)
    device = Device(ctx.gpu.index)
    device.set_current()
    stream = device.create_stream()
    pair = _pair_comm(w, src, dst)
    pair_peer = 1 if me == src else 0
    rows = []
    try:
        with FdExchange(pair, timeout=w.timeout) as fx:
            for nbytes in sizes:
                t = {k: [] for k in METHODS}
                bad = checks = 0
                for s in range(n):
                    seed = seed_for(ctx.world_rank(src), nbytes, s, "handles/core")
                    if me == src:
                        def send(blob, fd):
                            w.send((blob, ctx.gpu.index), dst, tag=TAG_DATA)
                            fx.send_fd(pair_peer, fd, tag=s)

                        times, mr, buf = _export_one(ctx, device, stream, nbytes, seed, send)
                        try:
                            ack = w.recv(dst, tag=TAG_ACK, what=f"rank {ctx.world_rank(dst)} to release the buffer")
                        finally:
                            buf.close(stream)
                            stream.sync()
                            mr.close()
                        if isinstance(ack, str):
                            raise ShareError(f"(reported by the importer) {ack}")
                        for k, v in times.items():
                            t[k].append(v)
                    else:
                        blob, owner_gpu = w.recv(src, tag=TAG_DATA,
                                                 what=f"a cuda.core descriptor from rank {ctx.world_rank(src)}")
                        fd = fx.recv_fd(pair_peer, tag=s)
                        ack = True
                        try:
                            times, b, c = _import_one(ctx, stream, blob, fd, owner_gpu, nbytes, seed)
                            bad, checks = bad + b, checks + c
                            for k, v in times.items():
                                t[k].append(v)
                        except Exception as e:  # tell the owner, then fail with the same message
                            ack = f"rank {w.rank}: cuda.core import failed ({type(e).__name__}: {e})"
                        finally:
                            os.close(fd)
                        w.send(ack, src, tag=TAG_ACK)
                        if isinstance(ack, str):
                            raise ShareError(ack)
                imp_t, imp_bad, imp_checks = w.exchange((t, bad, checks), peer, tag=TAG_ACK + 10)
                if me != src:
                    continue
                for k in ("core_import_pool", "core_import_buffer"):
                    t[k] = imp_t[k]
                for method in METHODS:
                    rows.append(make_row(ctx, "handles", method, "op", src, dst, nbytes, t[method], 1, None,
                                         imp_checks, imp_bad, note="data checked through the imported buffer",
                                         kind="op", required=n))
    finally:
        stream.close()
        pair.Free()
    return rows
