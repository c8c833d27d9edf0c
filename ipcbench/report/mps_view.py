"""Same GPU, with and without MPS: a node's same-GPU rows from a run without MPS beside a run with it.

Processes that share a GPU time-slice their kernels unless MPS lets them run concurrently, which changes
ping-pongs and flag-driven pipelines by orders of magnitude and copies not at all. A run's meta.json says
per host and GPU whether its ranks ran under MPS (core/mps.py); this view pairs runs of the same node (host,
GPU models and UUIDs: matching.node_of) measured the same way (sizes, --quick, ranks per GPU:
matching.measured_as), the newest without MPS with the newest with it, and lists every same-GPU (suite,
method, direction) at its largest size (bandwidth) or smallest (latency), median over the host's same-GPU
pairs. A host name alone says nothing: two VMs, or two GPUs one after the other, are all called `vm`.
pandas only.
"""

from __future__ import annotations

from ipcbench.record.run import Run
from ipcbench.record.table import Frame
from ipcbench.judging.matching import measured_as, node_of
from ipcbench.judging.validity import valid_frame


def side_by_side(runs: list[Run]) -> list[tuple[str, str, str, Frame]]:
    """[(host, run without MPS, run with MPS, frame)] for every node and way of measuring that has both; the
    frame has one row per same-GPU (suite, method, direction, bytes, unit) with the two medians and what MPS
    changed."""
    import pandas as pd

    by_node: dict[tuple, dict[bool, Run]] = {}
    for run in runs:  # the later run of a state wins (runs are in the order given, newest last by name)
        for host in sorted(set(run.frame["host"].astype(str))):
            state = run.meta.mps_state(host)
            if state is not None:
                by_node.setdefault((node_of(run.meta, host), measured_as(run)), {})[state] = run
    out = []
    for ((host, _), _), pair in sorted(by_node.items(), key=lambda kv: str(kv[0])):
        if False not in pair or True not in pair:
            continue
        sides = []
        for state in (False, True):
            df = valid_frame(pair[state])  # invalid values left out (validity.py)
            df = df[(df["host"].astype(str) == host) & df["same_gpu"] & (df["kind"].isin(["bandwidth", "latency"]))]
            sides.append(_points(df))
        merged = pd.merge(sides[0], sides[1], on=["suite", "method", "direction", "bytes", "unit"],
                          suffixes=("_nomps", "_mps"))
        if merged.empty:
            continue
        better = merged["unit"].eq("GB/s")
        merged["mps_gain"] = (merged["value_mps"] / merged["value_nomps"]).where(
            better, merged["value_nomps"] / merged["value_mps"])
        merged = merged.sort_values("mps_gain", ascending=False, kind="stable").reset_index(drop=True)
        out.append((host, pair[False].label, pair[True].label, merged))
    return out


def _points(df):
    """Per same-GPU (suite, method, direction): the largest size for bandwidth rows, the smallest for latency
    rows; median over pairs."""
    import pandas as pd

    if df.empty:
        return pd.DataFrame(columns=["suite", "method", "direction", "bytes", "unit", "value"])
    bw = df[df["kind"] == "bandwidth"]
    lat = df[df["kind"] == "latency"]
    keys = ["suite", "method", "direction"]
    parts = []
    if len(bw):
        top = bw[bw["bytes"] == bw.groupby(keys)["bytes"].transform("max")]
        parts.append(top.groupby(keys + ["bytes"], as_index=False)["bw_gbps_median"].median()
                     .rename(columns={"bw_gbps_median": "value"}).assign(unit="GB/s"))
    if len(lat):
        low = lat[lat["bytes"] == lat.groupby(keys)["bytes"].transform("min")]
        parts.append(low.groupby(keys + ["bytes"], as_index=False)["time_us_median"].median()
                     .rename(columns={"time_us_median": "value"}).assign(unit="µs"))
    return pd.concat(parts, ignore_index=True)
