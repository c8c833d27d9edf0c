"""IPC through `cuda.core`, the CUDA Python object model new Python code reaches for.

Each rank makes an IPC-enabled `DeviceMemoryResource` (a stream-ordered memory pool underneath) and
allocates its buffers from it. The resource's allocation handle is a POSIX fd: it goes to every
node-local peer over the Unix socket of ipc/fdpass.py (MPI cannot carry fds), and the peer imports it
with `DeviceMemoryResource.from_allocation_handle`, then grants its own GPU access
(`peer_accessible_by`). Buffers travel as `IPCBufferDescriptor`s (picklable, over MPI) and are opened
with `Buffer.from_ipc_descriptor`. Everything goes through cuda.core's own API, so these rows measure
what a cuda.core user gets; underneath it is the same driver path as ipc/pool.py, so the numbers
should match the pool's (and legacy IPC's).

Same sharer interface as ipc/legacy.py (alloc/export/open/close_all/free/shutdown): BufferSet and the
methods run on it unchanged. docs/architecture.md. cuda.core (and, under it, the cuda.bindings of
ipc/pool.py) is optional: imported where it is used, so that `core_support` can answer without it.
"""

from __future__ import annotations

import os
import pickle
import time
from typing import Any

from ipcbench.errors import ShareError
from ipcbench.ipc.fdpass import FdExchange


def core_support(device: int) -> tuple[bool, str | None]:
    """Can cuda.core share memory pools of this GPU between processes? (imports and attributes only)"""
    try:
        import cuda.core  # noqa: F401
        from cuda.core import DeviceMemoryResourceOptions  # noqa: F401
    except ImportError as e:
        return False, f"cuda.core is not importable ({e}): pip install cuda-core"
    from ipcbench.ipc.pool import pool_support

    ok, why = pool_support(device)
    if not ok:
        return False, f"cuda.core IPC memory resources need IPC-capable memory pools: {why}"
    return True, None


def _err(rank: int, call: str, e: Exception) -> ShareError:
    return ShareError(f"rank {rank}: cuda.core {call} failed ({type(e).__name__}: {e})")


def make_resource(device):
    """An IPC-enabled DeviceMemoryResource on `device` (a cuda.core Device)."""
    from cuda.core import DeviceMemoryResource, DeviceMemoryResourceOptions

    return DeviceMemoryResource(device, options=DeviceMemoryResourceOptions(ipc_enabled=True))


def import_resource(fd: int, owner_gpu: int, my_gpu: int):
    """A peer's resource from its allocation-handle fd, readable and writable by this rank's GPU.

    The imported resource belongs to the owner's GPU; this process's GPU is a peer of it (no access
    to grant when both ranks share one GPU). cuda.core duplicates the fd; the caller closes its own."""
    from cuda.core import DeviceMemoryResource

    mr = DeviceMemoryResource.from_allocation_handle(owner_gpu, fd)
    if owner_gpu != my_gpu:
        mr.peer_accessible_by.add(my_gpu)
    return mr


class CoreIpc:
    """Collective over the node: every rank of the node makes one, in the same order (every rank's GPU and its
    resource's fd go to every node-local peer). A sharer over cuda.core IPC-enabled memory resources (see the
    module docstring)."""

    name = "core"

    def __init__(self, gpu, world):
        from cuda.core import Device

        self.rank = world.rank
        self.gpu_index = gpu.index
        try:
            self.device = Device(gpu.index)
            self.device.set_current()
            self.stream = self.device.create_stream()
            self.mr = make_resource(self.device)
        except Exception as e:
            raise _err(self.rank, "DeviceMemoryResource(ipc_enabled=True)", e) from None
        owners_gpu = world.node_allgather(gpu.index, "the GPU of every rank (cuda.core import)")
        self.costs_ms: dict[str, float] = {}
        t0 = time.perf_counter()
        try:
            fd = int(self.mr.allocation_handle)  # owned and closed by the resource
        except Exception as e:
            raise _err(self.rank, "DeviceMemoryResource.allocation_handle", e) from None
        self.costs_ms["core_export_pool"] = (time.perf_counter() - t0) * 1e3
        with FdExchange(world.node, timeout=world.timeout) as fx:
            fds = fx.exchange(fd)
        self.peer_mrs = {}
        t0 = time.perf_counter()
        for owner, pfd in fds.items():
            try:
                self.peer_mrs[owner] = import_resource(pfd, owners_gpu[owner], gpu.index)
            except Exception as e:
                raise _err(self.rank, f"DeviceMemoryResource.from_allocation_handle (pool of rank {owner})",
                           e) from None
            finally:
                os.close(pfd)
        self.costs_ms["core_import_pool_all"] = (time.perf_counter() - t0) * 1e3
        self._owned: dict[int, Any] = {}  # pointer -> Buffer (kept alive: a dropped Buffer frees itself)
        self._imported: dict[bytes, Any] = {}  # descriptor -> Buffer

    def alloc(self, nbytes: int) -> int:
        try:
            buf = self.mr.allocate(nbytes, stream=self.stream)
            self.stream.sync()
        except Exception as e:
            raise _err(self.rank, f"DeviceMemoryResource.allocate({nbytes})", e) from None
        ptr = int(buf.handle)
        self._owned[ptr] = buf
        return ptr

    def export(self, ptr: int) -> bytes:
        try:
            return pickle.dumps(self._owned[ptr].ipc_descriptor)
        except Exception as e:
            raise _err(self.rank, "Buffer.ipc_descriptor", e) from None

    def open(self, blob: bytes, owner: int) -> int:
        from cuda.core import Buffer

        if blob in self._imported:
            return int(self._imported[blob].handle)
        mr = self.peer_mrs.get(owner)
        if mr is None:
            raise ShareError(f"rank {self.rank}: no imported cuda.core memory resource of node-local rank {owner}")
        try:
            buf = Buffer.from_ipc_descriptor(mr, pickle.loads(blob), stream=self.stream)
        except Exception as e:
            raise _err(self.rank, f"Buffer.from_ipc_descriptor (buffer of rank {owner})", e) from None
        self._imported[blob] = buf
        return int(buf.handle)

    def close_all(self) -> None:
        """Release imported buffers (before their owners free them)."""
        if self._imported:  # the frees run on self.stream: no kernel or copy on another stream may still use them
            self.device.sync()
        for buf in self._imported.values():
            buf.close(self.stream)
        self.stream.sync()
        self._imported.clear()

    def free(self, ptr: int) -> None:
        buf = self._owned.pop(ptr, None)
        if buf is not None:
            buf.close(self.stream)
            self.stream.sync()

    def shutdown(self) -> None:
        for mr in self.peer_mrs.values():
            mr.close()
        self.peer_mrs.clear()
        self.mr.close()
        self.stream.close()


def sharer(gpu, world) -> CoreIpc:
    """Collective over the node: every rank of the node calls this, in the same order (CoreIpc). This rank's
    cuda.core sharer (ipc/sharers.py)."""
    return CoreIpc(gpu, world)
