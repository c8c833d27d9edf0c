"""The time budget of `ipcbench all` on an NVSwitch node, as the dry run estimates it (run/dryrun.py, fitted
to real runs): 4 GPUs within 60 s, 8 within 150 s, `--quick` on 8 within 30 s. A test of the planner and
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
BUDGET_S = [(4, (), 60.0), (8, (), 150.0), (8, ("--quick",), 30.0)]


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
    assert estimate(8, "--serial-pairs", "all")[0] > 150.0
    assert estimate(8, "--quick")[0] < 0.35 * estimate(8)[0]


def test_twins_at_every_size_would_not_fit():
    """What thinning the twins buys: with --sizes 4K:256M spelled out (every step at every size) 4 and 8
    GPUs are over budget; the default sweep is the same sizes with twins at every other one."""
    assert estimate(4, "--sizes", "4K:256M")[0] > 60.0
    assert estimate(8, "--sizes", "4K:256M")[0] > 150.0
