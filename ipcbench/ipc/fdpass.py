"""Pass POSIX file descriptors between the MPI ranks of one node.

CUDA stream-ordered memory pools are shared between processes as POSIX file
descriptors (``cudaMemPoolExportToShareableHandle`` with
``cudaMemHandleTypePosixFileDescriptor``).  MPI cannot carry descriptors, so
they travel over Unix-domain sockets with ``SCM_RIGHTS``
(:func:`socket.send_fds` / :func:`socket.recv_fds`): the kernel installs a
duplicate of the sender's descriptor in the receiving process.

Layout: node-local rank 0 creates a private directory (mode 0700, owned by us)
under ``$IPCBENCH_SOCKET_DIR``, else ``$TMPDIR``, else ``/tmp``, and
broadcasts its path; every local rank listens on ``<dir>/r<local_rank>.sock``.
Sending a descriptor = connect to the peer's socket, send one small
fixed-size header (plus the descriptor), close.  The message fits the socket
buffer, so the send completes without the peer calling ``accept`` first; this
is what makes the all-to-all :meth:`FdExchange.exchange` deadlock-free (all
ranks send first, then receive).

Every wait is bounded: socket operations use socket timeouts, and MPI
collectives are issued non-blocking and polled against a deadline (the one wait
loop, core/poll.wait_until).  A wait that runs out, or a peer that is not
listening, raises :class:`ipcbench.errors.WorldError` naming the rank and what
it waited for; a setup that fails raises :class:`FdPassError` (a ShareError).

This module imports no CUDA; it works with any file descriptor. It imports mpi4py only inside the
functions that talk MPI (importing mpi4py.MPI initialises MPI, and the sharers that pass fds are imported
by code that must not: the tests, `ipcbench info`).
``pidfd_getfd`` is deliberately not used (it fails under Yama
``ptrace_scope=1``).
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import secrets
import shutil
import socket
import stat
import struct
import time
from array import array
from collections import deque
from typing import TYPE_CHECKING, Callable, Iterable, Literal

from ipcbench.core.poll import wait_until
from ipcbench.errors import ShareError, WorldError

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["FdExchange", "FdPassError", "socket_base_dir"]

#: Linux ``sizeof(sockaddr_un.sun_path)``; the path plus its NUL must fit.
_SUN_PATH_MAX = 108

# Header: magic, version, kind, has_fd, pad, sender local rank, tag, job token.
_HDR = struct.Struct("<4sBBBxiq16s")
_MAGIC = b"IPCF"
_VERSION = 1
_KIND_EXCHANGE = 1
_KIND_P2P = 2

# Broadcast of the directory path from local rank 0: status byte, 16-byte token,
# 2-byte length, then UTF-8 text (the path, or an error message).
_BCAST_SIZE = 4096

# Indirection so tests can simulate a foreign owner.
_owner_uid = os.geteuid

_MAX_SLEEP_S = 0.01  # polling an MPI request of the setup or teardown: no timed region waits on it


class FdPassError(ShareError):
    """Setting up or using the fd exchange failed (on this rank or on a peer)."""


def socket_base_dir() -> str:
    """Where the per-job socket directory goes: ``$IPCBENCH_SOCKET_DIR``, ``$TMPDIR`` or ``/tmp``."""
    return os.environ.get("IPCBENCH_SOCKET_DIR") or os.environ.get("TMPDIR") or "/tmp"


def _job_id() -> str:
    for var in ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID", "JOB_ID"):
        val = os.environ.get(var)
        if val:
            val = re.sub(r"[^A-Za-z0-9_.-]", "_", val)[:24]
            if val:
                return val
    return str(os.getpid())


def _default_dir_name() -> str:
    return f"ipcbench-{_job_id()}-{secrets.token_hex(4)}"


def _sock_path(directory: str, local_rank: int) -> str:
    return os.path.join(directory, f"r{local_rank}.sock")


def _check_sock_path_len(path: str) -> None:
    n = len(os.fsencode(path))
    if n >= _SUN_PATH_MAX:
        raise FdPassError(
            f"Unix socket path {path!r} is {n} bytes; it must be shorter than "
            f"{_SUN_PATH_MAX} bytes. Set IPCBENCH_SOCKET_DIR (or TMPDIR) to a shorter directory, e.g. /tmp."
        )


def _make_private_dir(base: str, name: str, max_local_rank: int) -> str:
    """Create ``base/name`` with mode 0700 and check it is ours; refuse an existing path."""
    if os.sep in name or name in ("", ".", ".."):
        raise ValueError(f"bad socket directory name {name!r}")
    path = os.path.join(os.path.abspath(base), name)
    _check_sock_path_len(_sock_path(path, max_local_rank))
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        raise FdPassError(
            f"refusing to use pre-existing path {path!r} as the private socket directory"
        ) from None
    try:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            raise FdPassError(f"{path!r} is not a directory after mkdir")
        if st.st_uid != _owner_uid():
            raise FdPassError(
                f"socket directory {path!r} is owned by uid {st.st_uid}, not by us (uid {_owner_uid()}); refusing it"
            )
        if stat.S_IMODE(st.st_mode) != 0o700:  # umask may have removed owner bits
            os.chmod(path, 0o700)
            st = os.lstat(path)
            if stat.S_IMODE(st.st_mode) != 0o700:
                raise FdPassError(f"cannot make {path!r} mode 0700 (it is {stat.S_IMODE(st.st_mode):o})")
    except BaseException:
        try:
            os.rmdir(path)  # we created it; only succeeds if still empty
        except OSError:
            pass
        raise
    return path


def _rmtree_quiet(path: str | None) -> None:
    if path:
        shutil.rmtree(path, ignore_errors=True)


def _recv_with_fds(sock: socket.socket, bufsize: int, fds: list[int], maxfds: int = 4) -> bytes:
    """``recvmsg`` that appends received descriptors to ``fds``, installing them close-on-exec.

    (``socket.recv_fds`` of Python <= 3.12 ignores its ``flags`` argument, so it cannot do that.)
    """
    item = array("i").itemsize
    msg, ancdata, _flags, _addr = sock.recvmsg(
        bufsize, socket.CMSG_SPACE(maxfds * item), getattr(socket, "MSG_CMSG_CLOEXEC", 0)
    )
    for level, typ, cdata in ancdata:
        if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
            got = array("i")
            got.frombytes(cdata[: len(cdata) - len(cdata) % item])
            fds.extend(got)
    return msg


def _wait(req: MPI.Request, deadline: float, comm: MPI.Comm, what: str) -> None:
    """Poll ``req`` until done (core/poll.wait_until); WorldError once ``deadline`` (time.monotonic) passes."""
    from mpi4py import MPI

    who = (f"ipcbench.fdpass: local rank {comm.Get_rank()} of {comm.Get_size()}, "
           f"world rank {MPI.COMM_WORLD.Get_rank()}")
    wait_until(req.Test, max(deadline - time.monotonic(), 0.0), f"{what} ({who})", max_sleep=_MAX_SLEEP_S,
               error=WorldError)


def _barrier(comm: MPI.Comm, timeout: float, what: str) -> None:
    """A barrier that gives up after ``timeout`` seconds with a WorldError naming ``what``.

    On timeout the Ibarrier stays pending on ``comm``; the communicator should not be used
    for further collectives afterwards.
    """
    _wait(comm.Ibarrier(), time.monotonic() + timeout, comm, what)


class FdExchange:
    """Collective over the node: every rank of ``comm`` enters and leaves it, in the same order. A context
    manager that passes file descriptors between the ranks of one node.

    ``comm`` is a node-local communicator (e.g. ``MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)``).
    ``timeout`` (seconds) bounds every wait.  ``base_dir``/``dir_name`` override where the private
    directory goes and its name (default: :func:`socket_base_dir` and
    ``ipcbench-<jobid-or-pid>-<random>``); the directory must not exist yet.

    After a :class:`~ipcbench.errors.WorldError` the object's state (sequence numbers, pending collectives) is
    undefined; leave the context and make a new one.
    """

    def __init__(
        self,
        comm: MPI.Comm,
        timeout: float = 60.0,
        *,
        base_dir: str | None = None,
        dir_name: str | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self._parent = comm
        self.timeout = float(timeout)
        self._base_dir = base_dir
        self._dir_name = dir_name
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.path: str | None = None
        self._comm: MPI.Comm | None = None
        self._listener: socket.socket | None = None
        self._token = b""
        self._inbox: dict[tuple[int, int, int], deque] = {}
        self._seq_send: dict[int, int] = {}
        self._seq_recv: dict[int, int] = {}
        self._atexit: Callable[[], None] | None = None
        self._entered = False
        self._timeout_used = self.timeout

    # ------------------------------------------------------------------ setup
    def __enter__(self) -> "FdExchange":
        if self._entered:
            raise FdPassError("FdExchange is not re-entrant")
        self._entered = True
        deadline = time.monotonic() + self.timeout
        comm, req = self._parent.Idup()
        _wait(req, deadline, self._parent, "all local ranks to enter FdExchange (communicator dup)")
        self._comm = comm
        try:
            self._setup(comm, deadline)
        except BaseException:
            self._teardown(failed=True)
            raise
        return self

    def _setup(self, comm: MPI.Comm, deadline: float) -> None:
        from mpi4py import MPI

        buf = bytearray(_BCAST_SIZE)
        err: BaseException | None = None
        if self.rank == 0:
            try:
                base = self._base_dir if self._base_dir is not None else socket_base_dir()
                name = self._dir_name if self._dir_name is not None else _default_dir_name()
                self.path = _make_private_dir(base, name, self.size - 1)
                self._atexit = functools.partial(_rmtree_quiet, self.path)
                atexit.register(self._atexit)
                status, token, text = 1, secrets.token_bytes(16), self.path
            except Exception as e:  # tell the others before raising
                err = e
                status, token, text = 0, bytes(16), f"{type(e).__name__}: {e}"
            data = text.encode("utf-8", "surrogateescape")[: _BCAST_SIZE - 19]
            buf[0] = status
            buf[1:17] = token
            buf[17:19] = len(data).to_bytes(2, "little")
            buf[19 : 19 + len(data)] = data
        _wait(comm.Ibcast([buf, MPI.BYTE], root=0), deadline, comm, "the socket directory path from local rank 0")
        if err is not None:
            raise err
        n = int.from_bytes(buf[17:19], "little")
        text = bytes(buf[19 : 19 + n]).decode("utf-8", "surrogateescape")
        if buf[0] != 1:
            raise FdPassError(f"local rank 0 could not create the socket directory: {text}")
        self._token = bytes(buf[1:17])
        self.path = text

        # Bind and listen; then agree that everybody is listening before anyone connects.
        err = None
        try:
            sp = _sock_path(self.path, self.rank)
            _check_sock_path_len(sp)
            lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                lst.bind(sp)
                lst.listen(max(socket.SOMAXCONN, 2 * self.size))
            except BaseException:
                lst.close()
                raise
            self._listener = lst
        except Exception as e:
            err = e
        ok = array("i", [0 if err else 1])
        all_ok = array("i", [0])
        _wait(comm.Iallreduce(ok, all_ok, op=MPI.MIN), deadline, comm, "all local ranks to bind their sockets")
        if err is not None:
            raise FdPassError(f"local rank {self.rank} could not listen on its socket: {err}") from err
        if not all_ok[0]:
            raise FdPassError(f"local rank {self.rank}: another local rank could not listen on its socket")

    # --------------------------------------------------------------- teardown
    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        self._teardown(failed=exc_type is not None)
        return False

    def close(self) -> None:
        """Leave without the context manager (same as ``__exit__`` with no exception)."""
        self._teardown(failed=False)

    def _teardown(self, failed: bool) -> None:
        if self._comm is None:
            return
        comm, self._comm = self._comm, None
        if self._listener is not None:
            try:
                sp = self._listener.getsockname()
            except OSError:
                sp = None
            self._listener.close()
            self._listener = None
            if sp:
                try:
                    os.unlink(sp)
                except OSError:
                    pass
        for q in self._inbox.values():
            for fd in q:
                if fd is not None:
                    os.close(fd)
        self._inbox.clear()
        # 1) everybody has stopped using the directory; 2) local rank 0 removes it;
        # 3) a second barrier so that the directory is gone on every rank when we return.
        # On timeout local rank 0 removes the directory anyway.
        barrier_err: BaseException | None = None
        try:
            _barrier(comm, self.timeout, "all local ranks to leave FdExchange (close their sockets)")
        except WorldError as e:
            barrier_err = e
        finally:
            if self.rank == 0 and self.path:
                _rmtree_quiet(self.path)
                if self._atexit is not None:
                    atexit.unregister(self._atexit)
                    self._atexit = None
        if barrier_err is None:
            try:
                _barrier(comm, self.timeout, "local rank 0 to remove the socket directory")
            except WorldError as e:
                barrier_err = e
        if barrier_err is None:
            comm.Free()
        elif not failed:  # on an error path, don't mask the original exception
            raise barrier_err

    # ------------------------------------------------------------- messaging
    def _check_open(self) -> None:
        if self._comm is None or self._listener is None:
            raise FdPassError("FdExchange is not open (use it inside `with`)")

    def _check_rank(self, r: int) -> int:
        r = int(r)
        if not 0 <= r < self.size:
            raise ValueError(f"local rank {r} out of range 0..{self.size - 1}")
        return r

    def _err_prefix(self) -> str:
        from mpi4py import MPI

        return f"ipcbench.fdpass: local rank {self.rank} (world rank {MPI.COMM_WORLD.Get_rank()})"

    def _send(self, dest: int, kind: int, tag: int, fd: int | None, deadline: float) -> None:
        hdr = _HDR.pack(_MAGIC, _VERSION, kind, 0 if fd is None else 1, self.rank, tag, self._token)
        assert self.path is not None  # set by __enter__ (_check_open)
        path = _sock_path(self.path, dest)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(max(deadline - time.monotonic(), 1e-3))
            try:
                s.connect(path)
            except (FileNotFoundError, ConnectionRefusedError) as e:
                raise WorldError(
                    f"{self._err_prefix()}: local rank {dest} is not listening on {path} "
                    f"(did it leave the FdExchange or fail?): {e}"
                ) from e
            except socket.timeout:
                raise WorldError(
                    f"{self._err_prefix()} timed out connecting to local rank {dest} (its backlog is full?)"
                ) from None
            try:
                if fd is None:
                    s.sendall(hdr)
                else:
                    n = socket.send_fds(s, [hdr], [fd])
                    if n < len(hdr):
                        s.sendall(hdr[n:])
            except socket.timeout:
                raise WorldError(f"{self._err_prefix()} timed out sending to local rank {dest}") from None
        finally:
            s.close()

    def _receive_one(self, deadline: float, what) -> None:
        """Accept one connection, read its message and file it in the inbox."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WorldError(f"{self._err_prefix()} timed out after {self._timeout_used:.3g}s waiting for {what()}")
        listener = self._listener
        assert listener is not None  # listening since __enter__ (_check_open)
        listener.settimeout(remaining)
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            raise WorldError(
                f"{self._err_prefix()} timed out after {self._timeout_used:.3g}s waiting for {what()}"
            ) from None
        fds: list[int] = []
        try:
            with conn:
                conn.settimeout(max(deadline - time.monotonic(), 1e-3))
                uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
                data = b""
                try:
                    while len(data) < _HDR.size:
                        chunk = _recv_with_fds(conn, _HDR.size - len(data), fds)
                        if not chunk:
                            break
                        data += chunk
                except socket.timeout:
                    raise WorldError(
                        f"{self._err_prefix()} timed out reading a message (waiting for {what()})"
                    ) from None
            if uid != _owner_uid() or len(data) != _HDR.size:
                return  # not from us / truncated: drop
            magic, version, kind, has_fd, src, tag, token = _HDR.unpack(data)
            if magic != _MAGIC or version != _VERSION or token != self._token or not 0 <= src < self.size:
                return
            if (has_fd and len(fds) != 1) or (not has_fd and fds):
                return
            if kind == _KIND_EXCHANGE and tag < self._seq_recv.get(src, 0):
                return  # stale message from an earlier exchange
            if kind not in (_KIND_EXCHANGE, _KIND_P2P):
                return
            self._inbox.setdefault((kind, src, tag), deque()).append(fds[0] if has_fd else None)
            fds = []
        finally:
            for fd in fds:  # whatever was not kept
                os.close(fd)

    def exchange(
        self, my_fd: int | None, peers: Iterable[int] | None = None, *, timeout: float | None = None
    ) -> dict[int, int]:
        """Collective over ``peers``: every rank listed calls this with this rank among its peers, in the same
        order. All-to-all: send ``my_fd`` to every rank in ``peers`` and receive one fd from each.

        ``peers`` defaults to all other local ranks (this rank is ignored if listed).  ``my_fd=None``
        sends a header without a descriptor.  Returns ``{sender_local_rank: fd}`` for the peers that sent
        one; the caller owns (and must close) those descriptors.  ``timeout`` overrides the
        object's timeout for this call.
        """
        self._check_open()
        if my_fd is not None:
            my_fd = int(my_fd)
            if my_fd < 0:
                raise ValueError(f"bad file descriptor {my_fd}")
        if peers is None:
            plist = [r for r in range(self.size) if r != self.rank]
        else:
            plist = sorted({self._check_rank(r) for r in peers} - {self.rank})
        t = self.timeout if timeout is None else float(timeout)
        self._timeout_used = t
        deadline = time.monotonic() + t
        # Send first, starting after ourselves so that not everybody hits rank 0 at once.
        for dest in sorted(plist, key=lambda r: (r - self.rank) % self.size):
            seq = self._seq_send.get(dest, 0)
            self._send(dest, _KIND_EXCHANGE, seq, my_fd, deadline)
            self._seq_send[dest] = seq + 1
        want = {src: (_KIND_EXCHANGE, src, self._seq_recv.get(src, 0)) for src in plist}

        def missing() -> list[int]:
            return [s for s, k in want.items() if not self._inbox.get(k)]

        def what() -> str:
            return f"exchange messages from local ranks {missing()} (peers {plist})"

        while missing():
            self._receive_one(deadline, what)
        out: dict[int, int] = {}
        for src, key in want.items():
            q = self._inbox[key]
            fd = q.popleft()
            if not q:
                del self._inbox[key]
            self._seq_recv[src] = key[2] + 1
            if fd is not None:
                out[src] = fd
        return out

    def send_fd(self, dest_local_rank: int, fd: int | None, tag: int = 0, *, timeout: float | None = None) -> None:
        """Send one descriptor (or, with ``fd=None``, an empty notice) to ``dest_local_rank``.

        Completes without the receiver being in :meth:`recv_fd` (the message is buffered).
        """
        self._check_open()
        dest = self._check_rank(dest_local_rank)
        t = self.timeout if timeout is None else float(timeout)
        self._timeout_used = t
        self._send(dest, _KIND_P2P, int(tag), None if fd is None else int(fd), time.monotonic() + t)

    def recv_fd(self, src_local_rank: int, tag: int = 0, *, timeout: float | None = None) -> int | None:
        """Receive the next descriptor that ``src_local_rank`` sent with ``tag`` (caller owns it).

        Messages from other senders or with other tags that arrive meanwhile are kept for later
        calls.  Returns ``None`` if the sender sent ``fd=None``.
        """
        self._check_open()
        src = self._check_rank(src_local_rank)
        key = (_KIND_P2P, src, int(tag))
        t = self.timeout if timeout is None else float(timeout)
        self._timeout_used = t
        deadline = time.monotonic() + t
        while not self._inbox.get(key):
            self._receive_one(deadline, lambda: f"an fd from local rank {src} with tag {tag}")
        q = self._inbox[key]
        fd = q.popleft()
        if not q:
            del self._inbox[key]
        return fd
