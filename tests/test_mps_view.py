"""The report's same-GPU view without and with MPS (report/mps_view.py), on two runs recorded on an H100
(tests/data/mps/README.md). No GPU needed: the runs are files."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from ipcbench.report import command as report
from ipcbench.record.run import load_runs
from ipcbench.record.meta import MetaError, parse_meta
from ipcbench.report.mps_view import side_by_side

DATA = Path(__file__).resolve().parent / "data" / "mps"


def mps_state(raw: dict, host: str):
    return parse_meta(raw).mps_state(host)


def test_mps_state_from_meta():
    assert mps_state({"mps": {"h": {"gpus": {"0": True, "1": True}}}}, "h") is True
    assert mps_state({"mps": {"h": {"gpus": {"0": False}}}}, "h") is False
    assert mps_state({"mps": {"h": {"gpus": {"0": True, "1": False}}}}, "h") is None  # mixed: no pairing
    assert mps_state({"mps": {"h": {"gpus": {"0": True}}}}, "other") is None
    assert mps_state({}, "h") is None  # older than MPS detection
    with pytest.raises(MetaError, match="field mps"):  # a damaged record is refused, naming the field
        mps_state({"mps": "garbled"}, "h")


def test_recorded_runs_pair_up_and_show_what_mps_changes():
    runs, skipped = load_runs([DATA])
    assert not skipped and len(runs) == 2
    (host, without, with_, frame), = side_by_side(runs)
    assert (host, without, with_) == ("vm", "h100-nomps", "h100-mps")
    gain = {(r.suite, r.method, r.direction): r.mps_gain for r in frame.itertuples()}
    # the ping-pong measured the context-switch period without MPS (2.2 ms) and the flag latency with it
    assert gain[("latency", "sm_pingpong", "oneway")] > 1000
    assert gain[("pipeline", "ring_d8", "push")] > 10
    # copies run on the copy engine either way
    assert 0.95 < gain[("copy", "ce", "push")] < 1.05
    assert list(frame["mps_gain"]) == sorted(frame["mps_gain"], reverse=True)


def test_one_state_only_gives_no_view():
    runs, _ = load_runs([DATA / "h100-mps"])
    assert side_by_side(runs) == []


def test_report_has_the_section(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    report.add_arguments(parser)
    rc = report.run(parser.parse_args([str(DATA), "--no-figures", "--out", str(tmp_path / "r")]))
    out = capsys.readouterr().out
    assert rc == 0
    assert "Same GPU: without and with MPS" in out and "latency/sm_pingpong oneway" in out
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## Same GPU: without and with MPS" in md and "without MPS `h100-nomps`, with MPS `h100-mps`" in md


@pytest.mark.parametrize("name", ["h100-nomps", "h100-mps"])
def test_notes_match_the_recorded_mode(name):
    """Never a note that contradicts the run: under MPS no same-GPU row says 'no MPS', and without MPS none
    says the kernels run concurrently."""
    runs, _ = load_runs([DATA / name])
    df = runs[0].frame
    same = df[df["same_gpu"]]
    under = runs[0].meta.mps_state("vm")
    assert under is (name == "h100-mps")
    if under:
        assert not same["note"].str.contains("no MPS").any() and same["note"].str.contains("concurrently").any()
    else:
        assert not same["note"].str.contains("concurrently").any() and same["note"].str.contains("no MPS").any()


# ------------------------------------------------------------------------------------------ matched by what they are

RESULTS = Path(__file__).resolve().parents[1] / "tests" / "data" / "onegpu"


def meta_copy(src: Path, dst: Path, change) -> Path:
    """A copy of a run with its meta.json changed by change(meta)."""
    import json
    import shutil

    shutil.copytree(src, dst)
    meta = json.loads((dst / "meta.json").read_text())
    change(meta)
    (dst / "meta.json").write_text(json.dumps(meta))
    return dst


def test_runs_of_another_gpu_never_pair():
    """h200-nomps and h100-mps were paired (both host `vm`): an "MPS gain" of an H200 against an H100."""
    runs, _ = load_runs([RESULTS / "h200-nomps", RESULTS / "h100-mps"])
    assert side_by_side(runs) == []


def test_the_committed_results_pair_their_h100_runs():
    """`ipcbench report results/` printed no MPS section: the newest run without MPS on host `vm` was an H200's
    (64M-1G), which has no size in common with the H100's run under MPS, and the view was dropped."""
    runs, _ = load_runs([RESULTS])
    views = side_by_side(runs)
    assert [(h, a, b) for h, a, b, _ in views] == [("vm", "h100-nomps", "h100-mps")]


def test_report_of_results_has_the_section(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    report.add_arguments(parser)
    rc = report.run(parser.parse_args([str(RESULTS), "--no-figures", "--quiet", "--out", str(tmp_path / "r")]))
    md = (tmp_path / "r" / "report.md").read_text()
    assert rc == 0 and "## Same GPU: without and with MPS" in md
    assert "without MPS `h100-nomps`, with MPS `h100-mps`" in md and "h200" not in md.split("MPS gain")[1][:2000]


@pytest.mark.parametrize("what, change", [
    ("another GPU board", lambda m: m["gpus"]["vm"][0].update(uuid="GPU-00000000-other")),
    ("other sizes", lambda m: m.update(sizes=m["sizes"][:-1])),
    ("a full run beside a quick one", lambda m: m["options"].update(quick=False)),
    ("another rank count per GPU", lambda m: m.update(ranks_per_gpu=4)),
])
def test_runs_measured_differently_never_pair(what, change, tmp_path):
    changed = meta_copy(DATA / "h100-mps", tmp_path / "h100-mps", change)
    runs, _ = load_runs([DATA / "h100-nomps", changed])
    assert side_by_side(runs) == [], what
