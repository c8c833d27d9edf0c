"""The statistics of `ipcbench compare` (judging/compare.py): how far a row is known to move between runs of
the same code (the between-runs floors per kind of row, for runs older than the between-runs noise), Welch's
t-test on the log of two rows' sample times and Student's t computed here (regularized incomplete beta; no
scipy), each row's sample statistics, and which rows need the variation between runs (host-timed,
time-sliced). Pure math and pandas columns; docs/report.md says how a verdict uses them.
"""

from __future__ import annotations

import math

from ipcbench.catalogue import noise, row_kind

# ------------------------------------------------------------------------------------------ between-runs floors

# A kind of row, as a verdict names it: its engine (the rows' `engine`) and its size band (catalogue/row_kind.py,
# where every other fact of a row's kind is computed too). Rows of one kind move alike between runs.
BANDS = row_kind.BANDS
size_band = row_kind.band_index  # index into BANDS of each row's size (an array of bytes)


def row_kinds(engines, nbytes) -> list[str]:
    """Each row's kind, as the verdict names it: "<engine> <band>" (e.g. "sm <= 256K"); `engines` holds
    "time-sliced" for the rows that are."""
    return [f"{e or 'other'} {BANDS[int(b)]}" for e, b in zip(engines, size_band(nbytes))]


def between_runs_floor(gpu_model: str, engines, timings, nbytes, sliced, same_gpu, contexts=None):
    """Each row's between-runs floor (a fraction): catalogue/noise.floor_of a run's GPU model and the row's kind
    (catalogue/row_kind.RowKind: engine, timing, size, whether its ranks share a GPU, the contexts its samples spread
    over: None or NaN, one). `sliced`: whether the row is a time-sliced hand-off (row_kind.time_sliced_mask; compare
    takes either side's, so that its verdicts stay symmetric), which is the one thing MPS decides in a kind. The same
    floors a run of the current code states in its `noise` (core/rows.state_noise)."""
    import numpy as np

    k = np.ones(len(nbytes)) if contexts is None else np.nan_to_num(np.asarray(contexts, dtype=float), nan=1.0)
    return np.array([noise.floor_of(gpu_model, row_kind.RowKind(str(e), str(t), int(b), bool(g), mps=not s,
                                                                contexts=int(c))).fraction
                     for e, t, b, s, g, c in zip(engines, timings, nbytes, sliced, same_gpu, k)], dtype=float)


def host_tails(engines, nbytes):
    """Each row's host-timed tail (a fraction): catalogue/noise.host_tail of its engine and size, what a
    host-timed row's change must exceed against two or more BASE runs."""
    import numpy as np

    return np.array([noise.host_tail(str(e), int(b)).fraction for e, b in zip(engines, nbytes)], dtype=float)


def honest_noise(within, floor):
    """A row's honest noise from its within-run noise and its floor (arrays): catalogue/noise.combined, the one
    formula the current code writes; a missing within-run noise (NaN) stays NaN."""
    import numpy as np

    return np.array([np.nan if w != w else noise.combined(float(w), float(f)) for w, f in zip(within, floor)],
                    dtype=float)


# ------------------------------------------------------------------------------------------ Student's t, Welch

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


def sample_stats(frame):
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


def time_sliced(frame):
    """Boolean array: hand-offs between the two processes' kernels on one GPU without MPS (catalogue/row_kind
    .time_sliced over the frame's columns): their time is the GPU scheduler's time-slice period, which moves between
    runs far more than the samples of one run say. Judged like host-timed rows."""
    return row_kind.time_sliced_mask(frame["timing"], frame["same_gpu"], frame["mps"])


def host_timed(frame):
    """Boolean array: rows timed on the host clock with Python in the loop (the rows' `timing`); error-path
    probes are listed, never judged."""
    return ((frame["timing"] == "host") & (frame["kind"] != "error")).to_numpy(dtype=bool)


def row_significance(m, out, g, nb: int):
    """(p, exact, use_runs, enough): for rows that need several BASE runs (host-timed, time-sliced), a prediction
    t-test of NEW's median against the pooled variance of the BASE runs' log medians (never below the row's own):
    part of a time-sliced row's verdict, printed for a host-timed one (its tail decides: bounds.py). For every
    other row Welch's test on the samples (exact where both sides have them, else the cv approximation), printed
    and never deciding: rows move between runs by more than their samples vary, so in-run samples call any such
    move significant (docs/report.md)."""
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
