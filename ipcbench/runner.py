"""One benchmark run under MPI: set up the world, the GPU and the shared buffers, walk the plan, write rows.

The plan (suites.py) is a list of steps; each step runs over the node's pair schedule with the other
ranks waiting, and after each pair the node's rows go to collect.RowSink: world rank 0 writes its node's
rows to results.csv as they come; other nodes' leaders keep theirs in <run_dir>/nodes/<host>.csv and
hand them over at the end (fleet runs, where every node measures its own pairs at the same time).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from . import __version__
from .results import ResultsWriter, write_meta
from .sizes import fmt_size
from .world import World, binding_problem, gpu_for_local_rank


class UsageError(Exception):
    """Bad input or an unusable setup: one line to the user, exit code 2."""


def say(world, *msg) -> None:
    if world.rank == 0:
        print(*msg, flush=True)


def estimate_seconds(steps, opts) -> float:
    """Rough duration: per measurement, samples x min-time plus calibration and coordination."""
    per = opts.samples * opts.min_time_s + 0.25 * opts.min_time_s + 0.006
    return sum(s.measurements * s.cost * per for s in steps) + 3.0


def dry_run(world: World, args, steps, sizes, opts, assumed_ranks: int | None = None) -> int:
    """Print the plan (no GPU work) and a machine-readable `PLAN {json}` line.

    Under mpirun the plan is for the job's ranks; started alone (`assumed_ranks`) it is for one rank per
    GPU of this node, i.e. for `mpirun -np <GPUs> ipcbench ...`.
    """
    from .topology import nvml_gpu_count

    local = assumed_ranks or world.local_size
    info = world.comm.allgather((world.host, local, nvml_gpu_count()))
    per_node = {}
    for host, n, g in info:
        per_node[host] = (n, g)
    if world.rank == 0:
        if assumed_ranks:
            print(f"(started without mpirun: planning `mpirun -np {assumed_ranks}`, one rank per GPU here)")
        est = estimate_seconds(steps, opts)
        pairs = local * (local - 1)
        print("ipcbench plan (dry run: no GPU work)")
        print(f"  nodes:   {world.n_nodes} ({', '.join(f'{h}: {n} ranks' for h, (n, _) in per_node.items())})")
        gpus = {h: (g if g is not None else n) for h, (n, g) in per_node.items()}
        src = "NVML" if all(g is not None for _, g in per_node.values()) else "assumed one per rank (no NVML)"
        print(f"  GPUs:    {', '.join(f'{h}: {g}' for h, g in gpus.items())} ({src})")
        print(f"  pairs:   {pairs} ordered per node (node rank 0's node), measured one pair at a time; "
              f"all nodes measure at once")
        print(f"  suites:  {', '.join(args.suites_resolved)}")
        print(f"  sizes:   {len(sizes)} ({fmt_size(sizes[0])} .. {fmt_size(sizes[-1])})")
        print("  steps:")
        for s in steps:
            print(f"    {s.suite:8s} {s.label:24s} {s.measurements:5d} measurements")
        total = sum(s.measurements for s in steps)
        print(f"  measurements per node: {total}; samples {opts.samples} x >= {opts.min_time_s * 1e3:g} ms")
        print(f"  estimated duration: {est:.0f} s")
        plan = {"nodes": world.n_nodes, "hosts": list(per_node), "ranks": assumed_ranks or world.size,
                "ranks_per_node": {h: n for h, (n, _) in per_node.items()}, "gpus_per_node": gpus,
                "suites": args.suites_resolved, "sizes": sizes, "measurements": total,
                "estimated_s": round(est, 1)}
        print("PLAN " + json.dumps(plan), flush=True)
    return 0


def _select_gpu(world: World):
    """Pick this rank's GPU, gather UUIDs per node, and refuse per-rank binding with an explanation."""
    from . import gpu as gpumod

    visible = gpumod.device_count()
    counts = world.node_allgather(visible, "the GPU count of every rank")
    if min(counts) == 0:
        bad = [r for r, c in enumerate(counts) if c == 0]
        raise UsageError(f"no CUDA GPU visible to node-local rank(s) {bad} on {world.host}")
    index = gpu_for_local_rank(world.local_rank, visible)
    info = gpumod.describe(index)
    uuids = world.node_allgather(info.uuid, "the GPU UUID of every rank")
    problem = binding_problem(uuids, counts)
    if problem:
        raise UsageError(problem)
    return index, info, uuids


def run(args, argv: list[str]) -> int:
    from .measure import Ctx, Options
    from .suites import plan

    world = World.create(timeout=args.timeout)
    sizes = args.sizes_list
    opts = Options(samples=args.samples, min_time_s=args.min_time_s, verify=not args.no_verify)
    if world.size < 2 and args.dry_run:
        from .topology import nvml_gpu_count

        gpus = nvml_gpu_count() or 0
        if gpus < 2:
            raise UsageError("a dry run without mpirun plans one rank per GPU, but NVML sees "
                             f"{gpus} GPU(s) here: use `mpirun -np N ipcbench ... --dry-run`")
        return dry_run(world, args, plan(args.suites_resolved, gpus, sizes), sizes, opts, assumed_ranks=gpus)
    if world.size < 2:
        raise UsageError("ipcbench measures pairs of processes: start it with mpirun -np N (N >= 2), "
                         "e.g. `mpirun -np 4 ipcbench all`")
    steps = plan(args.suites_resolved, world.local_size, sizes)
    if args.dry_run:
        return dry_run(world, args, steps, sizes, opts)

    # Output directory: rank 0 decides and checks it before any GPU work.
    err = None
    run_dir = None
    if world.rank == 0:
        from .meta import make_run_id

        run_dir = Path(args.out) if args.out else Path("results") / make_run_id(world.hosts[0])
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            probe = run_dir / ".write-test"
            probe.write_text("x")
            probe.unlink()
        except OSError as e:
            err = f"cannot write results to {run_dir}: {e.strerror or e}"
    err, run_dir = world.comm.bcast((err, str(run_dir) if run_dir else None), root=0)
    if err:
        raise UsageError(err)
    run_id = Path(run_dir).name

    index, info, uuids = _select_gpu(world)
    from .gpu import Gpu

    gpu = Gpu(index, copy_shape=args.copy_shape)
    _check_memory(world, gpu, sizes, steps)

    gpu_of = world.node_allgather(index, "the GPU of every rank")
    ctx = Ctx(world=world, gpu=gpu, buffers={}, opts=opts, run_id=run_id, gpu_of=gpu_of)
    ctx.node_ranks  # noqa: B018  (collective: everyone learns the node's world ranks now)
    meta = _gather_meta(world, ctx, info, run_id, argv, args, sizes)
    if world.rank == 0:
        write_meta(run_dir, meta)
    writer = ResultsWriter(run_dir) if world.rank == 0 else None
    from .collect import RowSink

    sink = RowSink(world, writer, run_dir)
    t0 = time.monotonic()
    # No try/finally here: on an error the caller aborts the whole job, and a collective cleanup
    # would only wait for a rank that is gone.
    _setup_buffers(ctx, steps, sizes)
    say(world, f"ipcbench {__version__}: {world.size} ranks on {world.n_nodes} node(s), "
               f"{len(set(gpu_of))} GPU(s) per node ({info.name}); suites {', '.join(args.suites_resolved)}; "
               f"{len(sizes)} sizes {fmt_size(sizes[0])}..{fmt_size(sizes[-1])}; "
               f"estimated {estimate_seconds(steps, opts):.0f} s")
    say(world, f"results: {Path(run_dir) / 'results.csv'}")
    all_rows = _walk(ctx, steps, sink, quiet=args.quiet)
    unverified = world.world_allreduce_max(ctx.unverified, "the verification tally")
    if "event_ipc" in ctx.state:
        ctx.state["event_ipc"].close()
    for bs in ctx.buffers.values():
        bs.destroy(world)
    if world.rank == 0:
        meta["end"] = _now()
        meta["status"] = "complete"
        meta["wall_s"] = round(time.monotonic() - t0, 2)
        meta["rows"] = writer.count
        write_meta(run_dir, meta)
        writer.close()
        if not args.quiet:
            from .console import matrices

            print()
            print(matrices(all_rows, host=world.hosts[0]))
        print(f"{writer.count} rows in {meta['wall_s']:.1f} s -> {Path(run_dir) / 'results.csv'}")
        if unverified:
            print(f"ipcbench: {unverified}+ row(s) FAILED verification (verified=false in the CSV)", file=sys.stderr)
    gpu.close()
    return 1 if unverified else 0


def _now() -> str:
    from .meta import now_iso

    return now_iso()


def _check_memory(world, gpu, sizes, steps) -> None:
    kinds = {k for s in steps for k in s.needs} or {"legacy"}
    slot = -(-max(sizes) // 4096) * 4096
    need = len(kinds) * slot * (1 + world.local_size) + (64 << 20)
    sharing = world.node_allgather(gpu.index, "GPU sharing check").count(gpu.index)
    free = gpu.free_memory()
    if need * sharing > free * 0.9:
        raise UsageError(f"the largest size {fmt_size(max(sizes))} needs {need * sharing / 2**30:.1f} GiB on "
                         f"GPU {gpu.index} ({sharing} rank(s) x {need / 2**30:.2f} GiB) but only "
                         f"{free / 2**30:.1f} GiB is free: use smaller --sizes or fewer ranks per GPU")


def _setup_buffers(ctx, steps, sizes) -> None:
    from .share import BufferSet, LegacyIpc

    kinds = {k for s in steps for k in s.needs}
    if "legacy" in kinds:
        ctx.buffers["legacy"] = BufferSet.create(ctx.world, LegacyIpc(ctx.gpu, ctx.world.rank), max(sizes))
    if "pool" in kinds:
        from .pool import PoolIpc, pool_support

        ok, why = pool_support(ctx.gpu.index)
        ok_all = ctx.world.node_allgather(ok, "memory-pool support check")
        if all(ok_all):
            ctx.buffers["pool"] = BufferSet.create(ctx.world, PoolIpc(ctx.gpu, ctx.world), max(sizes))
        else:
            ctx.pool_unsupported = why or "a rank of this node has no IPC-capable memory pools"


def _walk(ctx, steps, sink, quiet: bool):
    from .console import Progress

    world = ctx.world
    totals: dict[str, float] = {}
    meas: dict[str, int] = {}
    for s in steps:
        totals[s.suite] = totals.get(s.suite, 0.0) + s.measurements * s.cost
        meas[s.suite] = meas.get(s.suite, 0) + s.measurements
    progress = Progress(totals, enabled=(world.rank == 0 and not quiet))
    for step in steps:
        if step.needs and any(k not in ctx.buffers for k in step.needs):
            skipped = getattr(ctx, "pool_unsupported", "buffers unavailable")
            say(world, f"[{step.suite:8s}] skipping {step.label}: {skipped}")
            progress.advance(step.suite, step.label, step.measurements * step.cost, step.measurements,
                             meas[step.suite])
            continue
        units = [None] if step.concurrent else step.pairs
        for pair in units:
            rows = []
            if step.concurrent:
                rows = step.run(ctx, step.sizes)
            elif world.local_rank in pair:
                rows = step.run(ctx, pair[0], pair[1], step.sizes)
            sink.add(rows, f"the rows of step '{step.label}'")
            n = len(step.sizes)
            progress.advance(step.suite, step.label, n * step.cost, n, meas[step.suite])
    return sink.finish()


def _gather_meta(world, ctx, info, run_id, argv, args, sizes) -> dict:
    from .meta import base_meta, cuda_versions, library_versions

    mine = {"rank": world.rank, "host": world.host, "local_rank": world.local_rank, "gpu": info.index,
            "pid": os.getpid(), "gpu_info": info.as_dict()}
    ranks = world.world_gather(mine, "metadata")
    topo = None
    if world.local_rank == 0:
        topo = _node_topology()
    topos = world.world_gather((world.host, topo), "topology")
    meta = None
    if world.rank == 0:
        meta = base_meta(run_id, argv)
        meta["hosts"] = world.hosts
        meta["ranks"] = [{k: v for k, v in r.items() if k != "gpu_info"} for r in ranks]
        gpus: dict[str, dict] = {}
        for r in ranks:
            gpus.setdefault(r["host"], {})[r["gpu"]] = r["gpu_info"]
        meta["gpus"] = {h: [g[i] for i in sorted(g)] for h, g in gpus.items()}
        meta["topology"] = {h: t for h, t in topos if t is not None}
        meta["versions"] = {**cuda_versions(), **library_versions()}
        meta["suites"] = args.suites_resolved
        meta["sizes"] = sizes
        meta["options"] = {"samples": args.samples, "min_time_ms": args.min_time_s * 1e3,
                           "verify": not args.no_verify, "timeout_s": args.timeout, "quick": args.quick,
                           "sm_copy": str(args.copy_shape)}
        meta["slurm_job_id"] = os.environ.get("SLURM_JOB_ID")
    return meta


def _node_topology() -> dict:
    """P2P access matrix (CUDA) and NVML link table for every GPU this process sees."""
    from cupy.cuda import runtime

    from .gpu import describe
    from .topology import gpu_links

    n = runtime.getDeviceCount()
    p2p = [[1 if i == j else int(runtime.deviceCanAccessPeer(i, j)) for j in range(n)] for i in range(n)]
    links = gpu_links([describe(i).pci_bus_id for i in range(n)])
    return {"p2p_matrix": p2p, **links}
