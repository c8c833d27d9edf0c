"""Fleet row collection (ipcbench.run.collect.RowSink) under mpiexec, with ranks split into pretend nodes by
IPCBENCH_NODE_KEY. No GPU: the rows are made up; this tests where rows go (node gathers, per-node part
files, the final gather into rank 0's results.csv), which does not depend on how they were measured."""

import pytest
from mpi4py import MPI

from ipcbench.run.collect import RowSink
from ipcbench.results import ResultsWriter, Row
from ipcbench.record.table import read_rows
from ipcbench.core.world import World

comm = MPI.COMM_WORLD


def fake_row(w, step, i):
    return Row(run_id="t", host=w.host, suite="copy", method="ce", direction="push", src_rank=w.rank,
               dst_rank=-1, src_gpu=w.local_rank, dst_gpu=-1, same_gpu=False, bytes=4096 * (step + 1),
               iterations=1, samples=1, time_us_median=1.0, time_us_min=1.0, time_us_max=1.0,
               bw_gbps_median=4.0, bw_gbps_max=4.0, cv=0.0, verified=True, note=f"s{step}i{i}")


@pytest.mark.mpi(min_size=2)
def test_rows_reach_rank0_and_node_part_files(monkeypatch, tmp_path_factory):
    per_node = 2 if comm.size >= 4 else 1
    monkeypatch.setenv("IPCBENCH_NODE_KEY", f"pretend{comm.rank // per_node}")
    w = World.create(timeout=60)
    run_dir = comm.bcast(str(tmp_path_factory.mktemp("run")) if comm.rank == 0 else None, root=0)
    writer = ResultsWriter(run_dir) if comm.rank == 0 else None
    sink = RowSink(w, writer, run_dir)
    steps = 3
    for step in range(steps):
        # in each step only the node's first two ranks (a "pair") produce rows, like the pair schedule
        mine = [fake_row(w, step, i) for i in range(2)] if w.local_rank < 2 else []
        got = sink.add(mine, f"step {step}")
        if w.local_rank == 0:
            assert len(got) == 2 * min(2, w.local_size)
            assert {r.host for r in got} == {w.host}
        else:
            assert got == []
    rows = sink.finish()
    expected = steps * 2 * sum(min(2, n) for n in [per_node] * w.n_nodes)
    if comm.rank == 0:
        writer.close()
        assert len(rows) == expected
        on_disk = read_rows(f"{run_dir}/results.csv")
        assert len(on_disk) == expected
        assert {r.host for r in on_disk} == {f"pretend{i}" for i in range(w.n_nodes)}
        assert sorted(r.note for r in on_disk if r.host == "pretend0") == sorted(
            f"s{s}i{i}" for s in range(steps) for i in range(2) for _ in range(min(2, per_node)))
    elif w.local_rank == 0:
        part = read_rows(f"{run_dir}/nodes/{w.host}.csv")
        assert len(part) == steps * 2 * min(2, w.local_size)
        assert {r.host for r in part} == {w.host}
    comm.Barrier()
