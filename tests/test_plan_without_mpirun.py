"""check and selftest plan a node without mpirun as `all` does (issue 44, item 7: `check --dry-run --ranks 8
--topology nvswitch` was refused, selftest knew neither --ranks nor --topology), and check's dry run states its own
term as the time it takes, never as a negative one (item 5: "check's own term, -1.0 s"). On fake worlds (threads for
ranks, tests/fakes.py): a plan without mpirun is one fake rank with --ranks N, under mpirun N fake ranks."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from ipcbench.catalogue.costs import COSTS
from ipcbench.check import command as check
from ipcbench.check.command import check_tail
from ipcbench.core import topology
from ipcbench.run.costmodel import check_seconds
from ipcbench.selftest import command as selftest
from test_run_on_fakes import fake_job  # noqa: F401 - a fixture

KEYS = ("ranks", "pairs", "pair_mode", "steps", "measurements", "estimated_s")


def parsed(add_arguments, argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(argv)


def check_plan(fake_job, capsys, ranks: int, *args: str) -> dict:  # noqa: F811
    """check's dry-run plan (JSON) on `ranks` fake ranks."""
    ns = parsed(check.add_arguments, ["--dry-run", "--json", "--topology", "nvswitch", "--quiet", *args])
    opts = check.Options(ns, [])
    statuses, _ = fake_job(opts.config(), n=ranks, entry=lambda c: check.run(opts))
    assert statuses == [0] * ranks, statuses
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def selftest_plan(fake_job, capsys, ranks: int, *args: str) -> dict:  # noqa: F811
    ns = parsed(selftest.add_arguments, ["--dry-run", "--topology", "nvswitch", "--quiet", *args])
    cfg, names, tolerance = selftest.build(ns, [])
    statuses, _ = fake_job(cfg, n=ranks, entry=lambda c: selftest.run(cfg, names, tolerance, ns.cross))
    assert statuses == [0] * ranks, statuses
    return capsys.readouterr().out


def test_check_plans_n_ranks_without_mpirun_as_mpirun_would(fake_job, monkeypatch, capsys):  # noqa: F811
    monkeypatch.setattr(topology, "nvml_gpu_count", lambda: 0)  # a login node
    alone = check_plan(fake_job, capsys, 1, "--ranks", "4")
    launched = check_plan(fake_job, capsys, 4)
    assert alone["ranks"] == 4 and alone["pairs"] == 12 and alone["pair_mode"]["mode"] == "concurrent"
    assert {k: alone[k] for k in KEYS} == {k: launched[k] for k in KEYS}


def test_selftest_plans_n_ranks_without_mpirun_as_mpirun_would(fake_job, monkeypatch, capsys):  # noqa: F811
    monkeypatch.setattr(topology, "nvml_gpu_count", lambda: 0)
    alone = selftest_plan(fake_job, capsys, 1, "--ranks", "4")
    launched = selftest_plan(fake_job, capsys, 4)
    assert alone.startswith("(started without mpirun: planning `mpirun -np 4`, as --ranks asks)\n")
    assert "ipcbench plan (dry run: no GPU work)" in launched and alone.split("\n", 1)[1] == launched


@pytest.mark.parametrize("add_arguments, build", [
    (check.add_arguments, lambda ns: check.Options(ns, []).config()),
    (selftest.add_arguments, lambda ns: selftest.build(ns, [])[0]),
])
def test_ranks_and_topology_plan_only(add_arguments, build):
    """--ranks and --topology shape a dry run's plan: without --dry-run they are refused (RunConfig's one rule)."""
    from ipcbench.errors import UsageError

    for argv, words in ((["--ranks", "8"], "--ranks goes with --dry-run"),
                        (["--dry-run", "--ranks", "1"], "--ranks must be in 2..1024"),
                        (["--topology", "pcie"], "--topology")):
        with pytest.raises(UsageError, match=re.escape(words)):
            build(parsed(add_arguments, argv))
    assert build(parsed(add_arguments, ["--dry-run", "--ranks", "8", "--topology", "nvlink"])).ranks == 8


@pytest.mark.parametrize("ranks", [2, 4, 8, 16])
def test_checks_own_term_is_said_as_the_time_it_takes(ranks):
    """The dry run said "check's own term, -1.5 s at 8 ranks": check's verdict and closing, less the closing of
    `all` it replaces, a negative number read as a duration. It now says check's own time (never below 0) and the
    closing it replaces, each a duration; the estimate still adds their difference."""
    from ipcbench.run.costmodel import check_own_seconds

    term, said = check_tail(list(range(ranks)), list(range(ranks)))
    own, close = check_own_seconds(COSTS, ranks), COSTS.close_for(ranks)
    assert term == pytest.approx(check_seconds(COSTS, ranks)) == pytest.approx(own - close)
    assert own >= 0 and said.startswith(f"check's verdict and its own closing, {own:.1f} s at {ranks} ranks"), said
    assert f"in place of `all`'s closing of {close:.1f} s" in said
    assert not re.search(r"-\d", said), said  # no negative duration
