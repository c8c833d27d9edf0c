"""Legacy CUDA IPC: cudaIpcGetMemHandle / cudaIpcOpenMemHandle on base pointers of cudaMalloc allocations.

A sharer allocates a buffer this rank owns, turns it into a picklable descriptor (`export`), maps a
peer's descriptor into this process (`open` -> device pointer) and undoes both (`close_all`, `free`);
ipc/pool.py offers the same interface over memory pools. Descriptors travel with MPI (they are bytes).
"""

from __future__ import annotations

from cupy.cuda import runtime

from ipcbench.errors import ShareError


def _hint(call: str, err: Exception) -> str:
    """A short likely cause for the IPC errors people hit most (the CUDA text alone rarely says)."""
    text = str(err)
    if call == "export" and "cudaErrorInvalidValue" in text:
        return (" (not the base of device memory from cudaMalloc: a host pointer passed as a device "
                "pointer, or memory from a pool/managed allocator?)")
    if call == "open":
        if "cudaErrorDeviceUninitialized" in text or "cudaErrorInvalidContext" in text:
            return " (a process cannot open a handle it exported itself: use its own pointer)"
        if "cudaErrorInvalidValue" in text or "cudaErrorInvalidResourceHandle" in text:
            return (" (the owner may have freed the buffer or exited before this open, or the handle "
                    "comes from another node)")
    return ""


class LegacyIpc:
    """cudaIpcGetMemHandle / cudaIpcOpenMemHandle on base pointers of cudaMalloc allocations."""

    name = "legacy"

    def __init__(self, gpu, rank: int):
        self.gpu = gpu
        self.rank = rank
        self._opened: dict[bytes, int] = {}

    def alloc(self, nbytes: int) -> int:
        return self.gpu.malloc(nbytes)

    def free(self, ptr: int) -> None:
        self.gpu.free(ptr)

    def export(self, ptr: int) -> bytes:
        try:
            return bytes(runtime.ipcGetMemHandle(ptr))
        except runtime.CUDARuntimeError as e:
            raise ShareError(f"rank {self.rank}: cudaIpcGetMemHandle(0x{ptr:x}) failed: {e}"
                             f"{_hint('export', e)}") from None

    def open(self, handle: bytes, owner) -> int:
        """Map a peer's handle; `owner` names the exporter in messages (a rank number or a description)."""
        if handle in self._opened:
            return self._opened[handle]
        who = f"rank {owner}" if isinstance(owner, int) else str(owner)
        try:
            ptr = runtime.ipcOpenMemHandle(handle, runtime.cudaIpcMemLazyEnablePeerAccess)
        except runtime.CUDARuntimeError as e:
            raise ShareError(f"rank {self.rank}: cudaIpcOpenMemHandle of a buffer owned by {who} "
                             f"failed: {e}{_hint('open', e)}") from None
        self._opened[handle] = ptr
        return ptr

    def close_all(self) -> None:
        for ptr in self._opened.values():
            try:
                runtime.ipcCloseMemHandle(ptr)
            except runtime.CUDARuntimeError:
                pass
        self._opened.clear()


def sharer(gpu, world) -> LegacyIpc:
    """This rank's legacy sharer (ipc/sharers.py); not collective (its handles travel in BufferSet.create)."""
    return LegacyIpc(gpu, world.rank)
