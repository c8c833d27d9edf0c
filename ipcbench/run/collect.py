"""Where measured rows go, on one node or a fleet.

After every step of the pair schedule the node's rows are gathered to the node leader (node-local rank
0). World rank 0 appends its node's rows to results.csv at once; the leaders of other nodes (fleet runs)
append theirs to <run_dir>/nodes/<host>.csv as they come, so a node's measurements survive on its own
disk if the job dies, and hand them to world rank 0 at the end, which appends them to results.csv.
"""

from __future__ import annotations

from pathlib import Path

from ipcbench.results import ResultsWriter


class RowSink:
    def __init__(self, world, writer: ResultsWriter | None, run_dir: str | None):
        self.world = world
        self.writer = writer  # world rank 0 only
        self.rows: list = []  # what this rank knows: its node's rows (leaders), everyone's (rank 0 at the end)
        self.part = None
        if world.local_rank == 0 and world.rank != 0 and run_dir:
            self.part = ResultsWriter(Path(run_dir) / "nodes", name=f"{world.host}.csv")

    def add(self, rows: list, what: str) -> list:
        """Collective over the node: every rank passes the rows it produced; returns the node's rows on the
        leader (empty elsewhere)."""
        gathered = self.world.node_gather(rows, what)
        if self.world.local_rank != 0:
            return []
        flat = [r for part in gathered for r in part]
        self.rows.extend(flat)
        if self.writer is not None:
            self.writer.write(flat)
        elif self.part is not None:
            self.part.write(flat)
        return flat

    def finish(self) -> list:
        """Collective over the world: other nodes' rows reach world rank 0 and its results.csv."""
        if self.part is not None:
            self.part.close()
        if self.world.n_nodes > 1:
            mine = self.rows if (self.world.local_rank == 0 and self.world.rank != 0) else []
            parts = self.world.world_gather(mine, "the fleet's rows")
            if self.world.rank == 0:
                assert self.writer is not None  # world rank 0 writes results.csv
                extra = [r for part in parts for r in part]
                self.writer.write(extra)
                self.rows.extend(extra)
        return self.rows
