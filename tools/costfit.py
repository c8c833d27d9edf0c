"""`python tools/costfit.py RUN_DIR... [--walls FILE] [--write]`: fit the dry run's cost model to recorded runs.

A tool of the project, not of the installed package: it rewrites catalogue/costs.py and the docs' time tables in a
checkout, which no installed ipcbench has (and none of its commands runs it). It reads every run through the record
(record/meta.read_meta: meta.json checked field by field; record/table: results.csv by the one CSV reader), as
report and check do.

For each run (results/<run>: meta.json and results.csv) the plan it walked is rebuilt from meta.json (its command
kept as the run's cost model saw it (`plan`; runs of `ipcbench SUITE...` recorded before it was kept: rebuilt through
the bench parser and config), less the steps it skipped), and the model's constants
(catalogue/costs.py) are fitted to what it recorded:

1. samples_factor: the samples its rows took (results.csv) over the rule's minimum, over every row of every run;
2. each suite's fixed_s and once_s: least squares of the suites' walls (meta.json suite_wall_s) of the runs of one
   rank per GPU, less their samples, relative to the wall (a 1 s suite weighs as a 10 s one); a suite whose runs all
   walked the same plan cannot separate the two, and gets fixed_s alone;
3. shared_gpu_factor and one_gpu_factor: the runs where ranks share GPUs of a node of several, and where every
   rank is on one GPU, against what the suites above predict for them;
4. close_s and close_rank_s: wall_s less the suites' walls, a line in the node's ranks (least squares; one rank count
   alone: its mean, no slope);
5. startup_s and startup_rank_s: the user's walls of --walls FILE less wall_s, a line in log2 of the node's ranks
   the same way (without --walls the table's values are kept, and the basis says so);
6. check's check_s and check_rank_s: the user's walls of its runs less what the model predicts of their suites and
   start-up, a line in the node's ranks (its verdict and its own closing, which replaces the closing of `all`:
   run/costmodel.check_seconds); selftest's anchor_s: its wall_s less what its suites and closing are predicted to
   take, per
   anchor measurement (selftest/plan.anchor_units), and one_gpu_anchor_s the same over its runs on one GPU (each
   kept from the table without such runs).
   Steps 1-5 use the runs of `ipcbench SUITE...` alone; check and selftest runs are held against the result.

numpy.linalg.lstsq, not scipy: numpy is already installed with pandas and each suite's fit is two unknowns, so
scipy's bounded solvers (nnls) buy nothing a sign check does not. The fit prints per run and per suite the predicted
and measured walls and the residuals; --write rewrites the table of catalogue/costs.py and every time table the
docs quote (README.md, jobs/README.md, docs/suites.md: GENERATED), which tests/test_time_budget.py holds equal to
the model. --walls FILE: one line per run, `RUN_DIR WALL_S` (the run directory as given on the command line or its
name; WALL_S the seconds from mpirun's start to its exit, e.g. `/usr/bin/time -f %e`); `#` starts a comment. Several
--walls files may be given (a set's file may name runs beside it that are left out of the fit: said on stderr).
"""

from __future__ import annotations

import argparse
import datetime
import math
import re
import sys
import textwrap
from collections import defaultdict
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from ipcbench.catalogue import costs
from ipcbench.catalogue.costs import CostModel, Residual, SuiteCost, plan_command
from ipcbench.config import RunConfig, build_config
from ipcbench.core.sampler import SamplingRule
from ipcbench.core.schedule import PairMode, SerialPairs, decide_mode
from ipcbench.errors import ResultsError, UsageError
from ipcbench.record.meta import Meta, read_meta
from ipcbench.record.table import read_table
from ipcbench.run import costmodel
from ipcbench.run.costmodel import SuitePlan

REPO = Path(__file__).resolve().parents[1]
TABLE_MARKER = "# --- fitted table (written by python tools/costfit.py --write) ---\n"


@dataclass
class RecordedRun:
    """One recorded run and the plan it walked."""

    name: str  # the directory: relative to the repository where inside it, else its name (no machine's paths)
    command: str
    machine: str
    ranks_per_gpu: int
    n_gpus: int
    wall_s: float  # meta.json's
    suite_wall_s: dict[str, float]
    plans: dict[str, SuitePlan]  # the suites it walked
    samples: int  # rows' samples, summed
    min_samples: int  # the rule's minimum, summed over the same rows
    user_wall_s: float | None = None  # from --walls
    kind: str = "run"  # "run" (ipcbench SUITE...), "check" or "selftest": what it adds beyond its suites
    anchor_units: int = 0  # a selftest's anchor measurements (selftest/plan.anchor_units)
    n_ranks: int = 0  # on its (first) node


def load_run(path: Path) -> RecordedRun:
    """A recorded run of `ipcbench SUITE...`, check or selftest and its plan: meta.json's `plan`, or for a run of
    suites recorded before it was kept, rebuilt from what meta.json records (its suites, sizes, sampling rule,
    --quick, twin sizes, ranks, pair mode), less its skipped steps; UsageError for anything else."""
    try:
        meta = read_meta(path)
    except ResultsError as e:
        raise UsageError(f"{path}: no readable meta.json ({e})") from None
    if not meta.found:
        raise UsageError(f"{path}: no readable meta.json (there is none)")
    command, kind = _what_ran(path, meta)
    try:
        cfg = recorded_config(meta)
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"{path}: meta.json does not say how the run sampled ({type(e).__name__}: {e})") from None
    host = meta.hosts[0]
    mine = sorted((r for r in meta.ranks if r.host == host), key=lambda r: r.local_rank or 0)
    gpus = meta.gpus[host]
    planned = [p for p in _planned(path, meta, cfg, kind, mine, len(gpus))
               if (p.suite, p.label) not in {(s.suite, s.step) for s in meta.skipped}]
    if kind == "selftest" and meta.anchor_units is None:
        raise UsageError(f"{path}: the selftest's meta.json does not say how many anchor measurements it took")
    samples, minimum = _samples(path, cfg)
    where = path.resolve()
    name = str(where.relative_to(REPO)) if where.is_relative_to(REPO) else where.name
    assert meta.wall_s is not None and meta.suite_wall_s is not None  # _what_ran
    return RecordedRun(name=name, command=" ".join(command), machine=f"{len(gpus)} x {gpus[0].name}, {len(mine)} ranks",
                       ranks_per_gpu=meta.ranks_per_gpu or 1, n_gpus=len(gpus), wall_s=meta.wall_s,
                       suite_wall_s=dict(meta.suite_wall_s), plans=costmodel.sums_of(planned, cfg.rule),
                       samples=samples, min_samples=minimum, kind=kind,
                       anchor_units=meta.anchor_units if kind == "selftest" and meta.anchor_units else 0,
                       n_ranks=len(mine))


def _what_ran(path: Path, meta: Meta) -> tuple[list[str], str]:
    """(the command line, "run" | "check" | "selftest") of a complete run that measured; UsageError otherwise."""
    command = meta.command
    if meta.status != "complete" or meta.suite_wall_s is None or meta.wall_s is None:
        raise UsageError(f"{path}: not a complete run (meta.json has no wall_s and suite_wall_s)")
    if len(command) < 2 or command[1] in ("report", "compare", "info"):
        raise UsageError(f"{path}: `{' '.join(command)}` measured nothing: the fit rebuilds the plans of "
                         "`ipcbench SUITE...`, check and selftest")
    if not meta.hosts or not meta.gpus.get(meta.hosts[0]) or meta.pairing is None:
        raise UsageError(f"{path}: meta.json does not say where the run ran (hosts, GPUs, pair mode)")
    return command, command[1] if command[1] in ("check", "selftest") else "run"


def _planned(path: Path, meta: Meta, cfg: RunConfig, kind: str, mine: list, n_gpus: int) -> list:
    """The steps the run walked, as the cost model saw them: meta.json's plan, else (runs of suites recorded before
    it was kept) rebuilt from the configuration and the pair mode."""
    if meta.plan is not None:  # the plan as the run's cost model saw it (run/runner.start)
        try:
            return [costmodel.PlanStep.from_dict(p) for p in meta.plan]
        except ValueError as e:
            raise UsageError(f"{path}: meta.json's plan cannot be read ({e})") from None
    if kind != "run":
        raise UsageError(f"{path}: `{kind}` recorded before meta.json kept its plan: it cannot be rebuilt")
    pm = meta.pairing
    assert pm is not None  # _what_ran
    if pm.serial_coverage is None:
        raise UsageError(f"{path}: meta.json does not say how the serial steps' pairs were covered")
    mode = PairMode(pm.mode, pm.requested or "", pm.reason or "",
                    SerialPairs(pm.serial_coverage, pm.serial_requested or "", pm.serial_reason or ""))
    if pm.one_per_gpu_pair:  # --quick with ranks sharing GPUs: one rank pair per GPU pair (core/schedule.py)
        mode = replace(mode, gpu_of=tuple(r.gpu for r in mine))
    return costmodel.plan_steps(cfg.steps(len(mine)), mode, n_gpus)


def _samples(path: Path, cfg: RunConfig) -> tuple[int, int]:
    """(the samples the run's rows took, the rule's minimum over the same rows), read by the one CSV reader."""
    try:
        taken = read_table(path / "results.csv")["samples"]
    except ResultsError as e:
        raise UsageError(f"{path}: its rows cannot be read ({e})") from None
    return int(taken.sum()), len(taken) * cfg.rule.min_samples


def recorded_config(meta: Meta) -> RunConfig:
    """The configuration a run's plan came from, as its meta.json records it."""
    opts = meta.options
    rule = dict(opts["sampling"])
    rule["min_time_s"] = rule.pop("min_time_ms") / 1e3
    rule["max_time_s"] = math.inf if rule.get("max_time_s") is None else rule["max_time_s"]
    quick = bool(opts.get("quick"))
    # runs made before a rule had these keys sampled every row alike and to the rule's noise alone
    rule.setdefault("short_factor", 1.0)
    rule.setdefault("floor_share", 0.0)
    known = {f.name for f in fields(SamplingRule)}  # a key a later version records and this one lacks is not used
    rule = {k: v for k, v in rule.items() if k in known}
    if meta.suites is None or not meta.sizes:
        raise KeyError("suites" if meta.suites is None else "sizes")
    return RunConfig(suites=tuple(meta.suites), sizes=tuple(meta.sizes), rule=SamplingRule(**rule),
                     quick=quick, sizes_given=opts.get("twin_sizes") == "every size")


def assign_walls(given: list[str], files: list[str]) -> list[float | None]:
    """Each given run's wall from the --walls files (None: none names it). A line names its run by a path (as given,
    or beside its file: a set's walls.txt names the runs of its folder, so two sets' `all-1` stay apart) or, where no
    such directory exists, by the name of exactly one given run. A line naming a run beside its file that was not
    given is left out, and said on stderr (a set's file lists runs one may leave out of a fit); a line naming no run,
    or one run given twice, is a mistake."""
    where = {str(Path(d).resolve()): i for i, d in enumerate(given)}
    out: list[float | None] = [None] * len(given)
    for f in files:
        left = []
        for name, wall in read_walls(Path(f)).items():
            found = [p for p in (Path(name), Path(f).parent / name) if (p / "meta.json").is_file()]
            if found:
                i = where.get(str(found[0].resolve()))
                if i is None:
                    left.append(name)
                    continue
            else:
                hits = [j for j, d in enumerate(given) if Path(d).name == Path(name).name]
                if len(hits) != 1:
                    raise UsageError(f"--walls names runs not given: {name}" if not hits else
                                     f"--walls {f}: {name} names {len(hits)} runs given: name it by its path")
                i = hits[0]
            if out[i] is not None:
                raise UsageError(f"--walls gives {given[i]} a wall twice")
            out[i] = wall
        if left:
            print(f"costfit: {f}: not fitted (not given): {', '.join(sorted(left))}", file=sys.stderr)
    return out


def read_walls(path: Path) -> dict[str, float]:
    """--walls FILE: `RUN_DIR WALL_S` per line."""
    out = {}
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise UsageError(f"--walls {path}: cannot read ({e.strerror})") from None
    for i, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        try:
            run, wall = words
            out[run.rstrip("/")] = float(wall)
        except ValueError:
            raise UsageError(f"--walls {path}:{i}: expected `RUN_DIR WALL_S`, got {line.strip()!r}") from None
    return out


def _fit_suite(points: list[tuple[SuitePlan, float]], samples_factor: float) -> SuiteCost:
    """fixed_s and once_s of one suite from (its plan, its measured wall) of runs of one rank per GPU. Where the
    samples the rule implies leave less time for more measurements (a negative fixed_s: its rows are not timed in
    samples of --min-time, as handle costs are), the suite is fitted without the sample term (samples=False); where
    even then more measurements took no longer, its time is still put per measurement (fixed_s alone), never all
    once: a node of more pairs then costs more, not the same. A suite with no samples in its plans
    (costmodel.UNSAMPLED_SUITES) goes straight to that form."""
    if not any(p.sample_s for p, _ in points):
        plain = _fit_form(points, 0.0) or _fit_fixed(points, 0.0)
        return replace(plain, samples=False)
    got = _fit_form(points, samples_factor)
    if got is None:
        got = _fit_form(points, 0.0)
        if got is None:  # more measurements took no longer: still per measurement, so that more pairs cost more
            got = _fit_fixed(points, 0.0)
        return replace(got, samples=False)
    return got


def _fit_fixed(points: list[tuple[SuitePlan, float]], samples_factor: float) -> SuiteCost:
    """fixed_s alone (relative least squares), once_s 0."""
    y = np.array([wall - samples_factor * p.sample_s for p, wall in points])
    weight = np.array([p.weight for p, _ in points])
    rel = 1 / np.array([max(wall, 1e-3) for _, wall in points])
    fixed = np.sum(weight * y * rel * rel) / np.sum(weight * weight * rel * rel) if weight.any() else 0.0
    return SuiteCost(round(max(0.0, float(fixed)), 5), 0.0)


def _fit_form(points: list[tuple[SuitePlan, float]], samples_factor: float) -> SuiteCost | None:
    """Weighted least squares (relative to each wall) of wall - samples = fixed_s x weight + once_s; None where the
    best fit needs a negative fixed_s. Runs of a single plan cannot separate the two: fixed_s alone."""
    y = np.array([wall - samples_factor * p.sample_s for p, wall in points])
    weight = np.array([p.weight for p, _ in points])
    rel = 1 / np.array([max(wall, 1e-3) for _, wall in points])
    if len({round(w, 9) for w in weight}) >= 2:
        a = np.column_stack([weight, np.ones_like(weight)]) * rel[:, None]
        fixed, once = np.linalg.lstsq(a, y * rel, rcond=None)[0]
        if fixed < 0:
            return None
        if once >= 0:
            return SuiteCost(round(float(fixed), 5), round(float(once), 3))
    return _fit_fixed(points, samples_factor)


def fit(runs: list[RecordedRun], previous: CostModel, date: str) -> CostModel:
    """The constants that best explain `runs` (the module's docstring says how); `previous` gives what the runs
    cannot (the start-up without walls, the shared-GPU factor without such runs)."""
    commands = runs
    runs = [r for r in commands if r.kind == "run"]  # the suites' constants: from runs of suites alone
    if not any(r.ranks_per_gpu == 1 for r in runs):
        raise UsageError("the fit needs a run of `ipcbench SUITE...` with one rank per GPU (its suites' constants "
                         "come from those)")
    model = _fit_suites(runs, previous)
    close, close_rank = _line([(r.n_ranks, r.wall_s - sum(r.suite_wall_s.values())) for r in runs])
    model = replace(model, close_s=close, close_rank_s=close_rank)
    # ranks sharing GPUs of a node of several, and every rank on one GPU: two factors (one GPU has no link and
    # time-slices every pair; 4 ranks on 2 GPUs mix links and shared GPUs)
    shared = _gpu_factor(model, [r for r in runs if r.ranks_per_gpu > 1 and r.n_gpus > 1], None) \
        or previous.shared_gpu_factor
    one_gpu = _gpu_factor(model, [r for r in runs if r.ranks_per_gpu > 1 and r.n_gpus == 1], previous.one_gpu_factor)
    # start-up: the user's wall less wall_s, a line in the doublings of the ranks (they start side by side)
    walled = [(r.n_ranks, r.user_wall_s, r.wall_s) for r in runs if r.user_wall_s is not None]
    if walled:
        startup, startup_rank = _line([(math.log2(n), user - wall) for n, user, wall in walled])
        basis = f"measured: mpirun to exit less wall_s, {len(walled)} run(s) of --walls"
    else:
        startup, startup_rank = previous.startup_s, previous.startup_rank_s
        basis = previous.startup_basis if previous.startup_basis.startswith("assumed") else \
            f"kept from the fit of {previous.fitted} (no --walls given)"
    model = replace(model, shared_gpu_factor=shared, one_gpu_factor=one_gpu, startup_s=startup,
                    startup_rank_s=startup_rank, startup_basis=basis)
    model = _fit_commands(model, commands, previous)
    model = replace(model, fitted=date, machines=tuple(dict.fromkeys(r.machine for r in commands)),
                    runs=tuple(r.name for r in commands))
    return replace(model, residuals=tuple(residual(model, r) for r in commands))


def _fit_suites(runs: list[RecordedRun], previous: CostModel) -> CostModel:
    """samples_factor and each suite's constants, from the runs of one rank per GPU (the default suite: their
    mean); the shared-GPU factor 1 until fitted."""
    samples = sum(r.samples for r in runs)
    minimum = sum(r.min_samples for r in runs)
    samples_factor = round(samples / minimum, 4) if minimum else previous.samples_factor
    points: dict[str, list] = defaultdict(list)
    for r in runs:
        if r.ranks_per_gpu == 1:
            for suite, wall in r.suite_wall_s.items():
                if suite in r.plans:
                    points[suite].append((r.plans[suite], wall))
    suites = {name: _fit_suite(pts, samples_factor) for name, pts in points.items()}
    default = SuiteCost(round(float(np.mean([c.fixed_s for c in suites.values()])), 5),
                        round(float(np.mean([c.once_s for c in suites.values()])), 3))
    return replace(previous, samples_factor=samples_factor, suites=suites, default=default, shared_gpu_factor=1.0)


def _gpu_factor(model: CostModel, kind: list[RecordedRun], kept: float | None) -> float | None:
    """The factor on the measurements both ranks drive (one rank's and the suites' one-off costs stay) that best
    fits the walls of runs of one `kind`, relative: what the targets judge (a run's wall, not a suite's); `kept`
    without such runs."""
    pairs = []
    for r in kind:  # wall_s - close - once - what one rank drives = factor x what both drive
        once = sum(model.suite(s).once_s for s, p in r.plans.items() if p.weight > 0)
        parts = [costmodel.measurement_seconds(model, s, p) for s, p in r.plans.items() if p.weight > 0]
        alone, both = sum(a for a, _ in parts), sum(b for _, b in parts)
        closing = model.close_for(r.n_ranks)
        pairs.append((both, r.wall_s - closing - once - alone, r.wall_s - closing))
    if not pairs:
        return kept
    p, y, w = np.array(pairs).T
    return round(float(np.sum(p * y / w**2) / np.sum((p / w) ** 2)), 4)


def _fit_commands(model: CostModel, commands: list[RecordedRun], previous: CostModel) -> CostModel:
    """check's own term (its verdict after the run and its closing, in the user's wall only: a line in the ranks)
    and the selftest's anchors (in wall_s, per anchor measurement, on nodes of several GPUs and on one GPU apart:
    copies within a GPU are not a link's), against the model of their suites; `previous`'s without such runs."""
    beyond: list[tuple[float, float]] = [
        (r.n_ranks, r.user_wall_s - model.startup_for(r.n_ranks) - sum(predicted_suites(model, r).values()))
        for r in commands if r.kind == "check" and r.user_wall_s is not None]
    check, check_rank = _line(beyond) if beyond else (previous.check_s, previous.check_rank_s)

    def per_anchor(tests: list[RecordedRun]) -> float:
        return round(max(0.0, sum(r.wall_s - model.close_for(r.n_ranks) - sum(predicted_suites(model, r).values())
                                  for r in tests) / sum(r.anchor_units for r in tests)), 5)  # never negative

    tests = [r for r in commands if r.kind == "selftest" and r.anchor_units]
    on_several, on_one = [r for r in tests if r.n_gpus != 1], [r for r in tests if r.n_gpus == 1]
    anchor = per_anchor(on_several) if on_several else previous.anchor_s
    one_anchor = per_anchor(on_one) if on_one else previous.one_gpu_anchor_s
    return replace(model, check_s=check, check_rank_s=check_rank, anchor_s=anchor, one_gpu_anchor_s=one_anchor)


def _line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through (ranks or log2 of them, seconds); one rank count alone:
    its mean and no slope (nothing to tell a rank's share from the rest)."""
    x, y = (np.array(v, dtype=float) for v in zip(*points))
    if len(set(x.tolist())) < 2:
        return round(float(np.mean(y)), 3), 0.0
    slope, intercept = np.polyfit(x, y, 1)
    return round(float(intercept), 3), round(float(slope), 4)


def predicted_suites(model: CostModel, run: RecordedRun) -> dict[str, float]:
    return {s: costmodel.suite_seconds(model, s, p, run.ranks_per_gpu, run.n_gpus) for s, p in run.plans.items()}


def residual(model: CostModel, run: RecordedRun) -> Residual:
    """The run's wall against the model's: the user's wall (start-up included) where --walls gave it, else
    meta.json's wall_s against the model less its start-up (what was measured, nothing assumed added)."""
    predicted = (sum(predicted_suites(model, run).values()) + model.close_for(run.n_ranks)
                 + costmodel.anchor_seconds(model, run.anchor_units, run.n_gpus))
    if run.user_wall_s is not None:
        if run.kind == "check":
            predicted += costmodel.check_seconds(model, run.n_ranks)
        return Residual(Path(run.name).name, run.command, run.machine, round(run.user_wall_s, 2),
                        round(predicted + model.startup_for(run.n_ranks), 2), True, run.n_gpus, run.n_ranks)
    return Residual(Path(run.name).name, run.command, run.machine, round(run.wall_s, 2), round(predicted, 2), False,
                    run.n_gpus, run.n_ranks)


def report(model: CostModel, runs: list[RecordedRun]) -> str:
    """Per run and per suite: predicted and measured walls, the residuals."""
    lines = [f"samples_factor {model.samples_factor:g}; shared_gpu_factor {model.shared_gpu_factor:g}; "
             f"one_gpu_factor {model.one_gpu_factor}; "
             f"close_s {model.close_s:g} + close_rank_s {model.close_rank_s:g} a rank; startup_s {model.startup_s:g} + "
             f"startup_rank_s {model.startup_rank_s:g} a doubling of ranks ({model.startup_basis}); check's check_s "
             f"{model.check_s} + check_rank_s {model.check_rank_s} a rank; "
             f"selftest's anchor_s {model.anchor_s}, "
             f"one_gpu_anchor_s {model.one_gpu_anchor_s}",
             "suite     fixed_ms  once_s"]
    lines += [f"{s:9s} {c.fixed_s * 1e3:8.2f}  {c.once_s:6.3f}{'' if c.samples else '  (no sample term)'}"
              for s, c in model.suites.items()]
    lines += ["", "per run (the user's wall where --walls gave it, else meta.json's wall_s):",
              f"{'run':40s} {'machine':36s} {'measured':>9s} {'predicted':>9s} {'resid':>7s}"]
    for r in model.residuals:
        lines.append(f"{r.run:40s} {r.machine:36s} {r.measured_s:9.2f} {r.predicted_s:9.2f} {r.pct:+6.1f}%"
                     f"{'' if r.start_included else '  (wall_s)'}")
    lines += ["", "per suite (mean over the runs of one command on one machine):",
              f"{'command':48s} {'machine':36s} {'suite':9s} {'measured':>9s} {'predicted':>9s} {'resid':>7s}"]
    groups: dict[tuple[str, str, str], list] = defaultdict(list)
    for run in runs:
        pred = predicted_suites(model, run)
        for s, wall in run.suite_wall_s.items():
            if s in pred:
                groups[(plan_command(run.command), run.machine, s)].append((wall, pred[s]))
    for (cmd, machine, s), vals in groups.items():
        m, p = np.mean([v[0] for v in vals]), np.mean([v[1] for v in vals])
        resid = f"{(p / m - 1) * 100:+6.1f}%" if m > 0 else "  (not walked)"  # e.g. NCCL on one GPU
        lines.append(f"{cmd[:48]:48s} {machine:36s} {s:9s} {m:9.2f} {p:9.2f} {resid}")
    lines += ["", "per command and machine (the mean of its runs):"]
    lines += [f"{cmd[:48]:48s} {machine:36s} {n:2d} runs {m:9.2f} {p:9.2f} {(p / m - 1) * 100:+6.1f}%"
              for cmd, machine, n, m, p in model.command_residuals()]
    lines.append(f"\nworst run residual: {model.worst_residual_pct:.1f}%; "
                 f"worst command: {model.worst_command_pct:.1f}%")
    return "\n".join(lines)


# ---- what --write writes ----------------------------------------------------------------------------------------

def render_table(model: CostModel) -> str:
    """The body of catalogue/costs.py below its marker: COSTS, as Python."""
    def suite(c: SuiteCost) -> str:
        return f"SuiteCost(fixed_s={c.fixed_s!r}, once_s={c.once_s!r}{'' if c.samples else ', samples=False'})"

    out = ["COSTS = CostModel(", f"    samples_factor={model.samples_factor!r},", "    suites={"]
    out += [f"        {name!r}: {suite(c)}," for name, c in model.suites.items()]
    out += ["    },", f"    default={suite(model.default)},", f"    shared_gpu_factor={model.shared_gpu_factor!r},",
            f"    one_gpu_factor={model.one_gpu_factor!r},",
            f"    check_s={model.check_s!r},", f"    check_rank_s={model.check_rank_s!r},",
            f"    anchor_s={model.anchor_s!r},",
            f"    one_gpu_anchor_s={model.one_gpu_anchor_s!r},",
            f"    close_s={model.close_s!r},", f"    close_rank_s={model.close_rank_s!r},",
            f"    startup_s={model.startup_s!r},", f"    startup_rank_s={model.startup_rank_s!r},",
            f"    startup_basis={model.startup_basis!r},", f"    fitted={model.fitted!r},",
            "    machines=(", *[f"        {m!r}," for m in model.machines], "    ),",
            "    runs=(", *[f"        {r!r}," for r in model.runs], "    ),", "    residuals=("]
    out += [f"        Residual({r.run!r}, {r.command!r},\n                 {r.machine!r}, {r.measured_s!r}, "
            f"{r.predicted_s!r}, {r.start_included!r}, {r.gpus!r}, {r.ranks!r}),"
            for r in model.residuals]
    out += ["    ),", ")", ""]
    return "\n".join(out)


def write_table(model: CostModel, path: Path) -> None:
    text = path.read_text()
    head = text.split(TABLE_MARKER, 1)[0]
    path.write_text(head + TABLE_MARKER + render_table(model))


def estimate(model: CostModel, n: int, quick: bool = False, sizes: str | None = None, serial_pairs: str = "auto",
             links: str | None = "nvswitch") -> float:
    """The model's wall for `mpirun -np n ipcbench all` (with --quick, --sizes, --serial-pairs), one rank per GPU,
    every GPU pair linked by `links` (None: unknown, as on a login node: pairs one at a time)."""
    ns = SimpleNamespace(suites=["all"], sizes=sizes, quick=quick, samples=None, min_time=None, noise=None,
                         max_time=None, no_verify=False, timeout=300.0, out=None, dry_run=True, json=False,
                         topology=None, quiet=True, pairs="auto", serial_pairs=serial_pairs, sm_copy=None,
                         sm_bulk=None, argv=[])
    cfg = build_config(ns)
    kinds = [links] * (n * (n - 1)) if links else None
    mode = decide_mode(cfg.pairs, 1, kinds, n, cfg.serial_pairs, cfg.quick)
    return costmodel.wall_seconds(model, cfg.steps(n), cfg.rule, mode, gpus=n)


TABLE_GPUS = (2, 4, 8)


def readme_table(model: CostModel) -> str:
    """README.md's time table: `--dry-run --topology nvswitch` for 2, 4 and 8 GPUs."""
    rows = ["| GPUs | `ipcbench all` | `ipcbench all --quick` | `all --sizes 4K:256M` (twins at every size) |",
            "| --- | --- | --- | --- |"]
    for n in TABLE_GPUS:
        t = [estimate(model, n), estimate(model, n, quick=True), estimate(model, n, sizes="4K:256M")]
        rows.append(f"| {n} | " + " | ".join(f"{round(x)} s" for x in t) + " |")
    return "\n".join(rows) + "\n"


def jobs_table(model: CostModel) -> str:
    """jobs/README.md's table: what to give --time, by the node's GPUs and links."""
    rows = ["| GPUs | `all`, NVSwitch | `all`, pairs one at a time (no NVSwitch, or unknown links) | "
            "`all --quick`, NVSwitch |", "| --- | --- | --- | --- |"]
    for n in TABLE_GPUS:
        t = [estimate(model, n), estimate(model, n, links=None), estimate(model, n, quick=True)]
        rows.append(f"| {n} | " + " | ".join(_minutes(x) for x in t) + " |")
    return "\n".join(rows) + "\n"


def _minutes(s: float) -> str:
    return f"{round(s)} s" if s < 120 else f"{s / 60:.1f} min"


def suites_block(model: CostModel) -> str:
    """docs/suites.md's fit: the constants, where they come from, the residuals."""
    head = (f"Fitted on {model.fitted} to {len(model.runs)} runs ({'; '.join(model.machines)}); samples per "
            f"measurement {model.samples_factor:g} × the rule's minimum; ranks sharing GPUs × "
            f"{model.shared_gpu_factor:g} (every rank on one GPU × {model.one_gpu_factor}); "
            f"closing {model.close_s:g} s + {model.close_rank_s:g} s a rank; "
            + (f"check beyond its suites (its verdict and its own closing) {model.check_s:g} s + "
               f"{model.check_rank_s:g} s a rank; " if model.check_s is not None else
               "check beyond its suites (its verdict) not fitted; ")
            + (f"the selftest's anchors {model.anchor_s * 1e3:.1f} ms per anchor measurement"
               + (f" ({model.one_gpu_anchor_s * 1e3:.1f} ms on one GPU: copies within it); "
                  if model.one_gpu_anchor_s is not None else "; ")
               if model.anchor_s is not None else "the selftest's anchors not fitted; ") +
            f"start-up {model.startup_s:g} s + {model.startup_rank_s:g} s a doubling of the ranks "
            f"({model.startup_basis}). "
            "A measured wall marked (wall_s) is meta.json's, against the model less its "
            "start-up; the others are mpirun to exit.")
    every = [round(estimate(model, n, serial_pairs="all")) for n in (4, 8)]
    tail = (f"Every pair of the serial steps instead of the ring would take {every[0]} s on 4 GPUs and {every[1]} s "
            "on 8; on a node whose links are unknown (no NVML: a login node without `--topology`) the plan measures "
            f"pairs one at a time and the estimate for 4 GPUs is {round(estimate(model, 4, links=None))} s.")
    out = [textwrap.fill(head, 115, break_on_hyphens=False), "", textwrap.fill(tail, 115, break_on_hyphens=False), "",
           "| suite | fixed per measurement | once per run |", "| --- | --- | --- |"]
    out += [f"| {name} | {c.fixed_s * 1e3:.1f} ms{'' if c.samples else ' (no sample term)'} | {c.once_s:.2f} s |"
            for name, c in model.suites.items()]
    out += ["", "| run | command | machine | measured | model | residual |", "| --- | --- | --- | --- | --- | --- |"]
    for r in model.residuals:
        what = "s" if r.start_included else "s (wall_s)"
        out.append(f"| {r.run} | `{r.plan_command}` | {r.machine} | {r.measured_s:.1f} {what} | "
                   f"{r.predicted_s:.1f} s | {r.pct:+.1f}% |")
    out += ["", "| command | machine | runs | mean measured | model | residual |",
            "| --- | --- | --- | --- | --- | --- |"]
    out += [f"| `{cmd}` | {machine} | {n} | {m:.1f} s | {p:.1f} s | {(p / m - 1) * 100:+.1f}% |"
            for cmd, machine, n, m, p in model.command_residuals()]
    return "\n".join(out) + "\n"


BEGIN, END = "<!-- costfit: begin (python tools/costfit.py --write) -->\n", "<!-- costfit: end -->\n"
# Every time table the docs quote, and how to find it: the README by its header line (no marker lines: the
# README is kept short), the others between BEGIN and END.
GENERATED = {"README.md": readme_table, "jobs/README.md": jobs_table, "docs/suites.md": suites_block}


def generated_text(doc: str, model: CostModel) -> str:
    """What `doc` holds where the model's table goes; ValueError if it holds no such place."""
    text = (REPO / doc).read_text()
    rendered = GENERATED[doc](model)
    if doc == "README.md":
        header = rendered.splitlines(keepends=True)[0]
        if header not in text:
            raise ValueError(f"{doc}: no table headed {header.strip()!r}")
        tail = text.split(header, 1)[1]
        return header + tail[: tail.index("\n\n") + 1]
    if BEGIN not in text or END not in text:
        raise ValueError(f"{doc}: no {BEGIN.strip()} ... {END.strip()}")
    return text.split(BEGIN, 1)[1].split(END, 1)[0]


def _around(before: str, after: str) -> str:
    """The pattern of a number between two phrases of prose, wherever its lines break."""
    def words(text: str) -> str:
        return r"\s+".join(re.escape(w) for w in text.split())

    return rf"({words(before)}\s*)(\d+)(\s*{words(after)})"


# Numbers the docs quote inside their prose: (doc, the pattern around the number, the number).
INLINE = [
    ("README.md", _around("the same plan is estimated pair by pair (4 GPUs:", "s)"),
     lambda m: str(round(estimate(m, 4, links=None)))),
    ("jobs/README.md", _around("an 8-GPU node without NVSwitch, where every pair is measured one at a time, at about",
                               "minutes"), lambda m: str(round(estimate(m, 8, links=None) / 60))),
]


def inline_numbers(doc: str) -> list[str]:
    """The numbers `doc` quotes where INLINE says (one per pattern); ValueError if a pattern is not there."""
    text = (REPO / doc).read_text()
    out = []
    for d, pattern, _ in INLINE:
        if d == doc:
            found = re.search(pattern, text)
            if not found:
                raise ValueError(f"{doc}: nothing matches {pattern!r}")
            out.append(found.group(2))
    return out


def write_docs(model: CostModel) -> list[Path]:
    """Replace every generated table and quoted number with the model's."""
    out = []
    for doc, render in GENERATED.items():
        path = REPO / doc
        text = path.read_text()
        old = generated_text(doc, model)
        new = render(model)
        if doc != "README.md":
            old, new = BEGIN + old + END, BEGIN + new + END
        text = text.replace(old, new, 1)
        for d, pattern, number in INLINE:
            if d == doc:
                value = number(model)
                text, n = re.subn(pattern, lambda found: found.group(1) + value + found.group(3), text, count=1)
                if not n:
                    raise ValueError(f"{doc}: nothing matches {pattern!r}")
        path.write_text(text)
        out.append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python tools/costfit.py",
                                description="Fit the dry run's cost model (catalogue/costs.py) to recorded runs.")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR",
                   help="results/<run> directories: runs of `ipcbench SUITE...`, check and selftest")
    p.add_argument("--walls", metavar="FILE", action="append",
                   help="lines `RUN_DIR WALL_S`: each run's wall from mpirun to exit (repeatable; a line may name a "
                        "run beside the file that is not given: not fitted, and said)")
    p.add_argument("--write", action="store_true", help="rewrite catalogue/costs.py and the docs' time tables")
    p.add_argument("--date", help="the fit's date (default: today, UTC)")
    ns = p.parse_args(argv)
    try:
        runs = [load_run(Path(d)) for d in ns.runs]
        for r, wall in zip(runs, assign_walls([d.rstrip("/") for d in ns.runs], ns.walls or [])):
            r.user_wall_s = wall
        date = ns.date or datetime.datetime.now(datetime.timezone.utc).date().isoformat()
        model = fit(runs, costs.COSTS, date)
    except UsageError as e:
        print(f"costfit: error: {e}", file=sys.stderr)
        return 2
    print(report(model, runs))
    if ns.write:
        write_table(model, Path(costs.__file__))
        for path in write_docs(model):
            print(f"wrote {path}")
        print(f"wrote {costs.__file__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
