"""POSIX shared memory between the two ranks of a pair, pinned for the GPU: the host path's mechanism.

The creator makes a 0600 file in /dev/shm, the peer maps it, and the creator unlinks the name as soon
as the peer has it, so nothing is left behind even if a rank dies later. Both ranks pin it with
cudaHostRegister(Portable|Mapped). Every step is agreed by both ranks (`agree`), so a failure on either
side makes both raise instead of leaving one waiting. CuPy is imported only where memory is pinned: the
staged suite's modules import this one, and suite modules import no CUDA at module import.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import secrets

from ipcbench.errors import StagedError

MiB = 1 << 20
SHM_DIR = "/dev/shm"
SHM_PREFIX = "ipcbench-"
PAGE = 4096
FLAG_BYTES = 1 << 16  # flag page(s) at the start of a segment; chunk buffers start 64 KiB in
AGREE_TAG = 32
SHM_TAG = 31
HOST_REGISTER_PORTABLE = 1  # cudaHostRegisterPortable
HOST_REGISTER_MAPPED = 2  # cudaHostRegisterMapped


def agree(world, peer: int, error: str | None, what: str, tag: int = AGREE_TAG) -> None:
    """Collective over the pair: both ranks of the pair call this, in the same order. Both learn whether either
    failed `what`; both raise if one did (no one-sided hang)."""
    theirs = world.exchange(error, peer, tag)
    if error:
        raise StagedError(f"{what}: {error}")
    if theirs:
        raise StagedError(f"{what} failed on node-local rank {peer}: {theirs}")


def malloc_agreed(ctx, peer: int, nbytes: int, what: str) -> int | None:
    """Collective over the pair: both ranks of the pair call this, in the same order. gpu.malloc on this rank,
    agreed with the peer (both raise if either failed)."""
    ptr, err = None, None
    try:
        ptr = ctx.gpu.malloc(nbytes)
    except Exception as e:  # GpuError: out of memory
        err = str(e)
    try:
        agree(ctx.world, peer, err, what)
    except BaseException:
        if ptr is not None:
            ctx.gpu.free(ptr)
        raise
    return ptr


class ShmSegment:
    """A POSIX shared-memory file in /dev/shm, mapped read-write into this process.

    `addr` is the mapping's address (for cudaHostRegister and ctypes views). The creator unlinks the
    name as soon as the peer has mapped it, so nothing is left behind even if a rank dies later.
    """

    def __init__(self, name: str, mm: mmap.mmap, size: int, creator: bool, directory: str):
        self.name = name
        self.size = size
        self.creator = creator
        self.directory = directory
        self._mm: mmap.mmap | None = mm
        anchor = ctypes.c_char.from_buffer(mm)
        self._anchor: ctypes.c_char | None = anchor  # pins the buffer export; dropped in close()
        self.addr = ctypes.addressof(anchor)
        self.unlinked = not creator

    @property
    def path(self) -> str:
        return os.path.join(self.directory, self.name)

    @classmethod
    def create(cls, size: int, directory: str = SHM_DIR) -> "ShmSegment":
        try:
            st = os.statvfs(directory)
        except OSError as e:
            raise StagedError(f"cannot use {directory} for the staging buffer: {e.strerror or e}") from None
        free = st.f_bavail * st.f_frsize
        if size > free:
            raise StagedError(f"{directory} has {free / MiB:.0f} MiB free but the staging buffer needs "
                              f"{size / MiB:.0f} MiB (enlarge it, e.g. docker --shm-size, or lower "
                              f"IPCBENCH_SHM_CHUNK / IPCBENCH_SHM_SLOTS)")
        name = f"{SHM_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise StagedError(f"cannot create {path}: {e.strerror or e}") from None
        try:
            try:
                # Reserve the pages now: a full tmpfs fails here instead of with SIGBUS on first touch.
                os.posix_fallocate(fd, 0, size)
                mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
        except OSError as e:
            _unlink_quietly(path)
            raise StagedError(f"cannot allocate {size / MiB:.1f} MiB in {path}: {e.strerror or e}") from None
        return cls(name, mm, size, True, directory)

    @classmethod
    def attach(cls, name: str, size: int, directory: str = SHM_DIR) -> "ShmSegment":
        if not name.startswith(SHM_PREFIX) or "/" in name or name in (".", ".."):
            raise StagedError(f"refusing to open a staging segment named {name!r}")
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            raise StagedError(f"cannot open {path}: {e.strerror or e}") from None
        try:
            have = os.fstat(fd).st_size
            if have < size:
                raise StagedError(f"{path} holds {have} bytes, expected at least {size}")
            try:
                mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            except OSError as e:
                raise StagedError(f"cannot map {path}: {e.strerror or e}") from None
        finally:
            os.close(fd)
        return cls(name, mm, size, False, directory)

    def words(self, count: int = FLAG_BYTES // 4):
        """uint32 view of the start of the segment (the flag area); valid until close()."""
        return (ctypes.c_uint32 * count).from_address(self.addr)

    def unlink(self) -> None:
        if not self.unlinked:
            self.unlinked = True
            _unlink_quietly(self.path)

    def close(self) -> None:
        self.unlink()
        if self._mm is not None:
            self._anchor = None
            self._mm.close()
            self._mm = None

    @property
    def closed(self) -> bool:
        return self._mm is None


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def open_pair_segment(world, peer: int, creator: bool, size: int, directory: str = SHM_DIR,
                      tag: int = SHM_TAG) -> ShmSegment:
    """Collective over the pair: both ranks of the pair call this, in the same order. Create (creator) or attach
    (the other rank) one segment shared by a pair; unlinked on return.

    Two exchanges, made by both ranks whatever happens, so a failure on either side makes both raise:
    1. the creator sends the name (or its error); 2. the other rank answers "mapped" (or its error).
    The creator unlinks the name after step 2, in every case.
    """
    if creator:
        seg, err = None, None
        try:
            seg = ShmSegment.create(size, directory)
        except StagedError as e:
            err = str(e)
        _exchange_holding(world, seg, ("err", err) if seg is None else ("name", seg.name), peer, tag)
        reply = _exchange_holding(world, seg, None, peer, tag)
        if seg is None:
            raise StagedError(f"shared staging buffer: {err}")
        seg.unlink()
        if not reply or reply[0] != "ok":
            seg.close()
            raise StagedError(f"node-local rank {peer} could not map the shared staging buffer: "
                              f"{reply[1] if reply else 'no answer'}")
        return seg
    first = world.exchange(None, peer, tag)
    seg, err = None, None
    if first and first[0] == "name":
        try:
            seg = ShmSegment.attach(first[1], size, directory)
        except StagedError as e:
            err = str(e)
    else:
        err = f"node-local rank {peer} could not create it: {first[1] if first else 'no answer'}"
    _exchange_holding(world, seg, ("ok",) if seg is not None else ("err", err), peer, tag)
    if seg is None:
        raise StagedError(f"shared staging buffer: {err}")
    return seg


def _exchange_holding(world, seg, msg, peer: int, tag: int):
    """world.exchange while holding `seg` (or None): if the exchange fails (the peer died, a timeout), this
    side's mapping is closed before the error propagates."""
    try:
        return world.exchange(msg, peer, tag)
    except BaseException:
        if seg is not None:
            seg.close()
        raise


def host_register(gpu, addr: int, size: int, what: str) -> None:
    """cudaHostRegister(Portable|Mapped); with UVA the host address is then valid on the device."""
    from cupy.cuda import runtime

    try:
        same = runtime.deviceGetAttribute(runtime.cudaDevAttrCanUseHostPointerForRegisteredMem, gpu.index)
    except runtime.CUDARuntimeError as e:
        raise StagedError(f"GPU {gpu.index}: cannot query host-pointer support: {e}") from None
    if not same:
        raise StagedError(f"GPU {gpu.index} cannot use host pointers of registered memory on the device "
                          f"(cudaDevAttrCanUseHostPointerForRegisteredMem = 0)")
    try:
        runtime.hostRegister(addr, size, HOST_REGISTER_PORTABLE | HOST_REGISTER_MAPPED)
    except runtime.CUDARuntimeError as e:
        raise StagedError(f"GPU {gpu.index}: cudaHostRegister of the {what} ({size / MiB:.1f} MiB) "
                          f"failed: {e}") from None


def host_unregister(addr: int) -> str | None:
    from cupy.cuda import runtime

    try:
        runtime.hostUnregister(addr)
        return None
    except runtime.CUDARuntimeError as e:
        return f"cudaHostUnregister failed: {e}"
