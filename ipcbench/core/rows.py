"""Building result rows: the one place that turns a measurement's samples into a Row.

`verified` is honest: true only when a destination check ran on every sample it had to (`checks` >=
`required`, by default one per sample) and found no mismatched word. Nothing here has side effects: the
runner counts failures from the rows it receives. docs/architecture.md, "How a row is born".
"""

from __future__ import annotations

import math

from ipcbench.catalogue import noise
from ipcbench.catalogue.row_kind import RowKind
from ipcbench.core import lanes
from ipcbench.core.sampler import median_noise
from ipcbench.core.stats import summarize
from ipcbench.results import Row, format_samples


def join_note(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def make_row(ctx, *, suite: str, method: str, direction: str, src: int, dst: int, nbytes: int,
             per_us: list[float], iterations: int, moved: int | None, checks: int, mismatches: int,
             note: str = "", kind: str = "", required: int | None = None,
             samples_us: list[float] | None = None, sms_used: int | None = None, placements: int | None = None,
             sm_clock_mhz: float | None = None, contexts_us: list[float] | None = None) -> Row:
    """A row for the node-local pair (src, dst); `moved` None means no bandwidth column (latency, op). Every fact by
    keyword: eighteen of them, several of one type (counts, ranks), are never told apart by their place.

    `per_us`: time per transfer/operation of each sample (µs); `checks`/`mismatches`: how many
    destination checks ran and what they found; `required`: checks that make the row verified
    (default: one per sample). `samples_us` overrides what is recorded as the samples (default per_us).
    `placements`: how many places of its buffers the samples rotated over (core/placement.py); `sm_clock_mhz`:
    the SM clock the driving GPU's gates ran at (median over the samples; kernels/gate.cu). `contexts_us`: each
    context's time per transfer where the samples spread over contexts (core/lanes.py; None: one context).
    """
    sm = summarize(per_us, moved)
    need = len(per_us) if required is None else required
    if kind == "error":
        verified, checks = False, 0
    elif not ctx.verify:
        verified, checks = False, 0
        note = join_note(note, "not verified (--no-verify)")
    else:
        verified = need > 0 and checks >= need and mismatches == 0
        if mismatches:
            note = join_note(note, f"{mismatches} mismatched words")
        elif checks < need:
            note = join_note(note, f"destination checked in {checks} of {need} samples")
    noise = median_noise(per_us)
    return Row(
        run_id=ctx.run_id, host=ctx.world.host, suite=suite, method=method, direction=direction,
        src_rank=ctx.world_rank(src) if src >= 0 else -1, dst_rank=ctx.world_rank(dst) if dst >= 0 else -1,
        src_gpu=ctx.gpu_of[src] if src >= 0 else -1, dst_gpu=ctx.gpu_of[dst] if dst >= 0 else -1,
        same_gpu=(src >= 0 and dst >= 0 and ctx.same_gpu(src, dst)), bytes=nbytes, iterations=iterations,
        samples=len(per_us), time_us_median=sm.median_us, time_us_min=sm.min_us, time_us_max=sm.max_us,
        bw_gbps_median=sm.bw_median, bw_gbps_max=sm.bw_max, cv=sm.cv, verified=verified, note=note,
        kind=kind, checks=checks, noise=None if math.isinf(noise) else noise,
        samples_us=format_samples(per_us if samples_us is None else samples_us), sms_used=sms_used,
        placements=placements, sm_clock_mhz=None if sm_clock_mhz is None else round(sm_clock_mhz, 1),
        contexts=len(contexts_us) if contexts_us else (1 if kind != "error" else None),
        context_us=format_samples(contexts_us) if contexts_us else "",
        noise_contexts=lanes.noise_of(contexts_us) if contexts_us else None)


def state_noise(rows: list[Row], gpu_model: str) -> None:
    """Make each row's `noise` honest: its within-run noise (kept in `noise_within`) and how far its value moves
    between runs, combined: its kind's between-runs floor (catalogue/noise.py, kept in `noise_floor`: a row sampled
    over contexts has its kind's floor over contexts), or for a row sampled over contexts the noise measured between
    them (`noise_contexts`: core/lanes.py) where that is larger. Needs the rows' facts (engine, timing): after
    describe."""
    for r in rows:
        if r.kind == "error":
            continue
        floor = noise.floor_of(gpu_model, RowKind.of_row(r))
        r.noise_within, r.noise_floor = r.noise, floor.fraction
        between = floor.fraction if r.noise_contexts is None else max(r.noise_contexts, floor.fraction)
        r.noise = noise.combined(r.noise, between)
        if r.noise is None:
            r.note = join_note(r.note, "noise not estimated (fewer than two samples)")


def failed(row: Row, verify: bool) -> bool:
    """A row that counts against the run's exit code: a check that should have run and did not pass."""
    return verify and row.kind != "error" and not row.verified
