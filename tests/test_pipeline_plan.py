"""Planning logic of the `pipeline` and `handles` suites (pure Python, no GPU, no MPI)."""

from __future__ import annotations

from ipcbench.suites import handles, pipeline
from ipcbench.sizes import parse_sizes
from ipcbench.core.stats import percentile


def test_chunk_sizes_default_range():
    assert pipeline.chunk_sizes(parse_sizes("4K:256M")) == [64 << 10, 1 << 20, 4 << 20]


def test_chunk_sizes_clamped_to_half_the_largest():
    # 4M would not fit twice in a 4M ring: clamp to 2M.
    assert pipeline.chunk_sizes(parse_sizes("64K:4M:x4")) == [64 << 10, 1 << 20, 2 << 20]
    # Everything above the smallest size.
    assert pipeline.chunk_sizes(parse_sizes("2M:64M")) == [2 << 20, 4 << 20]
    # Tiny runs: multiples of 16 bytes, never zero.
    assert pipeline.chunk_sizes([8, 64]) == [32]
    assert pipeline.chunk_sizes([8]) == []
    assert all(c % 16 == 0 for c in pipeline.chunk_sizes(parse_sizes("1000:3000000")))


def test_plan_ring_fits_capacity():
    plan = pipeline.plan(parse_sizes("64K:4M:x4"))
    assert [d for d, _ in plan] == [2, 4, 8]
    for d, chunks in plan:
        assert all(c * d <= 4 << 20 for c in chunks)
    assert dict(plan)[8] == [64 << 10]
    assert pipeline.plan([8]) == []


def test_lanes_and_groups():
    for chunk in (32, 64 << 10, 1 << 20, 4 << 20, 3_000_000 // 16 * 16):
        for depth in pipeline.DEPTHS:
            for sms in (1, 2, 78, 132):
                lanes, part, groups = pipeline.lanes_for(chunk, sms, depth)
                assert part % 16 == 0 and part > 0
                assert lanes * part >= chunk > (lanes - 1) * part  # every lane has work
                assert 1 <= groups <= depth
                assert lanes * groups <= max(1, sms - 1)
                assert lanes * groups <= pipeline.MAX_LANES


def test_ctrl_layout_fits_the_control_block():
    from ipcbench.ipc.buffers import BufferSet

    assert pipeline.CTRL_OFF + pipeline.CTRL_USED <= BufferSet.CTRL_BYTES


def test_latency_summary_percentiles():
    lat = [float(i) for i in range(1, 101)]
    s = pipeline.latency_summary(lat)
    assert s["p50"] == 50.0 and s["p99"] == 99.0 and s["min"] == 1.0 and s["max"] == 100.0
    assert percentile([5.0], 99) == 5.0


def test_steps_registered():
    from ipcbench.suites.registry import ORDER, plan

    assert "handles" in ORDER and "pipeline" in ORDER
    steps = plan(["pipeline"], 4, parse_sizes("4K:256M"))
    assert len(steps) == 3 and all(len(s.pairs) == 12 and s.needs == ("legacy",) for s in steps)
    hs = plan(["handles"], 2, parse_sizes("64K:4M:x4"))
    assert [s.label for s in hs][-1] == "error paths"  # error paths run last
    assert all(s.needs == () for s in hs)


def test_handle_size_classes():
    assert handles.size_classes(parse_sizes("4K:256M")) == [4 << 10, 1 << 20, 256 << 20]
    assert handles.size_classes([4096]) == [4096]
    assert handles.size_classes([4096, 8192]) == [4096, 8192]
    assert handles.error_pairs(1) == [] and handles.error_pairs(4) == [(0, 1)]
