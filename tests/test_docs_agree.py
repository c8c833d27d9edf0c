"""The README and docs/ say what the code does (issue 44, item 10):

- a run cut short is reported (exit 0), not skipped (exit 1);
- --min-time's default is the same in the README, --help and config.py; every option of a run is in the README;
- a link's peak (the quoted data rate) and ceiling (the signalling rate) are explained where used;
- compare's sensitivity examples are the numbers of the H200 runs shipped in results/, recomputed here;
- "twins", "honest noise", "floor", "permutation rounds" and "serial steps" are defined where first used;
- the README says how long its test command takes.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conftest import REPO

README = (REPO / "README.md").read_text()
DOCS = {p.name: p.read_text() for p in sorted((REPO / "docs").glob("*.md"))}


def flat(text: str) -> str:
    return " ".join(text.split())


def test_a_run_cut_short_is_reported_with_exit_0_as_the_readme_says(tmp_path, capsys):
    from ipcbench.cli import main

    run = tmp_path / "runs" / "cut"
    shutil.copytree(REPO / "results" / "h200x1-check-1", run)
    text = (run / "results.csv").read_text()
    (run / "results.csv").write_text(text[: text.rindex("\n", 0, len(text) - 1) + 40])  # the last line cut short
    assert main(["report", str(tmp_path / "runs"), "--no-figures", "--quiet"]) == 0
    assert "last line cut short" in capsys.readouterr().err
    assert ("a run that did not complete (a killed writer's last line, a fleet's recovered parts) is reported with its "
            "rows and said incomplete (exit 0)") in flat(README)
    assert "is not skipped: it is reported with the rows it holds" in flat(DOCS["report.md"])


def test_min_time_says_the_same_default_in_the_readme_help_and_config():
    from ipcbench.cli import _bench_parser, _min_time_words
    from ipcbench.config import DEFAULT_RULE
    from ipcbench.core.sampler import SHORT_BELOW

    words = _min_time_words(DEFAULT_RULE)
    short = DEFAULT_RULE.min_time_s * DEFAULT_RULE.short_factor * 1e3
    assert words == f"{DEFAULT_RULE.min_time_s * 1e3:g}, {short:g} under {SHORT_BELOW >> 20} MiB"
    helped = flat(next(a.help for a in _bench_parser()._actions if "--min-time" in a.option_strings))
    assert f"(default {words};" in helped
    assert f"`--min-time MS` (one sample's length, default {DEFAULT_RULE.min_time_s * 1e3:g}; {short:g} under " \
           f"{SHORT_BELOW >> 20} MiB)" in flat(README)


def test_every_option_of_a_run_is_in_the_readme():
    """`--placements` was missing."""
    from ipcbench.cli import _bench_parser
    from ipcbench.config import DEFAULT_RULE

    options = {o for a in _bench_parser()._actions for o in a.option_strings if o.startswith("--")} - {"--version",
                                                                                                      "--help"}
    assert [o for o in sorted(options) if f"`{o}" not in README and f"[{o}" not in README] == []
    assert f"`--placements N` (a row's samples rotate over N places of its buffers; default " \
           f"{DEFAULT_RULE.placements})" in flat(README)
    assert f"`--contexts K` (samples under 64 MiB spread over K green contexts; default {DEFAULT_RULE.contexts})" \
        in flat(README)


def test_peak_and_ceiling_are_explained_where_used():
    """"peak 450" (report) and "ceiling 478" (check) of one link, neither explained."""
    from ipcbench.catalogue.links import NVLINK

    gen = NVLINK["4.0"]
    peak, ceiling = f"{18 * gen.peak_gbps:.0f}", f"{18 * gen.ceiling_gbps:.0f}"
    text = flat(README)
    assert f"% of the link's peak (the data rate the vendor quotes: {peak} GB/s a direction for NVLink 4.0 × 18; the " \
           f"*ceiling* check holds a floor to is its signalling rate, {ceiling}" in text
    assert f"{ceiling} GB/s per direction, the signalling rate, twice that for `bidir`, which counts both ways; the " \
           f"report's *peak*, {peak} GB/s there, is the data rate NVIDIA quotes" in flat(DOCS["check.md"])


def test_the_reports_link_line_and_checks_ceiling_finding_explain_them():
    from ipcbench.judging import expect, judge
    from ipcbench.record.run import load_run
    from ipcbench.report.headline import _link_desc

    run = load_run(REPO / "results" / "h200x2-check-1" / "results.csv")
    assert _link_desc(run.meta) == ("NVSwitch (18 × NVLink 4.0, peak 450 GB/s per direction, the quoted data rate; "
                                    "ceiling 478, the signalling rate)")
    r = next(run.frame[(run.frame["method"] == "ce") & (run.frame["direction"] == "push")].itertuples())
    e = expect.Expectation("NVIDIA H200", "nvswitch", "ce", "push", 1, 1 << 30, floor_gbps=500.0, why="w",
                           where="site.toml:2")
    said = judge._against(run, r, e).reason
    assert "478 GB/s (18 x 26.5625 GB/s, NVLink 4.0 per direction: its signalling rate, above the 450 GB/s peak " \
           "quoted as its data rate" in said


@pytest.fixture(scope="module")
def h200_catches():
    """compare's smallest change caught, per kind of row, of the shipped 2 x H200 `all` runs, as it says it."""
    from ipcbench.judging.compare import compare, load
    from ipcbench.judging.bounds import pct

    c = compare([load(REPO / "results" / "h200x2-all-1")], load(REPO / "results" / "h200x2-all-2"))
    return {x["kind"]: pct(x["smallest_change"]) for x in c.info["catches"]}


def test_the_sensitivity_over_contexts_is_the_recorded_one_h200_set():
    """The README's numbers of the gate over contexts are what compare says of the recorded runs."""
    from ipcbench.judging.bounds import pct
    from ipcbench.judging.compare import compare, load

    data = REPO / "tests" / "data" / "h200x1-1129"
    c = compare([load(data / "all-1")], load(data / "all-2"))
    got = {x["kind"]: pct(x["smallest_change"]) for x in c.info["catches"]}
    mids = sorted((got[f"{e} 256K-64M"] for e in ("ce", "sm", "sm_bulk")), key=lambda p: float(p[:-1]))
    said = (f"`tests/data/h200x1-1129` all-1 against -2: ≤ 256K ce {got['ce <= 256K']}, SM {got['sm <= 256K']}, "
            f"bulk {got['sm_bulk <= 256K']}, 256K-64M {mids[0][:-1]}-{mids[-1]}; one context: 24%, 18%)")
    assert said in flat(README)
    one = compare([load(data / "before-all-1")], load(data / "all-1"))
    assert {pct(x["smallest_change"]) for x in one.info["catches"] if x["band"] != ">= 64M"} == {"24%", "18%"}


def test_the_sensitivity_examples_are_the_shipped_h200_runs(h200_catches):
    """They were an H100 pair's numbers while the runs shipped are H200s."""
    small, large = "<= 256K", ">= 64M"
    ce, sm, big = h200_catches[f"ce {small}"], h200_catches[f"sm {small}"], h200_catches[f"ce {large}"]
    assert h200_catches[f"sm {large}"] == big
    assert (f"(two H200s, `results/h200x2-all-1` against `-all-2`: copy engine ≤ 256K {ce}, SM copies ≤ 256K {sm}, "
            f"both ≥ 64M {big};") in flat(README)
    assert (f"`results/h200x2-all-1` against `results/h200x2-all-2` (2 × H200) `ce {small}: {ce}; sm {small}: {sm}; "
            f"…; ce {large}: {big} (the threshold)`") in flat(DOCS["report.md"])
    assert "H100" not in flat(README).split("## Gate CI with compare", 1)[1].split("##", 1)[0]


# each term: how it is found, and what says what it is within the words after its first use
TERMS = {
    "twins": (r"\btwins?\b", r"memory shared another way"),
    "honest noise": (r"honest noise", r"own samples|between-runs floor"),
    "floor": (r"\bfloors?\b", r"between runs|between-runs|the least"),
    "permutation rounds": (r"permutation rounds?", r"once and receiv"),
    "serial steps": (r"serial steps?", r"one pair at a time"),
}
WINDOW = 300  # characters after the term (and 60 before it) that must define it


@pytest.mark.parametrize("doc", ["README.md", *DOCS])
@pytest.mark.parametrize("term", TERMS)
def test_each_term_is_defined_where_it_is_first_used(doc, term):
    text = flat(README if doc == "README.md" else DOCS[doc])
    find, define = TERMS[term]
    first = re.search(find, text, flags=re.I)
    if first is None:
        return  # not used there
    around = text[max(0, first.start() - 60): first.end() + WINDOW]
    assert re.search(define, around, flags=re.I), f"{doc}: '{term}' first used undefined: …{around}…"


def test_the_readme_says_how_long_its_test_command_takes():
    tested = flat(README).split("## Install and test", 1)[1].split("## ", 1)[0]
    assert re.search(r"The test command takes about \S+ min on 2 cores\.", tested)
    assert Path(REPO / ".ci" / "run").is_file()
