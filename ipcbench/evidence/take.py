"""The node's evidence of a run: a snapshot on each node's local rank 0 before the first measurement and after the
last, gathered on world rank 0 for meta.json's "evidence" (evidence/model.Evidence).

The run's own ranks are known by their pids, gathered per node, so a compute process that is none of them is
another job's (evidence/delta.foreign). run/runner.py calls `take_snapshot` at the end of its setup and
`record` when it closes the run (every measuring command goes through them: the suites, check, selftest), both
outside every timed region. Cost: one node allgather of a pid, one world gather of the snapshots, and the NVML
reads of evidence/read.py on one rank per node (its docstring says what they cost).
"""

from __future__ import annotations

import os
from dataclasses import replace

from ipcbench.evidence.delta import MPS_SERVER
from ipcbench.evidence.model import Evidence, Item, Snapshot
from ipcbench.evidence.read import read_snapshot

UNSEEN_RANKS = ("NVML lists none of this run's ranks, which hold contexts on these GPUs (its pids are of another PID "
                "namespace, or processes are hidden): another job's process cannot be told from the run's own")


def ranks_seen(snap: Snapshot) -> Snapshot:
    """The snapshot, with every GPU's process list marked missing (UNSEEN_RANKS) where NVML lists processes yet none
    of the run's own ranks, which hold a context on their GPUs whenever a snapshot is taken: in a container with its
    own PID namespace NVML gives the host's pids, and every rank would read as another job's process. Under MPS the
    server holds the contexts (its clients are not listed): no judgement of this kind is made there."""
    readable = [g for g in snap.gpus if g.processes.ok and g.processes.value is not None]
    listed = {p.pid for g in readable for p in g.processes.value}
    names = {p.name for g in readable for p in g.processes.value}
    if not readable or not snap.own_pids or set(snap.own_pids) & listed or any(MPS_SERVER in n for n in names):
        return snap
    return replace(snap, gpus=[replace(g, processes=Item.na(UNSEEN_RANKS)) if g in readable else g for g in snap.gpus])


def take_snapshot(world, when: str) -> Snapshot | None:
    """Collective over the node: every rank gives its pid; the node's local rank 0 reads its GPUs (NVML) and
    returns the Snapshot, every other rank None, once it has read them (no rank of the node measures while its
    GPUs are read). Never raises for NVML: a node without it records why."""
    pids = world.node_allgather(os.getpid(), "the pids of this node's ranks")
    snap = None
    if world.local_rank == 0:
        snap = ranks_seen(read_snapshot(when, host=world.host, own_pids=sorted({int(p) for p in pids})))
    world.node_barrier("the node evidence of local rank 0")
    return snap


def record(world, before: Snapshot | None) -> dict | None:
    """Collective over the world: the after snapshot (take_snapshot), and both of every node gathered on world
    rank 0 as meta.json's "evidence" (Evidence.as_json); None on every other rank."""
    after = take_snapshot(world, "after")
    mine = [s.as_json() for s in (before, after) if s is not None]
    gathered = world.world_gather(mine, "the node evidence of every node")
    if world.rank != 0:
        return None
    return Evidence([Snapshot.from_json(s) for node in gathered for s in node]).as_json()
