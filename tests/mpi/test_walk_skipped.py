"""Skipped steps under mpiexec (run/walk.py): a step whose need this node lacks is skipped on every rank with its
reason, and world rank 0 gets every node's skipped steps for meta.json (record/meta.Skipped), the gather being a
real MPI collective. Run: mpiexec -n 2|4 python -m pytest --with-mpi tests/mpi."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from mpi4py import MPI

from ipcbench.core.schedule import PairMode
from ipcbench.core.world import World
from ipcbench.record.meta import Skipped
from ipcbench.run.collect import RowSink
from ipcbench.run.walk import walk
from ipcbench.suites.registry import Step

comm = MPI.COMM_WORLD


@pytest.mark.mpi(min_size=2)
def test_every_rank_skips_alike_and_rank_0_records_why():
    world = World.create(timeout=20)
    ctx = SimpleNamespace(world=world, buffers={"legacy": object()}, gpu_model="",
                          unavailable={"nccl": "NCCL not installed"}, gpu_of=list(range(world.local_size)), mps=False)
    ctx.has = lambda need: need in ctx.buffers

    def never(ctx, src, dst, sizes):
        raise AssertionError("a skipped step ran")

    steps = [Step("nccl", "nccl push", [(0, 1)], [1024], never, needs=("nccl",)),
             Step("kernel", "sm_bulk_read pull", [(0, 1)], [1024], never, needs=("bulk_copy",))]
    skipped: list = []
    rows, checks = walk(ctx, steps, RowSink(world, None, None), quiet=True, mode=PairMode("sequential", "sequential",
                                                                                          "test"), skipped=skipped)
    assert rows == [] and checks == []
    if comm.rank == 0:
        got = [Skipped.from_json(s) for s in skipped]
        assert got == [Skipped("nccl", "nccl push", "NCCL not installed", world.host),
                       Skipped("kernel", "sm_bulk_read pull", "bulk_copy unavailable", world.host)] * world.n_nodes
    else:
        assert skipped == []
