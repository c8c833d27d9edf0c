"""The numbers of the report: pandas tables computed from the rows of one or many runs.

Input is one DataFrame of rows (record/table.py's columns) with two extra columns: `run` naming
the run each row came from and `scope` (see add_scope): "pair" for a cross-GPU pair, "same GPU" for ranks
sharing one GPU, "aggregate" for rows that describe no single pair (dst_rank or a GPU index -1). Every
function returns a DataFrame; nothing here draws or formats. All statistics are over rows, vectorized: a
fleet of 200,000 rows is a few groupbys.

Conventions: "cross-GPU" rows are those of scope "pair"; the "largest size" of a method is the largest
`bytes` it measured in that run; bandwidth statistics are over the per-pair medians (bw_gbps_median) at
that size.
"""

from __future__ import annotations

import pandas as pd

from ipcbench.record.meta import Meta
from ipcbench.results import STAGED_ENGINES

BW_DIRECTIONS = ("push", "pull", "bidir")
METHOD = ["suite", "method", "direction"]
FACTS = ["engine", "access", "mechanism", "pattern"]  # what a figure draws a method's line by (figure_style.py)
SMALL_MAX = 64 * 1024  # latency plot: messages up to 64 KiB
WEAK_FRACTION = 0.10  # a pair more than 10% below its method's typical pair is a weak link
OUTLIER_FRACTION = 0.10  # a host more than 10% below the fleet median is an outlier


def typical(grouped):
    """Per group of pairs (a SeriesGroupBy), aligned to its rows, the typical pair every pair is held against:
    the median of three or more, the stronger of two (a median of two is their mean, which puts half a weak
    pair's loss on the healthy one: a pair 47% below the other read "30.9% below the median pair")."""
    return grouped.transform("median").where(grouped.transform("count") != 2, grouped.transform("max"))


def typical_of(values) -> float:
    """The typical pair of one set of values (a matrix of pairs: NaN cells left out)."""
    import numpy as np

    v = pd.Series(np.ravel(np.asarray(values, dtype=float))).dropna()
    return float(typical(v.groupby(np.zeros(len(v)))).iloc[0]) if len(v) else float("nan")


def add_scope(df: pd.DataFrame) -> pd.DataFrame:
    import numpy as np

    aggregate = (df["dst_rank"] < 0) | (df["src_rank"] < 0) | (df["src_gpu"] < 0) | (df["dst_gpu"] < 0)
    scope = np.where(aggregate, "aggregate", np.where(df["same_gpu"], "same GPU", "pair"))
    return df.assign(scope=pd.Categorical(scope, categories=["pair", "same GPU", "aggregate"]))


def bw_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows with a bandwidth (push, pull, bidir)."""
    return df[df["direction"].isin(BW_DIRECTIONS) & df["bw_gbps_median"].notna()]


def cross_gpu(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["scope"] == "pair"]


def at_largest(df: pd.DataFrame, keys: list[str], end: str = "max") -> pd.DataFrame:
    """The rows at the largest size of each group (end="min": the smallest)."""
    return df if df.empty else df[df["bytes"] == df.groupby(keys, sort=False)["bytes"].transform(end)]


def at_smallest(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return at_largest(df, keys, "min")


def with_facts(table: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """The table with the FACTS of its (suite, method, direction), taken from the rows it was made of (a
    method's facts are the same on every row of one scope; grouping by them as well would cost a fleet
    seconds)."""
    facts = rows[METHOD + FACTS].drop_duplicates(METHOD)
    return table.merge(facts, on=METHOD, how="left")


def method_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per run and (suite, method, direction, scope): bandwidth at the largest size (median, min and
    max over pairs) and time at the smallest size (median over pairs).

    Columns: run, suite, method, direction, scope, pairs, size_max, bw_median, bw_min, bw_max,
    size_min, time_us.
    """
    keys = ["run"] + METHOD + ["scope"]
    base = df
    groups = base.groupby(keys, sort=True, observed=True)
    out = groups.agg(size_max=("bytes", "max"), size_min=("bytes", "min"))
    bw = bw_rows(base)
    big = at_largest(bw, keys).groupby(keys, observed=True)["bw_gbps_median"]
    out = out.join(big.median().rename("bw_median")).join(big.min().rename("bw_min"))
    out = out.join(big.max().rename("bw_max")).join(big.size().rename("pairs"))
    timed = base[base["time_us_median"].notna()]
    small = at_smallest(timed, keys).groupby(keys, observed=True)
    out = out.join(small["time_us_median"].median().rename("time_us"))
    out = out.join(small.size().rename("pairs_small"))
    out["pairs"] = out["pairs"].fillna(out["pairs_small"]).fillna(0).astype(int)
    # bandwidth rows are described at their largest size, the others (latency, op) at their smallest
    out.loc[out["bw_median"].isna(), "size_max"] = pd.NA
    return with_facts(out.drop(columns="pairs_small").reset_index(), df)


def heatmap_matrix(df: pd.DataFrame) -> pd.DataFrame:
    """src_gpu x dst_gpu matrix of the median bandwidth at the largest size of one method's cross-GPU rows
    (df already restricted to one run, host, suite, method and direction)."""
    rows = at_largest(cross_gpu(bw_rows(df)), ["direction"])
    if rows.empty:
        return pd.DataFrame()
    m = rows.pivot_table(index="src_gpu", columns="dst_gpu", values="bw_gbps_median", aggfunc="median")
    gpus = sorted(set(m.index) | set(m.columns))
    return m.reindex(index=gpus, columns=gpus)


def _curves(rows: pd.DataFrame, scope: str, value: str, sizeless: bool = False) -> pd.DataFrame:
    """Per run, method and size (> 0: drawn on a log axis; with `sizeless` also 0, a row that moves no data), the
    median, min and max of `value` over the pairs of `scope` (cross-GPU pairs; "same GPU" for a run whose ranks all
    share GPUs)."""
    rows = rows[(rows["scope"] == scope) & ((rows["bytes"] >= 0) if sizeless else (rows["bytes"] > 0))]
    return rows.groupby(["run"] + METHOD + FACTS + ["bytes"], observed=True)[value].agg(
        ["median", "min", "max"]).reset_index()


def size_curves(df: pd.DataFrame, scope: str = "pair") -> pd.DataFrame:
    """Bandwidth vs size."""
    return _curves(bw_rows(df), scope, "bw_gbps_median")


def latency_curves(df: pd.DataFrame, scope: str = "pair") -> pd.DataFrame:
    """Time per transfer vs size for messages up to 64 KiB (every suite but op rows), event_pingpong's rows of no
    size (bytes 0: an event handed over, no data) included."""
    return _curves(df[(df["direction"] != "op") & df["time_us_median"].notna() & (df["bytes"] <= SMALL_MAX)], scope,
                   "time_us_median", sizeless=True)


# What IPC is compared with, by the rows' engine: the host-staged paths (the best of them per pair) and NCCL's
# send/receive.
BASELINES = {"staged": lambda rows: rows["engine"].isin(STAGED_ENGINES), "nccl": lambda rows: rows["engine"] == "nccl"}


def speedup_rows(df: pd.DataFrame, baseline: str = "staged") -> pd.DataFrame:
    """Speedup of every IPC bandwidth row over a baseline: the best host-staged bandwidth (engines shm and
    mpi), or with baseline="nccl" NCCL's (ncclSend/ncclRecv). Rows of either baseline are never IPC.

    The baseline is the best baseline bandwidth at the same size and for the same pair (same run and host)
    in the same kind of direction (bidir vs one-way); where that pair has no baseline row, the best baseline
    method's median over all pairs at that size. Columns: the row's keys, bw, baseline, speedup, basis
    ("pair" or "all pairs").
    """
    bw = cross_gpu(bw_rows(df)).assign(dirclass=lambda d: d["direction"].eq("bidir").map({True: "bidir",
                                                                                         False: "oneway"}))
    any_base = pd.Series(False, index=bw.index)
    for test in BASELINES.values():
        any_base |= test(bw)
    base, ipc = bw[BASELINES[baseline](bw)], bw[~any_base]
    cols = ["run", "host", *METHOD, *FACTS, "src_gpu", "dst_gpu", "bytes", "bw_gbps_median", "baseline", "speedup",
            "basis"]
    if base.empty or ipc.empty:
        return pd.DataFrame(columns=cols)
    pair_keys = ["run", "host", "dirclass", "bytes", "src_gpu", "dst_gpu"]
    pair_best = base.groupby(pair_keys, observed=True)["bw_gbps_median"].max().rename("pair_base")
    all_keys = ["run", "host", "dirclass", "bytes"]
    per_method = base.groupby(all_keys + ["method", "direction"], observed=True)["bw_gbps_median"].median()
    all_best = per_method.groupby(all_keys, observed=True).max().rename("all_base")
    out = ipc.join(pair_best, on=pair_keys).join(all_best, on=all_keys)
    out["baseline"] = out["pair_base"].fillna(out["all_base"])
    out["basis"] = out["pair_base"].notna().map({True: "pair", False: "all pairs"})
    out = out[out["baseline"].notna()]
    out["speedup"] = out["bw_gbps_median"] / out["baseline"]
    return out[cols]


def speedup_summary(sp: pd.DataFrame) -> pd.DataFrame:
    """Per run and method, the speedup at the largest size: median, min and max over pairs."""
    keys = ["run"] + METHOD
    big = at_largest(sp, keys)
    g = big.groupby(keys, observed=True)
    out = g.agg(bytes=("bytes", "max"), speedup_median=("speedup", "median"), speedup_min=("speedup", "min"),
                speedup_max=("speedup", "max"), bw_median=("bw_gbps_median", "median"),
                baseline=("baseline", "median"), pairs=("speedup", "size"))
    return out.reset_index()


def speedup_curves(sp: pd.DataFrame) -> pd.DataFrame:
    sp = sp[sp["bytes"] > 0]
    g = sp.groupby(["run"] + METHOD + FACTS + ["bytes"], observed=True)["speedup"]
    return g.median().reset_index()


def handle_costs(df: pd.DataFrame) -> pd.DataFrame:
    """Handle/import costs (direction op): per run, method, same_gpu and buffer size (bytes; 0 for an operation on
    no buffer: an event handle, an error-path probe), the median time over rows. Per size: the cost of opening a
    handle can grow with the buffer, so a median over 4K, 1M and 256M rows would be of no size at all."""
    rows = df[(df["direction"] == "op") & df["time_us_median"].notna()]
    g = rows.groupby(["run", "suite", "method", "kind", "same_gpu", "bytes"], observed=True)["time_us_median"]
    return g.agg(time_us="median", rows="size").reset_index()


def link_table(metas: dict[str, Meta]) -> pd.DataFrame:
    """NVML links of every run's meta.json: run, host, src_gpu, dst_gpu, kind, peak_gbps (both orders)."""
    recs = [(run, ln.host, ln.src_gpu, ln.dst_gpu, ln.kind, ln.peak_gbps)
            for run, meta in metas.items() for ln in meta.links if ln.peak_gbps]
    links = pd.DataFrame(recs, columns=["run", "host", "src_gpu", "dst_gpu", "link_kind", "peak_gbps"])
    rev = links.rename(columns={"src_gpu": "dst_gpu", "dst_gpu": "src_gpu"})
    links = pd.concat([links, rev], ignore_index=True).drop_duplicates(["run", "host", "src_gpu", "dst_gpu"])
    return links


def gpu_peaks(metas: dict[str, Meta]) -> pd.DataFrame:
    """Every GPU's NVLink aggregate peak from meta.json: run, host, src_gpu, gpu_peak_gbps (the NVLinks that are up
    x one NVLink's peak): what the flows of an all-to-all leaving that GPU share."""
    recs = []
    for run, meta in metas.items():
        per_link = {(ln.host, ln.src_gpu): ln.per_link_gbps for ln in meta.links if ln.per_link_gbps}
        recs += [(run, h, g, n * per_link[(h, g)]) for (h, g), n in meta.active_links.items()
                 if n and (h, g) in per_link]
    return pd.DataFrame(recs, columns=["run", "host", "src_gpu", "gpu_peak_gbps"])


PAIR_BASIS = "one pair / its link's peak"
ALLTOALL_BASIS = "sum of the GPU's flows / its NVLink aggregate"


def peak_rows(df: pd.DataFrame, links: pd.DataFrame, gpus: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every cross-GPU bandwidth row at its method's largest size with its link's peak (bidir: twice the one-way
    peak) and the percentage reached (`basis`: PAIR_BASIS). An all-to-all's flows run at once and share their GPU's
    links, so one flow against one link's peak says nothing: its rows become one per source GPU, the sum of its
    flows against that GPU's NVLink aggregate (`gpus`, gpu_peaks; dst_gpu -1, basis ALLTOALL_BASIS), or are left
    out where meta.json has no aggregate."""
    big = at_largest(cross_gpu(bw_rows(df)), ["run", "host"] + METHOD)
    cols = ["run", "host", *METHOD, *FACTS, "src_gpu", "dst_gpu", "bytes", "bw_gbps_median", "link_kind", "peak_gbps",
            "pct", "basis"]
    if big.empty or links.empty:
        return pd.DataFrame(columns=cols)
    a2a = big["pattern"] == "alltoall"
    pairs, flows = big[~a2a], big[a2a]
    out = pairs.merge(links.astype({"run": str, "host": str}).assign(
        run=lambda d: d["run"].astype(big["run"].dtype)), on=["run", "host", "src_gpu", "dst_gpu"], how="inner")
    out = out.assign(basis=PAIR_BASIS)
    if not flows.empty and gpus is not None and not gpus.empty:
        keys = ["run", "host", *METHOD, *FACTS, "src_gpu", "bytes"]
        sums = flows.groupby(keys, observed=True, dropna=False)["bw_gbps_median"].sum().reset_index()
        sums = sums.merge(gpus.astype({"run": str, "host": str}).assign(
            run=lambda d: d["run"].astype(big["run"].dtype)), on=["run", "host", "src_gpu"], how="inner")
        sums = sums.assign(dst_gpu=-1, link_kind="nvlink (all of the GPU's)", peak_gbps=sums["gpu_peak_gbps"],
                           basis=ALLTOALL_BASIS)
        out = pd.concat([out, sums.drop(columns="gpu_peak_gbps")], ignore_index=True)
    out["peak_gbps"] = out["peak_gbps"] * out["direction"].eq("bidir").map({True: 2.0, False: 1.0})
    out["pct"] = 100.0 * out["bw_gbps_median"] / out["peak_gbps"]
    return out[cols]


def alltoall_table(df: pd.DataFrame, gpus: pd.DataFrame) -> pd.DataFrame:
    """Each GPU's all-to-all egress (the sum of its flows to every other GPU) at each size, one column per method
    (ce_alltoall, sm_alltoall, nccl_alltoall), with its NVLink aggregate (`gpus`, gpu_peaks; NaN where meta.json has
    none): run, host, src_gpu, bytes, <method>..., gpu_peak_gbps. The flows of one GPU share one window (suites/
    alltoall.py), so their sum is what the GPU sent per second."""
    a2a = cross_gpu(bw_rows(df))
    a2a = a2a[a2a["pattern"] == "alltoall"]
    keys = ["run", "host", "src_gpu", "bytes"]
    if a2a.empty:
        return pd.DataFrame(columns=keys + ["gpu_peak_gbps"])
    sums = a2a.groupby(keys + ["method"], observed=True)["bw_gbps_median"].sum().reset_index()
    wide = sums.pivot_table(index=keys, columns="method", values="bw_gbps_median", observed=True).reset_index()
    wide.columns.name = None
    if gpus.empty:
        return wide.assign(gpu_peak_gbps=float("nan"))
    peaks = gpus.astype({"run": str, "host": str}).assign(run=lambda d: d["run"].astype(wide["run"].dtype))
    return wide.merge(peaks, on=["run", "host", "src_gpu"], how="left")


def peak_by_pair(pk: pd.DataFrame) -> pd.DataFrame:
    """Per pair, the best one-way (push/pull) method at the largest size and its % of the link peak (single pairs:
    an all-to-all's per-GPU sums are no pair's)."""
    uni = pk[(pk["direction"] != "bidir") & (pk["basis"] == PAIR_BASIS)]
    if uni.empty:
        return uni
    idx = uni.groupby(["run", "host", "src_gpu", "dst_gpu"], observed=True)["bw_gbps_median"].idxmax()
    return uni.loc[idx].sort_values(["run", "host", "src_gpu", "dst_gpu"]).reset_index(drop=True)


def peak_by_method(pk: pd.DataFrame) -> pd.DataFrame:
    g = pk.groupby(["run"] + METHOD + ["basis"], observed=True)["pct"]
    return g.agg(pct_median="median", pct_min="min", pct_max="max", pairs="size").reset_index()


def weak_links(df: pd.DataFrame, fraction: float = WEAK_FRACTION) -> pd.DataFrame:
    """Cross-GPU pairs whose bandwidth at the largest size is more than `fraction` below the typical pair of
    their method (same run, host, suite, method, direction and size)."""
    keys = ["run", "host"] + METHOD
    big = at_largest(cross_gpu(bw_rows(df)), keys)
    ref = typical(big.groupby(keys + ["bytes"], observed=True)["bw_gbps_median"])
    mask = big["bw_gbps_median"] < (1.0 - fraction) * ref
    # Assign the filtered values: a whole Series assigned to an empty frame would become its index.
    weak = big[mask].assign(method_typical=ref[mask])
    weak = weak.assign(below_pct=100.0 * (1.0 - weak["bw_gbps_median"] / weak["method_typical"]))
    return weak.sort_values("below_pct", ascending=False)


def noisy_rows(df: pd.DataFrame, runs: list) -> pd.DataFrame:
    """Rows whose own samples spread more than rows of their kind move between runs: their within-run noise above
    their kind's between-runs floor (catalogue/noise.py, today's, as compare takes it: judging/bounds.within_noise,
    judging/significance.between_runs_floor), so that their stated noise is more than √2 × the floor, more their
    own sampling's than the process's; more samples would make them more certain. Columns `within` and `floor`
    added, the noisiest (within / floor) first; error-path probes (never judged) and rows without a within-run
    noise left out."""
    from ipcbench.judging.bounds import gpu_model, within_noise
    from ipcbench.judging.significance import between_runs_floor, time_sliced

    parts = []
    for run in runs:
        f = df[(df["run"] == run.label) & (df["kind"] != "error")]
        if f.empty:
            continue
        floor = between_runs_floor(gpu_model(run), f["engine"].fillna("").astype(str), f["timing"].fillna(""),
                                   f["bytes"], time_sliced(f), f["same_gpu"])
        f = f.assign(within=within_noise(f, run).to_numpy(dtype=float), floor=floor)
        parts.append(f[f["within"] > f["floor"]])
    if not parts:
        return df.iloc[0:0].assign(within=pd.Series(dtype=float), floor=pd.Series(dtype=float))
    out = pd.concat(parts)
    return out.assign(_excess=out["within"] / out["floor"]).sort_values("_excess", ascending=False,
                                                                         kind="stable").drop(columns="_excess")


def unverified_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows whose destination check failed or did not run; error-path probes (kind `error`) are not
    transfers and are never verified, so they are left out (their note says whether the error was clear)."""
    return df[~df["verified"] & (df["kind"] != "error")]


def impossible_rows(df: pd.DataFrame, metas: dict[str, Meta]) -> pd.DataFrame:
    """Rows above a physical ceiling of their run's meta.json (ceilings.py: link peak, memory bandwidth of
    a same-GPU copy, a GPU's NVLink aggregate for all-to-all flows), with `check`, `ceiling_gbps`,
    `value_gbps` and `reason`; runs without the numbers in meta.json are not checked."""
    from ipcbench.judging.ceilings import COLUMNS
    from ipcbench.judging.ceilings import impossible_rows as above_ceiling

    parts = [above_ceiling(g, metas[str(run)]) for run, g in df.groupby("run", observed=True, sort=False)]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return df.iloc[0:0].assign(**{c: pd.Series(dtype=object) for c in COLUMNS})
    return pd.concat(parts).sort_values(["run", "host", *METHOD, "bytes"], kind="stable")


def flag_counts(weak: pd.DataFrame, noisy: pd.DataFrame, unver: pd.DataFrame,
                impossible: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per run and (suite, method, direction): number of weak pairs, noisy rows, unverified rows and rows
    above a physical ceiling (impossible)."""
    keys = ["run"] + METHOD
    named = [(weak, "weak"), (noisy, "noisy"), (unver, "unverified")]
    if impossible is not None:
        named.append((impossible, "impossible"))
    parts = [x.groupby(keys, observed=True).size().rename(name) for x, name in named]
    out = pd.concat(parts, axis=1).fillna(0).astype(int)
    return out.reset_index() if not out.empty else pd.DataFrame(columns=keys + [name for _, name in named])


def host_method_table(df: pd.DataFrame) -> pd.DataFrame:
    """Fleet view, long form: per host and method, the median over cross-GPU pairs (all runs of the host)
    of the bandwidth at the method's largest size. Columns: host, suite, method, direction, bw, pairs."""
    keys = ["host"] + METHOD
    big = at_largest(cross_gpu(bw_rows(df)), keys)
    g = big.groupby(keys, observed=True)["bw_gbps_median"]
    return g.agg(bw="median", pairs="size").reset_index()


def outlier_hosts(hm: pd.DataFrame, fraction: float = OUTLIER_FRACTION) -> pd.DataFrame:
    """Hosts whose median is more than `fraction` below the fleet median (median of host medians) of the
    same method."""
    if hm.empty:
        return hm.assign(fleet=[], below_pct=[])
    fleet = hm.groupby(METHOD, observed=True)["bw"].transform("median")
    out = hm.assign(fleet=fleet, below_pct=100.0 * (1.0 - hm["bw"] / fleet))
    return out[out["bw"] < (1.0 - fraction) * out["fleet"]].sort_values("below_pct", ascending=False)


def fleet_box_data(df: pd.DataFrame) -> pd.DataFrame:
    """Per-pair bandwidth at the largest size with its host, for the per-host distribution plot."""
    keys = ["host"] + METHOD
    return at_largest(cross_gpu(bw_rows(df)), keys)[keys + ["bytes", "bw_gbps_median"]]


# ------------------------------------------------------------------------------------------ headline

ONEWAY = ("push", "pull")


def pair_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Cross-GPU one-way bandwidth rows reduced to GPU pairs: per run, host, method, direction, GPU pair and
    size, the median over the rank pairs that share that GPU pair (several ranks per GPU). All-to-all rows
    (flows measured all at once, not one pair's path) are left out."""
    bw = cross_gpu(bw_rows(df))
    bw = bw[bw["direction"].isin(ONEWAY) & (bw["pattern"] != "alltoall")]
    keys = ["run", "host", *METHOD, "src_gpu", "dst_gpu", "bytes"]
    return with_facts(bw.groupby(keys, observed=True, sort=False)["bw_gbps_median"].median().reset_index(), bw)


def best_paths(pr: pd.DataFrame, links: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per run, host and GPU pair, the fastest one-way method at the pair's largest size, with its link's
    peak and % of it (when meta.json has the link table) and how far it is below the typical pair of its run
    (`below_pct`, negative when above; `typical`). Columns: run, host, src_gpu, dst_gpu, suite, method,
    direction, bytes, bw, peak_gbps, link_kind, pct, typical_bw, below_pct."""
    cols = ["run", "host", "src_gpu", "dst_gpu", *METHOD, *FACTS, "bytes", "bw", "peak_gbps", "link_kind", "pct",
            "typical_bw", "below_pct"]
    if pr.empty:
        return pd.DataFrame(columns=cols)
    pkeys = ["run", "host", "src_gpu", "dst_gpu"]
    pr = pr[pr["bytes"] == pr.groupby(pkeys, observed=True)["bytes"].transform("max")]
    best = pr.loc[pr.groupby(pkeys, observed=True)["bw_gbps_median"].idxmax()].rename(
        columns={"bw_gbps_median": "bw"})
    if links is not None and not links.empty:
        lk = links.astype({"run": str, "host": str}).assign(run=lambda d: d["run"].astype(best["run"].dtype))
        best = best.merge(lk, on=pkeys, how="left")
    else:
        best = best.assign(peak_gbps=float("nan"), link_kind="")
    best["pct"] = 100.0 * best["bw"] / best["peak_gbps"]
    best["typical_bw"] = typical(best.groupby("run", observed=True)["bw"])
    best["below_pct"] = 100.0 * (1.0 - best["bw"] / best["typical_bw"])
    return best.sort_values(pkeys).reset_index(drop=True)[cols]


def best_staged(pr: pd.DataFrame, baseline: str = "staged") -> pd.DataFrame:
    """Per run, the best host-staged one-way method at the largest size (median over pairs), or with
    baseline="nccl" NCCL's (BASELINES): run, suite, method, direction, bytes, bw. `pr`: pair_rows."""
    pr = pr[BASELINES[baseline](pr)]
    if pr.empty:
        return pd.DataFrame(columns=["run", *METHOD, "bytes", "bw"])
    pr = pr[pr["bytes"] == pr.groupby("run", observed=True)["bytes"].transform("max")]
    med = pr.groupby(["run", *METHOD, "bytes"], observed=True)["bw_gbps_median"].median().rename("bw").reset_index()
    return med.loc[med.groupby("run", observed=True)["bw"].idxmax()].reset_index(drop=True)


def speedup_glance(sp: pd.DataFrame) -> pd.DataFrame:
    """Per run and IPC method, its best one-way direction's speedup over the baseline of `sp` (speedup_rows:
    the best host-staged path, or NCCL): at the method's largest size (median, min and max over pairs; GB/s
    median) and at its smallest size (median).
    All-to-all rows are left out (concurrent flows, not one pair's path). Columns: run, suite, method,
    direction, bytes, bw, speedup, speedup_min, speedup_max, pairs, small_bytes, small_speedup."""
    cols = ["run", *METHOD, "bytes", "bw", "speedup", "speedup_min", "speedup_max", "pairs", "small_bytes",
            "small_speedup"]
    one = sp[sp["direction"].isin(ONEWAY) & (sp["pattern"] != "alltoall")]
    if one.empty:
        return pd.DataFrame(columns=cols)
    keys = ["run", *METHOD]
    big = at_largest(one, keys).groupby(keys, observed=True).agg(
        bytes=("bytes", "max"), bw=("bw_gbps_median", "median"), speedup=("speedup", "median"),
        speedup_min=("speedup", "min"), speedup_max=("speedup", "max"), pairs=("speedup", "size"))
    small = at_smallest(one, keys).groupby(keys, observed=True).agg(
        small_bytes=("bytes", "min"), small_speedup=("speedup", "median"))
    out = big.join(small).reset_index()
    out = out.loc[out.groupby(["run", "suite", "method"], observed=True)["speedup"].idxmax()]
    return out.sort_values(["run", "speedup"], ascending=[True, False]).reset_index(drop=True)[cols]


def latency_glance(df: pd.DataFrame) -> pd.DataFrame:
    """Latency suite and NCCL's one-way rows (nccl, nccl_pingpong), cross-GPU pairs: per run and method, the
    time at the method's smallest size, median, min and max over pairs. Columns: run, method, bytes, median,
    min, max, pairs."""
    small = (df["suite"] == "latency") | ((df["suite"] == "nccl") & (df["direction"] == "oneway"))
    rows = cross_gpu(df[small & df["time_us_median"].notna()])
    if rows.empty:
        return pd.DataFrame(columns=["run", "method", "engine", "bytes", "median", "min", "max", "pairs"])
    small = at_smallest(rows, ["run", "method"])
    g = small.groupby(["run", "method", "engine"], observed=True)
    out = g.agg(bytes=("bytes", "min"), median=("time_us_median", "median"), min=("time_us_median", "min"),
                max=("time_us_median", "max"), pairs=("time_us_median", "size"))
    return out.reset_index().sort_values(["run", "median"]).reset_index(drop=True)
