"""Which figures the report draws for a run, and their titles and file names.

The figures are planned here as Figure blocks holding a drawing job (a figures.py function name and its
arguments); document.build draws them all at once afterwards (in worker processes on a big report) and fills
in the file names. Limits keep a report of many runs or hosts readable and quick to make.
"""

from __future__ import annotations

from pathlib import Path

from ipcbench.report.cells import DIR_ORDER, method_label, method_sort, size_text, slug
from ipcbench.report.load import Run
from ipcbench.report.render import Figure, Para

MAX_FIGURE_RUNS = 2  # runs that get the detailed figures (curves, speedup, handles, peak)
MAX_HEATMAP_HOSTS = 2  # (run, host) units that get heatmaps, over the whole report


def figure_job(title: str, fn: str, *args, **kwargs):
    """A Figure block to be drawn later by figures.<fn>(*args, **kwargs)."""
    return Figure(title, None, job=(fn, args, kwargs))


def run_figures(run: Run, rdf, sp, pk, handles, out_dir: Path, heat_budget: int):
    """Figure blocks (not drawn yet) of one run; heatmaps only while heat_budget lasts."""
    from ipcbench.report import tables as T

    figs = []
    run_slug = slug(run.label)
    bw = T.cross_gpu(T.bw_rows(rdf))
    # heatmaps: one figure per (host, suite, method), one panel per direction
    for host, hdf in bw.groupby("host", sort=True):
        if heat_budget <= 0:
            figs.append(Para(f"Heatmaps are drawn for the first {MAX_HEATMAP_HOSTS} hosts only."))
            break
        heat_budget -= 1
        for (suite, method), mdf in method_sort(hdf).groupby(["suite", "method"], sort=False):
            panels = [(d, T.heatmap_matrix(mdf[mdf["direction"] == d]))
                      for d in sorted(mdf["direction"].unique(), key=lambda d: DIR_ORDER.get(d, 9))]
            size = size_text(mdf["bytes"].max())
            name = method_label(suite, method)
            figs.append(figure_job(f"Heatmap {name} at {size} ({host})", "heatmap", panels,
                                   f"{name} at {size}, {host} (source row → destination column)",
                                   out_dir, f"{run_slug}-{slug(host)}-heatmap-{slug(suite)}-{slug(method)}.png"))
    curves = T.size_curves(rdf)
    for d in ("push", "pull", "bidir"):
        c = curves[curves["direction"] == d]
        if c.empty:
            continue
        c = c.assign(label=[method_label(s, m) for s, m in zip(c["suite"], c["method"])])
        figs.append(figure_job(f"Bandwidth vs message size ({d})", "lines_vs_size", c, "median",
                               f"Bandwidth vs size, {d} (median over cross-GPU pairs)", "GB/s", out_dir,
                               f"{run_slug}-bw-vs-size-{d}.png", band=False))
    lat = T.latency_curves(rdf)
    if not lat.empty:
        lat = lat.assign(label=[method_label(s, m, d)
                                for s, m, d in zip(lat["suite"], lat["method"], lat["direction"])])
        figs.append(figure_job("Latency vs message size (≤ 64K)", "lines_vs_size", lat, "median",
                               "Time per transfer, messages ≤ 64K (median over pairs)", "µs", out_dir,
                               f"{run_slug}-latency.png", logy=True, band=False))
    rsp = sp[sp["run"] == run.label]
    if not rsp.empty:
        c = T.speedup_curves(rsp)
        c = c.assign(label=[method_label(s, m, d) for s, m, d in zip(c["suite"], c["method"], c["direction"])],
                     median=c["speedup"])
        figs.append(figure_job("Speedup of each IPC method over the best host-staged path", "lines_vs_size", c,
                               "median", "Speedup over the best host-staged path (median over pairs)", "× staged",
                               out_dir, f"{run_slug}-speedup.png", logy=True, band=False))
    h = handles[handles["run"] == run.label]
    if not h.empty:
        h = h.assign(label=[m if s == "handles" else method_label(s, m) for s, m in zip(h["suite"], h["method"])],
                     gpus=h["same_gpu"].map({True: "same GPU", False: "cross-GPU"}))
        figs.append(figure_job("Handle and import costs", "bars", h, "label", "time_us", "gpus",
                               "Handle and import costs (median)", "µs", out_dir, f"{run_slug}-handles.png",
                               logy=True))
    rpk = pk[pk["run"] == run.label]
    if not rpk.empty:
        rpk = method_sort(rpk)
        rpk = rpk.assign(label=[method_label(s, m, d)
                                for s, m, d in zip(rpk["suite"], rpk["method"], rpk["direction"])])
        figs.append(figure_job("% of theoretical link peak per pair", "strip", rpk, "label", "pct",
                               "% of theoretical link peak at the largest size (dot: a pair)", "% of peak", out_dir,
                               f"{run_slug}-peak.png", hline=100.0))
    return figs, heat_budget
