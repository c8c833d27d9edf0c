"""The nccl suite on fakes (tests/fakes.py: FakeNccl over FakeGpu streams and a world of threads). These
test LOGIC only: the two-sided roles, the counts both ranks agree on, graph-or-direct agreement, who
verifies what, the rows and notes, the communicator bookkeeping, the support message without NCCL, and
the run's skip path. A fake send is a copy into a queue and fake times are set by each test: nothing here
says anything about NCCL on a GPU (tests/test_gpu_nccl.py does)."""

from __future__ import annotations

import csv
import json
import os

import pytest

from fakes import FakeNccl, FakeNode
from ipcbench.core.methods import MAX_QUEUED, METHODS, GraphBatch, StreamBatch
from ipcbench.core.pair import per_transfer_us, roles_for, two_sided_endpoints
from ipcbench.errors import MeasureError
from ipcbench.ipc import nccl as ncclmod
from ipcbench.ipc import sharers
from ipcbench.suites import nccl as suite
from ipcbench.suites.registry import ORDER, plan
from test_run_on_fakes import cfg, fake_job  # noqa: F401 - fake_job is a fixture

US = 1000.0  # ns


@pytest.fixture
def fake_nccl(monkeypatch):
    """Install a FakeNccl over ipc/nccl.load; returns a function making a new one with options."""
    def install(**kw):
        lib = FakeNccl(**kw)
        monkeypatch.setattr(ncclmod, "load", lambda: lib)
        return lib

    return install


def const(ns):
    return lambda nbytes: ns


def slow_and_fast():
    return FakeNode(gpu_kw=[dict(transfer_ns=const(1 * US)), dict(transfer_ns=const(3 * US))])


# ---- roles (pure) ----------------------------------------------------------------------------------

def test_two_sided_roles_have_both_ranks_drive():
    push0, push1 = roles_for("push", 0, 1, 0, two_sided=True), roles_for("push", 0, 1, 1, two_sided=True)
    assert push0.driving and push1.driving
    assert (push0.receiving, push1.receiving) == (False, True)
    for me in (0, 1):
        r = roles_for("bidir", 0, 1, me, two_sided=True)
        assert r.driving and r.receiving and r.sources == (0, 1)
    with pytest.raises(ValueError, match="no direction 'pull'"):
        roles_for("pull", 0, 1, 0, two_sided=True)
    # one-sided roles are unchanged
    assert not roles_for("push", 0, 1, 1).driving


def test_two_sided_endpoints_are_each_ranks_own_half():
    node = FakeNode(n=3)
    b = [node.buffers["legacy"][r] for r in range(3)]
    assert two_sided_endpoints(b[2], roles_for("push", 2, 0, 2, True)) == (b[2].src, None)
    assert two_sided_endpoints(b[0], roles_for("push", 2, 0, 0, True)) == (None, b[0].inbox_slot(2))
    assert two_sided_endpoints(b[1], roles_for("bidir", 0, 1, 1, True)) == (b[1].src, b[1].inbox_slot(0))


def test_one_way_time_is_the_longer_side_when_both_drove():
    assert per_transfer_us("push", False, (2.0, None), (5.0, None), 1000) == pytest.approx(5.0)
    assert per_transfer_us("push", False, (2.0, None), (None, None), 1000) == pytest.approx(2.0)


def test_the_method_is_two_sided_and_binds_to_the_pair():
    m = METHODS["nccl"]
    assert m.two_sided and m.directions == ("push", "bidir") and m.buffers == "legacy"
    assert not METHODS["ce"].two_sided and METHODS["ce"].bind(None, 0, 1) is METHODS["ce"]
    with pytest.raises(TypeError, match="Method.bind"):
        m.enqueue(None, None, 0, 0, 4)


# ---- bandwidth rows ---------------------------------------------------------------------------------

def test_push_row_is_the_longer_side_and_the_receiver_verifies(fake_nccl):
    """A fake: rank 0's calls cost 1 us, rank 1's 3 us; both drive, the row reports 3 us per transfer."""
    lib = fake_nccl()
    node = slow_and_fast()
    rows0, rows1 = node.run(lambda ctx: suite.measure(ctx, "push", 0, 1, [4096, 65536]))
    assert rows1 == [] and [r.bytes for r in rows0] == [4096, 65536]
    for r in rows0:
        assert (r.suite, r.method, r.direction, r.kind) == ("nccl", "nccl", "push", "bandwidth")
        assert r.time_us_median == pytest.approx(3.0) and r.bw_gbps_median == pytest.approx(r.bytes / 3e-6 / 1e9)
        assert r.verified and r.checks == r.samples
        assert "NCCL 2.28.9, a 2-rank communicator per GPU pair" in r.note and "captured in CUDA graphs" in r.note
    g0, g1 = node.gpus
    assert not g0.verifies and len(g1.verifies) == sum(r.samples for r in rows0)
    (c0, c1) = sorted(lib.comms, key=lambda c: c.rank)
    assert c0.calls["send"] == c1.calls["recv"] and c0.calls["recv"] == c1.calls["send"] == 1  # + connect
    assert lib.pending() == []
    # both ranks calibrated alike (lockstep), so both hold the same hint
    key = ("nccl/nccl/push", 0, 1)
    assert node.ctxs[0].hints[key] == node.ctxs[1].hints[key]


def test_bidir_checks_both_sides_and_counts_both_directions(fake_nccl):
    fake_nccl()
    node = slow_and_fast()
    (row,), rows1 = node.run(lambda ctx: suite.measure(ctx, "bidir", 0, 1, [8192]))
    assert rows1 == [] and row.direction == "bidir"
    assert row.checks == 2 * row.samples and row.verified
    assert row.bw_gbps_median == pytest.approx(2 * 8192 / (row.time_us_median * 1e-6) / 1e9)
    assert len(node.gpus[0].verifies) == len(node.gpus[1].verifies) == row.samples


def test_a_corrupted_receive_fails_the_row(fake_nccl):
    fake_nccl()
    node = FakeNode(corrupt="nccl")
    (row,), _ = node.run(lambda ctx: suite.measure(ctx, "push", 0, 1, [4096]))
    assert not row.verified and "mismatched words" in row.note


def test_latency_rows_are_oneway(fake_nccl):
    fake_nccl()
    node = FakeNode()
    rows, _ = node.run(lambda ctx: suite.measure(ctx, "push", 0, 1, [4, 64], latency=True))
    got = [(r.direction, r.kind, r.bw_gbps_median, r.verified) for r in rows]
    assert got == [("oneway", "latency", None, True)] * 2
    assert rows[0].note.startswith("push: back-to-back ncclSend/ncclRecv pairs")


# ---- graphs or direct ---------------------------------------------------------------------------------

@pytest.mark.parametrize("failing", [{0}, {1}, {0, 1}])
def test_a_rank_that_cannot_capture_sends_the_pair_direct_before_any_capture(fake_nccl, failing):
    """A fake: the work stream of rank(s) `failing` cannot capture. The pair decides when its communicator is
    made, before any NCCL call is captured: both ranks go direct (NCCL requires the same on both), the rows
    say which rank could not, and no NCCL call was ever captured on either rank."""
    lib = fake_nccl()
    node = FakeNode(gpu_kw=[dict(capture_fails=r in failing) for r in range(2)])
    rows, _ = node.run(lambda ctx: suite.measure(ctx, "push", 0, 1, [4096, 16384]))
    for r in rows:
        assert r.verified and "no CUDA graph (rank " in r.note and "cannot capture a CUDA graph" in r.note
    assert all(ctx.state["nccl_pairs"][(0, 1)].graphs is False for ctx in node.ctxs)
    assert lib.captured == 0 and lib.pending() == []


def test_both_ranks_capture_when_both_can(fake_nccl):
    lib = fake_nccl()
    node = FakeNode()
    rows, _ = node.run(lambda ctx: suite.measure(ctx, "push", 0, 1, [4096]))
    assert "captured in CUDA graphs" in rows[0].note
    assert all(ctx.state["nccl_pairs"][(0, 1)].graphs is True for ctx in node.ctxs) and lib.captured > 0


def test_graphs_can_be_turned_off_for_every_pair(fake_nccl, monkeypatch):
    lib = fake_nccl()
    monkeypatch.setenv(ncclmod.GRAPHS_ENV, "0")
    (row,), _ = FakeNode().run(lambda ctx: suite.measure(ctx, "push", 0, 1, [4096]))
    assert row.verified and f"{ncclmod.GRAPHS_ENV}=0" in row.note and lib.captured == 0


@pytest.mark.parametrize("failing", [{0}, {1}])
def test_a_capture_that_fails_after_the_agreement_ends_both_ranks(fake_nccl, failing):
    """Both ranks agreed to capture, then capturing the NCCL calls failed on one: there is no safe way on
    (a captured, never launched send or receive leaves the communicator undefined), so both ranks stop with
    the reason instead of one going direct while the other captured."""
    fake_nccl(capture_fails_for=failing)
    with pytest.raises(MeasureError, match="after both ranks of the pair had agreed to capture.*fake capture failure"):
        FakeNode().run(lambda ctx: suite.measure(ctx, "push", 0, 1, [4096]))


def test_direct_batches_keep_the_queue_budget():
    class T:
        calls = []

        def enqueue(self, gpu, stream, src, dst, nbytes, count):
            self.calls.append(count)

    b = StreamBatch(FakeNode().gpus[0], T(), 1, 2, 64, 1000, nodes=ncclmod.NODES_PER_CALL, warm=False)
    assert b.k * ncclmod.NODES_PER_CALL <= MAX_QUEUED and b.count >= 1000
    b.with_count(5000).enqueue(2)
    assert T.calls == [b.k, b.k] and b.segments() == [1] * b.n_segments


def test_direct_nccl_batches_serve_every_count_the_segment_size_key_allows(fake_nccl):
    """A direct batch counts more operations per call than a graph (uncaptured launches add event
    operations), so its k is smaller; batch_maker keys batches by the graph's k, and every count that key
    lets a batch serve must still fit that batch."""
    fake_nccl(version=2708)  # no capture: every batch is direct

    def body(ctx):
        me = ctx.world.local_rank
        t = ncclmod.pair_for(ctx, me, 1 - me).transfer()
        bufs = ctx.buffers["legacy"]
        ends = (bufs.src, None) if me == 0 else (None, bufs.inbox_slot(0))
        b = t.batch(ctx.gpu, *ends, 64, 300)
        assert isinstance(b, StreamBatch) and not isinstance(b, GraphBatch)
        assert b.k * b.nodes <= MAX_QUEUED and b.nodes == 2 * t.nodes
        for count in (256, 257, 1000, 100_000):
            assert b.with_count(count).k == b.k
        ncclmod.close_pairs(ctx)

    FakeNode().run(body)


def test_an_nccl_without_graph_capture_goes_direct_from_the_start(fake_nccl):
    lib = fake_nccl(version=2708)  # 2.7.8: P2P, no capture (and none is tried)
    node = FakeNode()
    (row,), _ = node.run(lambda ctx: suite.measure(ctx, "push", 0, 1, [4096]))
    assert row.verified and "NCCL 2.7.8 cannot capture P2P calls" in row.note and "NCCL 2.7.8," in row.note
    assert lib.pending() == [] and lib.captured == 0


# ---- ping-pong -------------------------------------------------------------------------------------------

def test_pingpong_is_half_the_initiators_round_trip_and_both_check(fake_nccl):
    """A fake: every call costs 1 us on rank 0 and 3 us on rank 1; rank 0's round trip is its send and its
    receive on its own stream (2 us): one way = 1 us. Both ranks verify the initiator's pattern."""
    lib = fake_nccl()
    node = slow_and_fast()
    (row,), rows1 = node.run(lambda ctx: suite.pingpong(ctx, 0, 1, [4]))
    assert rows1 == []
    assert (row.method, row.direction, row.kind, row.bytes, row.bw_gbps_median) == (
        "nccl_pingpong", "oneway", "latency", 4, None)
    assert row.time_us_median == pytest.approx(1.0)
    assert row.verified and row.checks == 2 * row.samples
    seeds = {seed for _, _, seed, _ in node.gpus[0].verifies} | {seed for _, _, seed, _ in node.gpus[1].verifies}
    assert seeds <= {seed for _, _, seed in node.gpus[0].fills}  # both checked rank 0's own pattern
    assert "ncclRecv then ncclSend of what arrived" in row.note and lib.pending() == []


def test_a_pingpong_whose_echo_is_wrong_fails(fake_nccl):
    fake_nccl()
    node = FakeNode(corrupt="nccl_pingpong")
    (row,), _ = node.run(lambda ctx: suite.pingpong(ctx, 0, 1, [4]))
    assert not row.verified


# ---- communicators -----------------------------------------------------------------------------------

def test_same_gpu_pairs_have_no_rows_and_say_why_once(fake_nccl, capsys):
    lib = fake_nccl()
    node = FakeNode(n=2, gpu_of=[0, 0])

    def body(ctx):
        return (suite.measure(ctx, "push", 0, 1, [4096]) + suite.measure(ctx, "push", 1, 0, [4096])
                + suite.measure(ctx, "bidir", 0, 1, [4096]) + suite.pingpong(ctx, 0, 1, [4]))

    assert node.run(body) == [[], []]
    assert lib.comms == []
    err = capsys.readouterr().err
    assert err.count("ipcbench: nccl: no rows for ranks sharing a GPU") == 1
    assert "NCCL refuses two ranks of one GPU in one communicator" in err


def test_one_communicator_per_pair_destroyed_in_one_order(fake_nccl):
    """Three fake ranks measure every pair: three communicators, each made once by its two ranks and
    destroyed by both at the end."""
    lib = fake_nccl()
    node = FakeNode(n=3)

    def body(ctx):
        me = ctx.world.local_rank
        for src, dst in ((0, 1), (1, 0), (0, 2), (1, 2), (2, 1)):
            if me in (src, dst):
                suite.measure(ctx, "push", src, dst, [4096])
            ctx.world.node_barrier("the next pair")
        pairs = sorted(ctx.state["nccl_pairs"])
        ncclmod.close_pairs(ctx)
        return pairs, "nccl_pairs" in ctx.state

    got = node.run(body)
    assert got == [([(0, 1), (0, 2)], False), ([(0, 1), (1, 2)], False), ([(0, 2), (1, 2)], False)]
    assert len(lib.comms) == 6 and all(c.destroyed for c in lib.comms)


def test_a_refused_communicator_is_a_clear_error(fake_nccl):
    fake_nccl(duplicate_gpu=True)
    node = FakeNode()
    with pytest.raises(MeasureError, match=r"ncclCommInitRank for node-local ranks 0 and 1 \(GPUs 0, 1\) "
                                           r"failed on rank \d: invalid usage: Duplicate GPU"):
        node.run(lambda ctx: suite.measure(ctx, "push", 0, 1, [4096]))


def test_the_pair_is_made_with_every_allowed_cpu_and_the_binding_comes_back():
    """NCCL's threads inherit the CPUs of the thread that makes the communicator: a rank bound to one core
    (Open MPI's default for two ranks) widens to every CPU its process may use for init and the first
    send/receive, then it and the threads that started meanwhile go back to its binding; a refusal or an
    unbound rank changes nothing."""
    calls = []
    mask = {3}
    tids = {100, 101}  # this rank's threads; NCCL starts 102 and 103 inside

    def get(pid):
        return set(mask)

    def put(pid, cpus):
        calls.append((pid, set(cpus)))
        if pid == 103:
            raise ProcessLookupError(3, "No such process")  # a thread that ended meanwhile
        if pid == 0:
            mask.clear()
            mask.update(c for c in cpus if c < 6)  # the kernel keeps the cgroup's CPUs 0-5

    def threads():
        return set(tids)

    with ncclmod.wider_cpus(get, put, lambda: 8, threads) as got:
        assert got == (1, 6) and mask == set(range(6))
        tids.update({102, 103})
    assert mask == {3} and calls == [(0, set(range(8))), (0, {3}), (102, {3}), (103, {3})]

    mask.clear(), mask.update(range(6)), calls.clear()
    with ncclmod.wider_cpus(get, put, lambda: 8, threads) as got:
        assert got == (6, 6)
        tids.add(104)
    assert calls == [(0, set(range(8)))] and mask == set(range(6))  # unbound already: nothing to restore

    def refuse(pid, cpus):
        raise OSError(22, "Invalid argument")

    mask.clear(), mask.update({3})
    with ncclmod.wider_cpus(get, refuse, lambda: 8, threads) as got:
        assert got == (1, 1)
    assert mask == {3}

    calls.clear()  # an init that fails: the binding comes back all the same
    with pytest.raises(RuntimeError), ncclmod.wider_cpus(get, put, lambda: 8, threads):
        assert mask == set(range(6))
        raise RuntimeError("ncclCommInitRank failed")
    assert mask == {3} and calls[1] == (0, {3})

    mask.clear(), mask.update({9}), calls.clear()  # a CPU past cpu_count (ids with gaps): never left out
    with ncclmod.wider_cpus(get, put, lambda: 8, threads):
        pass
    assert calls[0] == (0, set(range(8)) | {9})
    assert {os.getpid()} <= ncclmod._thread_ids() or not ncclmod._thread_ids()  # the main thread's tid is the pid


def test_init_and_first_send_receive_run_inside_the_wider_cpus_and_the_note_says_so(fake_nccl, monkeypatch):
    import contextlib
    import threading

    lib = fake_nccl()
    widened = threading.local()  # the fake ranks are threads
    entered, made = [], lib.NcclCommunicator

    @contextlib.contextmanager
    def wider():
        widened.now = True
        entered.append(1)
        yield (1, 32)
        widened.now = False

    def communicator(*a):
        assert getattr(widened, "now", False)  # init happens while widened
        return made(*a)

    monkeypatch.setattr(ncclmod, "wider_cpus", wider)
    monkeypatch.setattr(lib, "NcclCommunicator", communicator)
    rows = [r for part in FakeNode().run(lambda ctx: suite.measure(ctx, "push", 0, 1, [4096])) for r in part]
    assert len(entered) == 2  # once per rank
    assert "set up on 32 CPUs, then NCCL's threads back on this rank's 1" in rows[0].note


# ---- support, plan, the run ------------------------------------------------------------------------------

def test_support_says_how_to_install_when_nccl_is_absent(monkeypatch):
    def absent():
        raise ncclmod.NcclUnavailable("NCCL is not installed: cupy.cuda.nccl cannot load libnccl.so.2")

    monkeypatch.setattr(ncclmod, "load", absent)
    ok, why = ncclmod.nccl_support(0)
    assert not ok and why.startswith("NCCL is not installed") and "pip install -e '.[nccl]'" in why
    monkeypatch.setattr(ncclmod, "load", lambda: FakeNccl(version=2605))
    assert ncclmod.nccl_support(0) == (False, "NCCL 2.6.5 has no ncclSend/ncclRecv (2.7 or later is needed)")
    monkeypatch.setattr(ncclmod, "load", lambda: FakeNccl())
    assert ncclmod.nccl_support(0) == (True, None)
    assert ncclmod.version_text(22809) == "2.28.9" and ncclmod.version_text(2708) == "2.7.8"


def test_support_on_this_machine_is_an_answer_not_an_error():
    """The real check: (True, None) where cupy finds libnccl, else a reason that says how to install it."""
    ok, why = ncclmod.nccl_support()
    assert ok or ("pip install -e '.[nccl]'" in why or "NCCL" in why)


def test_the_suite_plans_four_steps_after_staged():
    assert ORDER.index("nccl") == ORDER.index("staged") + 1
    steps = plan(["nccl"], 3, [4096, 1 << 20])
    assert [s.label for s in steps] == ["nccl push", "nccl bidir", "nccl one-way", "nccl pingpong"]
    assert all(s.needs == ("legacy", "nccl") for s in steps)
    assert [s.rounds_ok for s in steps] == [True, True, True, False]
    assert [len(s.pairs) for s in steps] == [6, 3, 6, 3] and steps[3].sizes == [4]
    assert "nccl" in sharers.LIBRARIES and "nccl" not in sharers.BUFFER_KINDS


def rows_of(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_a_run_without_nccl_skips_its_steps_with_the_reason(fake_job, tmp_path, monkeypatch, capsys):  # noqa: F811
    def absent():
        raise ncclmod.NcclUnavailable("NCCL is not installed: cupy.cuda.nccl cannot load libnccl.so.2")

    monkeypatch.setattr(ncclmod, "load", absent)
    out = tmp_path / "run"
    statuses, _ = fake_job(cfg(out, suites=("nccl",), argv=("nccl",)))
    assert statuses == [0, 0]
    text = capsys.readouterr().out
    for label in ("nccl push", "nccl bidir", "nccl one-way", "nccl pingpong"):
        assert (f"skipping {label}: NCCL is not installed: cupy.cuda.nccl cannot load libnccl.so.2; "
                f"pip install -e '.[nccl]'") in text
    assert rows_of(out / "results.csv") == []


def test_a_run_with_nccl_writes_every_row_verified(fake_job, tmp_path, monkeypatch):  # noqa: F811
    """The runner on fakes with FakeNccl: the library need is met, every step writes verified rows, and the
    communicators are destroyed before the run ends."""
    lib = FakeNccl()
    monkeypatch.setattr(ncclmod, "load", lambda: lib)
    out = tmp_path / "run"
    statuses, node = fake_job(cfg(out, suites=("nccl",), argv=("nccl",), quiet=True))
    assert statuses == [0, 0]
    rows = rows_of(out / "results.csv")
    got = {(r["method"], r["direction"]) for r in rows}
    assert got == {("nccl", "push"), ("nccl", "bidir"), ("nccl", "oneway"), ("nccl_pingpong", "oneway")}
    assert all(r["verified"] == "true" for r in rows)
    assert json.loads((out / "meta.json").read_text())["failed_rows"] == 0
    assert len(lib.comms) == 2 and all(c.destroyed for c in lib.comms) and lib.pending() == []
    assert node.memory.live() == set()


def test_walk_skips_on_any_missing_need():
    from ipcbench.core.context import Ctx

    ctx = Ctx(world=None, gpu=None, buffers={"legacy": object()}, rule=None, verify=True, run_id="x", gpu_of=[],
              node_ranks=[])
    assert ctx.has("legacy") and not ctx.has("nccl")
    ctx.libraries.add("nccl")
    assert ctx.has("nccl") and not ctx.has("pool")


def test_fake_ranks_agree_on_counts_under_noise(fake_nccl):
    """A fake with per-segment jitter that differs per rank: calibration is lockstep, so the ranks never
    run different counts (a mismatch would leave sends unreceived or hang a receive)."""
    import random

    lib = fake_nccl()
    rngs = [random.Random(1), random.Random(2)]
    node = FakeNode(gpu_kw=[dict(transfer_ns=const(20 * US), jitter=lambda r=r: r.uniform(0.5, 2.0)) for r in rngs])
    run = node.run(lambda ctx: suite.measure(ctx, "bidir", 0, 1, [1024, 4096]))
    assert len(run[0]) == 2 and all(r.verified for r in run[0]) and lib.pending() == []
    assert any(r.samples > node.rule.min_samples for r in run[0])  # the noise kept them sampling


def test_one_way_does_not_calibrate_from_the_push_steps_hint(fake_nccl, monkeypatch):
    """The push and one-way steps share the calibration key; the one-way step must not start from the
    push step's largest size scaled down to 4 B (a probe of max_count / 4 transfers)."""
    import ipcbench.core.sampler as sampler

    fake_nccl()
    hints = []
    real = sampler.calibrate

    def spy(rule, timed, hint_ms=None):
        hints.append(hint_ms)
        return real(rule, timed, hint_ms)

    monkeypatch.setattr(sampler, "calibrate", spy)
    node = FakeNode()
    node.run(lambda ctx: (suite.measure(ctx, "push", 0, 1, [65536]),
                          suite.measure(ctx, "push", 0, 1, [4], latency=True)))
    assert len(hints) == 4 and all(h is None for h in hints)  # 2 ranks x (push, one-way), no hint either time


def test_a_run_releases_the_communicators_before_the_buffers_their_calls_touched(fake_job, tmp_path,  # noqa: F811
                                                                                 monkeypatch):
    """The context's releases (Ctx.add_cleanup) run last added first: every rank destroys its communicators
    (added at the pair's first measurement) before the shared buffers (added at setup) go."""
    import threading

    from fakes import FakeNcclComm
    from ipcbench.ipc.buffers import BufferSet

    lib = FakeNccl()
    monkeypatch.setattr(ncclmod, "load", lambda: lib)
    order: dict[int, list[str]] = {}

    def spy(what, real):
        def call(self, *a):
            order.setdefault(threading.get_ident(), []).append(what)
            return real(self, *a)
        return call

    monkeypatch.setattr(FakeNcclComm, "destroy", spy("communicator", FakeNcclComm.destroy))
    monkeypatch.setattr(BufferSet, "destroy", spy("buffers", BufferSet.destroy))
    statuses, node = fake_job(cfg(tmp_path / "run", suites=("nccl",), argv=("nccl",), quiet=True))
    assert statuses == [0, 0] and len(order) == 2
    assert all(seq == ["communicator", "buffers"] for seq in order.values())
    assert all(c.destroyed for c in lib.comms) and node.memory.live() == set()
