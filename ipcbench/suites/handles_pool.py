"""Pool sharing costs for the `handles` suite: every step of sharing a stream-ordered memory pool.

Per ordered pair (exporter src, importer dst), per size class, each repetition uses a FRESH pool and
allocation, like the legacy-handle rows. Host-side API costs, timed with time.perf_counter_ns() around
the one call (as in handles.py). Rows (direction `op`, `bytes` = the size class):
  pool_export_fd        cudaMemPoolExportToShareableHandle (POSIX fd)            exporter
  pool_export_pointer   cudaMemPoolExportPointer (64-byte export data)            exporter
  fd_transfer           sending the fd over the pair's Unix socket (SCM_RIGHTS):  exporter's send call
  pool_import           cudaMemPoolImportFromShareableHandle + cudaMemPoolSetAccess importer
  pool_import_pointer   cudaMemPoolImportPointer                                  importer (verified: the
                        importer checks the exporter's data through the imported pointer with a GPU kernel)
The fd socket is an fdpass.FdExchange over a communicator of just the two ranks (MPI Create_group, which
only the pair calls), so the other ranks of the node keep waiting where the schedule has them.
"""

from __future__ import annotations

import os
import time

from ipcbench.core.stats import seed_for

TAG_DATA, TAG_ACK = 31, 32


def _us(t0: int, t1: int) -> float:
    return (t1 - t0) / 1e3


def _pair_comm(world, src: int, dst: int):
    group = world.node.group.Incl([src, dst])
    try:
        return world.node.Create_group(group, tag=77)
    finally:
        group.Free()


def measure_pool_handles(ctx, src: int, dst: int, sizes: list[int]):
    """Both ranks of the pair call this; src returns the rows."""
    from cuda.bindings import runtime as rt

    from ipcbench.ipc.fdpass import FdExchange
    from ipcbench.core.rows import make_row
    from ipcbench.ipc.pool import check, create_pool, export_data_bytes, export_data_from, import_pool, pool_support

    w, gpu = ctx.world, ctx.gpu
    me = w.local_rank
    peer = dst if me == src else src
    ok, _ = pool_support(gpu.index)
    if not (ok and w.exchange(ok, peer, tag=TAG_ACK + 20)):
        return []  # no IPC-capable pools on one side: the pool suite's skip message says why
    n = max(5, ctx.rule.min_samples)
    pair = _pair_comm(w, src, dst)
    rows = []
    check(rt.cudaSetDevice(gpu.index), "cudaSetDevice", w.rank)
    stream = check(rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking), "cudaStreamCreate", w.rank)
    pair_me, pair_peer = (0, 1) if me == src else (1, 0)
    try:
        with FdExchange(pair, timeout=w.timeout) as fx:
            for nbytes in sizes:
                t = {k: [] for k in ("pool_export_fd", "pool_export_pointer", "fd_transfer", "pool_import",
                                     "pool_import_pointer")}
                bad = checks = 0
                for s in range(n):
                    seed = seed_for(ctx.world_rank(src), nbytes, s, "handles/pool")
                    if me == src:
                        pool = create_pool(gpu.index, w.rank)
                        ptr = int(check(rt.cudaMallocFromPoolAsync(nbytes, pool, stream), "cudaMallocFromPoolAsync",
                                        w.rank))
                        check(rt.cudaStreamSynchronize(stream), "cudaStreamSynchronize", w.rank)
                        try:
                            gpu.fill(ptr, nbytes, seed)
                            gpu.wait(what="fill before pool export")
                            t0 = time.perf_counter_ns()
                            fd = int(check(rt.cudaMemPoolExportToShareableHandle(
                                pool, rt.cudaMemAllocationHandleType.cudaMemHandleTypePosixFileDescriptor, 0),
                                "cudaMemPoolExportToShareableHandle", w.rank))
                            t1 = time.perf_counter_ns()
                            data = check(rt.cudaMemPoolExportPointer(ptr), "cudaMemPoolExportPointer", w.rank)
                            t2 = time.perf_counter_ns()
                            blob = export_data_bytes(data)
                            w.send(blob, dst, tag=TAG_DATA)
                            t3 = time.perf_counter_ns()
                            fx.send_fd(pair_peer, fd, tag=s)
                            t4 = time.perf_counter_ns()
                            os.close(fd)
                            t["pool_export_fd"].append(_us(t0, t1))
                            t["pool_export_pointer"].append(_us(t1, t2))
                            t["fd_transfer"].append(_us(t3, t4))
                            ack = w.recv(dst, tag=TAG_ACK, what=f"rank {ctx.world_rank(dst)} to release the pool")
                        finally:
                            rt.cudaFreeAsync(ptr, stream)
                            rt.cudaStreamSynchronize(stream)
                            rt.cudaMemPoolDestroy(pool)
                        if isinstance(ack, str):
                            from ipcbench.errors import ShareError

                            raise ShareError(f"(reported by the importer) {ack}")
                    else:
                        blob = w.recv(src, tag=TAG_DATA, what=f"pool export data from rank {ctx.world_rank(src)}")
                        fd = fx.recv_fd(pair_peer, tag=s)
                        ack = True
                        try:
                            t0 = time.perf_counter_ns()
                            ipool = import_pool(fd, gpu.index, w.rank, ctx.world_rank(src))
                            t1 = time.perf_counter_ns()
                            iptr = int(check(rt.cudaMemPoolImportPointer(ipool, export_data_from(blob)),
                                             f"cudaMemPoolImportPointer (buffer of rank {ctx.world_rank(src)})",
                                             w.rank))
                            t2 = time.perf_counter_ns()
                            t["pool_import"].append(_us(t0, t1))
                            t["pool_import_pointer"].append(_us(t1, t2))
                            if ctx.verify:
                                bad += gpu.verify(iptr, nbytes, seed)
                                checks += 1
                            check(rt.cudaFree(iptr), "cudaFree (imported pointer)", w.rank)
                            check(rt.cudaMemPoolDestroy(ipool), "cudaMemPoolDestroy (imported pool)", w.rank)
                        except Exception as e:  # tell the owner, then fail with the same message
                            ack = str(e)
                        finally:
                            os.close(fd)
                        w.send(ack, src, tag=TAG_ACK)
                        if isinstance(ack, str):
                            from ipcbench.errors import ShareError

                            raise ShareError(ack)
                imp_t, imp_bad, imp_checks = w.exchange((t, bad, checks), peer, tag=TAG_ACK + 10)
                if me != src:
                    continue
                for k in ("pool_import", "pool_import_pointer"):
                    t[k] = imp_t[k]
                # Each repetition's pool and buffer were checked through the imported pointer: every step
                # of that repetition carries the check.
                for method, vals in t.items():
                    rows.append(make_row(ctx, "handles", method, "op", src, dst, nbytes, vals, 1, None, imp_checks,
                                         imp_bad, note="data checked through the imported pointer", kind="op",
                                         required=n))
    finally:
        rt.cudaStreamDestroy(stream)
        pair.Free()
    return rows
