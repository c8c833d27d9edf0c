"""Walking the plan: every step over its pairs, one pair at a time or in rounds of disjoint pairs (serial
steps over the run's serial-pairs coverage: every pair or a ring), with the built-in check that rounds
measure what pairs one at a time would. The node's rows go to the row sink (run/collect.py) after each
group. docs/architecture.md, "How a row is born".
"""

from __future__ import annotations

import sys
import time

from ipcbench.catalogue.pairing import ROUND_KINDS
from ipcbench.catalogue.planned import PlannedStep
from ipcbench.core.phases import PHASES
from ipcbench.core.rows import join_note, state_noise
from ipcbench.core.schedule import Group, ModeError, decide_mode, gpu_rounds, pair_rounds, permutation_rounds
from ipcbench.core.world import ordered_pairs
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


def groups_of(step, mode) -> list[Group]:
    """How a step is walked: what is measured at once, over which of its sizes (core/schedule.Group). Every rank
    of the node together for an all-ranks step; for a step that may run in rounds on a node that allows them,
    permutation rounds over the sizes the run's permutation covers for the step's engine (a one-way step of a
    one-sided engine: Step.run_round), then rounds of disjoint pairs over the rest (or one pair at a time where
    the run measures pairs sequentially); one pair at a time otherwise."""
    sizes = tuple(step.sizes)
    if step.all_ranks:
        return [Group(None, sizes, "all")]
    pairs = pairs_of(step, mode)
    if not step.rounds_ok:
        return [Group((p,), sizes, "alone") for p in pairs]
    permuted = tuple(mode.permutation.sizes(step.engine, step.sizes)) if step.run_round is not None else ()
    rest = tuple(n for n in sizes if n not in permuted)
    groups = [Group(tuple(r), permuted, "permutation") for r in permutation_rounds(pairs)] if permuted else []
    if rest and mode.concurrent:
        rounds = gpu_rounds(pairs, mode.gpu_of) if mode.gpu_of is not None else pair_rounds(pairs)
        groups += [Group(tuple(r), rest, "disjoint" if len(r) > 1 else "alone") for r in rounds]
    elif rest:
        groups += [Group((p,), rest, "alone") for p in pairs]
    return groups


def planned(steps, mode, gpu_of: list[int], host: str) -> list[PlannedStep]:
    """What this node's walk writes (meta.json's planned_rows, catalogue/planned.py): each step's rows
    (Step.writes) for each pair the walk measures (pairs_of; every ordered pair of the node for an all-ranks step,
    whose every rank writes a row to each peer; no pair of ranks sharing a GPU for a cross-GPU step) at each of its
    sizes."""
    out = []
    for s in steps:
        pairs = ordered_pairs(len(gpu_of)) if s.all_ranks else pairs_of(s, mode)
        if s.cross_gpu:
            pairs = [(a, b) for a, b in pairs if gpu_of[a] != gpu_of[b]]
        out.append(PlannedStep(s.suite, s.label, (host,), tuple(pairs), tuple(s.sizes), tuple(s.writes)))
    return out


def rounds_of(steps, mode) -> dict[str, list[dict]]:
    """What meta.json's pair_mode.rounds records: for every step walked in rounds (suite/label), each round's kind,
    flows (node-local ranks) and sizes, so that every row's round is known (its pair and size)."""
    out = {}
    for s in steps:
        rounds = [g.as_dict() for g in groups_of(s, mode) if g.kind in ROUND_KINDS]
        if rounds:
            out[f"{s.suite}/{s.label}"] = rounds
    return out


def guarded(steps, mode) -> dict[int, list[Group]]:
    """The concurrency guard's plan (check_rounds), by index of the step that pays it: for the first step of each
    engine walked in rounds of each kind (disjoint, permutation), that kind's largest round, re-measured one pair
    at a time at the largest size the step measured in such rounds. One rule for the walk and the dry run's model
    (run/costmodel.py)."""
    out: dict[int, list[Group]] = {}
    seen: set[tuple[str, str]] = set()
    for i, s in enumerate(steps):
        for kind in ROUND_KINDS:
            rounds = [g for g in groups_of(s, mode) if g.kind == kind]
            key = (s.engine or s.label, kind)
            if rounds and key not in seen:
                seen.add(key)
                biggest = max(rounds, key=lambda g: g.pairs_at_once)
                out.setdefault(i, []).append(Group(biggest.flows, (max(biggest.sizes),), kind))
    return out


def walk(ctx, steps, sink, quiet: bool, mode, timings: dict | None = None, skipped: list | None = None):
    """Run every step over its groups (core/schedule.Group: one pair, a round of pairs, every rank); the node's rows
    go to `sink` after each group. Returns (every row rank 0 holds, the node's concurrency checks: one per engine and
    kind of round, on the node leader; [] elsewhere). A step that cannot run here (a buffer kind, library or GPU
    feature missing: ctx.unavailable says why) is skipped with its reason; with `skipped` (every rank passes one: it
    is gathered), world rank 0's list gets every node's skipped steps as meta.json records them
    (record/meta.Skipped)."""
    world = ctx.world
    mine_skipped: list[dict] = []
    totals: dict[str, float] = {}
    meas: dict[str, int] = {}
    for s in steps:
        totals[s.suite] = totals.get(s.suite, 0.0) + measured(s, mode) * s.cost
        meas[s.suite] = meas.get(s.suite, 0) + measured(s, mode)
    progress = Progress(totals, enabled=(world.rank == 0 and not quiet))
    checks: list[dict] = []
    guard = guarded(steps, mode)
    for i, step in enumerate(steps):
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
            mine_all = []
            for group in groups_of(step, mode):
                rows = walk_group(ctx, step, group)
                mine_all.extend(rows)
                with PHASES.phase("rows"):
                    sink.add(rows, f"the rows of step '{step.label}'")
                n = len(group.sizes) * (group.pairs_at_once or 1)
                progress.advance(step.suite, step.label, n * step.cost, n, meas[step.suite])
            for check in guard.get(i, []):
                got = check_rounds(ctx, step, check, mine_all)
                if got is not None:
                    checks.append(got)
            if timings is not None:
                timings[step.suite] = round(timings.get(step.suite, 0.0) + time.monotonic() - t0, 3)
    if skipped is not None:
        every = world.world_gather(mine_skipped, "the skipped steps")
        if every is not None:
            skipped.extend(s for node in every for s in node)
    return sink.finish(), checks


ROUND_NOTES = {"disjoint": "measured in a round of {n} disjoint pairs",
               "permutation": "measured in a permutation round of {n} flows (each GPU sending once and receiving once)"}


def walk_group(ctx, step, group: Group) -> list:
    """This rank's rows of one group of a step, described (facts, pairs at once) and with their honest noise."""
    world = ctx.world
    sizes = list(group.sizes)
    if group.kind == "all":
        rows = step.run(ctx, sizes)
    elif group.kind == "permutation":
        rows = step.run_round(ctx, list(group.flows or ()), sizes)
    else:
        mine = [p for p in group.flows or () if world.local_rank in p]
        rows = step.run(ctx, mine[0][0], mine[0][1], sizes) if mine else []
    if group.kind in ROUND_NOTES and group.pairs_at_once > 1:
        for r in rows:
            r.note = join_note(r.note, ROUND_NOTES[group.kind].format(n=group.pairs_at_once))
    ranks = len(ctx.gpu_of)  # a step of all ranks at once (all-to-all) measures every ordered pair
    describe_rows(rows, ctx.mps, group.pairs_at_once if group.flows is not None else ranks * (ranks - 1))
    state_noise(rows, ctx.gpu_model)
    return rows


ROUND_CHECK_TOLERANCE = 0.01


def check_rounds(ctx, step, check: Group, concurrent_rows) -> dict | None:
    """The built-in guard of rounds (guarded: the first step of every engine walked in each kind of round; copy
    engine, SM kernels, bulk kernels, NCCL can each meet a limit when several flows run at once, such as a link
    carrying a flow each way, the node's power or clocks): re-measure the round's pairs one at a time at the size
    `check` names and compare with what the round measured. A pair further apart than 1% or the noise the round's
    row states (whichever is larger: a small row moves between processes more than a round moves it) is a warning
    naming the step and the pair. Returns the node's comparison on its leader (None elsewhere)."""
    world = ctx.world
    size = check.sizes[0]
    diffs = []
    flows = check.flows or ()
    for src, dst in flows:
        rows = step.run(ctx, src, dst, [size]) if world.local_rank in (src, dst) else []
        for seq in rows:
            d = _round_vs_alone(concurrent_rows, seq)
            if d is not None:
                diffs.append(d)
        world.node_barrier(f"the sequential check of pair {src}->{dst}")
    parts = world.node_gather(diffs, "the concurrency check")
    if world.local_rank != 0:
        return None
    flat = [d for p in parts for d in p]
    worst = max(flat, key=lambda d: abs(d["diff"]) - d["tolerance"], default=None)
    ok = all(abs(d["diff"]) <= d["tolerance"] for d in flat)
    out = {"host": world.host, "step": f"{step.suite}/{step.label}", "engine": step.engine, "round": check.kind,
           "bytes": size, "pairs": flat, "worst_diff": max((abs(d["diff"]) for d in flat), default=0.0),
           "tolerance": ROUND_CHECK_TOLERANCE, "ok": ok}
    if not ok and worst is not None:
        print(f"ipcbench: warning: on {world.host} the {check.kind} round of {len(flows)} pairs measured "
              f"{step.suite}/{step.label} at {fmt_size(size)} up to {abs(worst['diff']):.1%} away from the same pairs "
              f"one at a time (worst: ranks {worst['src_rank']} -> {worst['dst_rank']}, {worst['concurrent']:.4g} in "
              f"the round, {worst['sequential']:.4g} alone; allowed {worst['tolerance']:.1%}): pairs measured at once "
              f"may share a link or a node limit here; rerun with --pairs sequential", file=sys.stderr, flush=True)
    return out


def _round_vs_alone(concurrent_rows, seq) -> dict | None:
    """One pair's row in the round against the same pair alone: rates (bandwidth, or 1/time for latency rows), their
    ratio less one, and what it may be: ROUND_CHECK_TOLERANCE, or the noise the round's row states (its own samples'
    and its kind's between-runs floor: core/rows.state_noise), whichever is larger. A round may move a row only
    within what the row says of itself."""
    conc = [r for r in concurrent_rows if (r.src_rank, r.dst_rank, r.bytes, r.direction) ==
            (seq.src_rank, seq.dst_rank, seq.bytes, seq.direction)]
    if not conc:
        return None
    c = conc[0]
    a, b = c.bw_gbps_median, seq.bw_gbps_median
    if a is None or b is None:  # latency steps: compare times
        a, b = 1 / c.time_us_median, 1 / seq.time_us_median
    if not (a and b):
        return None
    return {"src_rank": seq.src_rank, "dst_rank": seq.dst_rank, "concurrent": a, "sequential": b, "diff": a / b - 1,
            "tolerance": max(ROUND_CHECK_TOLERANCE, c.noise or 0.0)}
