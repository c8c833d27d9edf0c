"""BufferSet: what the transfer methods see — this rank's shared buffers and every node-local peer's,
mapped into this process as raw device pointers, over any sharer (ipc/legacy.py, ipc/pool.py, ipc/vmm.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from cupy.cuda import runtime

from ipcbench.errors import GpuError


class Sharer(Protocol):
    """What a BufferSet shares its memory through (ipc/legacy.py, pool.py, vmm.py, cucore.py): allocate this
    rank's buffers, export them, open a peer's export, and undo both. A sharer may also have
    `allgather_exports` (exports MPI cannot carry) and `shutdown` (what outlives the buffers)."""

    name: str

    def alloc(self, nbytes: int, /) -> int: ...

    def export(self, ptr: int, /) -> Any: ...

    def open(self, handle: Any, owner: int, /) -> int: ...

    def close_all(self) -> None: ...

    def free(self, ptr: int, /) -> None: ...


@dataclass
class BufferSet:
    """This rank's exported buffers and every node-local peer's, mapped here.

    `src`: the data this rank sends (slot_bytes). `inbox`: local_size slots of slot_bytes, slot r is
    where node-local rank r's data lands. `ctrl`: a small control block (flags for ping-pong and
    pipelines). `peer_*[r]` are the same buffers of rank r as mapped into this process (own rank: local).
    """

    sharer: Sharer
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
    def create(cls, world, sharer: Sharer, slot_bytes: int) -> "BufferSet":
        """Collective over the node: every rank of the node calls this, in the same order. Allocate, export,
        exchange descriptors over the node communicator (or the sharer's own `allgather_exports(mine) -> every
        local rank's descriptors`, where it has one), open every peer's."""
        slot_bytes = -(-slot_bytes // 4096) * 4096
        src = sharer.alloc(slot_bytes)
        inbox = sharer.alloc(slot_bytes * world.local_size)
        ctrl = sharer.alloc(cls.CTRL_BYTES)
        runtime.memset(ctrl, 0, cls.CTRL_BYTES)
        mine = (sharer.export(src), sharer.export(inbox), sharer.export(ctrl))
        # Exports that MPI cannot carry (POSIX fds: ipc/vmm.py) are exchanged by the sharer itself.
        allgather = getattr(sharer, "allgather_exports", None)
        if allgather is not None:
            everyone = allgather(mine)
        else:
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
        """Collective over the node: every rank of the node calls this, in the same order. Peers unmap first
        (barrier), then owners free: an owner never frees memory still mapped."""
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
