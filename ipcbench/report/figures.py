"""The report's figures: matplotlib (Agg, no pyplot state), one PNG file per figure.

Each function takes a table from tables.py, writes one PNG into `out_dir` and returns its file name
(or None when there is nothing to draw). PNGs carry no metadata (no software URL inside).
"""

from __future__ import annotations

import math
from pathlib import Path

from ipcbench.sizes import fmt_size

DPI = 90
_PNG_META = {"Software": None}


def _figure(w: float, h: float, left: float = 0.8, right: float = 0.2, bottom: float = 0.6, top: float = 0.45,
            wspace: float = 0.3, hspace: float = 0.4):
    """A figure with fixed margins in inches (a layout engine would draw every figure twice)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=DPI)
    fig.subplots_adjust(left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - top / h,
                        wspace=wspace, hspace=hspace)
    return fig


def _save(fig, out_dir: Path, name: str) -> str:
    fig.savefig(out_dir / name, format="png", dpi=DPI, metadata=_PNG_META)
    return name


def _size_axis(ax, sizes) -> None:
    sizes = sorted({int(s) for s in sizes if s > 0})
    ax.set_xscale("log", base=2)
    if not sizes:
        return
    step = max(1, math.ceil(len(sizes) / 10))
    ticks = sizes[::step]
    ax.set_xticks(ticks)
    ax.set_xticklabels([fmt_size(s) for s in ticks], fontsize=8)
    ax.minorticks_off()


def heatmap(matrices: list[tuple[str, object]], title: str, out_dir: Path, name: str, unit: str = "GB/s",
            fmt: str = "{:.0f}") -> str | None:
    """One figure, one panel per (label, src x dst DataFrame), values written in the cells."""
    import numpy as np

    matrices = [(lab, m) for lab, m in matrices if m is not None and not m.empty]
    if not matrices:
        return None
    n = max(len(m.index) for _, m in matrices)
    cell = 0.42 if n > 8 else 0.55
    w = max(3.2, cell * n + 1.6)
    fig = _figure(w * len(matrices), max(2.8, cell * n + 1.3), left=0.6, right=0.1, bottom=0.55, top=0.6,
                  wspace=0.45)
    axes = fig.subplots(1, len(matrices), squeeze=False)[0]
    for ax, (label, m) in zip(axes, matrices):
        data = m.to_numpy(dtype=float)
        masked = np.ma.masked_invalid(data)
        vmax = np.nanmax(data) if np.isfinite(data).any() else 1.0
        im = ax.imshow(masked, cmap="viridis", vmin=0, vmax=vmax)
        im.cmap.set_bad("#dddddd")
        fs = 8 if n <= 8 else 6
        for i in range(data.shape[0]):
            for j in range(data.shape[1]):
                v = data[i, j]
                txt = "–" if not np.isfinite(v) else fmt.format(v)
                dark = np.isfinite(v) and v > 0.6 * vmax
                ax.text(j, i, txt, ha="center", va="center", fontsize=fs, color="black" if dark else "white"
                        if np.isfinite(v) else "#666666")
        ax.set_xticks(range(len(m.columns)), [str(c) for c in m.columns], fontsize=8)
        ax.set_yticks(range(len(m.index)), [str(r) for r in m.index], fontsize=8)
        ax.set_xlabel("destination GPU", fontsize=8)
        ax.set_ylabel("source GPU", fontsize=8)
        ax.set_title(f"{label} ({unit})", fontsize=9)
    fig.suptitle(title, fontsize=10)
    return _save(fig, out_dir, name)


def lines_vs_size(curves, y: str, title: str, ylabel: str, out_dir: Path, name: str, logy: bool = False,
                  band: bool = True) -> str | None:
    """One line per label (curves: DataFrame with columns label, bytes, median[, min, max])."""
    if curves is None or curves.empty:
        return None
    fig = _figure(7.5, 4.2, left=0.7, bottom=0.55, top=0.35)
    ax = fig.subplots()
    for label, c in curves.groupby("label", sort=True):
        c = c.sort_values("bytes")
        ax.plot(c["bytes"], c[y], marker=".", linewidth=1.3, label=label)
        if band and "min" in c and "max" in c:
            ax.fill_between(c["bytes"], c["min"], c["max"], alpha=0.15)
    _size_axis(ax, curves["bytes"])
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("message size")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2 if curves["label"].nunique() > 8 else 1, loc="upper left")
    return _save(fig, out_dir, name)


def bars(table, label: str, value: str, group: str, title: str, ylabel: str, out_dir: Path, name: str,
         logy: bool = False) -> str | None:
    """Grouped bars: one bar per `label`, one colour per value of `group`."""
    import numpy as np

    if table is None or table.empty:
        return None
    labels = list(dict.fromkeys(table[label]))
    groups = list(dict.fromkeys(table[group]))
    width = 0.8 / max(1, len(groups))
    fig = _figure(max(5.0, 0.7 * len(labels) + 2), 4.4, left=0.9, bottom=1.3, top=0.35)
    ax = fig.subplots()
    x = np.arange(len(labels))
    for k, g in enumerate(groups):
        sub = table[table[group] == g].set_index(label)[value]
        vals = [sub.get(lab, np.nan) for lab in labels]
        rects = ax.bar(x + (k - (len(groups) - 1) / 2) * width, vals, width, label=str(g))
        ax.bar_label(rects, labels=["" if not np.isfinite(v) else f"{v:.3g}" for v in vals], fontsize=7)
    ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
    if logy:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, out_dir, name)


def strip(table, label: str, value: str, title: str, ylabel: str, out_dir: Path, name: str,
          hline: float | None = None) -> str | None:
    """One column of dots per `label` (every row a dot), the column's median as a bar."""
    import numpy as np

    if table is None or table.empty:
        return None
    labels = list(dict.fromkeys(table[label]))
    fig = _figure(max(5.0, 0.55 * len(labels) + 2), 4.6, left=0.7, bottom=1.35, top=0.35)
    ax = fig.subplots()
    for i, lab in enumerate(labels):
        v = table.loc[table[label] == lab, value].to_numpy(dtype=float)
        jitter = (np.arange(len(v)) % 7 - 3) * 0.04
        ax.scatter(i + jitter, v, s=10, alpha=0.7)
        ax.hlines(np.median(v), i - 0.3, i + 0.3, color="black", linewidth=1.5)
    if hline is not None:
        ax.axhline(hline, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
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
    fig = _figure(min(22.0, max(6.0, 0.28 * len(hosts) + 2)), 2.8 * len(methods) + 1.1, left=0.7, bottom=0.9,
                  top=0.8, hspace=0.75)
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
        ax.set_title(f"{meth} (GB/s per pair at the largest size; box: quartiles, line: min–max, "
                     "dashed: fleet median)", fontsize=9)
        ax.set_xlim(-0.7, len(hosts) - 0.3)
        ax.set_xticks(range(len(hosts)), hosts if len(hosts) <= 80 else [""] * len(hosts), rotation=60,
                      ha="right", fontsize=7)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=10)
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
