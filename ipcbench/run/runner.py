"""One benchmark run under MPI: agree on the setup, build the context, walk the plan, write rows.

Every decision that could differ between ranks (the output directory, GPU counts and binding, memory,
pool support) is made collectively or by world rank 0 and broadcast, so a setup error ends every rank
with the same message instead of leaving one waiting. The plan (suites/registry.py) is a list of steps;
each step runs over the node's pair schedule with the other ranks waiting, and after each pair the
node's rows go to run/collect.RowSink. docs/architecture.md. A dry run goes through here too, on machines
without a GPU (a login node planning for a compute node): CuPy (core/gpu.py) is imported where a run's
setup first needs it, after the dry run has returned.
"""

from __future__ import annotations

import cProfile
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ipcbench import __version__
from ipcbench.catalogue.planned import merged
from ipcbench.config import RunConfig
from ipcbench.core.phases import PHASES, process_age_s
from ipcbench.core import mps, placement, topology
from ipcbench.core.context import Ctx
from ipcbench.core.rows import failed
from ipcbench.core.schedule import PairMode, per_gpu_pair
from ipcbench.core.world import World, binding_problem, gpu_for_local_rank
from ipcbench.errors import GpuError, UsageError
from ipcbench.evidence import take as evidence
from ipcbench.evidence.model import Evidence
from ipcbench.ipc.sharers import BUFFER_KINDS, setup_buffers, setup_gpu_features, setup_libraries
from ipcbench.record.meta_draft import MetaDraft
from ipcbench.record.meta_parts import GpuRecord, RankRecord, Skipped
from ipcbench.results import ResultsWriter
from ipcbench.run import costmodel
from ipcbench.run import meta as run_meta
from ipcbench.run import shm_release
from ipcbench.run.collect import RowSink
from ipcbench.run.console import matrices, say
from ipcbench.run.dryrun import dry_run, estimate_seconds
from ipcbench.run.outdir import choose_run_dir
from ipcbench.run.walk import agree_pair_mode, planned as walk_planned, rounds_of, walk
from ipcbench.sizes import fmt_size


def agree_on(world, decide):
    """World rank 0 runs decide() -> (value, error or None); every rank gets the pair; all raise alike."""
    result = decide() if world.rank == 0 else None
    world.barrier(world.comm, "world rank 0's decision")
    value, err = world.comm.bcast(result, root=0)
    if err:
        raise UsageError(err)
    return value


def _select_gpu(world: World):
    """Pick this rank's GPU, gather UUIDs per node, and refuse per-rank binding with an explanation."""
    from ipcbench.core import gpu as gpumod

    visible = gpumod.device_count()
    counts = world.node_allgather(visible, "the GPU count of every rank")
    if min(counts) == 0:
        bad = [r for r, c in enumerate(counts) if c == 0]
        raise UsageError(f"no CUDA GPU visible to node-local rank(s) {bad} on {world.host}")
    index = gpu_for_local_rank(world.local_rank, visible)
    info = gpumod.device_info(index)
    uuids = world.node_allgather(info.uuid, "the GPU UUID of every rank")
    problem = binding_problem(uuids, counts)
    if problem:
        raise UsageError(problem)
    return index, info


def slot_bytes(steps, sizes) -> int:
    """The largest transfer into a shared buffer slot: the largest --sizes, or a step's own sizes beyond them
    (the latency suite's sizes reach 64 KiB whatever --sizes says: `latency --sizes 4K` must not write 64 KiB
    messages past a 4 KiB slot)."""
    return max([max(sizes)] + [max(s.sizes) for s in steps if s.needs and s.sizes])


def slot_with_places(steps, sizes, placements: int) -> int:
    """slot_bytes with room for a row's placements (core/placement.py) at every size up to PLACED_BYTES, so
    that a run of small --sizes places its samples as the full sweep does."""
    largest = slot_bytes(steps, sizes)
    return max(largest, min(largest, placement.PLACED_BYTES) + placement.span(placements))


def _check_memory(world, gpu, sizes, steps, placements: int) -> None:
    kinds = {k for s in steps for k in s.needs if k in BUFFER_KINDS} or {"legacy"}  # buffer kinds, not libraries
    slot = -(-slot_with_places(steps, sizes, placements) // 4096) * 4096
    need = len(kinds) * slot * (1 + world.local_size) + (64 << 20)
    sharing = world.node_allgather(gpu.index, "GPU sharing check").count(gpu.index)
    free = min(world.node_allgather(gpu.free_memory(), "the free memory of every GPU"))
    if need * sharing > free * 0.9:
        raise UsageError(f"the largest size {fmt_size(max(sizes))} needs {need * sharing / 2**30:.1f} GiB per GPU "
                         f"({sharing} rank(s) x {need / 2**30:.2f} GiB) but only {free / 2**30:.1f} GiB is free: "
                         f"use smaller --sizes or fewer ranks per GPU")


def _setup_buffers(ctx, steps, sizes) -> None:
    needs = {k for s in steps for k in s.needs}
    setup_buffers(ctx, needs, slot_with_places(steps, sizes, ctx.rule.placements))
    setup_libraries(ctx, needs)
    setup_gpu_features(ctx, needs)


@dataclass
class Session:
    """One run once every rank has passed its setup: what walking the plan and closing the run need.
    `meta` and `writer` are world rank 0's (None elsewhere)."""

    cfg: RunConfig
    world: World
    steps: list
    run_dir: Path
    gpu: Any  # core/gpu.Gpu (or a test's fake)
    ctx: Ctx
    mode: PairMode
    meta: MetaDraft | None
    writer: ResultsWriter | None
    sink: RowSink
    t0: float = field(default_factory=time.monotonic)
    timings: dict = field(default_factory=dict)
    evidence_before: Any = None  # this node's evidence before the first measurement (local rank 0's; evidence/take.py)
    evidence_after: Any = None  # its after snapshot being read (evidence/take.Reading), started by release


def run(cfg) -> int:
    """`ipcbench SUITE...`: start the run, walk its plan, release what the suites hold, close it."""
    s = start(cfg)
    if isinstance(s, int):
        return s  # a dry run
    rows, checks = measure(s)
    release(s)
    return finish(s, rows, checks)


@PHASES.wrap("start")
def start(cfg, make_steps=None, example: str = "`mpirun -np 4 ipcbench all`", tail=None):
    """Every collective decision of a run's setup, the run directory and its meta.json: a Session, or the
    dry run's exit status. `make_steps(local_size, gpu_of)`: a command's own plan (ipcbench selftest, check;
    in a dry run, which selects no GPU, gpu_of is what it assumes: rank i on GPU i mod the GPUs NVML sees, one per
    rank without NVML); the configuration's suites otherwise. `example`: how to start it, for the error without
    mpirun. `tail(gpu_of, node_ranks, mode)`: what the command does beyond its suites, as (seconds the cost model
    expects, what it is) for the estimate (run/dryrun.py); None: nothing."""

    def plan(n: int, gpu_of: list[int]) -> list:
        return make_steps(n, gpu_of) if make_steps else cfg.steps(n)

    begun = _begin(cfg, plan, example, tail)
    if isinstance(begun, int):  # a dry run's exit status
        return begun
    world, run_dir = begun
    with PHASES.phase("gpu"):
        index, info = _select_gpu(world)
        gpu_of = world.node_allgather(index, "the GPU of every rank")
        steps = plan(world.local_size, gpu_of)
        from ipcbench.core import gpu as gpumod

        gpu = gpumod.Gpu(index, copy_shape=cfg.copy_shape, bulk_shape=cfg.bulk_shape)
    with PHASES.phase("mps"):
        mps_on, mps_meta = _detect_mps(world, index)
        _check_memory(world, gpu, list(cfg.sizes), steps, cfg.rule.placements)
    ctx = Ctx(world=world, gpu=gpu, buffers={}, rule=cfg.rule, verify=cfg.verify, run_id=run_dir.name,
              gpu_of=gpu_of, node_ranks=world.node_ranks, mps=mps_on,
              corrupt=os.environ.get("IPCBENCH_FAULT_CORRUPT", ""))
    ctx.add_cleanup(shm_release.arm(ctx))  # the first release added runs last: the driver's event files (issue 43)
    _make_lanes(ctx, world, gpu, cfg.rule.contexts)
    preludes = [step.prelude(ctx, step.pairs) for step in steps if step.prelude]  # beside the setup (Step.prelude)
    with PHASES.phase("evidence"):  # every rank has its GPU: NVML reads the node while the run sets up
        before = evidence.start_snapshot(world, "before", ctx.helper_pids)
    with PHASES.phase("topology"):
        topo = _node_topology() if world.local_rank == 0 else None
        world.node_barrier("the topology of this node")
        topo = world.node.bcast(topo, root=0)
        mode = _decide_pair_mode(world, cfg.pairs, gpu_of, topo, cfg.serial_pairs, cfg.quick, cfg.gpu_pairs)
    with PHASES.phase("meta"):
        meta = _gather_meta(world, info, run_dir.name, cfg, topo, mode)
    _plan_in_meta(world, meta, steps, mode, gpu_of, mps_meta)
    # No try/finally from here: on an error the caller aborts the whole job, and a collective cleanup
    # would only wait for a rank that is gone.
    with PHASES.phase("buffers"):
        _setup_buffers(ctx, steps, list(cfg.sizes))
    writer = None
    if meta is not None:  # the run passed its setup: now the directory exists, with meta.json first (rank 0)
        run_dir.mkdir(parents=True, exist_ok=True)
        meta.write(run_dir)
        writer = ResultsWriter(run_dir)
    world.barrier(world.comm, "the run directory")
    s = Session(cfg, world, steps, run_dir, gpu, ctx, mode, meta, writer, RowSink(world, writer, str(run_dir)))
    with PHASES.phase("prelude"):
        for wait in preludes:
            wait()
        world.node_barrier("the processes the setup started (Step.prelude) to end")
    with PHASES.phase("evidence"):
        s.evidence_before = before.done(world)  # before any measurement
    _announce(s, info.name, tail, mps_meta)
    return s


def _make_lanes(ctx: Ctx, world: World, gpu, k: int) -> None:
    """The contexts each sample of a small row spreads over (core/lanes.py): k green contexts per rank, each with a
    stream and the four timing events of lanes.time_lanes (phase "contexts"); collective over the node, which agrees
    on the fewest any rank made (the two ranks of a pair must spread alike). Where the driver makes none (no green
    contexts: CUDA before 12.4, older cuda.bindings), one context, said once; the rows' `contexts` column says it of
    each row."""
    made, why = [], ""
    if k > 1:
        try:
            with PHASES.phase("contexts"):
                made = gpu.lanes(k)
        except (GpuError, ImportError, AttributeError) as e:
            why = str(e)
    fewest = min(world.node_allgather(len(made), "the contexts every rank made"))
    ctx.lanes = made[:fewest] if fewest > 1 else []
    ctx.lane_events = [tuple(gpu.event() for _ in range(4)) for _ in ctx.lanes]  # lanes.time_lanes' four
    if k > 1 and not ctx.lanes and world.rank == 0:
        print(f"ipcbench: every row samples one CUDA context (--contexts {k} asked for more: "
              f"{why or 'a rank of the node made none'}); rows keep their kinds' between-runs floors", flush=True)


def _plan_in_meta(world, meta: MetaDraft | None, steps, mode, gpu_of: list[int], mps_meta) -> None:
    """Into world rank 0's `meta`: the MPS state, the plan as the cost model sees it (tools/costfit.py costs any
    command's run from it), which round measures each row, and every node's planned rows (gathered from the node
    leaders: each node plans its own pairs), against which the reader holds results.csv (record/agreement.py)."""
    mine = walk_planned(steps, mode, gpu_of, world.host) if world.local_rank == 0 else []
    every = world.world_gather(mine, "the planned rows of every node")
    if meta is None:
        return
    meta.mps = mps_meta
    meta.plan = [p.as_dict() for p in costmodel.plan_steps(steps, mode, len(set(gpu_of)))]
    meta.pair_mode = {**(meta.pair_mode or {}), "rounds": rounds_of(steps, mode)}
    meta.planned_rows = merged([p for node in every for p in node])


def _begin(cfg, plan, example: str, tail):
    """The world and the run directory it agrees on (world, run_dir); or, for a dry run (without mpirun: --ranks or
    the GPUs NVML sees), its exit status after the plan was printed."""
    launch_s = process_age_s()  # Python, imports and the launcher, before the run's first phase
    if launch_s is not None:
        PHASES.totals["launch"] = launch_s
    with PHASES.phase("world"):
        world = World.create(timeout=cfg.timeout_s)
    if world.size < 2 and not cfg.dry_run:
        raise UsageError(f"ipcbench measures pairs of processes: start it with mpirun -np N (N >= 2), e.g. {example}")
    # The run directory as the run chooses it, in a dry run too: a dry run refuses the --out that a run would
    run_dir = Path(agree_on(world, lambda: _str_dir(choose_run_dir(cfg.out, run_meta.make_run_id(world.hosts[0])))))
    if world.size < 2:
        gpus = cfg.ranks or topology.nvml_gpu_count() or 0  # --ranks: a login node plans for a compute node
        if gpus < 2:
            raise UsageError("a dry run without mpirun plans one rank per GPU, but NVML sees "
                             f"{gpus} GPU(s) here: give --ranks N, or use `mpirun -np N ipcbench ... --dry-run`")
        return dry_run(world, cfg, plan, assumed_ranks=gpus, tail=tail)
    if cfg.dry_run:
        return dry_run(world, cfg, plan, tail=tail)
    return world, run_dir


def _announce(s: Session, gpu_name: str, tail, mps_meta) -> None:
    """The run's first lines (rank 0): ranks, GPUs, suites, sizes, rule and the estimate; the pair mode; MPS."""
    world, cfg, gpu_of, mode, sizes = s.world, s.cfg, s.ctx.gpu_of, s.mode, list(s.cfg.sizes)
    estimated = estimate_seconds(s.steps, cfg.rule, mode, -(-len(gpu_of) // len(set(gpu_of))), gpus=len(set(gpu_of)))
    estimated += tail(gpu_of, world.node_ranks, mode)[0] if tail else 0.0
    say(world, f"ipcbench {__version__}: {world.size} ranks on {world.n_nodes} node(s), "
               f"{len(set(gpu_of))} GPU(s) per node ({gpu_name}); suites {', '.join(cfg.suites)}; "
               f"{len(sizes)} sizes {fmt_size(sizes[0])}..{fmt_size(sizes[-1])}; {cfg.rule.describe()}; "
               f"estimated {estimated:.0f} s")
    say(world, f"pairs: {mode.mode} ({mode.reason}); serial steps: {mode.serial.describe()}; "
               f"results: {s.run_dir / 'results.csv'}")
    say(world, f"MPS: {mps.summary(mps_meta)}")


@PHASES.wrap("measure")
def measure(s: Session):
    """Walk the plan (run/walk.py): (every row rank 0 holds, every node's concurrency checks on rank 0)."""
    profile = _profiler()
    skipped: list[dict] = []  # every rank passes one: walk gathers every node's on world rank 0
    rows, node_checks = walk(s.ctx, s.steps, s.sink, quiet=s.cfg.quiet, mode=s.mode, timings=s.timings,
                             skipped=skipped)
    if s.meta is not None:
        s.meta.skipped = [Skipped.from_json(d) for d in skipped]
    if profile:
        profile.disable()
        profile.dump_stats(os.path.join(os.environ["IPCBENCH_PROFILE"], f"rank{s.world.rank}.prof"))
    checks = s.world.world_gather(node_checks, "the concurrency checks")
    return rows, [c for node in checks for c in node] if checks else []


@PHASES.wrap("release")
def release(s: Session, more_to_measure: bool = False) -> None:
    """Free what the setup and the suites hold (collective): the context's releases, the last added first
    (core/context.Ctx.clean_up): interprocess events and NCCL communicators before the shared buffers, the files
    the driver made for the events last (run/shm_release.py). Unless the command measures more after it (selftest's
    anchors), the node's after evidence is read meanwhile."""
    if not more_to_measure:
        s.evidence_after = evidence.start_snapshot(s.world, "after", s.ctx.helper_pids)
    s.ctx.clean_up()


def finish(s: Session, all_rows, checks, extra_meta: dict | None = None) -> int:
    """Close the run: meta.json completed (with `extra_meta`), the CSV closed, the matrices and the summary
    printed; every rank returns the run's exit status (1 when a row failed verification)."""
    world, cfg, meta, writer = s.world, s.cfg, s.meta, s.writer
    status = 0
    with PHASES.phase("evidence"):
        # after the last measurement; the run's own pids as the before snapshot had them
        node_evidence = evidence.record(world, s.evidence_before, s.evidence_after, s.ctx.helper_pids)
    breakdown = world.world_gather(PHASES.snapshot(), "where every rank's time went")
    if world.rank == 0:
        assert meta is not None and writer is not None  # world rank 0 writes meta.json and results.csv (start)
        meta.time_breakdown_s = {f"rank {i}": b for i, b in enumerate(breakdown)}
        meta.evidence = Evidence.from_json(node_evidence)
        bad = [r for r in all_rows if failed(r, cfg.verify)]
        meta.end, meta.status, meta.wall_s = run_meta.now_iso(), "complete", round(time.monotonic() - s.t0, 2)
        meta.rows, meta.failed_rows, meta.suite_wall_s = writer.count, len(bad), s.timings
        meta = s.meta = replace(meta, **(extra_meta or {}))  # a command's own fields (selftest's verdict)
        if checks:
            meta.pair_mode = {**(meta.pair_mode or {}), "check": checks}
        meta.write(s.run_dir)
        writer.close()
        if not cfg.quiet:
            print()
            print(matrices(all_rows, host=world.hosts[0]))
        print(f"{writer.count} rows in {meta.wall_s:.1f} s -> {s.run_dir / 'results.csv'}")
        if bad:
            print(f"ipcbench: {len(bad)} row(s) FAILED verification (verified=false in the CSV), e.g. "
                  f"{bad[0].suite}/{bad[0].method} {bad[0].direction} {bad[0].bytes} B: {bad[0].note}", file=sys.stderr)
            status = 1
    status = world.world_allreduce_max(status, "the run's exit status")
    s.gpu.close()
    return status


def _str_dir(decision):
    path, err = decision
    return (str(path) if path else None, err)


def _decide_pair_mode(world, requested: str, gpu_of: list[int], topo: dict | None, serial: str = "auto",
                      quick: bool = False, gpu_pairs: bool = False):
    """This node's pair mode and serial-step coverage from the links between the GPUs its ranks use
    (run/walk.agree_pair_mode)."""
    used = set(gpu_of)
    kinds = None
    if topo and topo.get("nvml") and topo.get("links"):
        kinds = [ln["kind"] for ln in topo["links"] if ln["src_gpu"] in used and ln["dst_gpu"] in used] or None
    mode = agree_pair_mode(world, requested, max(Counter(gpu_of).values()), kinds, world.local_size, serial, quick)
    return per_gpu_pair(mode, gpu_pairs, gpu_of, kinds)


def _detect_mps(world, index: int):
    """Does each GPU's work run under MPS (core/mps.py)? Read on every rank (its context exists), decided
    per node from every rank's readings; a refusal on any node (ranks sharing a GPU that disagree, or not
    what IPCBENCH_EXPECT_MPS asked for) ends every rank alike. -> (this rank's GPU is under MPS,
    {host: meta.json entry})."""
    readings = world.node_allgather({**mps.read(index), "rank": world.rank}, "the MPS readings of every rank")
    status = mps.decide(readings, world.host)
    per_host = world.world_allgather((world.host, status.error, status.as_meta() if world.local_rank == 0 else None),
                                     "the MPS status of every node")
    errors = [e for _, e, _ in per_host if e]
    if errors:
        raise UsageError(errors[0])
    return status.gpus[index], {h: m for h, _, m in per_host if m is not None}


def _profiler():
    """IPCBENCH_PROFILE=DIR: profile each rank's walk with cProfile into DIR/rank<N>.prof (development)."""
    if not os.environ.get("IPCBENCH_PROFILE"):
        return None
    os.makedirs(os.environ["IPCBENCH_PROFILE"], exist_ok=True)
    prof = cProfile.Profile()
    prof.enable()
    return prof


def _gather_meta(world, info, run_id, cfg, topo, mode) -> MetaDraft | None:
    mine = {"rank": world.rank, "host": world.host, "local_rank": world.local_rank, "gpu": info.index,
            "pid": os.getpid(),
            "gpu_info": {**info.as_dict(), "mem_bw_gbps": run_meta.mem_bandwidth_gbps(info.pci_bus_id)}}
    ranks = world.world_gather(mine, "metadata")
    topos = world.world_gather((world.host, topo if world.local_rank == 0 else None, mode.as_dict()), "topology")
    if world.rank != 0:
        return None
    meta = run_meta.base_meta(run_id, list(cfg.argv))
    meta.hosts = world.hosts
    meta.ranks = [RankRecord.from_json(r) for r in ranks]
    gpus: dict[str, dict] = {}
    for r in ranks:
        gpus.setdefault(r["host"], {})[r["gpu"]] = r["gpu_info"]
    meta.gpus = {h: [GpuRecord.from_json(g[i]) for i in sorted(g)] for h, g in gpus.items()}
    per_gpu = [sum(1 for r in ranks if r["host"] == h and r["gpu"] == g) for h, gs in gpus.items() for g in gs]
    meta.ranks_per_gpu = max(per_gpu)
    meta.topology = {h: t for h, t, _ in topos if t is not None}
    modes = {h: m for h, t, m in topos if t is not None}
    meta.pair_mode = {**modes[world.hosts[0]], "per_host": modes}
    meta.versions = {**run_meta.cuda_versions(), **run_meta.library_versions()}
    meta.suites = list(cfg.suites)
    meta.sizes = list(cfg.sizes)
    meta.options = cfg.options_meta()
    meta.slurm_job_id = os.environ.get("SLURM_JOB_ID")
    return meta


def _node_topology() -> dict:
    """P2P access matrix (CUDA) and NVML link table for every GPU this process sees."""
    from cupy.cuda import runtime

    from ipcbench.core import gpu as gpumod

    n = runtime.getDeviceCount()
    p2p = [[1 if i == j else int(runtime.deviceCanAccessPeer(i, j)) for j in range(n)] for i in range(n)]
    links = topology.gpu_links([gpumod.device_info(i).pci_bus_id for i in range(n)])
    return {"p2p_matrix": p2p, **links}
