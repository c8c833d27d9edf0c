"""The report as one document: headings, paragraphs, tables and figures, built from the loaded runs.

Numbers come from tables.py, figures are planned in figure_plan.py and drawn by figures.py, and render.py
writes the document three ways (terminal, markdown, HTML); see docs/architecture.md. pandas and matplotlib
are imported only inside build and the functions it calls.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Callable

from ipcbench.record.run import Run
from ipcbench.record.table import Frame
from ipcbench.report.cells import f1, method_label, method_sort, size_text, times, us
from ipcbench.report.evidence_view import evidence_blocks
from ipcbench.report.figure_plan import MAX_FIGURE_RUNS, MAX_HEATMAP_HOSTS, figure_job, figure_runs, run_figures
from ipcbench.report.headline import glance_blocks
from ipcbench.report.mps_view import side_by_side
from ipcbench.report.options import options_line, run_options
from ipcbench.report.render import Block, Figure, Heading, Para, Table, clean
from ipcbench.judging.bounds import pct
from ipcbench.judging.validity import valid_frame
from ipcbench.results import META_NAME

MAX_FLAG_ROWS = 40  # rows listed per kind of flag in the report (all are counted)
MAX_TERMINAL_FLAGS = 10
MAX_FLEET_PANELS = 6


def _host_summary(run: Run) -> str:
    """One line on where a run was measured: hosts, GPUs, software, start, rows (meta.json, else the rows)."""
    meta, f = run.meta, run.frame
    hosts = meta.hosts or sorted(f["host"].unique())
    parts = [f"**hosts** {', '.join(map(str, hosts[:8]))}" + (f" (+{len(hosts) - 8})" if len(hosts) > 8 else "")]
    if meta.gpus:
        first = next(iter(meta.gpus.values()))
        desc = ", ".join(f"{n} × {name}" for name, n in Counter(g.name for g in first).items())
        g0 = first[0] if first else None
        extra = [e for e in ((f"cc {g0.cc}" if g0.cc else ""), (f"{g0.sm_count} SMs" if g0.sm_count else ""),
                             (f"{g0.memory_bytes / 2**30:.0f} GiB" if g0.memory_bytes else ""))] if g0 else []
        extra = [e for e in extra if e]
        parts.append(f"**GPUs** {desc}" + (f" ({', '.join(extra)})" if extra else "")
                     + (" per host" if len(meta.gpus) > 1 else ""))
    else:
        n = len(set(f["src_gpu"]) | set(f["dst_gpu"]) - {-1})
        parts.append(f"**GPUs** {n} (from the rows; no GPU list in {META_NAME})")
    v = meta.versions

    def cuda(x):
        return f"{x // 1000}.{x % 1000 // 10}" if isinstance(x, int) and x > 0 else (str(x) if x else "")

    sw = [("driver", v.get("driver")), ("CUDA driver", cuda(v.get("cuda_driver"))),
          ("runtime", cuda(v.get("cuda_runtime"))), ("MPI", v.get("mpi_library")), ("cupy", v.get("cupy")),
          ("ipcbench", meta.ipcbench_version), ("commit", meta.git_commit), ("source", meta.source_digest)]
    sw_text = [f"{k} {clean(val).strip()}" for k, val in sw if val]
    if sw_text:
        parts.append("**software** " + ", ".join(sw_text))
    if meta.start:
        parts.append(f"**started** {meta.start}")
    parts.append(f"**rows** {len(f)}" + (f", **ranks** {meta.n_ranks}" if meta.n_ranks is not None else ""))
    return " · ".join(parts)


def _summary_table(summ, flags) -> Table | None:
    """One run's per-method summary (of one scope) with its flag counts; None when there is nothing."""
    if summ.empty:
        return None
    s = summ.merge(flags, on=["run", "suite", "method", "direction"], how="left") if not flags.empty else \
        summ.assign(weak=0, noisy=0, unverified=0, impossible=0)
    rows = []
    for r in method_sort(s, ("suite", "method", "direction")).itertuples(index=False):
        fl = [f"{name} {int(n)}" for name in ("weak", "noisy", "unverified", "impossible")
              for n in [getattr(r, name, 0)] if n == n and n]
        rows.append([r.suite, r.method, r.direction, str(r.pairs), size_text(r.size_max), f1(r.bw_median),
                     f1(r.bw_min), f1(r.bw_max), size_text(r.size_min), us(r.time_us), ", ".join(fl)])
    return Table(["suite", "method", "direction", "pairs", "largest", "GB/s median", "GB/s min", "GB/s max",
                  "smallest", "µs at smallest", "flags"], rows,
                 numeric=[False, False, False, True, True, True, True, True, True, True, False], terminal=True)


def _tables(runs: list[Run]) -> dict:
    """Every table the document shows, over all runs (tables.py)."""
    import pandas as pd

    from ipcbench.report import tables as T

    df = pd.concat([valid_frame(r).assign(run=r.label) for r in runs], ignore_index=True)  # invalid values NaN
    as_read = pd.concat([r.frame.assign(run=r.label) for r in runs], ignore_index=True)  # the Flags name them
    df["run"] = pd.Categorical(df["run"], categories=[r.label for r in runs])
    df = T.add_scope(df)
    t = dict(df=df, summary=T.method_summary(df), weak=T.weak_links(df), noisy=T.noisy_rows(df, runs),
             unver=T.unverified_rows(df), links=T.link_table({r.label: r.meta for r in runs}),
             impossible=T.impossible_rows(as_read, {r.label: r.meta for r in runs}), sp=T.speedup_rows(df),
             sp_nccl=T.speedup_rows(df, "nccl"), handles=T.handle_costs(df))
    t.update(flags=T.flag_counts(t["weak"], t["noisy"], t["unver"], t["impossible"]),
             sp_sum=T.speedup_summary(t["sp"]), sp_nccl_sum=T.speedup_summary(t["sp_nccl"]),
             pk=T.peak_rows(df, t["links"], T.gpu_peaks({r.label: r.meta for r in runs})), pairs=T.pair_rows(df))
    t["best"] = T.best_paths(t["pairs"], t["links"])
    t.update(pk_pair=T.peak_by_pair(t["pk"]), pk_meth=T.peak_by_method(t["pk"]),
             a2a=T.alltoall_table(df, T.gpu_peaks({r.label: r.meta for r in runs})))
    t["glance"] = dict(best=t["best"], staged=T.best_staged(t["pairs"]), spg=T.speedup_glance(t["sp"]),
                       lat=T.latency_glance(df), weak=t["weak"], noisy=t["noisy"], unver=t["unver"],
                       impossible=t["impossible"], same=t["summary"][t["summary"]["scope"] == "same GPU"],
                       nccl=T.best_staged(t["pairs"], "nccl"), spn=T.speedup_glance(t["sp_nccl"]))
    return t


def build(runs: list[Run], skipped: list[str], out_dir: Path, figures: bool) -> list[Block]:
    """The whole report as a list of blocks (figures already written into out_dir when `figures`)."""
    from ipcbench import __version__
    from ipcbench.report.tables import WEAK_FRACTION

    t = _tables(runs)
    hosts = sorted(t["df"]["host"].unique())
    doc: list[Block] = [Heading(1, "ipcbench report"),
                        Para(f"{len(runs)} run(s), {len(hosts)} host(s), {len(t['df'])} rows; made by ipcbench "
                             f"{__version__}.")]
    if skipped:
        doc.append(Heading(2, "Skipped inputs", terminal=True))
        doc += [Para(f"`{s}`", terminal=True) for s in skipped]
    doc += glance_blocks(runs, t["glance"])
    doc += _mps_blocks(runs)
    doc.append(Heading(2, "How to read the details"))
    doc.append(Para(f"Bandwidth in GB/s (1e9 B/s) at each method's largest size, median over GPU pairs (min/max: "
                    f"the weakest and strongest pair); time in µs per transfer at the smallest size. "
                    f"Flags: **weak** pairs more than {WEAK_FRACTION:.0%} below their method's typical pair (the "
                    f"median pair, or the stronger of two), **noisy** rows (their own samples spread more than rows of "
                    f"their kind move between runs: within-run noise above the between-runs floor of "
                    f"catalogue/noise.py), **unverified** rows (data mismatch), **impossible** "
                    f"numbers (above a physical ceiling from {META_NAME}: the link peak, half the memory bandwidth "
                    f"for a same-GPU copy larger than L2, a GPU's NVLink aggregate for its all-to-all flows)."))
    by_run = dict(tuple(t["df"].groupby("run", observed=True, sort=False)))
    drawn = figure_runs([r for r in runs if r.label in by_run])  # the most GPUs first, not the first by name
    figs_of = {}
    heat_budget = MAX_HEATMAP_HOSTS
    for run in sorted((r for r in runs if r.label in drawn), key=lambda r: drawn.index(r.label)) if figures else []:
        figs_of[run.label], heat_budget = run_figures(run, by_run[run.label], t["sp"], t["pk"], t["handles"],
                                                      out_dir, heat_budget, t["best"][t["best"]["run"] == run.label],
                                                      t["links"])
    for run in runs:
        if run.label not in by_run:
            continue
        doc += _run_blocks(run, t)
        if run.label in figs_of:
            doc += [Heading(3, "Figures"), *figs_of[run.label]]
        elif figures:
            doc.append(Para(f"Figures are drawn for {MAX_FIGURE_RUNS} runs only, those of the most GPUs: "
                            f"{', '.join(drawn)}."))
    if len(hosts) > 1:
        doc += _fleet_blocks(t["df"], out_dir, figures)
    doc += _flag_blocks(t["weak"], t["noisy"], t["unver"], t["impossible"])
    return _draw(doc) if figures else doc


def _draw(doc: list[Block]) -> list[Block]:
    """Draw every planned figure at once (figures.draw_all), leaving out those that drew nothing."""
    from ipcbench.report.figures import draw_all

    pending = [b for b in doc if isinstance(b, Figure) and b.job is not None]
    for b, name in zip(pending, draw_all([b.job for b in pending])):
        b.file, b.job = name, None
    return [b for b in doc if not (isinstance(b, Figure) and b.file is None)]


def _run_blocks(run: Run, t: dict) -> list[Block]:
    """One run's details: where and how it was measured, its summaries, speedups, handle costs, % of peak."""
    doc: list[Block] = [Heading(2, f"Run {run.label}", terminal=True), Para(_host_summary(run), terminal=True),
                        Para("**options** " + options_line(run_options(run.meta, run.frame)), terminal=True)]
    doc += [Para(f"Note: {note}.", terminal=True) for note in run.remarks]
    doc += [Para(f"Note: {run.unchecked}.")] if run.unchecked else []  # what an older run's record cannot check
    doc += evidence_blocks(run.meta.evidence)  # what NVML said of the node before and after (report/evidence_view)
    rs = t["summary"][t["summary"]["run"] == run.label]
    rf = t["flags"][t["flags"]["run"] == run.label] if not t["flags"].empty else t["flags"]
    for scope, title in (("pair", "Summary (cross-GPU pairs)"), ("same GPU", "Same-GPU IPC (ranks sharing a GPU)"),
                         ("aggregate", "Aggregate rows (no single pair)")):
        table = _summary_table(rs[rs["scope"] == scope], rf if scope == "pair" else rf.iloc[0:0])
        doc += [Heading(3, title, terminal=True), table] if table is not None else []
    counts = [(len(x[x["run"] == run.label]), name) for x, name in
              ((t["weak"], "weak pairs"), (t["noisy"], "noisy rows"), (t["unver"], "unverified rows"),
               (t["impossible"], "impossible numbers"))]
    doc.append(Para("**flags** " + ", ".join(f"{n} {name}" for n, name in counts) + " (details under Flags)",
                    terminal=True))
    doc += _speedup_blocks(t["sp_sum"][t["sp_sum"]["run"] == run.label], "Speedup over the best host-staged path",
                           "staged GB/s")
    doc += _speedup_blocks(t["sp_nccl_sum"][t["sp_nccl_sum"]["run"] == run.label],
                           "Speedup over NCCL (ncclSend/ncclRecv, same pair, kind of direction and size)", "NCCL GB/s")
    h = t["handles"][t["handles"]["run"] == run.label]
    if not h.empty:
        doc += [Heading(3, "Handle and import costs"),
                Para("Per buffer size (the cost of a handle can grow with its buffer); size 0: an operation "
                     "on no buffer (an event handle, an error-path probe)."),
                Table(["suite", "method", "GPUs", "size", "µs median", "rows"],
                      [[r.suite, r.method, "same GPU" if r.same_gpu else "cross-GPU", size_text(r.bytes),
                        us(r.time_us), str(r.rows)] for r in h.itertuples()], numeric=[False] * 3 + [True] * 3)]
    return doc + _alltoall_blocks(t["a2a"][t["a2a"]["run"] == run.label]) + _peak_blocks(run, t["pk_pair"],
                                                                                          t["pk_meth"])


# The all-to-all's columns: (method, heading), the IPC paths first and NCCL's, the baseline, last
ALLTOALL_COLUMNS = (("ce_alltoall", "copy engine"), ("sm_alltoall", "SM kernel"), ("nccl_alltoall", "NCCL"))


def _alltoall_blocks(a2a) -> list[Block]:
    """One run's all-to-all: each GPU's egress by every path at each size, against its NVLink aggregate and NCCL's."""
    if a2a.empty:
        return []
    cols = [(m, h) for m, h in ALLTOALL_COLUMNS if m in a2a.columns]
    ipc = [m for m, _ in cols if m != "nccl_alltoall"]
    nccl = "nccl_alltoall" in a2a.columns  # a run without NCCL's all-to-all says nothing of NCCL here

    def pct(v, peak):
        return f1(100.0 * v / peak) if v == v and peak == peak and peak else "—"

    def vs_nccl(r):
        if not ipc or r["nccl_alltoall"] != r["nccl_alltoall"]:
            return "—"
        return times(max(r[m] for m in ipc) / r["nccl_alltoall"])

    rows = [[r["host"], str(r["src_gpu"]), size_text(r["bytes"])] + [f1(r[m]) for m, _ in cols]
            + [f1(r["gpu_peak_gbps"]), pct(max(r[m] for m, _ in cols), r["gpu_peak_gbps"])]
            + ([vs_nccl(r)] if nccl else []) for _, r in a2a.sort_values(["host", "bytes", "src_gpu"]).iterrows()]
    paths = "by the copy engine (shifted steps) and by one SM kernel writing every peer" + (
        ", and by NCCL's all-to-all, the baseline" if nccl else "")
    return [Heading(3, "All-to-all: each GPU's egress (GB/s, the sum of its flows to every other GPU)"),
            Para(f"Every GPU sends one buffer of the size to every other GPU at once: {paths}. **NVLink** is the "
                 "GPU's aggregate (the NVLinks that are up × one link's peak); **% NVLink** the best path's share of "
                 "it" + ("; **× NCCL** the best IPC path over NCCL's." if nccl else ".")),
            Table(["host", "GPU", "size"] + [h for _, h in cols] + ["NVLink", "% NVLink"]
                  + (["× NCCL"] if nccl else []), rows, numeric=[False, True, True] + [True] * (len(cols) + 2 + nccl))]


def _peak_blocks(run: Run, pk_pair, pk_meth) -> list[Block]:
    from ipcbench.report.tables import ALLTOALL_BASIS

    doc: list[Block] = [Heading(3, "Share of the theoretical link peak")]
    pp = pk_pair[pk_pair["run"] == run.label] if not pk_pair.empty else pk_pair
    if pp.empty:
        return doc + [Para(f"No NVML link table in {META_NAME} (or no cross-GPU bandwidth rows): % of peak skipped.")]
    doc.append(Table(["host", "pair", "link", "peak GB/s", "best one-way method", "GB/s", "% of peak"],
                     [[r.host, f"{r.src_gpu}→{r.dst_gpu}", r.link_kind, f1(r.peak_gbps),
                       method_label(r.suite, r.method, r.direction), f1(r.bw_gbps_median), f1(r.pct)]
                      for r in pp.head(64).itertuples()], numeric=[False] * 3 + [True] + [False] + [True] * 2))
    pm = method_sort(pk_meth[pk_meth["run"] == run.label])
    if (pm["basis"] == ALLTOALL_BASIS).any():
        doc.append(Para("All-to-all: every flow runs at once and shares its GPU's links, so a flow against one "
                        "link's peak says nothing; its row is the sum of each GPU's flows against that GPU's NVLink "
                        "aggregate (the NVLinks that are up × one link's peak), `pairs` counting GPUs."))
    doc.append(Table(["suite", "method", "direction", "% of peak median", "min", "max", "pairs"],
                     [[r.suite, r.method, r.direction, f1(r.pct_median), f1(r.pct_min), f1(r.pct_max), str(r.pairs)]
                      for r in pm.itertuples()], numeric=[False] * 3 + [True] * 4))
    return doc


def _speedup_blocks(summary, title: str, base_column: str) -> list[Block]:
    """One run's speedup table over a baseline (tables.speedup_summary: at each method's largest size)."""
    s = method_sort(summary)
    if s.empty:
        return []
    return [Heading(3, title),
            Table(["suite", "method", "direction", "size", "GB/s", base_column, "speedup median", "min", "max",
                   "pairs"],
                  [[r.suite, r.method, r.direction, size_text(r.bytes), f1(r.bw_median), f1(r.baseline),
                    times(r.speedup_median), times(r.speedup_min), times(r.speedup_max), str(r.pairs)]
                   for r in s.itertuples()],
                  numeric=[False] * 3 + [True] * 7)]


def _fleet_blocks(df, out_dir: Path, figures: bool) -> list[Block]:
    """Hosts compared (a report over more than one host): host × method table, outlier hosts, box plot."""
    from ipcbench.report import tables as T

    hm = method_sort(T.host_method_table(df))
    blocks: list[Block] = [Heading(2, "Fleet: hosts compared", terminal=True)]
    if hm.empty:
        return blocks + [Para("No cross-GPU bandwidth rows.", terminal=True)]
    hm = hm.assign(label=[method_label(s, m, d) for s, m, d in zip(hm["suite"], hm["method"], hm["direction"])])
    labels = list(dict.fromkeys(hm["label"]))
    wide = hm.pivot(index="host", columns="label", values="bw").reindex(columns=labels)
    rows = [[h] + [f1(v) for v in wide.loc[h]] for h in wide.index] + [["fleet median"] +
                                                                        [f1(v) for v in wide.median()]]
    short = labels[:MAX_FLEET_PANELS]
    blocks += [Para("Median GB/s over each host's GPU pairs at the method's largest size."),
               Table(["host"] + labels, rows, numeric=[False] + [True] * len(labels)),
               Table(["host"] + short, [r[:len(short) + 1] for r in rows], terminal=True, files=False,
                     numeric=[False] + [True] * len(short),
                     caption="Host × method, GB/s (the first methods; the report has all)"),
               Heading(3, f"Outlier hosts (more than {T.OUTLIER_FRACTION:.0%} below the fleet median)", terminal=True)]
    out = T.outlier_hosts(hm)
    blocks.append(Para("None.", terminal=True) if out.empty else
                  Table(["host", "method", "host GB/s", "fleet GB/s", "below"],
                        [[r.host, r.label, f1(r.bw), f1(r.fleet), f"{r.below_pct:.1f}%"] for r in out.itertuples()],
                        terminal=True, numeric=[False, False, True, True, True]))
    if figures:
        box = T.fleet_box_data(df)
        box = box.assign(label=[method_label(s, m, d)
                                for s, m, d in zip(box["suite"], box["method"], box["direction"])])
        blocks.append(figure_job("Per-host distribution of the largest-size bandwidth", "host_boxes", box, short,
                                 "Per-host distribution of pair bandwidth", out_dir, "fleet-hosts.png"))
    return blocks


def _mps_blocks(runs: list[Run]) -> list[Block]:
    """Same GPU, without and with MPS, per host that has a run of each (report/mps_view.py)."""
    views = side_by_side(runs)
    if not views:
        return []
    blocks: list[Block] = [
        Heading(2, "Same GPU: without and with MPS", terminal=True),
        Para("Processes sharing one GPU time-slice their kernels without MPS and run them concurrently with it. "
             "Each row: a same-GPU measurement at its largest size (bandwidth) or smallest (latency), median over "
             "the host's same-GPU pairs; **MPS gain** is how many times faster it is with MPS.", terminal=True)]
    for host, without, with_, frame in views:
        blocks.append(Para(f"**{host}**: without MPS `{without}`, with MPS `{with_}`", terminal=True))
        cells = [[method_label(r.suite, r.method, r.direction), size_text(r.bytes), r.unit,
                  (f1 if r.unit == "GB/s" else us)(r.value_nomps), (f1 if r.unit == "GB/s" else us)(r.value_mps),
                  times(r.mps_gain)] for r in frame.itertuples()]
        blocks.append(Table(["same-GPU measurement", "size", "unit", "without MPS", "with MPS", "MPS gain"], cells,
                            numeric=[False, True, False, True, True, True], terminal=True))
    return blocks


def _flag_blocks(weak, noisy, unver, impossible) -> list[Block]:
    """Weak links, noisy and unverified rows, impossible numbers: all counted, the first MAX_FLAG_ROWS
    listed."""

    def pair(r):
        return f"{r.src_gpu}→{r.dst_gpu}" if r.src_gpu >= 0 else f"rank {r.src_rank}→{r.dst_rank}"

    def head(r):
        return [r.run, r.host, method_label(r.suite, r.method, r.direction), pair(r), size_text(r.bytes)]

    specs: list[tuple[str, Frame, list[str], Callable]] = [
        ("Weak links (pairs more than 10% below their method's typical pair: the median, or the stronger of two)",
         weak, ["GB/s", "typical pair", "below"],
         lambda r: [f1(r.bw_gbps_median), f1(r.method_typical), f"{r.below_pct:.1f}%"]),
        ("Noisy rows (own samples spread more than their kind moves between runs: within-run noise above the "
         "between-runs floor)", noisy, ["within-run noise", "floor", "noise", "µs median"],
         lambda r: [pct(r.within), pct(r.floor), pct(r.noise), us(r.time_us_median)]),
        ("Unverified rows (a destination check failed, or did not run: see the note)", unver, ["note"],
         lambda r: [r.note]),
        ("Impossible numbers (above a physical ceiling: a bug or a mis-timed measurement, never a number to "
         "quote)", impossible, ["GB/s", "ceiling GB/s", "reason"],
         lambda r: [f1(r.bw_gbps_median), f1(r.ceiling_gbps), r.reason]),
    ]
    blocks: list[Block] = [Heading(2, "Flags", terminal=True)]
    for title, rows, extra, fmt in specs:
        n = len(rows)
        blocks.append(Heading(3, f"{title}: {n}", terminal=True))
        if not n:
            continue
        cols = ["run", "host", "method", "pair", "size"] + extra
        cells = [head(r) + fmt(r) for r in rows.head(MAX_FLAG_ROWS).itertuples()]
        numeric = [False] * 4 + [c not in ("note", "reason") for c in cols[4:]]
        blocks.append(Table(cols, cells, numeric=numeric))
        if n > MAX_FLAG_ROWS:
            blocks.append(Para(f"… and {n - MAX_FLAG_ROWS} more."))
        blocks.append(Table(cols, cells[:MAX_TERMINAL_FLAGS], numeric=numeric, terminal=True, files=False))
        if n > MAX_TERMINAL_FLAGS:
            listed = "" if n <= MAX_FLAG_ROWS else f" (the report lists the first {MAX_FLAG_ROWS} of the {n})"
            blocks.append(Para(f"… and {n - MAX_TERMINAL_FLAGS} more in the report{listed}.", terminal=True,
                               files=False))
    return blocks
