"""Tests of ipcbench.fdpass under mpiexec (pytest-mpi).

These tests exercise the Unix-socket / SCM_RIGHTS / MPI coordination logic with
*ordinary* file descriptors (temporary files); they need no GPU.  In production the
descriptors are CUDA memory-pool handles, which travel the same way.

Run: mpiexec -n 2 python -m pytest --with-mpi tests/mpi/test_fdpass.py   (and -n 4)

Every MPI wait in here is bounded so that a failure on one rank cannot hang the others.
"""

from __future__ import annotations

import os
import stat
import tempfile
import time

import pytest
from mpi4py import MPI

from ipcbench.errors import ShareError, WorldError
from ipcbench.ipc import fdpass
from ipcbench.ipc.fdpass import FdExchange, FdPassError, _barrier

T = 30.0  # generous timeout for waits that should succeed


@pytest.fixture(scope="module")
def node():
    comm = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    yield comm
    comm.Free()


@pytest.fixture
def rank_file(node):
    """A temporary file whose content names this rank; yields its open fd."""
    with tempfile.TemporaryFile() as f:
        f.write(content_of(node.Get_rank()))
        f.flush()
        yield f.fileno()


def content_of(rank: int) -> bytes:
    return f"ipcbench fdpass test, local rank {rank}\n".encode()


def assert_is_file_of(fd: int, rank: int) -> None:
    want = content_of(rank)
    assert os.pread(fd, len(want) + 10, 0) == want


def sync(comm, what="test step"):
    _barrier(comm, T, what)


def bcast_obj(comm, obj):
    """Broadcast a small str from rank 0 with a bounded wait."""
    buf = bytearray(512)
    if comm.Get_rank() == 0:
        data = obj.encode()
        buf[0:2] = len(data).to_bytes(2, "little")
        buf[2 : 2 + len(data)] = data
    fdpass._wait(comm.Ibcast([buf, MPI.BYTE], 0), time.monotonic() + T, comm, "test bcast")
    n = int.from_bytes(buf[0:2], "little")
    return bytes(buf[2 : 2 + n]).decode()


@pytest.mark.mpi(min_size=2)
def test_exchange_all_to_all(node, rank_file):
    me, n = node.Get_rank(), node.Get_size()
    with FdExchange(node, timeout=T) as ex:
        got = ex.exchange(rank_file)
        try:
            assert sorted(got) == [r for r in range(n) if r != me]
            for src, fd in got.items():
                assert fd != rank_file
                assert_is_file_of(fd, src)
                # received descriptors are close-on-exec (MSG_CMSG_CLOEXEC)
                assert os.get_inheritable(fd) is False
        finally:
            for fd in got.values():
                os.close(fd)


@pytest.mark.mpi(min_size=2)
def test_received_fd_is_the_same_file(node):
    """Compare st_dev/st_ino of the received fd with what the sender reports over MPI."""
    with tempfile.TemporaryFile() as f:
        st = os.fstat(f.fileno())
        mine = [st.st_dev, st.st_ino]
        ids = node.allgather(mine)
        with FdExchange(node, timeout=T) as ex:
            got = ex.exchange(f.fileno())
        try:
            for src, fd in got.items():
                s = os.fstat(fd)
                assert [s.st_dev, s.st_ino] == ids[src]
        finally:
            for fd in got.values():
                os.close(fd)


@pytest.mark.mpi(min_size=2)
def test_repeated_exchanges_and_pipes(node):
    """Several rounds in a row (sequence numbers keep them apart); pipes work too."""
    me, n = node.Get_rank(), node.Get_size()
    with FdExchange(node, timeout=T) as ex:
        for round_ in range(5):
            # all peers receive the same read end, so write one fixed-length copy per reader
            msg = f"{me:04d}:{round_:04d}".encode()
            r, w = os.pipe()
            try:
                os.write(w, msg * (n - 1))
                got = ex.exchange(r)
                for src, fd in got.items():
                    try:
                        assert os.read(fd, len(msg)) == f"{src:04d}:{round_:04d}".encode()
                    finally:
                        os.close(fd)
                assert len(got) == n - 1
            finally:
                os.close(r)
                os.close(w)


@pytest.mark.mpi(min_size=2)
def test_private_dir_mode_owner_and_removal(node):
    with FdExchange(node, timeout=T) as ex:
        path = ex.path
        st = os.lstat(path)
        assert stat.S_ISDIR(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o700
        assert st.st_uid == os.geteuid()
        assert os.path.basename(path).startswith("ipcbench-")
        assert os.path.exists(os.path.join(path, f"r{node.Get_rank()}.sock"))
        paths = node.allgather(path)
        assert len(set(paths)) == 1
    assert not os.path.exists(path)


@pytest.mark.mpi(min_size=2)
def test_socket_dir_env(node, monkeypatch):
    base = bcast_obj(node, tempfile.mkdtemp(prefix="ipcb-env-") if node.Get_rank() == 0 else "")
    monkeypatch.setenv("IPCBENCH_SOCKET_DIR", base)
    try:
        with FdExchange(node, timeout=T) as ex:
            assert os.path.dirname(ex.path) == base
        assert os.listdir(base) == []
    finally:
        sync(node)
        if node.Get_rank() == 0:
            os.rmdir(base)


@pytest.mark.mpi(min_size=2)
def test_rank_without_fd(node, rank_file):
    """Local rank 1 has nothing to share (e.g. no pool support there): it sends a bare header."""
    me, n = node.Get_rank(), node.Get_size()
    with FdExchange(node, timeout=T) as ex:
        got = ex.exchange(None if me == 1 else rank_file)
        try:
            want = [r for r in range(n) if r not in (me, 1)]
            assert sorted(got) == want
            for src, fd in got.items():
                assert_is_file_of(fd, src)
        finally:
            for fd in got.values():
                os.close(fd)
        # and the exchange keeps working afterwards
        got = ex.exchange(rank_file)
        assert sorted(got) == [r for r in range(n) if r != me]
        for fd in got.values():
            os.close(fd)


@pytest.mark.mpi(min_size=4)
def test_peer_subsets(node, rank_file):
    """Pairs (0,1) and (2,3) exchange independently, then everybody with everybody."""
    me = node.Get_rank()
    if node.Get_size() != 4:
        pytest.skip("needs exactly 4 local ranks")
    partner = me ^ 1
    with FdExchange(node, timeout=T) as ex:
        got = ex.exchange(rank_file, peers=[partner, me])  # own rank is ignored
        assert list(got) == [partner]
        assert_is_file_of(got[partner], partner)
        os.close(got[partner])
        got = ex.exchange(rank_file)
        assert sorted(got) == [r for r in range(4) if r != me]
        for fd in got.values():
            os.close(fd)


@pytest.mark.mpi(min_size=2)
def test_point_to_point_out_of_order(node, rank_file):
    """send_fd/recv_fd: messages for other tags/senders are buffered until asked for."""
    me, n = node.Get_rank(), node.Get_size()
    with FdExchange(node, timeout=T) as ex:
        if me != 0:
            ex.send_fd(0, rank_file, tag=7)
            ex.send_fd(0, None, tag=8)
            ex.send_fd(0, rank_file, tag=9)
        else:
            for src in reversed(range(1, n)):
                for tag in (9, 7):  # tag 8 arrives first, 9 last: both get buffered
                    fd = ex.recv_fd(src, tag)
                    assert_is_file_of(fd, src)
                    os.close(fd)
                assert ex.recv_fd(src, 8) is None
        sync(node)
        # timing-style ping-pong between 0 and 1
        for i in range(20):
            if me == 0:
                ex.send_fd(1, rank_file, tag=i)
                fd = ex.recv_fd(1, tag=i)
                assert_is_file_of(fd, 1)
                os.close(fd)
            elif me == 1:
                fd = ex.recv_fd(0, tag=i)
                assert_is_file_of(fd, 0)
                os.close(fd)
                ex.send_fd(0, rank_file, tag=i)


@pytest.mark.mpi(min_size=2)
def test_timeout_when_peer_never_sends(node, rank_file):
    me = node.Get_rank()
    with FdExchange(node, timeout=T) as ex:
        if me == 0:
            t0 = time.monotonic()
            with pytest.raises(WorldError, match=r"local rank 0 .*timed out.*local ranks \[1\]"):
                ex.exchange(rank_file, peers=[1], timeout=0.5)
            assert time.monotonic() - t0 < 10
            with pytest.raises(WorldError, match="local rank 1 with tag 5"):
                ex.recv_fd(1, tag=5, timeout=0.3)
        # the other ranks never call exchange, but they keep listening until rank 0 is done
        sync(node, "rank 0 to finish its timeout checks")


@pytest.mark.mpi
def test_its_errors_are_the_projects(node):
    """A request that never completes ends in the one wait loop's WorldError, naming the rank and what it
    waited for; a failed setup is an FdPassError, a ShareError (cli.py prints the project's errors)."""
    class Never:
        @staticmethod
        def Test():
            return False

    t0 = time.monotonic()
    with pytest.raises(WorldError, match=r"timed out after .* waiting for a request that never completes "
                                         r"\(ipcbench.fdpass: local rank \d+ of \d+, world rank \d+\)"):
        fdpass._wait(Never(), time.monotonic() + 0.05, node, "a request that never completes")
    assert time.monotonic() - t0 < 5
    assert issubclass(FdPassError, ShareError)


@pytest.mark.mpi(min_size=2)
def test_dir_removed_when_a_rank_raises(node, rank_file):
    """The last local rank raises inside the context; the others time out instead of hanging."""
    me, n = node.Get_rank(), node.Get_size()

    class Boom(Exception):
        pass

    path = None
    t0 = time.monotonic()
    with pytest.raises((Boom, WorldError)) as info:
        with FdExchange(node, timeout=T) as ex:
            path = ex.path
            if me == n - 1:
                raise Boom("deliberate failure inside the context")
            ex.exchange(rank_file, timeout=1.0)
    if me == n - 1:
        assert info.type is Boom
    assert time.monotonic() - t0 < T
    sync(node, "ranks after the failing context")
    assert path and not os.path.exists(path)


@pytest.mark.mpi(min_size=2)
def test_dir_removed_when_all_ranks_raise(node):
    with pytest.raises(ValueError):
        with FdExchange(node, timeout=T) as ex:
            path = ex.path
            raise ValueError("everybody fails")
    sync(node)
    assert not os.path.exists(path)


@pytest.mark.mpi(min_size=2)
def test_refuses_preexisting_dir(node):
    me = node.Get_rank()
    base = bcast_obj(node, tempfile.mkdtemp(prefix="ipcb-pre-") if me == 0 else "")
    try:
        if me == 0:
            os.mkdir(os.path.join(base, "taken"), 0o700)
        sync(node)
        with pytest.raises(FdPassError, match="pre-existing"):
            with FdExchange(node, timeout=T, base_dir=base, dir_name="taken"):
                pass
        assert os.path.isdir(os.path.join(base, "taken"))  # not ours: left alone
    finally:
        sync(node)
        if me == 0:
            os.rmdir(os.path.join(base, "taken"))
            os.rmdir(base)


@pytest.mark.mpi
def test_refuses_wrong_owner(monkeypatch):
    """If the new directory turns out not to be ours, refuse it (and remove what we made)."""
    base = tempfile.mkdtemp(prefix="ipcb-own-")
    try:
        monkeypatch.setattr(fdpass, "_owner_uid", lambda: os.geteuid() + 1)
        with pytest.raises(FdPassError, match="owned by uid"):
            fdpass._make_private_dir(base, "x", 3)
        assert os.listdir(base) == []
    finally:
        os.rmdir(base)


@pytest.mark.mpi
def test_private_dir_despite_umask():
    base = tempfile.mkdtemp(prefix="ipcb-umask-")
    old = os.umask(0o777)
    try:
        path = fdpass._make_private_dir(base, "x", 0)
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o700
        os.rmdir(path)
    finally:
        os.umask(old)
        os.rmdir(base)


@pytest.mark.mpi
def test_socket_path_too_long():
    base = tempfile.mkdtemp(prefix="ipcb-long-")
    try:
        with pytest.raises(FdPassError, match="IPCBENCH_SOCKET_DIR"):
            fdpass._make_private_dir(base, "d" * 120, 0)
        assert os.listdir(base) == []
    finally:
        os.rmdir(base)


@pytest.mark.mpi(min_size=2)
def test_socket_path_too_long_in_context(node):
    """Local rank 0 detects it before creating anything; every rank gets a clear error."""
    base = bcast_obj(node, tempfile.mkdtemp(prefix="ipcb-long-") if node.Get_rank() == 0 else "")
    try:
        with pytest.raises(FdPassError, match="shorter than 108"):
            with FdExchange(node, timeout=T, base_dir=base, dir_name="d" * 100):
                pass
    finally:
        sync(node)
        if node.Get_rank() == 0:
            assert os.listdir(base) == []
            os.rmdir(base)
