"""VMM sharing costs for the `handles` suite: every step of sharing one cuMemCreate allocation (ipc/vmm.py).

Per ordered pair (exporter src, importer dst), per size class, each repetition uses a FRESH allocation, like
the legacy-handle and pool rows. Host-side API costs, timed with time.perf_counter_ns() around the call(s)
(as in handles.py). The allocation is the size class rounded up to the recommended granularity (2 MiB on
Hopper), so the small classes map the same size; the note says how much. Rows (direction `op`, `bytes` =
the size class):
  vmm_create          cuMemCreate                                                exporter
  vmm_export_fd       cuMemExportToShareableHandle (POSIX fd)                    exporter
  vmm_fd_transfer     sending the fd over the pair's Unix socket (SCM_RIGHTS):   exporter's send call
  vmm_import          cuMemImportFromShareableHandle                             importer
  vmm_map             cuMemAddressReserve + cuMemMap                             importer
  vmm_set_access      cuMemSetAccess (read/write for the importer's GPU)         importer
  vmm_unmap_release   cuMemUnmap + cuMemRelease + cuMemAddressFree               importer
Each repetition's data is checked by the importer through its mapping (a GPU kernel), before the unmap:
every row of that repetition carries the check. The fd socket is an fdpass.FdExchange over a communicator
of just the two ranks (handles_pool._pair_comm), so the other ranks keep waiting where the schedule has them.
"""

from __future__ import annotations

import os
import time

from ipcbench.core.stats import seed_for

TAG_DATA, TAG_ACK = 61, 62
EXPORTER_ROWS = ("vmm_create", "vmm_export_fd", "vmm_fd_transfer")
IMPORTER_ROWS = ("vmm_import", "vmm_map", "vmm_set_access", "vmm_unmap_release")


def _us(t0: int, t1: int) -> float:
    return (t1 - t0) / 1e3


def _export_once(ctx, fx, peer_in_pair: int, dst: int, nbytes: int, granule: int, seed: int, tag: int) -> dict:
    """Exporter side of one repetition: create, fill, export, send, wait for the importer to unmap, free;
    returns its timings (µs). A failure before the send is sent in place of the size, so the importer
    fails with the same message instead of waiting."""
    from ipcbench.errors import ShareError
    from ipcbench.ipc import vmm

    w, gpu = ctx.world, ctx.gpu
    size = vmm.round_up(nbytes, granule)
    handle = ptr = None
    try:
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
        except Exception as e:
            w.send(str(e), dst, tag=TAG_DATA)
            raise
        try:
            w.send((size, granule), dst, tag=TAG_DATA)
            t4 = time.perf_counter_ns()
            fx.send_fd(peer_in_pair, fd, tag=tag)
            t5 = time.perf_counter_ns()
        finally:
            os.close(fd)
        ack = w.recv(dst, tag=TAG_ACK, what=f"rank {ctx.world_rank(dst)} to release the VMM mapping")
    except BaseException:
        if handle is not None:
            vmm.discard(handle, ptr, size, mapped=ptr is not None)
        raise
    vmm.unmap_release(ptr, size, handle, w.rank, "own allocation")
    if isinstance(ack, str):
        raise ShareError(f"(reported by the importer) {ack}")
    return {"vmm_create": _us(t0, t1), "vmm_export_fd": _us(t2, t3), "vmm_fd_transfer": _us(t4, t5)}


def _import_once(ctx, fx, peer_in_pair: int, src: int, nbytes: int, granule: int, seed: int, tag: int):
    """Importer side of one repetition: import, map, grant access, check the data, unmap; -> (timings, bad
    words or None when not verified). Any failure is reported to the exporter, then raised here."""
    from ipcbench.errors import ShareError
    from ipcbench.ipc import vmm

    w, gpu = ctx.world, ctx.gpu
    owner = ctx.world_rank(src)
    meta = w.recv(src, tag=TAG_DATA, what=f"a VMM allocation's size from rank {owner}")
    if isinstance(meta, str):
        raise ShareError(f"(reported by the exporter) {meta}")
    size, owner_granule = meta
    what = f"allocation of rank {owner}"
    fd = fx.recv_fd(peer_in_pair, tag=tag)
    t, bad, ack = {}, None, True
    try:
        try:
            t0 = time.perf_counter_ns()
            handle = vmm.import_fd(fd, w.rank, owner)
            t1 = time.perf_counter_ns()
        finally:
            os.close(fd)
        t["vmm_import"] = _us(t0, t1)
        try:
            t0 = time.perf_counter_ns()
            ptr = vmm.reserve_and_map(handle, size, vmm.reserve_alignment(owner_granule, granule), w.rank, what)
            t1 = time.perf_counter_ns()
        except ShareError:
            vmm.discard(handle)
            raise
        t["vmm_map"] = _us(t0, t1)
        try:
            t0 = time.perf_counter_ns()
            vmm.set_access(ptr, size, gpu.index, w.rank, what)
            t1 = time.perf_counter_ns()
            t["vmm_set_access"] = _us(t0, t1)
            if ctx.verify:
                bad = gpu.verify(ptr, nbytes, seed)
        except BaseException:
            vmm.discard(handle, ptr, size, mapped=True)
            raise
        t0 = time.perf_counter_ns()
        vmm.unmap_release(ptr, size, handle, w.rank, what)
        t1 = time.perf_counter_ns()
        t["vmm_unmap_release"] = _us(t0, t1)
    except Exception as e:  # tell the owner, then fail with the same message
        ack = str(e)
    w.send(ack, src, tag=TAG_ACK)
    if isinstance(ack, str):
        raise ShareError(ack)
    return t, bad


def measure_vmm_handles(ctx, src: int, dst: int, sizes: list[int]):
    """Both ranks of the pair call this; src returns the rows ([] where either GPU lacks VMM fd sharing:
    the vmm suite's skip message says why)."""
    from ipcbench.core.rows import make_row
    from ipcbench.ipc import vmm
    from ipcbench.ipc.fdpass import FdExchange
    from ipcbench.sizes import fmt_size
    from ipcbench.suites.handles_pool import _pair_comm

    w, gpu = ctx.world, ctx.gpu
    me = w.local_rank
    peer = dst if me == src else src
    ok, _ = vmm.vmm_support(gpu.index)
    if not (w.exchange(ok, peer, tag=TAG_ACK + 20) and ok):
        return []
    vmm.ensure_context(gpu.index, w.rank)
    granule = vmm.granularity(gpu.index)[1]
    n = max(5, ctx.rule.min_samples)
    pair = _pair_comm(w, src, dst)
    peer_in_pair = 1 if me == src else 0
    rows = []
    try:
        with FdExchange(pair, timeout=w.timeout) as fx:
            for nbytes in sizes:
                t = {k: [] for k in (EXPORTER_ROWS if me == src else IMPORTER_ROWS)}
                bad = checks = 0
                for s in range(n):
                    seed = seed_for(ctx.world_rank(src), nbytes, s, "handles/vmm")
                    if me == src:
                        got = _export_once(ctx, fx, peer_in_pair, dst, nbytes, granule, seed, s)
                    else:
                        got, found = _import_once(ctx, fx, peer_in_pair, src, nbytes, granule, seed, s)
                        if found is not None:
                            bad += found
                            checks += 1
                    for k, v in got.items():
                        t[k].append(v)
                theirs = w.exchange((t, bad, checks) if me == dst else None, peer, tag=TAG_ACK + 10)
                if me != src:
                    continue
                imp_t, imp_bad, imp_checks = theirs
                note = (f"data checked through the importer's mapping; {fmt_size(vmm.round_up(nbytes, granule))} "
                        f"mapped (recommended granularity {fmt_size(granule)})")
                for method in EXPORTER_ROWS + IMPORTER_ROWS:
                    vals = t[method] if method in t else imp_t[method]
                    rows.append(make_row(ctx, "handles", method, "op", src, dst, nbytes, vals, 1, None, imp_checks,
                                         imp_bad, note=note, kind="op", required=n))
    finally:
        pair.Free()
    return rows
