"""The runs `ipcbench compare` puts side by side (report/compare.py): loading each BASE and NEW run, naming
their GPUs by UUID (or index), turning each into one value per matched row key in its natural unit, and
the warnings when the runs differ in options, ranks, GPUs or versions.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ipcbench.report.options import ranks_per_gpu
from ipcbench.report.significance import _sample_stats, host_timed, slice_timed
from ipcbench.results import CSV_NAME
from ipcbench.results_load import ResultsError, find_runs, load_frame, read_meta_optional

KEY = ["suite", "method", "direction", "src", "dst", "bytes"]
WARN_OPTIONS = ("quick", "sampling", "samples", "min_time_ms")


class CompareError(Exception):
    """Bad input: the message is one line."""


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
    k["slice_timed"] = slice_timed(f)
    imp = impossible_rows(f, side.meta)
    k["impossible"] = ""
    if not imp.empty:
        k.loc[imp.index, "impossible"] = imp["reason"].to_numpy()
    k = k.sort_values(key + ["src_rank", "dst_rank"], kind="stable")
    k["seq"] = k.groupby(key, sort=False).cumcount().astype(np.int64)
    return k, imp


VALUE_COLS = ["host", "src_gpu", "dst_gpu", "same_gpu", "kind", "unit", "value", "lv", "verified", "s_n", "s_mean",
              "s_m2", "c_n", "c_mean", "c_m2", "exact", "host_timed", "slice_timed", "impossible"]


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


# ------------------------------------------------------------------------------------------- warnings

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


def _serial_coverage(meta: dict) -> str:
    """"a ring of pairs" or "every pair" (runs before --serial-pairs measured every pair)."""
    sp = (meta.get("pair_mode") or {}).get("serial_pairs") if isinstance(meta.get("pair_mode"), dict) else None
    return "a ring of pairs" if isinstance(sp, dict) and sp.get("coverage") == "ring" else "every pair"


def meta_warnings(base: Side, new: Side) -> list[str]:
    """What differs between a BASE run and NEW that makes their numbers less comparable: options (quick,
    sampling rule, samples, min_time_ms), the serial steps' pairs (--serial-pairs), rank counts and ranks
    per GPU, hosts, GPU models, driver and ipcbench versions. One line each."""
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
    bs, ns = _serial_coverage(bm), _serial_coverage(nm)
    if bs != ns:
        out.append(f"{who}: the one-pair-at-a-time steps (host-staged, handles, ping-pongs, pipeline) measured "
                   f"{bs} vs {ns} (--serial-pairs): the ring run has no rows for the other pairs; compare "
                   f"with --subset, or measure both with the same --serial-pairs")
    br, nr = bm.get("ranks"), nm.get("ranks")
    bn, nn = (len(br) if isinstance(br, list) else None), (len(nr) if isinstance(nr, list) else None)
    bpg, npg = ranks_per_gpu(bm), ranks_per_gpu(nm)
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
