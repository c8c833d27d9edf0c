"""`ipcbench report`: tables hold the right numbers (checked against an independent pandas groupby), every
figure is written, the HTML is self-contained, malformed inputs give file:line errors and the other runs
are still reported, fleets name their outlier hosts.

Tests marked "real" run on every real run committed under results/*/ and tests/data/h200x2/*/
(conftest.real_runs; or $IPCBENCH_RESULTS_DIR alone); they fail, saying so, while there is none. A run
whose ranks all share one GPU is checked through its same-GPU table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

from ipcbench.core.link_rates import rates_of_entry

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synth  # noqa: E402
from ipcbench.report import command as report  # noqa: E402
from ipcbench.report import figure_plan  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(os.environ.get("IPCBENCH_RESULTS_DIR", REPO / "results"))
BW_DIRS = ("push", "pull", "bidir")
WEAK_TITLE = "Weak links (pairs more than 10% below their method's typical pair: the median, or the stronger of two)"
NOISY_TITLE = ("Noisy rows (own samples spread more than their kind moves between runs: within-run noise above the "
               "between-runs floor)")


from conftest import (has_cross_gpu_pairs, per_directory, real_runs, run_report,  # noqa: E402,F401 - results/, recorded
                      sampled)


# ------------------------------------------------------------------------------------------ helpers

def md_table(md: str, heading: str, after: str | None = None) -> pd.DataFrame:
    """The first markdown table under `heading` (a heading line's text), optionally searched only after
    the line `after`."""
    lines = md.splitlines()
    start = lines.index(after) if after else 0
    i = next(k for k in range(start, len(lines)) if lines[k].lstrip("#").strip() == heading)
    while not lines[i].startswith("|"):
        i += 1
    rows = []
    while i < len(lines) and lines[i].startswith("|"):
        rows.append([c.strip() for c in lines[i].strip("|").split(" | ")])
        i += 1
    return pd.DataFrame(rows[2:], columns=[c.strip() for c in rows[0]])


def independent_frame(run_dir: Path) -> pd.DataFrame:
    """The run's rows read with plain pandas (not the project's loader)."""
    df = pd.read_csv(run_dir / "results.csv", keep_default_na=False, na_values=[""])
    for c in ("same_gpu", "verified"):
        df[c] = df[c].astype(str).str.lower().isin(("true", "1", "yes"))
    return df


def cross_pairs(df: pd.DataFrame) -> pd.DataFrame:
    return df[~df["same_gpu"] & (df["src_gpu"] >= 0) & (df["dst_gpu"] >= 0) & (df["src_rank"] >= 0)
              & (df["dst_rank"] >= 0)]


def num(s: str) -> float:
    return float(s.rstrip("x%")) if s else float("nan")


def same_pairs(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["same_gpu"] & (df["src_rank"] >= 0) & (df["dst_rank"] >= 0)]


def check_summary_numbers(run_dir: Path, md: str, same_gpu: bool = False) -> int:
    """Compare the run's summary (or same-GPU) and handle-cost tables in report.md with a groupby computed here."""
    df = independent_frame(run_dir)
    pairs = same_pairs(df) if same_gpu else cross_pairs(df)
    pairs = pairs[pairs["kind"] != "error"] if same_gpu else pairs
    heading = "Same-GPU IPC (ranks sharing a GPU)" if same_gpu else "Summary (cross-GPU pairs)"
    table = md_table(md, heading, after=f"## Run {run_dir.name}")
    table = table.set_index(["suite", "method", "direction"])
    checked = 0
    for (suite, method, direction), g in pairs.groupby(["suite", "method", "direction"]):
        row = table.loc[(suite, method, direction)]
        bw = g[g["direction"].isin(BW_DIRS) & g["bw_gbps_median"].notna()]
        if len(bw):
            big = bw[bw["bytes"] == bw["bytes"].max()]["bw_gbps_median"]
            assert num(row["GB/s median"]) == pytest.approx(big.median(), abs=0.051), (suite, method, direction)
            assert num(row["GB/s min"]) == pytest.approx(big.min(), abs=0.051)
            assert num(row["GB/s max"]) == pytest.approx(big.max(), abs=0.051)
            assert int(row["pairs"]) == len(big)
            checked += 1
        timed = g[g["time_us_median"].notna()]
        if len(timed):
            small = timed[timed["bytes"] == timed["bytes"].min()]["time_us_median"]
            assert num(row["µs at smallest"]) == pytest.approx(small.median(), rel=0.006, abs=0.0051)
            checked += 1
    ops = df[(df["direction"] == "op") & df["time_us_median"].notna()]
    if len(ops):
        ht = md_table(md, "Handle and import costs", after=f"## Run {run_dir.name}")
        from ipcbench.report.cells import size_text

        for (suite, method, same, size), g in ops.groupby(["suite", "method", "same_gpu", "bytes"]):  # per size
            sel = ht[(ht["suite"] == suite) & (ht["method"] == method)
                     & (ht["GPUs"] == ("same GPU" if same else "cross-GPU")) & (ht["size"] == size_text(size))]
            assert len(sel) == 1, (suite, method, same, size)
            assert num(sel.iloc[0]["µs median"]) == pytest.approx(g["time_us_median"].median(), rel=0.006)
            assert int(sel.iloc[0]["rows"]) == len(g)
            checked += 1
    return checked


def check_speedup_numbers(run_dir: Path, md: str) -> None:
    """Speedup at the largest size: IPC bandwidth over the best *_staged bandwidth of the same pair, size
    and kind of direction (bidir or one-way)."""
    df = cross_pairs(independent_frame(run_dir))
    bw = df[df["direction"].isin(BW_DIRS) & df["bw_gbps_median"].notna()].copy()
    bw["kind"] = (bw["direction"] == "bidir").map({True: "bidir", False: "oneway"})
    staged = bw[bw["method"].str.endswith("_staged")]
    ipc = bw[~bw["method"].str.endswith("_staged") & ~bw["method"].str.startswith("nccl")]  # NCCL: a baseline too
    if staged.empty or ipc.empty:
        return
    best = staged.groupby(["kind", "bytes", "src_gpu", "dst_gpu", "host"])["bw_gbps_median"].max()
    table = md_table(md, "Speedup over the best host-staged path", after=f"## Run {run_dir.name}")
    table = table.set_index(["suite", "method", "direction"])
    for (suite, method, direction), g in ipc.groupby(["suite", "method", "direction"]):
        big = g[g["bytes"] == g["bytes"].max()]
        keys = list(zip(big["kind"], big["bytes"], big["src_gpu"], big["dst_gpu"], big["host"]))
        base = best.reindex(keys).to_numpy()
        if pd.isna(base).any():
            continue  # the fallback (all pairs) is covered by the synthetic tests
        sp = big["bw_gbps_median"].to_numpy() / base
        row = table.loc[(suite, method, direction)]
        assert num(row["speedup median"]) == pytest.approx(pd.Series(sp).median(), abs=0.0051)
        assert num(row["min"]) == pytest.approx(sp.min(), abs=0.0051)
        assert num(row["max"]) == pytest.approx(sp.max(), abs=0.0051)


def check_headline_numbers(run_dir: Path, md: str) -> int:
    """The headline's best path per GPU pair: the fastest one-way (push/pull) method at the pair's largest
    size, rank pairs of one GPU pair reduced to their median, all-to-all left out; % of the NVML link peak."""
    import json

    df = cross_pairs(independent_frame(run_dir))
    bw = df[df["direction"].isin(("push", "pull")) & df["bw_gbps_median"].notna()
            & ~df["method"].str.endswith("_alltoall")]
    if bw.empty:
        return 0
    keys = ["host", "src_gpu", "dst_gpu"]
    bw = bw[bw["bytes"] == bw.groupby(keys)["bytes"].transform("max")]
    best = bw.groupby(keys + ["suite", "method", "direction"])["bw_gbps_median"].median().groupby(keys).max()
    meta = json.loads((run_dir / "meta.json").read_text())
    peaks = {}  # by the one rate convention, whatever the run recorded (NVLink 4.0: 25 GB/s per link)
    for host, t in (meta.get("topology") or {}).items():
        for link in t.get("links") or []:
            peak = rates_of_entry(link).peak_gbps or link["peak_gbps"]
            peaks[(host, link["src_gpu"], link["dst_gpu"])] = peak
            peaks.setdefault((host, link["dst_gpu"], link["src_gpu"]), peak)
    caption = next(ln for ln in md.splitlines() if ln.startswith("Best one-way path per GPU pair")
                   or re.match(r"The \d+ weakest of \d+ GPU pairs", ln))
    table = md_table(md, caption)
    ref = best.max() if len(best) == 2 else best.median()  # the typical pair: of two, the other one
    for _, r in table.iterrows():
        s, d = map(int, r["pair"].split("→"))
        host = r["host"] if "host" in table.columns else best.index.get_level_values(0)[0]
        want = best[(host, s, d)]
        assert num(r["GB/s"]) == pytest.approx(want, abs=0.051), (host, s, d)
        if (host, s, d) in peaks:
            assert num(r["% of link peak"]) == pytest.approx(100 * want / peaks[(host, s, d)], abs=0.051)
        vs = r["vs other pair"] if len(best) == 2 else r["vs median pair"]
        assert num(vs) == pytest.approx(100 * (want / ref - 1), abs=0.051)
    return len(table)


def check_self_contained_html(html: str) -> None:
    assert "http://" not in html and "https://" not in html
    assert "<script" not in html.lower() and "<link" not in html.lower() and "@import" not in html
    assert "url(" not in html
    srcs = re.findall(r"""\b(?:src|href)\s*=\s*["']([^"']*)""", html, flags=re.I)
    assert all(s.startswith("data:image/png;base64,") for s in srcs), [s[:40] for s in srcs]


def check_figures(out: Path, md: str, html: str) -> list[str]:
    figs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert figs, "no figure in report.md"
    for f in figs:
        p = out / f
        assert p.parent == out and p.is_file() and p.stat().st_size > 1000, f
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert html.count("data:image/png;base64,") == len(figs)
    return figs


# ------------------------------------------------------------------------------------------ synthetic

@pytest.fixture(scope="module")
def synth_report(tmp_path_factory):
    """One realistic run with a weak pair, a noisy row and an unverified row, reported once."""
    root = tmp_path_factory.mktemp("synth")
    run_dir = synth.make_run(root / "results", weak_pair=("hostA", 1, 2, 0.7),
                             noisy=[("copy", "ce", "push", 0, 1, 4096)],
                             unverified=[("kernel", "sm_read", "pull", 2, 3, 1 << 20)],
                             cv_range=(0.0005, 0.004))  # noise under 0.23%: below every floor (catalogue/noise.py)
    parser = argparse.ArgumentParser()
    report.add_arguments(parser)
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = report.run(parser.parse_args([str(root / "results")]))
    rep = root / "results" / "report"
    return dict(rc=rc, out=out.getvalue(), err=err.getvalue(), run_dir=run_dir, rep=rep,
                md=(rep / "report.md").read_text(), html=(rep / "report.html").read_text())


def test_synthetic_exit_and_default_out(synth_report):
    assert synth_report["rc"] == 0, synth_report["err"]
    assert synth_report["err"] == ""
    assert (synth_report["rep"] / "report.html").is_file()


def test_synthetic_tables_hold_the_right_numbers(synth_report):
    assert check_summary_numbers(synth_report["run_dir"], synth_report["md"]) > 20
    check_speedup_numbers(synth_report["run_dir"], synth_report["md"])


def test_synthetic_every_figure_written(synth_report):
    figs = check_figures(synth_report["rep"], synth_report["md"], synth_report["html"])
    names = " ".join(figs)
    for method in ("copy-ce", "copy-ce_alltoall", "kernel-sm_read", "kernel-sm_write", "pool-pool_ce",
                   "staged-mpi_staged", "staged-shm_staged", "pipeline-ring_d4"):
        assert f"heatmap-{method}.png" in names, method
    for kind in ("pairs", "bw-vs-size", "latency", "speedup", "handles", "peak"):
        assert f"-{kind}.png" in names, kind
    assert "hostA" not in names  # a run of one host: its figures need not name it
    # one figure per question, in reading order: pair health first, the per-method heatmaps (detail) last
    assert figs[0].endswith("-pairs.png") and "-heatmap-" in figs[-1]


def test_synthetic_html_self_contained(synth_report):
    check_self_contained_html(synth_report["html"])
    for png in synth_report["rep"].glob("*.png"):
        assert b"http" not in png.read_bytes(), png.name  # no software URL in PNG metadata


def test_synthetic_flags(synth_report):
    md, out = synth_report["md"], synth_report["out"]
    weak = md_table(md, f"{WEAK_TITLE}: 17")
    assert set(weak["pair"]) == {"1→2"}
    assert "kernel/sm_read pull" in set(weak["method"]) and "copy/ce push" in set(weak["method"])
    noisy = md_table(md, f"{NOISY_TITLE}: 1")
    assert list(noisy["method"]) == ["copy/ce push"] and list(noisy["pair"]) == ["0→1"]
    assert list(noisy["within-run noise"]) == ["11.2%"] and list(noisy["floor"]) == ["6.5%"]  # 4K ce: H100's
    unver = md_table(md, "Unverified rows (a destination check failed, or did not run: see the note): 1")
    assert list(unver["method"]) == ["kernel/sm_read pull"] and list(unver["size"]) == ["1M"]
    assert f"{WEAK_TITLE}: 17" in out
    summ = md_table(md, "Summary (cross-GPU pairs)")
    flags = dict(zip(summ["method"] + " " + summ["direction"], summ["flags"]))
    assert flags["sm_read pull"] == "weak 1, unverified 1"
    assert flags["ce push"] == "weak 1, noisy 1"


def test_synthetic_same_gpu_and_peak_tables(synth_report):
    md = synth_report["md"]
    same = md_table(md, "Same-GPU IPC (ranks sharing a GPU)")
    assert {"ce"} <= set(same["method"]) and set(same["pairs"]) <= {"1", "4"}
    peak = md_table(md, "Share of the theoretical link peak")
    assert len(peak) == 12 and set(peak["link"]) == {"nvlink"}
    df = independent_frame(synth_report["run_dir"])
    big = cross_pairs(df)
    big = big[big["direction"].isin(("push", "pull")) & (big["bytes"] == big["bytes"].max())]
    best = big.groupby(["src_gpu", "dst_gpu"])["bw_gbps_median"].max()
    for r in peak.itertuples():
        s, d = map(int, r.pair.split("→"))
        assert num(r._6) == pytest.approx(best[(s, d)], abs=0.051)
        assert num(r._7) == pytest.approx(100 * best[(s, d)] / 478.1, abs=0.051)


def test_terminal_summary(synth_report):
    out = synth_report["out"]
    assert "Run 20261122-190000-synth" in out and "NVIDIA H200" in out
    assert re.search(r"copy\s+ce\s+push\s+12\s+256M\s+\d+\.\d", out)
    assert "report.html" in out


def test_quiet_and_no_figures(tmp_path, capsys):
    synth.make_run(tmp_path / "results", suites=["copy", "latency"])
    rc, out, err = run_report(capsys, tmp_path / "results", "--quiet", "--no-figures", "--out", tmp_path / "r")
    assert rc == 0 and err == ""
    assert "Summary" not in out and "report.md" in out
    assert not list((tmp_path / "r").glob("*.png"))
    html = (tmp_path / "r" / "report.html").read_text()
    assert "<img" not in html
    check_self_contained_html(html)


def test_missing_link_table_is_a_note(tmp_path, capsys):
    synth.make_run(tmp_path / "results", links=False, suites=["copy"])
    rc, out, err = run_report(capsys, tmp_path / "results", "--out", tmp_path / "r")
    assert rc == 0
    md = (tmp_path / "r" / "report.md").read_text()
    assert "% of peak skipped" in md
    assert not list((tmp_path / "r").glob("*-peak.png"))
    check_figures(tmp_path / "r", md, (tmp_path / "r" / "report.html").read_text())


def test_noisy_rows_are_those_whose_own_noise_passes_their_kinds_floor(tmp_path, capsys):
    """A row is noisy when its within-run noise is above its kind's between-runs floor (catalogue/noise.py): the
    count the report gives is that of an independent reading of the CSV, the coefficient of variation plays no
    part, and --cv-threshold is gone."""
    from ipcbench.catalogue.noise import floor_for

    synth.make_run(tmp_path / "results", suites=["copy"], same_gpu=False, cv_range=(0.001, 0.01))
    rc, out, _ = run_report(capsys, tmp_path / "results", "--no-figures")
    df = independent_frame(next((tmp_path / "results").glob("*/results.csv")).parent)
    # the copy suite: ce rows, gated, but the all-to-all's flows (this synthetic run's copy suite is of before the
    # alltoall suite), timed in one window of every flow: their own floor on H200s
    floors = [floor_for("NVIDIA H200", "ce", "window" if m == "ce_alltoall" else "gated", b).fraction
              for m, b in zip(df["method"], df["bytes"])]
    want = int((df["noise"] > floors).sum())
    assert 0 < want < len(df) and f"{NOISY_TITLE}: {want}" in " ".join(out.split())  # the terminal wraps it
    with pytest.raises(SystemExit):
        run_report(capsys, tmp_path / "results", "--no-figures", "--cv-threshold", "0.001")


# ------------------------------------------------------------------------------------------ headline

def test_headline_comes_first_and_flags_the_weak_pair(synth_report):
    """The synthetic run has pair 1→2 at 70%, an unverified and a noisy row: the headline says check's verdict
    (4 x H200 over direct NVLink: check ships no expectation for it), names the weakest pair with the right
    numbers as a fact, and sits above the details in all three renderings."""
    md, out, html = synth_report["md"], synth_report["out"], synth_report["html"]
    assert md.index("## At a glance") < md.index("## Run ") < md.index("## Flags")
    assert out.index("At a glance") < out.index("Run 20261122-190000-synth")
    assert html.index('class="glance"') < html.index("<h2>Run ")
    assert "- ✗ **Unhealthy** (ipcbench check" in md and "1 unverified row" in md and "- **1 noisy row** (copy 1)" in md
    m = re.search(r"- \*\*Weakest pair\*\* 1→2: [\d.]+ GB/s = [\d.]+% of peak, (\d+\.\d)% below the median pair\.",
                  md)
    assert m and 27 < float(m.group(1)) < 33, m  # the pair runs at 70% of the others
    assert check_headline_numbers(synth_report["run_dir"], md) == 12  # 4 GPUs: every pair listed
    assert re.search(r"P2P latency, one way\*\*: median \*\*[\d.]+ µs\*\*, [\d.]+–[\d.]+ µs over 12 pairs", md)
    assert "half a store-and-poll round trip" in md and "not nvbandwidth's load latency" in md
    assert "How it was measured**: **full run**: 3–15 samples per row until the median is known to ±0.5%" in md


def test_headline_speedup_matches_the_speedup_table(synth_report):
    """The headline's "what IPC buys" (best direction per method) agrees with the full speedup table, which
    test_synthetic_tables_hold_the_right_numbers checks against an independent groupby; the terminal has it."""
    md, out = synth_report["md"], synth_report["out"]
    glance = md_table(md, "What IPC buys: speedup over the best host-staged path, same pair and size (median over "
                          "pairs)")
    full = md_table(md, "Speedup over the best host-staged path")
    full = full.assign(label=full["suite"] + "/" + full["method"] + " " + full["direction"]).set_index("label")
    assert len(glance) >= 6 and not glance["IPC method (best direction)"].str.contains("alltoall").any()
    for _, r in glance.iterrows():
        f = full.loc[r["IPC method (best direction)"]]
        assert r["× best staged"] == f["speedup median"] and r["GB/s"] == f["GB/s"]
    assert "What IPC buys" in out and re.search(r"copy/ce (push|pull)\s+256M\s+[\d.]+\s+[\d.]+x", out)


def test_healthy_run_says_so(tmp_path, capsys):
    """A run check passes (4 x H200 through NVSwitch, the copy and kernel suites): the headline says healthy,
    in check's words, and nothing in it is marked bad."""
    run = synth.make_run(tmp_path / "results", suites=["copy", "kernel", "staged", "latency"], same_gpu=False)
    meta = json.loads((run / "meta.json").read_text())
    for t in meta["topology"].values():
        for link in t["links"]:
            link["kind"] = "nvswitch"
    (run / "meta.json").write_text(json.dumps(meta))
    rc, out, err = run_report(capsys, tmp_path / "results", "--no-figures")
    assert rc == 0, err
    assert re.search(r"✓ Healthy \(ipcbench check: \d+ checks passed against the expectations it ships", out)
    assert "✗" not in out.split("Run 20261122")[0]


def _quick_options():
    return {"samples": None, "min_time_ms": 2.0, "verify": True, "quick": True,
            "sampling": {"min_time_ms": 2.0, "min_samples": 3, "max_samples": 5, "noise": 0.02, "max_time_s": 0.05}}


def test_options_shown_and_different_options_warned(tmp_path, capsys):
    """Every run says how it was measured (quick or full, samples and stopping rule, min-time, sizes, ranks
    per GPU, pair mode); older runs lacking fields say so; runs of different options side by side are warned
    about, naming what differs; an MPI version ending in a NUL (older meta.json) prints clean."""
    import json

    synth.make_run(tmp_path / "results", run_id="a-full", suites=["copy"], same_gpu=False)
    synth.make_run(tmp_path / "results", run_id="b-quick", suites=["copy"], same_gpu=False, options=_quick_options())
    old = synth.make_run(tmp_path / "results", run_id="c-old", suites=["copy"], same_gpu=False,
                         options={"samples": 5, "min_time_ms": 10.0, "verify": True, "quick": False})
    meta = json.loads((old / "meta.json").read_text())
    for k in ("ranks_per_gpu", "ranks", "sizes", "pair_mode"):
        meta.pop(k, None)
    meta["versions"]["mpi_library"] = "Open MPI v4.1.6, package: Debian OpenMPI\x00"
    (old / "meta.json").write_text(json.dumps(meta))
    rc, out, err = run_report(capsys, tmp_path / "results", "--no-figures")
    assert rc == 0, err
    md = (tmp_path / "results" / "report" / "report.md").read_text()
    html = (tmp_path / "results" / "report" / "report.html").read_text()
    for text in (md, " ".join(out.split())):  # the terminal wraps the headline's lines
        assert "Runs of different options side by side" in text
        assert "(they differ in mode, sampling, ranks/GPU): their numbers are not equally careful" in text
    table = md_table(md, "How each run was measured (mode: quick or full sampling; sampling: samples per row × "
                         "minimum sample time, stopping rule; ?: not in an older meta.json)").set_index("run")
    assert table.loc["a-full"].tolist() == ["full", "3–15 × ≥5 ms, to ±0.5%", "17: 4K–256M", "1", "?"]
    assert table.loc["b-quick"].tolist() == ["quick", "3–5 × ≥2 ms, to ±2%", "17: 4K–256M", "1", "?"]
    assert table.loc["c-old"].tolist() == ["full", "5 fixed × ≥10 ms", "17: 4K–256M", "?", "?"]
    assert "**quick (--quick) run** (a looser stopping rule, for a health check, not for numbers to quote): 3–5 " \
           "samples per row until the median is known to ±2% (or 0.05 s), each " \
           "sample ≥ 2 ms" in md
    assert "**full run**: 5 samples per row (fixed), each sample ≥ 10 ms" in md and "ranks per GPU not recorded" in md
    assert "**Quick run**" not in md  # what quick means: in its How line, not a line of its own
    assert md.count("quick") >= 5 and out.count("quick") >= 3
    assert "\x00" not in md + html + out and "MPI Open MPI v4.1.6, package: Debian OpenMPI, cupy" in md


def test_same_options_no_warning(tmp_path, capsys):
    for i in range(2):
        synth.make_run(tmp_path / "results", run_id=f"r{i}", hosts=(f"h{i}",), suites=["copy"], same_gpu=False)
    rc, out, _ = run_report(capsys, tmp_path / "results", "--no-figures")
    assert rc == 0 and "different options" not in out and "Runs side by side" in out


def test_real_quick_run_says_quick(tmp_path, capsys):
    """`grep -c quick` on the report of a --quick run is not 0 (it was), in every rendering."""
    run = synth.make_run(tmp_path / "results", suites=["copy"], options=_quick_options())
    rc, out, _ = run_report(capsys, run, "--no-figures", "--out", tmp_path / "rep")
    assert rc == 0
    for text in (out, (tmp_path / "rep" / "report.md").read_text(), (tmp_path / "rep" / "report.html").read_text()):
        assert text.count("quick") >= 2


# ------------------------------------------------------------------------------------------ figures

def method_style(suite: str, method: str, direction: str = "oneway") -> dict:
    """The figure style of a method's rows, from the facts its suite declares for them."""
    from ipcbench.report.figure_style import Series, method_style as style
    from ipcbench.results import described
    from ipcbench.suites.registry import row_facts

    engine, access, mechanism, pattern, _ = described(row_facts(suite, method), direction, False)
    return style(Series(method, engine, access, mechanism, pattern))


def test_method_styles_pair_legacy_with_pool():
    """Same colour per engine, solid for legacy and dashed for pool; every engine its own colour."""
    for legacy, pool in ((("copy", "ce"), ("pool", "pool_ce")), (("kernel", "sm_read"), ("pool", "pool_sm_read")),
                         (("kernel", "sm_write"), ("pool", "pool_sm_write"))):
        a, b = method_style(*legacy, "bidir"), method_style(*pool, "bidir")
        assert a["color"] == b["color"] and a["linestyle"] == "-" and b["linestyle"] != "-"
        assert b["zorder"] > a["zorder"] and b["linewidth"] < a["linewidth"]  # pool drawn thin, on top
    engines = [("copy", "ce"), ("kernel", "sm_read"), ("kernel", "sm_write"), ("staged", "mpi_staged"),
               ("staged", "shm_staged"), ("pipeline", "ring_d2"), ("pipeline", "ring_d4"), ("pipeline", "ring_d8"),
               ("latency", "sm_pingpong"), ("latency", "event_pingpong")]
    colours = [method_style(*e)["color"] for e in engines]
    assert len(set(colours)) == len(colours)
    assert method_style("latency", "ce")["color"] == method_style("copy", "ce")["color"]


def test_heatmap_scale_makes_a_weak_pair_stand_out():
    """Colour = % of the median pair on a diverging scale centred at 100%: a pair 10% below is two thirds of
    the way to full red while the others stay white (a scale from 0 made it only slightly darker)."""
    import numpy as np

    from ipcbench.report.figures import heat_colour_values, heat_norm

    nan = float("nan")
    m = pd.DataFrame([[nan, 394, 395, 393], [394, nan, 355, 394], [393, 395, nan, 394], [394, 393, 395, nan]])
    col = heat_colour_values(m)
    norm, mid = heat_norm([col], 100.0, 15.0)
    assert mid == 100.0 and norm(col[1, 2]) < 0.2
    others = [norm(v) for v in col[np.isfinite(col)] if v > 95]
    assert len(others) == 11 and all(abs(x - 0.5) < 0.05 for x in others)


def test_figure_jobs_one_question_each(tmp_path, monkeypatch):
    """Latency is small multiples (no panel crowded), bandwidth vs size is one figure with a panel per
    direction and the link peak, speedup has a log axis with plain labels, titles come with subtitles."""
    from ipcbench.report import figures
    from ipcbench.report.document import build
    from ipcbench.record.run import load_runs

    jobs = []
    monkeypatch.setattr(figures, "draw_all", lambda js: [jobs.extend(js), [None] * len(js)][1])
    runs, _ = load_runs([synth.make_run(tmp_path / "results")])
    build(runs, [], tmp_path, figures=True)
    byname = {kw.get("name", args[4] if len(args) > 4 else ""): (fn, args, kw) for fn, args, kw in jobs}
    names = [n for n in byname]
    lat = next(byname[n] for n in names if n.endswith("-latency.png"))
    assert lat[0] == "curves_panels" and len(lat[1][0]) >= 3
    for _title, c in lat[1][0]:
        assert c.groupby(["suite", "method"]).ngroups <= 10
    assert lat[1][0][0][0] == "one-way latency (latency suite)"
    bw = next(byname[n] for n in names if n.endswith("-bw-vs-size.png"))
    assert [t for t, _ in bw[1][0]] == ["push", "pull", "bidir"] and bw[2]["hlines"]["bidir"][0] == pytest.approx(
        2 * 478.1, abs=0.1)
    sp = next(byname[n] for n in names if n.endswith("-speedup.png"))
    assert sp[2]["logy"] and sp[2]["yunit"] == "×"
    assert all(kw.get("subtitle") for fn, args, kw in jobs if fn != "host_boxes")
    ticks, labels = figures._nice_log_ticks(3.5, 17.0, "×")
    assert labels[:3] == ["5×", "7×", "10×"] and all("10^" not in t for t in labels)


def test_the_alltoall_table_sums_each_gpus_flows_against_its_nvlink_aggregate(tmp_path):
    """Each GPU's all-to-all egress is the sum of its flows (they share one window), beside its NVLink aggregate
    (its 18 NVLinks) and NCCL's, in its own block of the run; a run without all-to-all rows has no such block."""
    from ipcbench.record.run import load_runs
    from ipcbench.report import tables as T
    from ipcbench.report.document import _tables, build
    from ipcbench.report.render import Heading, Table

    runs, _ = load_runs([synth.make_run(tmp_path / "results")])
    tables = _tables(runs)
    df, t = tables["df"], tables["a2a"]
    big = t[t["bytes"] == max(t["bytes"])]
    flows = df[(df["method"] == "ce_alltoall") & (df["bytes"] == max(t["bytes"]))]
    assert len(big) == 4 and big["gpu_peak_gbps"].round(1).tolist() == [478.1] * 4  # 18 links of the synth node
    for r in big.itertuples():
        assert r.ce_alltoall == pytest.approx(flows[flows["src_gpu"] == r.src_gpu]["bw_gbps_median"].sum())
        assert len(flows[flows["src_gpu"] == r.src_gpu]) == 3
    doc = build(runs, [], tmp_path, figures=False)
    at = [i for i, b in enumerate(doc) if isinstance(b, Heading) and b.text.startswith("All-to-all: each GPU")]
    assert len(at) == 1 and isinstance(doc[at[0] + 2], Table)
    table = doc[at[0] + 2]
    assert table.columns[3] == "copy engine" and table.columns[-2:] == ["NVLink", "% NVLink"]  # no NCCL rows here
    assert T.alltoall_table(df[df["method"] != "ce_alltoall"], T.gpu_peaks({})).empty


# ------------------------------------------------------------------------------------------ bad input

def test_cut_last_line_keeps_the_run(tmp_path, capsys):
    """What a killed writer leaves (the last row cut short) loses that row only, with a warning."""
    run = synth.make_run(tmp_path / "results", run_id="20261122-180000-cut", suites=["copy"])
    csv = run / "results.csv"
    text = csv.read_text()
    csv.write_text(text[: len(text) - 50])
    nlines = text.count("\n")
    rc, out, err = run_report(capsys, tmp_path / "results", "--no-figures")
    assert rc == 0
    assert f"{csv}:{nlines}: last line cut short" in err and "Traceback" not in err
    md = (tmp_path / "results" / "report" / "report.md").read_text()
    assert f"## Run {run.name}" in md and f"{csv}:{nlines}: last line cut short" in md


def test_malformed_run_skipped_others_reported(tmp_path, capsys):
    good = synth.make_run(tmp_path / "results", run_id="20261122-190000-good", suites=["copy"])
    bad = synth.make_run(tmp_path / "results", run_id="20261122-180000-bad", suites=["copy"])
    csv = bad / "results.csv"
    lines = csv.read_text().splitlines()
    lines[3] = lines[3][:-50]  # a damaged row in the middle: the run cannot be trusted
    csv.write_text("\n".join(lines) + "\n")
    rc, out, err = run_report(capsys, tmp_path / "results", "--no-figures")
    assert rc == 1  # the report is written, but an input was lost: the exit status says so
    assert f"{csv}:4:" in err and "truncated" in err and "skipped" in err and "could not be read" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 2
    md = (tmp_path / "results" / "report" / "report.md").read_text()
    assert f"## Run {good.name}" in md and f"## Run {bad.name}" not in md
    assert f"{csv}:4:" in md  # listed under Skipped inputs
    assert check_summary_numbers(good, md) > 0


def test_bad_value_names_file_and_line(tmp_path, capsys):
    bad = synth.make_run(tmp_path / "results", suites=["copy"])
    lines = (bad / "results.csv").read_text().splitlines()
    lines[7] = lines[7].replace(",true,", ",perhaps,", 1)
    (bad / "results.csv").write_text("\n".join(lines) + "\n")
    rc, out, err = run_report(capsys, tmp_path / "results")
    assert rc == 2
    assert f"{bad / 'results.csv'}:8: column 'same_gpu'" in err or f"{bad / 'results.csv'}:8: column 'verified'" in err
    assert "no usable run" in err and "Traceback" not in err


def test_invalid_meta_skips_run(tmp_path, capsys):
    good = synth.make_run(tmp_path / "results", run_id="a-good", suites=["copy"])
    bad = synth.make_run(tmp_path / "results", run_id="b-bad", suites=["copy"])
    (bad / "meta.json").write_text('{"run_id": "b",\n "hosts": [\n')
    rc, out, err = run_report(capsys, tmp_path / "results", "--no-figures")
    assert rc == 1
    assert re.search(re.escape(str(bad / "meta.json")) + r":\d+: invalid JSON", err)
    assert f"Run {good.name}" in out and f"Run {bad.name}" not in out


def test_missing_meta_still_reported(tmp_path, capsys):
    run_dir = synth.make_run(tmp_path / "results", suites=["copy"], meta=False)
    rc, out, err = run_report(capsys, run_dir, "--no-figures")
    assert rc == 0 and "no meta.json" in err
    assert (run_dir / "report" / "report.md").is_file()
    md = (run_dir / "report" / "report.md").read_text()
    assert "% of peak skipped" in md and check_summary_numbers(run_dir, md) > 0


def test_nothing_usable(tmp_path, capsys):
    rc, _, err = run_report(capsys, tmp_path / "does-not-exist")
    assert rc == 2 and "no such file" in err
    (tmp_path / "empty").mkdir()
    rc, _, err = run_report(capsys, tmp_path / "empty")
    assert rc == 2 and "no usable run" in err and len(err.strip().splitlines()) == 1
    run_dir = tmp_path / "hdr"
    run_dir.mkdir()
    (run_dir / "results.csv").write_text("run_id,host\n")
    rc, _, err = run_report(capsys, run_dir)
    assert rc == 2 and f"{run_dir / 'results.csv'}:1: header lacks" in err


# ------------------------------------------------------------------------------------------ fleet

def test_fleet_outlier_host(tmp_path, capsys):
    hosts = ["n1", "n2", "n3", "n4"]
    synth.make_run(tmp_path / "results", run_id="job-1", hosts=hosts[:2], suites=["copy", "staged"],
                   same_gpu=False)
    synth.make_run(tmp_path / "results", run_id="job-2", hosts=hosts[2:], suites=["copy", "staged"],
                   same_gpu=False, host_scale={"n3": 0.8}, seed=5)
    rc, out, err = run_report(capsys, tmp_path / "results")
    assert rc == 0, err
    md = (tmp_path / "results" / "report" / "report.md").read_text()
    outl = md_table(md, "Outlier hosts (more than 10% below the fleet median)")
    assert set(outl["host"]) == {"n3"}
    assert "copy/ce push" in set(outl["method"])
    hm = md_table(md, "Fleet: hosts compared")
    assert list(hm["host"]) == hosts + ["fleet median"]
    # host x method numbers: median over the host's cross-GPU pairs at the largest size
    df = pd.concat([independent_frame(d) for d in sorted((tmp_path / "results").glob("job-*"))])
    big = cross_pairs(df)
    big = big[(big["method"] == "ce") & (big["direction"] == "push") & (big["bytes"] == big["bytes"].max())]
    want = big.groupby("host")["bw_gbps_median"].median()
    for h in hosts:
        assert num(hm.set_index("host").loc[h, "copy/ce push"]) == pytest.approx(want[h], abs=0.051)
    assert "n3" in out and "Outlier hosts" in out
    figs = check_figures(tmp_path / "results" / "report", md,
                         (tmp_path / "results" / "report" / "report.html").read_text())
    assert "fleet-hosts.png" in figs


def test_uniformly_slow_run_is_flagged_against_the_others(tmp_path, capsys):
    """A host whose pairs are all 20% slow has no weak pair of its own: the headline compares it with the
    other runs of the same GPU model, says so beside check's verdicts and lists it first on the terminal."""
    for i, h in enumerate(["h1", "h2", "h3", "h4"]):
        synth.make_run(tmp_path / "results", run_id=f"r{i}-{h}", hosts=(h,), suites=["copy"], same_gpu=False,
                       n_gpus=2, sizes=[4096, 1 << 20], seed=i, host_scale={"h3": 0.8})
    rc, out, _ = run_report(capsys, tmp_path / "results", "--no-figures")
    assert rc == 0
    flat = " ".join(out.split())
    m = re.search(r"· Slower than the other runs of their GPU model: r2-h3 \(best path (\d+\.\d)% below the median "
                  r"of 4 runs", flat)
    assert m and float(m.group(1)) > 10, flat[:400]  # 20% slower link, less at 1M where latency counts
    table = out[out.index("Runs side by side"):].splitlines()
    below = next(i for i, ln in enumerate(table) if ln.strip() and set(ln) <= {"-", " "})  # under its header
    assert table[below + 1].startswith("r2-h3")
    md = (tmp_path / "results" / "report" / "report.md").read_text()
    assert "**Slower than the other runs**" in md and "runs healthy" not in md


def test_figure_caps_for_many_runs(tmp_path, capsys):
    for i in range(figure_plan.MAX_FIGURE_RUNS + 2):
        synth.make_run(tmp_path / "results", run_id=f"run-{i}", hosts=(f"h{i}",), suites=["copy"],
                       same_gpu=False, n_gpus=2, sizes=[4096, 1 << 20])
    rc, out, err = run_report(capsys, tmp_path / "results")
    assert rc == 0, err
    pngs = {p.name for p in (tmp_path / "results" / "report").glob("*.png")}
    heat_hosts = {n.split("-heatmap")[0] for n in pngs if "-heatmap-" in n}
    assert len(heat_hosts) == figure_plan.MAX_HEATMAP_HOSTS
    assert not any(n.startswith(f"run-{figure_plan.MAX_FIGURE_RUNS}") for n in pngs)
    assert "fleet-hosts.png" in pngs


def test_import_is_light():
    import subprocess

    code = ("import sys, ipcbench.report.command, ipcbench.report.compare_command; "
            "print('pandas' in sys.modules, 'matplotlib' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.split() == ["False", "False"]


# ------------------------------------------------------------------------------------------ real runs

# Every real run's report: by default two runs of each directory (results/, tests/data/*) and two more drawn with a
# fixed seed; the other runs are slow.
@sampled("run_dir", real_runs() or [None], keep=2, always=per_directory(real_runs(), keep=2),
         ids=lambda p: p.name if p else "none")
def test_real_run_report(run_dir, tmp_path, capsys):
    if run_dir is None:
        pytest.fail(f"no real run under {RESULTS}/*/ (results.csv + meta.json): commit one measured on the GPU "
                    "machine, or point IPCBENCH_RESULTS_DIR at a results directory")
    work = tmp_path / "results" / run_dir.name
    shutil.copytree(run_dir, work, ignore=shutil.ignore_patterns("report"))
    rc, out, err = run_report(capsys, work, "--out", tmp_path / "report")
    assert rc == 0, err
    md = (tmp_path / "report" / "report.md").read_text()
    html = (tmp_path / "report" / "report.html").read_text()
    check_figures(tmp_path / "report", md, html)
    check_self_contained_html(html)
    assert "\x00" not in md + html + out  # older runs' MPI version strings end in a NUL
    assert out.index("At a glance") < out.index(f"Run {run_dir.name}")
    assert "How it was measured" in out
    suites = json.loads((work / "meta.json").read_text())["suites"]  # check and selftest runs measure a few
    if not has_cross_gpu_pairs(work):  # ranks sharing one GPU (a one-GPU machine): the same-GPU table
        assert check_summary_numbers(work, md, same_gpu=True) > 0
        assert "**Same GPU**" in md and "Summary (cross-GPU pairs)" not in md
        # its curves are drawn over the same-GPU pairs (a one-GPU machine's report has them too)
        assert "bw-vs-size.png" in md and "median over same-GPU pairs" in md
        # the small-message figure: the latency suite's rows, or time per transfer of a method at two sizes ≤ 64K
        rows = pd.read_csv(work / "results.csv")
        small = rows[(rows["bytes"] <= 64 << 10) & rows["direction"].isin(["push", "pull", "bidir"])]
        curves = not small.empty and small.groupby(["suite", "method", "direction"])["bytes"].nunique().max() > 1
        assert ("latency.png" in md) == ("latency" in suites or curves)
        return
    assert check_summary_numbers(work, md) > 0
    check_speedup_numbers(work, md)
    assert check_headline_numbers(work, md) > 0
    assert "What IPC buys" in out and ("P2P latency" in out) == ("latency" in suites)


@sampled("run_dir", real_runs() or [None], keep=2, always=per_directory(real_runs(), keep=2),
         ids=lambda p: p.name if p else "none")
def test_real_run_weak_links_count_and_no_nan_rows(run_dir, tmp_path, capsys):
    """Regression: the weak-link flags hold exactly the pairs >10% below their method's typical pair (computed
    here independently) and never NaN rows (a whole Series assigned to an empty frame once became its
    index, and the report listed every pair as a NaN 'weak link')."""
    if run_dir is None:
        pytest.skip("no real run committed")
    df = independent_frame(run_dir)
    cross = cross_pairs(df[df["bw_gbps_median"].notna()])
    keys = ["suite", "method", "direction"]
    big = cross[cross["bytes"] == cross.groupby(keys)["bytes"].transform("max")]
    ref = big.groupby(keys)["bw_gbps_median"].transform(lambda s: s.max() if len(s) == 2 else s.median())
    expected = int((big["bw_gbps_median"] < 0.9 * ref).sum())
    code, out, _ = run_report(capsys, str(run_dir), "--out", str(tmp_path / "rep"), "--no-figures")
    assert code == 0
    m = re.search(re.escape(WEAK_TITLE) + r": (\d+)", out)
    assert m and int(m.group(1)) == expected, out[-3000:]
    assert " nan " not in out and "nan%" not in out


def test_fleet_rows_recovered_from_node_part_files(tmp_path, capsys):
    """A fleet job that died before the final gather: rank 0's results.csv has only its node; the other
    nodes' rows are in <run>/nodes/<host>.csv (collect.RowSink). The report must bring them back, say so,
    and say the run did not complete."""
    import json

    src = synth.make_run(tmp_path / "src", hosts=("nodeA", "nodeB"))
    run = tmp_path / "run"
    run.mkdir()
    df = pd.read_csv(src / "results.csv", keep_default_na=False, na_values=[""])
    df[df["host"] == "nodeA"].to_csv(run / "results.csv", index=False, na_rep="")
    (run / "nodes").mkdir()
    df[df["host"] == "nodeB"].to_csv(run / "nodes" / "nodeB.csv", index=False, na_rep="")
    meta = json.loads((src / "meta.json").read_text())
    meta["status"] = "running"
    (run / "meta.json").write_text(json.dumps(meta))
    code, out, err = run_report(capsys, str(run), "--out", str(tmp_path / "rep"), "--no-figures")
    assert code == 0, err
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "recovered from nodes/nodeB.csv" in md
    assert "did not complete" in md
    assert "nodeB" in md and "nodeA" in md


def test_the_alltoall_table_holds_the_ipc_paths_against_nccls(tmp_path):
    """With NCCL's all-to-all in the run, its column sits beside the IPC paths' and `× NCCL` is the best IPC path
    over it, GPU by GPU (here NCCL's flows are the copy engine's at 0.8 of the rate: 1.25×)."""
    from ipcbench.record.run import load_runs
    from ipcbench.report.document import _alltoall_blocks, _tables
    from ipcbench.report.render import Table

    run = synth.make_run(tmp_path / "results")
    header, records = synth.read_csv(run)
    col = {c: i for i, c in enumerate(header)}
    extra = []
    for rec in records:
        if rec[col["method"]] == "ce_alltoall":
            r = list(rec)
            r[col["method"]], r[col["suite"]] = "nccl_alltoall", "alltoall"  # its facts: the catalogue's
            for c in ("bw_gbps_median", "bw_gbps_max"):
                r[col[c]] = f"{float(rec[col[c]]) * 0.8:.6g}"
            for c in ("time_us_median", "time_us_min", "time_us_max"):
                r[col[c]] = f"{float(rec[col[c]]) / 0.8:.6g}"
            r[col["samples_us"]] = " ".join(f"{float(x) / 0.8:.6g}" for x in rec[col["samples_us"]].split())
            extra.append(r)
    synth.write_csv(run, header, records + extra)
    runs, _ = load_runs([run])
    a2a = _tables(runs)["a2a"]
    (table,) = [b for b in _alltoall_blocks(a2a) if isinstance(b, Table)]
    assert table.columns == ["host", "GPU", "size", "copy engine", "NCCL", "NVLink", "% NVLink", "× NCCL"]
    assert {row[-1].rstrip("x×") for row in table.rows} == {"1.25"}
