"""The pair protocol: one (method, direction, src, dst) measurement over a size sweep, on both ranks.

Per size: the driving rank(s) calibrate (core/sampler.py), then every sample is fill/poison -> pair
barrier -> timed batch behind the gate (core/timing.py) -> the two ranks swap their times (the swap
is the end-of-sample barrier, so both hold the same per-transfer time and take the same number of
samples) -> the receiving rank(s) verify. Same-GPU bidirectional pairs are timed over one window on the
GPU's clock (stamps), since each process's events would time only its own share.

Two-sided methods (NCCL: a send on one rank meets its receive on the other) are driven by both ranks in
every direction: each enqueues its half (`two_sided_endpoints`) through a transfer bound to the pair
(Method.bind), both gates open together (`open_together`), and the pair's time is the longer side. Every
count, calibration runs included, is agreed between the two (`lockstep_timed`), since each send must meet
its receive. docs/architecture.md.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from ipcbench.catalogue import noise
from ipcbench.core import lanes, placement
from ipcbench.core.phases import PHASES
from ipcbench.core.methods import KERNEL_ENGINES, on_sms, per_segment, plan_segments
from ipcbench.core.rows import join_note, make_row
from ipcbench.core.sampler import take_samples
from ipcbench.core.stats import poison_seed, seed_for
from ipcbench.core.timing import one_window_ms, time_batch
from ipcbench.results import Row

END_TAG = 10  # the end-of-sample exchange
SYNC_TAG = 12  # release of both ranks' gates together (bidirectional, two-sided)
CAL_TAG = 15  # a two-sided calibration run's count and time


@dataclass(frozen=True)
class PairRoles:
    """Who does what in one (direction, src, dst) measurement, from this rank's point of view."""

    me: int
    peer: int
    sources: tuple[int, ...]  # ranks whose `src` buffer is read (their data lands in the other's inbox)
    drivers: tuple[int, ...]  # ranks that enqueue transfers

    @property
    def receiving(self) -> bool:
        """Whether data lands in this rank's inbox (so this rank poisons and verifies it)."""
        return self.peer in self.sources

    @property
    def driving(self) -> bool:
        return self.me in self.drivers


def roles_for(direction: str, src: int, dst: int, me: int, two_sided: bool = False) -> PairRoles:
    """Roles in one (direction, src, dst) measurement. A two-sided transfer has both ranks drive: push is
    src sending and dst receiving; it has no pull (a receive is what the destination does anyway)."""
    if me not in (src, dst):
        raise ValueError(f"rank {me} is not in the pair ({src}, {dst})")
    peer = dst if me == src else src
    if two_sided:
        if direction not in ("push", "bidir"):
            raise ValueError(f"a two-sided transfer has no direction {direction!r} (only push and bidir)")
        return PairRoles(me, peer, (src,) if direction == "push" else (src, dst), (src, dst))
    if direction == "push":
        return PairRoles(me, peer, (src,), (src,))
    if direction == "pull":
        return PairRoles(me, peer, (src,), (dst,))
    if direction == "bidir":
        return PairRoles(me, peer, (src, dst), (src, dst))
    raise ValueError(f"unknown direction {direction!r}")


def endpoints(bufs, style: str, me: int, peer: int) -> tuple[int, int]:
    """(src, dst) pointers of the transfer that `me` drives: push writes into the peer, pull reads it."""
    if style == "push":
        return bufs.src, bufs.peer_inbox_slot(peer, me)
    if style == "pull":
        return bufs.peer_src[peer], bufs.inbox_slot(peer)
    raise ValueError(f"unknown style {style!r}")


def two_sided_endpoints(bufs, r: PairRoles) -> tuple[int | None, int | None]:
    """(send from, receive into) of this rank's half of a two-sided transfer: its source buffer if it sends,
    its own inbox slot for the peer if it receives; None for a half it does not do."""
    return (bufs.src if r.me in r.sources else None, bufs.inbox_slot(r.peer) if r.receiving else None)


def batch_maker(gpu, transfer, src, dst, nbytes: int):
    """make(count) -> a batch of `count` transfers: one batch (and one warm-up) per size, whatever counts
    calibration tries (a new batch only when plan_segments' segment size k changes)."""
    built: dict[int, Any] = {}

    def make(count: int):
        k, _ = plan_segments(count, transfer.nodes)
        if k not in built:
            built.clear()
            built[k] = transfer.batch(gpu, src, dst, nbytes, count)
        return built[k].with_count(count)

    return make


def open_together(w, peer: int):
    """The release of a two-sided batch: a busy-polled exchange (World.tight_exchange), so both gates open
    within MPI latency. A send waits for its receive, so any gap between the two releases is timed on one
    side, and the pair's time is the longer side: a sleeping pair barrier (up to 50 us late) would add
    that much to every segment."""
    return lambda: w.tight_exchange(0, peer, f"node-local rank {peer} to open its gate with this rank's")


def lockstep_timed(ctx, peer: int, make, sync):
    """timed(count) for calibrating a two-sided transfer: both ranks run the larger of their two counts,
    released together, and both see the longer side's time, so both calibrations take the same path and
    every send meets its receive."""
    w = ctx.world

    def timed(count: int):
        b = make(max(count, w.exchange(count, peer, tag=CAL_TAG)))
        ms = time_batch(ctx.gpu, b, sync)
        return max(ms, w.exchange(ms, peer, tag=CAL_TAG)), b.count

    return timed


# An SM copy that loops inside one launch (core/methods.SmEngine, BulkEngine) is one launch per sample, and
# the launch's start and tail cost a fixed ~25 us (SM_LOOP_FIXED_S): at 5 ms samples that read 0.4-0.5% under a
# run of 50 ms samples on an H200 pair (sm_read 374.0-374.4 vs 375.9 GB/s; 20 ms: 375.3-375.4). Under a rule that
# asks for the median to +-0.5% (the default) those samples last at least SM_LOOP_MIN_SAMPLE_S, where the fixed
# cost is an eighth of a percent, a quarter of the target; a looser rule keeps that proportion (loop_sample_s):
# --quick's 2% takes 5 ms samples, whose fixed cost (0.5%) is a quarter of its target too.
SM_LOOP_FIXED_S = 25e-6
SM_LOOP_MIN_SAMPLE_S = 0.020


def loop_sample_s(rule) -> float:
    """How long a sample of an SM copy that loops in one launch lasts at least under `rule`: SM_LOOP_MIN_SAMPLE_S,
    or, for a rule looser than +-0.5%, long enough that the launch's fixed cost is a quarter of the rule's target
    (never shorter than --min-time). A rule of fixed samples (no target) takes SM_LOOP_MIN_SAMPLE_S at least."""
    if rule.noise <= 0:
        return max(rule.min_time_s, SM_LOOP_MIN_SAMPLE_S)
    return max(rule.min_time_s, min(SM_LOOP_MIN_SAMPLE_S, SM_LOOP_FIXED_S * 4 / rule.noise))
# A two-sided sample (NCCL: both gates released by an exchange) pays the two releases' skew once, which a short
# sample spreads over few transfers: with 1 ms samples NCCL's 1 KiB one-way latency calibrated to 8-41 transfers
# a sample and read 5.19-6.18 us on two H100s, where 3 ms samples (71-256 transfers) read 5.13-5.36 over ten runs.
# Its samples keep the length they had before rows under 64 MiB were shortened.
TWO_SIDED_MIN_SAMPLE_S = 0.003


def sample_seconds(rule, nbytes: int, engine: str, two_sided: bool, loop_bytes: float) -> float:
    """How long one sample of a row of `nbytes` lasts at least: loop_sample_s for an SM copy that loops in one launch
    (a kernel engine from `loop_bytes` up: gpu.loop_in_kernel_bytes), --min-time and TWO_SIDED_MIN_SAMPLE_S at least
    for a two-sided transfer (never shortened), else the rule's length for its size (SamplingRule.sample_s: shorter
    under 64 MiB). The one rule of the run (sample_factor) and of the dry run's cost model (run/costmodel.py)."""
    if engine in KERNEL_ENGINES and nbytes >= loop_bytes:
        return loop_sample_s(rule)
    return max(rule.min_time_s, TWO_SIDED_MIN_SAMPLE_S) if two_sided else rule.sample_s(nbytes)


def sample_factor(method, nbytes: int, gpu, rule) -> float:
    """How many times --min-time one sample of this measurement lasts (sample_seconds)."""
    return sample_seconds(rule, nbytes, method.engine, method.two_sided, gpu.loop_in_kernel_bytes) / rule.min_time_s


def per_transfer_us(direction: str, one_clock: bool, mine, theirs, n: int) -> float:
    """The pair's time per transfer (µs) of one sample from both ranks' reports (ms, stamps).

    One way: the driver's time, or the longer side where both drove (a two-sided send and receive,
    released together). Bidirectional on two GPUs: the longer side (both were released together).
    Bidirectional on one GPU: earliest start to latest end on the GPU's clock.
    """
    if direction != "bidir":
        return max(t for t in (mine[0], theirs[0]) if t is not None) * 1e3 / n
    if one_clock:
        return one_window_ms(mine[1], theirs[1]) * 1e3 / n
    return max(mine[0], theirs[0]) * 1e3 / n


def measurement_label(suite: str, method: str, direction: str) -> str:
    """The label of one pair's sweep of a method in one direction: it keys the calibration hints
    (Ctx.calibrate, with the pair) and seeds the data patterns (stats.seed_for)."""
    return f"{suite}/{method}/{direction}"


def measure_pair(ctx, suite: str, method, direction: str, src: int, dst: int, sizes: list[int],
                 row_direction: str | None = None, kind: str = "", note: str = "") -> list[Row]:
    """Run one pair's size sweep. Collective over the pair: both ranks of the pair call this; `src` returns the
    rows. Per size, in this order on both ranks: the driver(s) calibrate, both agree on the transfers per
    sample, sample (PairSweep.sampler), swap what they checked; then src writes the row.

    `row_direction`/`kind`/`note` label the rows (the latency suite reports one-way times as `oneway`).
    """
    w = ctx.world
    sweep = PairSweep(ctx, suite, method, direction, src, dst)
    peer = sweep.roles.peer
    rows = []
    for nbytes in sizes:
        with PHASES.phase("calibrate"):
            batch = sweep.calibrated_batch(nbytes)
            n = batch.count if batch else 0
            sweep.warm_lanes(nbytes, batch)
            mine = (n, sweep.enough_noise(nbytes, len(ctx.lanes)), sweep.enough_noise(nbytes, 1))
            theirs = w.exchange(mine, peer)
            n = sweep.spread(nbytes, max(mine[0], theirs[0]))  # both ranks sample alike: per lane x lanes (1 lane: n)
            at = 1 if sweep.lanes >= noise.CONTEXT_FLOORS_FROM else 2  # the floor the row will state (rows.state_noise)
            enough = min(mine[at], theirs[at])
        with PHASES.phase("sample"):
            got = take_samples(ctx.rule, n, sweep.sampler(nbytes, batch, n), enough)
        facts = batch.facts if batch else {}  # what the driver's warm-up learnt (core/methods.Method.warm)
        their_checks, their_bad, their_facts = w.exchange((got.checks, got.mismatches, facts), peer)
        if w.local_rank != src:
            continue
        rows.append(sweep.row(nbytes, got, n, batch, (their_checks, their_bad), facts or their_facts,
                              row_direction, kind, note))
    return rows


class PairSweep:
    """One pair's sweep of a method in one direction as this rank sees it: its roles, the transfer it
    enqueues (bound to the pair: collective over the pair for a two-sided method, Method.bind), how both
    gates open, the measurement's label; `calibrated_batch`, `sampler` and `row` are the steps of one size."""

    def __init__(self, ctx, suite: str, method, direction: str, src: int, dst: int, contexts: bool = True):
        w, gpu = ctx.world, ctx.gpu
        self.contexts = contexts  # its samples may spread over the run's contexts (a permutation round's: no)
        self.ctx, self.method, self.direction, self.src, self.dst = ctx, method, direction, src, dst
        self.me = me = w.local_rank
        self.two_sided = method.two_sided
        self.roles = r = roles_for(direction, src, dst, me, self.two_sided)
        self.both = len(r.drivers) == 2  # both ranks enqueue: their gates open together, their counts agree
        self.bufs = ctx.buffers[method.buffers]
        self.style = method.style if direction == "bidir" else direction
        self.label = measurement_label(suite, method.name, direction)
        self.suite = suite
        self.one_clock = direction == "bidir" and ctx.same_gpu(src, dst)
        self.peer_world = ctx.world_rank(r.peer)
        self.transfer = method.bind(ctx, me, r.peer) if r.driving else None
        self.sync = None
        if self.two_sided:
            self.sync = open_together(w, r.peer)
        elif self.both:
            self.sync = lambda: w.pair_barrier(r.peer, tag=SYNC_TAG)
        self.engine_note = method.describe(gpu) if me == src else ""  # how the kernel ran, for src's rows
        self.clocks: list[float | None] = []  # the SM clock (MHz) of each sample of the size being sampled
        self.lanes = 1  # contexts the size being sampled spreads each sample over (spread)
        self.lane_us: list[list[float]] = []  # per sample, each lane's µs per transfer (lane 0 first)

    def sampled_over_contexts(self, nbytes: int) -> bool:
        """Whether this size's samples may spread over the run's contexts (core/lanes.py): a one-way transfer one rank
        drives on the work stream (not a two-sided one, whose halves meet; not both ways, whose two ranks' lanes
        would not line up; not a flow of a permutation round, timed beside the others; not a bulk copy --sm-bulk
        confines to N SMs, whose stream is its own), under 64 MiB, with the run's lanes there (the node agreed on
        their number). The same answer on both ranks of the pair: it depends on the run's options and the sweep
        alone (Method.stream_is_work reads the options, never the rank's GPU)."""
        return (self.contexts and len(self.ctx.lanes) > 1 and nbytes < lanes.SAMPLED_BELOW
                and len(self.roles.drivers) == 1 and not self.two_sided and self.method.stream_is_work(self.ctx.gpu))

    def warm_lanes(self, nbytes: int, batch) -> None:
        """The driving rank's first, un-gated transfer of this size in every context (lanes.warm), before the pair
        agrees on the count: the peer has not poisoned its inbox for the first sample yet."""
        if batch is not None and self.sampled_over_contexts(nbytes):
            lanes.warm(self.ctx.gpu, batch, self.ctx.lanes)

    def spread(self, nbytes: int, count: int) -> int:
        """The transfers a sample of `count` (agreed by the pair) does once spread over the contexts (lanes.lanes_for:
        each lane the same number, at least lanes.MIN_PER_LANE), and the lanes it spreads over (`lanes`); `count`
        itself where the size is not sampled over contexts."""
        self.lanes = lanes.lanes_for(count, len(self.ctx.lanes)) if self.sampled_over_contexts(nbytes) else 1
        return count if self.lanes == 1 else lanes.per_lane(count, self.lanes) * self.lanes

    def calibrated_batch(self, nbytes: int):
        """The batch this rank enqueues for `nbytes`, calibrated (a two-sided pair in lockstep, and where both
        ranks drive, at the larger of their counts); None on a rank that does not drive."""
        got = self.calibrated(nbytes)
        if got is None:
            return None
        make, count = got
        if self.both:
            count = max(count, self.ctx.world.exchange(count, self.roles.peer))
        return make(count)

    def calibrated(self, nbytes: int):
        """(make(count) -> a batch of `nbytes`, this rank's calibrated count), or None on a rank that does not
        drive: the count before the ranks that drive agree on theirs (calibrated_batch, core/round.py)."""
        ctx, gpu, r = self.ctx, self.ctx.gpu, self.roles
        if not r.driving:
            return None
        assert self.transfer is not None  # bound in __init__ on a driving rank
        ends = two_sided_endpoints(self.bufs, r) if self.two_sided else endpoints(self.bufs, self.style, self.me,
                                                                                  r.peer)
        make = batch_maker(gpu, self.transfer, *ends, nbytes)
        if self.two_sided:
            timed = lockstep_timed(ctx, r.peer, make, self.sync)
        else:
            def timed(c):
                b = make(c)
                return time_batch(gpu, b), b.count

        # A sample is one gated segment: at most per_segment transfers, however short they are; spread over the
        # contexts, at most per_segment in each context's lane (its own stream).
        spreads = len(ctx.lanes) if self.sampled_over_contexts(nbytes) else 1
        count = ctx.calibrate((self.label, self.src, self.dst), nbytes, timed,
                              sample_factor(self.method, nbytes, gpu, ctx.rule),
                              max_count=per_segment(self.transfer.nodes) * spreads)
        return make, count

    def enough_noise(self, nbytes: int, contexts: int = 1) -> float:
        """Where this size's sampling may stop (Ctx.enough_noise) if it spreads over `contexts`: its rows are timed
        on the GPU's events (gated), or on one GPU clock for a same-GPU pair both ways (window)."""
        return self.ctx.enough_noise(self.method.engine, "window" if self.one_clock else "gated", nbytes,
                                     self.src, self.dst, contexts)

    def placements(self, nbytes: int) -> int:
        """How many places of its buffers this size's samples rotate over (core/placement.py): one for a
        two-sided transfer (its halves are bound to their buffers)."""
        if self.two_sided:
            return 1
        return placement.usable(nbytes, self.bufs.slot_bytes, self.ctx.rule.placements)

    def sampler(self, nbytes: int, batch, n: int):
        """sample(s) for take_samples: fill the source, poison the destination, pair barrier, the timed batch,
        swap the times (the end-of-sample barrier), verify what landed here -> (µs per transfer, checks, bad).
        Sample s lies at place s of the size's placements (both ranks compute the same offset); the SM clock
        the driver's gate ran at is kept per sample (`clocks`)."""
        ctx, gpu, r, w, bufs = self.ctx, self.ctx.gpu, self.roles, self.ctx.world, self.bufs
        label, one_clock = self.label, self.one_clock
        places = self.placements(nbytes)
        self.clocks, self.lane_us = [], []
        spread, per = self.lanes, n // self.lanes

        def sample(s: int):
            off = placement.place_offset(s % places)
            inbox = bufs.inbox_slot(r.peer) + off
            with PHASES.phase("fill"):
                if self.me in r.sources:
                    gpu.fill(bufs.src + off, nbytes, seed_for(w.rank, nbytes, s, label))
                if r.receiving:
                    gpu.fill(inbox, nbytes, poison_seed(seed_for(self.peer_world, nbytes, s, label)))
                gpu.wait(what="fill/poison")
            with PHASES.phase("barrier"):
                w.pair_barrier(r.peer)
            mine: tuple = (None, None, None, None)
            if r.driving and spread > 1:
                by_lane = lanes.time_lanes(gpu, batch.at(off), ctx.lanes[:spread], ctx.lane_events[:spread], per, s)
                mine = (None, None, gpu.gate_clock_mhz(), by_lane)
            elif r.driving:
                res = time_batch(gpu, batch.at(off), self.sync, stamps=one_clock)
                mine = (*(res if one_clock else (res, None)), gpu.gate_clock_mhz(), None)
            with PHASES.phase("exchange"):
                theirs = w.exchange(mine, r.peer, tag=END_TAG)
            self.clocks.append(min((c for c in (mine[2], theirs[2]) if c), default=None))
            if spread > 1:  # one driver: its lanes' times; the sample's, their mean
                self.lane_us.append(mine[3] or theirs[3])
                t = statistics.fmean(self.lane_us[-1])
            else:
                t = per_transfer_us(self.direction, one_clock, mine, theirs, n)
            checks = bad = 0
            if r.receiving and ctx.verify:
                with PHASES.phase("verify"):
                    if ctx.corrupt == self.method.name:
                        gpu.corrupt(inbox, nbytes)
                    bad = gpu.verify(inbox, nbytes, seed_for(self.peer_world, nbytes, s, label))
                checks = 1
            return t, checks, bad

        return sample

    def row(self, nbytes: int, got, n: int, batch, theirs: tuple[int, int], facts: dict,
            row_direction: str | None, kind: str, note: str) -> Row:
        """src's row of one size from both ranks' samples and checks (`theirs`: the peer's checks, mismatches)."""
        ctx, method, direction, src, dst = self.ctx, self.method, self.direction, self.src, self.dst
        receivers = 2 if direction == "bidir" else 1
        text = join_note(note, self.engine_note, batch.note if batch else "")
        if self.one_clock:
            kernels = ""
            if on_sms(method.engine, same_gpu=True):
                kernels = ("; the two processes' kernels are time-sliced (no MPS)" if ctx.time_sliced(src, dst)
                           else "; the two processes' kernels run concurrently (MPS)")
            text = join_note(text, "same GPU: both processes' transfers timed over one window on the GPU clock"
                             + kernels)
        clocks = [c for c in self.clocks if c]
        return make_row(ctx, suite=self.suite, method=method.name, direction=row_direction or direction, src=src,
                        dst=dst, nbytes=nbytes, per_us=got.per_transfer_us, iterations=n,
                        moved=nbytes * receivers if kind != "latency" else None,
                        checks=got.checks + theirs[0], mismatches=got.mismatches + theirs[1], note=text, kind=kind,
                        required=receivers * len(got.per_transfer_us), sms_used=facts.get("sms_used"),
                        placements=self.placements(nbytes), sm_clock_mhz=statistics.median(clocks) if clocks else None,
                        contexts_us=lanes.context_values(self.lane_us) if self.lanes > 1 else None)
