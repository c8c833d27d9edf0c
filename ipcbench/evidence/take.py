"""The node's evidence of a run: a snapshot on each node's local rank 0 before the first measurement and after the
last, gathered on world rank 0 for meta.json's "evidence" (evidence/model.Evidence).

The run's own ranks are known by their pids, gathered per node, so a compute process that is none of them is
another job's (evidence/delta.foreign). Every measuring command (the suites, check, selftest) goes through
run/runner.py, which starts the before snapshot once every rank has its GPU and `record`s the after one when the
run closes, both outside every timed region. A snapshot is read on a helper thread (`start_snapshot`) while the
ranks go on with work that measures nothing: the before one while the run sets up its buffers, the after one while
it releases them where nothing is measured after the release (not selftest's: its anchors follow). NVML took 0.14 s
a snapshot of two H200s, most of it 72 NVLink error counters a GPU. `Reading.done` waits for it: no rank of the
node measures until then. Cost: one node allgather of a pid, one world gather of the snapshots, and the NVML reads
of evidence/read.py on one rank per node (its docstring says what they cost).
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
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


class Reading:
    """A node snapshot being read (start_snapshot): on the node's local rank 0 a helper thread's Future, on every
    other rank nothing."""

    def __init__(self, future: Future | None):
        self.future = future

    def done(self, world) -> Snapshot | None:
        """Collective over the node: the Snapshot on local rank 0 once read (a reading that raised raises here),
        None elsewhere; no rank of the node returns before it is read."""
        snap = self.future.result() if self.future is not None else None
        world.node_barrier("the node evidence of local rank 0")
        return snap


def start_snapshot(world, when: str, helpers: list[int] | tuple[int, ...] = ()) -> Reading:
    """Collective over the node: every rank gives its pid and those of the `helpers` it started (so every rank
    has made its GPU context, and a helper that holds one is the run's own, not another job's), then the node's
    local rank 0 starts reading its GPUs (NVML) on a helper thread and every rank goes on. Never raises for
    NVML: a node without it records why."""
    pids = world.node_allgather([os.getpid(), *helpers], "the pids of this node's ranks")
    if world.local_rank != 0:
        return Reading(None)
    own = sorted({int(p) for rank in pids for p in rank})
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ipcbench-evidence")
    future = pool.submit(lambda: ranks_seen(read_snapshot(when, host=world.host, own_pids=own)))
    pool.shutdown(wait=False)  # the thread ends with its one reading
    return Reading(future)


def record(world, before: Snapshot | None, after_reading: Reading | None = None,
           helpers: list[int] | tuple[int, ...] = ()) -> dict | None:
    """Collective over the world: the after snapshot (`after_reading`, started once the last measurement was done;
    taken now without one, with the `helpers` this rank started among the run's own), and both of every node
    gathered on world rank 0 as meta.json's "evidence" (Evidence.as_json); None on every other rank."""
    after = (after_reading or start_snapshot(world, "after", helpers)).done(world)
    mine = [s.as_json() for s in (before, after) if s is not None]
    gathered = world.world_gather(mine, "the node evidence of every node")
    if world.rank != 0:
        return None
    return Evidence([Snapshot.from_json(s) for node in gathered for s in node]).as_json()
