"""The time budget of `ipcbench all` on an NVSwitch node, as the dry run estimates it (run/dryrun.py, fitted
to real runs): 4 GPUs within 120 s, 8 within 265 s, `--quick` on 8 within 56 s. The budgets were 60, 150 and 30 s
until the model was refitted to runs on two H100s (2026-11-25: 31 ms of fixed work a measurement, not 12): they
state what the current code costs, and come down as that work is cut. A test of the planner and
estimator arithmetic (what `mpirun -np N ipcbench all --dry-run` prints on such a node), not a timing: a
suite or step that breaks it must be paid for elsewhere, or the budget changed on purpose."""

from __future__ import annotations

import pytest

from ipcbench.cli import _bench_parser
from ipcbench.config import build_config
from ipcbench.core.schedule import decide_mode
from ipcbench.run.dryrun import estimate_seconds

# Twin steps (pool, vmm, cuda.core: the same engines on memory shared another way) take every other size of
# the default sweep (suites/registry.TWIN_STRIDE); at every size they alone would put 4 GPUs at ~70 s and 8
# at ~156 s.
BUDGET_S = [(4, (), 120.0), (8, (), 265.0), (8, ("--quick",), 56.0)]
BUDGET = {(n, args): b for n, args, b in BUDGET_S}


def estimate(n: int, *args: str) -> tuple[float, object]:
    """The estimate for `mpirun -np n ipcbench all ARGS` with one rank per GPU, every GPU pair on NVSwitch."""
    ns = _bench_parser().parse_args(["all", *args])
    cfg = build_config(ns)
    mode = decide_mode(cfg.pairs, 1, ["nvswitch"] * (n * (n - 1)), n, cfg.serial_pairs, cfg.quick)
    return estimate_seconds(cfg.steps(n), cfg.rule, mode), mode


@pytest.mark.parametrize("n, args", [(4, ()), (8, ()), (8, ("--quick",))])
def test_auto_on_an_nvswitch_node_is_rounds_and_a_ring(n, args):
    mode = estimate(n, *args)[1]
    assert mode.concurrent and mode.serial.ring


@pytest.mark.parametrize("n, args, budget", BUDGET_S)
def test_all_fits_its_budget_on_an_nvswitch_node(n, args, budget):
    est = estimate(n, *args)[0]
    assert est <= budget, f"{n} GPUs {' '.join(args) or 'default'}: estimated {est:.1f} s > {budget:.0f} s"


def test_the_ring_and_quick_are_what_make_it_fit():
    """Every pair of every serial step would not fit 8 GPUs; --quick is far below the default."""
    assert estimate(8, "--serial-pairs", "all")[0] > BUDGET[(8, ())]
    assert estimate(8, "--quick")[0] < 0.35 * estimate(8)[0]


def test_twins_at_every_size_would_not_fit():
    """What thinning the twins buys: with --sizes 4K:256M spelled out (every step at every size) 4 and 8
    GPUs are over budget; the default sweep is the same sizes with twins at every other one."""
    assert estimate(4, "--sizes", "4K:256M")[0] > BUDGET[(4, ())]
    assert estimate(8, "--sizes", "4K:256M")[0] > BUDGET[(8, ())]


def test_the_model_meets_the_runs_it_was_fitted_to():
    """The refit (run/dryrun.py): `mpirun -np 2 ipcbench all` took 44.5-45.5 s on two H100s (tests/data/h100x2's
    runs) and about 59 s with two ranks on one H100 (results/h100-nomps: 56.3 s of suites, 3 s to start): the
    estimate within 10% of each."""
    ns = _bench_parser().parse_args(["all"])
    cfg = build_config(ns)
    two_gpus = decide_mode(cfg.pairs, 1, ["nvswitch"] * 2, 2, cfg.serial_pairs, cfg.quick)
    one_gpu = decide_mode(cfg.pairs, 2, None, 2, cfg.serial_pairs, cfg.quick)
    assert estimate_seconds(cfg.steps(2), cfg.rule, two_gpus) == pytest.approx(45.0, rel=0.10)
    assert estimate_seconds(cfg.steps(2), cfg.rule, one_gpu, ranks_per_gpu=2) == pytest.approx(59.3, rel=0.10)
