"""The dry run's cost model (run/costmodel.py) and its fit (tools/costfit.py): the fit recovers the constants that
made a set of runs, reads recorded runs and the walls file as documented, refuses what it cannot rebuild, and the
dry run states what the model was fitted to and what it extrapolates (docs/suites.md, "How long `all` takes")."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ipcbench.catalogue.costs import COSTS, CostModel, SuiteCost
from ipcbench.cli import _bench_parser
from ipcbench.config import build_config
from ipcbench.core.schedule import decide_mode
from ipcbench.record.meta import read_meta
from ipcbench.run import costmodel

from conftest import tool

costfit = tool("costfit")

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"

# pipeline walks the same measurements under `all` and `--quick` (its own sizes): its one-off cost cannot be told
# from its per-measurement cost by those runs (test_a_suite_of_one_plan_gets_its_fixed_cost_alone), so it has none
TRUE = CostModel(samples_factor=1.3, suites={s: SuiteCost(0.004 * (i + 1), 0.1 * i if s != "pipeline" else 0.0)
                                             for i, s in enumerate(["copy", "kernel", "pool", "vmm", "staged", "nccl",
                                                                    "latency", "handles", "pipeline"])},
    default=SuiteCost(0.02, 0.0), shared_gpu_factor=1.5, close_s=0.3, close_rank_s=0.2, startup_s=1.5,
    startup_rank_s=1.0, startup_basis="measured", fitted="truth", machines=(), runs=())


def synthetic(args: list[str], n: int, ranks_per_gpu: int, model: CostModel, name: str) -> costfit.RecordedRun:
    """A run of `ipcbench ARGS` on n ranks whose walls are exactly `model`'s."""
    cfg = build_config(_bench_parser().parse_args(args))
    kinds = ["nvswitch"] * (n * (n - 1)) if ranks_per_gpu == 1 else None
    mode = decide_mode(cfg.pairs, ranks_per_gpu, kinds, n, cfg.serial_pairs, cfg.quick)
    plans = costmodel.suite_plans(cfg.steps(n), cfg.rule, mode, n // ranks_per_gpu)
    suites = {s: costmodel.suite_seconds(model, s, p, ranks_per_gpu, n // ranks_per_gpu) for s, p in plans.items()}
    wall = sum(suites.values()) + model.close_for(n)
    rows = 1000
    return costfit.RecordedRun(name, " ".join(["ipcbench", *args]), f"{n // ranks_per_gpu} x GPU, {n} ranks",
                               ranks_per_gpu, n // ranks_per_gpu, wall, suites, plans,
                               samples=round(rows * cfg.rule.min_samples * model.samples_factor),
                               min_samples=rows * cfg.rule.min_samples, user_wall_s=wall + model.startup_for(n),
                               n_ranks=n)


def test_the_fit_recovers_the_constants_that_made_the_runs():
    """Runs of 2 and 4 ranks: the suites' constants, the factors, and the start-up and closing as lines in the
    ranks (start-up in their doublings)."""
    runs = [synthetic(["all"], 2, 1, TRUE, "a"), synthetic(["all", "--quick"], 2, 1, TRUE, "q"),
            synthetic(["copy", "kernel", "latency"], 2, 2, TRUE, "one"),
            synthetic(["all", "--quick"], 4, 1, TRUE, "q4")]
    got = costfit.fit(runs, COSTS, "today")
    assert got.samples_factor == pytest.approx(TRUE.samples_factor, rel=1e-3)
    for name, c in TRUE.suites.items():
        assert got.suites[name].fixed_s == pytest.approx(c.fixed_s, abs=2e-5), name
        assert got.suites[name].once_s == pytest.approx(c.once_s, abs=2e-3), name
    assert got.one_gpu_factor == pytest.approx(1.5, rel=1e-3)  # "one": two ranks on one GPU
    assert got.shared_gpu_factor == COSTS.shared_gpu_factor  # no run of ranks sharing GPUs of several: kept
    assert got.close_s == pytest.approx(0.3, abs=1e-3) and got.close_rank_s == pytest.approx(0.2, abs=1e-4)
    assert got.startup_s == pytest.approx(1.5, abs=1e-3) and got.startup_rank_s == pytest.approx(1.0, abs=1e-4)
    assert got.startup_for(8) == pytest.approx(4.5, abs=1e-3) and got.close_for(8) == pytest.approx(1.9, abs=1e-3)
    assert got.startup_basis.startswith("measured") and got.worst_residual_pct < 0.1
    assert got.fitted == "today" and got.runs == ("a", "q", "one", "q4")
    two = costfit.fit(runs[:3], COSTS, "today")  # one rank count: its mean, no slope
    assert two.startup_rank_s == two.close_rank_s == 0.0 and two.startup_s == pytest.approx(TRUE.startup_for(2))


def test_a_suite_of_one_plan_gets_its_fixed_cost_alone():
    """Runs that all walked the same plan cannot tell a suite's one-off cost from its per-measurement cost: the
    fit gives it the per-measurement cost only, rather than an arbitrary split."""
    runs = [synthetic(["all"], 2, 1, replace(TRUE, suites={**TRUE.suites, "copy": SuiteCost(0.01, 0.0)}), "a")]
    got = costfit.fit(runs, COSTS, "today")
    assert got.suites["copy"] == SuiteCost(0.01, 0.0)


def test_a_suite_whose_rows_are_not_min_time_samples_is_fitted_without_them():
    """Handle costs are timed one call at a time, not in samples of --min-time: more measurements under the
    default rule (longer samples) took no longer than fewer under --quick. The sample term would need a negative
    fixed cost; the suite is fitted without it, its time still per measurement (more pairs cost more), never a
    negative constant."""
    flat = replace(TRUE, suites={**TRUE.suites, "handles": SuiteCost(0.02, 0.0, samples=False)})
    runs = [synthetic(["all"], 2, 1, flat, "a"), synthetic(["all", "--quick"], 2, 1, flat, "q")]
    assert runs[0].plans["handles"].weight > runs[1].plans["handles"].weight
    runs[1].suite_wall_s["handles"] = runs[0].suite_wall_s["handles"] * 1.05  # quick took a little longer
    got = costfit.fit(runs, COSTS, "today").suites["handles"]
    assert not got.samples and got.fixed_s > 0 and got.once_s == 0.0
    assert costfit.fit([synthetic(["all"], 2, 1, flat, "a"), synthetic(["all", "--quick"], 2, 1, flat, "q")],
                       COSTS, "today").suites["handles"] == SuiteCost(0.02, 0.0, samples=False)


def test_without_walls_the_start_up_is_kept_and_said_so():
    runs = [replace(synthetic(["all"], 2, 1, TRUE, "a"), user_wall_s=None)]
    got = costfit.fit(runs, replace(COSTS, startup_s=4.0, startup_basis="assumed: x"), "today")
    assert got.startup_s == 4.0 and got.startup_basis == "assumed: x"
    assert not got.residuals[0].start_included


def test_check_and_selftest_add_their_own_terms_and_leave_the_suites_alone():
    """A check adds its verdict after the run (in the user's wall), a selftest its anchors (in wall_s, per anchor
    measurement): the fit recovers both from runs that are exactly the model plus them, and neither moves a suite's
    constants or the start-up, which come from runs of suites alone."""
    base = [synthetic(["all"], 2, 1, TRUE, "a"), synthetic(["all", "--quick"], 2, 1, TRUE, "q")]
    check = synthetic(["copy", "kernel"], 2, 1, TRUE, "c")
    check = replace(check, kind="check", command="ipcbench check",  # its verdict and closing: 0.6 s, not all's
                    user_wall_s=check.user_wall_s - TRUE.close_for(2) + 0.6)
    test = synthetic(["copy", "kernel"], 2, 1, TRUE, "s")
    test = replace(test, kind="selftest", command="ipcbench selftest", anchor_units=348,
                   wall_s=test.wall_s + 348 * 0.04, user_wall_s=test.user_wall_s + 348 * 0.04)
    alone = costfit.fit(base, COSTS, "today")
    got = costfit.fit([*base, check, test], COSTS, "today")
    assert got.check_s == pytest.approx(0.6, abs=1e-3) and got.anchor_s == pytest.approx(0.04, abs=1e-5)
    assert got.suites == alone.suites and got.startup_s == alone.startup_s and got.close_s == alone.close_s
    assert got.runs == ("a", "q", "c", "s") and got.worst_residual_pct < 0.1
    assert costmodel.anchor_seconds(got, 100) == pytest.approx(4.0)
    assert costmodel.check_seconds(got, 2) == pytest.approx(0.6 - got.close_for(2), abs=1e-3)  # in place of close
    kept = costfit.fit(base, replace(COSTS, check_s=0.5, check_rank_s=0.0, anchor_s=None), "today")  # no such runs
    assert kept.check_s == 0.5 and kept.anchor_s is None and costmodel.anchor_seconds(kept, 100) == 0.0
    assert costmodel.check_seconds(replace(kept, check_s=None), 4) == 0.0  # never fitted: nothing added


def test_checks_own_term_is_a_line_in_the_ranks():
    """check judges more pairs on more ranks (4 GPUs: 200 checks, 8 ranks: 804): its term beyond its suites grows
    with them; the fit recovers the line from checks of 2 and 4 ranks."""
    base = [synthetic(["all"], 2, 1, TRUE, "a"), synthetic(["all", "--quick"], 4, 1, TRUE, "q")]
    checks = []
    for n in (2, 4):
        c = synthetic(["copy", "kernel"], n, 1, TRUE, f"c{n}")
        checks.append(replace(c, kind="check", command="ipcbench check",
                              user_wall_s=c.user_wall_s - TRUE.close_for(n) + 0.1 + 0.15 * n))
    got = costfit.fit([*base, *checks], COSTS, "today")
    assert got.check_s == pytest.approx(0.1, abs=1e-3) and got.check_rank_s == pytest.approx(0.15, abs=1e-4)
    assert got.worst_residual_pct < 0.1


def test_the_fit_needs_a_run_of_one_rank_per_gpu():
    from ipcbench.errors import UsageError

    with pytest.raises(UsageError, match="one rank per GPU"):
        costfit.fit([synthetic(["copy"], 2, 2, TRUE, "one")], COSTS, "today")


def test_a_recorded_run_rebuilds_the_plan_it_walked():
    """The plan rebuilt from meta.json measures as many rows as the run wrote (two-GPU `all`: 917 rows)."""
    run = costfit.load_run(DATA / "h100x2-current" / "all-1")
    assert run.name == "tests/data/h100x2-current/all-1" and run.ranks_per_gpu == 1 and run.n_gpus == 2
    assert set(run.plans) == set(run.suite_wall_s) and run.wall_s == 46.08
    assert run.machine == "2 x NVIDIA H100 80GB HBM3, 2 ranks"
    one = costfit.load_run(DATA / "h100x1" / "one-1")
    assert one.ranks_per_gpu == 2 and set(one.plans) == {"copy", "kernel", "latency"}
    assert 1.0 < one.samples / one.min_samples < 2.0


def test_the_plan_comes_from_what_meta_json_records():
    """The configuration is rebuilt from meta.json's suites, sizes and sampling (not from re-parsing its command):
    a sampling key this version does not know is left out, and the plan is the one the CLI would build."""
    meta = read_meta(DATA / "h100x2-current" / "quick-1")
    meta.options["sampling"]["a_later_key"] = 1
    cfg = costfit.recorded_config(meta)
    cli = build_config(_bench_parser().parse_args(["all", "--quick"]))
    # runs recorded before the rule had short samples, floor-share stopping and contexts sampled every row alike, in
    # one context
    assert cfg.rule == replace(cli.rule, short_factor=1.0, floor_share=0.0, contexts=1) and cfg.quick
    assert cfg.thin_twins == cli.thin_twins
    assert [(s.label, s.sizes) for s in cfg.steps(2)] == [(s.label, s.sizes) for s in cli.steps(2)]
    full = costfit.recorded_config(read_meta(DATA / "h100x2-current" / "all-1"))
    assert full.thin_twins and [s.sizes for s in full.steps(2)] == [s.sizes for s in
                                                                    build_config(_bench_parser().parse_args(["all"])).steps(2)]


def test_only_commands_that_measure_are_fitted(tmp_path):
    from ipcbench.errors import UsageError

    for command, needle in ((["ipcbench", "report", "x"], "measured nothing"),
                            (["ipcbench", "compare", "a", "b"], "measured nothing"), (None, "no readable meta.json")):
        d = tmp_path / (command[1] if command else "empty")
        d.mkdir()
        if command:
            (d / "meta.json").write_text(json.dumps({"command": command, "status": "complete", "wall_s": 1,
                                                     "suite_wall_s": {}}))
        with pytest.raises(UsageError, match=needle):
            costfit.load_run(d)


def test_the_walls_file(tmp_path):
    f = tmp_path / "walls.txt"
    f.write_text("# run  wall\nresults/all-1/ 49.5\n\nquick-1 14.2  # from /usr/bin/time\n")
    assert costfit.read_walls(f) == {"results/all-1": 49.5, "quick-1": 14.2}
    f.write_text("results/all-1\n")
    from ipcbench.errors import UsageError

    with pytest.raises(UsageError, match=r"walls.txt:1: expected `RUN_DIR WALL_S`"):
        costfit.read_walls(f)


def test_the_command_prints_residuals_and_refuses_a_walls_line_of_no_run(tmp_path):
    runs = [str(DATA / "h100x2-current" / d) for d in ("all-1", "quick-1")]
    walls = tmp_path / "walls.txt"
    walls.write_text("all-1 49.0\nquick-1 14.5\n")
    p = subprocess.run([sys.executable, str(REPO / "tools" / "costfit.py"), *runs, "--walls", str(walls)],
                       capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert "startup_s" in p.stdout and "worst run residual" in p.stdout and "measured: mpirun to exit" in p.stdout
    walls.write_text("all-9 49.0\n")
    p = subprocess.run([sys.executable, str(REPO / "tools" / "costfit.py"), *runs, "--walls", str(walls)],
                       capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 2 and p.stderr.strip() == "costfit: error: --walls names runs not given: all-9"


def test_the_dry_run_uses_the_table():
    """estimate_seconds is the model under catalogue/costs.py's constants: another table, another estimate."""
    from ipcbench.run.dryrun import estimate_seconds

    cfg = build_config(_bench_parser().parse_args(["all"]))
    mode = decide_mode(cfg.pairs, 1, ["nvswitch"] * 2, 2, cfg.serial_pairs, cfg.quick)
    steps = cfg.steps(2)
    assert estimate_seconds(steps, cfg.rule, mode) == costmodel.wall_seconds(COSTS, steps, cfg.rule, mode)
    slower = replace(COSTS, startup_s=COSTS.startup_s + 10)  # 2 ranks (no GPU count: a node of two)
    assert estimate_seconds(steps, cfg.rule, mode, model=slower) == pytest.approx(
        estimate_seconds(steps, cfg.rule, mode) + 10)
    # ranks sharing GPUs slow the measurements both ranks drive, not one rank's, nor the suites' one-off costs; every
    # rank on one GPU has its factor
    plans = costmodel.suite_plans(steps, cfg.rule, mode)
    once = sum(COSTS.suite(name).once_s for name, p in plans.items() if p.weight)
    parts = [costmodel.measurement_seconds(COSTS, n, p) for n, p in plans.items() if p.weight]
    one_rank, both = sum(a for a, _ in parts), sum(b for _, b in parts)
    assert one_rank > 0 and both > 0
    start, close = COSTS.startup_for(2), COSTS.close_for(2)
    assert start == pytest.approx(COSTS.startup_s + COSTS.startup_rank_s) and COSTS.startup_rank_s > 0
    assert estimate_seconds(steps, cfg.rule, mode) == pytest.approx(start + close + once + one_rank + both)
    shared = estimate_seconds(steps, cfg.rule, mode, ranks_per_gpu=2, gpus=2)  # 4 ranks
    assert shared == pytest.approx(COSTS.startup_for(4) + COSTS.close_for(4) + once + one_rank
                                   + both * COSTS.shared_gpu_factor)
    assert COSTS.one_gpu_factor is not None and COSTS.one_gpu_factor != COSTS.shared_gpu_factor
    nccl = COSTS.suite("nccl").once_s  # NCCL walks nothing where every rank is on one GPU
    one = estimate_seconds(steps, cfg.rule, mode, ranks_per_gpu=2, gpus=1) - start - close  # 2 ranks
    plans_one = costmodel.suite_plans(steps, cfg.rule, mode, gpus=1)
    assert plans_one["nccl"].weight == 0 and costmodel.suite_seconds(COSTS, "nccl", plans_one["nccl"], 2, 1) == 0.0
    parts = [costmodel.measurement_seconds(COSTS, n, p) for n, p in plans_one.items() if p.weight]
    one_rank, both = sum(a for a, _ in parts), sum(b for _, b in parts)
    assert one == pytest.approx(once - nccl + one_rank + both * COSTS.one_gpu_factor)


def test_a_recorded_plan_reads_back_and_a_bad_one_is_one_line():
    step = costmodel.plan_steps(build_config(_bench_parser().parse_args(["copy"])).steps(2))[0]
    assert costmodel.PlanStep.from_dict(step.as_dict()) == step
    assert costmodel.PlanStep.from_dict({**step.as_dict(), "added_later": 1}) == step  # a later key: not used
    old = {k: v for k, v in step.as_dict().items() if k != "all_ranks"}
    assert not costmodel.PlanStep.from_dict(old).all_ranks  # the plans before the key
    assert costmodel.PlanStep.from_dict({**old, "label": "ce all-to-all"}).all_ranks
    with pytest.raises(ValueError, match="a step of meta.json's plan is not one"):
        costmodel.PlanStep.from_dict({"suite": "copy"})


def test_only_steps_both_ranks_drive_pay_for_sharing_a_gpu():
    """A one-way copy or kernel has one rank driving; bidirectional, two-sided, ping-pong, pipeline and staged steps
    have both (their work is time-sliced where they share a GPU)."""
    cfg = build_config(_bench_parser().parse_args(["all"]))
    both = {(p.suite, p.label): p.both_drive for p in costmodel.plan_steps(cfg.steps(2))}
    assert not both[("copy", "ce push")] and not both[("kernel", "sm_read pull")]
    assert both[("copy", "ce bidir")] and both[("kernel", "sm_write bidir")]
    assert all(v for (suite, _), v in both.items() if suite in ("latency", "pipeline", "staged", "nccl"))
    assert not any(v for (suite, _), v in both.items() if suite == "handles")
    four = {p.label: p.both_drive for p in costmodel.plan_steps(build_config(_bench_parser().parse_args(
        ["all", "--quick"])).steps(4))}
    assert four["ce all-to-all"]  # every rank at once


def test_rounds_cost_one_measurement_and_the_round_check_is_paid():
    """On 8 NVSwitch GPUs a step walked in rounds costs its rounds, not its pairs: the copy engine's one-way rows in
    the 7 permutation rounds up to 256 KiB (core/schedule.PERMUTATION_UP_TO), the 14 rounds of disjoint pairs above;
    plus the round check of the first step of each engine and kind of round (run/walk.guarded: the largest round's
    pairs one at a time: 4 of a disjoint round, 8 of a permutation round)."""
    from ipcbench.core.schedule import PERMUTATION_UP_TO

    cfg = build_config(_bench_parser().parse_args(["copy"]))
    mode = decide_mode(cfg.pairs, 1, ["nvswitch"] * 56, 8, cfg.serial_pairs, cfg.quick)
    steps = cfg.steps(8)
    push, bidir = steps[0], steps[2]
    small = sum(n <= PERMUTATION_UP_TO["ce"] for n in push.sizes)
    assert push.rounds_ok and costmodel.walked(push, mode) == small * 7 + (len(push.sizes) - small) * 14
    assert bidir.label == "ce bidir" and costmodel.walked(bidir, mode) == len(bidir.sizes) * 7
    assert costmodel.round_checks(steps, mode) == {0: 4 + 8}


@pytest.mark.timeout(200)
def test_the_8_gpu_plan_states_its_assumptions_and_what_was_fitted():
    """`mpirun -np 8 ipcbench all --dry-run --topology nvswitch`: the runs and machines the constants were fitted
    on, the residual, and that 8-GPU rounds are assumed to cost what a 2-GPU measurement does."""
    from conftest import gpu_count
    from test_cli import _plan

    if gpu_count():
        pytest.skip("this machine has GPUs (and NVML): the plan is this machine's")
    plan = _plan(8, "--topology", "nvswitch")
    text = " ".join(plan["assumptions"])
    assert f"fitted on {COSTS.fitted} to {len(COSTS.runs)} runs" in text
    assert all(m in text for m in COSTS.machines)
    assert f"worst residual {COSTS.worst_residual_pct:.1f}%" in text
    assert f"(of a command's mean on a machine: {COSTS.worst_command_pct:.1f}%)" in text
    assert "8 GPUs where at most 4 were measured" in text and "a round of disjoint pairs measured at once" in text
    assert plan["cost_model"]["runs"] == list(COSTS.runs)
    assert plan["estimated_s"] == pytest.approx(costfit.estimate(COSTS, 8), abs=0.06)


def test_a_shared_gpu_plan_names_the_machines_its_factor_was_fitted_on():
    from ipcbench.run.dryrun import extrapolation

    (one,) = extrapolation(1, 2, None)
    assert one.startswith("every rank on one GPU (fitted on 1 x ") and f"x {COSTS.one_gpu_factor:g}" in one
    (shared,) = extrapolation(2, 2, None)
    fitted = sorted({r.machine for r in COSTS.residuals if 1 < r.gpus < r.ranks})
    assert fitted and shared.startswith(f"ranks sharing GPUs (fitted on {'; '.join(fitted)}): ")
    assert "both ranks of a pair drive" in shared


def test_a_one_gpu_node_has_its_own_anchor_cost_and_the_start_up_of_its_ranks():
    """Two ranks on one GPU start as two ranks on two GPUs do (3.0-3.2 s against 2.9-3.7 on 4 x H200, 2026-11-28:
    the start-up is the ranks', in the model a line in their doublings), but their selftest's anchors are copies
    within the GPU: the fit keeps the anchors apart, each from its own runs, and the model uses them for a node of
    one GPU alone; a kind of node without runs keeps the table's value."""
    two = [synthetic(["all"], 2, 1, TRUE, "a"), synthetic(["all", "--quick"], 2, 1, TRUE, "q")]
    one = synthetic(["copy", "kernel", "latency"], 2, 2, TRUE, "one")
    test2 = synthetic(["copy", "kernel"], 2, 1, TRUE, "s2")
    test2 = replace(test2, kind="selftest", command="ipcbench selftest", anchor_units=348,
                    wall_s=test2.wall_s + 348 * 0.04, user_wall_s=test2.user_wall_s + 348 * 0.04)
    test1 = synthetic(["copy", "kernel"], 2, 2, TRUE, "s1")
    test1 = replace(test1, kind="selftest", command="ipcbench selftest", anchor_units=174,
                    wall_s=test1.wall_s + 174 * 0.03, user_wall_s=test1.user_wall_s + 174 * 0.03)
    got = costfit.fit([*two, one, test2, test1], COSTS, "today")
    assert got.startup_for(2) == pytest.approx(TRUE.startup_for(2), abs=1e-3)
    assert got.anchor_s == pytest.approx(0.04, abs=1e-5) and got.one_gpu_anchor_s == pytest.approx(0.03, abs=1e-5)
    assert costmodel.anchor_seconds(got, 100, gpus=1) == pytest.approx(3.0)
    assert costmodel.anchor_seconds(got, 100, gpus=2) == pytest.approx(4.0)
    assert max(abs(r.pct) for r in got.residuals) < 0.1  # each run against its own node's anchors
    several = costfit.fit([*two, test2], COSTS, "today")  # no selftest on one GPU: the table's value kept
    assert several.one_gpu_anchor_s == COSTS.one_gpu_anchor_s and several.anchor_s == pytest.approx(0.04, abs=1e-5)


def test_walls_files_name_their_runs_by_path_and_two_sets_stay_apart(tmp_path, capsys):
    """Each --walls file names its runs beside it (a set's walls.txt), so two sets' `all-1` take their own walls; a
    bare name that is no directory names the one given run of that name; a line of a run beside the file that was not
    given is said and left out; a run given a wall twice, or a name of no run, is refused."""
    from ipcbench.errors import UsageError

    sets = []
    for name, walls in (("a", "all-1 10.0\nall-2 11.0\n"), ("b", "all-1 20.0\n")):
        for run in ("all-1", "all-2"):
            (tmp_path / name / run).mkdir(parents=True)
            (tmp_path / name / run / "meta.json").write_text("{}")
        (tmp_path / name / "walls.txt").write_text(walls)
        sets.append(tmp_path / name)
    given = [str(sets[0] / "all-1"), str(sets[1] / "all-1")]
    files = [str(s / "walls.txt") for s in sets]
    assert costfit.assign_walls(given, files) == [10.0, 20.0]
    assert "not fitted (not given): all-2" in capsys.readouterr().err
    bare = tmp_path / "bare.txt"
    bare.write_text("all-1 5.0\n")
    assert costfit.assign_walls([str(sets[0] / "all-1")], [str(bare)]) == [5.0]
    with pytest.raises(UsageError, match="names 2 runs given"):
        costfit.assign_walls(given, [str(bare)])
    with pytest.raises(UsageError, match="a wall twice"):
        costfit.assign_walls(given[:1], [files[0], str(bare)])
    bare.write_text("all-9 5.0\n")
    with pytest.raises(UsageError, match="names runs not given: all-9"):
        costfit.assign_walls(given, [str(bare)])
