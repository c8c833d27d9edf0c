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
* Time-sliced hand-offs (report/significance.slice_timed: same-GPU rows without MPS of methods whose time
  is a hand-off between the two processes' kernels) are the GPU scheduler's time slice: judged like
  host-timed rows ("time-sliced hand-off (same GPU, no MPS): give 2+ BASE runs").
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
import math
import sys
from dataclasses import dataclass, field

from ipcbench.report.matching import (VALUE_COLS, CompareError, Side, _combine_bases, _identities, _prepare,
                                      _same_run_warnings, load, meta_warnings)
from ipcbench.report.significance import t_pvalue, welch
from ipcbench.sizes import fmt_size

DEFAULT_ALPHA = 0.01
VERDICTS = ("regression", "improvement", "unchanged", "not judged", "missing", "new")
MAX_LISTED = 40  # rows per section in text/md (csv lists every row)


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
    # time-sliced on either side (a run without MPS against one with it): judged by the between-run variation
    sliced = (m["slice_timed_b"].fillna(False).astype(bool) | m["slice_timed_n"].fillna(False).astype(bool)).to_numpy()
    out["timing"] = np.where(pick("host_timed").astype(bool), "host", np.where(sliced, "slice", "device"))
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
    ht = (out["timing"] != "device").to_numpy()  # host-timed or time-sliced: needs the between-run variation
    why_runs = np.where(out["timing"] == "slice", "time-sliced hand-off (same GPU, no MPS)", "host-timed")
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
        (ht & (nb == 1), "not judged", np.char.add(why_runs.astype(str), ": give 2+ BASE runs")),
        (ht & (nb > 1) & (k < 2), "not judged", np.char.add(why_runs.astype(str), ": in fewer than 2 BASE runs")),
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
        verdict[sel], note[sel] = v, (why[sel] if isinstance(why, np.ndarray) else why)
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
                "timing", "unit", "base", "new", "ratio", "change", "p", "test", "base_runs", "spread", "verdict",
                "note", "impossible"]
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
