"""RunConfig.from_options (config.py): the one constructor of a run's configuration that code calls by keyword,
the bench command (through build_config), check and selftest alike; their suites in the catalogue's order."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from ipcbench.catalogue.suites import ORDER
from ipcbench.check import command as check, plan as check_plan
from ipcbench.cli import _bench_parser
from ipcbench.config import OPTIONS, RunConfig, build_config
from ipcbench.errors import UsageError
from ipcbench.selftest import command as selftest


def bench(*argv: str) -> RunConfig:
    return build_config(_bench_parser().parse_args(list(argv)))


@pytest.mark.parametrize("argv", [["all"], ["all", "--quick"], ["copy", "pool", "--sizes", "4K:1M", "--samples", "3"],
                                  ["kernel", "--noise", "1", "--min-time", "5", "--max-time", "2", "--placements",
                                   "3", "--pairs", "sequential", "--serial-pairs", "ring", "--no-verify"],
                                  ["all", "--dry-run", "--json", "--topology", "nvswitch", "--timeout", "60"]])
def test_the_command_line_and_the_keywords_give_one_config(argv):
    """build_config is from_options of the parsed namespace: every option of the parser is a keyword, and none
    given is its default."""
    ns = _bench_parser().parse_args(argv)
    assert set(OPTIONS) >= set(vars(ns)) and bench(*argv) == RunConfig.from_options(**vars(ns))
    assert RunConfig.from_options(suites=["all"]) == bench("all")


def test_each_option_is_checked_where_the_command_line_checks_it():
    with pytest.raises(UsageError, match="--sizes"):
        RunConfig.from_options(suites=["copy"], sizes="")
    with pytest.raises(UsageError, match="unknown suite"):
        RunConfig.from_options(suites=["nope"], json=True)  # the suite first, as the command line says it
    with pytest.raises(UsageError, match="--json goes with --dry-run"):
        RunConfig.from_options(suites=["copy"], json=True)
    with pytest.raises(UsageError, match="--timeout"):
        RunConfig.from_options(suites=["copy"], timeout=1.0)
    with pytest.raises(UsageError, match="--sm-bulk"):
        RunConfig.from_options(suites=["copy"], sm_bulk="x")


def check_options(**kw) -> check.Options:
    p = argparse.ArgumentParser()
    check.add_arguments(p)
    ns = p.parse_args([])
    return check.Options(argparse.Namespace(**{**vars(ns), **kw}), [])


def test_checks_config_is_quick_every_rank_pair_its_suites_in_the_catalogues_order():
    cfg = check_options(methods="sm_write,nccl,ce").config()
    assert cfg.suites == ("copy", "kernel", "nccl") and cfg.quick and not cfg.gpu_pairs
    assert cfg.sizes == (4096, 256 << 20) and cfg.argv == ("check",) and cfg.pairs == "auto"
    assert check_plan.suites_of(["pool_ce", "ce", "vmm_ce"]) == sorted(["copy", "pool", "vmm"], key=ORDER.index)
    assert dataclasses.replace(cfg, argv=()) == RunConfig.from_options(suites=["copy", "kernel", "nccl"],
                                                                       sizes=check_plan.SIZES, quick=True,
                                                                       timeout=120.0, gpu_pairs=False)


def test_selftests_config_measures_every_pair_its_suites_in_the_catalogues_order():
    """Every pair, serial steps too; pairs as `all` measures them (auto: rounds where the guard holds them), since
    the selftest holds the instrument as the user runs it against its anchors."""
    p = argparse.ArgumentParser()
    selftest.add_arguments(p)
    cfg, names, _ = selftest.build(p.parse_args(["--methods", "vmm_ce,ce,sm_read"]), [])
    assert cfg.suites == ("copy", "kernel", "vmm") and names == ["ce", "sm_read", "vmm_ce"]
    assert (cfg.pairs, cfg.serial_pairs, cfg.quick, cfg.argv) == ("auto", "all", False, ("selftest",))
