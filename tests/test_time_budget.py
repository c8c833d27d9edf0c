"""The time budget of `ipcbench all` on an NVSwitch node, as the dry run estimates it (run/dryrun.py: the cost model of
run/costmodel.py under the constants catalogue/costs.py holds, fitted to recorded runs by tools/costfit.py): 4 GPUs
within 55 s, 8 within 115 s, `--quick` on 8 within 30 s (120, 265 and 56 s until the host's work around the samples
was cut, 2026-11-25; 55, 110 and 30 s until NCCL's set-up and --quick's loop samples were cut, 2026-11-26:
docs/suites.md, "Where a run's time goes"; 50, 105 and 25 s until the model was fitted to runs of 4 GPUs,
2026-11-28). A test of the planner and estimator arithmetic (what
`mpirun -np N ipcbench all --dry-run` prints on such a node), not a timing: a suite or step that breaks it must be
paid for elsewhere, or the budget changed on purpose. And every time table the docs quote is the model's
(tools/costfit.GENERATED): a refit that did not rewrite them (`python tools/costfit.py ... --write`) fails here."""

from __future__ import annotations

import pytest

from ipcbench.cli import _bench_parser
from ipcbench.config import build_config
from ipcbench.core.schedule import decide_mode
from ipcbench.run.dryrun import estimate_seconds

# Twin steps (pool, vmm, cuda.core: the same engines on memory shared another way) take every other size of
# the default sweep (suites/registry.TWIN_STRIDE); at every size they alone would put 4 GPUs at ~57 s and 8
# at ~118 s.
# Refit on 2026-11-28 to 4 GPUs, whose start-up and closing grow with the ranks (4.9 s and 2 s at 4 ranks against 3.2
# and 0.4 at 2): 52, 110 and 29 s. The 35 s for 4 GPUs is not met (the runs took 51-57 s).
BUDGET_S = [(4, (), 55.0), (8, (), 115.0), (8, ("--quick",), 30.0)]
BUDGET = {(n, args): b for n, args, b in BUDGET_S}


def estimate(n: int, *args: str) -> tuple[float, object]:
    """The estimate for `mpirun -np n ipcbench all ARGS` with one rank per GPU, every GPU pair on NVSwitch."""
    ns = _bench_parser().parse_args(["all", *args])
    cfg = build_config(ns)
    mode = decide_mode(cfg.pairs, 1, ["nvswitch"] * (n * (n - 1)), n, cfg.serial_pairs, cfg.quick)
    return estimate_seconds(cfg.steps(n), cfg.rule, mode, gpus=n), mode


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
    """Every command's wall on each machine it was fitted on (the mean of its runs) is within 10% of the model (the
    issue's target), every single run within 20% (runs of one command on one machine spread on their own: three
    checks 3.16-4.13 s on two H200s, 2026-11-26), and the table says so: its residuals are the model's
    against those runs, not numbers typed in."""
    from ipcbench.catalogue.costs import COSTS

    assert COSTS.runs and len(COSTS.residuals) == len(COSTS.runs)
    commands = COSTS.command_residuals()
    assert {c for c, _, _, _, _ in commands} >= {"ipcbench all", "ipcbench all --quick", "ipcbench check",
                                                  "ipcbench selftest"}
    worst = max(commands, key=lambda c: abs(c[4] / c[3] - 1))
    assert COSTS.worst_command_pct <= 10.0, worst
    run = max(COSTS.residuals, key=lambda r: abs(r.pct))
    assert abs(run.pct) <= 20.0, run


def test_the_model_errs_long_on_a_machine_it_was_not_fitted_to():
    """One H200 with two ranks on another machine (tests/data/h200x1-0126, 2026-11-26, an older code's runs with
    their plans and walls), which the fit never saw: every command's mean wall is over-estimated, by 11-33% (its
    start-up and closing are shorter than those of the machine of the fit: 2.0-2.3 s against 2.9-3.7 to start two
    ranks). Not the 10% the fitted machine meets: the model carries the start-up of the machine it was fitted on.
    An estimate that errs long is the safe side for a job's --time. docs/suites.md quotes it."""
    from pathlib import Path

    from ipcbench.catalogue.costs import COSTS, plan_command
    from conftest import tool

    costfit = tool("costfit")

    data = Path(__file__).resolve().parent / "data" / "h200x1-0126"
    assert not any("h200x1-0126" in r for r in COSTS.runs)  # out of sample
    walls = costfit.read_walls(data / "walls.txt")
    means: dict[str, list[tuple[float, float]]] = {}
    for name, wall in walls.items():
        run = costfit.load_run(data / Path(name).name)
        run.user_wall_s = wall
        r = costfit.residual(COSTS, run)
        means.setdefault(plan_command(run.command), []).append((r.measured_s, r.predicted_s))
    assert len(walls) == 11 and set(means) == {"ipcbench all", "ipcbench all --quick", "ipcbench check",
                                              "ipcbench selftest"}
    pct = {c: sum(p for _, p in v) / sum(m for m, _ in v) - 1 for c, v in means.items()}
    assert all(0.0 < x <= 0.35 for x in pct.values()), pct  # long, never short; by 11-33% today


def test_the_table_is_a_fit_of_the_runs_it_names():
    """Refitting the recorded runs the table names (those under tests/data) gives the table: the constants in
    catalogue/costs.py are the fit's, not edited by hand."""
    from pathlib import Path

    from ipcbench.catalogue.costs import COSTS
    from conftest import tool

    costfit = tool("costfit")

    repo = Path(__file__).resolve().parents[1]
    if not all((repo / r / "meta.json").exists() for r in COSTS.runs):
        pytest.skip("the runs the table was fitted to are not in this checkout")
    runs = [costfit.load_run(repo / r) for r in COSTS.runs]
    for r, name in zip(runs, COSTS.runs):  # each run's mpirun-to-exit wall: in the walls.txt beside it
        measured = costfit.read_walls(repo / name / ".." / "walls.txt")
        r.user_wall_s = measured.get(name, measured.get(Path(name).name))
    model = costfit.fit(runs, COSTS, COSTS.fitted)
    assert costfit.render_table(model) == costfit.render_table(COSTS)


@pytest.mark.parametrize("doc", ["README.md", "jobs/README.md", "docs/suites.md"])
def test_every_time_table_the_docs_quote_is_the_models(doc):
    from ipcbench.catalogue.costs import COSTS
    from conftest import tool

    costfit = tool("costfit")

    assert costfit.generated_text(doc, COSTS) == costfit.GENERATED[doc](COSTS)


@pytest.mark.parametrize("doc", ["README.md", "jobs/README.md"])
def test_every_number_the_docs_quote_in_prose_is_the_models(doc):
    from ipcbench.catalogue.costs import COSTS
    from conftest import tool

    costfit = tool("costfit")

    want = [number(COSTS) for d, _, number in costfit.INLINE if d == doc]
    assert want and costfit.inline_numbers(doc) == want


def test_the_table_file_is_what_the_fit_writes():
    """catalogue/costs.py below its marker is render_table(COSTS): a hand edit shows as a difference."""
    from pathlib import Path

    from ipcbench.catalogue import costs
    from conftest import tool

    costfit = tool("costfit")

    text = Path(costs.__file__).read_text()
    assert text.split(costfit.TABLE_MARKER, 1)[1] == costfit.render_table(costs.COSTS)


def test_the_estimate_is_the_table_model():
    """The dry run's estimate is the cost model under catalogue/costs.py's constants, start-up included."""
    from ipcbench.catalogue.costs import COSTS
    from conftest import tool

    costfit = tool("costfit")

    for n, args in [(2, ()), (8, ()), (8, ("--quick",))]:
        assert estimate(n, *args)[0] == pytest.approx(costfit.estimate(COSTS, n, quick=bool(args)))
