"""Each row's verdict in a comparison (compare's engine, judging/compare.py): the first rule that holds, in order of
precedence (docs/report.md), as a RowVerdict (judging/row_verdict.py) with its note; what a pass covers per kind of
row (the smallest change caught); the outcome ordered worst first."""

from __future__ import annotations

import math

from ipcbench.judging.row_verdict import RowVerdict
from ipcbench.judging.row_verdict import RowVerdict as V
from ipcbench.judging.bounds import pct
from ipcbench.judging.significance import BANDS, host_timed

# the engines in the order the smallest changes caught are said
ENGINE_ORDER = ("ce", "sm", "sm_bulk", "nccl", "shm", "event", "mpi", "api")
# the outcome's order: what fails a gate first, then what it passes, then what it does not judge
WORST_FIRST = (RowVerdict.REGRESSION, RowVerdict.MISSING, RowVerdict.IMPROVEMENT, RowVerdict.UNCHANGED,
               RowVerdict.NOT_JUDGED, RowVerdict.NEW)


def row_verdicts(m, out, g, bound, unchanged_why, sig, enough, threshold: float, nb: int):
    """(verdict, note, valued) of every row, its verdict a RowVerdict: the first rule that holds, in order of
    precedence; `valued`: the rows judged by the size of their change (threshold and bound), the others decided
    before."""
    import numpy as np

    verified_b, verified_n = (m[f"verified_{s}"].fillna(False).astype(bool).to_numpy() for s in "bn")
    imp_b, imp_n = (m[f"impossible_{s}"].fillna("").astype(str).to_numpy() for s in "bn")
    bad_b, bad_n = (m[f"bad_{s}"].fillna("").astype(str).to_numpy() for s in "bn")
    k = m["k"].fillna(0).to_numpy(dtype=float)
    why_runs = out["_runs_why"].to_numpy(dtype=str)
    ht = why_runs != ""
    host = host_timed(out)
    lvb, lvn = m["lv_b"].to_numpy(dtype=float), m["lv_n"].to_numpy(dtype=float)
    disagree = (m["lv_max"] - m["lv_min"]).to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        beyond = np.abs(g) > np.log1p(bound)
        wild = host & (disagree > np.log1p(bound))
    before = [
        ((m["_merge"] == "left_only").to_numpy(), V.MISSING, "in BASE, not in NEW"),
        ((m["_merge"] == "right_only").to_numpy(), V.NEW, "only in NEW"),
        ((out["kind"] == "error").to_numpy(), V.NOT_JUDGED, "error-path row"),
        (imp_n != "", V.NOT_JUDGED, "above a physical ceiling in NEW"),
        (imp_b != "", V.NOT_JUDGED, "above a physical ceiling in BASE"),
        (bad_n != "", V.NOT_JUDGED, "invalid in NEW"),
        (bad_b != "", V.NOT_JUDGED, np.char.add("invalid in BASE: ", bad_b.astype(str))),
        (verified_b & ~verified_n, V.REGRESSION, "unverified in NEW"),
        (~verified_b & verified_n, V.IMPROVEMENT, "verified in NEW only"),
        (~verified_b & ~verified_n, V.NOT_JUDGED, "unverified in both"),
        (~(np.isfinite(lvb) & np.isfinite(lvn)), V.NOT_JUDGED, "no value to compare"),
        (ht & (nb == 1), V.NOT_JUDGED, np.char.add(why_runs, ": give 2+ BASE runs")),
        (ht & (nb > 1) & (k < 2), V.NOT_JUDGED, np.char.add(why_runs, ": in fewer than 2 BASE runs")),
        (ht & ~enough, V.NOT_JUDGED, "fewer than 2 samples"),
        (wild, V.NOT_JUDGED, _disagree_notes(disagree, bound)),
    ]
    by_value = [
        (~(np.abs(g) > math.log1p(threshold)), V.UNCHANGED, f"within ±{100 * threshold:g}%"),
        (~beyond, V.UNCHANGED, unchanged_why.astype(str)),
        (ht & ~host & ~sig, V.UNCHANGED, "not significant"),
        (g > 0, V.IMPROVEMENT, ""),
        (np.ones(len(m), dtype=bool), V.REGRESSION, ""),
    ]
    verdict = np.full(len(m), V.UNCHANGED, dtype=object)
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


def _disagree_notes(disagree, bound):
    """The note of a host-timed row whose BASE runs already lie further apart than its bound: the tail the bound
    states does not hold for it, so NEW is not judged against it."""
    import numpy as np

    return np.array([f"host-timed: the BASE runs disagree by {pct(math.expm1(d))}, more than the ±{pct(b)} such rows "
                     "move" if d == d and b == b else "" for d, b in zip(disagree, bound)], dtype=object)


def catches(rows, threshold: float) -> list[dict]:
    """Per kind of row (engine x size band) judged by the size of its change, the smallest change it would have
    caught: the median over its rows of max(bound, threshold), exactly the threshold where no row's bound is above
    it. Ordered by band, then engine."""
    import numpy as np

    out = []
    for (engine, band), g in rows.groupby(["_engine", "_band"], sort=False):
        bar = float(np.nanmedian(np.fmax(g["bound"].to_numpy(dtype=float), threshold)))
        out.append({"kind": f"{engine} {BANDS[int(band)]}", "engine": str(engine), "band": BANDS[int(band)],
                    "rows": len(g), "smallest_change": bar, "at_threshold": bar <= threshold})
    order = {e: i for i, e in enumerate(ENGINE_ORDER)}
    bands = list(BANDS)
    return sorted(out, key=lambda c: (bands.index(c["band"]), order.get(c["engine"], len(order)), c["engine"]))


def worst_first(out):
    """The outcome's rows in WORST_FIRST order; within a verdict the largest loss (or gain) first."""
    import numpy as np

    order = {v: i for i, v in enumerate(WORST_FIRST)}
    out = out.assign(_o=out["verdict"].map(order),
                     _g=np.where(out["verdict"] == RowVerdict.IMPROVEMENT, -out["gain"], out["gain"]))
    out = out.sort_values(["_o", "_g", "suite", "method", "direction", "bytes"], kind="stable", na_position="last")
    return out.drop(columns=["_o", "_g", "_runs_why", "_engine", "_band"]).reset_index(drop=True)


