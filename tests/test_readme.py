"""README.md is a user's guide that stays true: short, its set-up commands the ones CI runs, its time table
the dry run's estimate under the assumption it states, its links to files that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from test_time_budget import estimate

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def test_it_is_a_guide_not_a_manual():
    assert len(README.splitlines()) <= 200


def test_ci_installs_and_tests_as_the_readme_says():
    """.ci/run installs exactly as the README's "Install and test" says and runs its commands."""
    block = README.split("## Install and test", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    install, test, checks = block
    assert install == "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[mpi,test]'"
    ci = (REPO / ".ci" / "run").read_text()
    assert "python -m pip install -q -e '.[mpi,test]'" in ci and f"(README: {install})" in ci
    assert test == "python -m pytest" and "python -m pytest -ra" in ci
    assert checks == "ruff check . && mypy" and "\nruff check . ||" in ci and "\nmypy ||" in ci
    run = README.split("## Install and run", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert run[0] == "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[mpi]'"


@pytest.mark.parametrize("n", [2, 4, 8])
def test_the_time_table_is_the_dry_runs_estimate_for_the_node_it_names(n):
    assert "--dry-run --topology nvswitch" in README  # the assumption, stated with the numbers
    row = re.search(rf"^\| {n} \| (\d+) s \| (\d+) s \| (\d+) s \|$", README, flags=re.M)
    assert row, f"no row for {n} GPUs"
    for text, args in zip(row.groups(), [(), ("--quick",), ("--sizes", "4K:256M")]):
        assert int(text) == round(estimate(n, *args)[0]), (n, args)


def test_links_name_files_that_exist():
    for target in re.findall(r"\]\(([^)#]+)", README):
        assert (REPO / target).exists(), target
