"""The rows of a comparison side by side (compare's engine, judging/compare.py): every row key of the BASE runs and
NEW in one table (judging/matching.py matches and combines them), each side's invalid values named, the identifying
columns of the outcome (a row's RowKey, judging/row_key.py, with its suite and kind), and the change of each row in
its natural unit."""

from __future__ import annotations

from ipcbench.judging.bounds import within_noise
from ipcbench.judging.matching import VALUE_COLS, combine_bases, identities, prepare
from ipcbench.record.run import Run


# beside matching.VALUE_COLS: the row's kind, its noise, its within-run noise (`within`: a run's own samples, to be
# combined with today's floors; NaN where a run states only a noise that holds the floors already), the contexts its
# samples spread over and the noise measured between them (NaN before schema 6), its invalid value
EXTRA_COLS = ["engine", "noise", "within", "contexts", "noise_contexts", "bad"]


def side_by_side(bases: list[Run], new: Run):
    """(every key of BASE and NEW side by side with suffixes _b and _n and `_merge`, NEW's impossible rows,
    how GPUs were matched). Several BASE runs: their largest noise and every invalid value of a row."""
    import pandas as pd

    runs = list(bases) + [new]
    ids, key, mode = identities(runs)
    prepared = [prepare(r, src, dst, key) for r, (src, dst) in zip(runs, ids)]
    mkey = key + ["seq"]
    for (k, _), r in zip(prepared, runs):
        k["bad"] = invalid_values(k)
        k["within"] = within_noise(k, r)
        k["contexts"] = k["contexts"].fillna(1)  # a run before schema 6: one context (several BASE take the least)
    base = combine_bases([p for p, _ in prepared[:-1]], mkey)
    extra = pd.concat([p[mkey + EXTRA_COLS] for p, _ in prepared[:-1]], ignore_index=True)
    extra = extra.groupby(mkey, sort=False, dropna=False).agg(  # a dict: agg's own `engine` is numba's
        {"engine": "first", "noise": "max", "within": "max", "contexts": "min", "noise_contexts": "max",
         "bad": lambda s: "; ".join(x for x in s if x)})
    base = base.merge(extra.reset_index(), on=mkey, how="left")
    newv = prepared[-1][0][mkey + VALUE_COLS + EXTRA_COLS]
    return base.merge(newv, on=mkey, how="outer", suffixes=("_b", "_n"), indicator=True), prepared[-1][1], mode


def invalid_values(k):
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


def identifying_columns(m):
    """The outcome's identifying columns (RowKey.COLUMNS, judging/row_key.py, with the row's suite, kind, unit and
    timing): NEW's values where NEW has the row, else BASE's."""
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


def change(m, out):
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

