"""The shared-memory side of shm_staged (ipc/shm.py and suites/staged_plan.py) under mpiexec (pytest-mpi), with no GPU.

The segment is *ordinary* POSIX shared memory here: it is created, mapped by both ranks of a pair,
unlinked, used and closed exactly as in the benchmark, only never cudaHostRegister'ed, and the
device-side flag protocol of kernels/flags.cu is played by Python loops on the same flag words.

Run: mpiexec -n 2 python -m pytest --with-mpi tests/mpi/test_staged_shm.py   (and -n 4; with an odd
count the last rank sits the pair tests out). Every wait is bounded, so a failure cannot hang.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import time

import pytest

from ipcbench.errors import StagedError
from ipcbench.ipc import shm as staged
from ipcbench.ipc.shm import FLAG_BYTES, ShmSegment, agree, open_pair_segment
from ipcbench.suites.staged_plan import ABORT_WORD, FREE_WORD, FULL_WORD, shm_layout, slot_of
from ipcbench.core.world import World

T = 30.0

pytestmark = pytest.mark.skipif(not os.path.isdir(staged.SHM_DIR), reason=f"no {staged.SHM_DIR}")


@pytest.fixture(scope="module")
def world():
    return World.create(timeout=T)


@pytest.fixture
def pair(world):
    """(peer, creator) for this rank: pairs (0,1), (2,3), ...; an odd last rank skips."""
    me = world.local_rank
    peer = me ^ 1
    if peer >= world.local_size:
        pytest.skip("odd rank count: no partner for the last rank")
    yield peer, me % 2 == 0
    world.pair_barrier(peer)  # keep the pair in step between tests


def leftovers(world, peer) -> list[str]:
    """Segments named after either rank of the pair that still exist."""
    pids = world.exchange(os.getpid(), peer, tag=90), os.getpid()
    return [p for pid in pids for p in glob.glob(os.path.join(staged.SHM_DIR, f"{staged.SHM_PREFIX}{pid}-*"))]


@pytest.mark.mpi(min_size=2)
def test_segment_is_shared_then_unlinked(world, pair):
    peer, creator = pair
    size, _ = shm_layout(64 * 1024, 3)
    seg = open_pair_segment(world, peer, creator, size)
    try:
        world.pair_barrier(peer)  # the creator has unlinked by now
        assert not os.path.exists(seg.path), "the name must be gone once both ranks mapped it"
        assert seg.size == size and not seg.closed
        data = (ctypes.c_ubyte * (size - FLAG_BYTES)).from_address(seg.addr + FLAG_BYTES)
        if creator:
            for i in range(0, len(data), 4093):
                data[i] = (i * 7 + 1) & 0xFF
            seg.words()[3] = 0xC0FFEE
        world.pair_barrier(peer)
        if not creator:
            assert seg.words()[3] == 0xC0FFEE
            assert all(data[i] == (i * 7 + 1) & 0xFF for i in range(0, len(data), 4093))
            seg.words()[4] = 0xBEEF
        world.pair_barrier(peer)
        if creator:
            assert seg.words()[4] == 0xBEEF
        del data
    finally:
        seg.close()
    assert seg.closed
    seg.close()  # idempotent
    assert leftovers(world, peer) == []


@pytest.mark.mpi(min_size=2)
def test_attach_failure_makes_both_raise_and_leaves_nothing(world, pair):
    peer, creator = pair
    size, _ = shm_layout(4096, 2)
    # the attaching rank expects more than was created: its mapping check fails
    with pytest.raises(StagedError, match="could not map|holds"):
        open_pair_segment(world, peer, creator, size if creator else size * 4)
    assert leftovers(world, peer) == []


@pytest.mark.mpi(min_size=2)
def test_create_failure_makes_both_raise(world, pair):
    peer, creator = pair
    with pytest.raises(StagedError, match="free|could not create"):
        open_pair_segment(world, peer, creator, 1 << 55)  # more than any /dev/shm
    assert leftovers(world, peer) == []


@pytest.mark.mpi(min_size=2)
def test_creator_cleans_up_when_the_peer_never_answers(world, pair):
    """The creator's exchange times out (the peer is busy elsewhere): the segment is unlinked and unmapped."""
    peer, creator = pair
    short = World(**{**world.__dict__, "timeout": 0.5})
    if creator:
        with pytest.raises(Exception, match="timed out"):
            open_pair_segment(short, peer, True, FLAG_BYTES + 4096)
    world.pair_barrier(peer, tag=91)
    if not creator:
        # drain the creator's first message (its name) so nothing stale is left for later tests
        msg = world.recv(peer, staged.SHM_TAG)
        assert msg[0] == "name"
    world.pair_barrier(peer, tag=91)
    assert leftovers(world, peer) == []


@pytest.mark.mpi(min_size=2)
def test_attach_refuses_foreign_names(tmp_path):
    with pytest.raises(StagedError, match="refusing"):
        ShmSegment.attach("../etc/passwd", 4096)
    with pytest.raises(StagedError, match="refusing"):
        ShmSegment.attach("something-else", 4096)


@pytest.mark.mpi(min_size=2)
def test_agree_raises_on_both_sides(world, pair):
    peer, creator = pair
    agree(world, peer, None, "nothing wrong")
    with pytest.raises(StagedError, match="step X"):
        agree(world, peer, "disk on fire" if creator else None, "step X")


@pytest.mark.mpi(min_size=2)
def test_tight_exchange_swaps_values(world, pair):
    peer, _ = pair
    me = world.local_rank
    assert world.tight_exchange(1000 + me, peer, "test") == 1000 + peer


@contextlib.contextmanager
def pair_segment(world, peer, creator, size):
    seg = open_pair_segment(world, peer, creator, size)
    try:
        yield seg
    finally:
        seg.close()


def _wait_at_least(words, index, target, abort_index, timeout):
    """Python stand-in for flag_wait: wrap-safe `flag >= target`, gives up on abort or timeout."""
    deadline = time.monotonic() + timeout
    while ((words[index] - target) & 0xFFFFFFFF) >= 0x80000000:
        if words[abort_index]:
            return False
        if time.monotonic() > deadline:
            words[abort_index] = 1
            return False
    return True


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("slots,chunks", [(3, 10), (1, 4), (2, 7)])
def test_flag_protocol_moves_every_chunk_in_order(world, pair, slots, chunks):
    """The producer/consumer protocol of kernels/flags.cu, played on the shared flag words.

    Both sides keep per-slot use counters; the producer waits free[s] >= seq[s], writes, posts full[s];
    the consumer waits full[s] >= seq[s] + 1, reads, posts free[s]. Run twice in a row without resetting
    anything (as graph relaunches do): flags only grow.
    """
    peer, creator = pair
    chunk = 4096
    size, per_slot = shm_layout(chunk, slots)
    with pair_segment(world, peer, creator, size) as seg:
        words = seg.words()
        seq = [0] * slots
        received = []
        for rnd in range(2):
            for g in range(chunks):
                s = slot_of(g, slots)
                body = (ctypes.c_uint32 * (chunk // 4)).from_address(seg.addr + FLAG_BYTES + s * per_slot)
                if creator:
                    assert _wait_at_least(words, FREE_WORD + 16 * s, seq[s], ABORT_WORD, T), "producer timed out"
                    body[0], body[-1] = rnd * 1000 + g, g
                    seq[s] += 1
                    words[FULL_WORD + 16 * s] = seq[s]
                else:
                    assert _wait_at_least(words, FULL_WORD + 16 * s, seq[s] + 1, ABORT_WORD, T), "consumer timed out"
                    received.append((body[0], body[-1]))
                    seq[s] += 1
                    words[FREE_WORD + 16 * s] = seq[s]
            world.pair_barrier(peer)
        if not creator:
            assert received == [(rnd * 1000 + g, g) for rnd in range(2) for g in range(chunks)]
        uses = [sum(1 for g in range(chunks) if g % slots == s) * 2 for s in range(slots)]
        assert seq == uses
        assert words[ABORT_WORD] == 0
        del words
