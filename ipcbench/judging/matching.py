"""Runs matched by what they are: which node and GPUs a run measured and how (`node_of`, `measured_as`: the
MPS side-by-side pairs runs that agree in both), and for `ipcbench compare` (judging/compare.py): naming their
GPUs by UUID (or index), turning each run into one value per matched row key in its natural unit, combining
several BASE runs, and the warnings when the runs differ in options, sizes, ranks, MPS, GPUs or versions.
"""

from __future__ import annotations

import json

from ipcbench.catalogue.suites import SERIAL_SUITES
from ipcbench.record.meta import Meta, SamplingRecord
from ipcbench.record.run import Run
from ipcbench.judging.ceilings import impossible_rows
from ipcbench.judging.measured import is_quick, planned_sizes, sizes_of, sizes_text
from ipcbench.judging.significance import sample_stats, host_timed, time_sliced

KEY = ["suite", "method", "direction", "src", "dst", "bytes"]
WARN_OPTIONS = ("sm_copy", "sm_bulk")  # options the record does not type, compared as recorded
MAX_UUIDS_NAMED = 4
VALUE_COLS = ["host", "src_gpu", "dst_gpu", "same_gpu", "kind", "unit", "value", "lv", "verified", "s_n", "s_mean",
              "s_m2", "c_n", "c_mean", "c_m2", "exact", "timing", "host_timed", "sliced", "impossible"]


def node_of(meta: Meta, host: str) -> tuple:
    """What a run's node is: its host and its GPUs (index, model, UUID), as meta.json lists them."""
    return host, tuple(sorted((g.index, g.name, g.uuid or "") for g in meta.gpus.get(host, [])))


def measured_as(run: Run) -> tuple:
    """How a run was measured, in what makes its numbers differ: its sizes, --quick, ranks per GPU."""
    return tuple(sizes_of(run.meta, run.frame)), is_quick(run.meta), run.meta.ranks_per_gpu


def _mps_words(meta: Meta) -> str:
    """"without MPS (vm)", "with MPS (a, b)", "MPS on some GPUs (vm)", "" when not recorded."""
    hosts = sorted({h for h, _ in meta.mps})
    states = {h: meta.mps_state(h) for h in hosts}
    parts = []
    for word, state in (("without MPS", False), ("with MPS", True), ("MPS on some GPUs", None)):
        on = [h for h in hosts if states[h] is state]
        if on:
            parts.append(f"{word} ({', '.join(on)})")
    return "; ".join(parts)


def identities(runs: list[Run]):
    """(per run its rows' (source, destination) GPU identity, the key columns, how GPUs are matched): by
    UUID when every run's meta.json names its GPUs and NEW (the last) shares one with each BASE, else by
    index (and host, when every run has several hosts)."""
    import pandas as pd

    tables = [r.meta.uuids() for r in runs]

    def uuid(run, table, col):
        ids = pd.Series([table.get((h, g)) for h, g in zip(run.frame["host"], run.frame[col])], index=run.frame.index,
                        dtype=object)
        return ids.where(run.frame[col] >= 0, "-1")

    ids = [(uuid(r, t, "src_gpu"), uuid(r, t, "dst_gpu")) for r, t in zip(runs, tables)]
    complete = all(t and s.notna().all() and d.notna().all() for t, (s, d) in zip(tables, ids))
    shared = all(set(t.values()) & set(tables[-1].values()) for t in tables[:-1])
    if complete and shared:
        return ids, KEY, "GPUs matched by UUID"
    why = ("not every run's meta.json lists GPU UUIDs" if not all(tables) else
           "a BASE run shares no GPU UUID with NEW" if not shared else "some GPUs have no UUID in meta.json")
    with_host = all(r.frame["host"].nunique() > 1 for r in runs)
    ids = [(r.frame["src_gpu"], r.frame["dst_gpu"]) for r in runs]
    return ids, KEY + (["host"] if with_host else []), f"GPUs matched by index{' and host' if with_host else ''}: {why}"


def prepare(run: Run, src, dst, key: list[str]):
    """One run's rows keyed for matching, with what the verdict needs: the natural-unit value, the log
    sample statistics (exact from samples_us, approximate from cv), the timing, the ceilings."""
    import numpy as np

    f = run.frame
    k = f.assign(src=src.astype(str).to_numpy(), dst=dst.astype(str).to_numpy())
    kind = k["kind"].to_numpy(dtype=str)
    bw = kind == "bandwidth"
    value = np.where(bw, k["bw_gbps_median"].to_numpy(dtype=float), k["time_us_median"].to_numpy(dtype=float))
    k["unit"] = np.where(bw, "GB/s", np.where(kind == "error", "", "µs"))
    k["value"] = value
    with np.errstate(divide="ignore", invalid="ignore"):
        k["lv"] = np.where(value > 0, np.log(np.where(value > 0, value, 1.0)), np.nan)
    k["s_n"], k["s_mean"], k["s_m2"] = sample_stats(f)
    # the approximation for rows without samples: location log(median time), variance log(1 + cv^2)
    med, lo, hi = (k[f"time_us_{x}"].to_numpy(dtype=float) for x in ("median", "min", "max"))
    cv = k["cv"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        half = (np.log(hi) - np.log(lo)) / 2.0
        var = np.where(np.isfinite(cv), np.log1p(cv * cv), np.where(np.isfinite(half), half * half, 0.0))
        k["c_n"] = k["samples"].to_numpy(dtype=float)
        k["c_mean"] = np.where(med > 0, np.log(np.where(med > 0, med, 1.0)), np.nan)
        k["c_m2"] = var * np.maximum(k["c_n"].to_numpy() - 1.0, 0.0)
    k["exact"] = k["s_n"] >= 2
    k["host_timed"] = host_timed(f)
    k["sliced"] = time_sliced(f)
    imp = impossible_rows(f, run.meta)
    k["impossible"] = ""
    if not imp.empty:
        k.loc[imp.index, "impossible"] = imp["reason"].to_numpy()
    k = k.sort_values(key + ["src_rank", "dst_rank"], kind="stable")
    k["seq"] = k.groupby(key, sort=False).cumcount().astype(np.int64)
    return k, imp


def combine_bases(parts: list, key: list[str]):
    """The BASE runs' rows as one row per key: for one run its own values; for several, the geometric mean
    of the medians (lv = mean of the log values), the between-run range and variance of the log values,
    the runs' samples pooled (counts, means and squared deviations combined), verified only where every
    run verified, impossible where any run is."""
    import numpy as np
    import pandas as pd

    long = pd.concat([p[key + VALUE_COLS].assign(_run=i) for i, p in enumerate(parts)], ignore_index=True)
    g = long.groupby(key, sort=False, dropna=False)
    out = g.first()
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
        out.loc[multi, "sliced"] = g["sliced"].any()[multi]
        out.loc[multi, "impossible"] = g["impossible"].agg(lambda s: "; ".join(x for x in s if x))[multi]
        grp = [long[c] for c in key]
        for pre in ("s", "c"):
            nn, mm, m2 = long[f"{pre}_n"], long[f"{pre}_mean"], long[f"{pre}_m2"]
            tot = nn.groupby(grp, sort=False, dropna=False).transform("sum")
            wm = (nn * mm).groupby(grp, sort=False, dropna=False).transform("sum") / tot
            extra = m2 + nn * (mm - wm) ** 2
            out.loc[multi, f"{pre}_n"] = tot.groupby(grp, sort=False, dropna=False).first()[multi]
            out.loc[multi, f"{pre}_mean"] = wm.groupby(grp, sort=False, dropna=False).first()[multi]
            out.loc[multi, f"{pre}_m2"] = extra.groupby(grp, sort=False, dropna=False).sum(min_count=1)[multi]
    return out.reset_index()


def drop_unplanned(m, bases: list[Run], new: Run):
    """(the side-by-side table without the rows one side never planned, {side: {suite: rows left out}}): a BASE row
    of a size NEW did not plan (a --quick NEW against a full BASE: 2 sizes of 17) is not missing from NEW, only not
    compared, as the sizes warning says, and a NEW row of a size no BASE planned is not new; a row of a size its
    other side planned and lacks is still missing (or new). judging/measured.planned_sizes."""
    import numpy as np

    def planned_by(runs: list[Run], sweep: list[int]):
        tests = [planned_sizes(r.meta, sweep) for r in runs]
        return lambda *key: any(t(*key) for t in tests)

    sides = {"BASE": ("left_only", planned_by([new], sorted({s for b in bases for s in b.meta.sizes}))),
             "NEW": ("right_only", planned_by(bases, list(new.meta.sizes)))}
    drop = np.zeros(len(m), dtype=bool)
    left: dict[str, dict[str, int]] = {}
    for side, (only, planned) in sides.items():
        mask = np.array([o == only and not planned(str(s), str(me), str(d), int(b)) for o, s, me, d, b in
                         zip(m["_merge"], m["suite"], m["method"], m["direction"], m["bytes"])], dtype=bool)
        drop |= mask
        if mask.any():
            left[side] = {str(k): int(v) for k, v in m.loc[mask, "suite"].value_counts().items()}
    return m[~drop].reset_index(drop=True), left


def unplanned_warning(new: Run, left: dict[str, dict[str, int]]) -> list[str]:
    """The warnings for rows left out because the other side never planned their sizes (drop_unplanned)."""
    other = {"BASE": f"NEW {new.label}", "NEW": "any BASE run"}
    out = []
    for side, counts in left.items():
        by = ", ".join(f"{s} {n}" for s, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        out.append(f"{sum(counts.values())} {side} row(s) of sizes {other[side]} never planned ({by}) are not "
                   f"compared, and not {'missing from NEW' if side == 'BASE' else 'new'}: only the sizes both planned "
                   "are compared")
    return out


# ------------------------------------------------------------------------------------------- warnings

def _fmt_opt(v) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}={_fmt_opt(x)}" for k, x in v.items()) + "}"
    return json.dumps(v) if v is None or isinstance(v, bool) else str(v)


def _uuids(uuids: list[str]) -> str:
    return ", ".join(uuids[:MAX_UUIDS_NAMED]) + (f" (+{len(uuids) - MAX_UUIDS_NAMED})" if len(uuids) > MAX_UUIDS_NAMED
                                                  else "")


def _options(meta) -> list[tuple[str, object]]:
    """(option, value) of what makes two runs' numbers differ in how they were sampled: --quick, the sampling rule
    (record/meta_parts.SamplingRecord), --no-verify and the kernel shapes (WARN_OPTIONS); None: not recorded."""
    rule = meta.rule or SamplingRecord()
    return [("quick", meta.quick), ("samples", rule.fixed_samples), ("min_time_ms", rule.min_time_ms),
            ("noise", rule.noise), ("min_samples", rule.min_samples), ("max_samples", rule.max_samples),
            ("max_time_s", rule.max_time_s), ("verify", meta.verify),
            *((o, meta.options.get(o)) for o in WARN_OPTIONS)]


def _serial_steps(meta: Meta) -> bool:
    """Whether the run measured a suite with one-pair-at-a-time steps (catalogue/suites.SERIAL_SUITES); a run that
    did not record its suites may have."""
    return meta.suites is None or bool(set(meta.suites) & set(SERIAL_SUITES))


def _gpu_models(who: str, bm: Meta, nm: Meta) -> list[str]:
    """What differs in the runs' GPUs by model: other models (their numbers are other hardware's), or only how many
    of one model (2 x H200 against 4 x H200: the same boards' kind, other pairs and rank counts)."""
    from collections import Counter

    b, n = (Counter(g.name for gs in m.gpus.values() for g in gs) for m in (bm, nm))
    if not b or not n or b == n:
        return []
    if set(b) != set(n):
        return [f"{who}: GPU models differ: {bm.gpu_models()} vs {nm.gpu_models()}"]
    return [f"{who}: GPU counts differ, the models alike: {bm.gpu_models()} vs {nm.gpu_models()} (pairs of one "
            "model compared; the other run's other pairs are missing or new)"]


def meta_warnings(base: Run, new: Run) -> list[str]:
    """What differs between a BASE run and NEW that makes their numbers less comparable: options (quick,
    sampling rule, samples, min_time_ms, verify, kernel shapes), the serial steps' pairs (--serial-pairs),
    rank counts and ranks per GPU, hosts, MPS, sizes, GPUs (UUIDs), their models or only their count, driver and
    ipcbench versions. One line each."""
    who = f"BASE {base.label} vs NEW {new.label}"
    bm, nm = base.meta, new.meta
    if not bm.found or not nm.found:
        missing = " and ".join(s for s, m in (("BASE", bm), ("NEW", nm)) if not m.found)
        return [f"{who}: no meta.json for {missing}: options, ranks, GPUs and versions not checked"]
    out = []
    diffs = [f"{o} {_fmt_opt(b)} vs {_fmt_opt(n)}" for (o, b), (_, n) in zip(_options(bm), _options(nm)) if b != n]
    if diffs:
        out.append(f"{who}: options differ: " + "; ".join(diffs))
    bs, ns = ("a ring of pairs" if m.serial_ring else "every pair" for m in (bm, nm))
    if bs != ns and _serial_steps(bm) and _serial_steps(nm):
        out.append(f"{who}: the one-pair-at-a-time steps (host-staged, handles, ping-pongs, pipeline) measured "
                   f"{bs} vs {ns} (--serial-pairs): the ring run has no rows for the other pairs; compare "
                   f"with --subset, or measure both with the same --serial-pairs")
    if (None not in (bm.n_ranks, nm.n_ranks) and bm.n_ranks != nm.n_ranks) or \
            (None not in (bm.ranks_per_gpu, nm.ranks_per_gpu) and bm.ranks_per_gpu != nm.ranks_per_gpu):
        out.append(f"{who}: rank counts differ: {bm.n_ranks} rank(s), {bm.ranks_per_gpu} per GPU vs {nm.n_ranks} "
                   f"rank(s), {nm.ranks_per_gpu} per GPU")
    if bm.hosts and nm.hosts and sorted(bm.hosts) != sorted(nm.hosts):
        out.append(f"{who}: hosts differ: {', '.join(bm.hosts)} vs {', '.join(nm.hosts)}")
    bw, nw = _mps_words(bm), _mps_words(nm)
    if bw and nw and bw != nw:
        out.append(f"{who}: MPS differs: {bw} vs {nw}: same-GPU kernels time-slice without MPS and run "
                   f"concurrently with it (ping-pongs and pipelines change by orders of magnitude)")
    bsz, nsz = sizes_of(bm), sizes_of(nm)
    if bsz and nsz and bsz != nsz:
        out.append(f"{who}: sizes differ: {sizes_text(bsz)} vs {sizes_text(nsz)}: only the sizes both measured "
                   f"are compared")
    bu, nu = sorted(set(bm.uuids().values())), sorted(set(nm.uuids().values()))
    if bu and nu and bu != nu:
        out.append(f"{who}: GPUs differ: {_uuids(bu)} vs {_uuids(nu)} ({len(set(bu) & set(nu))} in common): "
                   f"other boards, whose own spread is in the difference")
    out += _gpu_models(who, bm, nm)
    for what, b, n in (("driver versions", bm.versions.get("driver"), nm.versions.get("driver")),
                       ("ipcbench versions", bm.ipcbench_version, nm.ipcbench_version)):
        if b and n and b != n:
            out.append(f"{who}: {what} differ: {b} vs {n}")
    return out
