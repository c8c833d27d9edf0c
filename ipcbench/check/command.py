"""ipcbench check: is this node healthy? Measure (or read a recorded run) and judge it against stated expectations.

`mpirun -np N ipcbench check` measures every GPU pair of the node with the engines a job relies on (the copy
engine both ways, SM kernels reading and writing) at 4K and 256M, every row verified (check/plan.py), then
judges the run; `ipcbench check --from RUN` judges a recorded run of any node, without a GPU or MPI.
Expectations come from the thresholds ipcbench ships for the GPUs it has measured (judging/defaults.toml), a
thresholds file of your own (--thresholds), known-good runs (--baseline: the compare statistics) and the node's
other pairs of the same link kind; every verdict says which (judging/judge.py). The node's own evidence (NVML
before and after the run: links, counters, PCIe, ECC, other processes, slowdowns) is judged beside the rows
against the [[evidence]] tables (judging/evidence_rules.py, docs/check.md). Exit 0 healthy, 1 unhealthy (what
failed, by how much, against which expectation), 2 cannot judge (a missing row, an incomplete run, no
expectation for this GPU or link, an unknown link, a value that cannot be true, a floor above the link's
ceiling, a run that is not a check input, bad input): never 0 for what was not judged. Outputs: the summary,
--json, --junit FILE, --prometheus FILE, and a last `REASON:` line to drain a node with. Every input and output
path is checked before any GPU work or judging (check/inputs.py); check never writes into a run directory.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ipcbench.catalogue.links import PLANNED_KINDS
from ipcbench.check import inputs, outputs, plan
from ipcbench.judging import expect, judge
from ipcbench.errors import ResultsError, UsageError, error_line, warning_line
from ipcbench.sizes import SizeError, parse_sizes


def _located(flag: str, path: str) -> Path:
    """The results.csv a --from or --baseline path names (record/run.locate); UsageError naming the flag."""
    from ipcbench.record.run import locate

    try:
        return locate(path)
    except UsageError as e:
        raise UsageError(f"{flag} {path}: {e}") from None


def add_arguments(p) -> None:
    p.add_argument("--from", dest="from_run", metavar="RUN",
                   help="judge this recorded run (a run directory or its results.csv) instead of measuring: no GPU, "
                        "no MPI")
    p.add_argument("--thresholds", metavar="FILE", help="your expectations (TOML, the keys of ipcbench/judging/"
                                                        "defaults.toml); yours win over a shipped one for the same row")
    p.add_argument("--no-defaults", action="store_true", help="leave out the shipped expectations")
    p.add_argument("--baseline", nargs="+", metavar="RUN",
                   help="known-good runs (a node, or many nodes: their spread counts) of the same GPU model and "
                        "link kinds; a row significantly slower than them fails")
    p.add_argument("--other-baseline", action="store_true",
                   help="accept a baseline of another GPU model or link kind (refused otherwise)")
    p.add_argument("--threshold", default="10%", metavar="FRACTION",
                   help="with --baseline: the smallest slowdown that fails (default 10%%)")
    p.add_argument("--no-peers", action="store_true",
                   help="do not hold each pair against the node's other pairs of its link kind")
    p.add_argument("--peer-drop", default=f"{judge.PEER_DROP:.0%}", metavar="FRACTION",
                   help=f"a pair this far below the typical pair of its kind fails (default {judge.PEER_DROP:.0%}%)")
    p.add_argument("--methods", help=f"the methods measured and judged (default {','.join(plan.METHODS_JUDGED)})")
    p.add_argument("--sizes", help=f"sizes measured (default {plan.SIZES}); checked, then ignored, with --from "
                                   f"(the run's rows are judged: a fleet job passes one set of arguments to both)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the summary")
    p.add_argument("--junit", metavar="FILE", help="also write JUnit XML (one testcase per check)")
    p.add_argument("--prometheus", metavar="FILE",
                   help="also write Prometheus text for node_exporter's textfile collector (a *.prom file)")
    p.add_argument("--verbose", action="store_true", help="list every check, passed ones too")
    p.add_argument("--any-host", action="store_true",
                   help="accepted and ignored (a no-op, kept for old command lines): --from judges a run of any "
                        "host; a drain script guards its own host")
    p.add_argument("--out", metavar="DIR", help="the measured run's directory (default results/<run-id>)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="S",
                   help="give up on any wait for another rank after S seconds (default 120)")
    p.add_argument("--dry-run", action="store_true", help="the measurement's plan and estimated time; no GPU work")
    p.add_argument("--topology", choices=PLANNED_KINDS,
                   help="with --dry-run: plan for a node whose GPU pairs are all linked so")
    p.add_argument("--ranks", type=int, metavar="N",
                   help="with --dry-run, started without mpirun: plan N ranks on the node (a login node: "
                        "`ipcbench check --dry-run --topology nvswitch --ranks 8`)")
    p.add_argument("--quiet", action="store_true", help="no progress lines while measuring")


class Options:
    """The command's arguments, checked (UsageError, one line, before anything runs)."""

    def __init__(self, ns, argv: list[str]):
        from ipcbench.judging.compare import threshold_arg

        self.ns, self.argv = ns, argv
        try:
            self.methods = plan.check_methods(ns.methods)
        except ValueError as e:
            raise UsageError(f"--methods: {e}") from None
        for flag, val in (("--threshold", ns.threshold), ("--peer-drop", ns.peer_drop)):
            try:
                threshold_arg(val)
            except Exception as e:  # argparse.ArgumentTypeError
                raise UsageError(f"{flag}: {e}") from None
        self.threshold, self.peer_drop = threshold_arg(ns.threshold), threshold_arg(ns.peer_drop)
        if ns.from_run and (ns.dry_run or ns.out or ns.topology or ns.ranks is not None):
            raise UsageError("--from judges a recorded run: --dry-run, --out, --topology and --ranks measure")
        if ns.topology and not ns.dry_run:
            raise UsageError("--topology plans a node that is not this machine: it goes with --dry-run")
        self.sizes = plan.SIZES if ns.sizes is None else ns.sizes
        try:
            parse_sizes(self.sizes)
        except SizeError as e:
            raise UsageError(f"--sizes: {e}") from None
        mine = expect.load_thresholds(ns.thresholds) if ns.thresholds else expect.Thresholds()
        users, users_ev = list(mine.expect), list(mine.evidence)
        self.warnings = list(mine.warnings)  # said with the verdict (report), once
        self.expectations = expect.combine([] if ns.no_defaults else expect.defaults(), users)
        self.evidence = expect.combine_evidence([] if ns.no_defaults else expect.evidence_defaults(), users_ev)
        self.sources = ([f"thresholds {ns.thresholds} ({len(users)} [[expect]], {len(users_ev)} [[evidence]])"]
                        if users or users_ev else []) + \
            ([] if ns.no_defaults else ["thresholds shipped with ipcbench (ipcbench/judging/defaults.toml)"])
        if not self.expectations and not self.evidence and not ns.baseline:
            raise UsageError("nothing to judge against: --no-defaults without --thresholds or --baseline")
        if ns.out:  # the runner's own rule (run/outdir.py), asked here: before MPI starts or a GPU is touched
            from ipcbench.run.outdir import choose_run_dir

            _, why = choose_run_dir(ns.out, "check")
            if why:
                raise UsageError(why)
        self.from_csv = _located("--from", ns.from_run) if ns.from_run else None
        self.baseline_csvs = [_located("--baseline", b) for b in ns.baseline or []]
        runs = [c.parent for c in [*([self.from_csv] if self.from_csv else []), *self.baseline_csvs]]
        inputs.check_outputs({"--junit": ns.junit, "--prometheus": ns.prometheus},
                             runs + ([Path(ns.out)] if ns.out else []), {"--thresholds": ns.thresholds})

    def config(self):
        """The measurement's RunConfig: --quick's stopping rule, the transfer suites' steps of the methods; every
        rank pair judged (coverage), not one per GPU pair."""
        from ipcbench.config import RunConfig

        ns = self.ns
        return RunConfig.from_options(suites=plan.suites_of(self.methods), sizes=self.sizes, quick=True,
                                      timeout=ns.timeout, out=ns.out, dry_run=ns.dry_run,
                                      json=ns.json and ns.dry_run, quiet=ns.quiet, topology=ns.topology,
                                      ranks=ns.ranks, argv=["check", *self.argv], gpu_pairs=False)


def run(opts: Options) -> int:
    """The command: every rank returns the same exit status."""
    if opts.ns.from_run:
        return judge_recorded(opts)
    return measure_and_judge(opts)


def judge_recorded(opts: Options) -> int:
    """Judge a recorded run of any host (a login node judges a node's run; jobs/healthcheck.sh guards its own
    node). Whatever goes wrong is one line and exit 2 (UsageError): a gate that could not judge never says 1."""
    from ipcbench.record.run import load_run

    assert opts.from_csv is not None
    try:
        run = load_run(opts.from_csv)
    except (ResultsError, UsageError) as e:
        raise UsageError(f"--from {opts.ns.from_run}: {e}") from None
    except (OSError, ValueError) as e:  # an unreadable or undecodable file the reader did not name
        raise UsageError(f"--from {opts.ns.from_run}: cannot read ({e})") from None
    why_not = judge.not_a_check_input(run)
    if why_not:
        raise UsageError(f"--from {opts.ns.from_run}: {why_not}")
    try:
        return report(opts, run)
    except (UsageError, BrokenPipeError):  # a reader gone (`| head`) ends quietly, as every command (cli._writing)
        raise
    except Exception as e:  # fail closed, one line (IPCBENCH_TRACEBACK is the measuring path's)
        raise UsageError(f"--from {opts.ns.from_run}: cannot judge ({type(e).__name__}: {e})") from None


def measure_and_judge(opts: Options) -> int:
    from ipcbench.record.run import load_run
    from ipcbench.run import runner

    cfg = opts.config()
    s = runner.start(cfg, plan.make_steps(opts.methods, list(cfg.sizes)),
                     example="`mpirun -np 8 ipcbench check` (one rank per GPU) or -np 2 on one GPU", tail=check_tail)
    if isinstance(s, int):
        return s  # a dry run
    rows, checks = runner.measure(s)
    runner.release(s)
    status = runner.finish(s, rows, checks)
    code, err = 0, ""
    if s.world.rank == 0:  # the other ranks wait for the verdict: nothing here may leave them waiting
        try:
            code = report(opts, load_run(s.run_dir / "results.csv"))
        except (UsageError, ResultsError) as e:
            code, err = 2, str(e)
        except Exception as e:  # fail closed: whatever stops the judging is "cannot judge", never "unhealthy"
            code, err = 2, f"cannot judge the measured run ({type(e).__name__}: {e})"
    agreed = s.world.world_allreduce_max(code, "the check's verdict")
    if err:
        print(error_line(err), file=sys.stderr, flush=True)
        print(outputs.refusal(err, opts.ns.json), flush=True)
    return 1 if 1 in (status, agreed) else agreed


def check_tail(gpu_of, node_ranks, mode=None) -> tuple[float, str]:
    """run/runner.start's tail: the verdict after the run, as the cost model expects it (catalogue/costs.py); the
    same whatever the pair mode."""
    from ipcbench.catalogue.costs import COSTS
    from ipcbench.run.costmodel import check_own_seconds, check_seconds

    if COSTS.check_s is None:
        return 0.0, "the verdict after the run is not in the estimate: the cost model was never fitted to a check run"
    fitted = sum(1 for r in COSTS.residuals if r.plan_command.split()[1:2] == ["check"] and r.start_included)
    ranks = len(node_ranks)
    own, close = check_own_seconds(COSTS, ranks), COSTS.close_for(ranks)
    line = f"{COSTS.check_rank_s:g} s a rank {'less' if COSTS.check_s < 0 else 'and'} {abs(COSTS.check_s):g} s"
    return check_seconds(COSTS, ranks), (
        f"check's verdict and its own closing, {own:.1f} s at {ranks} ranks ({line}, fitted on {fitted} timed check "
        f"run(s)), in place of `all`'s closing of {close:.1f} s that the model of its suites counts: reading the run "
        "back, judging it, the outputs and check's closing, less what that model, fitted on longer runs, "
        "over-counts for check's small plan")


def _baseline(opts: Options, run):
    """compare(BASE..., this run) for --baseline, after refusing a baseline of another GPU model or link kind."""
    from ipcbench.record.run import load_run
    from ipcbench.judging.compare import compare

    try:
        bases = [load_run(p) for p in opts.baseline_csvs]
    except (ResultsError, UsageError) as e:
        raise UsageError(f"--baseline: {e}") from None
    except (OSError, ValueError) as e:
        raise UsageError(f"--baseline: cannot read ({e})") from None
    mine = _shape(run)
    for b in bases:
        theirs = _shape(b)
        if theirs != mine and not opts.ns.other_baseline:
            raise UsageError(f"--baseline {b.dir}: {_words(theirs)}, this run {_words(mine)}: a baseline of another "
                             f"GPU model or link kind says nothing about this node (--other-baseline to use it anyway)")
    return compare(bases, run, threshold=opts.threshold, subset=True)


def _shape(run) -> tuple:
    """(GPU models, link kinds) of a run: what a baseline must share with the run it judges."""
    models = tuple(sorted({g.name for gs in run.meta.gpus.values() for g in gs}))
    kinds = tuple(sorted({ln.kind for ln in run.meta.links}))
    return models, kinds


def _words(shape: tuple) -> str:
    models, kinds = shape
    return f"{' + '.join(models) or 'unknown GPUs'} on {' + '.join(kinds) or 'no NVML link table'}"


def report(opts: Options, run) -> int:
    """Judge the run and write every output the options ask for; the exit status."""
    baseline = _baseline(opts, run) if opts.ns.baseline else None
    v = judge.judge(run, opts.expectations, opts.methods, baseline, peers=not opts.ns.no_peers,
                    peer_drop=opts.peer_drop, evidence=opts.evidence)
    v.sources = opts.sources + ([f"baseline {', '.join(map(str, opts.ns.baseline))} (compare, threshold "
                                 f"{opts.threshold:.0%})"] if baseline is not None else []) + \
        ([] if opts.ns.no_peers else [f"peers: the node's other pairs of the same link kind (fail past "
                                      f"{opts.peer_drop:.0%} below)"])
    host = run.meta.hosts[0] if run.meta.hosts else str(run.frame["host"].iat[0])
    models = sorted({g.name for gs in run.meta.gpus.values() for g in gs})
    for w in opts.warnings:  # what the thresholds file says that ipcbench cannot confirm (judging/expect.py)
        print(warning_line(w), file=sys.stderr, flush=True)
    for flag, path, write in (("--junit", opts.ns.junit, outputs.write_junit),
                              ("--prometheus", opts.ns.prometheus, outputs.write_prometheus)):
        if path:  # checked before judging (check/inputs.py); what still fails (a full disk) is exit 2, never 1
            try:
                write(path, v, host, run.meta.evidence)
            except OSError as e:
                raise UsageError(f"{flag} {path}: cannot write ({e.strerror or e})") from None
    if opts.ns.json:
        print(outputs.as_json(v, {"host": host, "run": str(run.dir), "gpu_models": models,
                                  "warnings": opts.warnings, "unchecked": run.unchecked}))
        return v.exit_code
    if v.exit_code:  # on stderr too, before the summary: its REASON: line stays the last
        print(f"ipcbench check: {v.reason()}", file=sys.stderr, flush=True)
    header = [f"ipcbench check: {host}, {' + '.join(models) or 'unknown GPUs'}, run {run.dir}"]
    header += [run.unchecked] if run.unchecked else []  # what an older run's record cannot check
    print(outputs.text(v, header, verbose=opts.ns.verbose), flush=True)
    return v.exit_code
