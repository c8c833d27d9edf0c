"""Pure planning logic of the host-staged suite (suites/staged_plan.py): chunks, slots, the graph batching rule
it shares with every graph-timed measurement (core/methods.plan_segments), shm layout and the environment
knobs. No GPU, no MPI."""

from __future__ import annotations

import pytest

from ipcbench.core.methods import MAX_QUEUED, plan_segments
from ipcbench.suites import staged_plan as staged
from ipcbench.suites.staged_plan import (FLAG_BYTES, MAX_SLOTS, ChunkPlan, plan_chunks, shm_layout, slot_of,
                                         staged_params)

K, M = 1 << 10, 1 << 20


def test_small_message_is_one_chunk():
    p = plan_chunks(4 * K, 8 * M, 3)
    assert p.chunk == 4 * K and p.n_chunks == 1 and p.spans() == [(0, 4 * K)]
    assert p.describe() == "1 chunk of 4K through 3 slots"


@pytest.mark.parametrize("nbytes,chunk", [(256 * M, 8 * M), (64 * M, 8 * M), (8 * M, 8 * M), (1 * M, 4 * M),
                                          (3 * M + 5, M), (7, 2), (1, 1), (1000, 999)])
def test_spans_cover_the_message_exactly(nbytes, chunk):
    p = plan_chunks(nbytes, chunk, 3)
    spans = p.spans()
    assert len(spans) == p.n_chunks
    assert spans[0][0] == 0
    for (o1, l1), (o2, _) in zip(spans, spans[1:]):
        assert o1 + l1 == o2 and l1 == p.chunk  # contiguous; only the last may be short
    assert sum(length for _, length in spans) == nbytes
    assert 0 < spans[-1][1] <= p.chunk


def test_chunk_counts():
    assert plan_chunks(256 * M, 8 * M, 3).n_chunks == 32
    assert plan_chunks(3 * M + 5, M, 3).n_chunks == 4
    assert plan_chunks(256 * M, 8 * M, 3).describe() == "32 chunks of 8M through 3 slots"


@pytest.mark.parametrize("args", [(0, M, 3), (-1, M, 3), (K, 0, 3), (K, M, 0), (K, M, MAX_SLOTS + 1),
                                  (K, (1 << 30) + 1, 3)])
def test_bad_plans_are_refused(args):
    with pytest.raises(ValueError):
        plan_chunks(*args)


def test_slots_rotate_across_messages():
    # 2 chunks per message, 3 slots: message t's chunks continue where t-1 stopped
    seq = [slot_of(t * 2 + j, 3) for t in range(3) for j in range(2)]
    assert seq == [0, 1, 2, 0, 1, 2]
    # every slot is used once before any is reused: S chunks in flight
    assert [slot_of(g, 4) for g in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]


@pytest.mark.parametrize("count,nodes", [(1, 3), (2, 65), (1000, 3), (7, 3), (200_000, 3), (3, 2000),
                                         (100_000, 65), (257, 3)])
def test_plan_segments_covers_count_and_bounds_queue(count, nodes):
    k, segments = plan_segments(count, nodes)
    assert k >= 1 and segments >= 1
    assert k * segments >= count
    assert k * segments - count < k  # at most one graph's worth of extra transfers
    # one graph launch per gated segment: at most MAX_QUEUED nodes queued, unless one transfer needs more
    assert k * nodes <= max(MAX_QUEUED, nodes)
    if count * nodes <= MAX_QUEUED:
        assert (k, segments) == (count, 1)  # fits one graph


def test_plan_segments_examples():
    assert plan_segments(1000, 3) == (170, 6)  # 4K messages through shm: 3 graph nodes each
    assert plan_segments(2, 65) == (2, 1)  # 256 MiB in 8 MiB chunks: two transfers, one graph
    assert plan_segments(3, 2000) == (1, 3)  # one transfer per segment when a transfer alone is bigger
    assert plan_segments(5000) == (512, 10)  # plain copies: one node each
    with pytest.raises(ValueError):
        plan_segments(0, 3)


def test_shm_layout():
    size, per_slot = shm_layout(8 * M, 3)
    assert per_slot == 8 * M and size == FLAG_BYTES + 24 * M
    size, per_slot = shm_layout(4097, 2)
    assert per_slot == 8192 and size == FLAG_BYTES + 16384
    assert FLAG_BYTES % 4096 == 0
    # flag words fit the flag area and never overlap
    words = ([staged.FULL_WORD + 16 * s for s in range(MAX_SLOTS)]
             + [staged.FREE_WORD + 16 * s for s in range(MAX_SLOTS)]
             + [staged.ABORT_WORD] + list(staged.STATUS_WORD.values()))
    assert len(set(words)) == len(words)
    assert max(words) * 4 + 4 <= FLAG_BYTES


def test_params_defaults_and_env():
    assert staged_params({}) == {"shm_chunk": 16 * M, "shm_slots": 3, "mpi_chunk": 4 * M, "mpi_slots": 3}
    p = staged_params({"IPCBENCH_SHM_CHUNK": "4M", "IPCBENCH_SHM_SLOTS": "2", "IPCBENCH_MPI_CHUNK": "256K",
                       "IPCBENCH_MPI_SLOTS": " "})
    assert p == {"shm_chunk": 4 * M, "shm_slots": 2, "mpi_chunk": 256 * K, "mpi_slots": 3}


@pytest.mark.parametrize("env", [{"IPCBENCH_SHM_CHUNK": "lots"}, {"IPCBENCH_SHM_SLOTS": "0"},
                                 {"IPCBENCH_MPI_SLOTS": "17"}, {"IPCBENCH_MPI_SLOTS": "x"},
                                 {"IPCBENCH_MPI_CHUNK": "2G"}])
def test_params_refuse_bad_values(env):
    with pytest.raises(ValueError, match=next(iter(env))):
        staged_params(env)


def test_suite_is_registered_with_push_steps_for_every_ordered_pair():
    from ipcbench.suites.registry import ORDER, plan

    assert "staged" in ORDER
    steps = plan(["staged"], 3, [4 * K, M])
    assert [s.label for s in steps] == ["shm_staged push", "mpi_staged push"]
    for s in steps:
        assert s.needs == () and not s.all_ranks
        assert sorted(s.pairs) == [(a, b) for a in range(3) for b in range(3) if a != b]


def test_chunkplan_is_a_value():
    assert plan_chunks(M, 8 * M, 3) == ChunkPlan(M, M, 3)
