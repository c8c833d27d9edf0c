"""The report's figures: matplotlib (Agg, no pyplot state), one PNG file per figure, one question per figure.

Each function takes a table from tables.py, writes one PNG into `out_dir` and returns its file name
(or None when there is nothing to draw). PNGs carry no metadata (no software URL inside).

One look everywhere (`method_style`): a colour per engine (copy engine, SM read, SM write, host-staged
MPI, host-staged shm, pipeline ring), a solid thick pale line for legacy cudaIpc memory and a thin dashed
line on top of it for the same engine on pool memory, so "pool sits on legacy" and "pool differs" are both
visible at a glance. Curves are small multiples (one panel per direction) with one legend beside them, never
over the data. Heatmaps colour a pair by how far it is from the typical pair (a diverging scale centred on
the median, with a colour bar), so a 10% weak pair is a red cell in a white matrix.
"""

from __future__ import annotations

import math
from pathlib import Path

from ipcbench.record.table import Frame
from ipcbench.report.figure_style import (_CHAR_IN, COLOURS, DPI, MECHANISM_LINES, Series, _figure, _nice_log_ticks,
                                          _save, _size_axis, _title_height, _titles, _wrap, coloured, legend_title,
                                          method_style, plain, series_of, text_width_in, with_unit)

def heat_colour_values(m, colour_by=None):
    """What a heatmap cell's colour shows: `colour_by` (aligned to m), else the cell as % of the median cell."""
    import numpy as np

    data = m.to_numpy(dtype=float)
    if colour_by is not None:
        return colour_by.reindex(index=m.index, columns=m.columns).to_numpy(dtype=float)
    from ipcbench.report.tables import typical_of

    ref = typical_of(data)
    return 100.0 * data / ref if ref and np.isfinite(ref) else np.full_like(data, np.nan)


def heat_norm(colour_values: list, centre: float | None, span: float):
    """(Normalize, centre): a diverging scale `span` either side of `centre` (default: the median of the
    values), so that a cell 10% off the centre lands two thirds of the way to the scale's end (span 15)."""
    import numpy as np
    from matplotlib.colors import Normalize

    vals = np.concatenate([np.asarray(c, dtype=float).ravel() for c in colour_values]) if colour_values else \
        np.array([])
    vals = vals[np.isfinite(vals)]
    mid = centre if centre is not None else (float(np.median(vals)) if vals.size else 100.0)
    return Normalize(vmin=mid - span, vmax=mid + span), mid


def heatmap(matrices: list[tuple[str, Frame]], title: str, out_dir: Path, name: str, unit: str = "GB/s",
            fmt: str = "{:.0f}", subtitle: str = "", colour_by: list | None = None, centre: float | None = None,
            span: float = 15.0, cbar_label: str = "% of the median pair") -> str | None:
    """One figure, one panel per (label, src x dst DataFrame of values in `unit`), each cell showing its value
    and its colour. The colour is `colour_by` (one matrix per panel, e.g. % of link peak) or, by default, each
    cell's value as % of the median cell of its panel; the scale is diverging, centred on `centre` (default:
    100, or the median of the colour values) and `span` either side, so a pair 10% off the typical pair stands
    out against white ones. One colour bar for the figure."""
    import numpy as np

    keep = [(i, lab, m) for i, (lab, m) in enumerate(matrices) if m is not None and not m.empty]
    if not keep:
        return None
    panels = [(lab, m, m.to_numpy(dtype=float),
               heat_colour_values(m, None if colour_by is None else colour_by[i])) for i, lab, m in keep]
    norm, mid = heat_norm([c for *_, c in panels], centre if centre is not None else
                          (100.0 if colour_by is None else None), span)
    n = max(len(m.index) for _, m, _, _ in panels)
    cell = 0.62 if n <= 4 else (0.5 if n <= 8 else 0.36)
    side = cell * n  # every panel is side x side inches: square cells
    left, gap, cbar_gap, cbar_w, right = 0.7, 0.75, 0.25, 0.16, 1.0
    content = left + len(panels) * side + (len(panels) - 1) * gap + cbar_gap + cbar_w + right
    w = max(4.2, content)
    left += (w - content) / 2
    th = _title_height(title, subtitle, w)
    bottom, top = 0.6, th + 0.35
    h = side + bottom + top
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=DPI)
    cmap = colormaps["RdBu"].with_extremes(bad="#e6e6e6", under="#67001f", over="#053061")
    im = None
    fs = 9 if n <= 4 else (8 if n <= 8 else 6)
    for k, (label, m, data, col) in enumerate(panels):
        ax = fig.add_axes(((left + k * (side + gap)) / w, bottom / h, side / w, side / h))
        im = ax.imshow(np.ma.masked_invalid(col), cmap=cmap, norm=norm, aspect="auto")
        for i in range(data.shape[0]):
            for j in range(data.shape[1]):
                v, c = data[i, j], col[i, j]
                if not np.isfinite(v):
                    ax.text(j, i, "–", ha="center", va="center", fontsize=fs, color="#888888")
                    continue
                strong = np.isfinite(c) and abs(c - mid) > 0.6 * span
                txt = fmt.format(v) if n > 8 or not np.isfinite(c) else f"{fmt.format(v)}\n{c:.0f}%"
                ax.text(j, i, txt, ha="center", va="center", fontsize=fs, linespacing=1.1,
                        color="white" if strong else "black")
        ax.set_xticks(range(len(m.columns)), [str(c) for c in m.columns], fontsize=8)
        ax.set_yticks(range(len(m.index)), [str(r) for r in m.index], fontsize=8)
        ax.set_xlabel("destination GPU", fontsize=8)
        ax.set_ylabel("source GPU", fontsize=8)
        ax.set_title(f"{label} ({unit})" if label else unit, fontsize=9)
    x = left + len(panels) * side + (len(panels) - 1) * gap + cbar_gap
    cax = fig.add_axes((x / w, bottom / h, cbar_w / w, side / h))
    assert im is not None  # there is a panel
    cb = fig.colorbar(im, cax=cax, extend="both")
    cb.set_label(_wrap(cbar_label, side + 0.4, 8), fontsize=8)
    cb.ax.tick_params(labelsize=7)
    _titles(fig, title, subtitle, w)
    return _save(fig, out_dir, name)


def _legend_entries(curves) -> list[tuple[str, dict]]:
    """(legend label, style) per method of the curves, in a stable reading order: family, legacy before the
    other sharing mechanisms."""
    series = series_of(curves)
    unknown = sorted({x.family for x in series.values() if not coloured(x.family)})
    order = list(COLOURS) + ["ring"] + unknown
    mechanisms = ["legacy", *MECHANISM_LINES]

    def key(x: Series):
        return (order.index(x.family), x.family, mechanisms.index(x.mechanism) if x.mechanism in mechanisms else 0,
                x.method)

    out: dict[str, dict] = {}
    for x in sorted(series.values(), key=key):
        out.setdefault(x.method, method_style(x, unknown))
    return list(out.items())


def curves_panels(panels: list[tuple[str, Frame]], title: str, ylabel: str, out_dir: Path, name: str,
                  subtitle: str = "", logy: bool = False, hlines: dict | None = None, ylim0: bool = False,
                  y: str = "median", yunit: str = "", sharey: bool = True, point_unit: str = "",
                  band: tuple[float, str] | None = None) -> str | None:
    """Small multiples: one panel per (panel title, curves) with one line per (suite, method) of the curves
    (columns suite, method, the fact columns, bytes, `y`); one legend for the figure, beside the panels (never
    over the data, as wide as its text), titled with the line styles it shows. sharey: one y scale for every panel
    (else each panel its own, from 0 with ylim0). `hlines`: {panel title: (value, label)} draws a dashed reference
    line (a link peak, 1× staged). `band`: (bytes, label) shades the sizes up to it (those that fit in the L2). A
    series of one point (a ping-pong measured at one size) is a large marker labelled with its value
    (`point_unit`); a series without a size (bytes 0: an event handed over, no data) is a thin level line across
    its panel, labelled so. Numbers read plainly with their unit (figure_style.with_unit), never 2e+03."""
    import pandas as pd

    panels = [(t, c[c["bytes"] >= 0]) for t, c in panels if c is not None and not c.empty]
    panels = [(t, c) for t, c in panels if not c.empty]
    if not panels:
        return None
    drawn = pd.concat([c for _, c in panels])
    entries = _legend_entries(drawn)
    sized = series_of(drawn[drawn["bytes"] > 0]) if (drawn["bytes"] > 0).any() else {}
    ltitle = legend_title(sized.values())
    if len(sized) < len(series_of(drawn)):  # a series of no size: its level line
        ltitle = "\n".join(x for x in (ltitle, "thin long dashes: no size (an event, no data)") if x)
    ncol = 1 if len(panels) == 1 else 2
    nrow = math.ceil(len(panels) / ncol)
    spare = nrow * ncol > len(panels)  # the legend goes into the empty cell, else beside the panels
    pw, ph = (6.6, 4.0) if ncol == 1 else (5.0, 3.3)
    legend_w = 0.0 if spare else max(2.0, text_width_in(ltitle, 7.5) + 0.2,
                                     max(text_width_in(lab, 8) for lab, _ in entries) + 0.75)
    w = ncol * pw + legend_w
    th = _title_height(title, subtitle, w)
    h = nrow * ph + th + 0.6
    fig = _figure(w, h, left=0.95, right=legend_w + 0.25, bottom=0.65, top=th + 0.35, wspace=0.22 if sharey else 0.3,
                  hspace=0.5 / ph * 2.4)
    axes = fig.subplots(nrow, ncol, squeeze=False, sharey=sharey)
    flat = [a for row in axes for a in row]
    vals = []
    for ax, (ptitle, c) in zip(flat, panels):
        vals += _draw_panel(ax, ptitle, c, dict(entries), y, point_unit, (hlines or {}).get(ptitle), band,
                            ylim0 and not sharey)
    for ax in flat[len(panels):]:
        ax.axis("off")
    for ax in (flat if not sharey else [row[0] for row in axes]):
        ax.set_ylabel(ylabel, fontsize=9)
        ax.yaxis.set_tick_params(labelleft=True)
    _y_scale(flat[0], vals, logy, ylim0 and sharey, yunit or point_unit)
    _legend(fig, flat, panels, entries, ltitle, spare, (1 - (legend_w - 0.05) / w, 1 - (th + 0.35) / h))
    _titles(fig, title, subtitle, w)
    return _save(fig, out_dir, name)


LEVEL_STYLE = dict(linestyle=(0, (8, 3)), linewidth=1.4, alpha=1.0, marker="none")  # a series without a size


def _draw_panel(ax, ptitle: str, c, styles: dict, y: str, point_unit: str, ref, band, ylim0: bool) -> list[float]:
    """One panel's lines (a lone point labelled with its value, a series without a size a labelled level line),
    reference line and band; its y values."""
    import numpy as np

    pvals = []
    sized = c[c["bytes"] > 0]
    for (_, method), s in c.groupby(["suite", "method"], sort=False, observed=True):
        s = s.sort_values("bytes")
        st = dict(styles[method])
        if (s["bytes"] == 0).all():  # an event handed over: no data, no size; its time holds at every size
            v = float(s[y].median())
            if np.isfinite(v):
                ax.axhline(v, color=st["color"], zorder=st.get("zorder", 2),
                           **{k: x for k, x in LEVEL_STYLE.items() if k != "marker"})
                ax.annotate(f"{method} {with_unit(v, point_unit)} (no data: an event)", (0.99, v),
                            xycoords=("axes fraction", "data"), xytext=(0, 3), textcoords="offset points",
                            ha="right", va="bottom", fontsize=7.5, color=st["color"])
                pvals.append(v)
            continue
        s = s[s["bytes"] > 0]
        if len(s) == 1:
            st.update(linestyle="none", markersize=7, alpha=1.0)
            v = float(s[y].iloc[0])
            ax.annotate(f"{method} {with_unit(v, point_unit)}", (float(s["bytes"].iloc[0]), v), xytext=(7, 0),
                        textcoords="offset points", va="center", fontsize=7.5, color=st["color"])
        ax.plot(s["bytes"], s[y], **st)
        pvals += [v for v in s[y].to_numpy(dtype=float) if np.isfinite(v)]
    if ref:
        ax.axhline(ref[0], color="#888888", linestyle="--", linewidth=1, zorder=1)
        ax.annotate(ref[1], (0.01, ref[0]), xycoords=("axes fraction", "data"), fontsize=7, color="#555555",
                    va="bottom")
        pvals.append(ref[0])
    if band and not sized.empty and sized["bytes"].min() <= band[0]:
        ax.axvspan(sized["bytes"].min(), band[0], color="#eeeeee", zorder=0)
        ax.annotate(band[1], (0.01, 0.01), xycoords="axes fraction", fontsize=7, color="#555555", va="bottom")
    if ylim0 and pvals:
        ax.set_ylim(0, max(pvals) * 1.08)
    _size_axis(ax, sized["bytes"])
    ax.set_title(ptitle, fontsize=9.5)
    ax.grid(True, alpha=0.3)
    ax.tick_params(labelsize=8)
    ax.set_xlabel("message size", fontsize=8.5)
    return pvals


def _y_scale(ax, vals: list[float], logy: bool, ylim0: bool, yunit: str) -> None:
    """A log axis with plain tick labels ('5×', '20'), or a shared axis from 0."""
    from matplotlib.ticker import NullLocator

    if logy and vals:
        lo, hi = min(v for v in vals if v > 0) / 1.25, max(vals) * 1.25
        ax.set_yscale("log")
        ax.set_ylim(lo, hi)
        ticks, labels = _nice_log_ticks(lo, hi, yunit)
        ax.set_yticks(ticks, labels)
        ax.yaxis.set_minor_locator(NullLocator())
    elif ylim0 and vals:
        ax.set_ylim(0, max(vals) * 1.08)


def _legend(fig, flat, panels, entries, title: str, spare: bool, anchor) -> None:
    """One legend: in the spare panel, else beside the panels; a method measured at one size only is a marker."""
    from matplotlib.lines import Line2D

    sizes = [(m, int((g["bytes"] > 0).sum())) for _, c in panels
             for (_, m), g in c.groupby(["suite", "method"], observed=True)]
    points = {m for m, n in sizes if n == 1} - {m for m, n in sizes if n > 1}
    levels = {m for m, n in sizes if n == 0} - {m for m, n in sizes if n > 0}

    def handle_style(lab: str, st: dict) -> dict:
        if lab in levels:
            return dict(st, **LEVEL_STYLE)
        return dict(st, linestyle="none", markersize=7, alpha=1.0) if lab in points else st

    handles = [Line2D([], [], **handle_style(lab, st)) for lab, st in entries]
    legend = dict(fontsize=8, frameon=False, title=title, title_fontsize=7.5,
                  alignment="left", ncol=2 if spare and len(entries) > 8 else 1)
    if spare:
        flat[-1].legend(handles, [lab for lab, _ in entries], loc="center", **legend)
    else:
        fig.legend(handles, [lab for lab, _ in entries], loc="upper left", bbox_to_anchor=anchor, **legend)


def hbars(table, label: str, value: str, group: str, title: str, xlabel: str, out_dir: Path, name: str,
          logx: bool = False, subtitle: str = "", section: str | None = None) -> str | None:
    """Horizontal grouped bars: one row per `label` (read without tilting the head), one colour per value of
    `group`, the value written at the end of each bar. `section` (a column) splits the rows into titled
    blocks (e.g. transfer setup costs vs error-path probes)."""
    import numpy as np
    from matplotlib.ticker import NullLocator

    if table is None or table.empty:
        return None
    labels = list(dict.fromkeys(table[label]))
    groups = list(dict.fromkeys(table[group]))
    sections = dict(zip(table[label], table[section])) if section else {}
    bar_h = 0.8 / max(1, len(groups))
    longest = max(len(str(x)) for x in labels)
    left = min(3.2, 0.25 + longest * _CHAR_IN * 8.5)
    w = 9.0
    th = _title_height(title, subtitle, w)
    h = 0.26 * len(labels) * max(1, len(groups)) ** 0.5 + th + 0.8
    fig = _figure(w, h, left=left, right=0.9, bottom=0.55, top=th + 0.1)
    ax = fig.subplots()
    y = np.arange(len(labels))
    colours = ["#0072B2", "#E69F00", "#009E73", "#CC79A7"]
    for k, g in enumerate(groups):
        sub = table[table[group] == g].set_index(label)[value]
        vals = np.array([sub.get(lab, np.nan) for lab in labels], dtype=float)
        rects = ax.barh(y + (k - (len(groups) - 1) / 2) * bar_h, vals, bar_h * 0.92, label=str(g),
                        color=colours[k % len(colours)])
        ax.bar_label(rects, labels=["" if not np.isfinite(v) else plain(v) for v in vals], fontsize=7.5,
                     padding=2)
    ax.set_yticks(y, labels, fontsize=8.5)
    ax.invert_yaxis()
    if section:
        prev = None
        for i, lab in enumerate(labels):
            if prev is not None and sections.get(lab) != prev:
                ax.axhline(i - 0.5, color="#999999", linewidth=0.8)
            prev = sections.get(lab)
    if logx:
        ax.set_xscale("log")
        v = table[value].to_numpy(dtype=float)
        v = v[np.isfinite(v) & (v > 0)]
        if v.size:
            lo, hi = v.min() / 2, v.max() * 3
            ax.set_xlim(lo, hi)
            ticks, tl = _nice_log_ticks(lo, hi, "")
            ax.set_xticks(ticks, tl)
            ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(xlabel, fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    if len(groups) > 1:
        ax.legend(fontsize=8, loc="lower right")
    _titles(fig, title, subtitle, w)
    return _save(fig, out_dir, name)


def hstrip(table, label: str, value: str, title: str, xlabel: str, out_dir: Path, name: str,
           vline: float | None = None, subtitle: str = "", xmax: float | None = None) -> str | None:
    """One row per `label` (table columns suite and method give the colour), every row of the table a dot,
    the row's median a black tick; labels read horizontally."""
    import numpy as np

    if table is None or table.empty:
        return None
    labels = list(dict.fromkeys(table[label]))
    series = series_of(table)
    first = table.drop_duplicates(label).set_index(label)
    unknown = sorted({x.family for x in series.values() if not coloured(x.family)})
    longest = max(len(str(x)) for x in labels)
    left = min(3.4, 0.25 + longest * _CHAR_IN * 8.5)
    w = 9.0
    th = _title_height(title, subtitle, w)
    h = 0.26 * len(labels) + th + 0.8
    fig = _figure(w, h, left=left, right=0.3, bottom=0.55, top=th + 0.1)
    ax = fig.subplots()
    for i, lab in enumerate(labels):
        v = table.loc[table[label] == lab, value].to_numpy(dtype=float)
        st = method_style(series[(first.loc[lab, "suite"], first.loc[lab, "method"])], unknown)
        jitter = (np.arange(len(v)) % 5 - 2) * 0.06
        ax.scatter(v, i + jitter, s=16, color=st["color"], marker=st["marker"], alpha=0.85, zorder=3,
                   linewidths=1.2)
        ax.vlines(np.median(v), i - 0.35, i + 0.35, color="black", linewidth=1.6, zorder=4)
    if vline is not None:
        ax.axvline(vline, color="#888888", linestyle="--", linewidth=1)
    top = xmax if xmax is not None else max(float(np.nanmax(table[value].to_numpy(dtype=float))), vline or 0)
    ax.set_xlim(0, top * 1.05)
    ax.set_yticks(range(len(labels)), labels, fontsize=8.5)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xlabel(xlabel, fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    _titles(fig, title, subtitle, w)
    return _save(fig, out_dir, name)


def host_boxes(data, methods: list[str], title: str, out_dir: Path, name: str) -> str | None:
    """Fleet: one panel per method label, one box per host over its pairs' bandwidth (data columns: label,
    host, bw_gbps_median). Boxes are drawn as a few collections (quartile bars, min-max whiskers, median
    ticks), not one artist per host, so 64 hosts cost little."""
    import numpy as np

    if data is None or data.empty or not methods:
        return None
    hosts = sorted(data["host"].unique())
    pos = {h: i for i, h in enumerate(hosts)}
    w = min(22.0, max(6.0, 0.28 * len(hosts) + 2))
    th = _title_height(title, "", w)
    fig = _figure(w, 2.8 * len(methods) + 0.6 + th, left=0.8, bottom=0.9, top=th + 0.35, hspace=0.75)
    axes = fig.subplots(len(methods), 1, squeeze=False)[:, 0]
    for ax, meth in zip(axes, methods):
        sub = data[data["label"] == meth]
        q = sub.groupby("host")["bw_gbps_median"].quantile([0.0, 0.25, 0.5, 0.75, 1.0]).unstack()
        x = np.array([pos[h] for h in q.index], dtype=float)
        ax.vlines(x, q[0.0], q[1.0], color="#555555", linewidth=0.8)
        ax.bar(x, q[0.75] - q[0.25], bottom=q[0.25], width=0.6, color="#8db3d9", edgecolor="#3b6ea5",
               linewidth=0.6)
        ax.hlines(q[0.5], x - 0.3, x + 0.3, color="black", linewidth=1.2)
        fleet = q[0.5].median()
        ax.axhline(fleet, color="grey", linestyle="--", linewidth=1)
        ax.set_title(_wrap(f"{meth} (GB/s per pair at the largest size; box: quartiles, line: min–max, "
                           "dashed: fleet median)", w - 1, 9), fontsize=9)
        ax.set_xlim(-0.7, len(hosts) - 0.3)
        ax.set_xticks(range(len(hosts)), hosts if len(hosts) <= 80 else [""] * len(hosts), rotation=60,
                      ha="right", fontsize=7)
        ax.set_ylabel("GB/s", fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    _titles(fig, title, "", w)
    return _save(fig, out_dir, name)


def draw(job) -> str | None:
    """Run one figure job (function name, args, kwargs); None when it draws nothing."""
    fn, args, kwargs = job
    return globals()[fn](*args, **kwargs)


def draw_all(jobs: list, workers: int | None = None) -> list:
    """Draw every job, in worker processes when there are enough to be worth it (matplotlib spends its
    time rendering text, one core per figure). Falls back to drawing here on any pool trouble."""
    import multiprocessing as mp
    import os

    workers = workers if workers is not None else min(len(os.sched_getaffinity(0))
                                                      if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 8)
    if workers > 1 and len(jobs) >= 6 and "fork" in mp.get_all_start_methods():
        try:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as ex:
                return list(ex.map(draw, jobs, chunksize=max(1, len(jobs) // (4 * workers))))
        except Exception:  # a broken pool (fork refused, worker killed): draw here instead
            pass
    return [draw(j) for j in jobs]
