"""What `ipcbench report` and `ipcbench compare` say is true in every case: each test here pins a statement
that was false on some committed or recorded run (or on a run like one), through the commands themselves,
so it fails on the behaviour it replaced. The CLI's own statements are in test_cli.py."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synth  # noqa: E402
from ipcbench.report import command as report  # noqa: E402
from ipcbench.report import compare_command as compare  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ONEGPU = REPO / "tests" / "data" / "onegpu"  # runs of two ranks on one GPU (their README)
SIZES = [4096, 1 << 20, 64 << 20]


def run_cmd(module, capsys, *argv) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    rc = module.run(parser.parse_args([str(a) for a in argv]))
    out, err = capsys.readouterr()
    return rc, out, err


def glance(out: str) -> str:
    """The terminal's "At a glance" section, its wrapped lines joined."""
    return " ".join(out[:out.index("\nRun ")].split())


# ------------------------------------------------------------------------------------------ compare

def _died_fleet_run(src: Path, run: Path, keep_of_b: int) -> Path:
    """A fleet run that died before the final gather: results.csv has nodeA's rows, nodeB's first rows are in
    nodes/nodeB.csv only (run/collect.RowSink), meta.json still says running."""
    df = pd.read_csv(src / "results.csv", keep_default_na=False, na_values=[""])
    run.mkdir()
    df[df["host"] == "nodeA"].to_csv(run / "results.csv", index=False, na_rep="")
    (run / "nodes").mkdir()
    df[df["host"] == "nodeB"].head(keep_of_b).to_csv(run / "nodes" / "nodeB.csv", index=False, na_rep="")
    meta = json.loads((src / "meta.json").read_text())
    meta.update(status="running", run_id="died")
    (run / "meta.json").write_text(json.dumps(meta))
    return run


def test_compare_says_first_that_a_run_did_not_complete(tmp_path, capsys):
    """compare on a fleet run that died before the final gather said "N rows missing" and never why, while the
    report recovered the nodes' part files: compare loads it the same way and says first that NEW did not
    complete; rows it never measured are missing (the gate fails), the recovered ones are judged."""
    src = synth.make_run(tmp_path / "src", hosts=("nodeA", "nodeB"), suites=["copy"], sizes=SIZES, same_gpu=False)
    n_b = int((pd.read_csv(src / "results.csv")["host"] == "nodeB").sum())
    died = _died_fleet_run(src, tmp_path / "died", keep_of_b=n_b - 7)
    rc, out, _ = run_cmd(compare, capsys, src, died)
    first = out.splitlines()[0]
    assert first.startswith("warning: NEW died did not complete (meta.json status: running; rows of other nodes "
                            "recovered from nodes/)"), first
    assert rc == 1 and "7 missing" in out and f"{2 * n_b - 7} rows matched" in out


# ------------------------------------------------------------------------------------------ report: the headline

def test_the_same_gpu_line_says_mps_on_an_mps_run(tmp_path, capsys):
    """tests/data/onegpu/h100-mps ran under MPS: its headline said "(no MPS)" (fixed text)."""
    rc, out, _ = run_cmd(report, capsys, ONEGPU / "h100-mps", "--no-figures", "--out", tmp_path)
    g = glance(out)
    assert rc == 0 and "Same GPU" in g and "(no MPS)" not in g and "under MPS" in g
    rc, out, _ = run_cmd(report, capsys, ONEGPU / "h100-nomps", "--no-figures", "--out", tmp_path)
    assert "kernels (no MPS), not a link" in glance(out)


def test_what_ipc_buys_on_a_run_with_same_gpu_staged_rows(tmp_path, capsys):
    """tests/data/onegpu/h100-nomps has same-GPU host-staged rows: the headline said "no host-staged rows"."""
    rc, out, _ = run_cmd(report, capsys, ONEGPU / "h100-nomps", "--no-figures", "--out", tmp_path)
    g = glance(out)
    assert "no host-staged rows" not in g
    m = re.search(r"What IPC buys \(same GPU: no cross-GPU pair here\): ([\d.]+)× the best same-GPU host-staged "
                  r"path \(staged/shm_staged push, ([\d.]+) GB/s at 256M\) with [\w/]+ \w+ \(([\d.]+) GB/s at 256M\)",
                  g)
    assert m and float(m.group(1)) == pytest.approx(float(m.group(3)) / float(m.group(2)), rel=0.01)


def test_no_nccl_rows_are_said_with_the_reason(tmp_path, capsys):
    """No committed run has NCCL rows, and the headline said nothing about it."""
    rc, out, _ = run_cmd(report, capsys, ONEGPU / "h100-nomps", "--no-figures", "--out", tmp_path)
    assert "No NCCL rows: NCCL refuses two ranks of one GPU, and every pair of this run shares one" in glance(out)
    run = synth.make_run(tmp_path / "r", suites=["copy"], sizes=SIZES, same_gpu=False)  # meta.json: no nccl suite
    rc, out, _ = run_cmd(report, capsys, run, "--no-figures", "--out", tmp_path / "o")
    assert "No NCCL rows: the nccl suite was not run" in glance(out)
    run = synth.make_run(tmp_path / "s", suites=["copy", "nccl"], sizes=SIZES, same_gpu=False)
    meta_path = next((tmp_path / "s").rglob("meta.json"))
    meta = json.loads(meta_path.read_text())
    meta["skipped"] = [{"suite": "nccl", "step": "nccl push", "reason": "NCCL unavailable: no libnccl", "host": "h"}]
    meta_path.write_text(json.dumps(meta))
    rc, out, _ = run_cmd(report, capsys, run, "--no-figures", "--out", tmp_path / "q")
    assert "No NCCL rows: its steps could not run (nccl push: NCCL unavailable: no libnccl)" in glance(out)
    run = synth.make_run(tmp_path / "n", suites=["copy", "nccl"], sizes=SIZES, same_gpu=False, nccl=True)
    rc, out, _ = run_cmd(report, capsys, run, "--no-figures", "--out", tmp_path / "p")
    assert "No NCCL rows" not in glance(out) and "Against NCCL" in glance(out)


def test_a_run_whose_last_line_was_cut_is_not_healthy(tmp_path, capsys):
    """A results.csv cut short (a killed writer) beside a meta.json saying complete got "✓ Healthy … run
    complete"."""
    run = synth.make_run(tmp_path / "results", suites=["copy", "staged"], sizes=SIZES, same_gpu=False)
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps({**meta, "status": "complete"}))
    text = (run / "results.csv").read_text()
    (run / "results.csv").write_text(text[:-30])
    rc, out, err = run_cmd(report, capsys, run, "--no-figures", "--out", tmp_path / "o")
    g = glance(out)
    assert "Healthy" not in g and "run complete" not in g
    assert "! Cannot judge the node's health" in g and "the run did not complete (its last line was cut short)" in g
    assert "Incomplete run (its last line was cut short)" in g
    assert "the run did not complete (its last line was cut short)" in err


def test_the_terminal_says_how_many_flags_the_report_lists(tmp_path, capsys):
    """The terminal said "… and 534 more in the report" while the report lists 40 and "… and 504 more"."""
    run = synth.make_run(tmp_path / "results", suites=["copy"], sizes=SIZES, same_gpu=False, cv_range=(0.2, 0.3))
    rc, out, _ = run_cmd(report, capsys, run, "--no-figures", "--out", tmp_path / "o")
    n = len(pd.read_csv(run / "results.csv"))  # every row is noisy: its noise above any floor of a copy
    assert f"… and {n - 10} more in the report (the report lists the first 40 of the {n})." in out
    md = (tmp_path / "o" / "report.md").read_text()
    assert f"… and {n - 40} more." in md and md.count("| 20261122-190000-synth | hostA |") >= 40


def test_two_pairs_are_held_against_each_other(tmp_path, capsys, monkeypatch):
    """On two GPUs the "median pair" was the mean of the two: a pair 47% below the other read "30.9% below the
    median pair", and the pair heatmap was centred between them, so the healthy pair was coloured an outlier."""
    from ipcbench.report import figures

    run = synth.make_run(tmp_path / "results", n_gpus=2, suites=["copy", "staged"], sizes=SIZES, same_gpu=False,
                         weak_pair=("hostA", 0, 1, 0.53))
    jobs = []
    monkeypatch.setattr(figures, "draw_all", lambda js: [jobs.extend(js), [None] * len(js)][1])
    rc, out, _ = run_cmd(report, capsys, run, "--out", tmp_path / "o")
    m = re.search(r"Weakest pair 0→1: ([\d.]+) GB/s = [\d.]+% of peak, ([\d.]+)% below the other pair", glance(out))
    best = pd.read_csv(run / "results.csv").query("bytes == @SIZES[-1] and direction in ('push', 'pull') and "
                                                   "method != 'ce_alltoall'")
    healthy = best[best["src_gpu"] == 1]["bw_gbps_median"].max()
    assert m and float(m.group(2)) == pytest.approx(100 * (1 - float(m.group(1)) / healthy), abs=0.11)
    assert 45 < float(m.group(2)) < 50
    fn, args, kw = next(j for j in jobs if j[0] == "heatmap" and str(j[1][3]).endswith("-pairs.png"))
    assert kw["centre"] == pytest.approx(100 * healthy / 478.1, abs=0.05)  # centred on the healthy pair


# ------------------------------------------------------------------------------------------ report: the figures

def _figure_jobs(monkeypatch, capsys, *argv) -> dict:
    """{file name: (function, args, kwargs)} of every figure the report plans (none is drawn)."""
    from ipcbench.report import figures

    jobs = []
    monkeypatch.setattr(figures, "draw_all", lambda js: [jobs.extend(js), [None] * len(js)][1])
    run_cmd(report, capsys, *argv)
    return {kw.get("name", args[4] if len(args) > 4 else args[3]): (fn, args, kw) for fn, args, kw in jobs}


def test_figure_names_do_not_repeat_the_host(tmp_path, capsys, monkeypatch):
    """tests/data/h200x2/20261123-090753-vm's figures were named 20261123-090753-vm-vm-pairs.png."""
    names = _figure_jobs(monkeypatch, capsys, REPO / "tests" / "data" / "h200x2" / "20261123-090753-vm", "--out",
                         tmp_path)
    assert "20261123-090753-vm-pairs.png" in names and not any("-vm-vm-" in n for n in names)
    fleet = synth.make_run(tmp_path / "f", hosts=("n1", "n2"), suites=["copy"], sizes=SIZES, same_gpu=False)
    names = _figure_jobs(monkeypatch, capsys, fleet, "--out", tmp_path / "o")
    assert f"{fleet.name}-n1-pairs.png" in names  # several hosts: each host's figures say which


def test_the_l2_bump_is_labelled(tmp_path, capsys, monkeypatch):
    """On one GPU (results/h100-nomps) bandwidth peaks at 16 MiB, inside the 50 MiB L2, and the figure read as if
    that were the peak: the sizes that fit in the L2 are shaded and said so."""
    names = _figure_jobs(monkeypatch, capsys, REPO / "tests" / "data" / "onegpu" / "h100-nomps", "--out", tmp_path)
    fn, args, kw = names["h100-nomps-bw-vs-size.png"]
    assert kw["band"] == (50 << 20, "fits in the 50M L2")
    assert "shaded: sizes that fit in the GPU's 50M L2, served from the cache" in kw["subtitle"]


def test_the_legend_says_what_its_dotted_lines_are(tmp_path, monkeypatch):
    """The legend said "dotted: pool, vmm, cuda.core" over ce_alltoall, which is dotted; now it names the styles
    drawn, the all-to-all among them, and nothing that is not drawn."""
    from matplotlib.figure import Figure as MplFigure

    from ipcbench.report import figures

    run = synth.make_run(tmp_path / "r", suites=["copy"], sizes=[4 << 20, 64 << 20], same_gpu=False)
    drawn, save = {}, figures._save
    monkeypatch.setattr(figures, "_save", lambda fig, out_dir, name: (drawn.setdefault(name, fig), save(fig, out_dir,
                                                                                                        name))[1])
    monkeypatch.setattr(figures, "draw_all", lambda js: [figures.draw(j) for j in js])  # here, where _save is seen
    parser = argparse.ArgumentParser()
    report.add_arguments(parser)
    assert report.run(parser.parse_args([str(run), "--out", str(tmp_path / "o"), "--quiet"])) == 0
    fig = drawn[f"{run.name}-bw-vs-size.png"]
    assert isinstance(fig, MplFigure)
    legend = (fig.legends or [a.get_legend() for a in fig.axes if a.get_legend()])[0]
    title = legend.get_title().get_text()
    assert "all-to-all" in title and "dotted" in title
    assert "pool" not in title and "vmm" not in title and "cuda.core" not in title
