"""The fd plumbing of the vmm sharer (ipc/vmm.share_fd_exports, VmmIpc.allgather_exports) under mpiexec.

This tests the fd plumbing, not CUDA: every rank exports several ordinary memfds with known content in place
of cuMemExportToShareableHandle's fds, and checks that it received every peer's, in order, with their sizes,
and that the sharer closed its own exported fds once they were sent. The driver calls are covered by
tests/test_gpu_vmm.py on a GPU machine.

Run: mpiexec -n 2 python -m pytest --with-mpi tests/mpi/test_vmm_fds.py   (and -n 4)
"""

from __future__ import annotations

import os

import pytest
from mpi4py import MPI

from ipcbench.core.world import World
from ipcbench.errors import ShareError
from ipcbench.ipc import vmm

EXPORTS = 3


def content(rank: int, i: int) -> bytes:
    return f"vmm fd test: local rank {rank}, export {i}\n".encode()


def memfd_with(data: bytes) -> int:
    fd = os.memfd_create("ipcbench-vmm-test", os.MFD_CLOEXEC)
    os.write(fd, data)
    return fd


def my_exports(rank: int) -> tuple[vmm.FdExport, ...]:
    # distinct sizes and alignments per rank and export, so a mix-up shows
    return tuple(vmm.FdExport(memfd_with(content(rank, i)), (rank + 1) * (i + 1) << 21, 1 << (21 + i))
                 for i in range(EXPORTS))


def check_received(world, everyone) -> None:
    assert len(everyone) == world.local_size
    seen = set()
    for r, exports in enumerate(everyone):
        assert len(exports) == EXPORTS
        for i, e in enumerate(exports):
            assert (e.nbytes, e.alignment) == ((r + 1) * (i + 1) << 21, 1 << (21 + i))
            if r == world.local_rank:
                assert e.fd is None  # this rank's own entry carries no fd
                continue
            assert e.fd not in seen
            seen.add(e.fd)
            want = content(r, i)
            assert os.pread(e.fd, len(want) + 8, 0) == want
            assert os.get_inheritable(e.fd) is False
            os.close(e.fd)


@pytest.mark.mpi(min_size=2)
def test_every_rank_receives_every_peers_fds():
    w = World.create(timeout=30)
    mine = my_exports(w.local_rank)
    try:
        everyone = vmm.share_fd_exports(w, mine)
    finally:
        for e in mine:
            os.close(e.fd)
    check_received(w, everyone)
    w.node_barrier("every rank checked its fds")


@pytest.mark.mpi(min_size=2)
def test_the_sharer_hook_closes_its_exported_fds():
    """VmmIpc.allgather_exports (BufferSet's hook) without a GPU: only its world and exported fds are set."""
    w = World.create(timeout=30)
    sharer = vmm.VmmIpc.__new__(vmm.VmmIpc)
    sharer.world, sharer.rank = w, w.rank
    mine = my_exports(w.local_rank)
    sharer._exported_fds = [e.fd for e in mine]
    everyone = sharer.allgather_exports(mine)
    for e in mine:
        with pytest.raises(OSError):
            os.fstat(e.fd)  # closed: the peers hold their own duplicates
    check_received(w, everyone)
    w.node_barrier("every rank checked its fds")


@pytest.mark.mpi(min_size=2)
def test_ranks_with_different_export_counts_all_fail_alike():
    w = World.create(timeout=30)
    mine = my_exports(w.local_rank)[: 2 if w.local_rank == 0 else EXPORTS]
    try:
        with pytest.raises(ShareError, match="export different numbers of VMM allocations"):
            vmm.share_fd_exports(w, mine)
    finally:
        for e in mine:
            os.close(e.fd)
    MPI.COMM_WORLD.Barrier()
