"""Sampling a row over contexts (core/lanes.py, core/pair.py) on fakes (tests/fakes.py): which rows spread, how a
sample's transfers are split and timed lane by lane, and what the row states (each context's value, their mean, the
standard error between them). A fake lane is a stream whose transfers cost a set factor more: these test the
bookkeeping, never what a context does on a GPU (tests/test_gpu_lanes.py does, on one)."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from fakes import FakeNode
from ipcbench.catalogue.noise import combined
from ipcbench.core import lanes
from ipcbench.core.methods import METHODS
from ipcbench.core.pair import measure_pair
from ipcbench.core.rows import state_noise
from ipcbench.core.sampler import SamplingRule

US = 1000.0  # ns


def rule(k: int) -> SamplingRule:
    return SamplingRule(min_time_s=0.001, contexts=k)


def pair(node: FakeNode, method: str, direction: str, sizes, src: int = 0, dst: int = 1):
    return node.run(lambda ctx: measure_pair(ctx, "copy", METHODS[method], direction, src, dst, sizes)
                    if ctx.world.local_rank in (src, dst) else [])


def levels(i: int) -> float:
    """Contexts at two levels, as an H200's 4 KiB copies take (1.58-1.63 or 1.75-1.81 µs): even lanes 1.0, odd 1.1."""
    return 1.0 + 0.1 * (i % 2)


# ---- the pure rules ------------------------------------------------------------------------------------------

def test_a_sample_spreads_over_as_many_lanes_as_hold_five_transfers_each():
    assert lanes.MIN_PER_LANE == 5  # per_transfer's difference spans per - 3 transfers: at least 2
    assert lanes.lanes_for(500, 48) == 48
    assert lanes.lanes_for(100, 48) == 20  # 5 transfers each
    assert lanes.lanes_for(10, 48) == 2
    assert lanes.lanes_for(9, 48) == 1 and lanes.lanes_for(1, 48) == 1  # one lane: the work stream, no spreading
    assert lanes.lanes_for(500, 1) == 1
    assert lanes.per_lane(500, 48) == 11 and lanes.per_lane(48, 48) == 1 and lanes.per_lane(7, 2) == 4


def test_a_lanes_time_per_transfer_leaves_out_the_segments_fixed_cost():
    """One transfer takes 2 µs, a segment starts with 5 µs more: the first transfer's time is 7 µs, the last 20's
    45 µs; their difference over 19 transfers is the 2 µs (the whole segment, 47 + 5 over 22, would say 2.36)."""
    assert lanes.per_transfer(0.007, 0.045, 22) == pytest.approx(0.002)
    # a difference the timer's resolution made 0 or less: the last per - 2 transfers over their count
    assert lanes.per_transfer(0.004, 0.004, 5) == pytest.approx(0.004 / 3)


def test_each_sample_starts_one_lane_further():
    assert lanes.order(0, 4) == [0, 1, 2, 3]
    assert lanes.order(1, 4) == [1, 2, 3, 0]
    assert lanes.order(5, 4) == [1, 2, 3, 0]
    assert [lanes.order(s, 3)[0] for s in range(6)] == [0, 1, 2, 0, 1, 2]


def test_a_context_is_its_median_over_samples_and_the_row_states_two_standard_errors():
    per_sample = [[1.0, 2.0, 3.0], [1.2, 2.0, 2.0], [0.8, 2.2, 3.1]]
    assert lanes.context_values(per_sample) == [1.0, 2.0, 3.0]
    values = [1.0, 1.1, 1.0, 1.1]
    se = statistics.stdev(values) / 2 / statistics.fmean(values)
    assert lanes.standard_error(values) == pytest.approx(se)
    assert lanes.noise_of(values) == pytest.approx(lanes.NOISE_SE * se)
    assert lanes.standard_error([1.0]) is None and lanes.noise_of([]) is None


# ---- a pair's rows -------------------------------------------------------------------------------------------

def test_a_push_spreads_its_samples_over_the_contexts_and_states_their_spread():
    node = FakeNode(rule=rule(8), gpu_kw=[dict(transfer_ns=lambda n: 2 * US, lane_level=levels, restart_ns=4 * US),
                                          dict(transfer_ns=lambda n: 2 * US)])
    rows, _ = pair(node, "ce", "push", [4096])
    r = rows[0]
    assert r.contexts == 8
    per_context = [float(x) for x in r.context_us.split()]
    assert per_context == pytest.approx([2.0, 2.2] * 4)
    assert r.time_us_median == pytest.approx(2.1)  # the mean over the contexts, not the primary's 2.0
    assert r.iterations % 8 == 0 and r.iterations >= 40  # the same transfers in every lane, 5 at least
    assert r.noise_contexts == pytest.approx(lanes.noise_of(per_context))
    assert r.verified and r.checks == r.samples
    # the driver's lanes ran the transfers, every one of them: none on the work stream while sampling
    lane_streams = set(map(id, node.gpus[0].lane_streams))
    assert len(lane_streams) == 8


@pytest.mark.parametrize("spread,between", [(0.1, "floor"), (0.5, "contexts")])
def test_the_rows_noise_is_its_contexts_or_its_kinds_floor_over_contexts_whichever_is_larger(spread, between):
    """Two ranks of one H200: a row over contexts takes its kind's floor over contexts (catalogue/noise.CONTEXT_FLOORS,
    5.5% for a small copy-engine copy), not the one-context floor (12%); contexts that spread wider than that say so."""
    node = FakeNode(gpu_of=[0, 0], rule=rule(8),
                    gpu_kw=[dict(transfer_ns=lambda n: 2 * US, lane_level=lambda i: 1.0 + spread * (i % 2)),
                            dict(transfer_ns=lambda n: 2 * US)])
    rows, _ = pair(node, "ce", "push", [4096])
    r = rows[0]
    r.engine, r.timing = "ce", "gated"
    state_noise([r], "NVIDIA H200")
    assert r.noise_floor == 0.055
    assert (r.noise_contexts > r.noise_floor) == (between == "contexts")
    assert r.noise == pytest.approx(combined(r.noise_within, max(r.noise_contexts, r.noise_floor)))
    one = FakeNode(gpu_of=[0, 0], rule=rule(1), gpu_kw=[dict(transfer_ns=lambda n: 2 * US)] * 2)
    r1 = pair(one, "ce", "push", [4096])[0][0]
    r1.engine, r1.timing = "ce", "gated"
    state_noise([r1], "NVIDIA H200")
    assert r1.noise_floor == 0.12 and r1.noise_contexts is None


def test_a_pull_spreads_on_the_rank_that_drives_it():
    node = FakeNode(rule=rule(4), gpu_kw=[dict(transfer_ns=lambda n: 2 * US),
                                          dict(transfer_ns=lambda n: 2 * US, lane_level=levels)])
    rows, _ = pair(node, "ce", "pull", [4096])
    assert rows[0].contexts == 4
    assert [float(x) for x in rows[0].context_us.split()] == pytest.approx([2.0, 2.2, 2.0, 2.2])


@pytest.mark.parametrize("method,direction", [("ce", "bidir"), ("sm_write", "bidir")])
def test_both_ways_keeps_one_context(method, direction):
    node = FakeNode(rule=rule(8), gpu_kw=[dict(transfer_ns=lambda n: 2 * US, lane_level=levels)] * 2)
    rows, _ = pair(node, method, direction, [4096])
    assert rows[0].contexts == 1 and rows[0].context_us == "" and rows[0].noise_contexts is None
    assert rows[0].time_us_median == pytest.approx(2.0)  # the work stream's, no lane


def test_one_context_asked_for_is_one_context():
    node = FakeNode(rule=rule(1), gpu_kw=[dict(transfer_ns=lambda n: 2 * US, lane_level=levels)] * 2)
    rows, _ = pair(node, "sm_write", "push", [4096])
    assert rows[0].contexts == 1 and node.gpus[0].lane_streams == []


def test_a_sample_of_nine_transfers_keeps_one_context():
    """A transfer so long that a sample holds nine: two lanes would hold fewer than five each (lanes.MIN_PER_LANE)."""
    node = FakeNode(rule=replace(rule(8), min_time_s=0.0002), gpu_kw=[dict(transfer_ns=lambda n: 11.5 * US)] * 2)
    rows, _ = pair(node, "ce", "push", [4096])
    assert rows[0].iterations == 9 and rows[0].contexts == 1


def test_a_lane_times_its_own_transfers_only():
    """time_lanes: each lane's events hold its transfers, whatever ran before it on the other lanes, and a transfer
    that restarts its stream after an event (restart_ns) leaves the estimate alone."""
    from fakes import FakeEvent, FakeGpu, HostMemory
    from ipcbench.core.methods import METHODS as M

    mem = HostMemory()
    gpu = FakeGpu(mem, transfer_ns=lambda n: 1 * US, lane_level=lambda i: 1.0 + i, restart_ns=3 * US)
    src, dst = mem.alloc(4096), mem.alloc(4096)
    batch = M["ce"].batch(gpu, src, dst, 4096, 6)
    streams = gpu.lanes(3)
    events = [tuple(FakeEvent() for _ in range(4)) for _ in streams]
    lanes.warm(gpu, batch, streams)
    for sample in range(3):
        us = lanes.time_lanes(gpu, batch, streams, events, 6, sample)
        assert us == pytest.approx([1.0, 2.0, 3.0])  # 1, 2 and 3 µs a transfer, whatever the order


def test_a_rank_that_makes_no_context_leaves_the_node_at_one_and_says_why(capsys):
    """run/runner._make_lanes: the node agrees on the fewest contexts any rank made (the two ranks of a pair spread
    alike); a driver without green contexts on one rank gives every rank one context, said once."""
    from types import SimpleNamespace

    from fakes import FakeGpu, HostMemory, run_ranks
    from ipcbench.run.runner import _make_lanes

    mem = HostMemory()
    gpus = [FakeGpu(mem), FakeGpu(mem, lanes_why="cuGreenCtxCreate: CUDA_ERROR_NOT_SUPPORTED")]

    def body(w):
        ctx = SimpleNamespace(lanes=[], lane_events=[])
        _make_lanes(ctx, w, gpus[w.local_rank], 16)
        return len(ctx.lanes), len(ctx.lane_events)

    assert run_ranks(body, n=2) == [(0, 0), (0, 0)]
    out = capsys.readouterr().out
    assert out.count("every row samples one CUDA context") == 1 and "--contexts 16" in out
    both = [FakeGpu(mem), FakeGpu(mem)]

    def fine(w):
        ctx = SimpleNamespace(lanes=[], lane_events=[])
        _make_lanes(ctx, w, both[w.local_rank], 16)
        return len(ctx.lanes), {len(e) for e in ctx.lane_events}

    assert run_ranks(fine, n=2) == [(16, {4}), (16, {4})]


def test_two_standard_errors_and_the_rules_numbers():
    """The rules' numbers, each measured (docs/measurement.md, "Sampling over contexts"): a change here is a change
    of what a run states."""
    from ipcbench.config import DEFAULT_CONTEXTS

    assert lanes.NOISE_SE == 2.0 and lanes.noise_of([1.0, 1.2]) == pytest.approx(2 * (0.2 ** 2 / 2) ** 0.5 / 2 ** 0.5
                                                                                 / 1.1)
    assert lanes.PENDING == 2 and lanes.SAMPLED_BELOW == 64 << 20 and DEFAULT_CONTEXTS == 16


def sweeps(node: FakeNode, method: str, direction: str, **kw):
    from ipcbench.core.pair import PairSweep

    return node.run(lambda ctx: PairSweep(ctx, "copy", METHODS[method], direction, 0, 1, **kw))


@pytest.mark.parametrize("method,direction,nbytes,kw,spreads", [
    ("ce", "push", 32 << 20, {}, True),
    ("ce", "push", 64 << 20, {}, False),  # the large band: one context (0.4-1% between processes)
    ("sm_write", "pull", 4096, {}, True),
    ("sm_write", "bidir", 4096, {}, False),
    ("ce", "push", 4096, {"contexts": False}, False),  # a flow of a permutation round
    ("sm_bulk_write", "push", 4096, {}, True),
])
def test_which_sizes_spread_over_the_contexts(method, direction, nbytes, kw, spreads):
    node = FakeNode(rule=rule(8))
    for sweep in sweeps(node, method, direction, **kw):
        assert sweep.sampled_over_contexts(nbytes) == spreads


def test_a_bulk_copy_confined_to_n_sms_keeps_one_context_on_both_ranks():
    """--sm-bulk ...@N: the bulk copy runs on a green context of its own (Gpu.bulk_stream), whatever each rank's GPU
    made of it; both ranks answer from the run's options."""
    from ipcbench.core.bulk import BulkShape

    node = FakeNode(rule=rule(8), gpu_kw=[dict(bulk_shape=BulkShape(sms=16)), dict(bulk_shape=BulkShape(sms=16))])
    assert [s.sampled_over_contexts(4096) for s in sweeps(node, "sm_bulk_write", "push")] == [False, False]
    assert [s.sampled_over_contexts(4096) for s in sweeps(node, "sm_write", "push")] == [True, True]


def test_a_permutation_round_keeps_one_context():
    from ipcbench.core.round import measure_round

    node = FakeNode(rule=rule(8), gpu_kw=[dict(transfer_ns=lambda n: 2 * US, lane_level=levels)] * 2)
    rows = node.run(lambda ctx: measure_round(ctx, "copy", METHODS["ce"], "push", [(0, 1), (1, 0)], [4096]))
    assert [r.contexts for rs in rows for r in rs] == [1, 1]


def test_a_row_of_fewer_contexts_than_the_floors_were_fitted_on_takes_the_one_context_floor():
    from ipcbench.catalogue import noise, row_kind

    for k, floor in ((1, 0.12), (7, 0.12), (8, 0.055), (16, 0.055)):
        kind = row_kind.RowKind("ce", "gated", 4096, same_gpu=True, mps=False, contexts=k)
        assert noise.floor_of("NVIDIA H200", kind).fraction == floor
    assert noise.CONTEXT_FLOORS == {"H200": {("ce", "gated"): (0.055, 0.05), ("sm", "gated"): (0.07, 0.035),
                                             ("sm_bulk", "gated"): (0.02, 0.035)}}


def test_the_host_enqueues_a_lane_only_once_the_lane_two_before_it_has_ended():
    """lanes.PENDING: at most two lanes queued on the GPU (8 queued at once read a 4 KiB copy twice as slow). The host
    asks whether lane j - 2's last event is done before it gates lane j, and never before."""
    from fakes import FakeEvent, FakeGpu, HostMemory
    from ipcbench.core.methods import METHODS as M

    mem = HostMemory()
    gpu = FakeGpu(mem, transfer_ns=lambda n: 1 * US)
    log = gpu.log

    class Watched(FakeEvent):
        @property
        def done(self):
            log.append(f"done {self.lane}")
            return True

        @done.setter
        def done(self, value):
            pass

    src, dst = mem.alloc(4096), mem.alloc(4096)
    batch = M["ce"].batch(gpu, src, dst, 4096, 6)
    streams = gpu.lanes(4)
    events = []
    for i in range(4):
        e = tuple(FakeEvent() for _ in range(3)) + (Watched(),)
        e[3].lane = i
        events.append(e)
    lanes.warm(gpu, batch, streams)
    del log[:]
    lanes.time_lanes(gpu, batch, streams, events, 6, 0)
    gates = [i for i, x in enumerate(log) if x == "gate"]
    assert len(gates) == 4
    for j in (2, 3):
        asked = log.index(f"done {j - 2}")
        assert gates[j - 1] < asked < gates[j], log
    assert "done 2" not in log and "done 3" not in log
