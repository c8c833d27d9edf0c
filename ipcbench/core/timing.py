"""Timing a batch of transfers with no Python in the timed region (docs/architecture.md, "Measurement").

Each gated segment, on the batch's stream: gate kernel (spins on a host-mapped flag), start event [+ a
%globaltimer stamp], the segment's transfers (enqueued while the gate holds the stream), [stamp +] stop
event; then `sync_peer` (both ranks of a bidirectional run release together) and the release. Only GPU
time between the events counts. Stamps put both processes of a same-GPU pair on one clock, so their
overlapping work is timed over one window.
"""

from __future__ import annotations

from ipcbench.core.phases import PHASES
from ipcbench.errors import MeasureError


def time_batch(gpu, batch, sync_peer=None, stamps: bool = False):
    """GPU ms of all of `batch`'s transfers; with `stamps`, also [(start_ns, end_ns)] per segment."""
    stream = batch.stream
    total = 0.0
    marks = []
    for reps in batch.segments():
        start, stop = gpu.event(), gpu.event()
        with PHASES.phase("enqueue"):
            ticket = gpu.gate(stream)
            start.record(stream)
            if stamps:
                gpu.stamp(0, stream)
            batch.enqueue(reps)
            if stamps:
                gpu.stamp(1, stream)
            stop.record(stream)
        if sync_peer is not None:
            with PHASES.phase("sync"):
                sync_peer()
        gpu.release(ticket)
        with PHASES.phase("gpu"):
            gpu.wait(stream, what="a timed batch", spin=False)  # the batch's own libraries may need this core
        if gpu.gate_timed_out(ticket):
            raise MeasureError("the gate kernel timed out before the batch was enqueued (host too slow?)")
        total += gpu.elapsed_ms(start, stop)
        if stamps:
            marks.append(gpu.read_stamps())
    return (total, marks) if stamps else total


def one_window_ms(marks_a: list[tuple[int, int]], marks_b: list[tuple[int, int]]) -> float:
    """Two processes' segments on one GPU clock: per segment, earliest start to latest end; summed."""
    if len(marks_a) != len(marks_b):
        raise MeasureError(f"the pair timed {len(marks_a)} and {len(marks_b)} segments")
    return sum(max(ea, eb) - min(sa, sb) for (sa, ea), (sb, eb) in zip(marks_a, marks_b)) / 1e6
