"""The report's figures on real runs (tests/data/h200x2: 2 x H200, 4 ranks; tests/data/mps: one H100, 2 ranks,
without and with MPS), looked at as a reader would: every label a plain number with its unit, every legend inside
its figure, every latency method the run has on the latency figure, handle costs at one stated size, all-to-all
against what it can reach."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ipcbench.record.run import load_runs
from ipcbench.report import figures
from ipcbench.report import tables as T
from ipcbench.report.document import build

DATA = Path(__file__).resolve().parent / "data"
H200 = DATA / "h200x2" / "20261123-090823-vm"  # 4 ranks on 2 GPUs: cross-GPU, same-GPU and all-to-all rows
NOMPS = DATA / "mps" / "h100-nomps"  # same-GPU only: time-sliced, latencies in ms


def _drawn(run_dir: Path, tmp_path, monkeypatch) -> dict:
    """{file name: the matplotlib Figure the report drew for it} of a report of one run, drawn, not saved."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figs: dict = {}

    def keep(fig, out_dir, name):
        FigureCanvasAgg(fig).draw()
        figs[name] = fig
        return name

    monkeypatch.setattr(figures, "_save", keep)
    monkeypatch.setattr(figures, "draw_all", lambda jobs, workers=None: [figures.draw(j) for j in jobs])
    runs, _ = load_runs([run_dir])
    build(runs, [], tmp_path, figures=True)
    return figs


def _one(figs: dict, suffix: str):
    (name,) = [n for n in figs if n.endswith(suffix)]
    return figs[name]


def _texts(fig) -> list[str]:
    """Every text of the figure: tick labels, annotations, titles, legend entries and titles."""
    out = [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]
    return [t for t in out if t]


SCIENTIFIC = re.compile(r"\de[+-]?\d|×10")


@pytest.mark.parametrize("run_dir", [H200, NOMPS])
def test_no_number_in_scientific_notation(run_dir, tmp_path, monkeypatch):
    """The latency figure of a run without MPS read "2e+03", "1e+03" on its axis and "sm_pingpong 2.19e+03 µs"."""
    for name, fig in _drawn(run_dir, tmp_path, monkeypatch).items():
        bad = [t for t in _texts(fig) if SCIENTIFIC.search(t)]
        assert not bad, (name, bad)


def test_the_latency_axis_says_its_unit_on_every_tick(tmp_path, monkeypatch):
    fig = _one(_drawn(NOMPS, tmp_path, monkeypatch), "-latency.png")
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels() if t.get_text()]
    assert labels and all(re.fullmatch(r"[\d.]+ (µs|ms)", t) for t in labels), labels


@pytest.mark.parametrize("run_dir", [H200, NOMPS])
def test_every_legend_lies_inside_its_figure(run_dir, tmp_path, monkeypatch):
    """The legend title "thick solid: legacy IPC, host-staged" ran past the right edge of the latency figure."""
    for name, fig in _drawn(run_dir, tmp_path, monkeypatch).items():
        box = fig.bbox
        for legend in fig.legends + [a.get_legend() for a in fig.axes if a.get_legend()]:
            ext = legend.get_window_extent()
            assert box.x0 - 1 <= ext.x0 and ext.x1 <= box.x1 + 1 and box.y0 - 1 <= ext.y0 and ext.y1 <= box.y1 + 1, \
                (name, ext, box)


@pytest.mark.parametrize("run_dir", [H200, NOMPS])
def test_every_latency_method_of_the_run_is_on_the_latency_figure(run_dir, tmp_path, monkeypatch):
    """event_pingpong (an event handed over: its rows have no size, bytes 0) was left off the latency figure."""
    import pandas as pd

    rows = pd.read_csv(run_dir / "results.csv")
    methods = set(rows.loc[rows["suite"] == "latency", "method"])
    assert "event_pingpong" in methods
    fig = _one(_drawn(run_dir, tmp_path, monkeypatch), "-latency.png")
    shown = {t.get_text() for legend in fig.legends for t in legend.get_texts()}
    assert methods <= shown, methods - shown
    assert any(t.startswith("event_pingpong ") and t.endswith("µs (no data: an event)") for t in _texts(fig))


def test_handle_costs_are_per_size():
    """Handle costs were a median over rows of every size (4K, 1M and 256M buffers mixed): now per size."""
    runs, _ = load_runs([H200])
    df = T.add_scope(runs[0].frame.assign(run=runs[0].label))
    h = T.handle_costs(df)
    assert "bytes" in h.columns
    rows = df[df["direction"] == "op"]
    for r in h.itertuples():
        same = rows[(rows["method"] == r.method) & (rows["same_gpu"] == r.same_gpu) & (rows["bytes"] == r.bytes)]
        assert r.rows == len(same) and r.time_us == pytest.approx(same["time_us_median"].median())


def test_the_handles_figure_is_at_one_stated_size(tmp_path, monkeypatch):
    jobs = []
    monkeypatch.setattr(figures, "draw_all", lambda js, workers=None: [jobs.extend(js), [None] * len(js)][1])
    runs, _ = load_runs([H200])
    build(runs, [], tmp_path, figures=True)
    (fn, args, kw), = [j for j in jobs if j[2].get("name", args_name(j)).endswith("-handles.png")]
    table = args[0]
    assert set(table["bytes"]) == {0, 256 << 20}  # the largest buffer, and the operations that take none
    assert "256M" in kw["subtitle"] and "4K" in kw["subtitle"] and "1M" in kw["subtitle"]
    none = table[(table["bytes"] == 0) & (table["kind"] != "error-path probe")]
    assert not none.empty and none["label"].str.endswith(" (no buffer)").all()  # event handles: not at 256M


def args_name(job) -> str:
    fn, args, kw = job
    return next((a for a in args if isinstance(a, str) and a.endswith(".png")), "")


def test_all_to_all_is_held_against_its_gpus_nvlink_aggregate():
    """A flow of a concurrent all-to-all was drawn as a % of one link's peak (20%: it shares its GPU's links with
    the other flows). Now its source GPU's flows are summed and held against that GPU's NVLink aggregate, and the
    row says so."""
    runs, _ = load_runs([H200])
    run = runs[0]
    df = T.add_scope(run.frame.assign(run=run.label))
    pk = T.peak_rows(df, T.link_table({run.label: run.meta}), T.gpu_peaks({run.label: run.meta}))
    a2a = pk[pk["pattern"] == "alltoall"]
    assert not a2a.empty and set(a2a["basis"]) == {"sum of the GPU's flows / its NVLink aggregate"}
    flows = df[(df["pattern"] == "alltoall") & (df["scope"] == "pair")]
    flows = flows[flows["bytes"] == flows["bytes"].max()]
    for r in a2a.itertuples():
        mine = flows[(flows["src_gpu"] == r.src_gpu) & (flows["direction"] == r.direction)]
        assert r.bw_gbps_median == pytest.approx(mine["bw_gbps_median"].sum())
        (total, active, per_link), = [v for (h, g), v in run.meta.nvlink_aggregate().items() if g == r.src_gpu]
        assert r.peak_gbps == pytest.approx(active * next(ln.per_link_gbps for ln in run.meta.links))
        assert 0 < r.pct <= 100
    assert set(pk.loc[pk["pattern"] != "alltoall", "basis"]) == {"one pair / its link's peak"}
    assert (T.peak_by_pair(pk)["pattern"] != "alltoall").all()
