"""`ipcbench report` on the runs shipped in results/ (issue 44, item 8), on three of them read once: a selftest's on
2 x H200 (the first by name), a selftest's and an `all` on 4 x H200:

- its headline raises no alarm for runs that are no check input by design (a selftest's), and says so once;
- the first figures go to the run with the most GPUs, not to the first by name;
- no line of the terminal summary is wider than the terminal (120 where it is not one);
- a run's verdict is one word everywhere: the runs table says "healthy" where the headline does.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from conftest import REPO
from ipcbench.record.run import load_run
from ipcbench.report import document, figure_plan
from ipcbench.report.render import NOT_A_TERMINAL_WIDTH, terminal_width, to_markdown, to_text

NAMES = ("h200x2-selftest-1", "h200x4-all-1", "h200x4-selftest-1")


@pytest.fixture(scope="module")
def runs():
    return [load_run(REPO / "results" / n / "results.csv") for n in NAMES]


FIGURES_OF: list[str] = []  # the runs the report planned figures for, in the order it planned them


@pytest.fixture(scope="module")
def doc(runs, tmp_path_factory):
    """The report of the three runs, built once, with figures planned (figure_plan.run_figures) but none drawn."""
    def planned(run, *args):
        FIGURES_OF.append(run.label)
        return [], args[5]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(document, "run_figures", planned)
        mp.setattr(document, "_draw", lambda blocks: blocks)
        return document.build(runs, [], tmp_path_factory.mktemp("report"), figures=True)


def glance(md: str) -> str:
    return md.split("## At a glance", 1)[1].split("\n## ", 1)[0]


def test_runs_that_are_no_check_input_raise_no_alarm_and_are_said_once(doc):
    """It said "! 17 runs judged … 3 cannot be judged" and repeated the selftest's 3-line reason for each."""
    g = glance(to_markdown(doc))
    assert "- ✓ **1 run judged by ipcbench check**: 1 healthy, 0 unhealthy, 0 cannot be judged." in g
    assert ("- **2 runs of ipcbench selftest, no check input by design** (h200x2-selftest-1, h200x4-selftest-1): the "
            "instrument against its own anchors, judged by `ipcbench selftest`.") in g
    assert "! **Cannot judge**" not in g and "is not a check input" not in g
    assert "- **No check input**: a run of ipcbench selftest" in g  # each selftest run's own headline: no alarm


def test_a_runs_verdict_is_one_word_in_the_headline_and_the_table(doc):
    g = glance(to_markdown(doc))
    words = dict(re.findall(r"^\| (\S+) \| [^|]+ \| (healthy|unhealthy|cannot judge|no check input|pass|fail) \|",
                            g, flags=re.M))
    assert words == {"h200x4-all-1": "healthy", "h200x2-selftest-1": "no check input",
                     "h200x4-selftest-1": "no check input"}
    assert "| pass |" not in g and "✓ **Healthy**" in g


def test_the_first_figures_go_to_the_run_with_the_most_gpus(runs, doc):
    """They went to the first two runs by name (the one-GPU runs), never to the 4-GPU run."""
    assert figure_plan.figure_runs(runs) == FIGURES_OF == ["h200x4-all-1", "h200x4-selftest-1"]
    md = to_markdown(doc)
    said = "Figures are drawn for 2 runs only, those of the most GPUs: h200x4-all-1, h200x4-selftest-1."
    assert md.count(said) == 1  # under the run without figures
    assert md.index("## Run h200x4-all-1") < md.index("### Figures") and md.count("### Figures") == 2


@pytest.mark.parametrize("width", [NOT_A_TERMINAL_WIDTH, 80])
def test_no_line_of_the_terminal_summary_is_wider_than_the_terminal(doc, width):
    """898 of its 1,398 lines were wider than 120 columns (the evidence tables, the options and hosts lines, the
    summary tables): paragraphs wrap, tables narrow their text columns and wrap their cells."""
    text = to_text(doc, width=width)
    assert max(map(len, text.splitlines())) <= width
    assert "h200x4-selftest-1" in text and "26.562" in text  # nothing lost, only wrapped
    assert to_text(doc) == to_text(doc, width=None)  # without a width (compare's text), as it was


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_width_is_the_terminals_and_120_for_a_file_or_a_pipe(monkeypatch):
    monkeypatch.setenv("COLUMNS", "90")
    assert terminal_width(Tty()) == 90 and terminal_width(io.StringIO()) == NOT_A_TERMINAL_WIDTH == 120
    monkeypatch.setenv("COLUMNS", "10")
    assert terminal_width(Tty()) == 40  # a narrower terminal is taken as MIN_WIDTH


def test_the_report_command_writes_its_summary_at_that_width(monkeypatch, tmp_path, capsys):
    from ipcbench import cli

    monkeypatch.setattr("ipcbench.report.command.terminal_width", lambda: 60)
    assert cli.main(["report", str(REPO / "results" / "h200x1-all-1"), "--no-figures", "--out",
                     str(tmp_path / "r")]) == 0
    summary = capsys.readouterr().out.split("\nreport: ", 1)[0]  # then the files' paths, as they are
    assert max(map(len, summary.splitlines())) <= 60
    assert Path(tmp_path / "r" / "report.md").is_file()
