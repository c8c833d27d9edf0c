"""`ipcbench report PATH...`: every run under the paths -> terminal summary, report.html, report.md, PNGs.

The command only reads its arguments and writes the files: record/run.py finds and loads the runs, document.py
builds the document (numbers from tables.py, the headline from headline.py, figures from figure_plan.py and
figures.py), render.py renders it three ways (docs/architecture.md). No MPI or CUDA anywhere; pandas and
matplotlib are imported only when a report is made, so `import ipcbench.report.command` stays instant.

A malformed results.csv or meta.json skips that run with a warning naming file:line; the other runs are
still reported. Exit status: 0 when a report of every input was written, 1 when one was written but an input
had to be skipped, 2 when no usable run was found, a path does not exist or --out is a run's directory.

A rerun into the same directory leaves no figure of the previous report that this one no longer makes (it would
look current): the previous report.md names the figures that report wrote, and those of them that this report
did not write again are removed. Nothing else in the directory is touched.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from ipcbench.errors import error_line, warning_line
from ipcbench.record.run import load_runs
from ipcbench.report.document import build
from ipcbench.report.render import terminal_width, to_html, to_markdown, to_text
from ipcbench.results import CSV_NAME, META_NAME


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="run directories, results/ trees or results.csv files (every run found is reported)")
    parser.add_argument("--out", metavar="DIR",
                        help="where to write report.html, report.md and the figures "
                             "(default: report/ inside the first PATH)")
    parser.add_argument("--no-figures", action="store_true", help="tables only, no PNGs (faster)")
    parser.add_argument("--quiet", action="store_true", help="no terminal summary, only warnings and the paths")


def _error(msg: str) -> None:
    print(error_line(msg), file=sys.stderr)


def _figures_named(md: Path) -> set[str]:
    """The figure files a report.md shows (its `![title](file)` lines): plain PNG names in its own directory."""
    try:
        text = md.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    names = re.findall(r"^!\[.*\]\(([^()/\\]+\.png)\)$", text, flags=re.M)
    return {n for n in names if n not in (".", "..") and not n.startswith(".")}


def remove_stale_figures(out_dir: Path, before: set[str], now: set[str]) -> None:
    """Remove the previous report's figures (`before`, from its report.md) that this report did not write."""
    for name in sorted(before - now):
        path = out_dir / name
        if path.is_file() and not path.is_symlink():
            path.unlink()


def default_out(paths) -> Path:
    """report/ inside the first PATH (beside it when it is a file)."""
    first = Path(paths[0])
    return (first if first.is_dir() else first.parent) / "report"


def run_inside(out_dir: Path) -> str | None:
    """What of a run `out_dir` holds (its results.csv or meta.json), where a report must never go: its files and
    figures would sit among the run's, and a rerun removes figures it finds there. None: no run."""
    held = [name for name in (CSV_NAME, META_NAME) if (out_dir / name).exists()]
    return held[0] if held else None


def run(args) -> int:
    """Entry point for `ipcbench report`; returns the exit status."""
    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:
        _error(f"no such file or directory: {missing[0]}")
        return 2
    held = run_inside(Path(args.out)) if args.out else None
    if held:
        _error(f"--out {args.out} holds a run ({held}): a report never goes into a run's directory; name another "
               f"(e.g. {Path(args.out) / 'report'})")
        return 2
    runs, skipped = load_runs(args.paths)
    for msg in [f"{s} (run skipped)" for s in skipped] + [n for r in runs for n in r.remarks]:
        print(warning_line(msg), file=sys.stderr)
    if not runs:
        _error("no usable run found under " + ", ".join(map(str, args.paths))
               + ("" if skipped else f" (no {CSV_NAME})"))
        return 2
    out_dir = Path(args.out) if args.out else default_out(args.paths)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        _error(f"cannot create {out_dir}: {e.strerror or e}")
        return 2
    before = _figures_named(out_dir / "report.md")
    doc = build(runs, skipped, out_dir, figures=not args.no_figures)
    md, html = to_markdown(doc), to_html(doc, out_dir)
    try:
        (out_dir / "report.md").write_text(md, encoding="utf-8")
        (out_dir / "report.html").write_text(html, encoding="utf-8")
        remove_stale_figures(out_dir, before, _figures_named(out_dir / "report.md"))
    except OSError as e:
        _error(f"cannot write the report into {out_dir}: {e.strerror or e}")
        return 2
    if not args.quiet:
        sys.stdout.write(to_text(doc, width=terminal_width()))  # no line wider than the terminal (120: a file)
        sys.stdout.write("\n")
    print(f"report: {out_dir / 'report.html'}\n        {out_dir / 'report.md'}")
    if skipped:  # the report covers what could be read, but an input was lost: say so in the exit status
        _error(f"{len(skipped)} input(s) could not be read (see the warnings above); the report leaves them out")
        return 1
    return 0
