"""`ipcbench compare BASE NEW`: per-row ratios between two runs, noise-aware verdicts, exit 1 on a regression.

Rows are matched on (suite, method, direction, source GPU, destination GPU, bytes); the GPUs by UUID where
both runs' meta.json name them (so a run on the same machine matches even if the GPU order changed), else
by index. Rows that repeat a key (several ranks on one GPU pair) are matched in rank order.

Bandwidth rows compare bw_gbps_median (higher is better), rows without a bandwidth (latency, op) compare
time_us_median (lower is better). A row changed only when the change exceeds both the threshold and the
rows' combined noise: each side's relative half-spread (time_us_max - time_us_min) / (2 * median), or its
CV where min/max are missing, summed over the two sides. A row verified in BASE but not in NEW is a
regression whatever its speed.

Exit status: 0 nothing regressed, 1 something did, 2 bad input (message in one line on stderr).
No MPI or CUDA; pandas is imported only when comparing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .results import CSV_NAME, ResultsError, find_runs, load_frame, read_meta_optional
from .sizes import fmt_size

KEY = ["suite", "method", "direction", "src", "dst", "bytes"]
MAX_UNCHANGED_SHOWN = 20


class CompareError(Exception):
    """Bad input: the message is one line."""


def threshold_arg(text: str) -> float:
    """'0.05' or '5%' -> 0.05."""
    t = str(text).strip()
    try:
        v = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a threshold: {text!r} (use a fraction like 0.05 or a percentage "
                                         "like 5%)") from None
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"threshold {text!r} out of range: use a fraction in [0, 1) such as 0.05, "
                                         "or a percentage such as 5%")
    return v


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", metavar="BASE", help="the reference: a run directory or a results.csv")
    parser.add_argument("new", metavar="NEW", help="the run to judge: a run directory or a results.csv")
    parser.add_argument("--threshold", type=threshold_arg, default=0.05, metavar="FRACTION",
                        help="smallest change that counts, as a fraction or a percentage (default 0.05 = 5%%); "
                             "a change must also exceed the rows' measured noise")
    parser.add_argument("--format", choices=("text", "md", "csv"), default="text",
                        help="output format (default text)")


def _locate(path: str) -> tuple[Path, Path]:
    """(results.csv, run directory) for a run directory, a tree holding one run, or a CSV file."""
    p = Path(path)
    if p.is_file():
        return p, p.parent
    if p.is_dir():
        if (p / CSV_NAME).is_file():
            return p / CSV_NAME, p
        runs = find_runs([p])
        if len(runs) == 1:
            return runs[0] / CSV_NAME, runs[0]
        if not runs:
            raise CompareError(f"{p}: no {CSV_NAME} in this directory or below")
        raise CompareError(f"{p}: holds {len(runs)} runs; name one run directory")
    raise CompareError(f"{p}: no such file or directory")


def load(path: str):
    """(frame, meta or None) of one side; CompareError on anything unusable."""
    csv_path, run_dir = _locate(path)
    try:
        frame = load_frame(csv_path)
        meta = read_meta_optional(run_dir)
    except ResultsError as e:
        raise CompareError(str(e)) from None
    if frame.empty:
        raise CompareError(f"{csv_path}: no rows (only a header)")
    return frame, meta


def _uuid_table(meta):
    """{(host, gpu index): uuid} from meta.json's "gpus" (empty when it has none)."""
    out = {}
    gpus = (meta or {}).get("gpus")
    if not isinstance(gpus, dict):
        return out
    for host, lst in gpus.items():
        for g in lst if isinstance(lst, list) else []:
            if isinstance(g, dict) and g.get("uuid") and g.get("index") is not None:
                try:
                    out[(str(host), int(g["index"]))] = str(g["uuid"])
                except (TypeError, ValueError):
                    continue
    return out


def _uuids(frame, table):
    """Source and destination UUID of every row (None where unknown; GPU index -1 stays '-1')."""
    import pandas as pd

    def col(gpu_col):
        keys = pd.MultiIndex.from_arrays([frame["host"].astype(str), frame[gpu_col]])
        known = pd.Series(table, dtype=object)
        if known.empty:
            vals = pd.Series([None] * len(frame), index=frame.index, dtype=object)
        else:
            known.index = pd.MultiIndex.from_tuples(known.index)
            vals = pd.Series(known.reindex(keys).to_numpy(), index=frame.index, dtype=object)
        return vals.where(frame[gpu_col] >= 0, "-1")

    return col("src_gpu"), col("dst_gpu")


def _keyed(frame, src, dst, with_host: bool):
    import numpy as np

    k = frame.assign(src=src.astype(str).to_numpy(), dst=dst.astype(str).to_numpy())
    key = KEY + (["host"] if with_host else [])
    k = k.sort_values(key + ["src_rank", "dst_rank"], kind="stable")
    k["seq"] = k.groupby(key, sort=False).cumcount().astype(np.int64)
    return k, key + ["seq"]


def _spread(df, side: str):
    """Relative half-spread of each row: (max - min) / (2 median) of the times, else the CV, else 0."""
    med, lo, hi = (df[f"time_us_{x}_{side}"] for x in ("median", "min", "max"))
    s = (hi - lo) / (2.0 * med)
    s = s.where(s.notna() & (s >= 0), df[f"cv_{side}"])
    return s.fillna(0.0).clip(lower=0.0)


def compare_frames(base, new, base_meta=None, new_meta=None, threshold: float = 0.05):
    """Match the rows of two runs and judge them. Returns (table, info): table has one row per matched row
    (worst first) with columns suite, method, direction, host, src_gpu, dst_gpu, bytes, metric, base, new,
    ratio (new/base), change (relative, positive = better), noise, verdict, note; info says how rows were
    matched and how many were left over."""
    import numpy as np

    bt, nt = _uuid_table(base_meta), _uuid_table(new_meta)
    bsrc, bdst = _uuids(base, bt)
    nsrc, ndst = _uuids(new, nt)
    by_uuid = (bool(bt) and bool(nt) and bsrc.notna().all() and bdst.notna().all() and nsrc.notna().all()
               and ndst.notna().all() and bool(set(bt.values()) & set(nt.values())))
    if by_uuid:
        mode, with_host = "GPUs matched by UUID", False
    else:
        shared = bool(set(bt.values()) & set(nt.values()))
        why = ("no GPU UUIDs in both meta.json" if not (bt and nt) else
               "the runs share no GPU UUID" if not shared else "some GPUs have no UUID in meta.json")
        bsrc, bdst, nsrc, ndst = base["src_gpu"], base["dst_gpu"], new["src_gpu"], new["dst_gpu"]
        with_host = base["host"].nunique() > 1 and new["host"].nunique() > 1
        mode = f"GPUs matched by index{' and host' if with_host else ''}: {why}"
    bk, key = _keyed(base, bsrc, bdst, with_host)
    nk, _ = _keyed(new, nsrc, ndst, with_host)
    cols = ["bw_gbps_median", "time_us_median", "time_us_min", "time_us_max", "cv", "verified"]
    keep_new = ["host", "src_gpu", "dst_gpu", "same_gpu"]
    m = bk[key + cols].merge(nk[key + cols + [c for c in keep_new if c not in key]], on=key, how="inner",
                             suffixes=("_base", "_new"))
    info = {"mode": mode, "base_rows": len(base), "new_rows": len(new), "matched": len(m),
            "only_base": len(base) - len(m), "only_new": len(new) - len(m), "threshold": threshold}
    use_bw = m["bw_gbps_median_base"].notna() & m["bw_gbps_median_new"].notna()
    use_t = ~use_bw & m["time_us_median_base"].notna() & m["time_us_median_new"].notna()
    m["metric"] = np.where(use_bw, "GB/s", np.where(use_t, "us", ""))
    m["base"] = np.where(use_bw, m["bw_gbps_median_base"], m["time_us_median_base"])
    m["new"] = np.where(use_bw, m["bw_gbps_median_new"], m["time_us_median_new"])
    ok = (use_bw | use_t) & (m["base"] > 0) & (m["new"] > 0)
    info["not_comparable"] = int((~ok).sum())
    m = m[ok].copy()
    m["ratio"] = m["new"] / m["base"]
    good = np.where(m["metric"] == "GB/s", m["ratio"], 1.0 / m["ratio"])
    m["change"] = good - 1.0
    m["noise"] = _spread(m, "base") + _spread(m, "new")
    bound = np.maximum(threshold, m["noise"].to_numpy())
    lost = m["verified_base"].to_numpy(dtype=bool) & ~m["verified_new"].to_numpy(dtype=bool)
    verdict = np.where(m["change"] < -bound, "regression", np.where(m["change"] > bound, "improvement",
                                                                   "unchanged"))
    m["verdict"] = np.where(lost, "regression", verdict)
    m["note"] = np.where(lost, "unverified in NEW", np.where(~m["verified_new"].to_numpy(dtype=bool),
                                                             "unverified in both", ""))
    m["_rank"] = np.where(m["verdict"] == "regression", 0, np.where(m["verdict"] == "improvement", 2, 1))
    m = m.sort_values(["_rank", "change"], kind="stable")
    # worst first: regressions, then unchanged rows, then improvements, each by change ascending
    out = m[["suite", "method", "direction", "host", "src_gpu", "dst_gpu", "same_gpu", "bytes", "metric",
             "base", "new", "ratio", "change", "noise", "verdict", "note"]].reset_index(drop=True)
    return out, info


def _counts(t) -> dict:
    v = t["verdict"].value_counts()
    return {k: int(v.get(k, 0)) for k in ("regression", "improvement", "unchanged")}


def _shown(t):
    changed = t[t["verdict"] != "unchanged"]
    unchanged = t[t["verdict"] == "unchanged"].head(MAX_UNCHANGED_SHOWN)
    shown = t.loc[sorted(set(changed.index) | set(unchanged.index))]
    return shown, len(t) - len(shown)


def _cells(r) -> list[str]:
    pair = f"{r.src_gpu}→{r.dst_gpu}" if r.src_gpu >= 0 and r.dst_gpu >= 0 else "all"
    if r.same_gpu:
        pair += " (same GPU)"

    def num(v):
        return f"{v:.1f}" if r.metric == "GB/s" else (f"{v:.0f}" if v >= 1000 else f"{v:.3g}")

    return [f"{r.suite}/{r.method}", r.direction, r.host, pair, fmt_size(int(r.bytes)), r.metric, num(r.base),
            num(r.new), f"{r.ratio:.3f}", f"{100 * r.change:+.1f}%", f"±{100 * r.noise:.1f}%", r.verdict, r.note]


_HEAD = ["method", "direction", "host", "pair", "size", "unit", "base", "new", "new/base", "change", "noise",
         "verdict", "note"]


def _summary(t, info) -> str:
    c = _counts(t)
    return (f"{info['matched'] - info['not_comparable']} rows compared ({info['mode']}): "
            f"{c['regression']} regression(s), {c['improvement']} improvement(s), {c['unchanged']} unchanged; "
            f"threshold {100 * info['threshold']:.3g}% or the rows' noise, whichever is larger; "
            f"only in BASE: {info['only_base']}, only in NEW: {info['only_new']}"
            + (f", without a comparable value: {info['not_comparable']}" if info["not_comparable"] else ""))


def render(t, info, fmt: str) -> str:
    from .report_render import Table, to_markdown, to_text

    if fmt == "csv":
        return t.to_csv(index=False, float_format="%.6g")
    shown, hidden = _shown(t)
    table = Table(_HEAD, [_cells(r) for r in shown.itertuples()], terminal=True,
                  numeric=[False] * 4 + [True] + [False] + [True] * 5 + [False, False])
    c = _counts(t)
    verdict = (f"verdict: REGRESSION ({c['regression']} row(s) worse)" if c["regression"]
               else "verdict: no regression")
    tail = f"({hidden} more unchanged rows not shown; --format csv lists every row)" if hidden else ""
    if fmt == "md":
        parts = [f"**{verdict}**", _summary(t, info), to_markdown([table]).rstrip()] + ([tail] if tail else [])
        return "\n\n".join(parts) + "\n"
    return "\n".join(x for x in (to_text([table]).rstrip(), tail, "", _summary(t, info), verdict) if x) + "\n"


def run(args) -> int:
    """Entry point for `ipcbench compare`; returns the exit status (0 ok, 1 regression, 2 bad input)."""
    threshold = args.threshold
    try:
        if isinstance(threshold, str):
            threshold = threshold_arg(threshold)
        base, base_meta = load(args.base)
        new, new_meta = load(args.new)
        table, info = compare_frames(base, new, base_meta, new_meta, threshold)
        if table.empty:
            raise CompareError(f"no common rows between {args.base} and {args.new} "
                               f"({info['mode']}; {info['base_rows']} and {info['new_rows']} rows)")
    except (CompareError, argparse.ArgumentTypeError) as e:
        print(f"ipcbench compare: error: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(render(table, info, args.format))
    if args.format == "csv":
        print(_summary(table, info), file=sys.stderr)
    return 1 if (table["verdict"] == "regression").any() else 0


def main(argv=None) -> int:  # `python -m ipcbench.compare` while cli.py is not wired
    parser = argparse.ArgumentParser(prog="ipcbench compare", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
