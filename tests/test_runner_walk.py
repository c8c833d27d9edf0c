"""run/walk.py, run/runner.py's collective decisions, run/collect.RowSink and run/console.Progress over a
fake world of threads (tests/fakes.py). A fake: this tests scheduling (who runs which pair, skipped
steps, rounds, where rows go, what rank 0 prints) and agreement between ranks, not a GPU."""

from __future__ import annotations

import csv
import threading

import pytest

from fakes import FakeGpu, FakeNode, HostMemory, run_ranks
from ipcbench.core import gpu as gpumod
from ipcbench.core.context import Ctx
from ipcbench.core.rows import make_row
from ipcbench.core.sampler import SamplingRule
from ipcbench.errors import UsageError
from ipcbench.results import ResultsWriter
from ipcbench.core.schedule import PairMode
from ipcbench.run import runner
from ipcbench.run.console import say
from ipcbench.run.walk import walk
from ipcbench.run.collect import RowSink
from ipcbench.suites.registry import Step


SEQUENTIAL = PairMode("sequential", "sequential", "test")
CONCURRENT = PairMode("concurrent", "concurrent", "test")


def one_row(ctx, suite, label, src, dst, nbytes):
    return make_row(ctx, suite=suite, method=label, direction="push", src=src, dst=dst, nbytes=nbytes, per_us=[1.0,
                    1.0, 1.0], iterations=1, moved=nbytes, checks=3, mismatches=0)


class Recorder:
    """Fake steps that record who ran what and return one row per (pair, size) on the source rank."""

    def __init__(self):
        self.calls = []
        self.lock = threading.Lock()

    def pair_step(self, suite, label, pairs, sizes, needs=()):
        def run(ctx, src, dst, sizes):
            with self.lock:
                self.calls.append((label, ctx.world.local_rank, src, dst))
            if ctx.world.local_rank != src:
                return []
            return [one_row(ctx, suite, label, src, dst, n) for n in sizes]

        return Step(suite, label, pairs, sizes, run, needs=needs)

    def concurrent_step(self, suite, label, sizes):
        def run(ctx, sizes):
            with self.lock:
                self.calls.append((label, ctx.world.local_rank, None, None))
            me = ctx.world.local_rank
            return [one_row(ctx, suite, label, me, (me + 1) % ctx.world.local_size, n) for n in sizes]

        return Step(suite, label, [], sizes, run, all_ranks=True, needs=("legacy",), cost=3.0)


def read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_walk_runs_each_pair_on_its_two_ranks_and_collects_rows(tmp_path, capsys):
    rec = Recorder()
    pairs = [(0, 1), (2, 0), (1, 2)]
    steps = [rec.pair_step("copy", "ce push", pairs, [64, 128], needs=("legacy",)),
             rec.pair_step("pool", "pool_ce push", pairs, [64], needs=("pool",)),
             rec.concurrent_step("copy", "ce all-to-all", [256])]
    node = FakeNode(n=3, kinds=("legacy",))

    def rank(ctx):
        ctx.unavailable["pool"] = "no IPC-capable pools here"
        writer = ResultsWriter(tmp_path) if ctx.world.rank == 0 else None
        rows, checks = walk(ctx, steps, RowSink(ctx.world, writer, str(tmp_path)), quiet=False, mode=SEQUENTIAL)
        assert checks == []
        if writer:
            writer.close()
        return rows

    out = node.run(rank)
    assert out[1] == [] and out[2] == []  # rows end up on the node leader only
    got = [(r.method, r.src_rank, r.dst_rank, r.bytes) for r in out[0]]
    want = [("ce push", s, d, n) for s, d in pairs for n in (64, 128)] + \
           [("ce all-to-all", me, (me + 1) % 3, 256) for me in range(3)]
    assert got == want
    assert [(r["method"], int(r["src_rank"]), int(r["dst_rank"]), int(r["bytes"]))
            for r in read_csv(tmp_path / "results.csv")] == want
    # each pair ran on exactly its two ranks, the skipped step on none, the concurrent step on all
    ran = sorted((lbl, me) for lbl, me, _, _ in rec.calls)
    assert ran == sorted([("ce push", me) for p in pairs for me in p] + [("ce all-to-all", me) for me in range(3)])
    text = capsys.readouterr().out
    assert text.count("skipping pool_ce push: no IPC-capable pools here") == 1  # said once, by rank 0
    assert "[copy    ]" in text and "ETA    0.0 s" in text  # progress reaches the end


def test_walk_is_quiet_when_asked(capsys):
    rec = Recorder()
    node = FakeNode(n=2, kinds=("legacy",))
    out = node.run(lambda ctx: walk(ctx, [rec.pair_step("copy", "x", [(0, 1)], [8])],
                                    RowSink(ctx.world, None, None), quiet=True, mode=SEQUENTIAL)[0])
    assert capsys.readouterr().out == ""
    assert len(out[0]) == 1 and out[1] == []


def test_fleet_rows_reach_world_rank_0_and_a_part_file(tmp_path):
    """Two pretend nodes of two ranks: node b's leader writes nodes/b.csv as it goes, and world rank 0
    gets node b's rows at the end, after its own."""
    rec = Recorder()
    steps = [rec.pair_step("copy", "ce push", [(0, 1), (1, 0)], [64])]

    def rank(world):
        ctx = Ctx(world=world, gpu=None, buffers={"legacy": None}, rule=SamplingRule(), verify=True, run_id="f",
                  gpu_of=[0, 1], node_ranks=world.node_ranks)
        writer = ResultsWriter(tmp_path) if world.rank == 0 else None
        rows, _ = walk(ctx, steps, RowSink(world, writer, str(tmp_path)), quiet=True, mode=SEQUENTIAL)
        if writer:
            writer.close()
        return rows

    out = run_ranks(rank, hosts=["a", "a", "b", "b"])
    assert [(r.host, r.src_rank, r.dst_rank) for r in out[0]] == [("a", 0, 1), ("a", 1, 0), ("b", 2, 3), ("b", 3, 2)]
    assert [(r.host, r.src_rank) for r in out[2]] == [("b", 2), ("b", 3)]  # node b's leader knows its rows
    assert out[1] == [] and out[3] == []
    assert [r["host"] for r in read_csv(tmp_path / "results.csv")] == ["a", "a", "b", "b"]
    assert [int(r["src_rank"]) for r in read_csv(tmp_path / "nodes" / "b.csv")] == [2, 3]


def _round_step(guard_bw: float, engine: str = "ce", label: str = "fake push"):
    """A fake pair step (rounds allowed): the sweep reports 100 GB/s; the one-size re-run that checks
    the round reports `guard_bw`. Every rank of a round is in a pair, so a node barrier inside the sweep
    completes only if the round's pairs really run at once."""
    def run(ctx, src, dst, sizes):
        w = ctx.world
        if len(sizes) > 1:
            w.node_barrier("the other pairs of the round")
        if w.local_rank != src:
            return []
        bw = 100.0 if len(sizes) > 1 else guard_bw
        return [make_row(ctx, suite="copy", method="ce", direction="push", src=src, dst=dst, nbytes=n, per_us=[n / bw /
                         1e3] * 3, iterations=1, moved=n, checks=3, mismatches=0) for n in sizes]

    pairs = [(a, b) for a in range(4) for b in range(4) if a != b]
    return Step("copy", label, pairs, [1000, 4000], run, needs=("legacy",), rounds_ok=True, engine=engine)


@pytest.mark.parametrize("guard_bw, ok", [(100.0, True), (80.0, False), (96.0, True), (93.0, False)])
def test_rounds_of_disjoint_pairs_and_their_check(guard_bw, ok, capsys):
    """The guard allows a pair alone to differ from its round by the noise the round's row states (a 4000 B copy:
    6.5%, catalogue/noise.py), never less than 1%: 4.2% passes, 7.5% and 25% warn."""
    node = FakeNode(n=4, kinds=("legacy",))
    out = node.run(lambda ctx: walk(ctx, [_round_step(guard_bw)], RowSink(ctx.world, None, None), quiet=True,
                                    mode=CONCURRENT))
    rows, (check,) = out[0]
    assert sorted((r.src_rank, r.dst_rank, r.bytes) for r in rows) == \
        sorted((a, b, n) for a in range(4) for b in range(4) if a != b for n in (1000, 4000))
    assert all("measured in a round of 2 disjoint pairs" in r.note for r in rows)
    assert all(c == [] for _, c in out[1:])  # the check's result lives on the node leader
    assert check["ok"] is ok and len(check["pairs"]) == 2 and check["bytes"] == 4000
    assert check["worst_diff"] == pytest.approx(abs(100.0 / guard_bw - 1))
    assert (check["step"], check["engine"]) == ("copy/fake push", "ce")
    err = capsys.readouterr().err
    assert ("may share a link or a node limit here" in err) is (not ok)
    if not ok:  # the warning names the step and the worst pair
        assert f"disjoint round of 2 pairs measured copy/fake push at 4000 up to {100 / guard_bw - 1:.1%}" in err
        assert "worst: ranks " in err and f"{guard_bw:g} alone; allowed 6.5%" in err  # the row's stated noise


def test_every_engine_walked_in_rounds_is_checked_once(capsys):
    """A copy-engine step, a second one, an SM-kernel step and a bulk-kernel step, all in rounds: three checks
    (the second copy-engine step is not checked again), and the kernel step's warning names it."""
    node = FakeNode(n=4, kinds=("legacy",), timeout=5.0)
    steps = [_round_step(100.0, "ce", "ce push"), _round_step(100.0, "ce", "ce pull"),
             _round_step(90.0, "sm", "sm_read pull"), _round_step(100.0, "sm_bulk", "sm_bulk_read pull")]
    out = node.run(lambda ctx: walk(ctx, steps, RowSink(ctx.world, None, None), quiet=True, mode=CONCURRENT))
    checks = out[0][1]
    assert [(c["step"], c["engine"], c["ok"]) for c in checks] == [
        ("copy/ce push", "ce", True), ("copy/sm_read pull", "sm", False), ("copy/sm_bulk_read pull", "sm_bulk", True)]
    err = capsys.readouterr().err
    assert err.count("ipcbench: warning:") == 1 and "measured copy/sm_read pull" in err


def test_two_round_steps_stay_in_step():
    """Two steps walked in rounds (any real suite has several): every rank must run the round check the
    same number of times."""
    node = FakeNode(n=4, kinds=("legacy",), timeout=1.0)
    out = node.run(lambda ctx: walk(ctx, [_round_step(100.0), _round_step(100.0)], RowSink(ctx.world, None, None),
                                    quiet=True, mode=CONCURRENT))
    assert len(out[0][0]) == 2 * 12 * 2


def test_a_ring_walks_only_the_ring_pairs_of_serial_steps(capsys):
    """--serial-pairs ring: a serial step runs its ring pairs only (on exactly their two ranks), a rounds_ok
    step keeps every pair, and the progress counts what is measured, so it ends at its total."""
    from ipcbench.core.schedule import SerialPairs

    rec = Recorder()
    ordered = [(a, b) for a in range(4) for b in range(4) if a != b]
    unordered = [(a, b) for a in range(4) for b in range(a + 1, 4)]
    transfer = rec.pair_step("copy", "ce push", ordered, [64])
    transfer.rounds_ok = True
    steps = [rec.pair_step("staged", "shm_staged push", ordered, [64, 128]),
             rec.pair_step("latency", "sm pingpong", unordered, [4]), transfer]
    ring = PairMode("sequential", "sequential", "test", SerialPairs("ring", "ring", "--serial-pairs ring"))
    node = FakeNode(n=4, kinds=("legacy",))
    out = node.run(lambda ctx: walk(ctx, steps, RowSink(ctx.world, None, None), quiet=False, mode=ring)[0])
    got = {(r.method, r.src_rank, r.dst_rank) for r in out[0]}
    assert {(s, d) for m, s, d in got if m == "shm_staged push"} == {(0, 1), (1, 2), (2, 3), (3, 0)}
    assert {(s, d) for m, s, d in got if m == "sm pingpong"} == {(0, 1), (1, 2), (2, 3), (0, 3)}
    assert {(s, d) for m, s, d in got if m == "ce push"} == set(ordered)
    assert len(out[0]) == 4 * 2 + 4 + 12
    ran = sorted((lbl, me, s, d) for lbl, me, s, d in rec.calls if lbl != "ce push")
    want = [("shm_staged push", s, d) for s, d in [(0, 1), (1, 2), (2, 3), (3, 0)]] + \
        [("sm pingpong", s, d) for s, d in [(0, 1), (0, 3), (1, 2), (2, 3)]]
    assert ran == sorted((lbl, me, s, d) for lbl, s, d in want for me in (s, d))
    lines = capsys.readouterr().out.splitlines()
    assert any(ln.startswith("[staged  ]     8/8 ") for ln in lines)
    assert any(ln.startswith("[latency ]     4/4 ") for ln in lines) and "ETA    0.0 s" in lines[-1]


# ---- collective decisions -------------------------------------------------------------------------

def test_agree_on_gives_every_rank_rank_0s_decision():
    decided = []

    def decide():
        decided.append(1)
        return ("results/run-1", None)

    assert run_ranks(lambda w: runner.agree_on(w, decide), n=3) == ["results/run-1"] * 3
    assert decided == [1]  # only world rank 0 decides


def test_agree_on_raises_the_same_error_on_every_rank():
    def rank(w):
        try:
            runner.agree_on(w, lambda: (None, "--out x: already holds a run"))
        except UsageError as e:
            return str(e)

    assert run_ranks(rank, n=2) == ["--out x: already holds a run"] * 2


def test_say_prints_on_rank_0_only(capsys):
    run_ranks(lambda w: say(w, "hello", w.rank), n=3)
    assert capsys.readouterr().out == "hello 0\n"


def test_str_dir():
    from pathlib import Path

    assert runner._str_dir((Path("a/b"), None)) == ("a/b", None)
    assert runner._str_dir((None, "why")) == (None, "why")


def test_check_memory_counts_ranks_sharing_a_gpu():
    """A fake: free memory is what the fake GPU says. 64 MiB buffers need (1 + 2 ranks) slots of each
    buffer kind plus 64 MiB slack per rank; two ranks on one GPU need twice that."""
    sizes = [64 << 20]
    steps = [Step("copy", "x", [(0, 1)], sizes, None, needs=("legacy",))]
    need = (64 << 20) * 3 + (64 << 20)

    def check(free, gpu_index):
        mem = HostMemory()

        def rank(w):
            g = FakeGpu(mem, index=gpu_index[w.rank], free_bytes=free)
            try:
                runner._check_memory(w, g, sizes, steps, 1)
                return "ok"
            except UsageError as e:
                return str(e)

        return run_ranks(rank, n=2)

    assert check(int(need / 0.9) + 1, [0, 1]) == ["ok", "ok"]
    shared = check(int(need / 0.9) + 1, [0, 0])
    assert shared[0] == shared[1] and "(2 rank(s) x 0.25 GiB)" in shared[0] and "use smaller --sizes" in shared[0]
    assert check(int(2 * need / 0.9) + 1, [0, 0]) == ["ok", "ok"]


def _info(i, uuid):
    return gpumod.GpuInfo(i, "Fake GPU", uuid, f"0000:{i:02x}:00.0", 132, 80 << 30, "9.0", 50 << 20)


def test_select_gpu_picks_by_local_rank(monkeypatch):
    """A fake device list (no GPU claim): rank -> GPU index and UUID gathering."""
    monkeypatch.setattr(gpumod, "device_count", lambda: 2)
    monkeypatch.setattr(gpumod, "device_info", lambda i: _info(i, f"GPU-{i}"))
    out = run_ranks(lambda w: runner._select_gpu(w)[0], n=3)
    assert out == [0, 1, 0]


def test_select_gpu_refuses_per_rank_binding_and_missing_gpus(monkeypatch):
    monkeypatch.setattr(gpumod, "device_count", lambda: 1)
    monkeypatch.setattr(gpumod, "device_info", lambda i: _info(i, f"GPU-{threading.current_thread().name}"))

    def rank(w):
        with pytest.raises(UsageError) as e:
            runner._select_gpu(w)
        return str(e.value)

    msgs = run_ranks(rank, n=2)
    assert "--gpus-per-task" in msgs[0] and msgs[0] == msgs[1]
    monkeypatch.setattr(gpumod, "device_count", lambda: 0)
    msgs = run_ranks(rank, n=2)
    assert msgs[0] == msgs[1] and msgs[0].startswith("no CUDA GPU visible to node-local rank(s) [0, 1]")


def test_shared_slots_hold_every_steps_largest_message():
    """`latency --sizes 4K` still sends 64 KiB one-way messages: the shared slots must hold them (the slot
    size once came from --sizes alone, so those copies ran past a 4 KiB slot)."""
    from ipcbench.run.runner import slot_bytes
    from ipcbench.suites.registry import plan

    steps = plan(["latency"], 2, [4096])
    assert slot_bytes(steps, [4096]) == 65536
    assert slot_bytes(plan(["copy"], 2, [4096, 1 << 20]), [4096, 1 << 20]) == 1 << 20
    # steps that need no shared buffers (host-staged paths allocate their own) do not grow the slots
    assert slot_bytes(plan(["staged"], 2, [4096]), [4096]) == 4096
