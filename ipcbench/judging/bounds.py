"""How far a row of a comparison may move between runs of the same code (compare's engine, judging/compare.py):
each side's honest noise (its stated noise, or for runs older than the between-runs noise its within-run noise and
the between-runs floor of its kind combined, catalogue/noise.py), and the bound a change must exceed besides
--threshold: both sides' noise summed, or several BASE runs' spread. docs/report.md gives every rule."""

from __future__ import annotations

from ipcbench.judging.significance import between_runs_floor, honest_noise, host_tails, host_timed, row_kinds, size_band
from ipcbench.record.run import Run


def pct(v) -> str:
    """0.032 -> '3.2%', 0.135 -> '13.5%', 0.2667 -> '26.7%', 1.5 -> '150%'."""
    if v is None or v != v:
        return ""
    return f"{100 * v:.3g}%" if v < 10 else f"{100 * v:.0f}%"


def noise_basis(run: Run) -> str:
    """The run's noise basis: "between-runs" when its meta.json says its `noise` covers how far a row moves
    between runs of the same code on the same node, else "within-run" (runs older than that, a CSV without
    meta.json): the too small noise of the old sampler (record/meta.Meta.noise_basis)."""
    return "between-runs" if run.meta.noise_basis == "between-runs" else "within-run"


def within_noise(frame, run: Run):
    """The row's within-run noise: `noise_within` where the run wrote it (schema 3), its `noise` where that was the
    within-run noise alone (runs older than the between-runs noise), else NaN (a run whose `noise` already holds
    its floors and does not say how much is its own)."""
    noise = frame["noise"].astype(float)
    written = frame["noise_within"].astype(float) if "noise_within" in frame.columns else noise * float("nan")
    return written.where(written.notna(), noise if noise_basis(run) == "within-run" else written)


def gpu_model(run: Run) -> str:
    """The GPU model whose floors judge a run's rows (catalogue/noise.py): its most common; "" where it recorded
    none (then the floors are the largest known). Each side of a compare takes its own run's, so that swapping
    BASE and NEW swaps the verdicts and nothing else."""
    names = [g.name for gs in run.meta.gpus.values() for g in gs if g.name and g.name != "?"]
    return max(set(names), key=names.count) if names else ""


def side_floors(m, gpu_models: tuple[str, str], engine, timing, nbytes, sliced, same) -> dict:
    """{"b": BASE's, "n": NEW's} between-runs level of every row, each side by its own GPU model: its kind's floor
    (catalogue/noise.py), or where both sides sampled the row over contexts (core/lanes.py) its kind's floor over
    contexts or the noise measured between its contexts where that is larger (core/rows.state_noise's rule). Only
    where both did, so that a row sampled over contexts is never judged tighter than the one-context run it is compared
    with allows."""
    import numpy as np

    def col(name: str):
        return m[name].to_numpy(dtype=float) if name in m.columns else np.full(len(m), np.nan)

    both = (col("contexts_b") > 1) & (col("contexts_n") > 1)
    floors = {}
    for side, model in zip("bn", gpu_models):
        over = between_runs_floor(model, engine, timing, nbytes, sliced, same, col(f"contexts_{side}"))
        over = np.where(np.isfinite(col(f"noise_contexts_{side}")), np.fmax(over, col(f"noise_contexts_{side}")), over)
        floors[side] = np.where(both, over, between_runs_floor(model, engine, timing, nbytes, sliced, same))
    return floors


def bounds(m, out, nb: int, old: bool, gpu_models: tuple[str, str] = ("", "")):
    """(bound, rule, unchanged_why, no_noise) of every row: the relative change it must exceed besides
    --threshold, what set it, the note of a row inside it, and which side's noise was missing.

    A row's honest noise is its `noise` (a relative half-width: where a run's median lies); for runs older
    than the between-runs noise (`old`) their within-run noise and the between-runs floor of their kind combined
    as the current code states it (catalogue/noise.combined; time-sliced rows have a level of their own); missing
    (empty, NaN, negative) it is the floor, never zero.
    One BASE: the sum of both rows' honest noise. Several BASE runs (the row in 2+ of them): the BASE runs'
    spread (max/min of their medians - 1), never below what one BASE would allow (the sum of both sides' honest
    noise: more BASE runs never make the gate stricter than their noise says); time-sliced rows the same, with a
    t-test on their between-run variation besides (rule "runs"). Host-timed rows (rule "tail"): the tail of their
    kind (catalogue/noise.HOST_TAIL: how far one run of unchanged code reads such a row from the BASE runs' mean),
    never below both sides' honest noise; their spread does not set it, since two BASE runs that agree say
    nothing of NEW's tail."""
    import numpy as np

    engine = m["engine_n"].where(m["engine_n"].notna(), m["engine_b"]).fillna("").astype(str).to_numpy()
    engine = np.where(out["sliced"].to_numpy(dtype=bool), "time-sliced", engine)
    nbytes = out["bytes"].to_numpy()
    timing = out["timing"].fillna("").astype(str).to_numpy()
    sliced, same = out["sliced"].to_numpy(dtype=bool), out["same_gpu"].to_numpy(dtype=bool)
    floors = side_floors(m, gpu_models, engine, timing, nbytes, sliced, same)
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
    host = host_timed(out) & several
    # what several BASE runs set beside both sides' noise: their spread, or a host-timed row's tail
    runs_bound = np.where(host, host_tails(engine, nbytes), spread)
    bound = np.where(several, np.fmax(runs_bound, hb + hn), hb + hn)
    rule = np.where(runs, "runs", np.where(several, "spread", "noise+floor" if old else "noise"))
    rule = np.where(host, "tail", rule)
    set_by = np.where(host, "within the tail of host-timed rows", "within the BASE runs' spread")
    why = np.where(several & (runs_bound >= hb + hn), set_by, "within the rows' noise")
    sides = np.where(miss_b & miss_n, "BASE and NEW", np.where(miss_b, "BASE", np.where(miss_n, "NEW", "")))
    no_noise = np.array([f"no noise in {s}: the {kd} floor ±{pct(f)}" if s else ""
                         for s, kd, f in zip(sides, kinds, floor)], dtype=object)
    return bound, rule, why, no_noise
