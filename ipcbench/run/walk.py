"""Walking the plan: every step over its pairs, one pair at a time or in rounds of disjoint pairs (serial
steps over the run's serial-pairs coverage: every pair or a ring), with the built-in check that rounds
measure what pairs one at a time would. The node's rows go to the row sink (run/collect.py) after each
group. docs/architecture.md, "How a row is born".
"""

from __future__ import annotations

import sys
import time

from ipcbench.core.phases import PHASES
from ipcbench.core.rows import join_note, state_noise
from ipcbench.core.schedule import ModeError, decide_mode, pair_rounds
from ipcbench.errors import UsageError
from ipcbench.record.meta import Skipped
from ipcbench.run.console import Progress, say
from ipcbench.sizes import fmt_size
from ipcbench.suites.registry import describe_rows


def agree_pair_mode(world, requested: str, ranks_per_gpu: int, link_kinds: list[str] | None, local_size: int,
                    serial: str = "auto", quick: bool = False):
    """This node's pair mode and serial-step coverage (core/schedule.decide_mode); a refusal on any node
    ends every rank alike."""
    try:
        mode, err = decide_mode(requested, ranks_per_gpu, link_kinds, local_size, serial, quick), None
    except ModeError as e:
        mode, err = None, str(e)
    errors = [e for e in world.world_allgather(err, "the pair-mode decision") if e]
    if errors:
        raise UsageError(errors[0])
    return mode


def pairs_of(step, mode) -> list:
    """The pairs a step measures in this run: all of them, but a serial step only those of the run's
    serial-pairs coverage (core/schedule.SerialPairs: every pair, or a ring), and under --quick with ranks
    sharing GPUs one rank pair per GPU pair (core/schedule.PairMode.select)."""
    return mode.select(step.pairs, step.serial)


def measured(step, mode) -> int:
    """How many measurements (pair x size) a step takes in this run: what the progress counts."""
    return len(step.sizes) * (1 if step.all_ranks else len(pairs_of(step, mode)))


def groups_of(step, mode) -> list:
    """How a step is walked: [None] for a step all ranks run together, else groups of pairs measured at
    once: rounds of disjoint pairs (core/schedule.py) where the run and the step allow, else one pair each."""
    if step.all_ranks:
        return [None]
    if mode.concurrent and step.rounds_ok:
        return pair_rounds(step.pairs)
    return [[p] for p in pairs_of(step, mode)]


def walk(ctx, steps, sink, quiet: bool, mode, timings: dict | None = None, skipped: list | None = None):
    """Run every step over its pairs (one at a time or in rounds), or all ranks at once; the node's rows go
    to `sink` after each group. Returns (every row rank 0 holds, the node's concurrency checks: one per
    engine walked in rounds, on the node leader; [] elsewhere). A step that cannot run here (a buffer kind,
    library or GPU feature missing: ctx.unavailable says why) is skipped with its reason; with `skipped`
    (every rank passes one: it is gathered), world rank 0's list gets every node's skipped steps as
    meta.json records them (record/meta.Skipped)."""
    world = ctx.world
    mine_skipped: list[dict] = []
    totals: dict[str, float] = {}
    meas: dict[str, int] = {}
    for s in steps:
        totals[s.suite] = totals.get(s.suite, 0.0) + measured(s, mode) * s.cost
        meas[s.suite] = meas.get(s.suite, 0) + measured(s, mode)
    progress = Progress(totals, enabled=(world.rank == 0 and not quiet))
    checks: list[dict] = []
    checked: set[str] = set()  # engines whose first step walked in rounds was checked (check_rounds)
    for step in steps:
        with PHASES.phase(step.suite):  # the step's wall in the run's time breakdown
            t0 = time.monotonic()
            missing = [k for k in step.needs if not ctx.has(k)]
            if missing:
                reason = ctx.unavailable.get(missing[0], f"{missing[0]} unavailable")
                say(world, f"[{step.suite:8s}] skipping {step.label}: {reason}")
                if world.local_rank == 0:
                    mine_skipped.append(Skipped(step.suite, step.label, reason, world.host).as_json())
                progress.advance(step.suite, step.label, measured(step, mode) * step.cost, measured(step, mode),
                                 meas[step.suite])
                continue
            groups = groups_of(step, mode)
            mine_all = []
            for group in groups:
                rows = []
                if group is None:
                    rows = step.run(ctx, step.sizes)
                else:
                    mine = [p for p in group if world.local_rank in p]
                    if mine:
                        rows = step.run(ctx, mine[0][0], mine[0][1], step.sizes)
                    if len(group) > 1:
                        for r in rows:
                            r.note = join_note(r.note, f"measured in a round of {len(group)} disjoint pairs")
                ranks = len(ctx.gpu_of)  # a step of all ranks at once (all-to-all) measures every ordered pair
                describe_rows(rows, ctx.mps, len(group) if group is not None else ranks * (ranks - 1))
                state_noise(rows, ctx.gpu_model)
                mine_all.extend(rows)
                with PHASES.phase("rows"):
                    sink.add(rows, f"the rows of step '{step.label}'")
                n = len(step.sizes) * (1 if group is None else len(group))
                progress.advance(step.suite, step.label, n * step.cost, n, meas[step.suite])
            kind = step.engine or step.label
            if kind not in checked and groups and groups[0] is not None and max(len(g) for g in groups) > 1:
                checked.add(kind)
                check = check_rounds(ctx, step, groups, mine_all)
                if check is not None:
                    checks.append(check)
            if timings is not None:
                timings[step.suite] = round(timings.get(step.suite, 0.0) + time.monotonic() - t0, 3)
    if skipped is not None:
        every = world.world_gather(mine_skipped, "the skipped steps")
        if every is not None:
            skipped.extend(s for node in every for s in node)
    return sink.finish(), checks


ROUND_CHECK_TOLERANCE = 0.01


def check_rounds(ctx, step, groups, concurrent_rows) -> dict | None:
    """The built-in guard of concurrent rounds, run for the first step of every engine walked in rounds
    (copy engine, SM kernels, bulk kernels, NCCL: each can meet another limit when every GPU is busy, such
    as the node's power or clocks): re-measure the largest round's pairs one at a time at the largest size
    and compare with what the round measured; a difference over 1% is a warning naming the step and the
    pair (the pairs did share something). Returns the node's comparison on its leader (None elsewhere)."""
    world = ctx.world
    size = max(step.sizes)
    round_ = max(groups, key=len)
    diffs = []
    for src, dst in round_:
        rows = step.run(ctx, src, dst, [size]) if world.local_rank in (src, dst) else []
        for seq in rows:
            conc = [r for r in concurrent_rows if (r.src_rank, r.dst_rank, r.bytes, r.direction) ==
                    (seq.src_rank, seq.dst_rank, seq.bytes, seq.direction)]
            a, b = (conc[0].bw_gbps_median, seq.bw_gbps_median) if conc else (None, None)
            if a is None or b is None:  # latency steps: compare times
                a, b = (1 / conc[0].time_us_median, 1 / seq.time_us_median) if conc else (None, None)
            if a and b:
                diffs.append({"src_rank": seq.src_rank, "dst_rank": seq.dst_rank, "concurrent": a,
                              "sequential": b, "diff": a / b - 1})
        world.node_barrier(f"the sequential check of pair {src}->{dst}")
    parts = world.node_gather(diffs, "the concurrency check")
    if world.local_rank != 0:
        return None
    flat = [d for p in parts for d in p]
    worst = max((abs(d["diff"]) for d in flat), default=0.0)
    out = {"host": world.host, "step": f"{step.suite}/{step.label}", "engine": step.engine, "bytes": size,
           "pairs": flat, "worst_diff": worst, "tolerance": ROUND_CHECK_TOLERANCE, "ok": worst <= ROUND_CHECK_TOLERANCE}
    if not out["ok"]:
        w = max(flat, key=lambda d: abs(d["diff"]))
        print(f"ipcbench: warning: on {world.host} the round of {len(round_)} pairs measured {step.suite}/{step.label} "
              f"at {fmt_size(size)} up to {worst:.1%} away from the same pairs one at a time (worst: ranks "
              f"{w['src_rank']} -> {w['dst_rank']}, {w['concurrent']:.4g} in the round, {w['sequential']:.4g} alone): "
              f"pairs measured at once may share a link or a node limit here; rerun with --pairs sequential",
              file=sys.stderr, flush=True)
    return out
