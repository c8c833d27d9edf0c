"""How device memory and events cross process boundaries.

A Sharer allocates a buffer this rank owns, turns it into a picklable descriptor (`export`), maps a
peer's descriptor into this process (`open` -> device pointer) and undoes both (`close`, `free`).
Descriptors travel between ranks with MPI (they are bytes); anything MPI cannot carry (pool fds)
travels inside the sharer. `BufferSet` is what the methods see: this rank's buffers and every
node-local peer's, as raw device pointers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from cupy.cuda import runtime

from .gpu import Gpu, GpuError


class ShareError(RuntimeError):
    """A failed export/import, with the rank and CUDA call named so the user can act on it."""


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

    def __init__(self, gpu: Gpu, rank: int):
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


class EventIpc:
    """Interprocess events: created with cudaEventInterprocess | cudaEventDisableTiming, shared as handles."""

    def __init__(self, gpu: Gpu, rank: int):
        self.gpu = gpu
        self.rank = rank
        self.owned: list[int] = []
        self.opened: list[int] = []

    def create(self) -> int:
        ev = runtime.eventCreateWithFlags(runtime.eventInterprocess | runtime.eventDisableTiming)
        self.owned.append(ev)
        return ev

    def export(self, ev: int) -> bytes:
        try:
            return bytes(runtime.ipcGetEventHandle(ev))
        except runtime.CUDARuntimeError as e:
            raise ShareError(f"rank {self.rank}: cudaIpcGetEventHandle failed: {e}") from None

    def open(self, handle: bytes, owner: int) -> int:
        try:
            ev = runtime.ipcOpenEventHandle(handle)
        except runtime.CUDARuntimeError as e:
            raise ShareError(f"rank {self.rank}: cudaIpcOpenEventHandle of an event owned by rank {owner} "
                             f"failed: {e}") from None
        self.opened.append(ev)
        return ev

    def close(self) -> None:
        for ev in self.opened + self.owned:
            try:
                runtime.eventDestroy(ev)
            except runtime.CUDARuntimeError:
                pass
        self.opened.clear()
        self.owned.clear()


@dataclass
class BufferSet:
    """This rank's exported buffers and every node-local peer's, mapped here.

    `src`: the data this rank sends (slot_bytes). `inbox`: local_size slots of slot_bytes, slot r is
    where node-local rank r's data lands. `ctrl`: a small control block (flags for ping-pong and
    pipelines). `peer_*[r]` are the same buffers of rank r as mapped into this process (own rank: local).
    """

    sharer: object
    slot_bytes: int
    src: int
    inbox: int
    ctrl: int
    peer_src: dict[int, int] = field(default_factory=dict)
    peer_inbox: dict[int, int] = field(default_factory=dict)
    peer_ctrl: dict[int, int] = field(default_factory=dict)
    open_ms: dict[int, float] = field(default_factory=dict)

    CTRL_BYTES = 1 << 16

    def inbox_slot(self, sender: int) -> int:
        return self.inbox + sender * self.slot_bytes

    def peer_inbox_slot(self, owner: int, sender: int) -> int:
        return self.peer_inbox[owner] + sender * self.slot_bytes

    @classmethod
    def create(cls, world, sharer, slot_bytes: int) -> "BufferSet":
        """Allocate, export, exchange descriptors over the node communicator, and open every peer's."""
        slot_bytes = -(-slot_bytes // 4096) * 4096
        src = sharer.alloc(slot_bytes)
        inbox = sharer.alloc(slot_bytes * world.local_size)
        ctrl = sharer.alloc(cls.CTRL_BYTES)
        runtime.memset(ctrl, 0, cls.CTRL_BYTES)
        mine = (sharer.export(src), sharer.export(inbox), sharer.export(ctrl))
        everyone = world.node_allgather(mine, what=f"{sharer.name} IPC handle exchange")
        bs = cls(sharer, slot_bytes, src, inbox, ctrl)
        for r, (h_src, h_inbox, h_ctrl) in enumerate(everyone):
            if r == world.local_rank:
                bs.peer_src[r], bs.peer_inbox[r], bs.peer_ctrl[r] = src, inbox, ctrl
                continue
            t0 = time.perf_counter()
            bs.peer_src[r] = sharer.open(h_src, r)
            bs.peer_inbox[r] = sharer.open(h_inbox, r)
            bs.peer_ctrl[r] = sharer.open(h_ctrl, r)
            bs.open_ms[r] = (time.perf_counter() - t0) * 1e3
        world.node_barrier(f"every rank to open the {sharer.name} IPC handles")
        return bs

    def destroy(self, world) -> None:
        """Peers unmap first (barrier), then owners free: an owner never frees memory still mapped."""
        self.sharer.close_all()
        try:
            runtime.deviceSynchronize()
        except runtime.CUDARuntimeError as e:
            raise GpuError(f"device error while releasing {self.sharer.name} buffers: {e}") from None
        world.node_barrier(f"every rank to close the {self.sharer.name} IPC mappings")
        for ptr in (self.src, self.inbox, self.ctrl):
            self.sharer.free(ptr)
        shutdown = getattr(self.sharer, "shutdown", None)
        if shutdown is not None:
            world.node_barrier(f"every rank to free its {self.sharer.name} buffers")
            shutdown()
