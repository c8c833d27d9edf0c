"""`ipcbench compare BASE [BASE ...] NEW`: a statistical compare of runs, usable as a CI regression gate.

The last path is NEW, every path before it a BASE run (one or several runs of the reference code). Rows are
matched on (suite, method, direction, source GPU, destination GPU, bytes); the GPUs by UUID where every
run's meta.json names them and NEW shares a GPU with each BASE (so a run on the same machine matches even
if the GPU order changed), else by index (and host, when every run has several hosts). Rows that repeat a
key (several ranks on one GPU pair) are matched in rank order.

How a matched row is judged (docs/report.md says the same for users):

* Each row in its natural unit: GB/s for kind `bandwidth` (higher is better), µs for `latency` and `op`
  (lower is better). Kind `error` rows (error-path probes) are listed as not judged.
* The size of a change is the log ratio g = log(new/base) of that unit, signed so that g > 0 is better;
  a change counts only when |g| > log(1 + threshold), i.e. max(new/base, base/new) > 1 + threshold.
* Significance: Welch's t-test on the log of the two rows' sample times (samples_us), two-sided, p < alpha
  (default 0.01); the t distribution is computed here (regularized incomplete beta), no scipy. The test's
  direction must agree with the medians'. Rows without samples (runs older than the samples_us column)
  use the median as location, log(1 + cv^2) as the variance of a log sample and the `samples` count; they
  are marked test=cv.
* Everything is symmetric in BASE and NEW: with one BASE, swapping the two mirrors every verdict exactly
  (regression <-> improvement, unchanged and not judged stay so).
* Host-timed rows (method mpi_staged, and the handles suite's kind `op` rows: Python and the host clock
  in the loop) vary between runs far more than their in-run samples say. With one BASE they are not
  judged ("host-timed: give 2+ BASE runs") and cannot fail the gate. With several BASE runs they are
  judged against the between-run variation: the variance of the BASE runs' log medians, pooled over the
  rows of the same suite/method/direction (never below the row's own), gives a prediction t-test of
  NEW's median against the BASE runs' mean (df = the pooled degrees of freedom); test=runs.
* With several BASE runs the reference is the geometric mean of their medians (the samples of the BASE
  runs are pooled for the t-test), and every row, device- or host-timed, must also move further than the
  BASE runs' own spread: |g| > max - min of the BASE runs' log medians.
* A row verified in BASE but not in NEW is a regression (the reverse an improvement); unverified in both
  is not judged. A row above a physical ceiling (ceilings.py) on either side is not judged, and every NEW
  row above a ceiling is a failure of its own (`impossible`).
* Rows of BASE missing from NEW fail the gate unless --subset; rows only in NEW are listed as new.

Exit status: 0 nothing regressed, 1 a regression, a row missing from NEW (without --subset) or an
impossible NEW row, 2 bad input (message in one line on stderr). No MPI or CUDA; pandas only when comparing.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ipcbench.results import CSV_NAME
from ipcbench.results_load import ResultsError, find_runs, load_frame, read_meta_optional
from ipcbench.sizes import fmt_size

KEY = ["suite", "method", "direction", "src", "dst", "bytes"]
HOST_TIMED_METHODS = ("mpi_staged",)  # Python in the loop, host clock (suites/staged_mpi.py)
HOST_TIMED_OP_SUITES = ("handles",)  # kind op rows of these suites: host-timed API calls
DEFAULT_ALPHA = 0.01
VERDICTS = ("regression", "improvement", "unchanged", "not judged", "missing", "new")
MAX_LISTED = 40  # rows per section in text/md (csv lists every row)
WARN_OPTIONS = ("quick", "sampling", "samples", "min_time_ms")


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


def alpha_arg(text: str) -> float:
    """Significance level: '0.01' or '1%' -> 0.01, in (0, 0.5]."""
    t = str(text).strip()
    try:
        v = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a significance level: {text!r} (use e.g. 0.01)") from None
    if not 0 < v <= 0.5:
        raise argparse.ArgumentTypeError(f"significance level {text!r} out of range: use a value in (0, 0.5], "
                                         "such as 0.01")
    return v


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", nargs="+", metavar="BASE",
                        help="the reference: one or several run directories (or results.csv files) of the same "
                             "code; several give the between-run variation that host-timed rows need")
    parser.add_argument("new", metavar="NEW", help="the run to judge (the last path)")
    parser.add_argument("--threshold", type=threshold_arg, default=0.05, metavar="FRACTION",
                        help="smallest change that counts, as a fraction or a percentage (default 0.05 = 5%%); "
                             "a change must also be statistically significant")
    parser.add_argument("--alpha", type=alpha_arg, default=DEFAULT_ALPHA, metavar="P",
                        help=f"significance level of the tests (default {DEFAULT_ALPHA})")
    parser.add_argument("--subset", action="store_true",
                        help="NEW is deliberately a subset of BASE: rows missing from NEW are listed but do not "
                             "fail the gate")
    parser.add_argument("--format", choices=("text", "md", "csv"), default="text",
                        help="output format (default text)")


# ------------------------------------------------------------------------------------------- loading

@dataclass
class Side:
    """One run of the comparison: where it came from, its rows (load_frame's columns) and meta.json."""

    label: str
    frame: object  # pandas.DataFrame
    meta: dict | None
    path: str = ""
    notes: list[str] = field(default_factory=list)  # what the loader had to say (a cut-short last line)


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


def load(path: str) -> Side:
    """One side, loaded; CompareError on anything unusable."""
    csv_path, run_dir = _locate(str(path))
    notes: list[str] = []
    try:
        frame = load_frame(csv_path, notes)
        meta = read_meta_optional(run_dir) if csv_path.name == CSV_NAME else None
    except ResultsError as e:
        raise CompareError(str(e)) from None
    if frame.empty:
        raise CompareError(f"{csv_path}: no rows (only a header)")
    return Side(run_dir.name if csv_path.name == CSV_NAME else csv_path.stem, frame, meta, str(path), notes)


# ------------------------------------------------------------------------------------------- statistics

def _betainc(a, b, x):
    """Regularized incomplete beta I_x(a, b), vectorized (numpy arrays of one shape); NaN where undefined.
    Continued fraction (modified Lentz), with the symmetry I_x(a, b) = 1 - I_{1-x}(b, a) for convergence."""
    import numpy as np

    a, b, x = (np.asarray(v, dtype=float) for v in (a, b, x))
    out = np.full(x.shape, np.nan)
    ok = np.isfinite(a) & np.isfinite(b) & np.isfinite(x) & (a > 0) & (b > 0) & (x >= 0) & (x <= 1)
    out[ok & (x == 0)] = 0.0
    out[ok & (x == 1)] = 1.0
    m = ok & (x > 0) & (x < 1)
    if not m.any():
        return out
    a0, b0, x0 = a[m], b[m], x[m]
    swap = x0 > (a0 + 1.0) / (a0 + b0 + 2.0)
    aa_, bb_, xx = np.where(swap, b0, a0), np.where(swap, a0, b0), np.where(swap, 1.0 - x0, x0)
    lgamma = np.frompyfunc(math.lgamma, 1, 1)
    ln_front = (lgamma(aa_ + bb_).astype(float) - lgamma(aa_).astype(float) - lgamma(bb_).astype(float)
                + aa_ * np.log(xx) + bb_ * np.log1p(-xx))
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = aa_ + bb_, aa_ + 1.0, aa_ - 1.0
    c = np.ones_like(xx)
    d = 1.0 - qab * xx / qap
    d = np.where(np.abs(d) < tiny, tiny, d)
    d = 1.0 / d
    h = d.copy()
    for i in range(1, 3001):
        i2 = 2 * i
        num = i * (bb_ - i) * xx / ((qam + i2) * (aa_ + i2))
        d = 1.0 + num * d
        d = np.where(np.abs(d) < tiny, tiny, d)
        c = 1.0 + num / c
        c = np.where(np.abs(c) < tiny, tiny, c)
        d = 1.0 / d
        h *= d * c
        num = -(aa_ + i) * (qab + i) * xx / ((aa_ + i2) * (qap + i2))
        d = 1.0 + num * d
        d = np.where(np.abs(d) < tiny, tiny, d)
        c = 1.0 + num / c
        c = np.where(np.abs(c) < tiny, tiny, c)
        d = 1.0 / d
        step = d * c
        h *= step
        if np.all(np.abs(step - 1.0) < eps):
            break
    val = np.exp(ln_front) * h / aa_
    out[m] = np.clip(np.where(swap, 1.0 - val, val), 0.0, 1.0)
    return out


def t_pvalue(t, df):
    """Two-sided p-value of Student's t with df degrees of freedom (arrays; df may be fractional):
    P(|T| >= |t|) = I_{df/(df+t^2)}(df/2, 1/2). t = ±inf gives 0; NaN where t or df is NaN or df <= 0."""
    import numpy as np

    t, df = np.asarray(t, dtype=float), np.asarray(df, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        t2 = t * t
        x = np.where(np.isinf(t2), 0.0, df / (df + t2))
        p = _betainc(df / 2.0, np.full(df.shape, 0.5), x)
    return np.where(np.isnan(t) | ~(df > 0), np.nan, p)


def welch(n1, mean1, m2_1, n2, mean2, m2_2):
    """Welch's two-sample t-test from (count, mean, sum of squared deviations) of each side, arrays.
    Returns (p, mean2 - mean1). Symmetric: swapping the sides gives the same p and the opposite difference.
    p is NaN where a side has fewer than 2 values; 0 (or 1) where both variances are 0 and the means
    differ (or not)."""
    import numpy as np

    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        v1 = m2_1 / (n1 - 1.0) / n1
        v2 = m2_2 / (n2 - 1.0) / n2
        se2 = v1 + v2
        diff = mean2 - mean1
        t = diff / np.sqrt(se2)
        df = se2 * se2 / (v1 * v1 / (n1 - 1.0) + v2 * v2 / (n2 - 1.0))
        p = t_pvalue(t, df)
    p = np.where(se2 == 0, np.where(diff == 0, 1.0, 0.0), p)
    return np.where((n1 < 2) | (n2 < 2) | np.isnan(se2) | np.isnan(diff), np.nan, p), diff


def _sample_stats(frame):
    """Per row, from samples_us: (count, mean of log time, sum of squared deviations of log time); count 0
    where the row has no (usable) samples."""
    import numpy as np

    n = len(frame)
    texts = frame["samples_us"].fillna("").astype(str).tolist() if "samples_us" in frame.columns else [""] * n
    parts = [t.split() for t in texts]
    lens = np.fromiter((len(p) for p in parts), dtype=np.int64, count=n)
    try:
        flat = np.array([x for p in parts for x in p], dtype=float)
    except ValueError:  # a malformed sample somewhere: parse row by row, that row has no samples
        good = []
        for i, p in enumerate(parts):
            try:
                good.append([float(x) for x in p])
            except ValueError:
                good.append([])
                lens[i] = 0
        flat = np.array([x for p in good for x in p], dtype=float)
    ids = np.repeat(np.arange(n), lens)
    bad_rows = np.unique(ids[~(np.isfinite(flat) & (flat > 0))])
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(np.where(flat > 0, flat, np.nan))
    cnt = lens.astype(float)
    if len(bad_rows):
        keep = ~np.isin(ids, bad_rows)
        ids, logs = ids[keep], logs[keep]
        cnt[bad_rows] = 0.0
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(ids, weights=logs, minlength=n) / cnt
        dev = logs - mean[ids]
        m2 = np.bincount(ids, weights=dev * dev, minlength=n)
    return cnt, np.where(cnt > 0, mean, np.nan), np.where(cnt > 0, m2, np.nan)


def host_timed(frame):
    """Boolean array: rows timed on the host with Python in the loop (see HOST_TIMED_*)."""
    import numpy as np

    method, suite, kind = (frame[c].astype(str) for c in ("method", "suite", "kind"))
    return (method.isin(HOST_TIMED_METHODS) | (suite.isin(HOST_TIMED_OP_SUITES) & (kind == "op"))).to_numpy(
        dtype=bool) if len(frame) else np.zeros(0, dtype=bool)


# ------------------------------------------------------------------------------------------- matching

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


def _identities(sides: list[Side]):
    """(per side (src, dst) identity Series, key columns, description of how GPUs are matched)."""
    tables = [_uuid_table(s.meta) for s in sides]
    ids = [_uuids(s.frame, t) for s, t in zip(sides, tables)]
    new_uuids = set(tables[-1].values())
    complete = all(t and src.notna().all() and dst.notna().all() for t, (src, dst) in zip(tables, ids))
    shared = all(set(t.values()) & new_uuids for t in tables[:-1])
    if complete and shared:
        return ids, KEY, "GPUs matched by UUID"
    why = ("not every run's meta.json lists GPU UUIDs" if not all(tables) else
           "a BASE run shares no GPU UUID with NEW" if not shared else "some GPUs have no UUID in meta.json")
    with_host = all(s.frame["host"].nunique() > 1 for s in sides)
    ids = [(s.frame["src_gpu"], s.frame["dst_gpu"]) for s in sides]
    return ids, KEY + (["host"] if with_host else []), f"GPUs matched by index{' and host' if with_host else ''}: {why}"


def _prepare(side: Side, src, dst, key: list[str]):
    """One side's rows keyed for matching, with what the verdict needs: the natural-unit value, the log
    sample statistics (exact from samples_us, approximate from cv), host/device timing, ceilings."""
    import numpy as np

    from ipcbench.report.ceilings import impossible_rows

    f = side.frame
    k = f.assign(src=src.astype(str).to_numpy(), dst=dst.astype(str).to_numpy())
    kind = k["kind"].astype(str)
    bw = kind.to_numpy() == "bandwidth"
    value = np.where(bw, k["bw_gbps_median"].to_numpy(dtype=float), k["time_us_median"].to_numpy(dtype=float))
    k["unit"] = np.where(bw, "GB/s", np.where(kind.to_numpy() == "error", "", "us"))
    k["value"] = value
    with np.errstate(divide="ignore", invalid="ignore"):
        k["lv"] = np.where(value > 0, np.log(np.where(value > 0, value, 1.0)), np.nan)
    n, mean, m2 = _sample_stats(f)
    k["s_n"], k["s_mean"], k["s_m2"] = n, mean, m2
    # the approximation for rows without samples: location log(median time), variance log(1 + cv^2)
    med, lo, hi = (k[f"time_us_{x}"].to_numpy(dtype=float) for x in ("median", "min", "max"))
    cv = k["cv"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        half = (np.log(hi) - np.log(lo)) / 2.0
        var = np.where(np.isfinite(cv), np.log1p(cv * cv), np.where(np.isfinite(half), half * half, 0.0))
        cn = k["samples"].to_numpy(dtype=float)
        k["c_n"] = cn
        k["c_mean"] = np.where(med > 0, np.log(np.where(med > 0, med, 1.0)), np.nan)
        k["c_m2"] = var * np.maximum(cn - 1.0, 0.0)
    k["exact"] = n >= 2
    k["host_timed"] = host_timed(f)
    imp = impossible_rows(f, side.meta)
    k["impossible"] = ""
    if not imp.empty:
        k.loc[imp.index, "impossible"] = imp["reason"].to_numpy()
    k = k.sort_values(key + ["src_rank", "dst_rank"], kind="stable")
    k["seq"] = k.groupby(key, sort=False).cumcount().astype(np.int64)
    return k, imp


VALUE_COLS = ["host", "src_gpu", "dst_gpu", "same_gpu", "kind", "unit", "value", "lv", "verified", "s_n", "s_mean",
              "s_m2", "c_n", "c_mean", "c_m2", "exact", "host_timed", "impossible"]


def _combine_bases(parts: list, key: list[str]):
    """The BASE runs' rows as one row per key: for one run its own values; for several, the geometric mean
    of the medians (lv = mean of the log values), the between-run range and variance of the log values,
    the runs' samples pooled (counts, means and squared deviations combined), verified only where every
    run verified, impossible where any run is."""
    import numpy as np
    import pandas as pd

    long = pd.concat([p[key + VALUE_COLS].assign(_run=i) for i, p in enumerate(parts)], ignore_index=True)
    g = long.groupby(key, sort=False, dropna=False)
    first = g.first()
    out = first.copy()
    out["k"] = g["lv"].count()
    out["runs"] = g.size()
    multi = out["runs"] > 1
    out["lv_min"], out["lv_max"] = g["lv"].min(), g["lv"].max()
    out["var_runs"] = g["lv"].var(ddof=1)
    if multi.any():
        lv_mean = g["lv"].mean()
        out.loc[multi, "lv"] = lv_mean[multi]
        out.loc[multi, "value"] = np.exp(lv_mean[multi])
        out.loc[multi, "verified"] = g["verified"].all()[multi]
        out.loc[multi, "exact"] = g["exact"].all()[multi]
        imp = g["impossible"].agg(lambda s: "; ".join(x for x in s if x))
        out.loc[multi, "impossible"] = imp[multi]
        for pre in ("s", "c"):
            nn, mm, m2 = long[f"{pre}_n"], long[f"{pre}_mean"], long[f"{pre}_m2"]
            tot = nn.groupby([long[c] for c in key], sort=False, dropna=False).transform("sum")
            wm = (nn * mm).groupby([long[c] for c in key], sort=False, dropna=False).transform("sum") / tot
            extra = m2 + nn * (mm - wm) ** 2
            grp = [long[c] for c in key]
            out.loc[multi, f"{pre}_n"] = tot.groupby(grp, sort=False, dropna=False).first()[multi]
            out.loc[multi, f"{pre}_mean"] = wm.groupby(grp, sort=False, dropna=False).first()[multi]
            out.loc[multi, f"{pre}_m2"] = extra.groupby(grp, sort=False, dropna=False).sum(min_count=1)[multi]
    return out.reset_index()


@dataclass
class Comparison:
    """The outcome: `table` has one row per key (matched, missing from NEW, or new), `impossible` NEW's rows
    above a physical ceiling (ceilings.py), `warnings` what differs between the runs."""

    table: object  # pandas.DataFrame
    impossible: object  # pandas.DataFrame
    warnings: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        v = self.table["verdict"].value_counts()
        out = {k: int(v.get(k, 0)) for k in VERDICTS}
        out["impossible"] = len(self.impossible)
        return out

    def failures(self) -> dict[str, int]:
        c = self.counts()
        fail = {"regression": c["regression"], "impossible": c["impossible"]}
        fail["missing"] = 0 if self.info.get("subset") else c["missing"]
        return {k: v for k, v in fail.items() if v}

    @property
    def exit_code(self) -> int:
        return 1 if self.failures() else 0


def compare(bases: list[Side], new: Side, threshold: float = 0.05, alpha: float = DEFAULT_ALPHA,
            subset: bool = False) -> Comparison:
    """Judge NEW against one or several BASE runs (the statistics of the module docstring). Pure over the
    sides' frames and metas; raises CompareError when the runs share no row."""
    import numpy as np
    import pandas as pd

    if not bases:
        raise CompareError("no BASE run")
    sides = list(bases) + [new]
    ids, key, mode = _identities(sides)
    prepared = [_prepare(s, src, dst, key) for s, (src, dst) in zip(sides, ids)]
    mkey = key + ["seq"]
    nk, new_imp = prepared[-1]
    base = _combine_bases([p for p, _ in prepared[:-1]], mkey)
    newv = nk[mkey + VALUE_COLS]
    m = base.merge(newv, on=mkey, how="outer", suffixes=("_b", "_n"), indicator=True)
    nb = len(bases)
    info = {"mode": mode, "base_runs": nb, "base_rows": [len(b.frame) for b in bases], "new_rows": len(new.frame),
            "threshold": threshold, "alpha": alpha, "subset": subset,
            "base_labels": [b.label for b in bases], "new_label": new.label}
    matched = (m["_merge"] == "both").to_numpy()
    if not matched.any():
        raise CompareError(f"no common rows between BASE and NEW ({mode}; "
                           f"{' + '.join(map(str, info['base_rows']))} and {info['new_rows']} rows)")
    only_base = (m["_merge"] == "left_only").to_numpy()
    only_new = (m["_merge"] == "right_only").to_numpy()

    def pick(col):  # the NEW side's value where NEW has the row, else BASE's
        return m[f"{col}_n"].where(m[f"{col}_n"].notna(), m[f"{col}_b"])

    out = pd.DataFrame({c: m[c] for c in ["suite", "method", "direction"]})
    for c in ("host", "src_gpu", "dst_gpu", "same_gpu", "kind", "unit"):
        out[c] = pick(c)
    out["src_gpu"] = out["src_gpu"].astype("int64")
    out["dst_gpu"] = out["dst_gpu"].astype("int64")
    out["same_gpu"] = out["same_gpu"].astype(bool)
    out["bytes"] = m["bytes"].astype("int64")
    out["seq"] = m["seq"].astype("int64")
    out["timing"] = np.where(pick("host_timed").astype(bool), "host", "device")
    out["base"] = m["value_b"].to_numpy(dtype=float)
    out["new"] = m["value_n"].to_numpy(dtype=float)
    out["base_runs"] = m["runs"].fillna(0).astype("int64")
    k = m["k"].fillna(0).to_numpy(dtype=float)

    # the size of the change: g = log ratio, > 0 better
    lvb, lvn = m["lv_b"].to_numpy(dtype=float), m["lv_n"].to_numpy(dtype=float)
    is_bw = (out["kind"] == "bandwidth").to_numpy()
    g = np.where(is_bw, lvn - lvb, lvb - lvn)
    with np.errstate(invalid="ignore", over="ignore"):
        out["ratio"] = np.exp(lvn - lvb)
    out["change"] = out["ratio"] - 1.0
    out["gain"] = g
    spread = (m["lv_max"] - m["lv_min"]).to_numpy(dtype=float)
    spread = np.where(k >= 2, spread, np.nan)
    out["spread"] = np.expm1(spread)

    # significance from the samples (exact where both sides have them, else the cv approximation)
    exact = (m["exact_b"].fillna(False).astype(bool) & m["exact_n"].fillna(False).astype(bool)).to_numpy()
    stat = {}
    for c in ("n", "mean", "m2"):
        stat[c + "_b"] = np.where(exact, m[f"s_{c}_b"], m[f"c_{c}_b"]).astype(float)
        stat[c + "_n"] = np.where(exact, m[f"s_{c}_n"], m[f"c_{c}_n"]).astype(float)
    p_samples, dlt = welch(stat["n_b"], stat["mean_b"], stat["m2_b"], stat["n_n"], stat["mean_n"], stat["m2_n"])
    agree = np.sign(-dlt) == np.sign(g)  # the test's direction (log time down = better) agrees with the medians'

    # host-timed rows with several BASE runs: prediction t-test against the pooled between-run variance
    ht = (out["timing"] == "host").to_numpy()
    var_runs = m["var_runs"].to_numpy(dtype=float)
    grp = (out["suite"].astype(str) + "/" + out["method"].astype(str) + "/" + out["direction"].astype(str))
    dfr = np.where(ht & (k >= 2) & np.isfinite(var_runs), k - 1.0, 0.0)
    pooled = pd.DataFrame({"grp": grp, "w": dfr * np.nan_to_num(var_runs), "df": dfr}).groupby("grp").transform("sum")
    with np.errstate(invalid="ignore", divide="ignore"):
        s2 = np.fmax(pooled["w"].to_numpy() / pooled["df"].to_numpy(), np.where(dfr > 0, var_runs, np.nan))
        t_runs = g / np.sqrt(s2 * (1.0 + 1.0 / k))
    p_runs = t_pvalue(t_runs, pooled["df"].to_numpy())
    p_runs = np.where((s2 == 0) & (dfr > 0), np.where(g == 0, 1.0, 0.0), p_runs)

    use_runs = ht & (nb > 1)
    p = np.where(use_runs, p_runs, p_samples)
    out["p"] = np.where(matched, p, np.nan)
    out["test"] = np.where(~matched, "", np.where(use_runs, "runs", np.where(exact, "samples", "cv")))

    # verdicts, in order of precedence
    big = np.abs(g) > math.log1p(threshold)
    beyond_runs = np.where(k >= 2, np.abs(g) > spread, True)
    sig = (p < alpha) & np.where(use_runs, True, agree)
    verified_b = m["verified_b"].fillna(False).astype(bool).to_numpy()
    verified_n = m["verified_n"].fillna(False).astype(bool).to_numpy()
    imp_b = m["impossible_b"].fillna("").astype(str).to_numpy()
    imp_n = m["impossible_n"].fillna("").astype(str).to_numpy()
    no_value = ~(np.isfinite(lvb) & np.isfinite(lvn))
    enough = np.where(use_runs, dfr > 0, np.isfinite(p_samples))
    verdict = np.full(len(m), "unchanged", dtype=object)
    note = np.full(len(m), "", dtype=object)
    better = g > 0
    rules = [
        (only_base, "missing", "in BASE, not in NEW"),
        (only_new, "new", "only in NEW"),
        ((out["kind"] == "error").to_numpy(), "not judged", "error-path row"),
        (imp_n != "", "not judged", "above a physical ceiling in NEW"),
        (imp_b != "", "not judged", "above a physical ceiling in BASE"),
        (verified_b & ~verified_n, "regression", "unverified in NEW"),
        (~verified_b & verified_n, "improvement", "verified in NEW only"),
        (~verified_b & ~verified_n, "not judged", "unverified in both"),
        (no_value, "not judged", "no value to compare"),
        (ht & (nb == 1), "not judged", "host-timed: give 2+ BASE runs"),
        (ht & (nb > 1) & (k < 2), "not judged", "host-timed: in fewer than 2 BASE runs"),
        (~enough, "not judged", "fewer than 2 samples"),
        (~big, "unchanged", f"within ±{100 * threshold:g}%"),
        (~beyond_runs, "unchanged", "within the BASE runs' spread"),
        (~sig, "unchanged", "not significant"),
        (better, "improvement", ""),
        (~better, "regression", ""),
    ]
    done = np.zeros(len(m), dtype=bool)
    for mask, v, why in rules:
        sel = mask & ~done
        verdict[sel], note[sel] = v, why
        done |= sel
    out["verdict"], out["note"] = verdict, note
    out["impossible"] = np.where(imp_n != "", imp_n, np.where(imp_b != "", "BASE: " + imp_b, ""))
    out.loc[~matched, ["p", "ratio", "change", "gain"]] = np.nan
    info["matched"] = int(matched.sum())
    info["approx"] = int(((out["test"] == "cv") & (out["kind"] != "error")).sum())
    order = {"regression": 0, "improvement": 2, "unchanged": 3, "not judged": 4, "missing": 1, "new": 5}
    out["_o"] = out["verdict"].map(order)
    out["_g"] = np.where(out["verdict"] == "improvement", -out["gain"], out["gain"])
    out = out.sort_values(["_o", "_g", "suite", "method", "direction", "bytes"], kind="stable", na_position="last")
    out = out.drop(columns=["_o", "_g"]).reset_index(drop=True)
    warnings = [n for s in sides for n in s.notes]
    for b in bases:
        warnings += meta_warnings(b, new)
    warnings += _same_run_warnings(bases)
    if info["approx"]:
        warnings.append(f"{info['approx']} matched row(s) have no samples_us on a side (runs older than that column): "
                        "judged on the median with the row's cv as the spread (test=cv), a weaker test")
    return Comparison(out, new_imp, warnings, info)


# ------------------------------------------------------------------------------------------- warnings

def _ranks_per_gpu(meta: dict) -> int | None:
    if isinstance(meta.get("ranks_per_gpu"), int):
        return meta["ranks_per_gpu"]
    ranks = meta.get("ranks")
    if not isinstance(ranks, list) or not ranks:
        return None
    c = Counter((r.get("host"), r.get("gpu")) for r in ranks if isinstance(r, dict))
    return max(c.values()) if c else None


def _gpu_models(meta: dict) -> str | None:
    gpus = meta.get("gpus")
    if not isinstance(gpus, dict):
        return None
    c = Counter(str(g.get("name", "?")) for lst in gpus.values() if isinstance(lst, list) for g in lst
                if isinstance(g, dict))
    return ", ".join(f"{n} × {name}" for name, n in sorted(c.items())) or None


def _fmt_opt(v) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}={_fmt_opt(x)}" for k, x in v.items()) + "}"
    return json.dumps(v) if v is None or isinstance(v, bool) else str(v)


def meta_warnings(base: Side, new: Side) -> list[str]:
    """What differs between a BASE run and NEW that makes their numbers less comparable: options (quick,
    sampling rule, samples, min_time_ms), rank counts and ranks per GPU, hosts, GPU models, driver and
    ipcbench versions. One line each."""
    who = f"BASE {base.label} vs NEW {new.label}"
    if not base.meta or not new.meta:
        missing = " and ".join(s for s, side in (("BASE", base), ("NEW", new)) if not side.meta)
        return [f"{who}: no meta.json for {missing}: options, ranks, GPUs and versions not checked"]
    bm, nm = base.meta, new.meta
    out = []
    bo, no = bm.get("options") or {}, nm.get("options") or {}
    diffs = [f"{o} {_fmt_opt(bo.get(o))} vs {_fmt_opt(no.get(o))}" for o in WARN_OPTIONS
             if (o in bo or o in no) and bo.get(o) != no.get(o)]
    if diffs:
        out.append(f"{who}: options differ: " + "; ".join(diffs))
    br, nr = bm.get("ranks"), nm.get("ranks")
    bn, nn = (len(br) if isinstance(br, list) else None), (len(nr) if isinstance(nr, list) else None)
    bpg, npg = _ranks_per_gpu(bm), _ranks_per_gpu(nm)
    if (bn is not None and nn is not None and bn != nn) or (bpg is not None and npg is not None and bpg != npg):
        out.append(f"{who}: rank counts differ: {bn} rank(s), {bpg} per GPU vs {nn} rank(s), {npg} per GPU")
    bh, nh = bm.get("hosts"), nm.get("hosts")
    if bh and nh and sorted(map(str, bh)) != sorted(map(str, nh)):
        out.append(f"{who}: hosts differ: {', '.join(map(str, bh))} vs {', '.join(map(str, nh))}")
    bg, ng = _gpu_models(bm), _gpu_models(nm)
    if bg and ng and bg != ng:
        out.append(f"{who}: GPU models differ: {bg} vs {ng}")
    bd, nd = (bm.get("versions") or {}).get("driver"), (nm.get("versions") or {}).get("driver")
    if bd and nd and bd != nd:
        out.append(f"{who}: driver versions differ: {bd} vs {nd}")
    bv = bm.get("ipcbench_version") or (bm.get("versions") or {}).get("ipcbench")
    nv = nm.get("ipcbench_version") or (nm.get("versions") or {}).get("ipcbench")
    if bv and nv and bv != nv:
        out.append(f"{who}: ipcbench versions differ: {bv} vs {nv}")
    return out


def _same_run_warnings(bases: list[Side]) -> list[str]:
    seen: dict[str, str] = {}
    out = []
    for b in bases:
        rid = str((b.meta or {}).get("run_id") or "") + "|" + str((b.meta or {}).get("start") or "")
        if rid != "|" and rid in seen:
            out.append(f"BASE {b.label} is the same run as BASE {seen[rid]}: the between-run spread is understated")
        seen.setdefault(rid, b.label)
    return out


# ------------------------------------------------------------------------------------------- output

def _pair(r) -> str:
    pair = f"{r.src_gpu}→{r.dst_gpu}" if r.src_gpu >= 0 and r.dst_gpu >= 0 else "all"
    return pair + (" (same GPU)" if r.same_gpu else "")


def _num(v, unit) -> str:
    if v is None or v != v:
        return ""
    if unit == "GB/s":
        return f"{v:.1f}" if v >= 1 else f"{v:.3g}"
    return f"{v:.0f}" if v >= 1000 else f"{v:.3g}"


def _p(v) -> str:
    if v is None or v != v:
        return ""
    return "<0.001" if v < 0.001 else f"{v:.3f}"


_HEAD = ["method", "direction", "host", "pair", "size", "unit", "base", "new", "change", "factor", "p", "test",
         "verdict", "note"]
_NUMERIC = [False] * 4 + [True, False, True, True, True, True, True, False, False, False]


def _cells(r) -> list[str]:
    change = "" if r.change != r.change else f"{100 * r.change:+.1f}%"
    factor = "" if r.gain != r.gain else f"{math.exp(abs(r.gain)):.3f}x"
    return [f"{r.suite}/{r.method}", r.direction, str(r.host), _pair(r), fmt_size(int(r.bytes)), r.unit,
            _num(r.base, r.unit), _num(r.new, r.unit), change, factor, _p(r.p), r.test, r.verdict, r.note]


def _groups(rows) -> list[str]:
    """Missing or new rows, one line per suite/method/direction: how many, which sizes and pairs."""
    lines = []
    for (suite, method, direction), g in rows.groupby(["suite", "method", "direction"], sort=True):
        sizes = sorted(set(int(b) for b in g["bytes"]))
        size = fmt_size(sizes[0]) + (f"–{fmt_size(sizes[-1])}" if len(sizes) > 1 else "")
        pairs = sorted(set(_pair(r) for r in g.itertuples()))
        lines.append(f"{suite}/{method} {direction}: {len(g)} row(s), {len(sizes)} size(s) {size}, "
                     f"pair(s) {', '.join(pairs[:6])}{' …' if len(pairs) > 6 else ''}")
    if len(lines) > MAX_LISTED:
        lines = lines[:MAX_LISTED] + [f"… and {len(lines) - MAX_LISTED} more (--format csv lists every row)"]
    return lines


def _impossible_table(imp):
    """NEW's rows above a ceiling, one line per reason (an all-to-all sum names every flow it adds up)."""
    from ipcbench.report.render import Table

    rows = []
    for (host, suite, method, direction, size, reason), g in imp.groupby(
            ["host", "suite", "method", "direction", "bytes", "reason"], sort=True):
        pairs = sorted(set(_pair(r) for r in g.itertuples()))
        rows.append([f"{suite}/{method}", direction, str(host), ", ".join(pairs), fmt_size(int(size)), str(len(g)),
                     _num(float(g["value_gbps"].iloc[0]), "GB/s"), _num(float(g["ceiling_gbps"].iloc[0]), "GB/s"),
                     reason])
    return Table(["method", "direction", "host", "pair(s)", "size", "rows", "GB/s", "ceiling GB/s", "reason"],
                 rows[:MAX_LISTED], terminal=True, numeric=[False] * 4 + [True] * 4 + [False]), len(rows)


def summary_line(c: Comparison) -> str:
    n = c.counts()
    info = c.info
    parts = ", ".join(f"{n[v]} {v}" for v in VERDICTS) + f", {n['impossible']} impossible"
    base = f"{info['base_runs']} BASE run(s)"
    return (f"{info['matched']} rows matched ({info['mode']}; {base}; threshold {100 * info['threshold']:g}%, "
            f"alpha {info['alpha']:g}{'; --subset' if info['subset'] else ''}): {parts}")


def verdict_line(c: Comparison) -> str:
    fail = c.failures()
    if not fail:
        extra = " (rows missing from NEW allowed by --subset)" if c.counts()["missing"] else ""
        return "verdict: no regression" + extra
    words = {"regression": "row(s) worse", "missing": "row(s) missing from NEW",
             "impossible": "NEW row(s) above a physical ceiling"}
    what = ", ".join(f"{v} {words[k]}" for k, v in fail.items())
    return f"verdict: {'REGRESSION' if 'regression' in fail else 'FAIL'} ({what})"


def _blocks(c: Comparison) -> list:
    """The text/md document: warnings, changed rows, impossible rows, missing/new/not-judged summaries."""
    from ipcbench.report.render import Heading, Para, Table

    t = c.table
    blocks = []
    for w in c.warnings:
        blocks.append(Para(f"warning: {w}", terminal=True))
    changed = t[t["verdict"].isin(["regression", "improvement"])]
    blocks.append(Heading(3, f"Changed rows: {len(changed)}", terminal=True))
    if len(changed):
        blocks.append(Table(_HEAD, [_cells(r) for r in changed.head(MAX_LISTED).itertuples()], terminal=True,
                            numeric=_NUMERIC))
        if len(changed) > MAX_LISTED:
            blocks.append(Para(f"… and {len(changed) - MAX_LISTED} more (--format csv lists every row)",
                               terminal=True))
    imp = c.impossible
    if len(imp):
        blocks.append(Heading(3, f"Impossible numbers in NEW (above a physical ceiling): {len(imp)} row(s)",
                              terminal=True))
        table, n = _impossible_table(imp)
        blocks.append(table)
        if n > MAX_LISTED:
            blocks.append(Para(f"… and {n - MAX_LISTED} more", terminal=True))
    for verdict, title in (("missing", "Missing from NEW" + (" (allowed by --subset)" if c.info["subset"] else "")),
                           ("new", "Only in NEW")):
        rows = t[t["verdict"] == verdict]
        if len(rows):
            blocks.append(Heading(3, f"{title}: {len(rows)} row(s)", terminal=True))
            blocks += [Para(f"- {line}", terminal=True) for line in _groups(rows)]
    nj = t[t["verdict"] == "not judged"]
    if len(nj):
        blocks.append(Heading(3, f"Not judged: {len(nj)} row(s)", terminal=True))
        for why, g in nj.groupby("note", sort=True):
            methods = sorted(set(g["suite"] + "/" + g["method"]))
            blocks.append(Para(f"- {why}: {len(g)} ({', '.join(methods[:16])}{' …' if len(methods) > 16 else ''})",
                               terminal=True))
    blocks.append(Para(summary_line(c), terminal=True))
    return blocks


def render(c: Comparison, fmt: str) -> str:
    from ipcbench.report.render import to_markdown, to_text

    if fmt == "csv":
        cols = ["suite", "method", "direction", "host", "src_gpu", "dst_gpu", "same_gpu", "bytes", "seq", "kind",
                "timing", "unit", "base", "new", "ratio", "change", "p", "test", "base_runs", "spread", "verdict", "note",
                "impossible"]
        return c.table[cols].to_csv(index=False, float_format="%.6g")
    blocks = _blocks(c)
    if fmt == "md":
        return f"**{verdict_line(c)}**\n\n" + to_markdown(blocks)
    return to_text(blocks).rstrip() + "\n" + verdict_line(c) + "\n"


def run(args) -> int:
    """Entry point for `ipcbench compare`; returns the exit status (0 ok, 1 failed gate, 2 bad input)."""
    try:
        threshold = threshold_arg(args.threshold) if isinstance(args.threshold, str) else args.threshold
        alpha = getattr(args, "alpha", DEFAULT_ALPHA)
        alpha = alpha_arg(alpha) if isinstance(alpha, str) else alpha
        base_paths = args.base if isinstance(args.base, (list, tuple)) else [args.base]
        bases = [load(p) for p in base_paths]
        new = load(args.new)
        result = compare(bases, new, threshold, alpha, subset=bool(getattr(args, "subset", False)))
    except (CompareError, argparse.ArgumentTypeError) as e:
        print(f"ipcbench compare: error: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(render(result, args.format))
    if args.format == "csv":
        for w in result.warnings:
            print(f"ipcbench compare: warning: {w}", file=sys.stderr)
        print(summary_line(result), file=sys.stderr)
        print(verdict_line(result), file=sys.stderr)
    return result.exit_code
