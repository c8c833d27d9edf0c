"""The buffer kinds a step may need (`Step.needs`) and how each is set up: one table, read by the
runner's buffer setup. Each kind names its module, whose `sharer(gpu, world)` makes the sharer
(alloc/export/open/close_all/free/shutdown, the interface of ipc/legacy.py; plus allgather_exports where
its exports cannot travel over MPI, ipc/buffers.py), and a support check that runs without allocating.
A kind whose check fails on any rank of a node is recorded in `ctx.unavailable` with the reason, and
its steps write no rows but say why (run/walk.py). A step may also need a library it measures through
(`LIBRARIES`: NCCL), or a feature of the GPU itself (`GPU_FEATURES`: Hopper's bulk copies), checked the
same way and recorded in `ctx.libraries` / `ctx.features` or `ctx.unavailable`, so walk has one skip path
for all. docs/architecture.md. No CUDA at import (the kinds' modules and BufferSet are imported when a run
sets them up): the runner imports this table, and a dry run goes through the runner on machines without
a GPU."""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Need:
    """Something a step needs (Step.needs) and where to ask whether this rank has it."""

    name: str
    module: str  # ipcbench.ipc.<module>
    support: str | None = None  # a function there: support(device) -> (ok, why); None = always supported

    def check(self, device: int) -> tuple[bool, str | None]:
        if self.support is None:
            return True, None
        return getattr(importlib.import_module(f"ipcbench.ipc.{self.module}"), self.support)(device)


@dataclass(frozen=True)
class SharerKind(Need):
    """A buffer kind: its module also defines sharer(gpu, world) -> the sharer object."""

    def create(self, gpu, world):
        return importlib.import_module(f"ipcbench.ipc.{self.module}").sharer(gpu, world)


BUFFER_KINDS: dict[str, SharerKind] = {k.name: k for k in (
    SharerKind("legacy", "legacy"),
    SharerKind("pool", "pool", "pool_support"),
    SharerKind("vmm", "vmm", "vmm_support"),
    SharerKind("core", "cucore", "core_support"),
)}


# Libraries a step measures through: nothing to set up collectively, each pair makes what it needs (NCCL: a
# communicator per pair, ipc/nccl.py); `nccl_node`, one NCCL communicator of every rank of the node (the
# all-to-all's), also needs one rank per GPU (NODE_RULES).
LIBRARIES: dict[str, Need] = {k.name: k for k in (
    Need("nccl", "nccl", "nccl_support"),
    Need("nccl_node", "nccl", "nccl_support"),
)}
# A library need's rule over the node's ranks (gpu_of: node-local rank -> GPU) -> (ok, why): a function of the
# need's module, asked once every rank passed the need's own check.
NODE_RULES: dict[str, str] = {"nccl_node": "node_support"}


# Features of the GPU itself a step needs: asked of this rank's Gpu (Gpu.feature_support, whose answer may
# depend on run options, e.g. the bulk kernel's shared memory), recorded in ctx.features or ctx.unavailable.
GPU_FEATURES: tuple[str, ...] = (
    "bulk_copy",  # Hopper's cp.async.bulk: the sm_bulk methods (core/bulk.py)
)


def node_has(ctx, need: Need, otherwise: str) -> bool:
    """Collective over the node: every rank of the node calls this, in the same order. Whether every rank of the
    node passes `need`'s check; if not, the first reason given (else `otherwise`) goes to ctx.unavailable. A
    need without a support check (legacy IPC) asks nobody: every rank has it."""
    if need.support is None:
        return True
    return _node_agrees(ctx, need.name, need.check(ctx.gpu.index), otherwise)


def _node_agrees(ctx, name: str, mine: tuple[bool, str | None], otherwise: str) -> bool:
    everyone = ctx.world.node_allgather(mine, f"{name} support check")
    if all(o for o, _ in everyone):
        return True
    reasons = [w for o, w in everyone if not o and w]
    ctx.unavailable[name] = reasons[0] if reasons else otherwise
    return False


def setup_gpu_features(ctx, needs: set[str]) -> None:
    """Collective over the node: every rank of the node calls this, in the same order. Ask every rank's GPU for
    every feature in `needs`; those all have go to ctx.features."""
    for name in GPU_FEATURES:
        if name in needs and _node_agrees(ctx, name, ctx.gpu.feature_support(name),
                                          f"a GPU of this node lacks {name}"):
            ctx.features.add(name)


def setup_libraries(ctx, needs: set[str]) -> None:
    """Collective over the node: every rank of the node calls this, in the same order. Check every library in
    `needs` on every rank of the node; those all have go to ctx.libraries."""
    for name, lib in LIBRARIES.items():
        if name in needs and node_has(ctx, lib, f"a rank of this node cannot use {name}") \
                and _node_rule(ctx, lib):
            ctx.libraries.add(name)


def _node_rule(ctx, lib: Need) -> bool:
    """Whether the node's ranks meet the need's rule over them (NODE_RULES), if it has one; why not to
    ctx.unavailable. The same answer on every rank: it reads only ctx.gpu_of."""
    rule = NODE_RULES.get(lib.name)
    if rule is None:
        return True
    ok, why = getattr(importlib.import_module(f"ipcbench.ipc.{lib.module}"), rule)(list(ctx.gpu_of))
    if not ok:
        ctx.unavailable[lib.name] = why or f"the node's ranks cannot use {lib.name}"
    return ok


def setup_buffers(ctx, kinds: set[str], slot_bytes: int) -> None:
    """Collective over the node: every rank of the node calls this, in the same order, with the same kinds. A
    BufferSet for every kind in `kinds` that every rank of the node supports, in table order, released together
    at the end of the run (ctx.add_cleanup: destroy_buffers)."""
    from ipcbench.ipc.buffers import BufferSet

    for name, kind in BUFFER_KINDS.items():
        if name not in kinds:
            continue
        if node_has(ctx, kind, f"a rank of this node cannot share {name} memory"):
            ctx.buffers[name] = BufferSet.create(ctx.world, kind.create(ctx.gpu, ctx.world), slot_bytes)
    ctx.add_cleanup(lambda: destroy_buffers(ctx))


def destroy_buffers(ctx) -> None:
    """Collective over the node: every rank of the node calls this, in the same order. Every rank's shared
    buffers, in table order (BufferSet.destroy: peers unmap before owners free)."""
    for bs in ctx.buffers.values():
        bs.destroy(ctx.world)
    ctx.buffers = {}
