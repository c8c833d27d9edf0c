"""CUDA virtual memory management (VMM) shared across ranks: cuMemCreate allocations exported as POSIX fds.

This is how PyTorch's expandable segments and NCCL's cuMem path share memory: the owner creates a physical
allocation (cuMemCreate, pinned on its device, exportable as a POSIX fd), reserves a virtual address range,
maps the allocation there and grants its device read/write access; the fd of each allocation
(cuMemExportToShareableHandle) goes to every node-local peer over a Unix socket with SCM_RIGHTS
(fdpass.FdExchange: MPI cannot carry fds), and each peer imports it (cuMemImportFromShareableHandle),
reserves, maps and grants its own device access. Same interface as legacy.LegacyIpc and pool.PoolIpc,
plus `allgather_exports`, which BufferSet.create calls instead of an MPI allgather when a sharer has it.

Driver calls act on the thread's current context: the sharer makes the device's primary context (the one
CuPy and the runtime use) current first, so the mappings are usable by every copy and kernel of the run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cuda.bindings import driver
from cuda.bindings import runtime as rt

from ipcbench.errors import ShareError
from ipcbench.ipc.fdpass import FdExchange

_A = driver.CUdevice_attribute
_FD = driver.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_FABRIC = getattr(driver.CUmemAllocationHandleType, "CU_MEM_HANDLE_TYPE_FABRIC", None)  # CUDA 12.3+
IMEX_CHANNELS = "/dev/nvidia-caps-imex-channels"  # where the driver's IMEX channel devices live
_DEVICE = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE


# ---- pure helpers -------------------------------------------------------------------------------
def round_up(nbytes: int, granule: int) -> int:
    """nbytes rounded up to a multiple of granule; at least one granule (a mapping is never empty)."""
    if granule < 1:
        raise ValueError(f"granularity must be >= 1, got {granule}")
    return max(1, -(-int(nbytes) // granule)) * granule


def reserve_alignment(*granules: int) -> int:
    """An alignment that satisfies every granularity given (each a power of two: the largest one)."""
    for g in granules:
        if g < 1 or g & (g - 1):
            raise ValueError(f"granularity {g} is not a power of two")
    return max(granules)


# ---- driver calls -------------------------------------------------------------------------------
def _err_text(err) -> str:
    name = driver.cuGetErrorName(err)
    text = driver.cuGetErrorString(err)
    if name[0] == driver.CUresult.CUDA_SUCCESS and text[0] == driver.CUresult.CUDA_SUCCESS:
        return f"{name[1].decode()}: {text[1].decode()}"
    return str(err)


def _who(rank: int | None) -> str:
    return f"rank {rank}: " if rank is not None else ""


def unwrap(res, call: str, rank: int | None = None):
    """Unwrap a cuda.bindings driver result tuple, raising ShareError that names the rank and the call."""
    err = res[0]
    if err != driver.CUresult.CUDA_SUCCESS:
        raise ShareError(f"{_who(rank)}{call} failed ({_err_text(err)})")
    if len(res) == 1:
        return None
    return res[1] if len(res) == 2 else res[1:]


def _check_rt(res, call: str, rank: int | None):
    if res[0] != rt.cudaError_t.cudaSuccess:
        raise ShareError(f"{_who(rank)}{call} failed ({res[0].name})")


def _attribute(attr, device: int) -> int:
    unwrap(driver.cuInit(0), "cuInit")
    dev = unwrap(driver.cuDeviceGet(device), f"cuDeviceGet({device})")
    return int(unwrap(driver.cuDeviceGetAttribute(attr, dev), f"cuDeviceGetAttribute({attr.name})"))


def vmm_support(device: int) -> tuple[bool, str | None]:
    """Can this GPU share cuMemCreate allocations through POSIX fds? (device attributes, no allocation)"""
    try:
        vmm = _attribute(_A.CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device)
        fd = _attribute(_A.CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, device)
    except ShareError as e:
        return False, str(e)
    if not vmm:
        return False, f"GPU {device} does not support CUDA virtual memory management (cuMemCreate/cuMemMap)"
    if not fd:
        return False, f"GPU {device} cannot export cuMemCreate allocations as POSIX file descriptors"
    return True, None


def fabric_support(device: int) -> tuple[bool, str | None]:
    """Can this GPU export allocations as fabric handles (CU_MEM_HANDLE_TYPE_FABRIC)? Those cross nodes of
    one NVLink domain, through IMEX channels; ipcbench itself shares within a node, through POSIX fds."""
    try:
        ok = _attribute(_A.CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, device)
    except ShareError as e:
        return False, str(e)
    return (True, None) if ok else (False, f"GPU {device} does not support fabric handles")


def allocation_prop(device: int, handle_type=_FD):
    """Pinned device memory on `device`, exportable as a POSIX fd (what the sharer and handles_vmm
    create) or as `handle_type`."""
    prop = driver.CUmemAllocationProp()
    prop.type = driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = _DEVICE
    prop.location.id = device
    prop.requestedHandleTypes = handle_type
    return prop


def _imex_channels(imex_dir: str) -> str:
    try:
        names = sorted(os.listdir(imex_dir))
    except OSError:
        return f"{imex_dir} absent"
    return f"{imex_dir} holds {', '.join(names) or 'no channel'}"


def fabric_permitted(device: int, imex_dir: str = IMEX_CHANNELS) -> tuple[bool | None, str]:
    """May this process create fabric-handle allocations here? A device can support them and the driver
    still refuse (CUDA_ERROR_NOT_PERMITTED without an IMEX channel), so this tries: one cuMemCreate of the
    minimum granularity with CU_MEM_HANDLE_TYPE_FABRIC, released at once, nothing exported or mapped.
    (True, "permitted"), (False, why), or (None, why) where the probe itself could not run. Never raises.
    Needs the device's primary context current (ensure_context)."""
    if _FABRIC is None:
        return None, "this cuda.bindings has no CU_MEM_HANDLE_TYPE_FABRIC"
    try:
        prop = allocation_prop(device, _FABRIC)
        flags = driver.CUmemAllocationGranularity_flags
        res = driver.cuMemGetAllocationGranularity(prop, flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM)
        if res[0] != driver.CUresult.CUDA_SUCCESS:
            return None, f"cuMemGetAllocationGranularity(FABRIC): {getattr(res[0], 'name', res[0])}"
        res = driver.cuMemCreate(int(res[1]), prop, 0)
        err = res[0]
        if err == driver.CUresult.CUDA_SUCCESS:
            released = driver.cuMemRelease(res[1])[0]
            if released != driver.CUresult.CUDA_SUCCESS:
                return True, f"permitted (but cuMemRelease of the probe: {getattr(released, 'name', released)})"
            return True, "permitted"
        name = getattr(err, "name", str(err))
        if err == driver.CUresult.CUDA_ERROR_NOT_PERMITTED:
            return False, f"{name}: no IMEX channel, {_imex_channels(imex_dir)}"
        return False, f"cuMemCreate(FABRIC): {name}"
    except Exception as e:  # no libcuda, a binding without the call: the probe says so, info goes on
        first = (str(e).splitlines() or [""])[0]
        return None, f"probe failed ({type(e).__name__}: {first})"


def granularity(device: int) -> tuple[int, int]:
    """(minimum, recommended) allocation granularity in bytes for allocation_prop(device)."""
    flags = driver.CUmemAllocationGranularity_flags
    prop = allocation_prop(device)
    unwrap(driver.cuInit(0), "cuInit")
    return (int(unwrap(driver.cuMemGetAllocationGranularity(prop, flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                      "cuMemGetAllocationGranularity(MINIMUM)")),
            int(unwrap(driver.cuMemGetAllocationGranularity(prop, flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
                      "cuMemGetAllocationGranularity(RECOMMENDED)")))


def ensure_context(device: int, rank: int | None) -> None:
    """Make `device`'s primary context (CuPy's and the runtime's) current on this thread for driver calls."""
    _check_rt(rt.cudaSetDevice(device), f"cudaSetDevice({device})", rank)
    _check_rt(rt.cudaFree(0), "cudaFree(0) (context initialisation)", rank)
    ctx = unwrap(driver.cuCtxGetCurrent(), "cuCtxGetCurrent", rank)
    if ctx is None or int(ctx) == 0:
        raise ShareError(f"{_who(rank)}no current CUDA context on GPU {device} after cudaSetDevice")


def create(nbytes: int, device: int, rank: int) -> int:
    """cuMemCreate: a physical allocation of nbytes (a multiple of the granularity); its handle."""
    return int(unwrap(driver.cuMemCreate(nbytes, allocation_prop(device), 0), f"cuMemCreate({nbytes})", rank))


def reserve_and_map(handle: int, nbytes: int, alignment: int, rank: int, what: str) -> int:
    """Reserve an aligned virtual range of nbytes and map the whole allocation there; its address."""
    ptr = int(unwrap(driver.cuMemAddressReserve(nbytes, alignment, 0, 0), f"cuMemAddressReserve({what})", rank))
    try:
        unwrap(driver.cuMemMap(ptr, nbytes, 0, handle, 0), f"cuMemMap({what})", rank)
    except ShareError:
        driver.cuMemAddressFree(ptr, nbytes)  # the caller still holds (and releases) the handle
        raise
    return ptr


def set_access(ptr: int, nbytes: int, device: int, rank: int, what: str) -> None:
    """Grant `device` read/write access to a mapped range (a new mapping starts with no access at all)."""
    desc = driver.CUmemAccessDesc()
    desc.location.type = _DEVICE
    desc.location.id = device
    desc.flags = driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    unwrap(driver.cuMemSetAccess(ptr, nbytes, [desc], 1), f"cuMemSetAccess({what}, GPU {device})", rank)


def unmap_release(ptr: int, nbytes: int, handle: int, rank: int, what: str) -> None:
    """Undo a mapping: unmap, drop this process's reference to the allocation, free the address range."""
    unwrap(driver.cuMemUnmap(ptr, nbytes), f"cuMemUnmap({what})", rank)
    unwrap(driver.cuMemRelease(handle), f"cuMemRelease({what})", rank)
    unwrap(driver.cuMemAddressFree(ptr, nbytes), f"cuMemAddressFree({what})", rank)


def discard(handle: int, ptr: int | None = None, nbytes: int = 0, mapped: bool = False) -> None:
    """Best-effort undo on an error path (unmap, release, free the range), ignoring errors so that the
    error being raised is the one the user sees."""
    if mapped:
        driver.cuMemUnmap(ptr, nbytes)
    driver.cuMemRelease(handle)
    if ptr is not None:
        driver.cuMemAddressFree(ptr, nbytes)


def export_fd(handle: int, rank: int) -> int:
    """cuMemExportToShareableHandle: a new POSIX fd for the allocation (the caller closes it)."""
    return int(unwrap(driver.cuMemExportToShareableHandle(handle, _FD, 0), "cuMemExportToShareableHandle", rank))


def import_fd(fd: int, rank: int, owner) -> int:
    """cuMemImportFromShareableHandle: this process's handle of a peer's allocation (the fd stays open).

    cuda.bindings passes an int osHandle as the pointer value, which is how the C API takes a POSIX fd
    ((void*)(uintptr_t)fd)."""
    return int(unwrap(driver.cuMemImportFromShareableHandle(fd, _FD),
                     f"cuMemImportFromShareableHandle (allocation of rank {owner})", rank))


# ---- the fd exchange (no CUDA: any fds) ---------------------------------------------------------
@dataclass(frozen=True)
class FdExport:
    """One shared allocation as a peer sees it: its fd (None once sent and closed), mapped size, alignment."""

    fd: int | None
    nbytes: int
    alignment: int


def share_fd_exports(world, exports: tuple[FdExport, ...]) -> list[tuple[FdExport, ...]]:
    """Collective over the node: every rank of the node calls this, in the same order, with as many exports.
    Every node-local rank's exports, indexed by local rank: sizes over MPI, fds over Unix sockets.

    Peers' entries hold fds received here (the caller owns and closes them); this rank's own entry holds
    fd=None (the caller still owns and closes its exported fds)."""
    meta = world.node_allgather(tuple((e.nbytes, e.alignment) for e in exports), what="VMM allocation sizes")
    counts = {len(m) for m in meta}
    if len(counts) != 1:
        raise ShareError(f"rank {world.rank}: node-local ranks export different numbers of VMM allocations "
                         f"({[len(m) for m in meta]})")
    received: list[dict[int, int]] = []
    try:
        with FdExchange(world.node, timeout=world.timeout) as fx:
            for e in exports:
                received.append(fx.exchange(e.fd))
        out = []
        for r, sizes in enumerate(meta):
            if r == world.local_rank:
                out.append(tuple(FdExport(None, n, a) for n, a in sizes))
                continue
            missing = [i for i, got in enumerate(received) if r not in got]
            if missing:
                raise ShareError(f"rank {world.rank}: node-local rank {r} sent no fd for VMM allocation(s) {missing}")
            out.append(tuple(FdExport(received[i][r], n, a) for i, (n, a) in enumerate(sizes)))
        return out
    except BaseException:
        for got in received:
            for fd in got.values():
                os.close(fd)
        raise


# ---- the sharer ---------------------------------------------------------------------------------
@dataclass
class _Mapping:
    handle: int
    ptr: int
    nbytes: int


class VmmIpc:
    """Sharer over cuMemCreate allocations: alloc/export/open/close_all/free/shutdown like legacy.LegacyIpc,
    plus allgather_exports (the fds cannot travel in BufferSet's MPI allgather)."""

    name = "vmm"

    def __init__(self, gpu, world):
        self.gpu = gpu
        self.world = world
        self.rank = world.rank
        ensure_context(gpu.index, self.rank)
        # The RECOMMENDED granularity (2 MiB on Hopper) rather than the minimum: mappings then use the
        # large pages cudaMalloc uses for big buffers, so vmm rows compare with legacy IPC on equal terms.
        self.granule = granularity(gpu.index)[1]
        self._owned: dict[int, _Mapping] = {}  # base pointer -> this rank's allocation
        self._imported: list[_Mapping] = []  # peers' allocations mapped here
        self._exported_fds: list[int] = []  # fds made by export(), closed once sent

    def alloc(self, nbytes: int) -> int:
        size = round_up(nbytes, self.granule)
        handle = create(size, self.gpu.index, self.rank)
        try:
            ptr = reserve_and_map(handle, size, self.granule, self.rank, f"own allocation of {size} B")
        except ShareError:
            discard(handle)
            raise
        self._owned[ptr] = _Mapping(handle, ptr, size)
        set_access(ptr, size, self.gpu.index, self.rank, f"own allocation of {size} B")
        return ptr

    def export(self, ptr: int) -> FdExport:
        m = self._owned.get(ptr)
        if m is None:
            raise ShareError(f"rank {self.rank}: 0x{ptr:x} is not the base of a VMM allocation of this rank")
        fd = export_fd(m.handle, self.rank)
        self._exported_fds.append(fd)
        return FdExport(fd, m.nbytes, self.granule)

    def allgather_exports(self, mine: tuple[FdExport, ...]) -> list[tuple[FdExport, ...]]:
        """Collective over the node: every rank of the node calls this, in the same order (share_fd_exports).
        BufferSet.create's exchange for fd exports: every rank's descriptors, peers' with received fds."""
        try:
            return share_fd_exports(self.world, mine)
        finally:
            self._close_exported_fds()  # the peers hold their own duplicates now

    def open(self, desc: FdExport, owner: int) -> int:
        """Import node-local rank `owner`'s allocation from its fd (closed here), map it and grant this rank's
        device access."""
        owner_rank = self.world.node_ranks[owner]  # messages name world ranks, like every other error
        if desc.fd is None:
            raise ShareError(f"rank {self.rank}: the VMM export of rank {owner_rank} carries no fd")
        try:
            handle = import_fd(desc.fd, self.rank, owner_rank)
        finally:
            os.close(desc.fd)
        what = f"allocation of rank {owner_rank}"
        try:
            ptr = reserve_and_map(handle, desc.nbytes, reserve_alignment(desc.alignment, self.granule),
                                  self.rank, what)
        except ShareError:
            discard(handle)
            raise
        self._imported.append(_Mapping(handle, ptr, desc.nbytes))
        set_access(ptr, desc.nbytes, self.gpu.index, self.rank, what)
        return ptr

    def close_all(self) -> None:
        """Unmap and release every peer allocation (before the owners free theirs)."""
        if self._imported:  # no copy or kernel of this process may still touch a mapping being removed
            _check_rt(rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize (before unmapping peer memory)", self.rank)
        mappings, self._imported = self._imported, []
        for m in mappings:
            unmap_release(m.ptr, m.nbytes, m.handle, self.rank, "imported allocation")

    def free(self, ptr: int) -> None:
        m = self._owned.pop(ptr, None)
        if m is not None:
            unmap_release(m.ptr, m.nbytes, m.handle, self.rank, "own allocation")

    def shutdown(self) -> None:
        """Release whatever is still held (peers' mappings first, then own allocations and unsent fds)."""
        self.close_all()
        for ptr in list(self._owned):
            self.free(ptr)
        self._close_exported_fds()

    def _close_exported_fds(self) -> None:
        fds, self._exported_fds = self._exported_fds, []
        for fd in fds:
            os.close(fd)


def sharer(gpu, world) -> VmmIpc:
    """This rank's VMM sharer (ipc/sharers.py); not collective (its exports travel in allgather_exports)."""
    return VmmIpc(gpu, world)
