"""MPI logic of ipcbench.world under mpiexec -n 2 / -n 4 (no GPU: it tests the communicators, the
timed waits and the pretend-node split, which do not care about devices)."""

import os
import subprocess
import sys
import time

import pytest
from mpi4py import MPI

from ipcbench.core.world import World, WorldError

comm = MPI.COMM_WORLD


@pytest.mark.mpi(min_size=2)
def test_node_split_and_identity():
    w = World.create(timeout=30)
    assert w.size == comm.size and w.rank == comm.rank
    assert w.n_nodes == 1 and w.local_size == comm.size and w.local_rank == comm.rank
    assert w.hosts == [w.host]


@pytest.mark.mpi(min_size=4)
def test_pretend_nodes_split(monkeypatch):
    monkeypatch.setenv("IPCBENCH_NODE_KEY", f"pretend{comm.rank // 2}")
    w = World.create(timeout=30)
    assert w.n_nodes == comm.size // 2
    assert w.local_size == 2 and w.local_rank == comm.rank % 2
    assert w.host == f"pretend{comm.rank // 2}"
    assert w.hosts == [f"pretend{i}" for i in range(comm.size // 2)]
    # pair messages stay inside the pretend node
    peer = 1 - w.local_rank
    assert w.exchange(comm.rank, peer) == comm.rank ^ 1


@pytest.mark.mpi(min_size=2)
def test_exchange_and_pair_barrier():
    w = World.create(timeout=30)
    if w.local_rank < 2:
        peer = 1 - w.local_rank
        for i in range(20):
            assert w.exchange((w.local_rank, i), peer) == (peer, i)
            w.pair_barrier(peer)
    w.node_barrier()
    assert w.node_allgather(w.local_rank) == list(range(w.local_size))


@pytest.mark.mpi(min_size=2)
def test_recv_times_out():
    w = World.create(timeout=1.0)
    if w.local_rank == 0:
        with pytest.raises(WorldError, match="waiting for a message from node-local rank 1"):
            w.recv(1, tag=99)
    comm.Barrier()


@pytest.mark.mpi(min_size=2)
def test_error_on_one_rank_aborts_all_with_message():
    """A child job where rank 1 fails: every rank must exit quickly (abort), with rank 1's message."""
    if comm.rank != 0:
        return
    # The real error path of the command line (cli._bench): a rank's exception is printed with its rank
    # and the job is aborted, so the rank waiting for it does not sit out its timeout.
    code = ("import sys\n"
            "from ipcbench import cli\n"
            "import ipcbench.run.runner as runner\n"
            "from ipcbench.core.world import World\n"
            "def fake_run(cfg):\n"
            "    w = World.create(timeout=60)\n"
            "    if w.rank == 1:\n"
            "        raise RuntimeError('simulated failure in a measurement')\n"
            "    w.node_barrier('rank 1, which will never come')\n"
            "runner.run = fake_run\n"
            "sys.exit(cli.main(['copy', '--sizes', '4K']))\n")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(mpiexec):
        pytest.skip("no mpiexec next to the interpreter")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "HYDRA_", "MPIR_", "OMPI_"))}
    t0 = time.monotonic()
    p = subprocess.run([mpiexec, "-n", "2", sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode != 0
    assert "rank 1" in p.stderr and "simulated failure in a measurement" in p.stderr
    assert time.monotonic() - t0 < 60
