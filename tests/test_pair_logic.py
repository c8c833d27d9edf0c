"""core/pair.py on fakes (tests/fakes.py): a fake GPU and a world of threads. These test the pair
protocol's bookkeeping (roles, endpoints, who drives and who verifies, sample-count agreement, which
time a row reports, verification accounting), not a GPU: fake copies are memmoves and fake times are
set by each test."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from fakes import FakeNode, make_buffers, HostMemory
from ipcbench.core.methods import MAX_QUEUED, METHODS, per_segment, plan_segments
from ipcbench.core.pair import endpoints, measure_pair, per_transfer_us, roles_for
from ipcbench.core.rows import failed
from ipcbench.core.sampler import SamplingRule, transfers_for
from ipcbench.errors import MeasureError

US = 1000.0  # ns


def const(ns: float):
    return lambda nbytes: ns


def pair(node: FakeNode, method: str, direction: str, sizes, src: int = 0, dst: int = 1, **kw):
    """Run measure_pair on both ranks of (src, dst); the rows each rank returned."""
    return node.run(lambda ctx: measure_pair(ctx, "copy", METHODS[method], direction, src, dst, sizes, **kw)
                    if ctx.world.local_rank in (src, dst) else [])


# ---- roles and endpoints (pure) ----------------------------------------------------------------

def test_roles_for_each_direction():
    push0, push1 = roles_for("push", 0, 1, 0), roles_for("push", 0, 1, 1)
    assert (push0.driving, push0.receiving, push1.driving, push1.receiving) == (True, False, False, True)
    pull0, pull1 = roles_for("pull", 0, 1, 0), roles_for("pull", 0, 1, 1)
    assert (pull0.driving, pull0.receiving, pull1.driving, pull1.receiving) == (False, False, True, True)
    for me in (0, 1):
        r = roles_for("bidir", 0, 1, me)
        assert r.driving and r.receiving and r.peer == 1 - me
    with pytest.raises(ValueError, match="not in the pair"):
        roles_for("push", 0, 1, 2)
    with pytest.raises(ValueError, match="unknown direction"):
        roles_for("sideways", 0, 1, 0)


def test_endpoints_push_writes_into_the_peer_and_pull_reads_it():
    bufs = make_buffers(HostMemory(), 3, 4096)
    b2 = bufs[2]
    # rank 2 pushes to rank 0: its own source -> rank 0's inbox slot for sender 2
    assert endpoints(b2, "push", 2, 0) == (b2.src, bufs[0].inbox + 2 * 4096)
    # rank 2 pulls from rank 1: rank 1's source -> its own inbox slot for sender 1
    assert endpoints(b2, "pull", 2, 1) == (bufs[1].src, b2.inbox + 1 * 4096)
    with pytest.raises(ValueError):
        endpoints(b2, "diagonal", 2, 1)


def test_per_transfer_time_from_both_reports():
    assert per_transfer_us("push", False, (2.0, None), (None, None), 1000) == pytest.approx(2.0)
    assert per_transfer_us("pull", False, (None, None), (4.0, None), 1000) == pytest.approx(4.0)
    assert per_transfer_us("bidir", False, (2.0, None), (3.0, None), 1000) == pytest.approx(3.0)
    # one clock: earliest start to latest end per segment, summed (ns stamps)
    mine, theirs = [(0, 1_000_000), (0, 1_000_000)], [(500_000, 2_000_000), (0, 500_000)]
    assert per_transfer_us("bidir", True, (None, mine), (None, theirs), 1000) == pytest.approx(3.0)


# ---- one-way ---------------------------------------------------------------------------------------

def test_push_row_reports_the_drivers_time_and_verifies_every_sample():
    """A fake: rank 0 drives at 1 us per transfer, rank 1 would be 3 us; push reports the driver's."""
    node = FakeNode(gpu_kw=[dict(transfer_ns=const(1 * US)), dict(transfer_ns=const(3 * US))])
    rows0, rows1 = pair(node, "ce", "push", [4096, 16384])
    assert rows1 == [] and [r.bytes for r in rows0] == [4096, 16384]
    for r in rows0:
        assert r.time_us_median == pytest.approx(1.0) and r.time_us_min == pytest.approx(1.0)
        assert r.bw_gbps_median == pytest.approx(r.bytes / 1e-6 / 1e9)
        assert r.samples == node.rule.min_samples  # no noise: the rule stops at min_samples
        assert r.verified and r.checks == r.samples and r.note == ""
        assert (r.src_rank, r.dst_rank, r.src_gpu, r.dst_gpu, r.same_gpu) == (0, 1, 0, 1, False)
        # a sample lasts at least min_time (iterations, transfers per sample, were calibrated for it) or is
        # one full gated segment (a sample's cap)
        assert r.iterations * 1e-3 >= node.rule.sample_s(r.bytes) * 1e3 * 0.999 or r.iterations == per_segment()
        assert [float(x) for x in r.samples_us.split()] == pytest.approx([1.0] * r.samples)
    g0, g1 = node.gpus
    assert g0.copies > 0 and g1.copies == 0  # only the driver copies
    assert not g0.verifies and len(g1.verifies) == sum(r.samples for r in rows0)  # only the receiver checks
    assert all(bad == 0 for *_, bad in g1.verifies)
    # the receiver checked against the sender's seeds, and never against a poison seed it wrote itself
    sent = {seed for _, _, seed in g0.fills}
    assert {seed for _, _, seed, _ in g1.verifies} <= sent


def test_pull_row_reports_the_destination_drivers_time():
    """A fake: in pull the destination drives (reads the peer), so the row carries its time (3 us)."""
    node = FakeNode(gpu_kw=[dict(transfer_ns=const(1 * US)), dict(transfer_ns=const(3 * US))])
    rows0, rows1 = pair(node, "ce", "pull", [8192])
    (row,) = rows0
    assert rows1 == [] and row.direction == "pull"
    assert row.time_us_median == pytest.approx(3.0)
    assert node.gpus[0].copies == 0 and node.gpus[1].copies > 0
    assert row.verified and row.checks == row.samples
    # calibration hints are kept by the rank that calibrated: the driver
    assert ("copy/ce/pull", 0, 1) in node.ctxs[1].hints and not node.ctxs[0].hints


def test_a_sample_is_one_gated_segment():
    """A fake: at 1 us per transfer a 2 ms sample would need 2,000 transfers; a sample holds one gated
    segment (MAX_QUEUED stream operations), so it takes 512 and lasts 0.5 ms; the row is still 1 us per
    transfer, and every transfer was enqueued behind the gate after one un-gated warm-up."""
    node = FakeNode(rule=SamplingRule(min_time_s=0.002), gpu_kw=[dict(transfer_ns=const(US)), {}])
    (row,), _ = pair(node, "ce", "push", [256])
    assert row.iterations == MAX_QUEUED == per_segment()
    assert plan_segments(row.iterations) == (MAX_QUEUED, 1)
    assert row.time_us_median == pytest.approx(1.0)
    g0 = node.gpus[0]
    assert g0.log.count("gate") == len(g0.released)  # every gate opened; none waited on a first use


def test_a_transfers_first_use_is_never_behind_a_gate():
    """On a GPU the driver loads a copy's kernels at its first use, and a load behind a held gate waits for
    the gate until it times out; the fake GPU refuses such a first use (FakeStream.submit), so this passes
    only because every batch runs one transfer un-gated first (core/methods.StreamBatch)."""
    for method, size in (("ce", 4096), ("sm_write", 4096), ("sm_write", 65536), ("sm_bulk_write", 65536)):
        node = FakeNode(gpu_kw=[dict(transfer_ns=const(US)), {}])
        (row,), _ = pair(node, method, "push", [size])
        assert row.verified


def test_sm_methods_loop_in_kernel_only_for_large_buffers():
    """A fake with a 4 KiB 'L2': 64 KiB copies loop inside one launch, 4 KiB copies launch once per pass."""
    node = FakeNode(gpu_kw=[dict(transfer_ns=const(US)), {}])
    (small, big), _ = pair(node, "sm_write", "push", [4096, 65536])
    assert small.verified and big.verified
    loops = {nbytes: {k for n, k in node.gpus[0].launches if n == nbytes} for nbytes in (4096, 65536)}
    assert loops[4096] == {1}
    assert max(loops[65536]) > 1
    assert big.time_us_median == pytest.approx(1.0)


def test_calibration_hint_carries_to_the_next_size():
    """A fake with bandwidth-bound transfers: the second size starts from the first size's time."""
    node = FakeNode(gpu_kw=[dict(transfer_ns=lambda n: n / 4.0), {}])  # 4 bytes per ns
    pair(node, "ce", "push", [16384, 65536])
    nbytes, per_ms = node.ctxs[0].hints[("copy/ce/push", 0, 1)]
    assert nbytes == 65536 and per_ms == pytest.approx(65536 / 4.0 / 1e6)


# ---- bidirectional ---------------------------------------------------------------------------------

def test_bidir_counts_checks_from_both_sides_and_reports_the_longer_side():
    """A fake: two GPUs, rank 0 at 1 us and rank 1 at 3 us per transfer, released together."""
    node = FakeNode(gpu_kw=[dict(transfer_ns=const(1 * US)), dict(transfer_ns=const(3 * US))])
    (row,), rows1 = pair(node, "ce", "bidir", [4096])
    assert rows1 == []
    assert row.time_us_median == pytest.approx(3.0)
    assert row.bw_gbps_median == pytest.approx(2 * 4096 / 3e-6 / 1e9)  # both directions' bytes
    assert row.checks == 2 * row.samples and row.verified
    g0, g1 = node.gpus
    assert len(g0.verifies) == len(g1.verifies) == row.samples
    # the count is the larger of the two calibrations (the faster rank 0 wants 3x more transfers)
    rule = replace(node.rule, max_count=per_segment(), min_time_s=node.rule.sample_s(4096))  # a 4 KiB row's length
    want = [transfers_for(rule, node.ctxs[r].hints[("copy/ce/bidir", 0, 1)][1]) for r in (0, 1)]
    assert want[0] > want[1]
    assert row.iterations == want[0]
    assert g0.log.count("gate") == len(g0.released) and g1.log.count("gate") == len(g1.released)


def test_a_bidir_row_needs_both_sides_checks():
    """Rank 1 skips its check (its --no-verify alone): rank 0's own checks all pass, but a bidirectional
    row is verified only when both destinations were checked in every sample."""
    node = FakeNode()

    def run(ctx):
        ctx.verify = ctx.world.local_rank == 0
        return measure_pair(ctx, "copy", METHODS["ce"], "bidir", 0, 1, [4096])

    (row,), _ = node.run(run)
    assert row.checks == row.samples and not row.verified
    assert f"destination checked in {row.samples} of {2 * row.samples} samples" in row.note
    assert failed(row, verify=True)


def test_bidir_peer_mismatches_reach_the_sources_row():
    """A fake: rank 0's transfers do nothing, so rank 1 (not the row's owner) finds only poison; its
    mismatches must appear in rank 0's row and fail it."""
    node = FakeNode(gpu_kw=[dict(drop_copies=True), {}])
    (row,), _ = pair(node, "sm_write", "bidir", [4096])
    assert row.checks == 2 * row.samples
    assert not row.verified and failed(row, True)
    assert f"{row.samples * 4096 // 4} mismatched words" in row.note
    assert all(bad == 0 for *_, bad in node.gpus[0].verifies)
    assert all(bad == 1024 for *_, bad in node.gpus[1].verifies)


def test_both_ranks_take_the_same_number_of_samples_with_different_noise():
    """A fake: each rank's segments get their own random slowdown, so the ranks' local times differ;
    the stopping rule must still end both ranks' sampling at the same sample (else they deadlock)."""
    r0, r1 = random.Random(1), random.Random(2)
    node = FakeNode(rule=SamplingRule(min_time_s=0.0005, max_samples=9, noise=0.001),
                    gpu_kw=[dict(jitter=lambda: r0.uniform(0.5, 1.5)), dict(jitter=lambda: r1.uniform(1.0, 3.0))])
    (row,), _ = pair(node, "ce", "bidir", [4096])
    g0, g1 = node.gpus
    assert len(g0.verifies) == len(g1.verifies) == row.samples
    assert row.samples == 9  # too noisy for 0.1 %: the rule ran to max_samples
    assert row.verified and row.noise > 0.001


def test_same_gpu_bidir_is_one_window_on_the_gpu_clock():
    """A fake: two processes on GPU 0, each 1 us per transfer, rank 1 starting 500 ns after rank 0.
    One window per segment = from rank 0's start to rank 1's end, not the sum or the longer side alone."""
    node = FakeNode(gpu_of=[0, 0], gpu_kw=[dict(transfer_ns=const(US)), dict(transfer_ns=const(US), skew_ns=500)])
    (row,), _ = pair(node, "sm_write", "bidir", [4096])
    n = row.iterations
    k, segments = plan_segments(n)
    assert row.time_us_median == pytest.approx(segments * (500 + k * US) / n / 1e3)
    assert row.same_gpu and "one window on the GPU clock" in row.note
    assert "time-sliced (no MPS)" in row.note  # an SM method on one GPU without MPS


def test_same_gpu_under_mps_has_no_time_slice_note():
    node = FakeNode(gpu_of=[0, 0], mps=True)
    (row,), _ = pair(node, "sm_write", "bidir", [4096])
    assert "one window" in row.note and "time-sliced" not in row.note


# ---- verification ----------------------------------------------------------------------------------

def test_corrupt_hook_fails_the_row():
    """A fake: IPCBENCH_FAULT_CORRUPT=ce makes the receiver overwrite 16 bytes (4 words) before the check."""
    node = FakeNode(corrupt="ce")
    (row,), _ = pair(node, "ce", "push", [4096])
    assert not row.verified and failed(row, True)
    assert f"{4 * row.samples} mismatched words" in row.note
    assert node.gpus[1].corrupted == row.samples and node.gpus[0].corrupted == 0


def test_corrupt_hook_only_hits_its_method():
    node = FakeNode(corrupt="sm_read")
    (row,), _ = pair(node, "ce", "push", [4096])
    assert row.verified and node.gpus[1].corrupted == 0


def test_a_copy_that_does_nothing_leaves_poison_and_fails():
    """A fake: the driver's transfers are dropped; the destination still holds the poison pattern,
    which must differ from the data in every word."""
    node = FakeNode(gpu_kw=[dict(drop_copies=True), {}])
    (row,), _ = pair(node, "ce", "push", [4096])
    assert not row.verified and f"{row.samples * 1024} mismatched words" in row.note


def test_no_verify_skips_checks_and_says_so():
    node = FakeNode(verify=False)
    (row,), _ = pair(node, "ce", "push", [4096])
    assert not row.verified and row.checks == 0 and "not verified (--no-verify)" in row.note
    assert not node.gpus[0].verifies and not node.gpus[1].verifies
    assert not failed(row, False)


def test_gate_timeout_is_a_measure_error():
    node = FakeNode(gpu_kw=[dict(gate_times_out=True), {}])
    with pytest.raises(MeasureError, match="gate kernel timed out"):
        pair(node, "ce", "push", [4096])


def test_labels_of_latency_rows():
    """measure_pair's row labels, as the latency suite uses them: oneway, kind latency, no bandwidth."""
    node = FakeNode()
    (row,), _ = pair(node, "ce", "push", [64], row_direction="oneway", kind="latency", note="push: x")
    assert (row.direction, row.kind, row.bw_gbps_median) == ("oneway", "latency", None)
    assert row.note == "push: x" and row.verified


def test_a_pair_of_non_adjacent_ranks_uses_their_slots():
    """A fake node of three: pair (2, 0) must land in rank 0's inbox slot for sender 2."""
    node = FakeNode(n=3)
    rows = pair(node, "ce", "push", [4096], src=2, dst=0)
    (row,) = rows[2]
    assert rows[0] == [] and rows[1] == [] and row.verified
    assert (row.src_rank, row.dst_rank) == (2, 0)
    b0 = node.buffers["legacy"][0]
    assert {ptr for ptr, *_ in node.gpus[0].verifies} == {b0.inbox_slot(2)}


def test_both_ranks_stop_at_the_stricter_of_their_two_floor_targets(monkeypatch):
    """Each rank computes where sampling may stop from its own GPU's floor (Ctx.enough_noise); two GPUs of one node
    may differ, so the pair agrees on the smaller target before sampling, and both ranks take the same samples."""
    from ipcbench.core.context import Ctx

    monkeypatch.setattr(Ctx, "enough_noise", lambda self, *a: 0.5 if self.world.local_rank == 0 else 0.0)
    r0, r1 = random.Random(3), random.Random(4)
    node = FakeNode(rule=SamplingRule(min_time_s=0.0005, max_samples=9, noise=0.001),
                    gpu_kw=[dict(jitter=lambda: r0.uniform(0.5, 1.5)), dict(jitter=lambda: r1.uniform(1.0, 3.0))])
    (row,), _ = pair(node, "ce", "bidir", [4096])
    g0, g1 = node.gpus
    assert len(g0.verifies) == len(g1.verifies) == row.samples == 9  # rank 1's 0 holds: no stop at rank 0's 50%
    monkeypatch.setattr(Ctx, "enough_noise", lambda self, *a: 0.5)
    node = FakeNode(rule=SamplingRule(min_time_s=0.0005, max_samples=9, noise=0.001),
                    gpu_kw=[dict(jitter=lambda: r0.uniform(0.5, 1.5)), dict(jitter=lambda: r1.uniform(1.0, 3.0))])
    (row,), _ = pair(node, "ce", "bidir", [4096])
    assert row.samples == 5  # both at 50%: the first five samples answer
