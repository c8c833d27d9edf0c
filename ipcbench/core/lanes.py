"""Sampling a row over CUDA contexts: each sample's transfers spread over K lanes, one stream in each of K green
contexts, so that a run sees the between-process level of a small copy itself (docs/measurement.md, "The level is the
CUDA context's"). Within a context a small copy's repeats agree to 0.1-0.4%; between contexts, as between processes,
its level moves 2-5% (relative sd); the mean over K contexts moves as the standard error sd/sqrt(K).

One sample: lane after lane, each a gated segment on its own stream that starts when the previous lane ends
(`time_lanes`); the work stream waits for the last lane, so waiting for it waits for every lane. Each lane's events
time its own transfers (the lanes never share the engine). Sample s starts at lane s mod L (`order`), so that no
context always runs first. A lane's time per transfer is estimated from its events without the fixed cost of a segment
(`per_transfer`); the sample's time per transfer is the mean over its lanes; each context's value is the median of its
lane's times over the samples.

Pure logic (which rows, how many lanes, the statistics) beside `time_lanes`, which reaches the GPU only through the
Gpu seam (stream primitives), so tests/fakes.py runs it on the CPU.
"""

from __future__ import annotations

import math
import statistics

from ipcbench.catalogue.row_kind import LARGE_FROM
from ipcbench.core.phases import PHASES
from ipcbench.core.poll import wait_until
from ipcbench.errors import GpuError, MeasureError

SAMPLED_BELOW = LARGE_FROM  # from 64 MiB a copy's level moves 0.4-1% between processes: one context, the floors
MIN_PER_LANE = 5  # transfers each lane holds at least (per_transfer's difference spans per - 3); fewer: fewer lanes
# Standard errors a context-sampled row's `noise_contexts` states: about where 95% of the runs' means lie.
NOISE_SE = 2.0


def lanes_for(count: int, k: int) -> int:
    """How many of the k contexts a sample of `count` transfers spreads over: k, or fewer so that each holds
    MIN_PER_LANE transfers; 1 (the work stream, no spreading) where fewer than two lanes would."""
    n = min(k, count // MIN_PER_LANE)
    return n if n >= 2 else 1


def per_lane(count: int, lanes: int) -> int:
    """Transfers each lane enqueues so that the lanes together do at least `count`."""
    return -(-count // max(lanes, 1))


def order(sample: int, lanes: int) -> list[int]:
    """The lanes of sample `sample` in the order they run: rotated by one lane a sample."""
    first = sample % lanes
    return [(first + i) % lanes for i in range(lanes)]


PENDING = 2  # lanes queued on the GPU at once: 8 queued read a 4 KiB copy 3.3-3.9 µs, 48 4.2-4.5, one or two 1.8-2.1


def time_lanes(gpu, batch, streams: list, events: list, per: int, sample: int = 0,
               timeout: float = 60.0) -> list[float]:
    """µs per transfer of `batch` on each lane (`streams[i]`, with its four timing events `events[i]`), one lane after
    another, `per` transfers each; returned by lane (lane 0 first): `per_transfer`'s estimate from the lane's events.

    Each lane is time_batch's gated segment on its own stream: it waits for the previous lane's last event, then its
    own gate kernel, an event, one transfer, an event, one transfer, an event, the other per - 2 transfers and an
    event; the host releases the gate once all of it is enqueued, so nothing being enqueued is timed and the lanes
    never overlap. The host enqueues a lane only once the lane two before it has ended: at most PENDING lanes wait on
    the GPU at a time (tests/bench_lanes.py --geometry, one H200: 8 lanes queued behind one gate took 3.3-3.9 µs a 4 KiB
    copy, 48 4.2-4.5, where one lane or two took 1.8-2.1)."""
    work = batch.stream
    lanes_order = order(sample, len(streams))
    tickets: list[int] = []
    prev = None
    with PHASES.phase("enqueue"):
        for j, i in enumerate(lanes_order):
            s, (e0, e1, e2, e3) = streams[i], events[i]
            if j >= PENDING:
                ended = events[lanes_order[j - PENDING]][3]
                wait_until(lambda: ended.done, timeout, f"lane {j - PENDING} of a sample over contexts on GPU "
                           f"{getattr(gpu, 'index', '?')}", error=GpuError, max_sleep=1e-4)
            if prev is not None:
                s.wait_event(prev)
            tickets.append(gpu.gate(s))
            e0.record(s)
            batch.enqueue_on(s, 1)
            e1.record(s)
            batch.enqueue_on(s, 1)
            e2.record(s)
            batch.enqueue_on(s, per - 2)
            e3.record(s)
            gpu.release(tickets[-1])
            prev = e3
        work.wait_event(prev)
    with PHASES.phase("gpu"):
        gpu.wait(work, what="a timed batch over contexts", spin=False)
    if any(gpu.gate_timed_out(t) for t in tickets):
        raise MeasureError("a gate kernel timed out before its lane was enqueued (host too slow?)")
    return [per_transfer(gpu.elapsed_ms(e0, e1), gpu.elapsed_ms(e2, e3), per) * 1e3 for e0, e1, e2, e3 in events]


def per_transfer(first_ms: float, rest_ms: float, per: int) -> float:
    """A lane's time per transfer (ms) from its first transfer's time and the time of its last per - 2: their
    difference over per - 3 transfers. A segment's time is a fixed cost (the first transfer's start after the event
    before it) plus its transfers', so the difference cancels the fixed cost, which one lane of a few transfers would
    otherwise spread over them: on one H200 (tests/bench_lanes.py --first, 48 lanes of 8-22 transfers) whole segments
    read 4 KiB to 1 MiB copies 8-18% slower than a 512-transfer segment of the primary context, the difference within
    -4.5 to +0.6% of it (the mean over the contexts against the primary's level). Where timer resolution makes the
    difference not positive (a lane of few transfers), the last per - 2 transfers' time over their count."""
    diff = (rest_ms - first_ms) / (per - 3)
    return diff if diff > 0 else rest_ms / (per - 2)


def warm(gpu, batch, streams: list) -> None:
    """One un-gated transfer on every lane, waited for: a transfer's first use in a context may load what it needs
    (core/methods.StreamBatch), and a load behind a held gate waits for the gate."""
    for s in streams:
        batch.enqueue_on(s, 1)
    for s in streams:
        gpu.wait(s, what="a transfer's first, un-gated run in each context")


def context_values(per_sample: list[list[float]]) -> list[float]:
    """Each context's value: the median over the samples of its time per transfer (`per_sample[s][i]`: sample s,
    lane i)."""
    if not per_sample:
        return []
    return [statistics.median(col) for col in zip(*per_sample)]


def standard_error(values: list[float]) -> float | None:
    """The relative standard error of the mean over contexts: sd / sqrt(K) / mean; None for fewer than two."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    if mean <= 0:
        return None
    return statistics.stdev(values) / math.sqrt(len(values)) / mean


def noise_of(values: list[float]) -> float | None:
    """A context-sampled row's between-runs noise (`noise_contexts`): NOISE_SE standard errors of the mean over its
    contexts, a fraction of the mean."""
    se = standard_error(values)
    return None if se is None else NOISE_SE * se
