"""The vmm suite without a GPU: ipc/vmm.py's pure helpers, the plans (vmm suite, handles' vmm step, buffer
kind), BufferSet's hook for sharers that exchange their own exports, the vmm methods walked on fakes
(tests/fakes.py: host memory stands in for the mappings), and VmmIpc's bookkeeping over a fake driver (call
order, sizes, fds closed). Fakes: these test the logic, not CUDA VMM; the fd
exchange itself runs under MPI in tests/mpi/test_vmm_fds.py, the driver calls in tests/test_gpu_vmm.py."""

from __future__ import annotations

import pytest

from fakes import FakeCudaIpc, FakeNode, run_ranks
from ipcbench.core.methods import METHODS
from ipcbench.core.sampler import SamplingRule
from ipcbench.core.schedule import PairMode
from ipcbench.errors import ShareError
from ipcbench.ipc import vmm
from ipcbench.ipc.buffers import BufferSet
from ipcbench.ipc.legacy import LegacyIpc
from ipcbench.ipc.sharers import BUFFER_KINDS
from ipcbench.run.collect import RowSink
from ipcbench.run.walk import walk
from ipcbench.suites import handles
from ipcbench.suites.registry import ORDER, plan

MiB = 1 << 20


# ---- pure helpers --------------------------------------------------------------------------------

def test_round_up_to_the_granularity():
    assert vmm.round_up(1, 2 * MiB) == 2 * MiB
    assert vmm.round_up(2 * MiB, 2 * MiB) == 2 * MiB
    assert vmm.round_up(2 * MiB + 1, 2 * MiB) == 4 * MiB
    assert vmm.round_up(0, 2 * MiB) == 2 * MiB  # a mapping is never empty
    assert vmm.round_up(3 * 4096 * 1024, 64 * 1024) == 3 * 4096 * 1024
    with pytest.raises(ValueError, match="granularity"):
        vmm.round_up(10, 0)


def test_reserve_alignment_fits_both_sides():
    assert vmm.reserve_alignment(2 * MiB) == 2 * MiB
    assert vmm.reserve_alignment(2 * MiB, 64 * 1024) == 2 * MiB
    with pytest.raises(ValueError, match="power of two"):
        vmm.reserve_alignment(3 * MiB)


# ---- plans ---------------------------------------------------------------------------------------

def test_vmm_suite_plan():
    assert ORDER.index("vmm") == ORDER.index("pool") + 1
    steps = plan(["vmm"], 3, [4096, MiB])
    assert [s.label for s in steps] == ["vmm_ce push", "vmm_ce pull", "vmm_ce bidir", "vmm_sm_read pull",
                                        "vmm_sm_read bidir", "vmm_sm_write push", "vmm_sm_write bidir"]
    for s in steps:
        assert s.suite == "vmm" and s.needs == ("vmm",) and s.rounds_ok and s.sizes == [4096, MiB]
        assert len(s.pairs) == (3 if s.label.endswith("bidir") else 6)
    for name, pool_twin in (("vmm_ce", "pool_ce"), ("vmm_sm_read", "pool_sm_read"), ("vmm_sm_write", "pool_sm_write")):
        m, twin = METHODS[name], METHODS[pool_twin]
        assert (m.engine, m.style, m.directions, m.buffers) == (twin.engine, twin.style, twin.directions, "vmm")


def test_vmm_is_a_buffer_kind_with_a_support_check():
    kind = BUFFER_KINDS["vmm"]
    assert (kind.module, kind.support) == ("vmm", "vmm_support")
    assert vmm.sharer and vmm.VmmIpc.name == "vmm"
    for method in ("alloc", "export", "allgather_exports", "open", "close_all", "free", "shutdown"):
        assert callable(getattr(vmm.VmmIpc, method)), method


def test_handles_plans_vmm_handles_on_every_ordered_pair():
    (step,) = [s for s in handles.steps(3, [4096, MiB, 64 * MiB]) if s.label == "vmm handles"]
    assert step.pairs == [(a, b) for a in range(3) for b in range(3) if a != b]
    assert step.sizes == [4096, MiB, 64 * MiB] and step.needs == () and not step.rounds_ok


def test_vmm_handles_write_no_rows_where_either_gpu_lacks_vmm(monkeypatch):
    """A fake: rank 1's GPU cannot export VMM allocations as fds; both ranks agree and return no rows
    (the vmm suite's skip message says why), before any driver call."""
    from ipcbench.suites.handles_vmm import measure_vmm_handles

    node = FakeNode(n=2, kinds=())
    monkeypatch.setattr(vmm, "vmm_support", lambda index: (index == 0, None if index == 0 else "no fds"))
    monkeypatch.setattr(vmm, "ensure_context", lambda *a: pytest.fail("no driver call without support"))
    assert node.run(lambda ctx: measure_vmm_handles(ctx, 0, 1, [4096])) == [[], []]


# ---- BufferSet's hook ----------------------------------------------------------------------------

class SelfExchangingIpc(LegacyIpc):
    """LegacyIpc whose exports MPI must not carry (wrapped in a marker): only its own allgather_exports
    unwraps them, so a BufferSet that skipped the hook would hand `open` a wrapped descriptor."""

    def __init__(self, gpu, world):
        super().__init__(gpu, world.rank)
        self.world = world
        self.exchanges = 0

    def export(self, ptr):
        return ("not for MPI", super().export(ptr))

    def allgather_exports(self, mine):
        self.exchanges += 1
        everyone = self.world.node_allgather(mine, "the test's own exchange")
        return [tuple(h for _, h in exports) for exports in everyone]


def test_buffer_set_lets_a_sharer_exchange_its_own_exports(monkeypatch):
    node = FakeNode(n=3, kinds=())
    FakeCudaIpc(node).install(monkeypatch)

    def rank(world):
        g = node.gpus[world.local_rank]
        sharer = SelfExchangingIpc(g, world)
        bs = BufferSet.create(world, sharer, 5000)
        assert sharer.exchanges == 1
        for p in range(3):
            g.fill(bs.peer_inbox_slot(p, world.local_rank), 8192, 10 * world.local_rank + p)
        world.node_barrier("every rank wrote")
        bad = [g.verify(bs.inbox_slot(s), 8192, 10 * s + world.local_rank) for s in range(3)]
        world.node_barrier("every rank checked")
        bs.destroy(world)
        return bad

    assert run_ranks(rank, n=3) == [[0, 0, 0]] * 3
    assert node.memory.live() == set()


# ---- the vmm methods on fakes --------------------------------------------------------------------

def test_vmm_plan_runs_on_a_fake_node():
    """Every step of the vmm suite on three fake ranks (fake vmm buffers are plain shared host memory):
    one verified row per (method, direction, pair, size)."""
    sizes = [1024, 4096]
    steps = plan(["vmm"], 3, sizes)
    node = FakeNode(n=3, rule=SamplingRule(min_time_s=2e-5), slot_bytes=4096, kinds=("vmm",))
    out = node.run(lambda ctx: walk(ctx, steps, RowSink(ctx.world, None, None), quiet=True,
                                    mode=PairMode("sequential", "sequential", "test")))
    rows = out[0][0]
    assert rows and all(r.verified for r in rows), [r.note for r in rows if not r.verified]
    assert {r.suite for r in rows} == {"vmm"}
    want = set()
    for name in ("vmm_ce", "vmm_sm_read", "vmm_sm_write"):
        for d in METHODS[name].directions:
            pairs = [(0, 1), (0, 2), (1, 2)] if d == "bidir" else [(a, b) for a in range(3) for b in range(3) if a != b]
            want |= {(name, d, a, b, n) for a, b in pairs for n in sizes}
    assert {(r.method, r.direction, r.src_rank, r.dst_rank, r.bytes) for r in rows} == want


# ---- VmmIpc's bookkeeping over a fake driver -------------------------------------------------------

class FakeDriver:
    """Just enough of cuda.bindings.driver for VmmIpc: every call is recorded as (name, args) and succeeds;
    handles, addresses and fds are made up (fds are real memfds, so closing them is checked)."""

    def __init__(self, real):
        import itertools
        import os

        self.real, self.os, self.calls = real, os, []
        self.next = itertools.count(1)

    def __getattr__(self, name):
        if not name.startswith("cu"):
            return getattr(self.real, name)  # types and enums: the real ones
        ok = self.real.CUresult.CUDA_SUCCESS

        def call(*args):
            self.calls.append((name, args))
            if name == "cuMemCreate":
                return ok, 100 + next(self.next)
            if name == "cuMemAddressReserve":
                return ok, (next(self.next) << 32)
            if name == "cuMemExportToShareableHandle":
                return ok, self.os.memfd_create("fake-vmm-export")
            if name == "cuMemImportFromShareableHandle":
                return ok, 900 + args[0]
            if name == "cuMemGetAllocationGranularity":
                return ok, 2 * MiB
            if name == "cuCtxGetCurrent":
                return ok, 1
            return (ok,)
        return call


def test_vmm_sharer_maps_releases_and_closes_in_order(monkeypatch):
    import os
    from types import SimpleNamespace

    from cuda.bindings import runtime as rt

    fake = FakeDriver(vmm.driver)
    monkeypatch.setattr(vmm, "driver", fake)
    for name in ("cudaSetDevice", "cudaFree", "cudaDeviceSynchronize"):
        monkeypatch.setattr(rt, name, lambda *a: (rt.cudaError_t.cudaSuccess,))
    world = SimpleNamespace(rank=5, node_ranks=[4, 5])
    ipc = vmm.VmmIpc(SimpleNamespace(index=1), world)
    ptr = ipc.alloc(5000)
    assert [c[0] for c in fake.calls[-4:]] == ["cuMemCreate", "cuMemAddressReserve", "cuMemMap", "cuMemSetAccess"]
    assert fake.calls[-4][1][0] == 2 * MiB  # rounded up to the recommended granularity
    desc = ipc.export(ptr)
    assert (desc.nbytes, desc.alignment) == (2 * MiB, 2 * MiB) and ipc._exported_fds == [desc.fd]
    with pytest.raises(ShareError, match="rank 5: 0x1 is not the base of a VMM allocation"):
        ipc.export(1)

    peer_fd = os.memfd_create("fake-peer-export")
    peer_ptr = ipc.open(vmm.FdExport(peer_fd, 4 * MiB, 2 * MiB), owner=0)
    with pytest.raises(OSError):
        os.fstat(peer_fd)  # the received fd is closed once imported
    imp, reserve, mapping, access = fake.calls[-4:]
    assert imp == ("cuMemImportFromShareableHandle", (peer_fd, vmm._FD))
    assert reserve[1][:2] == (4 * MiB, 2 * MiB) and mapping[1] == (peer_ptr, 4 * MiB, 0, 900 + peer_fd, 0)
    assert access[1][0:2] == (peer_ptr, 4 * MiB) and access[1][2][0].location.id == 1

    ipc.close_all()
    assert fake.calls[-3:] == [("cuMemUnmap", (peer_ptr, 4 * MiB)), ("cuMemRelease", (900 + peer_fd,)),
                               ("cuMemAddressFree", (peer_ptr, 4 * MiB))]
    ipc.free(ptr)
    assert [c[0] for c in fake.calls[-3:]] == ["cuMemUnmap", "cuMemRelease", "cuMemAddressFree"]
    ipc.shutdown()
    with pytest.raises(OSError):
        os.fstat(desc.fd)  # an export never sent is closed at shutdown


# ---- the fabric-handle probe over a fake driver ----------------------------------------------------

class FabricDriver(FakeDriver):
    """FakeDriver whose cuMemCreate answers `create` (a CUresult name) and whose calls may raise."""

    def __init__(self, real, create="CUDA_SUCCESS", granularity="CUDA_SUCCESS", raises=None):
        super().__init__(real)
        self.create, self.granularity, self.raises = create, granularity, raises

    def __getattr__(self, name):
        call = super().__getattr__(name)
        if not name.startswith("cu"):
            return call
        result = self.real.CUresult

        def answer(*args):
            if self.raises is not None:
                raise self.raises
            if name == "cuMemCreate" and self.create != "CUDA_SUCCESS":
                self.calls.append((name, args))
                return (getattr(result, self.create), None)
            if name == "cuMemGetAllocationGranularity" and self.granularity != "CUDA_SUCCESS":
                return (getattr(result, self.granularity), 0)
            return call(*args)
        return answer


def probe(monkeypatch, tmp_path, **kw):
    fake = FabricDriver(vmm.driver, **kw)
    monkeypatch.setattr(vmm, "driver", fake)
    return fake, vmm.fabric_permitted(3, str(tmp_path / "imex"))


def test_fabric_probe_permitted_releases_what_it_made(monkeypatch, tmp_path):
    fake, got = probe(monkeypatch, tmp_path)
    assert got == (True, "permitted")
    (create,) = [c for c in fake.calls if c[0] == "cuMemCreate"]
    size, prop, flags = create[1]
    assert (size, flags, prop.location.id) == (2 * MiB, 0, 3) and prop.requestedHandleTypes == vmm._FABRIC
    (gran,) = [c for c in fake.calls if c[0] == "cuMemGetAllocationGranularity"]
    assert gran[1][1] == vmm.driver.real.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM
    handle = 101  # FakeDriver's first made-up handle
    assert [c for c in fake.calls if c[0] == "cuMemRelease"] == [("cuMemRelease", (handle,))]
    assert not [c for c in fake.calls if c[0] in ("cuMemExportToShareableHandle", "cuMemMap", "cuMemAddressReserve")]


def test_fabric_probe_not_permitted_names_the_imex_channels(monkeypatch, tmp_path):
    fake, got = probe(monkeypatch, tmp_path, create="CUDA_ERROR_NOT_PERMITTED")
    assert got == (False, f"CUDA_ERROR_NOT_PERMITTED: no IMEX channel, {tmp_path / 'imex'} absent")
    assert not [c for c in fake.calls if c[0] == "cuMemRelease"]  # nothing was made
    (tmp_path / "imex").mkdir()
    assert probe(monkeypatch, tmp_path, create="CUDA_ERROR_NOT_PERMITTED")[1][1].endswith("imex holds no channel")
    (tmp_path / "imex" / "channel0").write_text("")
    assert probe(monkeypatch, tmp_path, create="CUDA_ERROR_NOT_PERMITTED")[1][1].endswith("imex holds channel0")


def test_fabric_probe_other_answers_never_raise(monkeypatch, tmp_path):
    assert probe(monkeypatch, tmp_path, create="CUDA_ERROR_OUT_OF_MEMORY")[1] == (
        False, "cuMemCreate(FABRIC): CUDA_ERROR_OUT_OF_MEMORY")
    assert probe(monkeypatch, tmp_path, granularity="CUDA_ERROR_NOT_SUPPORTED")[1] == (
        None, "cuMemGetAllocationGranularity(FABRIC): CUDA_ERROR_NOT_SUPPORTED")
    assert probe(monkeypatch, tmp_path, raises=OSError("libcuda.so.1 missing\nmore"))[1] == (
        None, "probe failed (OSError: libcuda.so.1 missing)")
    monkeypatch.setattr(vmm, "_FABRIC", None)
    assert vmm.fabric_permitted(0) == (None, "this cuda.bindings has no CU_MEM_HANDLE_TYPE_FABRIC")
