"""The MPI world: communicators, node grouping, rank -> GPU, the pair schedule, and waits that time out.

IPC is node-local, so everything that pairs ranks works on the node communicator; the world
communicator is only for gathering results and metadata. Every blocking wait here polls with a
deadline so that a dead or stuck rank turns into an error message instead of a hang.

mpi4py is imported inside the methods that use it: importing mpi4py.MPI initialises MPI, and the CLI and
the suites' plans import this module's pure helpers (launcher_rank, ordered_pairs) before any rank may.
"""

from __future__ import annotations

import os
import socket
import zlib
from dataclasses import dataclass, field
from itertools import permutations, combinations
from typing import TYPE_CHECKING

import numpy as np

from ipcbench.core.poll import wait_until
from ipcbench.errors import WorldError

if TYPE_CHECKING:
    from mpi4py import MPI

TIGHT_TAG = 4241  # busy-polled pair exchange
NODE_KEY_ENV = "IPCBENCH_NODE_KEY"  # test-only: pretend ranks with different keys are on different nodes




def launcher_rank() -> int | None:
    """This process's world rank as the launcher's environment tells it, before MPI is initialised."""
    for var in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID"):
        v = os.environ.get(var)
        if v is not None and v.isdigit():
            return int(v)
    return None


def node_key() -> str:
    return os.environ.get(NODE_KEY_ENV) or socket.gethostname().split(".")[0]


def gpu_for_local_rank(local_rank: int, visible: int) -> int:
    """Rank -> GPU: local rank modulo the devices this process sees (more ranks than GPUs share GPUs)."""
    if visible <= 0:
        raise WorldError("no CUDA device visible to this rank")
    return local_rank % visible


def binding_problem(uuids_by_local_rank: list[str], visible_counts: list[int]) -> str | None:
    """Explain per-rank GPU binding (each rank sees one, different GPU), which makes cross-GPU IPC impossible."""
    if len(uuids_by_local_rank) < 2:
        return None
    if all(c == 1 for c in visible_counts) and len(set(uuids_by_local_rank)) > 1:
        return ("each rank sees exactly one GPU and they are different GPUs: the launcher or scheduler binds "
                "one GPU per task (CUDA_VISIBLE_DEVICES per rank, Slurm --gpus-per-task/--gpu-bind, cgroup "
                "ConstrainDevices), so a rank cannot open another GPU's memory through CUDA IPC. Give every "
                "rank all GPUs of the node (e.g. --gpus-per-node / --gres=gpu:N without per-task binding) "
                "and ipcbench picks one per local rank.")
    return None


def ordered_pairs(n: int) -> list[tuple[int, int]]:
    """Every ordered (src, dst) pair of n local ranks, in a fixed order all ranks agree on."""
    return list(permutations(range(n), 2))


def unordered_pairs(n: int) -> list[tuple[int, int]]:
    return list(combinations(range(n), 2))


@dataclass
class World:
    """This process's place in the job. `comm` is COMM_WORLD; `node` the ranks of its (pretend) node."""

    comm: MPI.Comm
    node: MPI.Comm
    rank: int
    size: int
    local_rank: int
    local_size: int
    host: str
    node_index: int
    n_nodes: int
    hosts: list[str]
    timeout: float = 300.0
    node_ranks: list[int] = field(default_factory=list)  # node-local rank -> world rank

    @classmethod
    def create(cls, timeout: float = 300.0) -> "World":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        key = node_key()
        if os.environ.get(NODE_KEY_ENV):
            node = comm.Split(color=zlib.crc32(key.encode()) & 0x7FFFFFFF, key=comm.rank)
        else:
            node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
        # Nodes are numbered by the world rank of their first rank, so every rank agrees.
        leaders = comm.allgather((node.rank == 0, comm.rank, key))
        hosts = [k for is_leader, _, k in sorted(leaders, key=lambda t: t[1]) if is_leader]
        return cls(comm=comm, node=node, rank=comm.rank, size=comm.size, local_rank=node.rank,
                   local_size=node.size, host=key, node_index=hosts.index(key), n_nodes=len(hosts),
                   hosts=hosts, timeout=timeout, node_ranks=node.allgather(comm.rank))

    # ---- waits with a deadline (core/poll.py) --------------------------------------------------
    def _poll(self, req, what: str, timeout: float | None = None):
        result = []

        def done():
            ok, value = req.test()
            if ok:
                result.append(value)
            return ok

        wait_until(done, self.timeout if timeout is None else timeout, f"{what} (rank {self.rank}, {self.host})",
                   error=WorldError)
        return result[0]

    def barrier(self, comm=None, what: str = "the other ranks", timeout: float | None = None) -> None:
        comm = comm or self.node
        self._poll(comm.Ibarrier(), what, timeout)

    def node_barrier(self, what: str = "the other ranks of this node") -> None:
        self.barrier(self.node, what)

    def node_allgather(self, value, what: str = "a node-wide exchange"):
        self.barrier(self.node, what)
        return self.node.allgather(value)

    def node_gather(self, value, what: str = "a node-wide gather"):
        self.barrier(self.node, what)
        return self.node.gather(value, root=0)

    def world_gather(self, value, what: str = "the final gather"):
        self.barrier(self.comm, what)
        return self.comm.gather(value, root=0)

    def world_allgather(self, value, what: str = "a job-wide exchange"):
        self.barrier(self.comm, what)
        return self.comm.allgather(value)

    def world_allreduce_max(self, value, what: str = "an agreement between ranks"):
        from mpi4py import MPI

        self.barrier(self.comm, what)
        return self.comm.allreduce(value, op=MPI.MAX)

    def send(self, value, peer: int, tag: int = 7) -> None:
        """Send to a node-local peer without blocking on a matching receive (the message is small)."""
        req = self.node.isend(value, dest=peer, tag=tag)
        self._poll(req, f"node-local rank {peer} to take a message (tag {tag})")

    def recv(self, peer: int, tag: int = 7, what: str | None = None):
        from mpi4py import MPI

        status = MPI.Status()
        wait_until(lambda: self.node.Iprobe(source=peer, tag=tag, status=status), self.timeout,
                   f"{what or f'a message from node-local rank {peer}'} (rank {self.rank}, {self.host})",
                   error=WorldError)
        return self.node.recv(source=peer, tag=tag)

    def exchange(self, value, peer: int, tag: int = 9):
        """Swap a small value with a peer: a pair barrier that also carries data."""
        req = self.node.isend(value, dest=peer, tag=tag)
        other = self.recv(peer, tag)
        self._poll(req, f"node-local rank {peer} to take a message (tag {tag})")
        return other

    def pair_barrier(self, peer: int, tag: int = 11) -> None:
        self.exchange(None, peer, tag)

    def tight_exchange(self, value: int, peer: int, what: str) -> int:
        """Swap one int with a node-local peer, busy-polling (no sleeps), so that both leave within MPI
        latency: the barrier right before a timed region whose two sides must start together."""
        from mpi4py import MPI

        sbuf = np.array([value], dtype=np.int64)
        rbuf = np.zeros(1, dtype=np.int64)
        rreq = self.node.Irecv([rbuf, MPI.INT64_T], source=peer, tag=TIGHT_TAG)
        sreq = self.node.Isend([sbuf, MPI.INT64_T], dest=peer, tag=TIGHT_TAG)
        wait_until(rreq.Test, self.timeout, what, max_sleep=0, error=WorldError)
        wait_until(sreq.Test, self.timeout, what, max_sleep=0, error=WorldError)
        return int(rbuf[0])
