"""The buffer kinds a step may need (`Step.needs`) and how each is set up: one table, read by the
runner's buffer setup. Each kind names its module, whose `sharer(gpu, world)` makes the sharer
(alloc/export/open/close_all/free/shutdown, the interface of ipc/legacy.py), and a support check that
runs without allocating.
A kind whose check fails on any rank of a node is recorded in `ctx.unavailable` with the reason, and
its steps write no rows but say why (run/walk.py). docs/architecture.md."""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class SharerKind:
    name: str
    module: str  # ipcbench.ipc.<module>, which defines sharer(gpu, world) -> the sharer object
    support: str | None = None  # a function there: support(device) -> (ok, why); None = always supported

    def check(self, device: int) -> tuple[bool, str | None]:
        if self.support is None:
            return True, None
        return getattr(importlib.import_module(f"ipcbench.ipc.{self.module}"), self.support)(device)

    def create(self, gpu, world):
        return importlib.import_module(f"ipcbench.ipc.{self.module}").sharer(gpu, world)


KINDS: dict[str, SharerKind] = {k.name: k for k in (
    SharerKind("legacy", "legacy"),
    SharerKind("pool", "pool", "pool_support"),
)}


def setup_buffers(ctx, kinds: set[str], slot_bytes: int) -> None:
    """Create a BufferSet for every kind in `kinds` that every rank of the node supports, in table order
    (collective over the node: every rank calls this with the same kinds)."""
    from ipcbench.ipc.buffers import BufferSet

    for name, kind in KINDS.items():
        if name not in kinds:
            continue
        # A kind without a support check (legacy IPC) needs no agreement: every rank sets it up.
        everyone = [] if kind.support is None else ctx.world.node_allgather(kind.check(ctx.gpu.index),
                                                                            f"{name} support check")
        if all(o for o, _ in everyone):
            ctx.buffers[name] = BufferSet.create(ctx.world, kind.create(ctx.gpu, ctx.world), slot_bytes)
        else:
            reasons = [w for o, w in everyone if not o and w]
            ctx.unavailable[name] = reasons[0] if reasons else f"a rank of this node cannot share {name} memory"
