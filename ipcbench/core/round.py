"""The permutation round: flows in which every rank of the node sends at most once and receives at most once
(core/schedule.permutation_rounds: rank i -> rank i+k mod N), all measured at the same time.

Each flow is measured as core/pair.py measures one pair (its roles, batches, calibration, placements, row: a
core/pair.PairSweep per flow this rank is in), but every rank of the node takes part in every sample at once: fill
the sources and poison the destinations -> node barrier -> each rank's one driven flow timed behind its gate -> every
flow's time gathered on every rank -> each destination verifies. A rank drives at most one flow (push: the one it
sends, pull: the one it receives), so the round's flows run side by side on the GPUs. Every flow takes the same
count of transfers per sample (the largest any driver calibrated) and the same number of samples: sampling stops when
every flow's samples answer the rule (sampler.should_stop), a decision every rank makes alike from the gathered
times. Only one-sided engines (ce, sm, sm_bulk): a two-sided transfer's send meets its receive on one pair's
communicator. docs/architecture.md, "Pairs at once".
"""

from __future__ import annotations

import math

from ipcbench.core import placement
from ipcbench.core.pair import PairSweep, time_batch
from ipcbench.core.phases import PHASES
from ipcbench.core.sampler import SampleSet, should_stop
from ipcbench.core.stats import poison_seed, seed_for
from ipcbench.results import Row

Flow = tuple[int, int]


def round_roles(flows: list[Flow], me: int) -> tuple[Flow | None, Flow | None]:
    """(the flow this rank sends, the flow it receives) of a permutation round; None where it has none. A round in
    which a rank sends or receives twice is no permutation round."""
    out = [f for f in flows if f[0] == me]
    into = [f for f in flows if f[1] == me]
    if len(out) > 1 or len(into) > 1:
        raise ValueError(f"rank {me} sends {len(out)} and receives {len(into)} flows of the round {flows}: a "
                         f"permutation round has each rank send at most once and receive at most once")
    return (out[0] if out else None), (into[0] if into else None)


def measure_round(ctx, suite: str, method, direction: str, flows: list[Flow], sizes: list[int],
                  row_direction: str | None = None, kind: str = "", note: str = "") -> list[Row]:
    """Collective over the node: every rank of the node calls this, in the same order, whether it is in a flow of
    the round or not. Returns the rows of the flow this rank sends (one per size), labelled as core/pair.
    measure_pair labels them (`row_direction`, `kind`, `note`)."""
    if method.two_sided:
        raise ValueError(f"{method.name} is two-sided: its pairs are measured in rounds of disjoint pairs")
    w = ctx.world
    flows = [(int(a), int(b)) for a, b in flows]
    sends, receives = round_roles(flows, w.local_rank)
    sweeps = {f: PairSweep(ctx, suite, method, direction, *f, contexts=False)
              for f in (sends, receives) if f is not None}
    rows = []
    for nbytes in sizes:
        with PHASES.phase("calibrate"):
            batch, n, enough = _agreed_batch(ctx, sweeps, nbytes)
        with PHASES.phase("sample"):
            series, mine = _sample_round(ctx, sweeps, flows, batch, nbytes, n, enough)
        everyone = w.node_allgather(mine, "the round's checks")  # flow -> (checks, mismatches, facts), by its ends
        if sends is None:
            continue
        checks, bad, facts = _merged(everyone, sends)
        sweep = sweeps[sends]
        got = SampleSet(series[sends], n, 0, 0)
        rows.append(sweep.row(nbytes, got, n, batch if sweep.roles.driving else None, (checks, bad), facts,
                              row_direction, kind, note))
    return rows


def _agreed_batch(ctx, sweeps: dict, nbytes: int):
    """(this rank's batch or None, the round's transfers per sample, the round's stopping noise): each driver
    calibrates its flow, then every flow takes the largest count and every rank the smallest `enough`."""
    driven = [(f, s) for f, s in sweeps.items() if s.roles.driving]
    got = driven[0][1].calibrated(nbytes) if driven else None
    enough = min((s.enough_noise(nbytes) for s in sweeps.values()), default=math.inf)
    agreed = ctx.world.node_allgather((got[1] if got else 0, enough), "the round's transfers per sample")
    n = max(c for c, _ in agreed)
    enough = min(e for _, e in agreed)
    return (got[0](n) if got else None), n, (0.0 if math.isinf(enough) else enough)


def _sample_round(ctx, sweeps: dict, flows: list[Flow], batch, nbytes: int, n: int, enough: float):
    """Samples of every flow of the round at once until every flow's answer is known. Returns ({flow: its µs per
    transfer of each sample}, {flow this rank received: (checks, mismatches, {})} | {flow it drove: (0, 0,
    facts)})."""
    ctx_gpu, w = ctx.gpu, ctx.world
    series: dict[Flow, list[float]] = {f: [] for f in flows}
    places = min((s.placements(nbytes) for s in sweeps.values()), default=1)
    places = min(w.node_allgather(places, "the round's placements"))
    checks: dict[Flow, list[int]] = {f: [0, 0] for f, s in sweeps.items() if s.roles.receiving}
    driven = next((f for f, s in sweeps.items() if s.roles.driving), None)
    clocks: dict[Flow, list] = {f: [] for f in sweeps}
    while True:
        s = len(next(iter(series.values())))
        off = placement.place_offset(s % places)
        with PHASES.phase("fill"):
            for f, sw in sweeps.items():
                if sw.me in sw.roles.sources:
                    ctx_gpu.fill(sw.bufs.src + off, nbytes, seed_for(w.rank, nbytes, s, sw.label))
                if sw.roles.receiving:
                    ctx_gpu.fill(sw.bufs.inbox_slot(sw.roles.peer) + off, nbytes,
                                 poison_seed(seed_for(sw.peer_world, nbytes, s, sw.label)))
            ctx_gpu.wait(what="fill/poison")
        with PHASES.phase("barrier"):
            w.node_barrier("the other flows of the round")
        mine = None
        if batch is not None:
            mine = (driven, time_batch(ctx_gpu, batch.at(off)), ctx_gpu.gate_clock_mhz())
        with PHASES.phase("exchange"):
            timed = [t for t in w.node_allgather(mine, "the round's times") if t is not None]
        for f, ms, clock in timed:
            series[tuple(f)].append(ms * 1e3 / n)
            if tuple(f) in clocks:
                clocks[tuple(f)].append(clock)
        for f, tally in checks.items():
            sw = sweeps[f]
            if ctx.verify:
                with PHASES.phase("verify"):
                    inbox = sw.bufs.inbox_slot(sw.roles.peer) + off
                    if ctx.corrupt == sw.method.name:
                        ctx_gpu.corrupt(inbox, nbytes)
                    tally[1] += ctx_gpu.verify(inbox, nbytes, seed_for(sw.peer_world, nbytes, s, sw.label))
                tally[0] += 1
        if all(should_stop(ctx.rule, times, n, enough) for times in series.values()):
            break
    for f, sw in sweeps.items():
        sw.clocks = clocks[f]
    out: dict[Flow, tuple[int, int, dict]] = {f: (c, bad, {}) for f, (c, bad) in checks.items()}
    if driven is not None and batch is not None:
        c, bad, _ = out.get(driven, (0, 0, {}))
        out[driven] = (c, bad, batch.facts)
    return series, out


def _merged(everyone: list[dict], flow: Flow) -> tuple[int, int, dict]:
    """A flow's checks, mismatches and the driver's facts from every rank's report."""
    checks = bad = 0
    facts: dict = {}
    for report in everyone:
        c, b, f = report.get(flow, (0, 0, {}))
        checks, bad, facts = checks + c, bad + b, facts or f
    return checks, bad, facts
