"""compare's host-timed rows (timing `host`: the handles suite's API calls, the MPI-staged path) against several BASE
runs, counted over every recorded set of back-to-back runs of unchanged code (docs/report.md, "Host-timed rows").

A set is the runs of one machine and one command, three or more of them (a set of two gives no choice of two BASE
runs). For every run as NEW and every choice of two or more of the others as BASE, compare judges the set's
host-timed rows: a regression there is a false alarm. Each choice also judges copies of NEW's host-timed rows made
2x and 1.5x slower (times and samples x factor, rates / factor, as synth.scale_rows does), under a method name of
their own and beside unchanged copies in each BASE run, so one comparison counts the false alarms and the catches
of both slowdowns: compare's host-timed rule is per row, and its bound and its guard read only BASE and the rows'
noise, which a slowdown leaves alone. The tail each kind is allowed (catalogue/noise.HOST_TAIL) is the same pass's
largest move, x 1.25, rounded up.

Every choice is 553 comparisons (two minutes on CI's two cores): the tests judge a fixed sample of them by default
(SAMPLE: one choice per set drawn with a fixed seed, and the choices that hold the largest move of each kind and
the one row not judged), every choice with `python -m pytest -m slow`; each pins its own counts.

`python tests/test_compare_host_timed.py [DIR ...]` prints the counts per set; each DIR given is one more set (its
subdirectories holding results.csv), e.g. runs of another machine that are not committed.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import shutil
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synth  # noqa: E402
from conftest import sample_indices  # noqa: E402
from ipcbench.catalogue import noise  # noqa: E402
from ipcbench.judging import compare  # noqa: E402
from ipcbench.judging.significance import host_timed  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
RESULTS = DATA / "results-1126"  # the runs of 2026-11-26
# every recorded set of three or more back-to-back runs of one machine and command (their READMEs)
SETS = {
    "compare quiet": [DATA / "compare" / f"quiet{i}" for i in (1, 2, 3)],
    "h100x1 one": [DATA / "h100x1" / f"one-{i}" for i in range(1, 6)],
    "h100x2 all": [DATA / "h100x2" / f"all-{i}" for i in (1, 2, 3)],
    "h100x2-current all": [DATA / "h100x2-current" / f"all-{i}" for i in range(1, 6)],
    "h100x2-current quick": [DATA / "h100x2-current" / f"quick-{i}" for i in range(1, 6)],
    "h100x2-cut call4": [DATA / "h100x2-cut" / f"call4-all-{i}" for i in (1, 2, 3)],
    "h200x1-0126 all": [DATA / "h200x1-0126" / f"all-{i}" for i in range(1, 7)],
    "h200x2-0126 all": [DATA / "h200x2-0126" / f"all-{i}" for i in range(1, 6)],
    "h200x2-0126 quick": [DATA / "h200x2-0126" / f"quick-{i}" for i in (1, 2, 3)],
    "results h200x2 all": [RESULTS / f"h200x2-all-{i}" for i in (1, 2, 3)],
    "results h200x2 quick": [RESULTS / f"h200x2-quick-{i}" for i in (1, 2, 3)],
    "results h200x2 all, 2026-11-28": [REPO / "results" / f"h200x2-all-{i}" for i in (1, 2, 3)],
    "h200x4-1128 all": [DATA / "h200x4-1128" / f"all-{i}" for i in range(1, 7)],
}
SLOWER = (2.0, 1.5)  # the slowdowns injected into NEW's host-timed rows
MARGIN = 1.25  # the tail: the largest move x 1.25 (catalogue/noise.py's rule for its floors)


def host_rows(run, factors=(1.0, 1.0)):
    """The run with its host-timed rows only, and for each factor a copy of them under the method name
    '<method>@<SLOWER[i]>x', `factor` times slower."""
    f = run.frame[host_timed(run.frame)].reset_index(drop=True)
    parts = [f]
    for tag, factor in zip(SLOWER, factors):
        g = f.copy()
        g["method"] = g["method"] + f"@{tag:g}x"
        for c in ("time_us_median", "time_us_min", "time_us_max"):
            g[c] = g[c] * factor
        for c in ("bw_gbps_median", "bw_gbps_max"):
            g[c] = g[c] / factor
        g["samples_us"] = [synth.format_samples(float(x) * factor for x in s.split()) if s else s
                           for s in g["samples_us"].fillna("").astype(str)]
        parts.append(g)
    import pandas as pd

    return replace(run, frame=pd.concat(parts, ignore_index=True))


def kind_of(engine: str, nbytes: int) -> str:
    """A row's kind for its tail: MPI staging per size band, an API call one level in every band."""
    return engine if engine != "mpi" else f"mpi {noise.band(nbytes)}"


def choices(n: int):
    """(NEW, BASE runs) of a set of n runs: every run as NEW, every choice of two or more of the others."""
    for new in range(n):
        rest = [i for i in range(n) if i != new]
        for k in range(2, n):
            for bases in itertools.combinations(rest, k):
                yield new, list(bases)


# The choices that hold the largest move of each kind (catalogue/noise.HOST_TAIL is the rule over them), and the
# one whose BASE runs lay further apart than the tail (its row not judged): (set, NEW, BASE runs), runs from 0.
WITNESSES = [("h100x2-cut call4", 1, [0, 2]),  # an MPI latency <= 256K, 9.9x
             ("h100x2-current all", 2, [1, 3]),  # MPI staging 256K-64M
             ("h100x2-current quick", 2, [0, 1]),  # MPI staging >= 64M
             ("h200x4-1128 all", 0, [1, 3]),  # an API call
             ("h100x2-cut call4", 2, [0, 1])]  # the row not judged


def sample(name: str, n: int) -> list[tuple[int, list[int]]]:
    """The choices of a set of n runs the default tests judge: one drawn with a fixed seed, and its WITNESSES."""
    every = list(choices(n))
    drawn = [every[i] for i in sorted(sample_indices(len(every), 1))]
    return drawn + [(new, bases) for s, new, bases in WITNESSES if s == name and (new, bases) not in drawn]


def count_set(paths: list[Path], name: str | None = None) -> dict:
    """Over every choice of one set (`name` given: its sample only): comparisons, verdicts of the unchanged
    host-timed rows, regressions of each slowdown, and per kind the largest move |log(NEW / BASE runs' geometric
    mean)|."""
    runs = [compare.load(p) for p in paths]
    base_side, new_side = [host_rows(r) for r in runs], [host_rows(r, SLOWER) for r in runs]
    out: dict = {"comparisons": 0, "verdicts": Counter(), "caught": Counter(), "moves": {}}
    for new, bases in (choices(len(runs)) if name is None else sample(name, len(runs))):
        t = compare.compare([base_side[i] for i in bases], new_side[new]).table
        tag = t["method"].str.extract(r"@([\d.]+)x$")[0].fillna("")
        out["comparisons"] += 1
        plain = t[tag == ""]
        out["verdicts"].update(plain["verdict"].astype(str))
        for s in SLOWER:
            out["caught"][s] += int((t[tag == f"{s:g}"]["verdict"] == "regression").sum())
        moved = plain[(plain["base_runs"] >= 2) & (plain["base"] > 0) & (plain["new"] > 0)]
        engines = dict(zip(zip(runs[new].frame["method"], runs[new].frame["bytes"]), runs[new].frame["engine"]))
        for r in moved.itertuples():
            kind = kind_of(engines[(r.method, r.bytes)], int(r.bytes))
            out["moves"][kind] = max(out["moves"].get(kind, 0.0), abs(math.log(r.new / r.base)))
    return out


@functools.lru_cache(maxsize=None)
def counted(every: bool = True) -> dict:
    """{set: its counts} over every choice, or over the sample (every=False)."""
    return {name: count_set(paths, None if every else name) for name, paths in SETS.items()}


def total(what: str, every: bool = True) -> Counter:
    out: Counter = Counter()
    for c in counted(every).values():
        out.update(c[what])
    return out


# every choice (slow), and the sample the default run judges: each with its own counts (docs/report.md says every
# choice's): comparisons, rows unchanged, rows not judged, rows caught slowed 2x and 1.5x
EVERY = [pytest.param(False, id="sample"), pytest.param(True, id="every-choice", marks=pytest.mark.slow)]
COUNTS = {True: (553, 110659, 1, 3828, 847), False: (17, 2713, 1, 99, 25)}


def tail_rule(move: float) -> float:
    """A kind's tail from its largest move: (exp(move) - 1) x 1.25, rounded up to 5%."""
    return math.ceil(math.expm1(move) * MARGIN * 20 - 1e-9) / 20


# ------------------------------------------------------------------------------------------ the counts, pinned

@pytest.mark.parametrize("every", EVERY)
def test_unchanged_code_fails_no_host_timed_row_in_any_choice_of_base_and_new(every):
    """553 comparisons of the thirteen sets; 110,659 host-timed rows judged by value, none a regression (the rule
    before, the BASE runs' spread or both sides' floors and a t-test, failed 14: a handle operation 3.7-4x and a
    64 B MPI latency 9.9x in one run of unchanged code), one not judged: its BASE runs lay further apart than the
    tail. The counts hold the rule: a tighter tail fails rows, a looser one or judging fewer rows moves them. The
    sample: 17 comparisons, 2,714 rows."""
    v = total("verdicts", every)
    comparisons, unchanged, not_judged, _, _ = COUNTS[every]
    assert sum(c["comparisons"] for c in counted(every).values()) == comparisons
    assert v["regression"] == 0, {n: c["verdicts"]["regression"] for n, c in counted(every).items()}
    assert (v["unchanged"], v["improvement"], v["not judged"]) == (unchanged, 0, not_judged), v


@pytest.mark.parametrize("every", EVERY)
def test_an_injected_slowdown_is_caught_where_it_leaves_the_tail(every):
    """A 2x slowdown is caught 3,828 times in 110,660 rows (every MPI-staged row of 64 MiB and more, whose bound is
    both sides' noise, ~61%), a 1.5x one 847 times (only where NEW already read slow): an API call's row moves up to
    4.6x between runs of unchanged code and an MPI latency 9.9x, so a slowdown of one such row is not told from a
    run's level. (The rule before caught 3,525 and 600, and failed 14 rows of unchanged code.) The sample: 99 and
    25 in 2,714 rows."""
    caught = total("caught", every)
    assert (caught[2.0], caught[1.5]) == COUNTS[every][3:], caught


@pytest.mark.parametrize("every", EVERY)
def test_the_host_tail_is_the_rule_applied_to_the_recorded_sets(every):
    """catalogue/noise.HOST_TAIL: per kind, the largest move over every choice of the recorded sets, x 1.25, rounded
    up to 5%; an API call's one level in every band. The sample holds the choice of each kind's largest move."""
    moves: dict[str, float] = {}
    for c in counted(every).values():
        for kind, m in c["moves"].items():
            moves[kind] = max(moves.get(kind, 0.0), m)
    assert noise.HOST_TAIL["api"] == (tail_rule(moves["api"]),) * 3
    assert noise.HOST_TAIL["mpi"] == tuple(tail_rule(moves[f"mpi {b}"]) for b in noise.BANDS)


# ------------------------------------------------------------------------------------------ the rule, clause by clause

GPU = "NVIDIA H100 80GB HBM3"
K, M = 1 << 10, 1 << 20
OP = dict(suite="handles", method="ipc_get_mem_handle", direction="op", src_gpu=0, dst_gpu=1, bytes=64 * M)
MPI_4K = dict(suite="staged", method="mpi_staged", direction="push", src_gpu=0, dst_gpu=1, bytes=4 * K)
MPI_64M = dict(MPI_4K, bytes=64 * M)


def where(**want):
    return lambda r: all(str(r[k]) == str(v) for k, v in want.items())


def synthetic(tmp_path: Path, name: str, src: Path | None = None) -> Path:
    """A run of staged, handles and latency rows on four H100s, each row stating 1% noise, between-runs (so both
    sides' noise is 2% and a host-timed row's tail sets its bound); `src`: the same rows under another run id."""
    if src is not None:
        shutil.copytree(src, tmp_path / name)
        run = tmp_path / name
    else:
        run = synth.make_run(tmp_path, run_id=name, suites=["staged", "handles", "latency"], sizes=[4 * K, 64 * M],
                             same_gpu=False, errors=True)
    meta = json.loads((run / "meta.json").read_text())
    meta.update(run_id=name, start=name, noise_basis="between-runs")
    for gs in meta["gpus"].values():
        for g in gs:
            g["name"] = GPU
    (run / "meta.json").write_text(json.dumps(meta))
    header, records = synth.read_csv(run)
    for r in records:
        r[header.index("noise")] = "0.01"
    synth.write_csv(run, header, records)
    return run


def judge(*paths, **kw):
    runs = [compare.load(p) for p in paths]
    return compare.compare(runs[:-1], runs[-1], **kw)


def row(c, **want):
    t = c.table
    for k, v in want.items():
        t = t[t[k].astype(str) == str(v)]
    assert len(t) == 1, want
    return t.iloc[0]


@pytest.fixture
def three(tmp_path):
    """Two BASE runs and NEW, the same rows: b2's host-timed rows 20% slower than b1's."""
    b1 = synthetic(tmp_path, "b1")
    b2, new = synthetic(tmp_path, "b2", b1), synthetic(tmp_path, "new", b1)
    synth.scale_rows(b2, is_host, 1 / 1.2)
    return b1, b2, new


def is_host(r) -> bool:
    """synth's host-timed rows: the MPI-staged path and the handles suite's operations."""
    return r["method"] == "mpi_staged" or (r["suite"] == "handles" and r["kind"] == "op")


@pytest.mark.parametrize("want, tail", [(OP, 4.5), (MPI_4K, 11.15), (MPI_64M, 0.55)])
def test_a_host_timed_row_must_leave_its_kinds_tail(three, want, tail):
    """Against two BASE runs a host-timed row's bound is its kind's tail (catalogue/noise.HOST_TAIL), not the BASE
    runs' spread (20%) nor both sides' noise (2%): NEW just inside it is unchanged, just beyond it a regression."""
    b1, b2, new = three
    assert noise.host_tail(want["method"].split("_")[0] if want["suite"] == "staged" else "api",
                           want["bytes"]).fraction == tail
    mean = math.sqrt(1.2)  # the BASE runs' geometric mean, in b1's times
    for factor, verdict in ((0.99, "unchanged"), (1.01, "regression")):
        synth.scale_rows(new, where(**want), 1 / (factor * (1 + tail) * mean))
        r = row(judge(b1, b2, new), **want)
        assert (r["bound"], r["rule"], r["spread"]) == (pytest.approx(tail), "tail", pytest.approx(0.2, abs=1e-4))
        assert r["verdict"] == verdict, (factor, r["change"], r["note"])
        if verdict == "unchanged":
            assert r["note"] == "within the tail of host-timed rows"
        synth.scale_rows(new, where(**want), factor * (1 + tail) * mean)


def test_a_host_timed_row_is_never_held_tighter_than_both_sides_noise(three):
    """A row whose runs state more noise than its tail (300% a side: 600% both, the api tail 450%) takes both sides'
    noise, as one BASE would; BASE runs 450% apart, beyond the tail but inside that bound, still judge it."""
    b1, b2, new = three
    for run in (b1, b2, new):
        header, records = synth.read_csv(run)
        for r in records:
            if where(**OP)(dict(zip(header, r))):
                r[header.index("noise")] = "3"
        synth.write_csv(run, header, records)
    synth.scale_rows(new, where(**OP), 1 / 6)
    r = row(judge(b1, b2, new), **OP)
    assert r["bound"] == pytest.approx(6.0) and (r["verdict"], r["note"]) == ("unchanged", "within the rows' noise")
    synth.scale_rows(b2, where(**OP), 1.2 / 5.5)
    r = row(judge(b1, b2, new), **OP)
    assert r["spread"] == pytest.approx(4.5, abs=1e-4) and r["verdict"] == "unchanged"


def test_a_host_timed_row_is_judged_without_the_runs_t_test(three):
    """Beyond its tail a host-timed row regresses even where the t-test on the BASE runs' variation says nothing
    (BASE runs 4x apart on every row of the method: p ~0.1 at --alpha 0.01); the rule before called it unchanged,
    "not significant"."""
    b1, b2, new = three
    method = where(suite="handles", method="ipc_get_mem_handle")
    synth.scale_rows(b2, method, 1.2 / 4)  # b2 4x slower than b1 on every row of the method
    synth.scale_rows(new, where(**OP), 1 / (5.7 * 2))  # 5.7x the BASE runs' geometric mean (2x b1)
    r = row(judge(b1, b2, new), **OP)
    assert r["test"] == "runs" and r["p"] > 0.05 and r["spread"] == pytest.approx(3.0, abs=1e-4)
    assert (r["verdict"], r["rule"]) == ("regression", "tail")


def test_a_time_sliced_row_still_takes_the_t_test(tmp_path):
    """Time-sliced hand-offs keep the rule "runs": beyond the BASE runs' spread and both sides' noise, and
    significant. tests/data/mps without MPS, three copies: a shm_staged row 5x slower in NEW is a regression at
    --alpha 0.01 and unchanged ("not significant") at an alpha below its p."""
    src = DATA / "mps" / "h100-nomps"
    runs = []
    for name in ("b1", "b2", "new"):
        shutil.copytree(src, tmp_path / name)
        meta = json.loads((tmp_path / name / "meta.json").read_text())
        (tmp_path / name / "meta.json").write_text(json.dumps({**meta, "run_id": name, "start": name}))
        runs.append(tmp_path / name)
    picked = synth.scale_rows(runs[1], lambda r: r["method"] == "shm_staged", 1 / 1.1)
    assert picked
    one = dict(suite="staged", method="shm_staged", direction="push", bytes=64 * M, seq=0)
    synth.scale_rows(runs[2], where(**{k: v for k, v in one.items() if k != "seq"}, src_rank=0), 1 / 5)
    r = row(judge(*runs), **one)
    assert (r["rule"], r["sliced"], r["verdict"]) == ("runs", True, "regression") and r["p"] < 0.01
    r = row(judge(*runs, alpha=r["p"] / 2), **one)
    assert (r["verdict"], r["note"]) == ("unchanged", "not significant")


def test_base_runs_that_disagree_beyond_the_tail_judge_nothing(three):
    """BASE runs 6x apart on a host-timed row (500%, beyond its ±450%): the tail is known not to hold for it, so it
    is not judged, whatever NEW reads, and the note says by how much they disagree."""
    b1, b2, new = three
    synth.scale_rows(b2, where(**OP), 1.2 / 6)
    for factor in (1.0, 1 / 50):
        synth.scale_rows(new, where(**OP), factor)
        r = row(judge(b1, b2, new), **OP)
        assert (r["verdict"], r["note"]) == ("not judged", "host-timed: the BASE runs disagree by 500%, more than "
                                                           "the ±450% such rows move")
    synth.scale_rows(b2, where(**OP), 6 / 5)  # 5x apart: 400%, inside the tail: judged
    assert row(judge(b1, b2, new), **OP)["verdict"] == "regression"


def test_one_base_judges_no_host_timed_row(three):
    b1, _, new = three
    t = judge(b1, new).table
    host = t[(t["timing"] == "host") & (t["kind"] != "error")]
    assert len(host) > 20 and set(host["note"]) == {"host-timed: give 2+ BASE runs"}


def test_the_verdict_names_the_host_timed_rule_and_what_it_catches(three):
    """The noise-rule line names the host-timed rule and the tail of each kind it judged (an engine whose bands
    share one tail said once); the smallest change caught is that tail where both sides' noise is below it. With
    one BASE no host-timed row is judged and the line is the noise rule alone."""
    b1, b2, new = three
    c = judge(b1, b2, new)
    assert c.info["noise_rule"] == ("between-runs noise; host-timed rows: 2 BASE runs, bound: the tail of their "
                                    "kind (mpi <= 256K ±1115%, mpi >= 64M ±55%; api >= 64M ±450%), never below both "
                                    "sides' noise")
    caught = {x["kind"]: x["smallest_change"] for x in c.info["catches"]}
    assert (caught["mpi <= 256K"], caught["mpi >= 64M"], caught["api >= 64M"]) == (11.15, 0.55, 4.5)
    assert judge(b1, new).info["noise_rule"] == "between-runs noise"
    real = judge(*[RESULTS / f"h200x2-all-{i}" for i in (1, 2, 3)])  # an API call's bands merged: one tail
    assert real.info["host_rule"] == ("host-timed rows: 2 BASE runs, bound: the tail of their kind (mpi <= 256K "
                                      "±1115%, mpi 256K-64M ±165%, mpi >= 64M ±55%; api ±450%), never below both "
                                      "sides' noise")


def test_an_engine_never_measured_takes_the_largest_tail_of_its_band():
    for nbytes in (4 * K, 1 * M, 64 * M):
        assert noise.host_tail("ucx", nbytes).fraction == max(t[noise.BANDS.index(noise.band(nbytes))]
                                                               for t in noise.HOST_TAIL.values())
    assert noise.host_tail("ucx", 4 * K).fraction == 11.15 and noise.host_tail("ucx", 64 * M).fraction == 4.5


# ------------------------------------------------------------------------------------------ one injection, as files

def slowed_copy(src: Path, dst: Path, factors: dict) -> dict:
    """A copy of a recorded run under a run id of its own, the rows each predicate picks `factor` times slower
    (synth.scale_rows); the indices of the rows each slowed."""
    shutil.copytree(src, dst)
    meta = (dst / "meta.json").read_text()
    (dst / "meta.json").write_text(meta.replace('"run_id": "', '"run_id": "slow-', 1))
    return {pick: synth.scale_rows(dst, pick, 1 / factor) for pick, factor in factors.items()}


def large_mpi(r) -> bool:
    return r["method"] == "mpi_staged" and int(r["bytes"]) >= 64 << 20


def one_import(r) -> bool:
    return r["method"] == "pool_import" and r["src_gpu"] == "0" and r["bytes"] == str(4 << 10)


def test_an_injected_2x_slowdown_is_caught_against_two_base_runs(tmp_path):
    """tests/data/results-1126/h200x2-all-3 with its MPI-staged rows of 64 MiB and more 2x slower and one handle
    operation 10x:
    against all-1 and all-2 exactly those rows regress, the MPI rows beyond both sides' noise (~61%), the handle
    operation beyond its tail (450%). 1.5x slower, an MPI row regresses only where all-3 read it slow already."""
    runs = [RESULTS / f"h200x2-all-{i}" for i in (1, 2, 3)]
    bases = [compare.load(p) for p in runs[:2]]
    slowed = slowed_copy(runs[2], tmp_path / "2x", {large_mpi: 2.0, one_import: 10.0})
    assert len(slowed[large_mpi]) == 6 and len(slowed[one_import]) == 1
    c = compare.compare(bases, compare.load(tmp_path / "2x"))
    bad = c.table[c.table["verdict"] == "regression"]
    assert len(bad) == 7 and set(bad["method"]) == {"mpi_staged", "pool_import"} and c.exit_code == 1
    assert set(bad["rule"]) == {"tail"} and (bad["bound"] < 2 - 1).sum() == 6
    slowed_copy(runs[2], tmp_path / "1.5x", {large_mpi: 1.5})
    before = compare.compare(bases, compare.load(runs[2])).table
    bad = compare.compare(bases, compare.load(tmp_path / "1.5x")).table
    bad = bad[bad["verdict"] == "regression"]
    large = before[(before["method"] == "mpi_staged") & (before["bytes"] >= 64 << 20)]
    slow_already = large[large["change"] < -0.05]
    assert 0 < len(bad) < 6 and set(bad["dst_gpu"]) == set(slow_already["dst_gpu"]) == {0}


# ------------------------------------------------------------------------------------------ what the docs say

def words(path: Path) -> str:
    return " ".join(path.read_text().split())


def test_the_docs_say_the_tails_and_the_counts():
    """docs/report.md's table of tails and its counts, and README's two tails, are the catalogue's and this file's
    (COUNTS, every choice's: the tests above count them, over every choice with `-m slow`)."""
    from ipcbench.judging.bounds import pct

    doc, readme = words(REPO / "docs" / "report.md"), words(REPO / "README.md")
    mpi, api = noise.HOST_TAIL["mpi"], noise.HOST_TAIL["api"][0]
    for kind, tail in (("`mpi` ≤ 256K", mpi[0]), ("`mpi` 256K–64M", mpi[1]), ("`mpi` ≥ 64M", mpi[2]),
                       ("`api` (handle operations), every band", api)):
        assert doc.split(f"| {kind}")[1].split("|")[1].strip().startswith(f"±{pct(tail)}"), kind
    assert f"a handle call ±{pct(api)}, a small MPI message ±{pct(mpi[0])}" in readme
    comparisons, judged, not_judged, caught2, caught15 = COUNTS[True]  # judged: unchanged, none a regression
    row = f"| `tail` | {comparisons} | {judged:,} | 0 | {caught2:,} | {caught15:,} | {not_judged} |"
    assert row in doc
    real = compare.compare([compare.load(RESULTS / f"h200x2-all-{i}") for i in (1, 2)],
                           compare.load(RESULTS / "h200x2-all-3"))
    assert f"`; {real.info['host_rule']}`" in doc


# ------------------------------------------------------------------------------------------ the script

def main(argv: list[str]) -> None:
    sets = dict(SETS)
    for d in argv:
        sets[Path(d).name] = sorted(p.parent for p in Path(d).glob("*/results.csv"))
    print("set, comparisons, host-timed rows judged, false alarms, not judged, caught 2x, caught 1.5x")
    for name, paths in sets.items():
        c = count_set(paths)
        v = c["verdicts"]
        print(f"{name}, {c['comparisons']}, {v['unchanged'] + v['regression'] + v['improvement']}, "
              f"{v['regression']}, {v['not judged']}, {c['caught'][2.0]}, {c['caught'][1.5]}")


if __name__ == "__main__":
    main(sys.argv[1:])
