"""The sharing-cost protocol of the handles suite (suites/share_costs.py) under mpiexec, without CUDA.

This tests the protocol, not a GPU: a pretend mechanism whose "allocation" is a memfd holding a seeded
pattern stands in for pool / cuda.core / VMM exports. Real MPI (World, the pair's own communicator) and real
Unix-socket fd passing (fdpass.FdExchange) carry it, as in a run: rows and their order, timings from both
sides, every repetition's check, a wrong pattern, failures on either side (both ranks stop with the same
words, nobody waits for the timeout, every export released), and a GPU that cannot share (no rows, no
socket). Pairs (0, 1) and, with 4 ranks, (2, 3) run at once, as disjoint pairs of a node may. The real
mechanisms' driver calls are covered by tests/test_gpu_core.py, test_gpu_vmm.py and `ipcbench all` on a GPU.

Run: mpiexec -n 2 python -m pytest --with-mpi tests/mpi/test_share_costs.py   (and -n 4)
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from mpi4py import MPI

from ipcbench.core.context import Ctx
from ipcbench.core.sampler import SamplingRule
from ipcbench.core.world import World
from ipcbench.errors import ShareError
from ipcbench.suites.share_costs import ShareCosts, measure_share_costs

SIZES = [64, 4096]
REPEATS = 5


def pattern(seed: int, nbytes: int) -> bytes:
    return bytes((seed * 31 + i) % 251 for i in range(nbytes))


class Pretend:
    """A mechanism whose export is a memfd with pattern(seed); records what each side did."""

    def __init__(self, fail_export_at=None, fail_import_at=None, corrupt_at=None, supported=True, open_fails=False):
        self.fail_export_at, self.fail_import_at, self.corrupt_at = fail_export_at, fail_import_at, corrupt_at
        self.open_fails = open_fails
        self.ok = supported
        self.exports = self.released = self.imports = self.opened = self.closed = 0

    def spec(self) -> ShareCosts:
        return ShareCosts(label="pretend", exporter_rows=("p_export", "p_send_fd"), importer_rows=("p_import",),
                          tags=(71, 72), supported=lambda ctx: self.ok, export_once=self.export_once,
                          import_once=self.import_once, awaits="release the memfd",
                          note=lambda ctx, nbytes: f"pretend {nbytes}", open=self.open, close=self.close)

    def open(self, ctx):
        if self.open_fails:
            raise RuntimeError("no context (pretend)")
        self.opened += 1
        return "state"

    def close(self, state):
        assert state == "state"
        self.closed += 1

    def export_once(self, ctx, state, io, nbytes, seed):
        assert state == "state"
        if io.rep == self.fail_export_at:
            raise OSError("memfd_create refused (pretend)")
        fd = os.memfd_create("ipcbench-share-costs-test", os.MFD_CLOEXEC)
        data = pattern(seed, nbytes)
        if io.rep == self.corrupt_at:
            data = data[:-1] + bytes([data[-1] ^ 0xFF])
        os.write(fd, data)
        self.exports += 1
        try:
            io.send({"nbytes": nbytes})
            sent = io.send_fd(fd)
        finally:
            os.close(fd)

        def release():
            self.released += 1

        return {"p_export": 1.0 + io.rep, "p_send_fd": sent}, release

    def import_once(self, ctx, state, io, data, fd, nbytes, seed):
        if io.rep == self.fail_import_at:
            raise OSError("import refused (pretend)")
        got = os.pread(fd, nbytes, 0)
        self.imports += 1
        bad = sum(a != b for a, b in zip(got, pattern(seed, nbytes))) if ctx.verify else None
        return {"p_import": 100.0 + io.rep}, bad


def context(w) -> Ctx:
    return Ctx(world=w, gpu=SimpleNamespace(index=0), buffers={}, rule=SamplingRule(), verify=True, run_id="t",
               gpu_of=list(range(w.local_size)), node_ranks=w.node_ranks)


def pair_of(w) -> tuple[int, int]:
    a = w.local_rank - w.local_rank % 2
    return a, a + 1


def run_pair(p: Pretend):
    w = World.create(timeout=30)
    if w.local_size % 2:
        pytest.skip("pairs of ranks: an even number of ranks per node")
    src, dst = pair_of(w)
    return w, src, measure_share_costs(context(w), p.spec(), src, dst, SIZES)


@pytest.mark.mpi(min_size=2)
def test_rows_timings_and_checks():
    p = Pretend()
    w, src, rows = run_pair(p)
    if w.local_rank != src:
        assert rows == [] and p.imports == REPEATS * len(SIZES)
    else:
        assert [(r.method, r.bytes) for r in rows] == [(m, s) for s in SIZES
                                                       for m in ("p_export", "p_send_fd", "p_import")]
        for r in rows:
            assert r.verified and r.checks == REPEATS and r.samples == REPEATS and r.kind == "op"
            assert r.direction == "op" and r.note == f"pretend {r.bytes}" and r.bw_gbps_median is None
        by = {(r.method, r.bytes): r for r in rows}
        assert by[("p_export", 64)].time_us_min == 1.0 and by[("p_export", 64)].time_us_max == 5.0  # exporter's
        assert by[("p_import", 64)].time_us_min == 100.0 and by[("p_import", 64)].time_us_max == 104.0  # importer's
        assert by[("p_send_fd", 4096)].time_us_median > 0
        assert p.exports == p.released == REPEATS * len(SIZES)
    assert p.opened == p.closed == 1
    MPI.COMM_WORLD.Barrier()


@pytest.mark.mpi(min_size=2)
def test_a_wrong_pattern_fails_every_row_of_its_size():
    p = Pretend(corrupt_at=2)
    w, src, rows = run_pair(p)
    if w.local_rank == src:
        assert rows and all(not r.verified and "mismatched words" in r.note for r in rows)
    MPI.COMM_WORLD.Barrier()


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("side", ["export", "import"])
def test_a_failure_on_either_side_stops_both_with_the_same_words(side):
    p = Pretend(**{f"fail_{side}_at": 1})
    w = World.create(timeout=30)
    if w.local_size % 2:
        pytest.skip("pairs of ranks: an even number of ranks per node")
    src, dst = pair_of(w)
    with pytest.raises(ShareError) as err:
        measure_share_costs(context(w), p.spec(), src, dst, SIZES)
    text = str(err.value)
    assert f"pretend {side} failed" in text and "(pretend)" in text
    theirs = w.exchange(text, dst if w.local_rank == src else src, tag=5)
    assert theirs.split(") ", 1)[-1] == text.split(") ", 1)[-1]  # the same message on both ranks
    reporter = "exporter" if side == "export" else "importer"
    assert ("(reported by the " + reporter + ")" in text) == (w.local_rank == (dst if side == "export" else src))
    if w.local_rank == src:
        assert p.released == p.exports  # nothing left allocated
    assert p.closed == 1
    MPI.COMM_WORLD.Barrier()


@pytest.mark.mpi(min_size=2)
def test_a_gpu_that_cannot_share_gives_no_rows_on_both_ranks():
    w = World.create(timeout=30)
    if w.local_size % 2:
        pytest.skip("pairs of ranks: an even number of ranks per node")
    src, dst = pair_of(w)
    p = Pretend(supported=w.local_rank != dst)  # only the importer's GPU cannot
    assert measure_share_costs(context(w), p.spec(), src, dst, SIZES) == []
    assert p.opened == 0 and p.exports == 0
    MPI.COMM_WORLD.Barrier()


@pytest.mark.mpi(min_size=2)
def test_a_setup_that_fails_on_one_rank_stops_both_before_the_pair_communicator():
    """The importer's setup fails: both ranks raise with its words (neither waits in MPI Create_group, which
    has no deadline), and the exporter's own setup is closed again."""
    w = World.create(timeout=30)
    if w.local_size % 2:
        pytest.skip("pairs of ranks: an even number of ranks per node")
    src, dst = pair_of(w)
    p = Pretend(open_fails=w.local_rank == dst)
    with pytest.raises(ShareError, match=r"pretend setup failed \(RuntimeError: no context \(pretend\)\)"):
        measure_share_costs(context(w), p.spec(), src, dst, SIZES)
    assert p.closed == p.opened  # the exporter opened and closed; the importer never opened
    assert p.exports == 0
    MPI.COMM_WORLD.Barrier()
