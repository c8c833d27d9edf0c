"""ipcbench selftest: can this instrument be trusted here? Its own one-way rows against an independent anchor.

ipcbench's rows are checked size by size against the same transfers timed another way.

Run it once on a new machine type, under MPI like every measurement: `mpirun -np 2 ipcbench selftest` on one
GPU (two ranks share it: the same-GPU paths), `mpirun -np N` on N GPUs (pairs across GPUs), `mpirun -np 2N`
for both. It measures every one-way method of the copy, kernel, pool and vmm suites (selftest/plan.py says
on which pairs), then the same transfers through the anchor (selftest/anchor.py: one process, no IPC,
stream enqueue between events behind a spin kernel), and prints the difference of every row. Exit 0: every
row is within its noise plus its anchor's plus --tolerance (2%; --small-tolerance, 10%, for transfers the
anchor moves in under 10 us: plan.Tolerance); 1: a row is not (the rows are named), or a transfer failed
verification; 2: it cannot judge (no GPU, no mpirun, too little memory, ranks bound one per GPU, nothing
measured, a row without its anchor). Each row's verdict and the whole are a Status (ipcbench/status.py;
selftest/verdict.overall). The run directory holds the rows (results.csv, meta.json) and selftest.csv.

cli.py imports this module to parse and check the arguments before any rank starts (as the bench command's
config.py), so the runner and the anchor, which import CuPy, are imported when the run starts.
"""

from __future__ import annotations

import sys

from ipcbench.catalogue.planned import RowShape
from ipcbench.catalogue.suites import ORDER
from ipcbench.config import TOPOLOGIES, RunConfig
from ipcbench.core.methods import METHODS
from ipcbench.errors import UsageError, error_line
from ipcbench.run.console import say
from ipcbench.selftest import plan, verdict
from ipcbench.status import Status
from ipcbench.suites.registry import Step
from ipcbench.suites.transfer import pair_runner


def add_arguments(p) -> None:
    p.add_argument("--sizes", default=plan.DEFAULT_SIZES,
                   help=f"message sizes, as for the suites (default {plan.DEFAULT_SIZES})")
    p.add_argument("--methods", help="a comma list of one-way methods to check (default: every one of the "
                                     "copy, kernel, pool and vmm suites: " + ", ".join(plan.methods()) + ")")
    p.add_argument("--cross", choices=plan.CROSS, default="ring",
                   help="pairs across GPUs: a ring of the GPUs (each once as sender and once as receiver) or "
                        "every ordered pair (default ring)")
    p.add_argument("--tolerance", type=float, default=plan.TOLERANCE * 100, metavar="PCT",
                   help=f"allowed difference beyond both noises, percent (default {plan.TOLERANCE * 100:g})")
    p.add_argument("--small-tolerance", type=float, default=plan.SMALL_TOLERANCE * 100, metavar="PCT",
                   help="the same for transfers the anchor moves in under "
                        f"{plan.SMALL_US:g} us, where a rate depends on where the buffers lie (default "
                        f"{plan.SMALL_TOLERANCE * 100:g})")
    p.add_argument("--out", metavar="DIR", help="run directory (default results/<run-id>)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="give up on any wait for another rank after S seconds (default 300)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--dry-run", action="store_true",
                   help="the plan and its estimated time (the rows and the anchors); no GPU work")
    p.add_argument("--topology", choices=TOPOLOGIES,
                   help="with --dry-run: plan for a node whose GPU pairs are all linked so")
    p.add_argument("--ranks", type=int, metavar="N",
                   help="with --dry-run, started without mpirun: plan N ranks on the node (a login node: "
                        "`ipcbench selftest --dry-run --ranks 2`: two ranks on one GPU)")
    p.add_argument("--sm-copy", default=None, metavar="BxTxU", help="SM copy kernel shape (as for the suites)")
    p.add_argument("--sm-bulk", default=None, metavar="BxSxC[@N]", help="bulk-copy kernel shape (as for the suites)")


def build(ns, argv: list[str]):
    """(RunConfig of the measurement, method names, plan.Tolerance); UsageError names the option and why."""
    names = plan.methods()
    if ns.methods:
        want = [m.strip() for m in ns.methods.split(",") if m.strip()]
        unknown = [m for m in want if m not in names]
        if unknown or not want:
            raise UsageError(f"--methods: {', '.join(unknown) or 'none given'}: choose from {', '.join(names)}")
        names = [m for m in names if m in want]
    for option, pct in (("--tolerance", ns.tolerance), ("--small-tolerance", ns.small_tolerance)):
        if not (0 <= pct <= 50):
            raise UsageError(f"{option} must be in [0, 50] percent (got {pct:g})")
    suites = sorted({plan.suite_of(m) for m in names}, key=ORDER.index)
    cfg = RunConfig.from_options(suites=suites, sizes=ns.sizes, timeout=ns.timeout, out=ns.out, dry_run=ns.dry_run,
                                 quiet=ns.quiet, pairs="auto", serial_pairs="all", sm_copy=ns.sm_copy,
                                 sm_bulk=ns.sm_bulk, topology=ns.topology, ranks=ns.ranks,
                                 argv=["selftest", *argv])
    return cfg, names, plan.Tolerance(ns.tolerance / 100, ns.small_tolerance / 100)


def make_steps(names: list[str], sizes: list[int], cross: str):
    """make_steps(local_size, gpu_of) for run/runner.start: one step per method and one-way direction over
    the selftest's pairs (plan.pairs), each pair measured alone or in a round of disjoint pairs (never a
    permutation round: no run_round), as the run's pair mode allows."""
    def steps(n: int, gpu_of: list[int]):
        same, across = plan.pairs(gpu_of, cross)
        out = []
        for name in names:
            m = METHODS[name]
            for d in ("push", "pull"):
                if d in m.directions:
                    suite = plan.suite_of(name)
                    out.append(Step(suite, f"{name} {d}", same + across, list(sizes), pair_runner(suite, name, d),
                                    needs=(m.buffers, *m.gpu_needs), engine=m.engine, rounds_ok=True,
                                    writes=(RowShape(name, d),)))
        return out

    return steps


def measurable(ctx, names: list[str]) -> list[str]:
    """The methods whose needs (buffer kind, GPU feature) this node has: the ones walk measured."""
    return [n for n in names if all(ctx.has(k) for k in (METHODS[n].buffers, *METHODS[n].gpu_needs))]


def measure_anchors(s, measured: list[str], cross: str) -> dict:
    """Every anchor the rows of the `measured` methods need, a round of jobs at a time (plan.anchor_rounds: one job,
    or jobs of disjoint GPUs where the run's pair mode is concurrent), each on its driving GPU's lowest rank while
    the node's other ranks wait; {(host, key, bytes): Anchor} gathered on world rank 0 ({} elsewhere)."""
    from ipcbench.selftest import anchor

    ctx, world = s.ctx, s.world
    same, across = plan.pairs(ctx.gpu_of, cross)
    rounds = plan.anchor_rounds(plan.anchor_jobs(ctx.gpu_of, ctx.node_ranks, same, across, measured),
                                s.mode.concurrent)
    sizes = list(s.cfg.sizes)
    mine = {}
    for i, jobs in enumerate(rounds):
        what = "; ".join(key.describe() for _, key in jobs)
        say(world, f"[selftest] anchor round {i + 1}/{len(rounds)}: {what}, one process each, no IPC")
        world.node_barrier(f"the selftest anchors {what}")
        for owner, key in jobs:
            if world.local_rank == owner:
                mine.update({(world.host, k, n): a for (k, n), a in anchor.measure(ctx.gpu, key, sizes).items()})
        world.node_barrier(f"the selftest anchors {what} to end")
    parts = world.world_gather(mine, "the selftest anchors")
    return {k: v for p in parts for k, v in p.items()} if parts is not None else {}


def anchors_tail(names: list[str], sizes: list[int], cross: str):
    """run/runner.start's tail: the anchors after the rows, as the cost model expects them (catalogue/costs.py)."""
    def tail(gpu_of: list[int], node_ranks: list[int], mode) -> tuple[float, str]:
        from ipcbench.catalogue.costs import COSTS
        from ipcbench.run.costmodel import anchor_seconds

        units = plan.anchor_units(gpu_of, node_ranks, names, cross, sizes, mode.concurrent)
        gpus = len(set(gpu_of))
        per = COSTS.anchor_for(gpus)
        if per is None:
            return 0.0, (f"the anchors after the rows ({units} anchor measurements) are not in the estimate: the "
                         "cost model was never fitted to a selftest")
        return anchor_seconds(COSTS, units, gpus), (f"the anchors after the rows: {units} anchor measurements (a size "
                                                    f"at a place of its buffers) x {per * 1e3:.1f} ms")

    return tail


def run(cfg, names: list[str], tolerance: plan.Tolerance, cross: str) -> int:
    """The command (`build` made its arguments): measure, anchor, judge; every rank returns the same exit
    status."""
    from ipcbench.run import runner

    s = runner.start(cfg, make_steps(names, list(cfg.sizes), cross),
                     example="`mpirun -np 2 ipcbench selftest` (two ranks share one GPU), -np N on N GPUs",
                     tail=anchors_tail(names, list(cfg.sizes), cross))
    if isinstance(s, int):
        return s  # a dry run
    rows, round_checks = runner.measure(s)
    measured = measurable(s.ctx, names)
    runner.release(s, more_to_measure=True)  # the anchors need the memory the shared buffers held
    anchors = measure_anchors(s, measured, cross)
    world = s.world
    checks, extra = [], {}
    if world.rank == 0:
        checks = verdict.judge(rows, anchors, tolerance)
        verdict.write_csv(s.run_dir / "selftest.csv", checks)
        units = plan.anchor_units(s.ctx.gpu_of, s.ctx.node_ranks, measured, cross, list(s.cfg.sizes),
                                  s.mode.concurrent)
        extra = {"selftest": {**verdict.summary(checks, tolerance), "cross": cross, "methods": names,
                              "anchor_units": units}}
    status = runner.finish(s, rows, round_checks, extra)
    judged = 0
    if world.rank == 0:
        print()
        print("ipcbench selftest: each one-way row against the same transfer in one process (no IPC, stream "
              "enqueue between events behind a spin kernel); difference from the anchor, '!' beyond the "
              f"row's noise + the anchor's + {tolerance.describe()}")
        print(verdict.table(checks))
        print()
        print(verdict.anchors_table(anchors))
        print(f"-> {s.run_dir / 'selftest.csv'}")
        judged = _say(verdict.overall(checks), checks)
    judged = world.world_allreduce_max(judged, "the selftest's verdict")
    return max(status, judged) if judged != 2 else 2


def _say(status: Status, checks: list[verdict.RowVsAnchor]) -> int:
    """The verdict in words (stdout when it passed, one line on stderr when not); its exit code."""
    def named(cs):
        worst = sorted(cs, key=lambda c: -abs(c.diff or 0))[:5]
        return "; ".join(f"{c.key.method} {c.key.direction} {c.src_rank}->{c.dst_rank} {c.key.bytes} B: {c.why}"
                         for c in worst)

    if status is Status.PASS:
        print(f"selftest passed: {len(checks)} rows within their anchor's tolerance")
    elif status is Status.FAIL:
        bad = [c for c in checks if c.status is Status.FAIL]
        print(f"ipcbench: selftest FAILED: {len(bad)} of {len(checks)} rows differ from their anchor, e.g. "
              + named(bad), file=sys.stderr)
    elif not checks:
        print(error_line("the selftest measured nothing it could judge (every step was skipped: see above)"),
              file=sys.stderr)
    else:
        lost = [c for c in checks if c.status is Status.UNJUDGED]
        print(f"ipcbench: selftest cannot judge {len(lost)} of {len(checks)} rows, e.g. " + named(lost),
              file=sys.stderr)
    return status.exit_code
