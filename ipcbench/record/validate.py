"""Values validated once, when a run is read: every value that is impossible (above the physical ceiling of its
link or memory), zero, negative, NaN or infinite, or missing where the row is judged by it, is named once with its
file:line and kept out of every number.

record/run.load_run calls `validate` on each CSV it reads (results.csv, a fleet node's part file): the frame gets
a text column `invalid` ("" for a good row, else e.g. "results.csv:17: bw_gbps_median 600 GB/s on GPU 0→1 is
above the link's ceiling 478 GB/s"), the offending values become NaN (for a row above a ceiling its bandwidths and
times: each implies the same impossible rate), and the run lists the messages (Run.invalid). A row above a ceiling
also keeps what it was above in the ABOVE_COLUMNS (report/ceilings.py reads them back). Consumers judge no row by
value whose `invalid` is not "" (docs/results.md).

The ceilings are those of the run's meta.json (record/meta.Meta, its link rates from catalogue/links.py):
1. link: a cross-GPU bandwidth row above its link's one-way ceiling (twice that for bidir, which counts both ways).
2. memory: a same-GPU bandwidth row larger than the GPU's L2 above half the GPU's memory bandwidth (a copy
   reads and writes every byte; bidir's two directions share that memory, so the ceiling is the same).
3. alltoall: the sum of one source GPU's cross-GPU all-to-all flows at one size above its NVLink aggregate
   (active links x GB/s per link).
A row passes a ceiling that it reaches within TOLERANCE (2 %): rounding of the peaks and clock skew are not
impossible numbers. pandas only inside the functions.
"""

from __future__ import annotations

from ipcbench.record.meta import Meta
from ipcbench.record.table import Frame
from ipcbench.sizes import fmt_size

TOLERANCE = 0.02
COLUMNS = ("check", "ceiling_gbps", "value_gbps", "reason")  # what ceiling_hits adds to the offending rows
VALUE_COLUMNS = ("time_us_median", "time_us_min", "time_us_max", "bw_gbps_median", "bw_gbps_max")
# a validated frame's ceiling hits: the check(s), the ceiling, the value above it (an all-to-all's: the sum of
# the flows), the row's bandwidth as recorded
ABOVE_COLUMNS = ("above_check", "above_ceiling_gbps", "above_value_gbps", "above_bw_gbps")
UNITS = {"time_us": "µs", "bw_gbps": "GB/s"}


def validate(frame: Frame, meta: Meta, where: str, lines: list[int], nan_text: dict | None = None) -> list[str]:
    """Name and blank the bad values of one CSV's rows (in place); `where` names the file ("results.csv"),
    `lines` each row's physical line, `nan_text` where a value column held a NaN written as text. Returns the
    messages, in row order."""
    import numpy as np

    messages: list[list[str]] = [[] for _ in range(len(frame))]
    blank = {c: np.zeros(len(frame), dtype=bool) for c in VALUE_COLUMNS}
    kinds = frame["kind"].astype(str).to_numpy() if "kind" in frame.columns else np.full(len(frame), "")
    # the value a row is judged by must be there: a bandwidth row's rate, any measured row's time
    needed = {"bw_gbps_median": kinds == "bandwidth", "time_us_median": np.isin(kinds, ["bandwidth", "latency", "op"])}
    for c, need in needed.items():
        v = frame[c].to_numpy(dtype=float)
        for i in np.flatnonzero(need & np.isnan(v) & ~np.asarray((nan_text or {}).get(c, np.zeros(len(frame), bool)))):
            messages[i].append(f"{c} is empty")
    for c in VALUE_COLUMNS:
        v = frame[c].to_numpy(dtype=float)
        unit = next(u for p, u in UNITS.items() if c.startswith(p))
        written_nan = np.asarray((nan_text or {}).get(c, np.zeros(len(frame), dtype=bool)), dtype=bool)
        # zero too: no transfer takes no time, and a row that moved bytes at 0 GB/s moved none (compare and check
        # read the same word from here)
        for i in np.flatnonzero(written_nan | np.isinf(v) | (v <= 0)):
            text = ("is NaN" if written_nan[i] else f"is infinite ({v[i]:g})" if np.isinf(v[i])
                    else f"{v[i]:g} {unit} is zero" if v[i] == 0 else f"{v[i]:g} {unit} is negative")
            messages[i].append(f"{c} {text}")
            blank[c][i] = True
    frame["above_check"] = ""
    for c in ABOVE_COLUMNS[1:]:
        frame[c] = np.nan
    hits = ceiling_hits(frame.assign(**{c: frame[c].where(~blank[c]) for c in VALUE_COLUMNS}), meta)
    if not hits.empty:
        pos = frame.index.get_indexer(hits.index)
        for i, r in zip(pos, hits.itertuples()):
            said = r.reason if r.check != "alltoall" else f"{_gb(r.bw_gbps_median)} GB/s: {r.reason}"
            messages[i].append(f"bw_gbps_median {said}")
            for c in VALUE_COLUMNS:
                blank[c][i] = True
        frame.loc[hits.index, "above_check"] = hits["check"].to_numpy()
        frame.loc[hits.index, "above_ceiling_gbps"] = hits["ceiling_gbps"].to_numpy(dtype=float)
        frame.loc[hits.index, "above_value_gbps"] = hits["value_gbps"].to_numpy(dtype=float)
        frame.loc[hits.index, "above_bw_gbps"] = hits["bw_gbps_median"].to_numpy(dtype=float)
    for c in VALUE_COLUMNS:
        if blank[c].any():
            frame[c] = frame[c].where(~blank[c])
    out = [f"{where}:{lines[i]}: " + "; ".join(m) if m else "" for i, m in enumerate(messages)]
    frame["invalid"] = np.array(out, dtype=object).astype(str) if out else np.array([], dtype=str)
    return [m for m in out if m]


def _gb(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def _per_row(table: dict, *keys):
    """table[(key, ...)] for every row, NaN where it has none (a vectorised lookup)."""
    import numpy as np
    import pandas as pd

    if not table:
        return np.full(len(keys[0]), np.nan)
    values = pd.Series(list(table.values()), index=pd.MultiIndex.from_tuples(list(table)), dtype=float)
    return values.reindex(pd.MultiIndex.from_arrays(list(keys))).to_numpy(dtype=float)


def _link_hits(rows, meta: Meta, tolerance: float) -> list:
    """(row index, check, ceiling, value, reason) of cross-GPU rows above their link's ceiling (the signalling
    rate: catalogue/links.py)."""
    import numpy as np

    cross = rows[~rows["same_gpu"]]
    factor = np.where(cross["direction"].to_numpy() == "bidir", 2.0, 1.0)
    ceiling = _per_row(meta.link_ceilings(), cross["host"], cross["src_gpu"], cross["dst_gpu"]) * factor
    over = np.isfinite(ceiling) & (cross["bw_gbps_median"].to_numpy() > ceiling * (1 + tolerance))
    both = " (2x the one-way ceiling: bidir counts both ways)"
    return [(i, "link", c, r.bw_gbps_median, f"{_gb(r.bw_gbps_median)} GB/s on GPU {r.src_gpu}→{r.dst_gpu} is "
             f"above the link's ceiling {_gb(c)} GB/s{both if f == 2 else ''}")
            for i, r, c, f in zip(cross.index[over], cross[over].itertuples(), ceiling[over], factor[over])]


def _memory_hits(rows, meta: Meta, tolerance: float) -> list:
    """Same-GPU rows larger than L2 above half the GPU's memory bandwidth."""
    import numpy as np

    local = rows[rows["same_gpu"]]
    known = [(h, g) for h, gs in meta.gpus.items() for g in gs if g.l2_bytes and g.mem_bw_gbps]
    l2 = _per_row({(h, g.index): g.l2_bytes for h, g in known}, local["host"], local["src_gpu"])
    mem = _per_row({(h, g.index): g.mem_bw_gbps for h, g in known}, local["host"], local["src_gpu"])
    ceiling = mem / 2.0
    over = (np.isfinite(ceiling) & (local["bytes"].to_numpy() > l2)
            & (local["bw_gbps_median"].to_numpy() > ceiling * (1 + tolerance)))
    return [(i, "memory", c, r.bw_gbps_median,
             f"{_gb(r.bw_gbps_median)} GB/s within GPU {r.src_gpu} at {fmt_size(r.bytes)} (larger than its "
             f"{fmt_size(int(cache))} L2) is above half its {_gb(m)} GB/s memory bandwidth ({_gb(c)} GB/s: a copy "
             "reads and writes every byte)")
            for i, r, c, m, cache in zip(local.index[over], local[over].itertuples(), ceiling[over], mem[over],
                                         l2[over])]


def _alltoall_hits(rows, meta: Meta, tolerance: float) -> list:
    """Every flow of a source GPU's all-to-all whose flows at one size sum above its NVLink aggregate."""
    agg = meta.nvlink_aggregate()
    a2a = rows[~rows["same_gpu"] & (rows["pattern"] == "alltoall")]
    out = []
    for key, g in a2a.groupby(["host", "suite", "method", "direction", "src_gpu", "bytes"], sort=True):
        lim = agg.get((str(key[0]), int(key[4])))
        if lim is None:
            continue
        total, active, per_link = lim
        ceiling = total * (2.0 if key[3] == "bidir" else 1.0)
        s = float(g["bw_gbps_median"].sum())
        if s > ceiling * (1 + tolerance):
            out += [(i, "alltoall", ceiling, s, f"GPU {key[4]}'s {len(g)} cross-GPU flows at {fmt_size(key[5])} sum to "
                     f"{_gb(s)} GB/s, above its aggregate NVLink bandwidth {_gb(ceiling)} GB/s ({active} links x "
                     f"{per_link:g} GB/s)") for i in g.index]
    return out


def ceiling_hits(frame: Frame, meta: Meta, tolerance: float = TOLERANCE) -> Frame:
    """The rows of one run above a physical ceiling: the offending rows (their index and columns kept) plus
    `check` (link | memory | alltoall, several joined by '+'), `ceiling_gbps` (the lowest), `value_gbps` and
    a one-line `reason`. Empty (same columns) when nothing is impossible or meta.json has none of the numbers."""
    import pandas as pd

    empty = frame.iloc[0:0].assign(**{c: pd.Series(dtype=object) for c in COLUMNS})
    if frame.empty or not meta.found:
        return empty
    bw = frame["bw_gbps_median"]
    rows = frame[(frame["kind"] == "bandwidth") & bw.notna() & (bw > 0) & (frame["src_gpu"] >= 0)
                 & (frame["dst_gpu"] >= 0)]
    rows = rows.assign(same_gpu=rows["same_gpu"] | (rows["src_gpu"] == rows["dst_gpu"]))
    hits: dict[object, list] = {}
    for check in (_link_hits, _memory_hits, _alltoall_hits):
        for i, *hit in check(rows, meta, tolerance):
            hits.setdefault(i, []).append(hit)
    if not hits:
        return empty
    idx = [i for i in frame.index if i in hits]
    out = frame.loc[idx].copy()
    out["check"] = ["+".join(h[0] for h in hits[i]) for i in idx]
    out["ceiling_gbps"] = [min(h[1] for h in hits[i]) for i in idx]
    out["value_gbps"] = [hits[i][0][2] for i in idx]
    out["reason"] = ["; ".join(h[3] for h in hits[i]) for i in idx]
    return out
