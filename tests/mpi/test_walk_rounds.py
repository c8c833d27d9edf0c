"""The walk over a step's pairs (run/walk.py) under mpiexec, with the real MPI world and the real row sink,
and fake steps: this tests scheduling and accounting (who runs when, every pair once, rows gathered, the
concurrency check), not a GPU. Run: mpiexec -n 2|4 python -m pytest --with-mpi tests/mpi."""

from __future__ import annotations

import tempfile
from types import SimpleNamespace

import pytest
from mpi4py import MPI

from ipcbench.core.schedule import PairMode, SerialPairs
from ipcbench.core.world import World
from ipcbench.results import ResultsWriter, Row
from ipcbench.record.table import read_rows
from ipcbench.run.collect import RowSink
from ipcbench.run.walk import walk
from ipcbench.suites.registry import Step

comm = MPI.COMM_WORLD
CONCURRENT = PairMode("concurrent", "concurrent", "test")
SEQUENTIAL = PairMode("sequential", "sequential", "test")


def _row(world, src, dst, nbytes, bw):
    return Row(run_id="t", host=world.host, suite="copy", method="ce", direction="push", src_rank=src,
               dst_rank=dst, src_gpu=src, dst_gpu=dst, same_gpu=False, bytes=nbytes, iterations=1, samples=3,
               time_us_median=nbytes / bw / 1e3, time_us_min=1.0, time_us_max=2.0, bw_gbps_median=bw,
               bw_gbps_max=bw, cv=0.0, verified=True, note="")


def _setup(world):
    d = comm.bcast(tempfile.mkdtemp(prefix="ipcbench-walk-") if comm.rank == 0 else None, root=0)
    writer = ResultsWriter(d) if comm.rank == 0 else None
    ctx = SimpleNamespace(world=world, buffers={"legacy": object()}, unavailable={}, calls=[], gpu_model="",
                          gpu_of=list(range(world.local_size)), mps=False)
    ctx.has = lambda need: need in ctx.buffers  # core/context.Ctx.has, for buffer kinds
    return ctx, RowSink(world, writer, d), writer


def _fake_step(all_at_once: bool, guard_bw: float = 100.0):
    def run(ctx, src, dst, sizes):
        w = ctx.world
        me = w.local_rank
        ctx.calls.append((src, dst, tuple(sizes)))
        peer = dst if me == src else src
        assert w.exchange(me, peer) == peer  # the two ranks of the pair run together
        if all_at_once and len(sizes) > 1:
            # every rank of a perfect-matching round is in a pair: a node barrier inside the measurement
            # completes only if the whole round runs at once (sequential pairs would time out here)
            w.node_barrier("the other pairs of the round")
        if me != src:
            return []
        return [_row(w, src, dst, s, 100.0 if len(sizes) > 1 else guard_bw) for s in sizes]

    return run


def _step(world, all_at_once, guard_bw=100.0):
    n = world.local_size
    pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
    return Step("copy", "fake push", pairs, [1024, 4096], _fake_step(all_at_once, guard_bw), needs=("legacy",),
                rounds_ok=True, engine="ce")


@pytest.mark.mpi(min_size=2)
def test_rounds_run_every_pair_once_and_at_once():
    world = World.create(timeout=20)
    if world.local_size % 2:
        pytest.skip("perfect matchings need an even rank count")
    ctx, sink, writer = _setup(world)
    rows, checks = walk(ctx, [_step(world, all_at_once=True)], sink, quiet=True, mode=CONCURRENT)
    n = world.local_size
    sweeps = [c for c in ctx.calls if len(c[2]) == 2]
    assert len(sweeps) == 2 * (n - 1)  # one pair in every round
    if comm.rank == 0:
        writer.close()
        got = sorted((r.src_rank, r.dst_rank, r.bytes) for r in read_rows(writer.path))
        assert got == sorted((a, b, s) for a in range(n) for b in range(n) if a != b for s in (1024, 4096))
        # every row says it was measured in a round of n/2 pairs, and without MPS
        assert {(r.round_pairs, r.mps) for r in read_rows(writer.path)} == {(n // 2, False)}
        if n > 2:
            (check,) = checks
            assert all(f"round of {n // 2} disjoint pairs" in r.note for r in rows)
            assert check["ok"] and check["worst_diff"] == 0 and len(check["pairs"]) == n // 2
        else:
            assert checks == []  # one pair per round: nothing to check
    comm.Barrier()


@pytest.mark.mpi(min_size=4)
def test_the_check_warns_when_a_round_disagrees_with_pairs_alone(capsys):
    world = World.create(timeout=20)
    if world.local_size % 2:
        pytest.skip("perfect matchings need an even rank count")
    ctx, sink, writer = _setup(world)
    _, checks = walk(ctx, [_step(world, all_at_once=True, guard_bw=90.0)], sink, quiet=True, mode=CONCURRENT)
    if world.local_rank == 0:
        (check,) = checks
        assert not check["ok"] and check["worst_diff"] == pytest.approx(100 / 90 - 1)
        assert "rerun with --pairs sequential" in capsys.readouterr().err
    if comm.rank == 0:
        writer.close()
    comm.Barrier()


@pytest.mark.mpi(min_size=2)
def test_sequential_walk_runs_one_pair_at_a_time():
    world = World.create(timeout=20)
    ctx, sink, writer = _setup(world)
    rows, checks = walk(ctx, [_step(world, all_at_once=False)], sink, quiet=True, mode=SEQUENTIAL)
    n = world.local_size
    me = world.local_rank
    assert sorted(c[:2] for c in ctx.calls) == sorted(p for p in _step(world, False).pairs if me in p)
    assert checks == []
    if comm.rank == 0:
        writer.close()
        assert len(read_rows(writer.path)) == n * (n - 1) * 2
        assert not any("round" in r.note for r in rows)
        assert {r.round_pairs for r in read_rows(writer.path)} == {1}  # each pair alone
    comm.Barrier()


@pytest.mark.mpi(min_size=2)
def test_a_serial_step_on_a_ring_runs_its_ring_pairs_only():
    """--serial-pairs ring: a step that is never walked in rounds measures i -> i+1 (mod N) only, each pair
    on its two ranks; rounds_ok steps are not thinned."""
    world = World.create(timeout=20)
    ctx, sink, writer = _setup(world)
    n, me = world.local_size, world.local_rank
    ordered = [(a, b) for a in range(n) for b in range(n) if a != b]
    serial = Step("staged", "fake staged push", ordered, [1024, 4096], _fake_step(all_at_once=False))
    mode = PairMode("sequential", "sequential", "test", SerialPairs("ring", "ring", "test"))
    rows, _ = walk(ctx, [serial, _step(world, all_at_once=False)], sink, quiet=True, mode=mode)
    ring = {(i, (i + 1) % n) for i in range(n)}
    assert sorted(c[:2] for c in ctx.calls[:2]) == sorted(p for p in ring if me in p)
    assert len(ctx.calls) == 2 + sum(me in p for p in ordered)  # the rounds_ok step: every pair of this rank
    if comm.rank == 0:
        writer.close()
        got = [(r.src_rank, r.dst_rank) for r in read_rows(writer.path)]
        assert set(got[:2 * n]) == ring and len(got) == 2 * n + 2 * n * (n - 1)
    comm.Barrier()


@pytest.mark.mpi(min_size=2)
def test_a_step_without_its_buffers_is_skipped_on_every_rank(capsys):
    world = World.create(timeout=20)
    ctx, sink, writer = _setup(world)
    ctx.buffers = {}
    ctx.unavailable = {"legacy": "no IPC here"}
    rows, _ = walk(ctx, [_step(world, all_at_once=False)], sink, quiet=True, mode=SEQUENTIAL)
    assert ctx.calls == [] and rows == []
    if comm.rank == 0:
        assert "skipping fake push: no IPC here" in capsys.readouterr().out
        writer.close()
    comm.Barrier()


@pytest.mark.mpi(min_size=2)
def test_permutation_rounds_run_every_flow_once_with_every_rank():
    """A step with run_round under a mode that permutes it: N-1 rounds, each called on every rank at once (a node
    barrier inside the round completes only then), each rank sending once and receiving once; every ordered pair's
    rows reach results.csv once, each saying it ran in a permutation round of N flows."""
    from ipcbench.core.schedule import decide_permutation

    world = World.create(timeout=20)
    ctx, sink, writer = _setup(world)
    n, me = world.local_size, world.local_rank
    calls = []

    def run_round(ctx, flows, sizes):
        calls.append(flows)
        world.node_barrier("the round")
        assert sorted(a for a, _ in flows) == sorted(b for _, b in flows) == list(range(n))
        (out,) = [f for f in flows if f[0] == me]
        return [_row(world, out[0], out[1], s, 100.0) for s in sizes]

    step = _step(world, all_at_once=False)
    step.run_round = run_round
    mode = PairMode("concurrent", "auto", "test",
                    permutation=decide_permutation("auto", 1, ["nvswitch"] * (n * (n - 1)), {"ce": 1 << 20}))
    rows, _ = walk(ctx, [step], sink, quiet=True, mode=mode)
    assert len(calls) == n - 1 and ctx.calls[-n:] != []  # the guard re-measured pairs alone through step.run
    if comm.rank == 0:
        writer.close()
        got = read_rows(writer.path)
        assert sorted((r.src_rank, r.dst_rank, r.bytes) for r in got) == sorted(
            (a, b, s) for a in range(n) for b in range(n) if a != b for s in (1024, 4096))
        assert {r.round_pairs for r in got} == {n} and all("permutation round" in r.note for r in got)
    comm.Barrier()
