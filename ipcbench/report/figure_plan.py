"""Which figures the report draws for a run, and their titles and file names: one figure per question.

1. Is any GPU pair weak? The pair heatmap: each pair's best one-way path, coloured by its % of link peak
   on a scale centred on the run's median pair (or by % of the median pair without a link table).
2. How does bandwidth grow with message size? One figure, a panel per direction, the link peak drawn.
3. What does IPC buy over the host-staged paths? Speedup vs size, a panel per direction.
4. What does a small message cost? Latency suite one way, and the time per transfer of the bandwidth
   methods, a panel each.
5. How close to the link peak is each method? One row per method, a dot per pair.
6. What do handles cost? Bars per operation.
7. Per method, which pair is off? A heatmap per method (the detail behind 1).

The figures are planned here as Figure blocks holding a drawing job (a figures.py function name and its
arguments); document.build draws them all at once afterwards (in worker processes on a big report) and fills
in the file names. Limits keep a report of many runs or hosts readable and quick to make.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ipcbench.record.run import Run
from ipcbench.report.cells import DIR_ORDER, method_label, method_sort, size_text, slug
from ipcbench.report.render import Block, Figure, Para

MAX_FIGURE_RUNS = 2  # runs that get the detailed figures (curves, speedup, handles, peak)
MAX_HEATMAP_HOSTS = 2  # (run, host) units that get heatmaps, over the whole report
HEAT_SPAN = 15.0  # the pair heatmap's colour scale: the median pair ± 15 points of % of peak


def gpu_count(run: Run) -> int:
    """The GPUs a run measured: meta.json's list over its hosts, else those its rows name."""
    listed = sum(len(gs) for gs in run.meta.gpus.values())
    if listed:
        return listed
    f = run.frame
    return len({(h, g) for col in ("src_gpu", "dst_gpu") for h, g in zip(f["host"], f[col]) if g >= 0})


def figure_runs(runs: list[Run]) -> list[str]:
    """The labels of the runs that get the detailed figures (MAX_FIGURE_RUNS), in order: the most GPUs first (the
    largest node's figures say most), then a run check judges before a selftest's, a full run before a --quick one
    (more sizes to draw), then by label."""
    from ipcbench.judging.judge import not_a_check_input

    ranked = sorted(runs, key=lambda r: (-gpu_count(r), not_a_check_input(r) is not None, bool(r.meta.quick),
                                         r.label))
    return [r.label for r in ranked[:MAX_FIGURE_RUNS]]


def figure_job(title: str, fn: str, *args, **kwargs):
    """A Figure block to be drawn later by figures.<fn>(*args, **kwargs)."""
    return Figure(title, None, job=(fn, args, kwargs))


def _single_peak(links, run_label: str) -> float | None:
    """The run's one-way link peak when every link of the run has the same one (else None: no line)."""
    if links is None or links.empty:
        return None
    peaks = links.loc[links["run"].astype(str) == str(run_label), "peak_gbps"].unique()
    return float(peaks[0]) if len(peaks) == 1 else None


def _by_direction(curves, directions) -> list:
    return [(d, curves[curves["direction"] == d]) for d in directions if (curves["direction"] == d).any()]


def run_figures(run: Run, rdf, sp, pk, handles, out_dir: Path, heat_budget: int, best=None,
                links=None) -> tuple[list[Block], int]:
    """Figure blocks (not drawn yet) of one run, one per question; heatmaps only while heat_budget lasts."""
    from ipcbench.report import tables as T

    figs: list[Block] = []
    bw = T.cross_gpu(T.bw_rows(rdf))
    hosts = sorted(bw["host"].unique())
    if best is not None and not best.empty and len(hosts) > heat_budget:  # the weakest pairs' hosts first
        worst = best.groupby("host")["below_pct"].max()
        hosts = sorted(hosts, key=lambda h: (-worst.get(h, float("-inf")), h))
    heat_hosts = hosts[:max(heat_budget, 0)]
    if len(hosts) > len(heat_hosts):
        figs.append(Para(f"Heatmaps are drawn for {MAX_HEATMAP_HOSTS} hosts only (those with the weakest "
                         f"pairs): {', '.join(map(str, heat_hosts))}."))
    name = Names(slug(run.label), rdf["host"].nunique() > 1)
    if best is not None and not best.empty:
        figs += [_pair_heatmap(run, best, host, out_dir, name) for host in heat_hosts
                 if not best[best["host"] == host].empty]
    figs += _size_figures(run, rdf, sp, out_dir, name, _single_peak(links, run.label))
    figs += _peak_figure(run, pk, out_dir, name) + _handles_figure(run, handles, out_dir, name)
    for host in heat_hosts:
        figs += _method_heatmaps(bw[bw["host"] == host], host, out_dir, name)
    return figs, heat_budget - len(heat_hosts)


@dataclass(frozen=True)
class Names:
    """The figures' file names: <run>-<what>.png, and <run>-<host>-<what>.png for a host's figures of a run of
    several hosts (a run id usually ends in its host already: 20261123-090753-vm)."""

    run: str
    several_hosts: bool

    def __call__(self, what: str, host: str | None = None) -> str:
        return f"{self.run}-{slug(host)}-{what}.png" if host is not None and self.several_hosts else \
            f"{self.run}-{what}.png"


def _pair_heatmap(run: Run, best, host: str, out_dir: Path, name: Names) -> Figure:
    """1. Is any GPU pair weak? Each pair's best one-way path, coloured by % of link peak around the typical pair."""
    from ipcbench.report.tables import typical_of

    b = best[best["host"] == host]
    m = b.pivot_table(index="src_gpu", columns="dst_gpu", values="bw", aggfunc="first")
    gpus = sorted(set(m.index) | set(m.columns))
    m = m.reindex(index=gpus, columns=gpus)
    size = size_text(b["bytes"].max())
    if b["pct"].notna().any():
        pct = b.pivot_table(index="src_gpu", columns="dst_gpu", values="pct", aggfunc="first")
        kw = dict(colour_by=[pct.reindex(index=gpus, columns=gpus)], centre=typical_of(best["pct"]), span=HEAT_SPAN,
                  cbar_label="% of link peak (centre: the typical pair)")
        cells = "GB/s and % of link peak"
    else:
        kw = dict(cbar_label="% of the typical pair")
        cells = "GB/s and % of the typical pair"
    return figure_job(f"Is any GPU pair weak? Best one-way path per pair at {size} ({host}); red: below the typical "
                      f"pair", "heatmap", [("", m)], "Best one-way path per GPU pair", out_dir, name("pairs", host),
                      subtitle=f"{run.label}, {host}, {size}: fastest push/pull method of each pair; cells: {cells}; "
                               f"row: source GPU, column: destination GPU", **kw)


def _size_figures(run: Run, rdf, sp, out_dir: Path, name: Names, peak: float | None) -> list[Block]:
    """2. bandwidth vs size, 3. speedup over the host-staged paths, 4. small messages: over cross-GPU pairs,
    or, for a run whose ranks all share GPUs (a one-GPU machine), over its same-GPU pairs (no link, no peak)."""
    from ipcbench.report import tables as T

    figs: list[Block] = []
    scope, over, band = "pair", "cross-GPU pairs", None
    curves = T.size_curves(rdf, scope)
    if curves.empty:
        scope, over, peak = "same GPU", "same-GPU pairs (processes sharing a GPU)", None
        curves = T.size_curves(rdf, scope)
        l2 = [g.l2_bytes for gs in run.meta.gpus.values() for g in gs if g.l2_bytes]
        band = (min(l2), f"fits in the {size_text(min(l2))} L2") if l2 else None
    panels = _by_direction(curves, ("push", "pull", "bidir"))
    if panels:
        hl = {d: (peak * (2 if d == "bidir" else 1), f"link peak {peak * (2 if d == 'bidir' else 1):.0f} GB/s"
                  + (" (2 × one way)" if d == "bidir" else "")) for d, _ in panels} if peak else {}
        cache = (f"; shaded: sizes that fit in the GPU's {size_text(band[0])} L2, served from the cache, not "
                 "device memory (their bump is not the peak)") if band else ""
        figs.append(figure_job(f"Bandwidth vs message size (median over {over}"
                               + ("; dashed grey: link peak)" if hl else ")"),
                               "curves_panels", panels, "Bandwidth vs message size", "GB/s", out_dir,
                               name("bw-vs-size"), hlines=hl, ylim0=True, sharey=False, band=band,
                               subtitle=f"{run.label}: median over {over}; one panel per direction "
                                        f"(bidir counts both directions){cache}"))
    rsp = sp[sp["run"] == run.label]
    if not rsp.empty:
        panels = _by_direction(T.speedup_curves(rsp).rename(columns={"speedup": "median"}), ("push", "pull", "bidir"))
        figs.append(figure_job("Speedup of each IPC method over the best host-staged path", "curves_panels", panels,
                               "What IPC buys: speedup over the best host-staged path", "× best staged path",
                               out_dir, name("speedup"), logy=True, yunit="×",
                               hlines={d: (1.0, "1× = staged") for d, _ in panels},
                               subtitle=f"{run.label}: IPC bandwidth / best *_staged bandwidth of the same pair and "
                                        "size; median over pairs"))
    lat = T.latency_curves(rdf, scope)
    one = lat[(lat["direction"] == "oneway") & (lat["suite"] == "latency")]
    panels = [("one-way latency (latency suite)", one)] if not one.empty else []
    for d in ("push", "pull", "bidir"):
        c = lat[lat["direction"] == d]
        c = c[c.groupby(["suite", "method"], observed=True)["bytes"].transform("size") > 1]
        panels += [(f"{d}: time per transfer in a batch", c)] if not c.empty else []
    if panels:
        figs.append(figure_job("Small messages (≤ 64K): latency and time per transfer", "curves_panels", panels,
                               "Small messages: what one transfer costs", "time per transfer (log scale)", out_dir,
                               name("latency"), logy=True, point_unit=" µs",
                               subtitle=f"{run.label}: median over {over}, messages ≤ 64K; latency suite: one message "
                                        "at a time, one way; others: back-to-back transfers of a batch"))
    return figs


def _peak_figure(run: Run, pk, out_dir: Path, name: Names) -> list[Block]:
    """5. How close to the link peak does each method get? A row per method, a dot per pair."""
    rpk = pk[pk["run"] == run.label]
    if rpk.empty:
        return []
    from ipcbench.report.tables import ALLTOALL_BASIS

    rpk = method_sort(rpk)
    a2a = rpk["basis"] == ALLTOALL_BASIS
    rpk = rpk.assign(label=[method_label(s, m, d) + (" (sum per GPU)" if g else "")
                            for s, m, d, g in zip(rpk["suite"], rpk["method"], rpk["direction"], a2a)])
    note = ("; all-to-all: a dot is a GPU, the sum of its concurrent flows as a % of its NVLink aggregate (a flow "
            "shares its GPU's links: one flow against one link's peak would say nothing)") if a2a.any() else ""
    return [figure_job("% of theoretical link peak per method and pair", "hstrip", rpk, "label", "pct",
                       "How close to the link peak does each method get?",
                       "% of theoretical link peak (bidir: of twice the one-way peak)", out_dir, name("peak"),
                       vline=100.0, xmax=105.0, subtitle=f"{run.label}: at each method's largest size; dot: a pair, "
                                                         f"black tick: the median pair{note}")]


def _handles_figure(run: Run, handles, out_dir: Path, name: Names) -> list[Block]:
    """6. What does sharing memory cost? Bars per operation, the error-path probes apart."""
    h = handles[handles["run"] == run.label]
    if h.empty:
        return []
    sizes = sorted(int(b) for b in h["bytes"].unique() if b > 0)
    at = ""
    if sizes:  # one stated size: the largest buffer, and the operations on no buffer
        h = h[h["bytes"].isin([0, sizes[-1]])]
        others = ", ".join(size_text(b) for b in sizes[:-1])
        at = (f"; buffer operations at {size_text(sizes[-1])}" + (f" (also measured at {others}: the table)"
                                                                    if others else ""))
    h = h.assign(label=[(m if s == "handles" else method_label(s, m)) + (" (no buffer)" if b == 0 and k != "error"
                                                                         else "")
                        for s, m, b, k in zip(h["suite"], h["method"], h["bytes"], h["kind"])],
                 gpus=h["same_gpu"].map({True: "same GPU", False: "cross-GPU"}),
                 kind=h["kind"].map(lambda k: "error-path probe" if k == "error" else "setup"))
    h = h.sort_values(["kind", "label"], key=lambda s: s.map({"setup": 0, "error-path probe": 1})
                      if s.name == "kind" else s, kind="stable")
    return [figure_job("Handle and import costs", "hbars", h, "label", "time_us", "gpus",
                       "What does sharing memory cost? Handle and import operations", "µs (median, log)",
                       out_dir, name("handles"), logx=True, section="kind",
                       subtitle=f"{run.label}: median over rows{at}; below the line: error-path probes "
                                "(how long a refused call takes)")]


def _method_heatmaps(hdf, host: str, out_dir: Path, name: Names) -> list[Block]:
    """7. Per method, which pair is off? One figure per (suite, method), a panel per direction."""
    from ipcbench.report import tables as T

    figs: list[Block] = []
    for (suite, method), mdf in method_sort(hdf).groupby(["suite", "method"], sort=False):
        panels = [(d, T.heatmap_matrix(mdf[mdf["direction"] == d]))
                  for d in sorted(mdf["direction"].unique(), key=lambda d: DIR_ORDER.get(d, 9))]
        size = size_text(mdf["bytes"].max())
        label = method_label(suite, method)
        figs.append(figure_job(f"Heatmap {label} at {size} ({host}); colour: % of the method's typical pair",
                               "heatmap", panels, label, out_dir, name(f"heatmap-{slug(suite)}-{slug(method)}", host),
                               subtitle=f"{size}, {host}; row: source GPU, column: destination GPU; "
                                        "colour: % of the typical pair (the median, or the stronger of two)"))
    return figs
