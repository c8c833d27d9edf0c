"""The buffer-kind table (ipc/sharers.py): which kinds get buffers, and what a run says when a rank of
the node cannot share a kind. Logic only: the support checks and the world are small fakes, no CUDA."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ipcbench.ipc import sharers


class _Node:
    """node_allgather over pretend ranks: every rank's answer is given up front."""

    def __init__(self, answers):
        self.answers = answers
        self.asked = []

    def node_allgather(self, value, what=""):
        self.asked.append(what)
        return self.answers


@pytest.fixture
def fake_kinds(monkeypatch):
    made = []

    class Kind(sharers.SharerKind):
        def check(self, device):
            return (True, None)

        def create(self, gpu, world):
            made.append(self.name)
            return self.name

    monkeypatch.setattr(sharers, "BUFFER_KINDS",
                        {n: Kind(n, n, None if n == "legacy" else "support") for n in ("legacy", "pool")})

    class FakeBufferSet:
        @classmethod
        def create(cls, world, sharer, slot):
            return (sharer, slot)

    import ipcbench.ipc.buffers as buffers

    monkeypatch.setattr(buffers, "BufferSet", FakeBufferSet)
    return made


def _ctx(world):
    """What setup_buffers reads and writes of a context (core/context.Ctx)."""
    ctx = SimpleNamespace(gpu=SimpleNamespace(index=0), world=world, buffers={}, unavailable={}, cleanups=[])
    ctx.add_cleanup = ctx.cleanups.append
    return ctx


def test_only_needed_kinds_in_table_order(fake_kinds):
    ctx = _ctx(_Node([(True, None), (True, None)]))
    sharers.setup_buffers(ctx, {"pool", "legacy"}, 4096)
    assert fake_kinds == ["legacy", "pool"]
    assert ctx.buffers == {"legacy": ("legacy", 4096), "pool": ("pool", 4096)} and ctx.unavailable == {}
    assert len(ctx.cleanups) == 1  # released together at the end of the run (destroy_buffers)


def test_a_kind_one_rank_lacks_is_unavailable_with_that_ranks_reason(fake_kinds):
    why = "GPU 1 pools cannot be exported as POSIX file descriptors"
    ctx = _ctx(_Node([(True, None), (False, why)]))
    sharers.setup_buffers(ctx, {"pool"}, 4096)
    assert fake_kinds == [] and ctx.buffers == {}
    assert ctx.unavailable == {"pool": why}
    assert ctx.world.asked == ["pool support check"]


def test_every_method_buffer_kind_is_in_the_table():
    from ipcbench.core.methods import METHODS

    real = {k for k in sharers.BUFFER_KINDS}
    assert {m.buffers for m in METHODS.values()} <= real
    assert {"legacy", "pool", "core"} <= real


def test_a_kind_without_a_support_check_asks_nobody(monkeypatch):
    """Legacy IPC is always there: setting it up costs no node collective (as before the table existed)."""
    import ipcbench.ipc.buffers as buffers

    monkeypatch.setattr(buffers, "BufferSet", type("B", (), {"create": classmethod(lambda c, w, s, n: (s, n))}))
    monkeypatch.setattr(sharers.SharerKind, "create", lambda self, gpu, world: self.name)
    ctx = _ctx(_Node([]))
    sharers.setup_buffers(ctx, {"legacy"}, 4096)
    assert ctx.buffers == {"legacy": ("legacy", 4096)} and ctx.world.asked == []


def test_core_support_says_how_to_fix_a_missing_cuda_core(monkeypatch):
    import builtins

    from ipcbench.ipc import cucore

    real_import = builtins.__import__

    def no_core(name, *a, **k):
        if name.startswith("cuda.core"):
            raise ImportError("No module named 'cuda.core'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_core)
    ok, why = cucore.core_support(0)
    assert not ok and "pip install cuda-core" in why
