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
from ipcbench.suites.registry import plan

# Over budget since pool's core_ce, kernel's sm_bulk and the vmm and nccl suites: their GPU-to-GPU transfer
# steps keep every pair at every size (rounds of disjoint pairs; the serial steps are already on a ring), and
# they alone take ~56 of the 70 s at 4 GPUs and ~131 of the 156 s at 8. Fitting needs a cheaper measurement
# (the estimate's fixed 11.5 ms down to ~8.8 ms) or a coarser default sweep (4K:256M:x4: ~43 / ~93 s): a
# decision of its own. Strict: the day it fits, the marker must go.
OVER = pytest.mark.xfail(strict=True, reason="transfer steps at every pair and size exceed the budget (see above)")
BUDGET_S = [pytest.param(4, (), 60.0, marks=OVER), pytest.param(8, (), 150.0, marks=OVER), (8, ("--quick",), 30.0)]


def estimate(n: int, *args: str) -> tuple[float, object]:
    """The estimate for `mpirun -np n ipcbench all ARGS` with one rank per GPU, every GPU pair on NVSwitch."""
    ns = _bench_parser().parse_args(["all", *args])
    cfg = build_config(ns)
    mode = decide_mode(cfg.pairs, 1, ["nvswitch"] * (n * (n - 1)), n, cfg.serial_pairs, cfg.quick)
    return estimate_seconds(plan(list(cfg.suites), n, list(cfg.sizes), cfg.quick), cfg.rule, mode), mode


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
