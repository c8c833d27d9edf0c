"""The pair protocol: one (method, direction, src, dst) measurement over a size sweep, on both ranks.

Per size: the driving rank(s) calibrate (core/sampler.py), then every sample is fill/poison -> pair
barrier -> timed batch behind the gate (core/timing.py) -> the two ranks swap their times (the swap
is the end-of-sample barrier, so both hold the same per-transfer time and take the same number of
samples) -> the receiving rank(s) verify. Same-GPU bidirectional pairs are timed over one window on the
GPU's clock (stamps), since each process's events would time only its own share. docs/architecture.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from ipcbench.core.rows import join_note, make_row
from ipcbench.core.sampler import take_samples
from ipcbench.core.stats import poison_seed, seed_for
from ipcbench.results import Row

END_TAG = 10  # the end-of-sample exchange
SYNC_TAG = 12  # bidirectional release


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


def roles_for(direction: str, src: int, dst: int, me: int) -> PairRoles:
    if me not in (src, dst):
        raise ValueError(f"rank {me} is not in the pair ({src}, {dst})")
    peer = dst if me == src else src
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


# An SM copy that loops inside one launch (core/methods.SmEngine) is one launch per sample, and the launch's
# start and tail cost a fixed ~25 us: at 5 ms samples that read 0.4-0.5% under a run of 50 ms samples on an
# H200 pair (sm_read 374.0-374.4 vs 375.9 GB/s; 20 ms: 375.3-375.4). Those samples last at least this long.
SM_LOOP_MIN_SAMPLE_S = 0.020


def sample_factor(method, nbytes: int, gpu, min_time_s: float) -> float:
    """How many times --min-time one sample of this measurement lasts (see SM_LOOP_MIN_SAMPLE_S)."""
    if method.engine == "sm" and nbytes >= gpu.loop_in_kernel_bytes:
        return max(1.0, SM_LOOP_MIN_SAMPLE_S / min_time_s)
    return 1.0


def per_transfer_us(direction: str, one_clock: bool, mine, theirs, n: int) -> float:
    """The pair's time per transfer (µs) of one sample from both ranks' reports (ms, stamps).

    One way: the driver's time. Bidirectional on two GPUs: the longer side (both were released
    together). Bidirectional on one GPU: earliest start to latest end on the GPU's clock.
    """
    if direction != "bidir":
        ms = mine[0] if mine[0] is not None else theirs[0]
        return ms * 1e3 / n
    if one_clock:
        from ipcbench.core.timing import one_window_ms

        return one_window_ms(mine[1], theirs[1]) * 1e3 / n
    return max(mine[0], theirs[0]) * 1e3 / n


def measure_pair(ctx, suite: str, method, direction: str, src: int, dst: int, sizes: list[int],
                 row_direction: str | None = None, kind: str = "", note: str = "") -> list[Row]:
    """Run one pair's size sweep. Both ranks of the pair call this; `src` returns the rows.

    `row_direction`/`kind`/`note` label the rows (the latency suite reports one-way times as `oneway`).
    """
    from ipcbench.core.methods import GraphBatch, plan_segments
    from ipcbench.core.timing import time_batch

    w, gpu = ctx.world, ctx.gpu
    me = w.local_rank
    r = roles_for(direction, src, dst, me)
    bufs = ctx.buffers[method.buffers]
    style = method.style if direction == "bidir" else direction
    label = f"{suite}/{method.name}/{direction}"
    one_clock = direction == "bidir" and ctx.same_gpu(src, dst)
    peer_world = ctx.world_rank(r.peer)
    rows = []
    for nbytes in sizes:
        batch = None
        if r.driving:
            s_ptr, d_ptr = endpoints(bufs, style, me, r.peer)
            built = {}  # graph size k -> batch: one graph per size, whatever counts calibration tries

            def make(c):
                k, _ = plan_segments(c)
                if k not in built:
                    built.clear()
                    built[k] = GraphBatch(gpu, method, s_ptr, d_ptr, nbytes, c)
                return built[k].with_count(c)

            def timed(c):
                b = make(c)
                return time_batch(gpu, b), b.count

            count = ctx.calibrate((label, src, dst), nbytes, timed,
                                  sample_factor(method, nbytes, gpu, ctx.rule.min_time_s))
            if direction == "bidir":
                count = max(count, w.exchange(count, r.peer))
            batch = make(count)
        n = batch.count if batch else 0
        n = max(n, w.exchange(n, r.peer))  # both ranks know the transfers per sample
        sync = (lambda: w.pair_barrier(r.peer, tag=SYNC_TAG)) if direction == "bidir" else None

        def sample(s: int):
            if me in r.sources:
                gpu.fill(bufs.src, nbytes, seed_for(w.rank, nbytes, s, label))
            if r.receiving:
                gpu.fill(bufs.inbox_slot(r.peer), nbytes, poison_seed(seed_for(peer_world, nbytes, s, label)))
            gpu.wait(what="fill/poison")
            w.pair_barrier(r.peer)
            mine = (None, None)
            if r.driving:
                res = time_batch(gpu, batch, sync, stamps=one_clock)
                mine = res if one_clock else (res, None)
            theirs = w.exchange(mine, r.peer, tag=END_TAG)
            t = per_transfer_us(direction, one_clock, mine, theirs, n)
            checks = bad = 0
            if r.receiving and ctx.verify:
                if ctx.corrupt == method.name:
                    gpu.corrupt(bufs.inbox_slot(r.peer), nbytes)
                bad = gpu.verify(bufs.inbox_slot(r.peer), nbytes, seed_for(peer_world, nbytes, s, label))
                checks = 1
            return t, checks, bad

        got = take_samples(ctx.rule, n, sample)
        their_checks, their_bad = w.exchange((got.checks, got.mismatches), r.peer)
        if me != src:
            continue
        receivers = 2 if direction == "bidir" else 1
        text = note
        if one_clock:
            kernels = ""
            if method.engine == "sm":
                kernels = ("; the two processes' kernels are time-sliced (no MPS)" if ctx.time_sliced(src, dst)
                           else "; the two processes' kernels run concurrently (MPS)")
            text = join_note(text, "same GPU: both processes' transfers timed over one window on the GPU clock"
                             + kernels)
        rows.append(make_row(ctx, suite, method.name, row_direction or direction, src, dst, nbytes,
                             got.per_transfer_us, n, nbytes * receivers if kind != "latency" else None,
                             got.checks + their_checks, got.mismatches + their_bad, note=text, kind=kind,
                             required=receivers * len(got.per_transfer_us)))
    return rows
