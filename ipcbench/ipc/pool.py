"""Stream-ordered memory pools shared across ranks (cudaMemPool* IPC with POSIX file descriptors).

Each rank creates an IPC-capable pool on its GPU and allocates its buffers from it. The pool travels
as a POSIX fd, which MPI cannot carry: it goes to every node-local peer over a Unix socket with
SCM_RIGHTS (fdpass.FdExchange, in a private 0700 directory that node-local rank 0 creates and
removes). Pointers travel as the 64-byte cudaMemPoolPtrExportData through MPI. Importers set access
for their own device and import each pointer. Same interface as legacy.LegacyIpc, so BufferSet and all
the methods run on pool memory unchanged.
"""

from __future__ import annotations

import ctypes
import os
import time

from cuda.bindings import driver
from cuda.bindings import runtime as rt

from ipcbench.errors import ShareError
from ipcbench.ipc.fdpass import FdExchange

_HT = rt.cudaMemAllocationHandleType.cudaMemHandleTypePosixFileDescriptor


def _err_text(err) -> str:
    try:
        return f"{err.name}: {rt.cudaGetErrorString(err)[1].decode()}"
    except Exception:
        return str(err)


def unwrap(res, call: str, rank: int | None = None):
    """Unwrap a cuda.bindings result tuple, raising ShareError that names the rank and the call."""
    err = res[0]
    if err != rt.cudaError_t.cudaSuccess:
        who = f"rank {rank}: " if rank is not None else ""
        raise ShareError(f"{who}{call} failed ({_err_text(err)})")
    return res[1] if len(res) == 2 else res[1:]


def pool_support(device: int) -> tuple[bool, str | None]:
    """Can this GPU share pools through POSIX fds? (device attributes, no allocation)"""
    try:
        ok = unwrap(rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrMemoryPoolsSupported, device),
                   "cudaDeviceGetAttribute(MemoryPoolsSupported)")
        types = unwrap(rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrMemoryPoolSupportedHandleTypes,
                                                device), "cudaDeviceGetAttribute(MemoryPoolSupportedHandleTypes)")
    except ShareError as e:
        return False, str(e)
    if not ok:
        return False, f"GPU {device} does not support stream-ordered memory pools"
    if not (int(types) & int(_HT)):
        return False, f"GPU {device} pools cannot be exported as POSIX file descriptors"
    return True, None


def export_data_bytes(data) -> bytes:
    """The 64 opaque bytes of a cudaMemPoolPtrExportData (field name differs between cuda-python versions)."""
    raw = getattr(data, "reserved", None)
    if raw is not None:
        return bytes(bytearray(raw))
    return ctypes.string_at(data.getPtr(), 64)


def export_data_from(blob: bytes):
    data = rt.cudaMemPoolPtrExportData()
    if hasattr(data, "reserved"):
        data.reserved = list(blob)
    else:
        ctypes.memmove(data.getPtr(), blob, 64)
    return data


def create_pool(device: int, rank: int):
    props = rt.cudaMemPoolProps()
    props.allocType = rt.cudaMemAllocationType.cudaMemAllocationTypePinned
    props.handleTypes = _HT
    props.location.type = rt.cudaMemLocationType.cudaMemLocationTypeDevice
    props.location.id = device
    pool = unwrap(rt.cudaMemPoolCreate(props), "cudaMemPoolCreate", rank)
    # Keep freed memory in the pool: the run reuses it, and trimming would make timings noisy.
    threshold = driver.cuuint64_t(0xFFFFFFFFFFFFFFFF)
    unwrap(rt.cudaMemPoolSetAttribute(pool, rt.cudaMemPoolAttr.cudaMemPoolAttrReleaseThreshold, threshold),
          "cudaMemPoolSetAttribute(ReleaseThreshold)", rank)
    return pool


def import_pool(fd: int, device: int, rank: int, owner: int):
    """Import a peer's pool from its fd and give this rank's device read/write access to it."""
    pool = unwrap(rt.cudaMemPoolImportFromShareableHandle(fd, _HT, 0),
                 f"cudaMemPoolImportFromShareableHandle (pool of rank {owner})", rank)
    desc = rt.cudaMemAccessDesc()
    desc.location.type = rt.cudaMemLocationType.cudaMemLocationTypeDevice
    desc.location.id = device
    desc.flags = rt.cudaMemAccessFlags.cudaMemAccessFlagsProtReadWrite
    unwrap(rt.cudaMemPoolSetAccess(pool, [desc], 1), f"cudaMemPoolSetAccess (pool of rank {owner})", rank)
    return pool


class PoolIpc:
    """Collective over the node: every rank of the node makes one, in the same order (its pool's fd goes to
    every node-local peer, theirs come here). A sharer over IPC memory pools: alloc/export/open/close_all/free
    like legacy.LegacyIpc."""

    name = "pool"

    def __init__(self, gpu, world):
        self.gpu = gpu
        self.world = world
        self.rank = world.rank
        unwrap(rt.cudaSetDevice(gpu.index), "cudaSetDevice", self.rank)
        self.stream = unwrap(rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking), "cudaStreamCreate", self.rank)
        self.pool = create_pool(gpu.index, self.rank)
        self.costs_ms: dict[str, float] = {}
        t0 = time.perf_counter()
        fd = unwrap(rt.cudaMemPoolExportToShareableHandle(self.pool, _HT, 0),
                   "cudaMemPoolExportToShareableHandle", self.rank)
        self.costs_ms["pool_export_fd"] = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        with FdExchange(world.node, timeout=world.timeout) as fx:
            fds = fx.exchange(int(fd))
        self.costs_ms["fd_exchange"] = (time.perf_counter() - t0) * 1e3
        os.close(int(fd))
        self.peer_pools = {}
        t0 = time.perf_counter()
        for owner, pfd in fds.items():
            try:
                self.peer_pools[owner] = import_pool(pfd, gpu.index, self.rank, owner)
            finally:
                os.close(pfd)
        self.costs_ms["pool_import_all"] = (time.perf_counter() - t0) * 1e3
        self._owned: list[int] = []
        self._imported: dict[bytes, int] = {}

    def alloc(self, nbytes: int) -> int:
        ptr = unwrap(rt.cudaMallocFromPoolAsync(nbytes, self.pool, self.stream),
                    f"cudaMallocFromPoolAsync({nbytes})", self.rank)
        unwrap(rt.cudaStreamSynchronize(self.stream), "cudaStreamSynchronize", self.rank)
        self._owned.append(int(ptr))
        return int(ptr)

    def export(self, ptr: int) -> bytes:
        data = unwrap(rt.cudaMemPoolExportPointer(ptr), "cudaMemPoolExportPointer", self.rank)
        return export_data_bytes(data)

    def open(self, blob: bytes, owner: int) -> int:
        if blob in self._imported:
            return self._imported[blob]
        pool = self.peer_pools.get(owner)
        if pool is None:
            raise ShareError(f"rank {self.rank}: no imported pool of node-local rank {owner}")
        ptr = int(unwrap(rt.cudaMemPoolImportPointer(pool, export_data_from(blob)),
                        f"cudaMemPoolImportPointer (buffer of rank {owner})", self.rank))
        self._imported[blob] = ptr
        return ptr

    def close_all(self) -> None:
        """Release imported pointers (before their owners free them)."""
        for ptr in self._imported.values():
            rt.cudaFree(ptr)
        self._imported.clear()

    def free(self, ptr: int) -> None:
        if ptr in self._owned:
            self._owned.remove(ptr)
            unwrap(rt.cudaFreeAsync(ptr, self.stream), "cudaFreeAsync", self.rank)
            unwrap(rt.cudaStreamSynchronize(self.stream), "cudaStreamSynchronize", self.rank)

    def shutdown(self) -> None:
        for pool in self.peer_pools.values():
            rt.cudaMemPoolDestroy(pool)
        self.peer_pools.clear()
        rt.cudaMemPoolDestroy(self.pool)
        rt.cudaStreamDestroy(self.stream)


def sharer(gpu, world) -> PoolIpc:
    """Collective over the node: every rank of the node calls this, in the same order (PoolIpc). This rank's
    pool sharer (ipc/sharers.py)."""
    return PoolIpc(gpu, world)
