"""`ipcbench report PATH...`: every run under the paths -> terminal summary, report.html, report.md, PNGs.

Loading (here) -> numbers (report_tables) -> figures (report_figures) -> one document of blocks, rendered
three ways (report_render). No MPI or CUDA anywhere; pandas and matplotlib are imported only when a
report is made, so `import ipcbench.report` stays instant.

A malformed results.csv or meta.json skips that run with a warning naming file:line; the other runs are
still reported. Exit status: 0 when a report was written, 2 when no usable run was found or a path does
not exist.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .results import CSV_NAME, META_NAME, ResultsError, find_runs, load_frame, read_meta_optional
from .sizes import fmt_size

MAX_FIGURE_RUNS = 2  # runs that get the detailed figures (curves, speedup, handles, peak)
MAX_HEATMAP_HOSTS = 2  # (run, host) units that get heatmaps, over the whole report
MAX_FLAG_ROWS = 40  # rows listed per kind of flag in the report (all are counted)
MAX_TERMINAL_FLAGS = 10
MAX_FLEET_PANELS = 6
_DIR_ORDER = {"push": 0, "pull": 1, "bidir": 2, "oneway": 3, "op": 4}
_SUITE_ORDER = {"copy": 0, "kernel": 1, "pool": 2, "pipeline": 3, "staged": 4, "latency": 5, "handles": 6}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="run directories, results/ trees or results.csv files (every run found is reported)")
    parser.add_argument("--out", metavar="DIR",
                        help="where to write report.html, report.md and the figures "
                             "(default: report/ inside the first PATH)")
    parser.add_argument("--cv-threshold", type=float, default=0.05, metavar="FLOAT",
                        help="flag rows whose coefficient of variation exceeds this (default 0.05)")
    parser.add_argument("--no-figures", action="store_true", help="tables only, no PNGs (faster)")
    parser.add_argument("--quiet", action="store_true", help="no terminal summary, only warnings and the paths")


@dataclass
class Run:
    label: str
    dir: Path
    csv: Path
    meta: dict | None
    frame: object  # pandas.DataFrame
    notes: list[str] = field(default_factory=list)


def _warn(msg: str) -> None:
    print(f"ipcbench report: warning: {msg}", file=sys.stderr)


def _error(msg: str) -> None:
    print(f"ipcbench report: error: {msg}", file=sys.stderr)


def _csv_files(paths) -> list[Path]:
    files = []
    for p in map(Path, paths):
        if p.is_file():
            files.append(p.resolve())
        else:
            files += [d / CSV_NAME for d in find_runs([p])]
    return list(dict.fromkeys(files))


def load_runs(paths) -> tuple[list[Run], list[str]]:
    """Every run under the paths; malformed ones are left out and their errors returned."""
    runs, skipped, labels = [], [], Counter()
    for csv_path in _csv_files(paths):
        run_dir = csv_path.parent
        try:
            frame = load_frame(csv_path)
            meta = read_meta_optional(run_dir) if csv_path.name == CSV_NAME else None
        except ResultsError as e:
            skipped.append(str(e))
            continue
        if frame.empty:
            skipped.append(f"{csv_path}: no rows (only a header)")
            continue
        label = run_dir.name if csv_path.name == CSV_NAME else csv_path.stem
        labels[label] += 1
        if labels[label] > 1:
            label = f"{label}-{labels[label]}"
        notes = [] if meta is not None or csv_path.name != CSV_NAME else [f"no {META_NAME} beside {csv_path}"]
        if csv_path.name == CSV_NAME:
            frame, recovered = _recover_node_parts(run_dir, frame, skipped)
            notes += recovered
            if meta is not None and meta.get("status") not in (None, "complete"):
                notes.append(f"the run did not complete (meta.json status: {meta.get('status')}): "
                             f"these are the rows measured before it stopped")
        runs.append(Run(label, run_dir, csv_path, meta, frame, notes))
    return runs, skipped


def _recover_node_parts(run_dir: Path, frame, skipped: list[str]):
    """Fleet runs: add rows from <run>/nodes/<host>.csv for hosts that never reached results.csv.

    Other nodes' leaders write their rows there as they measure and hand them to rank 0 only at the end,
    so after a job that died those files are where the other nodes' measurements are.
    """
    import pandas as pd

    notes = []
    parts = sorted((run_dir / "nodes").glob("*.csv")) if (run_dir / "nodes").is_dir() else []
    have = set(frame["host"].astype(str)) if len(frame) else set()
    extra = []
    for part in parts:
        try:
            f = load_frame(part)
        except ResultsError as e:
            skipped.append(str(e))
            continue
        hosts = set(f["host"].astype(str)) - have
        if hosts and len(f):
            extra.append(f[f["host"].astype(str).isin(hosts)])
            notes.append(f"rows of {', '.join(sorted(hosts))} recovered from {part.relative_to(run_dir)}: "
                         f"the job ended before rank 0 gathered them")
    if extra:
        frame = pd.concat([frame, *extra], ignore_index=True)
    return frame, notes


# ---------------------------------------------------------------------------------------------- format

def _f1(v) -> str:
    return "" if v is None or v != v else f"{v:.1f}"


def _us(v) -> str:
    if v is None or v != v:
        return ""
    return f"{v:.0f}" if v >= 1000 else f"{v:.3g}"


def _x(v) -> str:
    return "" if v is None or v != v else f"{v:.2f}x"


def _size(v) -> str:
    return "" if v is None or v != v else fmt_size(int(v))


def _label(suite, method, direction=None) -> str:
    return f"{suite}/{method}" + (f" {direction}" if direction else "")


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(s))


def _method_sort(df, cols=("suite", "method", "direction")):
    key = {"suite": lambda s: s.map(lambda v: (_SUITE_ORDER.get(v, 99), v)),
           "direction": lambda s: s.map(lambda v: _DIR_ORDER.get(v, 9)),
           "method": lambda s: s}
    cols = [c for c in cols if c in df.columns]
    return df.sort_values(cols, key=lambda s: key.get(s.name, lambda x: x)(s), kind="stable")


# ---------------------------------------------------------------------------------------------- blocks

def _host_summary(run: Run) -> str:
    meta = run.meta or {}
    f = run.frame
    hosts = meta.get("hosts") or sorted(f["host"].unique())
    parts = [f"**hosts** {', '.join(map(str, hosts[:8]))}" + (f" (+{len(hosts) - 8})" if len(hosts) > 8 else "")]
    gpus = meta.get("gpus") or {}
    if isinstance(gpus, dict) and gpus:
        first = next(iter(gpus.values())) or []
        names = Counter(str(g.get("name", "?")) for g in first if isinstance(g, dict))
        desc = ", ".join(f"{n} × {name}" for name, n in names.items())
        g0 = first[0] if first and isinstance(first[0], dict) else {}
        extra = [f"cc {g0['cc']}" if g0.get("cc") else "", f"{g0['sm_count']} SMs" if g0.get("sm_count") else "",
                 f"{g0['memory_bytes'] / 2**30:.0f} GiB" if g0.get("memory_bytes") else ""]
        extra = [e for e in extra if e]
        parts.append(f"**GPUs** {desc}" + (f" ({', '.join(extra)})" if extra else "")
                     + (" per host" if len(gpus) > 1 else ""))
    else:
        n = len(set(f["src_gpu"]) | set(f["dst_gpu"]) - {-1})
        parts.append(f"**GPUs** {n} (from the rows; no GPU list in {META_NAME})")
    v = meta.get("versions") or {}

    def cuda(x):
        return f"{x // 1000}.{x % 1000 // 10}" if isinstance(x, int) and x > 0 else (str(x) if x else "")

    sw = [("driver", v.get("driver")), ("CUDA driver", cuda(v.get("cuda_driver"))),
          ("runtime", cuda(v.get("cuda_runtime"))), ("MPI", v.get("mpi_library")), ("cupy", v.get("cupy")),
          ("ipcbench", meta.get("ipcbench_version")), ("commit", meta.get("git_commit"))]
    sw = [f"{k} {val}" for k, val in sw if val]
    if sw:
        parts.append("**software** " + ", ".join(sw))
    if meta.get("start"):
        parts.append(f"**started** {meta['start']}")
    ranks = meta.get("ranks")
    parts.append(f"**rows** {len(f)}" + (f", **ranks** {len(ranks)}" if isinstance(ranks, list) else ""))
    return " · ".join(parts)


def _summary_table(summ, flags) -> "object":
    from .report_render import Table

    if summ.empty:
        return None
    s = summ.merge(flags, on=["run", "suite", "method", "direction"], how="left") if not flags.empty else \
        summ.assign(weak=0, noisy=0, unverified=0)
    s = _method_sort(s, ("suite", "method", "direction"))
    rows = []
    for r in s.itertuples(index=False):
        fl = []
        for name in ("weak", "noisy", "unverified"):
            n = getattr(r, name)
            if n == n and n:
                fl.append(f"{name} {int(n)}")
        rows.append([r.suite, r.method, r.direction, str(r.pairs), _size(r.size_max), _f1(r.bw_median),
                     _f1(r.bw_min), _f1(r.bw_max), _size(r.size_min), _us(r.time_us), ", ".join(fl)])
    return Table(["suite", "method", "direction", "pairs", "largest", "GB/s median", "GB/s min", "GB/s max",
                  "smallest", "µs at smallest", "flags"], rows,
                 numeric=[False, False, False, True, True, True, True, True, True, True, False])


def build(runs: list[Run], skipped: list[str], out_dir: Path, cv_threshold: float, figures: bool):
    """The whole report as a list of blocks (figures already written into out_dir when `figures`)."""
    import pandas as pd

    from . import __version__
    from . import report_tables as T
    from .report_render import Figure, Heading, Para, Table

    frames = [r.frame.assign(run=r.label) for r in runs]
    df = pd.concat(frames, ignore_index=True)
    df["run"] = pd.Categorical(df["run"], categories=[r.label for r in runs])
    df = T.add_scope(df)
    hosts = sorted(df["host"].unique())
    metas = {r.label: r.meta for r in runs}

    summary = T.method_summary(df)
    weak = T.weak_links(df)
    noisy = T.noisy_rows(df, cv_threshold)
    unver = T.unverified_rows(df)
    flags = T.flag_counts(weak, noisy, unver)
    sp = T.speedup_rows(df)
    sp_sum = T.speedup_summary(sp)
    handles = T.handle_costs(df)
    links = T.link_table(metas)
    pk = T.peak_rows(df, links)
    pk_pair = T.peak_by_pair(pk)
    pk_meth = T.peak_by_method(pk)

    doc = [Heading(1, "ipcbench report"),
           Para(f"{len(runs)} run(s), {len(hosts)} host(s), {len(df)} rows; made by ipcbench {__version__}. "
                f"Bandwidth in GB/s (1e9 B/s) at each method's largest size, median over GPU pairs (min/max: "
                f"the weakest and strongest pair); time in µs per transfer at the smallest size. "
                f"Flags: **weak** pairs more than {T.WEAK_FRACTION:.0%} below their method's median, **noisy** "
                f"rows with CV above {cv_threshold:g}, **unverified** rows (data mismatch).")]
    if skipped:
        doc.append(Heading(2, "Skipped inputs", terminal=True))
        doc += [Para(f"`{s}`", terminal=True) for s in skipped]

    fig_runs = {r.label for r in runs[:MAX_FIGURE_RUNS]}
    heat_budget = MAX_HEATMAP_HOSTS
    by_run = {k: g for k, g in df.groupby("run", observed=True, sort=False)}
    for run in runs:
        rdf = by_run.get(run.label)
        if rdf is None:
            continue
        doc.append(Heading(2, f"Run {run.label}", terminal=True))
        doc.append(Para(_host_summary(run), terminal=True))
        for note in run.notes:
            doc.append(Para(f"Note: {note}.", terminal=True))
        rs = summary[summary["run"] == run.label]
        rf = flags[flags["run"] == run.label] if not flags.empty else flags
        for scope, title in (("pair", "Summary (cross-GPU pairs)"), ("same GPU", "Same-GPU IPC (ranks sharing a GPU)"),
                             ("aggregate", "Aggregate rows (no single pair)")):
            t = _summary_table(rs[rs["scope"] == scope], rf if scope == "pair" else rf.iloc[0:0])
            if t is not None:
                t.terminal = True
                doc += [Heading(3, title, terminal=True), t]
        nflag = [(len(x[x["run"] == run.label]), name) for x, name in
                 ((weak, "weak pairs"), (noisy, "noisy rows"), (unver, "unverified rows"))]
        doc.append(Para("**flags** " + ", ".join(f"{n} {name}" for n, name in nflag) + " (details under Flags)",
                        terminal=True))

        s = _method_sort(sp_sum[sp_sum["run"] == run.label])
        if not s.empty:
            doc.append(Heading(3, "Speedup over the best host-staged path"))
            doc.append(Table(["suite", "method", "direction", "size", "GB/s", "staged GB/s", "speedup median",
                              "min", "max", "pairs"],
                             [[r.suite, r.method, r.direction, _size(r.bytes), _f1(r.bw_median), _f1(r.baseline),
                               _x(r.speedup_median), _x(r.speedup_min), _x(r.speedup_max), str(r.pairs)]
                              for r in s.itertuples()],
                             numeric=[False] * 3 + [True] * 7))
        h = handles[handles["run"] == run.label]
        if not h.empty:
            doc.append(Heading(3, "Handle and import costs"))
            doc.append(Table(["suite", "method", "GPUs", "µs median", "rows"],
                             [[r.suite, r.method, "same GPU" if r.same_gpu else "cross-GPU", _us(r.time_us),
                               str(r.rows)] for r in h.itertuples()], numeric=[False] * 3 + [True] * 2))
        doc.append(Heading(3, "Share of the theoretical link peak"))
        pp = pk_pair[pk_pair["run"] == run.label] if not pk_pair.empty else pk_pair
        if pp.empty:
            doc.append(Para(f"No NVML link table in {META_NAME} (or no cross-GPU bandwidth rows): "
                            "% of peak skipped."))
        else:
            doc.append(Table(["host", "pair", "link", "peak GB/s", "best one-way method", "GB/s", "% of peak"],
                             [[r.host, f"{r.src_gpu}→{r.dst_gpu}", r.kind, _f1(r.peak_gbps),
                               _label(r.suite, r.method, r.direction), _f1(r.bw_gbps_median), _f1(r.pct)]
                              for r in pp.head(64).itertuples()],
                             numeric=[False] * 3 + [True] + [False] + [True] * 2))
            pm = _method_sort(pk_meth[pk_meth["run"] == run.label])
            doc.append(Table(["suite", "method", "direction", "% of peak median", "min", "max", "pairs"],
                             [[r.suite, r.method, r.direction, _f1(r.pct_median), _f1(r.pct_min),
                               _f1(r.pct_max), str(r.pairs)] for r in pm.itertuples()],
                             numeric=[False] * 3 + [True] * 4))

        if figures and run.label in fig_runs:
            doc.append(Heading(3, "Figures"))
            figs, heat_budget = _run_figures(run, rdf, sp, pk, handles, out_dir, heat_budget)
            doc += figs
        elif figures:
            doc.append(Para(f"Figures are drawn for the first {MAX_FIGURE_RUNS} runs only."))

    if len(hosts) > 1:
        doc += _fleet_blocks(df, out_dir, figures)
    doc += _flag_blocks(weak, noisy, unver, cv_threshold)
    if figures:
        from .report_figures import draw_all

        pending = [b for b in doc if isinstance(b, Figure) and b.job is not None]
        for b, name in zip(pending, draw_all([b.job for b in pending])):
            b.file, b.job = name, None
    return [b for b in doc if not (isinstance(b, Figure) and b.file is None)]


def _fig(title: str, fn: str, *args, **kwargs):
    from .report_render import Figure

    return Figure(title, None, job=(fn, args, kwargs))


def _run_figures(run: Run, rdf, sp, pk, handles, out_dir: Path, heat_budget: int):
    """Figure blocks (not drawn yet) of one run; heatmaps only while heat_budget lasts."""
    from . import report_tables as T
    from .report_render import Para

    figs = []
    slug = _slug(run.label)
    bw = T.cross_gpu(T.bw_rows(rdf))
    # heatmaps: one figure per (host, suite, method), one panel per direction
    for host, hdf in bw.groupby("host", sort=True):
        if heat_budget <= 0:
            figs.append(Para(f"Heatmaps are drawn for the first {MAX_HEATMAP_HOSTS} hosts only."))
            break
        heat_budget -= 1
        for (suite, method), mdf in _method_sort(hdf).groupby(["suite", "method"], sort=False):
            panels = [(d, T.heatmap_matrix(mdf[mdf["direction"] == d]))
                      for d in sorted(mdf["direction"].unique(), key=lambda d: _DIR_ORDER.get(d, 9))]
            size = _size(mdf["bytes"].max())
            figs.append(_fig(f"Heatmap {_label(suite, method)} at {size} ({host})", "heatmap", panels,
                             f"{_label(suite, method)} at {size}, {host} (source row → destination column)",
                             out_dir, f"{slug}-{_slug(host)}-heatmap-{_slug(suite)}-{_slug(method)}.png"))
    curves = T.size_curves(rdf)
    for d in ("push", "pull", "bidir"):
        c = curves[curves["direction"] == d]
        if c.empty:
            continue
        c = c.assign(label=[_label(s, m) for s, m in zip(c["suite"], c["method"])])
        figs.append(_fig(f"Bandwidth vs message size ({d})", "lines_vs_size", c, "median",
                         f"Bandwidth vs size, {d} (median over cross-GPU pairs)", "GB/s", out_dir,
                         f"{slug}-bw-vs-size-{d}.png", band=False))
    lat = T.latency_curves(rdf)
    if not lat.empty:
        lat = lat.assign(label=[_label(s, m, d) for s, m, d in zip(lat["suite"], lat["method"], lat["direction"])])
        figs.append(_fig("Latency vs message size (≤ 64K)", "lines_vs_size", lat, "median",
                         "Time per transfer, messages ≤ 64K (median over pairs)", "µs", out_dir,
                         f"{slug}-latency.png", logy=True, band=False))
    rsp = sp[sp["run"] == run.label]
    if not rsp.empty:
        c = T.speedup_curves(rsp)
        c = c.assign(label=[_label(s, m, d) for s, m, d in zip(c["suite"], c["method"], c["direction"])],
                     median=c["speedup"])
        figs.append(_fig("Speedup of each IPC method over the best host-staged path", "lines_vs_size", c,
                         "median", "Speedup over the best host-staged path (median over pairs)", "× staged",
                         out_dir, f"{slug}-speedup.png", logy=True, band=False))
    h = handles[handles["run"] == run.label]
    if not h.empty:
        h = h.assign(label=[m if s == "handles" else _label(s, m) for s, m in zip(h["suite"], h["method"])],
                     gpus=h["same_gpu"].map({True: "same GPU", False: "cross-GPU"}))
        figs.append(_fig("Handle and import costs", "bars", h, "label", "time_us", "gpus",
                         "Handle and import costs (median)", "µs", out_dir, f"{slug}-handles.png", logy=True))
    rpk = pk[pk["run"] == run.label]
    if not rpk.empty:
        rpk = _method_sort(rpk)
        rpk = rpk.assign(label=[_label(s, m, d) for s, m, d in zip(rpk["suite"], rpk["method"], rpk["direction"])])
        figs.append(_fig("% of theoretical link peak per pair", "strip", rpk, "label", "pct",
                         "% of theoretical link peak at the largest size (dot: a pair)", "% of peak", out_dir,
                         f"{slug}-peak.png", hline=100.0))
    return figs, heat_budget


def _fleet_blocks(df, out_dir: Path, figures: bool):
    from . import report_tables as T
    from .report_render import Heading, Para, Table

    hm = _method_sort(T.host_method_table(df))
    blocks = [Heading(2, "Fleet: hosts compared", terminal=True)]
    if hm.empty:
        return blocks + [Para("No cross-GPU bandwidth rows.", terminal=True)]
    hm = hm.assign(label=[_label(s, m, d) for s, m, d in zip(hm["suite"], hm["method"], hm["direction"])])
    labels = list(dict.fromkeys(hm["label"]))
    wide = hm.pivot(index="host", columns="label", values="bw").reindex(columns=labels)
    fleet_med = wide.median()
    rows = [[h] + [_f1(v) for v in wide.loc[h]] for h in wide.index]
    rows.append(["fleet median"] + [_f1(v) for v in fleet_med])
    blocks.append(Para("Median GB/s over each host's GPU pairs at the method's largest size."))
    blocks.append(Table(["host"] + labels, rows, numeric=[False] + [True] * len(labels)))
    short = labels[:MAX_FLEET_PANELS]
    blocks.append(Table(["host"] + short, [r[:len(short) + 1] for r in rows], terminal=True, files=False,
                        numeric=[False] + [True] * len(short),
                        caption="Host × method, GB/s (the first methods; the report has all)"))
    out = T.outlier_hosts(hm)
    blocks.append(Heading(3, f"Outlier hosts (more than {T.OUTLIER_FRACTION:.0%} below the fleet median)",
                          terminal=True))
    if out.empty:
        blocks.append(Para("None.", terminal=True))
    else:
        blocks.append(Table(["host", "method", "host GB/s", "fleet GB/s", "below"],
                            [[r.host, r.label, _f1(r.bw), _f1(r.fleet), f"{r.below_pct:.1f}%"]
                             for r in out.itertuples()], terminal=True, numeric=[False, False, True, True, True]))
    if figures:
        box = T.fleet_box_data(df)
        box = box.assign(label=[_label(s, m, d) for s, m, d in zip(box["suite"], box["method"], box["direction"])])
        blocks.append(_fig("Per-host distribution of the largest-size bandwidth", "host_boxes", box, short,
                           "Per-host distribution of pair bandwidth", out_dir, "fleet-hosts.png"))
    return blocks


def _flag_blocks(weak, noisy, unver, cv_threshold: float):
    from .report_render import Heading, Para, Table

    def pair(r):
        return f"{r.src_gpu}→{r.dst_gpu}" if r.src_gpu >= 0 else f"rank {r.src_rank}→{r.dst_rank}"

    blocks = [Heading(2, "Flags", terminal=True)]
    specs = [
        ("Weak links (pairs more than 10% below their method's median)", weak,
         ["run", "host", "method", "pair", "size", "GB/s", "method median", "below"],
         lambda r: [r.run, r.host, _label(r.suite, r.method, r.direction), pair(r), _size(r.bytes),
                    _f1(r.bw_gbps_median), _f1(r.method_median), f"{r.below_pct:.1f}%"]),
        (f"Noisy rows (CV above {cv_threshold:g})", noisy,
         ["run", "host", "method", "pair", "size", "CV", "µs median", "µs min", "µs max"],
         lambda r: [r.run, r.host, _label(r.suite, r.method, r.direction), pair(r), _size(r.bytes),
                    f"{r.cv:.3f}", _us(r.time_us_median), _us(r.time_us_min), _us(r.time_us_max)]),
        ("Unverified rows (destination did not match the source)", unver,
         ["run", "host", "method", "pair", "size", "note"],
         lambda r: [r.run, r.host, _label(r.suite, r.method, r.direction), pair(r), _size(r.bytes), r.note]),
    ]
    for title, rows, cols, fmt in specs:
        n = len(rows)
        blocks.append(Heading(3, f"{title}: {n}", terminal=True))
        if not n:
            continue
        cells = [fmt(r) for r in rows.head(MAX_FLAG_ROWS).itertuples()]
        numeric = [False] * 4 + [True] * (len(cols) - 4)
        blocks.append(Table(cols, cells, numeric=numeric))
        if n > MAX_FLAG_ROWS:
            blocks.append(Para(f"… and {n - MAX_FLAG_ROWS} more."))
        blocks.append(Table(cols, cells[:MAX_TERMINAL_FLAGS], numeric=numeric, terminal=True, files=False))
        if n > MAX_TERMINAL_FLAGS:
            blocks.append(Para(f"… and {n - MAX_TERMINAL_FLAGS} more in the report.", terminal=True, files=False))
    return blocks


def default_out(paths) -> Path:
    first = Path(paths[0])
    return (first if first.is_dir() else first.parent) / "report"


def run(args) -> int:
    """Entry point for `ipcbench report`; returns the exit status."""
    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:
        _error(f"no such file or directory: {missing[0]}")
        return 2
    if args.cv_threshold is not None and args.cv_threshold < 0:
        _error("--cv-threshold must be >= 0")
        return 2
    runs, skipped = load_runs(args.paths)
    for s in skipped:
        _warn(f"{s} (run skipped)")
    for r in runs:
        for note in r.notes:
            _warn(note)
    if not runs:
        _error("no usable run found under " + ", ".join(map(str, args.paths))
               + ("" if skipped else f" (no {CSV_NAME})"))
        return 2
    out_dir = Path(args.out) if args.out else default_out(args.paths)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        _error(f"cannot create {out_dir}: {e.strerror or e}")
        return 2
    from .report_render import to_html, to_markdown, to_text

    doc = build(runs, skipped, out_dir, 0.05 if args.cv_threshold is None else args.cv_threshold,
                figures=not args.no_figures)
    (out_dir / "report.md").write_text(to_markdown(doc), encoding="utf-8")
    (out_dir / "report.html").write_text(to_html(doc, out_dir), encoding="utf-8")
    if not args.quiet:
        sys.stdout.write(to_text(doc))
        sys.stdout.write("\n")
    print(f"report: {out_dir / 'report.html'}\n        {out_dir / 'report.md'}")
    return 0


def main(argv=None) -> int:  # `python -m ipcbench.report` while cli.py is not wired
    parser = argparse.ArgumentParser(prog="ipcbench report", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
