"""`--dry-run`: the plan (nodes, ranks, pairs, sizes, measurements, estimated time) and what it assumes; no
GPU work.

The estimate follows the sampling rule, the pair mode and the serial steps' pair coverage: per measurement
about two samples' worth of --min-time plus a fixed cost, weighted by each step's cost, fitted to measured
suite wall times; a round of disjoint pairs costs one measurement, a serial step pays only the pairs its
coverage keeps (run/walk.groups_of). The pair mode follows the node's links: NVML's, or --topology's for a
node that is not this machine (a login node plans for a compute node); without either, pairs one at a time.
"""

from __future__ import annotations

import json

from ipcbench.config import TOPOLOGIES
from ipcbench.core import topology
from ipcbench.core.schedule import SerialPairs, per_gpu_pair
from ipcbench.run.walk import agree_pair_mode, groups_of, measured, pairs_of
from ipcbench.sizes import fmt_size

# The cost of one measurement: about 2 samples' worth of GPU time (SAMPLES_PER_MEASUREMENT: 3-5 samples, a
# quarter-sample probe, fewer where the noise target stops early; first fitted to 2 x H200 runs) plus the fixed
# work around it (fill, poison, verify, barriers, exchanges, the row's bookkeeping). Steps weigh it by their
# `cost`. The fixed part refitted on 2026-11-25 to `mpirun -np 2 ipcbench all` of the current measurement
# (suite_wall_s of meta.json, same plan of 1,105 weighted measurements and 3.67 s of --min-time units): two
# H100s through NVSwitch 41.9 s of suites (31 ms a measurement; the old 12 ms said 23 s for a 45 s run), two
# ranks on one H100 56.3 s (44 ms: same-GPU pairs wait for each other's kernels); two ranks on one H200 45.1 s
# (34 ms: 25% below this model, the residual). Where that time goes: docs/suites.md, "How long all takes".
SAMPLES_PER_MEASUREMENT = 2.0 * 1.04
FIXED_PER_MEASUREMENT_S = 0.031  # one rank per GPU
FIXED_SAME_GPU_S = 0.044  # ranks sharing a GPU
STARTUP_S = 3.5  # mpirun, Python, MPI and CUDA start, kernels compiled, buffers shared, and the closing


def estimate_seconds(steps, rule, mode=None, ranks_per_gpu: int = 1) -> float:
    """Expected wall time of a plan under `rule`: steps walked in rounds of disjoint pairs (`mode`
    concurrent) cost one measurement per round and size, not per pair; serial steps count the pairs of
    the mode's coverage. Without a mode: every pair, one at a time. Ranks sharing a GPU pay more per
    measurement (FIXED_SAME_GPU_S)."""
    total = 0.0
    fixed = FIXED_PER_MEASUREMENT_S if ranks_per_gpu <= 1 else FIXED_SAME_GPU_S
    for s in steps:
        walked = len(s.sizes) * len(groups_of(s, mode)) if mode is not None else s.measurements
        per = SAMPLES_PER_MEASUREMENT * max(rule.min_time_s, s.min_sample_s) + fixed
        total += walked * s.cost * per
    return total + STARTUP_S


def describe(plan: dict) -> str:
    n = plan["measurements"]
    lines = ["ipcbench plan (dry run: no GPU work)",
             f"  nodes:   {plan['nodes']} ({', '.join(f'{h}: {k} ranks' for h, k in plan['ranks_per_node'].items())})",
             f"  GPUs:    {', '.join(f'{h}: {g}' for h, g in plan['gpus_per_node'].items())} ({plan['gpu_source']})",
             f"  pairs:   {plan['pairs']} ordered per node; {plan['pair_mode']['mode']} "
             f"({plan['pair_mode']['reason']}); all nodes measure at once",
             f"  serial:  one-pair-at-a-time steps (host paths, handles, ping-pongs, pipeline) measure "
             f"{SerialPairs(**plan['pair_mode']['serial_pairs']).describe()}",
             f"  suites:  {', '.join(plan['suites'])}",
             f"  sizes:   {len(plan['sizes'])} ({fmt_size(plan['sizes'][0])} .. {fmt_size(plan['sizes'][-1])})",
             f"  sampling: {plan['sampling']}",
             "  steps:"]
    for s in plan["steps"]:
        k = len(s["pairs"])
        how = (f"  in {len(s['rounds'])} rounds" if s.get("rounds") else
               f"  {k} pair{'s' if k != 1 else ''} one at a time{', a ring' if s.get('ring') else ''}" if k else "")
        plural = "s" if s["measurements"] != 1 else ""
        lines.append(f"    {s['suite']:8s} {s['label']:24s} {s['measurements']:5d} measurement{plural}{how}")
    lines.append(f"  measurements per node: {n}")
    lines.append(f"  estimated duration: {plan['estimated_s']:.0f} s, assuming:")
    lines += [f"    - {a}" for a in plan["assumptions"]]
    return "\n".join(lines)


def assumptions(gpu_source: str, link_source: str, mode) -> list[str]:
    """What the plan and its estimate take for granted, said with them."""
    plan_for = f"--topology {'|'.join(TOPOLOGIES)} plans for a node of that kind"
    links = {"NVML": "the GPU pairs are linked as NVML reports here",
             "unknown": f"the links are unknown (no NVML here), so pairs are measured one at a time: {plan_for}"}
    given = f"every GPU pair is linked by {link_source[len('--topology '):]} ({link_source}, not this machine)"
    return [f"GPUs: {gpu_source}", links.get(link_source, given),
            f"pairs: {mode.mode} ({mode.reason}); serial steps: {mode.serial.describe()}",
            f"{SAMPLES_PER_MEASUREMENT:g} samples' worth of --min-time and {FIXED_PER_MEASUREMENT_S * 1e3:g} ms per "
            f"measurement ({FIXED_SAME_GPU_S * 1e3:g} ms where ranks share a GPU), {STARTUP_S:g} s to start and close: "
            "fitted to `all` on 2 x H100 (NVSwitch) and on one H100 (2 ranks)"]


def dry_run(world, cfg, steps, assumed_ranks: int | None = None) -> int:
    """Print the plan on world rank 0 (human-readable, or one JSON object with --json)."""
    local = assumed_ranks or world.local_size
    info = world.comm.allgather((world.host, local, None if cfg.topology else topology.nvml_gpu_count()))
    gpus_here = info[world.rank][2] or local
    kinds = [cfg.topology] * (local * (local - 1)) if cfg.topology else topology.nvml_link_kinds()
    link_source = f"--topology {cfg.topology}" if cfg.topology else "NVML" if kinds else "unknown"
    ranks_per_gpu = -(-local // min(local, gpus_here))
    mode = agree_pair_mode(world, cfg.pairs, ranks_per_gpu, kinds, local, cfg.serial_pairs, cfg.quick)
    mode = per_gpu_pair(mode, cfg.quick, [i % min(local, gpus_here) for i in range(local)])  # rank i -> GPU i mod G
    per_node = {host: (n, g) for host, n, g in info}
    if world.rank != 0:
        return 0
    gpus = {h: (g if g is not None else n) for h, (n, g) in per_node.items()}
    plan = {"nodes": world.n_nodes, "hosts": list(per_node), "ranks": assumed_ranks or world.size,
            "ranks_per_node": {h: n for h, (n, _) in per_node.items()}, "gpus_per_node": gpus,
            "gpu_source": "NVML" if all(g is not None for _, g in per_node.values()) else "assumed one per rank",
            "topology": link_source,
            "pairs": local * (local - 1), "pair_mode": mode.as_dict(),
            "suites": list(cfg.suites), "sizes": list(cfg.sizes), "sampling": cfg.rule.describe(),
            "steps": [{"suite": s.suite, "label": s.label, "measurements": measured(s, mode),
                       "pairs": [list(p) for p in pairs_of(s, mode)] if not s.all_ranks else [],
                       "ring": s.serial and mode.serial.ring,
                       "rounds": [[list(p) for p in g] for g in groups_of(s, mode)] if mode.concurrent and s.rounds_ok
                       else None} for s in steps],
            "measurements": sum(measured(s, mode) for s in steps),
            "estimated_s": round(estimate_seconds(steps, cfg.rule, mode, ranks_per_gpu), 1)}
    plan["assumptions"] = assumptions(plan["gpu_source"], link_source, mode)
    if cfg.json_plan:
        print(json.dumps(plan), flush=True)
    else:
        if assumed_ranks:
            print(f"(started without mpirun: planning `mpirun -np {assumed_ranks}`, one rank per GPU here)")
        print(describe(plan), flush=True)
    return 0
