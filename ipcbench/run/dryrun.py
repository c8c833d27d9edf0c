"""`--dry-run`: the plan (nodes, ranks, pairs, sizes, measurements, estimated time) and what it assumes; no
GPU work.

The estimate is the cost model of run/costmodel.py under the constants of catalogue/costs.py (fitted by
`python tools/costfit.py` to recorded runs, which it names with their residuals): it follows the sampling
rule, the pair mode and the serial steps' pair coverage (a round of disjoint pairs costs one measurement, a serial
step pays only the pairs its coverage keeps: run/walk.groups_of). The pair mode follows the node's links: NVML's,
or --topology's for a node that is not this machine (a login node plans for a compute node); without either,
pairs one at a time. Started without mpirun it plans one rank per GPU NVML sees, or --ranks N (a login node
without GPUs); under mpirun, the ranks started.
"""

from __future__ import annotations

import json

from ipcbench.catalogue.costs import COSTS, CostModel
from ipcbench.config import TOPOLOGIES
from ipcbench.core import topology
from ipcbench.core.schedule import SerialPairs, per_gpu_pair
from ipcbench.errors import UsageError
from ipcbench.run import costmodel
from ipcbench.run.walk import agree_pair_mode, measured, pairs_of, rounds_of
from ipcbench.sizes import fmt_size


def estimate_seconds(steps, rule, mode=None, ranks_per_gpu: int = 1, model: CostModel = COSTS, gpus: int = 0) -> float:
    """Expected wall time of a plan under `rule`, mpirun to exit (run/costmodel.wall_seconds): steps walked in
    rounds of disjoint pairs (`mode` concurrent) cost one measurement per round and size, not per pair; serial
    steps count the pairs of the mode's coverage. Without a mode: every pair, one at a time. Ranks sharing a GPU
    pay the model's shared-GPU factor (its one-GPU factor where `gpus` is 1)."""
    return costmodel.wall_seconds(model, steps, rule, mode, ranks_per_gpu, gpus)


def fitted_on(model: CostModel = COSTS) -> str:
    """What the constants were fitted to, and how well: one line for the plan's assumptions."""
    if not model.runs:
        return "the cost model's constants were never fitted to a run (python tools/costfit.py)"
    kinds = "; ".join(model.machines)
    commands = {r.plan_command for r in model.residuals}
    basis = "the user's wall" if any(r.start_included for r in model.residuals) else "meta.json's wall_s"
    return (f"the cost model (catalogue/costs.py) was fitted on {model.fitted} to {len(model.runs)} runs of "
            f"{len(commands)} commands on {kinds}: worst residual "
            f"{model.worst_residual_pct:.1f}% of {basis} (of a command's mean on a machine: "
            f"{model.worst_command_pct:.1f}%); start-up {model.startup_s:g} s + {model.startup_rank_s:g} s a "
            "doubling of "
            "the ranks"
            f" ({model.startup_basis})")


def extrapolation(gpus: int, ranks_per_gpu: int, mode, model: CostModel = COSTS) -> list[str]:
    """What the estimate assumes beyond the machines the model was fitted on."""
    out = []
    fitted_gpus = max((r.gpus for r in model.residuals), default=0)
    if gpus > fitted_gpus:
        out.append(f"{gpus} GPUs where at most {fitted_gpus} were measured: a measurement costs what it cost there, "
                   "a round of disjoint pairs measured at once" + (" costs one measurement, as one pair does"
                                                                   if mode is not None and mode.concurrent else "")
                   + ", and a suite's one-off cost does not grow with the GPUs")
    ranks, fitted_ranks = gpus * ranks_per_gpu, sorted({r.ranks for r in model.residuals if r.ranks})
    if fitted_ranks and ranks > fitted_ranks[-1]:
        out.append(f"{ranks} ranks where at most {fitted_ranks[-1]} were measured: the start-up "
                   f"({model.startup_s:g} s + {model.startup_rank_s:g} s a doubling) and the closing "
                   f"({model.close_s:g} s + {model.close_rank_s:g} s a rank) stay the lines fitted on "
                   f"{', '.join(map(str, fitted_ranks))} ranks")
    if ranks_per_gpu > 1:
        factor = model.gpu_factor(ranks_per_gpu, gpus)
        one = gpus == 1 and model.one_gpu_factor is not None
        fitted = sorted({r.machine for r in model.residuals if (r.gpus == 1) == one and r.ranks > r.gpus})
        where = "every rank on one GPU" if one else "ranks sharing GPUs"
        out.append(f"{where} (fitted on {'; '.join(fitted) or 'no such run'}): the measurements both ranks of a pair "
                   f"drive x {factor:g}, one rank's and the one-off costs as they are")
    return out


def _rounds_text(rounds: list[dict]) -> str:
    """A step's rounds in a few words: '3 permutation rounds (4K..1M) + 6 rounds (2M..256M)'."""
    parts = []
    for kind, name in (("permutation", "permutation rounds"), ("disjoint", "rounds")):
        mine = [r for r in rounds if r["kind"] == kind]
        if mine:
            sizes = mine[0]["sizes"]
            parts.append(f"{len(mine)} {name} ({fmt_size(sizes[0])}..{fmt_size(sizes[-1])})")
    return " + ".join(parts)


def _permutation_text(p: dict) -> str:
    limits = ", ".join(f"{e} up to {fmt_size(n)}" if n < 1 << 60 else f"{e} at every size"
                       for e, n in p["up_to"].items())
    return f"{limits or 'none'} ({p['reason']})"


def describe(plan: dict) -> str:
    n = plan["measurements"]
    lines = ["ipcbench plan (dry run: no GPU work)",
             f"  nodes:   {plan['nodes']} ({', '.join(f'{h}: {k} ranks' for h, k in plan['ranks_per_node'].items())})",
             f"  GPUs:    {', '.join(f'{h}: {g}' for h, g in plan['gpus_per_node'].items())} ({plan['gpu_source']})",
             f"  pairs:   {plan['pairs']} ordered per node; {plan['pair_mode']['mode']} "
             f"({plan['pair_mode']['reason']}); all nodes measure at once",
             f"  permutation rounds (each GPU sending once and receiving once): "
             f"{_permutation_text(plan['pair_mode']['permutation'])}",
             f"  serial:  one-pair-at-a-time steps (host paths, handles, ping-pongs, pipeline) measure "
             f"{SerialPairs(**plan['pair_mode']['serial_pairs']).describe()}",
             f"  suites:  {', '.join(plan['suites'])}",
             f"  sizes:   {len(plan['sizes'])} ({fmt_size(plan['sizes'][0])} .. {fmt_size(plan['sizes'][-1])})",
             f"  sampling: {plan['sampling']}",
             "  steps:"]
    for s in plan["steps"]:
        k = len(s["pairs"])
        how = (f"  in {_rounds_text(s['rounds'])}" if s.get("rounds") else
               f"  {k} pair{'s' if k != 1 else ''} one at a time{', a ring' if s.get('ring') else ''}" if k else "")
        plural = "s" if s["measurements"] != 1 else ""
        lines.append(f"    {s['suite']:8s} {s['label']:24s} {s['measurements']:5d} measurement{plural}{how}")
    lines.append(f"  measurements per node: {n}")
    lines.append(f"  estimated duration: {plan['estimated_s']:.0f} s, assuming:")
    lines += [f"    - {a}" for a in plan["assumptions"]]
    return "\n".join(lines)


def assumptions(gpu_source: str, link_source: str, mode, gpus: int = 0, ranks_per_gpu: int = 1) -> list[str]:
    """What the plan and its estimate take for granted, said with them."""
    plan_for = f"--topology {'|'.join(TOPOLOGIES)} plans for a node of that kind"
    links = {"NVML": "the GPU pairs are linked as NVML reports here",
             "unknown": f"the links are unknown (no NVML here), so pairs are measured one at a time: {plan_for}"}
    given = f"every GPU pair is linked by {link_source[len('--topology '):]} ({link_source}, not this machine)"
    return [f"GPUs: {gpu_source}", links.get(link_source, given),
            f"pairs: {mode.mode} ({mode.reason}); serial steps: {mode.serial.describe()}",
            fitted_on(), *extrapolation(gpus, ranks_per_gpu, mode)]


def dry_run(world, cfg, make_plan, assumed_ranks: int | None = None, tail=None) -> int:
    """Print the plan on world rank 0 (human-readable, or one JSON object with --json). `make_plan(local_size,
    gpu_of)`: the steps, for the GPUs the plan assumes (rank i on GPU i mod G); `tail(gpu_of, node_ranks, mode)`:
    what the command adds beyond its suites (run/runner.start), for the same GPUs and pair mode, in the estimate and
    said."""
    if cfg.ranks is not None and world.size > 1:
        raise UsageError(f"--ranks plans without mpirun: under mpirun the plan is for the {world.size} ranks started")
    local = assumed_ranks or world.local_size
    info = world.comm.allgather((world.host, local, None if cfg.topology else topology.nvml_gpu_count()))
    gpus_here = info[world.rank][2] or local
    kinds = [cfg.topology] * (local * (local - 1)) if cfg.topology else topology.nvml_link_kinds()
    link_source = f"--topology {cfg.topology}" if cfg.topology else "NVML" if kinds else "unknown"
    ranks_per_gpu = -(-local // min(local, gpus_here))
    gpu_of = [i % min(local, gpus_here) for i in range(local)]  # rank i: GPU i mod G
    steps = make_plan(local, gpu_of)
    mode = agree_pair_mode(world, cfg.pairs, ranks_per_gpu, kinds, local, cfg.serial_pairs, cfg.quick)
    mode = per_gpu_pair(mode, cfg.gpu_pairs, gpu_of, kinds)
    per_node = {host: (n, g) for host, n, g in info}
    if world.rank != 0:
        return 0
    after_s, after_what = tail(gpu_of, list(range(local)), mode) if tail else (0.0, "")
    gpus = {h: (g if g is not None else n) for h, (n, g) in per_node.items()}
    rounds = rounds_of(steps, mode)
    plan = {"nodes": world.n_nodes, "hosts": list(per_node), "ranks": assumed_ranks or world.size,
            "ranks_per_node": {h: n for h, (n, _) in per_node.items()}, "gpus_per_node": gpus,
            "gpu_source": "NVML" if all(g is not None for _, g in per_node.values()) else "assumed one per rank",
            "topology": link_source,
            "pairs": local * (local - 1), "pair_mode": mode.as_dict(),
            "suites": list(cfg.suites), "sizes": list(cfg.sizes), "sampling": cfg.rule.describe(),
            "steps": [{"suite": s.suite, "label": s.label, "measurements": measured(s, mode),
                       "pairs": [list(p) for p in pairs_of(s, mode)] if not s.all_ranks else [],
                       "ring": s.serial and mode.serial.ring,
                       "rounds": rounds.get(f"{s.suite}/{s.label}")} for s in steps],
            "measurements": sum(measured(s, mode) for s in steps),
            "estimated_s": round(estimate_seconds(steps, cfg.rule, mode, ranks_per_gpu,
                                                  gpus=min(local, gpus_here)) + after_s, 1),
            "after_suites_s": round(after_s, 1)}
    plan["cost_model"] = {"fitted": COSTS.fitted, "machines": list(COSTS.machines), "runs": list(COSTS.runs),
                          "worst_residual_pct": round(COSTS.worst_residual_pct, 1),
                          "worst_command_pct": round(COSTS.worst_command_pct, 1), "startup_s": COSTS.startup_s,
                          "startup_rank_s": COSTS.startup_rank_s, "close_s": COSTS.close_s,
                          "close_rank_s": COSTS.close_rank_s, "startup_basis": COSTS.startup_basis}
    plan["assumptions"] = assumptions(plan["gpu_source"], link_source, mode, max(gpus.values()), ranks_per_gpu)
    if after_what:
        plan["assumptions"].append(after_what)
    if cfg.json_plan:
        print(json.dumps(plan), flush=True)
    else:
        if assumed_ranks:
            print(f"(started without mpirun: planning `mpirun -np {assumed_ranks}`, "
                  + ("as --ranks asks)" if cfg.ranks else "one rank per GPU here)"))
        print(describe(plan), flush=True)
    return 0
