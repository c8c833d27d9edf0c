"""`ipcbench compare BASE [BASE ...] NEW`: a statistical compare of runs, usable as a CI regression gate.

The command line of compare: its arguments, loading the runs, printing the outcome and the exit status. The
judging is judging/compare.py's (every rule: docs/report.md), the words report/compare_view.py's. It lives with
the report, whose rendering it uses, and reaches the judging layer below it; check, the other gate, reaches the
same engine from its own command (check/command.py --baseline) without passing through here. Exit status: 0
nothing regressed, 1 a regression, a row missing from NEW (without --subset), an impossible or an invalid NEW row,
2 bad input (one line on stderr). pandas only when comparing.
"""

from __future__ import annotations

import argparse
import sys

from ipcbench.errors import ResultsError, UsageError, error_line, warning_line
from ipcbench.judging.compare import DEFAULT_ALPHA, DEFAULT_THRESHOLD, alpha_arg, compare, load, threshold_arg
from ipcbench.report.compare_view import catches_line, render, rule_line, summary_line, verdict_line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", nargs="+", metavar="BASE",
                        help="the reference: one or several run directories (or results.csv files) of the same "
                             "code; several give the between-run variation that host-timed rows need")
    parser.add_argument("new", metavar="NEW", help="the run to judge (the last path)")
    parser.add_argument("--threshold", type=threshold_arg, default=DEFAULT_THRESHOLD, metavar="FRACTION",
                        help="smallest change that counts, as a fraction or a percentage (default 0.02 = 2%%); "
                             "a change must also exceed what its row is known to move between runs")
    parser.add_argument("--alpha", type=alpha_arg, default=DEFAULT_ALPHA, metavar="P",
                        help="significance level of the t-test that judges time-sliced rows against several BASE "
                             f"runs (host-timed rows are judged on their kind's tail; default {DEFAULT_ALPHA})")
    parser.add_argument("--subset", action="store_true",
                        help="NEW is deliberately a subset of BASE: rows missing from NEW are listed but do not "
                             "fail the gate")
    parser.add_argument("--format", choices=("text", "md", "csv"), default="text",
                        help="output format (default text)")


def run(args) -> int:
    """Entry point for `ipcbench compare`; returns the exit status (0 ok, 1 failed gate, 2 bad input)."""
    try:
        bases = [load(p) for p in args.base]
        result = compare(bases, load(args.new), args.threshold, args.alpha, subset=args.subset)
    except (UsageError, ResultsError) as e:
        print(error_line(str(e)), file=sys.stderr)
        return 2
    sys.stdout.write(render(result, args.format))
    if args.format == "csv":
        for w in result.warnings:
            print(warning_line(w), file=sys.stderr)
        print(rule_line(result), file=sys.stderr)
        print(catches_line(result), file=sys.stderr)
        print(summary_line(result), file=sys.stderr)
        print(verdict_line(result), file=sys.stderr)
    return result.exit_code
