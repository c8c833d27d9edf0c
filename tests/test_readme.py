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


# --- numbers the docs quote that the tool prints or holds: they must be the tool's ----------------------------

SUITES_MD = (REPO / "docs" / "suites.md").read_text()
JOBS_MD = (REPO / "jobs" / "README.md").read_text()


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_readme_quotes_the_run_defaults_of_the_code():
    from ipcbench.config import DEFAULT_RULE, QUICK_SIZES
    from ipcbench.report.tables import WEAK_FRACTION
    from ipcbench.suites.registry import ORDER

    text = _flat(README)
    assert f"`--min-time MS` (one sample's length, default {DEFAULT_RULE.min_time_s * 1e3:g}; "\
           f"{DEFAULT_RULE.min_time_s * DEFAULT_RULE.short_factor * 1e3:g} under 64 MiB)" in text
    assert f"known to PCT percent, default {DEFAULT_RULE.noise * 100:g}, or to a third of its floor, " in text
    assert DEFAULT_RULE.floor_share == pytest.approx(1 / 3)
    assert f"`--max-time S` (default {DEFAULT_RULE.max_time_s:g} s)" in text
    default_timeout = _bench_default("timeout")
    assert f"gives up after S seconds, default {default_timeout:g})" in text
    assert f"every pair and method at {QUICK_SIZES.replace(',', ' and ')}," in text
    assert f"some suites: `{' '.join(ORDER)}`" in text
    assert f"a GPU pair more than {WEAK_FRACTION:.0%} below the typical pair" in text


def _bench_default(option: str):
    from ipcbench.cli import _bench_parser

    return _bench_parser().get_default(option)


def test_docs_suites_quotes_the_code():
    from ipcbench.config import QUICK_RULE
    from ipcbench.core.bulk import BulkShape
    from ipcbench.sizes import fmt_size
    from ipcbench.suites.latency import QUICK_LAT_SIZES
    from ipcbench.suites.registry import TWIN_STRIDE
    from ipcbench.suites.staged_plan import SHM_CHUNK, SHM_SLOTS

    text = _flat(SUITES_MD)
    assert (f"a looser stopping rule ({QUICK_RULE.min_samples}–{QUICK_RULE.max_samples} samples of ≥ "
            f"{QUICK_RULE.min_time_s * 1e3:g} ms, {QUICK_RULE.noise * 100:g} %)") in text
    lat = [f"{s} B" if s < 1024 else fmt_size(s) for s in QUICK_LAT_SIZES]
    assert f"the latency suite at {', '.join(lat[:-1])} and {lat[-1]}" in text
    assert f"(default `{BulkShape()}`," in text
    assert f"({SHM_CHUNK >> 20} MiB chunks × {SHM_SLOTS} slots by default;" in text
    assert TWIN_STRIDE == 2 and "they measure every other size" in text
    assert "at the default 20 ms" not in text  # the default sample is DEFAULT_RULE's, not the 20 ms of an old run


def _unknown_links_estimate(n: int) -> float:
    """The dry run's estimate of `all` for n GPUs whose links are unknown (no NVML: pairs one at a time)."""
    from ipcbench.cli import _bench_parser
    from ipcbench.config import build_config
    from ipcbench.core.schedule import decide_mode
    from ipcbench.run.dryrun import estimate_seconds

    cfg = build_config(_bench_parser().parse_args(["all"]))
    return estimate_seconds(cfg.steps(n), cfg.rule, decide_mode(cfg.pairs, 1, None, n, cfg.serial_pairs, cfg.quick),
                            gpus=n)


def test_the_estimates_quoted_beside_the_time_table_are_the_dry_runs():
    """The README's and docs/suites.md's other estimates (a login node, every pair of the serial steps) and the
    budgets tests/test_time_budget.py holds, as the estimator gives them today."""
    from test_time_budget import BUDGET_S

    unknown4 = round(_unknown_links_estimate(4))
    assert f"the same plan is estimated pair by pair (4 GPUs: {unknown4} s)" in _flat(README)
    text = _flat(SUITES_MD)
    assert f"the estimate for 4 GPUs is {unknown4} s" in text
    every = [round(estimate(n, "--serial-pairs", "all")[0]) for n in (4, 8)]
    assert f"would take {every[0]} s on 4 GPUs and {every[1]} s on 8" in text
    (b4, b8, bq) = (b for _, _, b in BUDGET_S)
    assert f"(4 GPUs {b4:.0f} s, 8 GPUs {b8:.0f} s, `--quick` on 8 {bq:.0f} s)" in text


def test_jobs_readme_time_limit_covers_the_longest_plan_and_quotes_no_stale_estimate():
    """jobs/README.md quoted the estimator's numbers of an older cost model (22, 57, 124 s): it points at the
    README's table and the dry run instead, and its --time covers an 8-GPU node measured pair by pair."""
    text = _flat(JOBS_MD)
    assert "`--time=00:30:00` covers `ipcbench all` on one node" in text
    assert _unknown_links_estimate(8) < 30 * 60
    assert "an 8-GPU node without NVSwitch" in text
    assert f"at about {round(_unknown_links_estimate(8) / 60)} minutes" in text  # written by tools/costfit.py
    mps = (REPO / "jobs" / "mps.sh").read_text()
    start = re.search(r"^IPCB_MPS_START_TIMEOUT=\$\{IPCB_MPS_START_TIMEOUT:-(\d+)\}$", mps, re.M)
    assert start and f"its pid is alive ({start.group(1)} s at most," in text
    wait = re.search(r"for \(\(i = 0; i < (\d+); i\+\+\)\); do\n\s+ipcb_mps_alive \"\$pid\" \|\| break\n"
                     r"\s+sleep ([\d.]+)", mps)
    assert wait and f"a daemon still alive {int(wait.group(1)) * float(wait.group(2)):g} s later is killed" in text
    assert "README.md#commands" in text and "IPCBENCH_DRY_RUN=1" in text
    for stale in ("22 s now", "57 s on 4 GPUs", "(124 s) on 8", "about 9 minutes"):
        assert stale not in text, stale


def _summary(run_dir: Path):
    import pandas as pd

    from ipcbench.record.run import load_runs
    from ipcbench.report import tables as T

    (run,), _ = load_runs([run_dir])
    df = T.add_scope(run.frame.assign(run=run.label))
    df["run"] = pd.Categorical(df["run"])
    return df, T.method_summary(df), T.speedup_summary(T.speedup_rows(df))


def test_what_it_has_measured_is_what_the_runs_say():
    """The README's GPU-pair numbers are the three two-GPU `all` runs under results/ (each range: the runs' lowest and
    highest median at 256 MiB, rounded to whole GB/s); its four-GPU numbers the six `all` runs of four H200s
    (results/h200x4-all-1 and tests/data/h200x4-1128/all-2..6): every pair's copy engine, and each GPU's all-to-all
    egress (the sum of its flows, as report/tables.alltoall_table adds them) by method."""
    import math

    import pandas as pd

    from ipcbench.record.run import load_run

    runs = sorted((REPO / "results").glob("h200x2-all-*/results.csv"))
    assert len(runs) == 3
    f = pd.concat([load_run(p).frame for p in runs])
    f = f[(f["bytes"] == 256 << 20) & (f["kind"] == "bandwidth")]

    def span(frame, method, direction):
        v = frame[(frame["method"] == method) & (frame["direction"] == direction)]["bw_gbps_median"]
        return math.floor(v.min()), math.ceil(v.max())

    text = _flat(README)
    (a, b), (c, d) = span(f, "ce", "push"), span(f, "ce", "bidir")
    assert f"the copy engine moves {a}–{b} GB/s one way and {c}–{d} both ways" in text
    assert f"SM kernels {round(f[f['method'] == 'sm_read']['bw_gbps_median'].median())} (read)" in text
    (n1, n2), nb = span(f, "nccl", "push"), round(f[(f["method"] == "nccl") & (f["direction"] == "bidir")]
                                                  ["bw_gbps_median"].median())
    assert f"NCCL {n1}–{n2} one way and {nb} both ways" in text
    s1, s2 = span(f, "shm_staged", "push")
    assert f"the best host-staged path {s1}–{s2}" in text

    four = [REPO / "results" / "h200x4-all-1"] + [REPO / "tests" / "data" / "h200x4-1128" / f"all-{i}" for i in
                                                   range(2, 7)]
    frames = [load_run(p / "results.csv").frame.assign(run=str(i)) for i, p in enumerate(four)]
    g = pd.concat(frames)
    big = g[(g["bytes"] == 256 << 20) & (g["kind"] == "bandwidth")]
    assert big[(big["method"] == "ce") & (big["direction"] == "push")][["src_gpu", "dst_gpu"]].drop_duplicates() \
        .shape[0] == 12
    c1, c2 = span(big, "ce", "push")
    assert f"every one of the 12 pairs reads the same (copy engine {c1}–{c2} GB/s one way" in text
    flows = big[big["suite"] == "alltoall"]  # the sum of each GPU's flows in one run, as the report's table adds them
    a2a = flows.groupby(["run", "src_gpu", "method"])["bw_gbps_median"].sum().unstack("method")
    lo, hi = ({m: math.floor(a2a[m].min()) for m in a2a.columns if m.endswith("_alltoall")},
              {m: math.ceil(a2a[m].max()) for m in a2a.columns if m.endswith("_alltoall")})
    assert (f"each GPU sends {lo['ce_alltoall']}–{hi['ce_alltoall']} GB/s to the three others by copy engine, "
            f"{lo['sm_alltoall']}–{hi['sm_alltoall']} by one SM kernel and {lo['nccl_alltoall']}–{hi['nccl_alltoall']}"
            " by NCCL's all-to-all") in text


def test_the_mps_numbers_are_the_reports_of_the_shipped_runs():
    """When MPS matters: the ping-pong and ce bidir numbers of tests/data/onegpu/h100-nomps and h100-mps."""
    text = _flat(README)
    got = {}
    for run in ("h100-nomps", "h100-mps"):
        df, s, _ = _summary(REPO / "tests" / "data" / "onegpu" / run)
        same = s[s["scope"] == "same GPU"].set_index(["method", "direction"])
        got[run] = (same.loc[("sm_pingpong", "oneway"), "time_us"], same.loc[("ce", "bidir"), "bw_median"])
    (p0, b0), (p1, b1) = got["h100-nomps"], got["h100-mps"]
    assert f"ping-pong one way: {p0:,.0f} µs without, {p1:.3f} µs with" in text
    assert f"`ce` bidir at 256 MiB: {b0:,.0f} GB/s without, {b1:,.0f} with" in text
