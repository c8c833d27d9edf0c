"""core/methods.py (batching rule, engines, StreamBatch, GraphBatch) and core/timing.py (gated timing) on a fake GPU
(tests/fakes.py). A fake: these test how transfers are batched, gated and their times added up, not a
GPU; the fake's stream runs work at once and its clock advances by the configured cost."""

from __future__ import annotations

import pytest

from fakes import FakeGpu, HostMemory, mismatched_words, pattern
from ipcbench.core.methods import MAX_QUEUED, METHODS, GraphBatch, Method, StreamBatch, plan_segments
from ipcbench.core.timing import one_window_ms, time_batch
from ipcbench.errors import MeasureError


def gpu_with_buffers(nbytes=4096, **kw):
    mem = HostMemory()
    g = FakeGpu(mem, transfer_ns=lambda n: 1000.0, **kw)
    return g, g.malloc(nbytes), g.malloc(nbytes)


def test_plan_segments():
    assert plan_segments(1) == (1, 1)
    assert plan_segments(MAX_QUEUED) == (MAX_QUEUED, 1)
    assert plan_segments(MAX_QUEUED + 1) == (MAX_QUEUED, 2)
    assert plan_segments(1000, nodes_per_transfer=3) == (170, 6)
    assert plan_segments(5, nodes_per_transfer=10_000) == (1, 5)  # at least one transfer per graph
    for count in (1, 7, 511, 513, 5000, 200_000):
        k, s = plan_segments(count)
        assert k * s >= count and k <= MAX_QUEUED and (s - 1) * k < count
    with pytest.raises(ValueError):
        plan_segments(0)
    with pytest.raises(ValueError):
        plan_segments(3, 0)


def test_method_table_is_consistent():
    from ipcbench.core.methods import ENGINES
    from ipcbench.ipc.sharers import BUFFER_KINDS

    for name, m in METHODS.items():
        assert m.name == name and m.engine in ENGINES and m.buffers in BUFFER_KINDS
        assert m.style in m.directions and set(m.directions) <= {"push", "pull", "bidir"}
    # the legacy methods measure both ways at once; the cuda.core copy only proves the path (push, pull)
    assert all("bidir" in m.directions for m in METHODS.values() if m.buffers == "legacy")
    assert METHODS["sm_read"].style == "pull" and METHODS["pool_sm_write"].buffers == "pool"
    assert METHODS["core_ce"].buffers == "core" and METHODS["core_ce"].directions == ("push", "pull")


def test_stream_batch_enqueues_each_transfer_behind_the_gate_after_one_warm_up():
    """A method's batch is what an application enqueues: one call per transfer on the stream (no graph), in
    gated segments of at most MAX_QUEUED, after one un-gated transfer (the first use, which loads kernels)."""
    g, src, dst = gpu_with_buffers()
    g.fill(src, 4096, 42)
    b = METHODS["ce"].batch(g, src, dst, 4096, 1000)
    assert isinstance(b, StreamBatch) and not hasattr(b, "graph")
    assert (b.k, b.n_segments, b.count) == (512, 2, 1024) and b.segments() == [1, 1]
    assert g.copies == 1 and g.log == []  # the warm-up ran, un-gated
    b.enqueue(2)
    assert g.copies == 1 + 1024
    assert mismatched_words(g.memory.view(dst, 4096), 42) == 0


def test_one_batch_serves_every_count_of_its_segment_size():
    """Calibration and sampling at different counts reuse one batch and its warm-up (only segments change)."""
    g, src, dst = gpu_with_buffers()
    b = METHODS["ce"].batch(g, src, dst, 4096, 1000)
    c = b.with_count(3000)
    assert (c.k, c.n_segments, c.count) == (512, 6, 3072) and g.copies == 1
    assert (b.n_segments, b.count) == (2, 1024)  # the original is untouched
    with pytest.raises(ValueError, match="cannot serve"):
        b.with_count(100)  # a smaller count needs segments of 100 transfers


def test_graph_batch_captures_once_and_launches_one_graph_per_segment():
    """NCCL's batches where both ranks agreed to capture (ipc/nccl.py): captured, not run, no warm-up."""
    g, src, dst = gpu_with_buffers()
    g.fill(src, 4096, 42)
    b = GraphBatch(g, METHODS["ce"], src, dst, 4096, 1000)
    assert (b.k, b.n_segments, b.count) == (512, 2, 1024) and g.copies == 0
    b.enqueue(2)
    assert g.copies == 1024 and b.graph.launches == 2
    assert mismatched_words(g.memory.view(dst, 4096), 42) == 0


def test_sm_engine_loops_inside_one_launch_only_for_large_buffers():
    g, src, dst = gpu_with_buffers(1 << 16)  # fake L2 4 KiB: loops from 16 KiB
    METHODS["sm_write"].batch(g, src, dst, 4096, 10).enqueue()
    assert g.launches == [(4096, 1)] * 11  # the warm-up and ten
    g.launches.clear()
    METHODS["sm_read"].batch(g, src, dst, 1 << 16, 10).enqueue()
    assert g.launches == [(1 << 16, 1), (1 << 16, 10)]


def test_method_enqueue_dispatches_on_its_engine():
    g, src, dst = gpu_with_buffers()
    Method("x", "sm", "push", "legacy", ("push", "bidir"), "").enqueue(g, g.stream, src, dst, 64, 3)
    assert len(g.launches) == 3 and g.copies == 3
    Method("y", "ce", "push", "legacy", ("push", "bidir"), "").enqueue(g, g.stream, src, dst, 64, 2)
    assert len(g.launches) == 3 and g.copies == 5


def test_time_batch_adds_the_segments_and_releases_after_sync():
    g, src, dst = gpu_with_buffers()
    b = METHODS["ce"].batch(g, src, dst, 4096, 1000)
    order = []
    g.log = order
    ms = time_batch(g, b, sync_peer=lambda: order.append("sync"))
    assert ms == pytest.approx(1024 * 1000 / 1e6)  # 1024 transfers of 1 us
    assert order == ["gate", "sync", "release"] * 2
    assert g.released == [1, 2]


def test_time_batch_with_stamps_returns_a_window_per_segment():
    g, src, dst = gpu_with_buffers(skew_ns=300)
    b = METHODS["ce"].batch(g, src, dst, 4096, 600)  # 2 segments of 512
    ms, marks = time_batch(g, b, stamps=True)
    assert ms == pytest.approx(1024 * 1e-3)
    assert marks == [(300, 300 + 512_000), (300, 300 + 512_000)]


def test_time_batch_raises_when_the_gate_timed_out():
    g, src, dst = gpu_with_buffers(gate_times_out=True)
    b = METHODS["ce"].batch(g, src, dst, 64, 3)
    with pytest.raises(MeasureError, match="gate kernel timed out"):
        time_batch(g, b)
    assert g.released == [1]  # the gate was opened before giving up, so the stream cannot stay stuck


def test_one_window_ms():
    a = [(0, 1_000_000), (10, 20)]
    b = [(500_000, 3_000_000), (0, 15)]
    assert one_window_ms(a, b) == pytest.approx(3.0 + 20e-6)
    with pytest.raises(MeasureError, match="timed 2 and 1 segments"):
        one_window_ms(a, b[:1])


def test_fake_pattern_tells_seeds_and_positions_apart():
    """The fake's pattern follows kernels/pattern.cu: no two neighbouring words or seeds agree, and the
    tail past the last full word is checked byte by byte."""
    p = pattern(7, 4099)
    assert len(p) == 4099 and mismatched_words(p, 7) == 0
    words = p[:4096].view("<u4")
    assert (words[1:] != words[:-1]).all()
    assert mismatched_words(pattern(8, 4099), 7) == 1024 + 3
    q = p.copy()
    q[4097] ^= 1
    assert mismatched_words(q, 7) == 1
    g, src, _ = gpu_with_buffers()
    g.fill(src, 4096, 5)
    g.corrupt(src, 4096)
    assert g.verify(src, 4096, 5) == 4
    with pytest.raises(AssertionError, match="outside every fake allocation"):
        g.memory.view(src + 4000, 200)
