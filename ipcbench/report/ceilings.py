"""Physical ceilings: rows whose bandwidth is more than the hardware described in meta.json can move.

A pure function of one run's rows (results_load.load_frame's columns) and its meta.json; no MPI, no CUDA,
pandas only inside the functions. Three checks, each only where meta.json has the numbers it needs:

1. link: a cross-GPU bandwidth row above its link's theoretical peak (meta["topology"][host]["links"]:
   peak_gbps per src_gpu -> dst_gpu, one direction; twice that for bidir, which counts both ways).
2. memory: a same-GPU bandwidth row whose size is larger than the GPU's L2 (gpus[host][i]["l2_bytes"])
   above the GPU memory ceiling for a copy, mem_bw_gbps / 2 (gpus[host][i]["mem_bw_gbps"]: a copy reads
   and writes every byte, so it moves at most half the memory bandwidth; bidir counts both ways and the
   two directions share the same memory, so the ceiling is the same).
3. alltoall: rows of a method ending in `_alltoall`: the sum over one source GPU's cross-GPU flows at one
   size above that GPU's aggregate NVLink bandwidth (topology per_gpu[i]["active"] links x the link's
   per_link_gbps).

A row passes a ceiling that it reaches within TOLERANCE (2 %): rounding of the peaks and clock skew are not
impossible numbers. Used by `ipcbench compare` (a NEW row above a ceiling fails the gate) and by the
report's "impossible numbers" flag (document.py).
"""

from __future__ import annotations

TOLERANCE = 0.02
COLUMNS = ("check", "ceiling_gbps", "value_gbps", "reason")  # added to the offending rows


def _num(v) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if x == x and x > 0 else None


def link_peaks(meta: dict | None) -> dict[tuple[str, int, int], float]:
    """{(host, src_gpu, dst_gpu): one-way peak GB/s} from meta.json's NVML link table (both orders: a
    link listed one way only holds for the other way too)."""
    out: dict[tuple[str, int, int], float] = {}
    topo = (meta or {}).get("topology")
    if not isinstance(topo, dict):
        return out
    for host, t in topo.items():
        links = t.get("links") if isinstance(t, dict) else None
        for link in links if isinstance(links, list) else []:
            if not isinstance(link, dict):
                continue
            try:
                s, d = int(link["src_gpu"]), int(link["dst_gpu"])
            except (KeyError, TypeError, ValueError):
                continue
            peak = _num(link.get("peak_gbps"))
            if peak is None:
                continue
            out[(str(host), s, d)] = peak
            out.setdefault((str(host), d, s), peak)
    return out


def gpu_limits(meta: dict | None) -> dict[tuple[str, int], tuple[int, float]]:
    """{(host, gpu index): (l2_bytes, mem_bw_gbps)} for the GPUs whose meta.json entry has both."""
    out: dict[tuple[str, int], tuple[int, float]] = {}
    gpus = (meta or {}).get("gpus")
    if not isinstance(gpus, dict):
        return out
    for host, lst in gpus.items():
        for g in lst if isinstance(lst, list) else []:
            if not isinstance(g, dict):
                continue
            l2, bw = _num(g.get("l2_bytes")), _num(g.get("mem_bw_gbps"))
            try:
                index = int(g["index"])
            except (KeyError, TypeError, ValueError):
                continue
            if l2 is not None and bw is not None:
                out[(str(host), index)] = (int(l2), bw)
    return out


def nvlink_aggregate(meta: dict | None) -> dict[tuple[str, int], tuple[float, int, float]]:
    """{(host, gpu index): (aggregate GB/s one way, active links, GB/s per link)} for GPUs with active
    NVLinks: topology per_gpu[i]["active"] x the per_link_gbps of that GPU's links."""
    out: dict[tuple[str, int], tuple[float, int, float]] = {}
    topo = (meta or {}).get("topology")
    if not isinstance(topo, dict):
        return out
    for host, t in topo.items():
        if not isinstance(t, dict):
            continue
        per_gpu, links = t.get("per_gpu"), t.get("links")
        if not isinstance(per_gpu, list) or not isinstance(links, list):
            continue
        rate: dict[int, float] = {}
        for link in links:
            if isinstance(link, dict) and _num(link.get("per_link_gbps")) is not None:
                try:
                    rate.setdefault(int(link["src_gpu"]), float(link["per_link_gbps"]))
                except (KeyError, TypeError, ValueError):
                    continue
        for i, g in enumerate(per_gpu):
            active = _num(g.get("active")) if isinstance(g, dict) else None
            if active is not None and i in rate:
                out[(str(host), i)] = (active * rate[i], int(active), rate[i])
    return out


def _gb(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def _size(n) -> str:
    from ipcbench.sizes import fmt_size

    return fmt_size(int(n))


def impossible_rows(frame, meta: dict | None, tolerance: float = TOLERANCE):
    """The rows of one run above a physical ceiling: a DataFrame with the offending rows (their index and
    columns kept) plus `check` (link | memory | alltoall, several joined by '+'), `ceiling_gbps`,
    `value_gbps` and a one-line `reason`. Empty (same columns) when nothing is impossible or meta.json has
    none of the numbers."""
    import numpy as np
    import pandas as pd

    empty = frame.iloc[0:0].assign(**{c: pd.Series(dtype=object) for c in COLUMNS})
    if frame.empty or not meta:
        return empty
    kind = frame["kind"] if "kind" in frame.columns else pd.Series("bandwidth", index=frame.index)
    bw = frame["bw_gbps_median"]
    usable = (kind == "bandwidth") & bw.notna() & (bw > 0) & (frame["src_gpu"] >= 0) & (frame["dst_gpu"] >= 0)
    rows = frame[usable]
    host = rows["host"].astype(str)
    same = rows["same_gpu"].astype(bool) | (rows["src_gpu"] == rows["dst_gpu"])
    hits: dict[object, list[tuple[str, float, float, str]]] = {}

    # 1. cross-GPU rows above the link peak
    peaks = link_peaks(meta)
    if peaks:
        cross = rows[~same]
        keys = list(zip(host[~same], cross["src_gpu"].astype(int), cross["dst_gpu"].astype(int)))
        peak = np.array([peaks.get(k, np.nan) for k in keys], dtype=float)
        factor = np.where(cross["direction"].to_numpy() == "bidir", 2.0, 1.0)
        ceiling = peak * factor
        over = np.isfinite(ceiling) & (cross["bw_gbps_median"].to_numpy() > ceiling * (1 + tolerance))
        for (i, r), c, f in zip(cross[over].iterrows(), ceiling[over], factor[over]):
            both = " (2x the one-way peak: bidir counts both ways)" if f == 2 else ""
            hits.setdefault(i, []).append((
                "link", c, r["bw_gbps_median"],
                f"{_gb(r['bw_gbps_median'])} GB/s on GPU {r['src_gpu']}→{r['dst_gpu']} is above the link peak "
                f"{_gb(c)} GB/s{both}"))

    # 2. same-GPU rows larger than L2 above half the memory bandwidth
    limits = gpu_limits(meta)
    if limits:
        local = rows[same]
        keys = list(zip(host[same], local["src_gpu"].astype(int)))
        l2 = np.array([limits.get(k, (np.nan, np.nan))[0] for k in keys], dtype=float)
        mem = np.array([limits.get(k, (np.nan, np.nan))[1] for k in keys], dtype=float)
        ceiling = mem / 2.0
        over = (np.isfinite(ceiling) & (local["bytes"].to_numpy() > l2)
                & (local["bw_gbps_median"].to_numpy() > ceiling * (1 + tolerance)))
        for (i, r), c, m, l2_bytes in zip(local[over].iterrows(), ceiling[over], mem[over], l2[over]):
            hits.setdefault(i, []).append((
                "memory", c, r["bw_gbps_median"],
                f"{_gb(r['bw_gbps_median'])} GB/s within GPU {r['src_gpu']} at {_size(r['bytes'])} (larger "
                f"than its {_size(l2_bytes)} L2) is above half its {_gb(m)} GB/s memory bandwidth "
                f"({_gb(c)} GB/s: a copy reads and writes every byte)"))

    # 3. one source GPU's all-to-all flows summed above its aggregate NVLink bandwidth
    agg = nvlink_aggregate(meta)
    if agg:
        a2a = rows[~same & rows["method"].astype(str).str.endswith("_alltoall")]
        if not a2a.empty:
            group = ["host", "suite", "method", "direction", "src_gpu", "bytes"]
            for key, g in a2a.groupby(group, sort=True):
                lim = agg.get((str(key[0]), int(key[4])))
                if lim is None:
                    continue
                total, active, per_link = lim
                ceiling = total * (2.0 if key[3] == "bidir" else 1.0)
                s = float(g["bw_gbps_median"].sum())
                if s > ceiling * (1 + tolerance):
                    for i in g.index:
                        hits.setdefault(i, []).append((
                            "alltoall", ceiling, s,
                            f"GPU {key[4]}'s {len(g)} cross-GPU flows at {_size(key[5])} sum to {_gb(s)} GB/s, above "
                            f"its aggregate NVLink bandwidth {_gb(ceiling)} GB/s ({active} links x "
                            f"{per_link:g} GB/s)"))
    if not hits:
        return empty
    idx = [i for i in frame.index if i in hits]
    out = frame.loc[idx].copy()
    out["check"] = ["+".join(h[0] for h in hits[i]) for i in idx]
    out["ceiling_gbps"] = [min(h[1] for h in hits[i]) for i in idx]
    out["value_gbps"] = [hits[i][0][2] for i in idx]
    out["reason"] = ["; ".join(h[3] for h in hits[i]) for i in idx]
    return out
