"""`ipcbench compare BASE [BASE ...] NEW`: a statistical compare of runs, usable as a CI regression gate.

The last path is NEW, every path before it a BASE run of the reference code. Rows are matched on (suite,
method, direction, GPUs, bytes) and judged in their natural unit: a change counts when it is larger than
--threshold (default 2%) and than what the row is known to move between runs of the same code (one BASE: both
rows' noise summed; several: the BASE runs' spread, never below both sides' noise; runs older than the
between-runs noise: their within-run noise and the between-runs floor of the row's kind combined, as the
current code writes it: catalogue/noise.py, each side by its own GPU model). Host-timed and time-sliced rows
need several BASE runs and a t-test on their between-run variation. docs/report.md gives every rule; matching.py and
significance.py hold the pieces. Exit status: 0 nothing regressed, 1 a regression, a row missing from NEW
(without --subset), an impossible or an invalid NEW row, 2 bad input (one line on stderr). pandas only when
comparing.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field

from ipcbench.errors import ResultsError, UsageError
from ipcbench.record.run import Run, load_run, locate
from ipcbench.record.table import Frame
from ipcbench.report.evidence_view import compare_warnings
from ipcbench.report.matching import VALUE_COLS, combine_bases, identities, meta_warnings, prepare
from ipcbench.report.significance import (BANDS, between_runs_floor, honest_noise, row_kinds, size_band,
                                          t_pvalue, welch)
from ipcbench.sizes import fmt_size

DEFAULT_ALPHA = 0.01
# The smallest change that counts whatever the noise: 2%, so a 3% change of a large transfer (its noise ~0.3%)
# fails the gate; the recorded runs of unchanged code pass at 0% (tests/test_compare_h100x2.py).
DEFAULT_THRESHOLD = 0.02
VERDICTS = ("regression", "improvement", "unchanged", "not judged", "missing", "new")
MAX_LISTED = 40  # rows per section in text/md (csv lists every row)
CSV_COLUMNS = ["suite", "method", "direction", "host", "src_gpu", "dst_gpu", "same_gpu", "bytes", "seq", "kind",
               "timing", "sliced", "unit", "base", "new", "ratio", "change", "p", "test", "base_runs", "spread",
               "verdict", "note", "impossible", "bound", "rule", "invalid"]
# the noise rule that judged the rows, by the runs' noise basis (meta.json "noise_basis"; docs/report.md)
NOISE_RULES = {"between-runs": "between-runs noise",
               "within-run": "within-run noise + between-runs floors for runs older than the between-runs noise"}
ENGINE_ORDER = ("ce", "sm", "sm_bulk", "nccl", "shm", "event", "mpi", "api")


def _fraction(text: str, what: str, low: float, high: float, example: str) -> float:
    """'0.05' or '5%' -> 0.05, within [low, high) (threshold) or (low, high] (alpha)."""
    t = str(text).strip()
    try:
        v = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a {what}: {text!r} (use e.g. {example})") from None
    if not (low <= v < high if what == "threshold" else low < v <= high):
        raise argparse.ArgumentTypeError(f"{what} {text!r} out of range: use e.g. {example}")
    return v


def threshold_arg(text: str) -> float:
    return _fraction(text, "threshold", 0.0, 1.0, "0.05 or 5%")


def alpha_arg(text: str) -> float:
    return _fraction(text, "significance level", 0.0, 0.5, "0.01")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", nargs="+", metavar="BASE",
                        help="the reference: one or several run directories (or results.csv files) of the same "
                             "code; several give the between-run variation that host-timed rows need")
    parser.add_argument("new", metavar="NEW", help="the run to judge (the last path)")
    parser.add_argument("--threshold", type=threshold_arg, default=DEFAULT_THRESHOLD, metavar="FRACTION",
                        help="smallest change that counts, as a fraction or a percentage (default 0.02 = 2%%); "
                             "a change must also exceed what its row is known to move between runs")
    parser.add_argument("--alpha", type=alpha_arg, default=DEFAULT_ALPHA, metavar="P",
                        help="significance level of the t-test that judges host-timed and time-sliced rows "
                             f"against several BASE runs (default {DEFAULT_ALPHA})")
    parser.add_argument("--subset", action="store_true",
                        help="NEW is deliberately a subset of BASE: rows missing from NEW are listed but do not "
                             "fail the gate")
    parser.add_argument("--format", choices=("text", "md", "csv"), default="text",
                        help="output format (default text)")


def load(path) -> Run:
    """One run of the comparison (a run directory, a tree holding one run, or a CSV file)."""
    return load_run(locate(path))


def noise_basis(run: Run) -> str:
    """The run's noise basis: "between-runs" when its meta.json says its `noise` covers how far a row moves
    between runs of the same code on the same node, else "within-run" (runs older than that, a CSV without
    meta.json): the too small noise of the old sampler. Meta.noise_basis where the reader has it, else
    meta.json's key."""
    basis = getattr(run.meta, "noise_basis", None) or run.meta.raw.get("noise_basis")
    return "between-runs" if basis == "between-runs" else "within-run"


@dataclass
class Comparison:
    """The outcome: `table` has one row per key (matched, missing from NEW, or new; `invalid` names NEW's
    invalid values), `impossible` NEW's rows above a physical ceiling (ceilings.py), `warnings` what differs
    between the runs, `info` the settings, the noise rule and per kind of row the smallest change caught."""

    table: Frame
    impossible: Frame
    warnings: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        v = self.table["verdict"].value_counts()
        out = {k: int(v.get(k, 0)) for k in VERDICTS}
        out["impossible"] = len(self.impossible)
        out["invalid"] = int((self.table["invalid"] != "").sum()) if "invalid" in self.table.columns else 0
        return out

    def failures(self) -> dict[str, int]:
        c = self.counts()
        fail = {"regression": c["regression"], "impossible": c["impossible"], "invalid": c["invalid"]}
        fail["missing"] = 0 if self.info.get("subset") else c["missing"]
        return {k: v for k, v in fail.items() if v}

    @property
    def exit_code(self) -> int:
        return 1 if self.failures() else 0


def compare(bases: list[Run], new: Run, threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA,
            subset: bool = False) -> Comparison:
    """Judge NEW against one or several BASE runs (docs/report.md). Pure over the runs' frames and metas;
    UsageError when the runs share no row."""
    import numpy as np

    bases, said = _distinct(bases, new)
    m, new_imp, mode = _matched(bases, new)
    basis = "between-runs" if all(noise_basis(r) == "between-runs" for r in [*bases, new]) else "within-run"
    info = {"mode": mode, "base_runs": len(bases), "base_rows": [len(b.frame) for b in bases],
            "new_rows": len(new.frame), "threshold": threshold, "alpha": alpha, "subset": subset,
            "base_labels": [b.label for b in bases], "new_label": new.label,
            "noise_basis": basis, "noise_rule": NOISE_RULES[basis]}
    matched = (m["_merge"] == "both").to_numpy()
    if not matched.any():
        raise UsageError(f"no common rows between BASE and NEW ({mode}; "
                         f"{' + '.join(map(str, info['base_rows']))} and {info['new_rows']} rows)")
    out = _keys(m)
    g = _change(m, out)
    p, exact, use_runs, enough = _significance(m, out, g, len(bases))
    out["p"] = np.where(matched, p, np.nan)
    out["test"] = np.where(~matched, "", np.where(use_runs, "runs", np.where(exact, "samples", "cv")))
    bound, rule, unchanged_why, no_noise = _bounds(m, out, len(bases), basis == "within-run",
                                                   (_gpu_model(bases[0]), _gpu_model(new)))
    verdict, note, valued = _verdicts(m, out, g, bound, unchanged_why, p < alpha, enough, threshold, len(bases))
    note = np.where(valued & (no_noise != ""), np.where(note == "", no_noise, note + "; " + no_noise), note)
    out["verdict"], out["note"] = verdict, note
    out["bound"] = np.where(valued, bound, np.nan)
    out["rule"] = np.where(valued, rule, "")
    imp_b, imp_n = (m[f"impossible_{s}"].fillna("").astype(str).to_numpy() for s in "bn")
    out["impossible"] = np.where(imp_n != "", imp_n, np.where(imp_b != "", "BASE: " + imp_b, ""))
    out["invalid"] = m["bad_n"].fillna("").astype(str).to_numpy()
    out.loc[~matched, ["p", "ratio", "change", "gain"]] = np.nan
    info["matched"] = int(matched.sum())
    info["no_noise"] = int((valued & (no_noise != "")).sum())
    info["catches"] = _catches(out[valued], threshold)
    return Comparison(_worst_first(out), new_imp, _incomplete(bases, new) + said + _warnings(bases, new, info), info)


def _distinct(bases: list[Run], new: Run) -> tuple[list[Run], list[str]]:
    """The BASE runs, each once (a run given twice would count its own numbers as the between-run spread), and
    what was said about it; UsageError when NEW is one of them: a run compared with itself passes any gate."""
    if not bases:
        raise UsageError("no BASE run")
    for b in bases:
        if b.identity == new.identity:
            raise UsageError(f"NEW {new.label} is the same run as BASE {b.label} (the same file, or the same run id "
                             "and start in meta.json): a run always matches itself; give the run to judge as NEW")
    out: dict[str, Run] = {}
    said = []
    for b in bases:
        if b.identity in out:
            said.append(f"BASE {b.label} is the same run as BASE {out[b.identity].label}: counted once")
        out.setdefault(b.identity, b)
    return list(out.values()), said


# beside matching.VALUE_COLS: the row's kind, its noise, its within-run noise (`within`: a run's own samples, to be
# combined with today's floors; NaN where a run states only a noise that holds the floors already), its invalid value
EXTRA_COLS = ["engine", "noise", "within", "bad"]


def _matched(bases: list[Run], new: Run):
    """(every key of BASE and NEW side by side with suffixes _b and _n and `_merge`, NEW's impossible rows,
    how GPUs were matched). Several BASE runs: their largest noise and every invalid value of a row."""
    import pandas as pd

    runs = list(bases) + [new]
    ids, key, mode = identities(runs)
    prepared = [prepare(r, src, dst, key) for r, (src, dst) in zip(runs, ids)]
    mkey = key + ["seq"]
    for (k, _), r in zip(prepared, runs):
        k["bad"] = _invalid_values(k)
        k["within"] = _within_noise(k, r)
    base = combine_bases([p for p, _ in prepared[:-1]], mkey)
    extra = pd.concat([p[mkey + EXTRA_COLS] for p, _ in prepared[:-1]], ignore_index=True)
    extra = extra.groupby(mkey, sort=False, dropna=False).agg(  # a dict: agg's own `engine` is numba's
        {"engine": "first", "noise": "max", "within": "max", "bad": lambda s: "; ".join(x for x in s if x)})
    base = base.merge(extra.reset_index(), on=mkey, how="left")
    newv = prepared[-1][0][mkey + VALUE_COLS + EXTRA_COLS]
    return base.merge(newv, on=mkey, how="outer", suffixes=("_b", "_n"), indicator=True), prepared[-1][1], mode


def _invalid_values(k):
    """Each row's invalid value, named (COMMON interface: the reader's `invalid` column, record/run.py): the
    reader's message where it gave one, else the judged value (GB/s or µs median) when it is empty (NaN),
    infinite, zero or negative: a number no measurement gives. Error-path rows carry no value to judge; a
    value above a physical ceiling (an infinite rate) is counted as impossible, once."""
    import numpy as np

    said = k["invalid"].fillna("").astype(str).to_numpy() if "invalid" in k.columns else np.full(len(k), "")
    v = k["value"].to_numpy(dtype=float)
    col = np.where(k["kind"].to_numpy() == "bandwidth", "bw_gbps_median", "time_us_median")
    what = np.where(np.isnan(v), "is empty or NaN", np.where(np.isinf(v), "is infinite",
                    np.where(v < 0, "is negative", np.where(v == 0, "is zero", ""))))
    what = np.where((k["kind"].to_numpy() == "error") | (k["impossible"].to_numpy() != ""), "", what)
    mine = [f"{c} {x:g} {w}" if w and np.isfinite(x) else (f"{c} {w}" if w else "")
            for c, x, w in zip(col, v, what)]
    return np.where(said != "", said, np.array(mine, dtype=object))


def _keys(m):
    """The output's identifying columns: NEW's values where NEW has the row, else BASE's."""
    import numpy as np
    import pandas as pd

    def pick(col):
        return m[f"{col}_n"].where(m[f"{col}_n"].notna(), m[f"{col}_b"])

    out = pd.DataFrame({c: m[c] for c in ["suite", "method", "direction"]})
    for c in ("host", "src_gpu", "dst_gpu", "same_gpu", "kind", "unit", "timing"):
        out[c] = pick(c)
    out = out.astype({"src_gpu": "int64", "dst_gpu": "int64", "same_gpu": bool})
    out["bytes"] = m["bytes"].astype("int64")
    out["seq"] = m["seq"].astype("int64")
    # time-sliced on either side (a run without MPS against one with it), so the verdict stays symmetric
    out["sliced"] = (m["sliced_b"].fillna(False).astype(bool) | m["sliced_n"].fillna(False).astype(bool)).to_numpy()
    # judged by the variation between BASE runs: host-timed or time-sliced rows
    out["_runs_why"] = np.where(pick("host_timed").astype(bool), "host-timed",
                                np.where(out["sliced"], "time-sliced hand-off (same GPU, no MPS)", ""))
    out["base"] = m["value_b"].to_numpy(dtype=float)
    out["new"] = m["value_n"].to_numpy(dtype=float)
    out["base_runs"] = m["runs"].fillna(0).astype("int64")
    return out


def _change(m, out):
    """g = the log ratio in the row's unit, > 0 better; the BASE runs' spread; ratio and change."""
    import numpy as np

    lvb, lvn = m["lv_b"].to_numpy(dtype=float), m["lv_n"].to_numpy(dtype=float)
    g = np.where((out["kind"] == "bandwidth").to_numpy(), lvn - lvb, lvb - lvn)
    with np.errstate(invalid="ignore", over="ignore"):
        out["ratio"] = np.exp(lvn - lvb)
    out["change"] = out["ratio"] - 1.0
    out["gain"] = g
    k = m["k"].fillna(0).to_numpy(dtype=float)
    out["spread"] = np.expm1(np.where(k >= 2, (m["lv_max"] - m["lv_min"]).to_numpy(dtype=float), np.nan))
    return g


def _significance(m, out, g, nb: int):
    """(p, exact, use_runs, enough): for rows that need it with several BASE runs (host-timed, time-sliced), a
    prediction t-test of NEW's median against the pooled variance of the BASE runs' log medians (never below
    the row's own): part of their verdict. For every other row Welch's test on the samples (exact where both
    sides have them, else the cv approximation), printed and never deciding: rows move between runs by more
    than their samples vary, so in-run samples call any such move significant (docs/report.md)."""
    import numpy as np
    import pandas as pd

    exact = (m["exact_b"].fillna(False).astype(bool) & m["exact_n"].fillna(False).astype(bool)).to_numpy()
    stat = {f"{c}_{s}": np.where(exact, m[f"s_{c}_{s}"], m[f"c_{c}_{s}"]).astype(float)
            for c in ("n", "mean", "m2") for s in "bn"}
    p_samples, _ = welch(stat["n_b"], stat["mean_b"], stat["m2_b"], stat["n_n"], stat["mean_n"], stat["m2_n"])
    ht = (out["_runs_why"] != "").to_numpy()
    k = m["k"].fillna(0).to_numpy(dtype=float)
    var_runs = m["var_runs"].to_numpy(dtype=float)
    grp = out["suite"].astype(str) + "/" + out["method"].astype(str) + "/" + out["direction"].astype(str)
    dfr = np.where(ht & (k >= 2) & np.isfinite(var_runs), k - 1.0, 0.0)
    pooled = pd.DataFrame({"grp": grp, "w": dfr * np.nan_to_num(var_runs), "df": dfr}).groupby("grp").transform("sum")
    with np.errstate(invalid="ignore", divide="ignore"):
        s2 = np.fmax(pooled["w"].to_numpy() / pooled["df"].to_numpy(), np.where(dfr > 0, var_runs, np.nan))
        t_runs = g / np.sqrt(s2 * (1.0 + 1.0 / k))
    p_runs = t_pvalue(t_runs, pooled["df"].to_numpy())
    p_runs = np.where((s2 == 0) & (dfr > 0), np.where(g == 0, 1.0, 0.0), p_runs)
    use_runs = ht & (nb > 1)
    enough = np.where(use_runs, dfr > 0, np.isfinite(p_samples))
    return np.where(use_runs, p_runs, p_samples), exact, use_runs, enough


def _within_noise(frame, run: Run):
    """The row's within-run noise: `noise_within` where the run wrote it (schema 3), its `noise` where that was the
    within-run noise alone (runs older than the between-runs noise), else NaN (a run whose `noise` already holds
    its floors and does not say how much is its own)."""
    noise = frame["noise"].astype(float)
    written = frame["noise_within"].astype(float) if "noise_within" in frame.columns else noise * float("nan")
    return written.where(written.notna(), noise if noise_basis(run) == "within-run" else written)


def _gpu_model(run: Run) -> str:
    """The GPU model whose floors judge a run's rows (catalogue/noise.py): its most common; "" where it recorded
    none (then the floors are the largest known). Each side of a compare takes its own run's, so that swapping
    BASE and NEW swaps the verdicts and nothing else."""
    names = [g.name for gs in run.meta.gpus.values() for g in gs if g.name and g.name != "?"]
    return max(set(names), key=names.count) if names else ""


def _bounds(m, out, nb: int, old: bool, gpu_models: tuple[str, str] = ("", "")):
    """(bound, rule, unchanged_why, no_noise) of every row: the relative change it must exceed besides
    --threshold, what set it, the note of a row inside it, and which side's noise was missing.

    A row's honest noise is its `noise` (a relative half-width: where a run's median lies); for runs older
    than the between-runs noise (`old`) their within-run noise and the between-runs floor of their kind combined
    as the current code states it (catalogue/noise.combined; time-sliced rows have a level of their own); missing
    (empty, NaN, negative) it is the floor, never zero.
    One BASE: the sum of both rows' honest noise. Several BASE runs (the row in 2+ of them): the BASE runs'
    spread (max/min of their medians - 1), never below what one BASE would allow (the sum of both sides' honest
    noise: more BASE runs never make the gate stricter than their noise says); host-timed and time-sliced rows
    the same, with a t-test on their between-run variation besides (rule "runs")."""
    import numpy as np

    engine = m["engine_n"].where(m["engine_n"].notna(), m["engine_b"]).fillna("").astype(str).to_numpy()
    engine = np.where(out["sliced"].to_numpy(dtype=bool), "time-sliced", engine)
    nbytes = out["bytes"].to_numpy()
    timing = out["timing"].fillna("").astype(str).to_numpy()
    sliced, same = out["sliced"].to_numpy(dtype=bool), out["same_gpu"].to_numpy(dtype=bool)
    floors = {side: between_runs_floor(model, engine, timing, nbytes, sliced, same)
              for side, model in zip("bn", gpu_models)}
    floor = np.fmax(floors["b"], floors["n"])  # what a note names
    kinds = np.array(row_kinds(engine, nbytes), dtype=object)
    out["_engine"], out["_band"] = np.where(engine == "", "other", engine), size_band(nbytes)

    def honest(side: str):
        """A row's within-run noise combined with today's floor of its kind (catalogue/noise.py: a floor measured
        since the run was made applies to it too); a run that states only a noise holding its floors: that noise;
        neither: the floor alone, never zero."""
        within = m[f"within_{side}"].to_numpy(dtype=float)
        stated = m[f"noise_{side}"].to_numpy(dtype=float)
        has_within = np.isfinite(within) & (within >= 0)
        has_stated = np.isfinite(stated) & (stated >= 0)
        f = floors[side]
        combined = honest_noise(np.where(has_within, within, np.nan), f)
        return np.where(has_within, combined, np.where(has_stated, stated, f)), ~has_within & ~has_stated

    hb, miss_b = honest("b")
    hn, miss_n = honest("n")
    k = m["k"].fillna(0).to_numpy(dtype=float)
    spread = np.expm1(np.where(k >= 2, (m["lv_max"] - m["lv_min"]).to_numpy(dtype=float), np.nan))
    runs = (out["_runs_why"] != "").to_numpy()
    several = (nb > 1) & (k >= 2)
    bound = np.where(several, np.fmax(spread, hb + hn), hb + hn)
    rule = np.where(runs, "runs", np.where(several, "spread", "noise+floor" if old else "noise"))
    why = np.where(several & (spread >= hb + hn), "within the BASE runs' spread", "within the rows' noise")
    sides = np.where(miss_b & miss_n, "BASE and NEW", np.where(miss_b, "BASE", np.where(miss_n, "NEW", "")))
    no_noise = np.array([f"no noise in {s}: the {kd} floor ±{_pct(f)}" if s else ""
                         for s, kd, f in zip(sides, kinds, floor)], dtype=object)
    return bound, rule, why, no_noise


def _verdicts(m, out, g, bound, unchanged_why, sig, enough, threshold: float, nb: int):
    """(verdict, note, valued) of every row: the first rule that holds, in order of precedence; `valued`: the
    rows judged by the size of their change (threshold and bound), the others decided before."""
    import numpy as np

    verified_b, verified_n = (m[f"verified_{s}"].fillna(False).astype(bool).to_numpy() for s in "bn")
    imp_b, imp_n = (m[f"impossible_{s}"].fillna("").astype(str).to_numpy() for s in "bn")
    bad_b, bad_n = (m[f"bad_{s}"].fillna("").astype(str).to_numpy() for s in "bn")
    k = m["k"].fillna(0).to_numpy(dtype=float)
    why_runs = out["_runs_why"].to_numpy(dtype=str)
    ht = why_runs != ""
    lvb, lvn = m["lv_b"].to_numpy(dtype=float), m["lv_n"].to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        beyond = np.abs(g) > np.log1p(bound)
    before = [
        ((m["_merge"] == "left_only").to_numpy(), "missing", "in BASE, not in NEW"),
        ((m["_merge"] == "right_only").to_numpy(), "new", "only in NEW"),
        ((out["kind"] == "error").to_numpy(), "not judged", "error-path row"),
        (imp_n != "", "not judged", "above a physical ceiling in NEW"),
        (imp_b != "", "not judged", "above a physical ceiling in BASE"),
        (bad_n != "", "not judged", "invalid in NEW"),
        (bad_b != "", "not judged", np.char.add("invalid in BASE: ", bad_b.astype(str))),
        (verified_b & ~verified_n, "regression", "unverified in NEW"),
        (~verified_b & verified_n, "improvement", "verified in NEW only"),
        (~verified_b & ~verified_n, "not judged", "unverified in both"),
        (~(np.isfinite(lvb) & np.isfinite(lvn)), "not judged", "no value to compare"),
        (ht & (nb == 1), "not judged", np.char.add(why_runs, ": give 2+ BASE runs")),
        (ht & (nb > 1) & (k < 2), "not judged", np.char.add(why_runs, ": in fewer than 2 BASE runs")),
        (ht & ~enough, "not judged", "fewer than 2 samples"),
    ]
    by_value = [
        (~(np.abs(g) > math.log1p(threshold)), "unchanged", f"within ±{100 * threshold:g}%"),
        (~beyond, "unchanged", unchanged_why.astype(str)),
        (ht & ~sig, "unchanged", "not significant"),
        (g > 0, "improvement", ""),
        (np.ones(len(m), dtype=bool), "regression", ""),
    ]
    verdict = np.full(len(m), "unchanged", dtype=object)
    note = np.full(len(m), "", dtype=object)
    done = np.zeros(len(m), dtype=bool)
    for mask, v, why in before:
        sel = mask & ~done
        verdict[sel], note[sel] = v, (why[sel] if isinstance(why, np.ndarray) else why)
        done |= sel
    valued = ~done
    for mask, v, why in by_value:
        sel = mask & ~done
        verdict[sel], note[sel] = v, (why[sel] if isinstance(why, np.ndarray) else why)
        done |= sel
    return verdict, note, valued


def _catches(rows, threshold: float) -> list[dict]:
    """Per kind of row (engine x size band) judged by the size of its change, the smallest change it would have
    caught: the median over its rows of max(bound, threshold). Ordered by band, then engine."""
    import numpy as np

    out = []
    for (engine, band), g in rows.groupby(["_engine", "_band"], sort=False):
        bar = float(np.nanmedian(np.fmax(g["bound"].to_numpy(dtype=float), threshold)))
        out.append({"kind": f"{engine} {BANDS[int(band)][1]}", "engine": str(engine), "band": BANDS[int(band)][1],
                    "rows": len(g), "smallest_change": bar, "at_threshold": bar <= threshold * (1 + 1e-9)})
    order = {e: i for i, e in enumerate(ENGINE_ORDER)}
    bands = [b[1] for b in BANDS]
    return sorted(out, key=lambda c: (bands.index(c["band"]), order.get(c["engine"], len(order)), c["engine"]))


def _worst_first(out):
    import numpy as np

    order = {"regression": 0, "missing": 1, "improvement": 2, "unchanged": 3, "not judged": 4, "new": 5}
    out = out.assign(_o=out["verdict"].map(order),
                     _g=np.where(out["verdict"] == "improvement", -out["gain"], out["gain"]))
    out = out.sort_values(["_o", "_g", "suite", "method", "direction", "bytes"], kind="stable", na_position="last")
    return out.drop(columns=["_o", "_g", "_runs_why", "_engine", "_band"]).reset_index(drop=True)


def _incomplete(bases: list[Run], new: Run) -> list[str]:
    """Said first: a run that did not complete holds only the rows measured before it stopped."""
    return [f"{side} {r.label} did not complete ({r.incomplete}): it holds only the rows measured before it "
            "stopped; the others are missing from it" for side, r in [("NEW", new)] + [("BASE", b) for b in bases]
            if r.incomplete]


def _warnings(bases: list[Run], new: Run, info: dict) -> list[str]:
    """What differs between the runs."""
    out = [n for r in list(bases) + [new] for n in r.notes]
    for b in bases:
        out += meta_warnings(b, new)
        out += compare_warnings(b.label, b.meta.evidence, new.label, new.meta.evidence)  # the nodes' own evidence
    if info["no_noise"]:
        out.append(f"{info['no_noise']} row(s) have no noise on a side (runs older than that column, or a row "
                   "whose noise could not be estimated): judged with the between-runs floor of their kind")
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


def _pct(v) -> str:
    """0.032 -> '3.2%', 0.135 -> '13.5%', 0.2667 -> '26.7%', 1.5 -> '150%'."""
    if v is None or v != v:
        return ""
    return f"{100 * v:.3g}%" if v < 10 else f"{100 * v:.0f}%"


def _p(v) -> str:
    if v is None or v != v:
        return ""
    return "<0.001" if v < 0.001 else f"{v:.3f}"


_HEAD = ["method", "direction", "host", "pair", "size", "unit", "base", "new", "change", "factor", "bound", "p",
         "test", "verdict", "note"]
_NUMERIC = [False] * 4 + [True, False, True, True, True, True, True, True, False, False, False]


def _cells(r) -> list[str]:
    change = "" if r.change != r.change else f"{100 * r.change:+.1f}%"
    factor = "" if r.gain != r.gain else f"{math.exp(abs(r.gain)):.3f}x"
    bound = "" if r.bound != r.bound else f"±{_pct(r.bound)}"
    return [f"{r.suite}/{r.method}", r.direction, str(r.host), _pair(r), fmt_size(int(r.bytes)), r.unit,
            _num(r.base, r.unit), _num(r.new, r.unit), change, factor, bound, _p(r.p), r.test, r.verdict, r.note]


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


def _invalid_table(rows):
    """NEW's rows with an invalid value, one line each, naming the value."""
    from ipcbench.report.render import Table

    cells = [[f"{r.suite}/{r.method}", r.direction, str(r.host), _pair(r), fmt_size(int(r.bytes)), r.invalid]
             for r in rows.head(MAX_LISTED).itertuples()]
    return Table(["method", "direction", "host", "pair", "size", "invalid value"], cells, terminal=True,
                 numeric=[False] * 4 + [True, False])


def rule_line(c: Comparison) -> str:
    """Which noise rule judged the rows (the runs' noise basis)."""
    return f"noise rule: {c.info['noise_rule']}"


def catches_line(c: Comparison) -> str:
    """What a pass covers: per kind of row, the smallest change the gate would have caught (typical: the median
    over the kind's rows); a size band where every engine is at the threshold said once."""
    thr = c.info["threshold"]
    parts = []
    for _, band in BANDS:
        got = [x for x in c.info.get("catches", []) if x["band"] == band]
        if got and all(x["at_threshold"] for x in got):
            parts.append(f"every engine {band}: {_pct(thr)} (the threshold)")
            continue
        parts += [f"{x['kind']}: {_pct(x['smallest_change'])}" + (" (the threshold)" if x["at_threshold"] else "")
                  for x in got]
    return "smallest change caught (typical per kind of row): " + ("; ".join(parts) or "no row judged by value")


def summary_line(c: Comparison) -> str:
    n = c.counts()
    info = c.info
    parts = ", ".join(f"{n[v]} {v}" for v in VERDICTS) + f", {n['impossible']} impossible, {n['invalid']} invalid"
    base = f"{info['base_runs']} BASE run(s)"
    return (f"{info['matched']} rows matched ({info['mode']}; {base}; threshold {100 * info['threshold']:g}%, "
            f"alpha {info['alpha']:g}{'; --subset' if info['subset'] else ''}): {parts}")


def verdict_line(c: Comparison) -> str:
    fail = c.failures()
    if not fail:
        extra = " (rows missing from NEW allowed by --subset)" if c.counts()["missing"] else ""
        return "verdict: no regression" + extra
    words = {"regression": "row(s) worse", "missing": "row(s) missing from NEW",
             "impossible": "NEW row(s) above a physical ceiling", "invalid": "NEW row(s) with an invalid value"}
    what = ", ".join(f"{v} {words[k]}" for k, v in fail.items())
    return f"verdict: {'REGRESSION' if 'regression' in fail else 'FAIL'} ({what})"


def _blocks(c: Comparison) -> list:
    """The text/md document: warnings, changed rows, impossible rows, missing/new/not-judged summaries."""
    from ipcbench.report.render import Heading, Para, Table

    t = c.table
    blocks: list = [Para(f"warning: {w}", terminal=True) for w in c.warnings]
    changed = t[t["verdict"].isin(["regression", "improvement"])]
    blocks.append(Heading(3, f"Changed rows: {len(changed)}", terminal=True))
    if len(changed):
        blocks.append(Table(_HEAD, [_cells(r) for r in changed.head(MAX_LISTED).itertuples()], terminal=True,
                            numeric=_NUMERIC))
        if len(changed) > MAX_LISTED:
            blocks.append(Para(f"… and {len(changed) - MAX_LISTED} more (--format csv lists every row)",
                               terminal=True))
    if len(c.impossible):
        blocks.append(Heading(3, f"Impossible numbers in NEW (above a physical ceiling): {len(c.impossible)} row(s)",
                              terminal=True))
        table, n = _impossible_table(c.impossible)
        blocks.append(table)
        if n > MAX_LISTED:
            blocks.append(Para(f"… and {n - MAX_LISTED} more", terminal=True))
    bad = t[t["invalid"] != ""]
    if len(bad):
        blocks.append(Heading(3, f"Invalid values in NEW: {len(bad)} row(s)", terminal=True))
        blocks.append(_invalid_table(bad))
        if len(bad) > MAX_LISTED:
            blocks.append(Para(f"… and {len(bad) - MAX_LISTED} more (--format csv lists every row)", terminal=True))
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
    blocks.append(Para(rule_line(c), terminal=True))
    blocks.append(Para(catches_line(c), terminal=True))
    blocks.append(Para(summary_line(c), terminal=True))
    return blocks


def render(c: Comparison, fmt: str) -> str:
    from ipcbench.report.render import to_markdown, to_text

    if fmt == "csv":
        return c.table[CSV_COLUMNS].to_csv(index=False, float_format="%.6g")
    blocks = _blocks(c)
    if fmt == "md":
        return f"**{verdict_line(c)}**\n\n" + to_markdown(blocks)
    return to_text(blocks).rstrip() + "\n" + verdict_line(c) + "\n"


def run(args) -> int:
    """Entry point for `ipcbench compare`; returns the exit status (0 ok, 1 failed gate, 2 bad input)."""
    try:
        bases = [load(p) for p in args.base]
        result = compare(bases, load(args.new), args.threshold, args.alpha, subset=args.subset)
    except (UsageError, ResultsError) as e:
        print(f"ipcbench compare: error: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(render(result, args.format))
    if args.format == "csv":
        for w in result.warnings:
            print(f"ipcbench compare: warning: {w}", file=sys.stderr)
        print(rule_line(result), file=sys.stderr)
        print(catches_line(result), file=sys.stderr)
        print(summary_line(result), file=sys.stderr)
        print(verdict_line(result), file=sys.stderr)
    return result.exit_code
