"""What `ipcbench report` leaves in its directory: the files of this report, nothing of a previous one that this one
no longer makes, and nothing of anyone else's touched."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from ipcbench.report import command as report

DATA = Path(__file__).resolve().parent / "data"
RUNS = sorted(p.parent for p in (DATA / "h200x2").glob("*/results.csv"))


def _report(paths, out: Path, figures: bool = True) -> int:
    return report.run(argparse.Namespace(paths=[str(p) for p in paths], out=str(out),
                                         no_figures=not figures, quiet=True))


def _linked(out: Path) -> set[str]:
    """The figures report.md shows."""
    return {line.split("](", 1)[1].rstrip(")") for line in (out / "report.md").read_text().splitlines()
            if line.startswith("![")}


def _pngs(out: Path) -> set[str]:
    return {p.name for p in out.glob("*.png")}


def test_a_rerun_leaves_no_figure_of_the_previous_report(tmp_path):
    """A report of two runs, then of one of them into the same directory: the first run's figures stayed beside the
    second report's, looking current. Now the directory holds exactly the figures its report.md shows, and the
    user's own files (a PNG among them) are untouched."""
    out = tmp_path / "r"
    out.mkdir()
    (out / "mine.png").write_bytes(b"not a figure of the report")
    (out / "notes.txt").write_text("mine")
    assert _report(RUNS, out) == 0
    first = _linked(out)
    assert all(any(n.startswith(r.name) for n in first) for r in RUNS)
    assert _pngs(out) == first | {"mine.png"}
    assert _report(RUNS[1:], out) == 0
    second = _linked(out)
    assert second and not any(n.startswith(RUNS[0].name) for n in second)
    assert _pngs(out) == second | {"mine.png"}, sorted(_pngs(out) - second)
    assert (out / "mine.png").read_bytes() == b"not a figure of the report"
    assert (out / "notes.txt").read_text() == "mine"
    assert _report(RUNS[1:], out, figures=False) == 0  # tables only: no figure of before is left to look current
    assert _pngs(out) == {"mine.png"}


def test_only_files_the_previous_report_made_are_removed(tmp_path):
    """report.md is the previous report's list of its figures: a name in it that is not a plain file name in the
    report's directory (a path elsewhere, a subdirectory, a file that is not a PNG) is never removed."""
    out = tmp_path / "r"
    out.mkdir()
    elsewhere = tmp_path / "keep.png"
    elsewhere.write_bytes(b"x")
    (out / "sub").mkdir()
    (out / "sub" / "keep.png").write_bytes(b"x")
    (out / "keep.txt").write_text("x")
    (out / "dir.png").mkdir()
    (out / "report.md").write_text(f"![a]({elsewhere})\n![b](sub/keep.png)\n![c](keep.txt)\n![d](../keep.png)\n"
                                   f"![e](dir.png)\n![f](gone.png)\n")
    shutil.copy(elsewhere, out / "old-figure.png")
    (out / "report.md").write_text((out / "report.md").read_text() + "![g](old-figure.png)\n")
    assert _report(RUNS[1:], out, figures=False) == 0
    assert elsewhere.exists() and (out / "sub" / "keep.png").exists() and (out / "keep.txt").exists()
    assert (out / "dir.png").is_dir() and not (out / "old-figure.png").exists()
