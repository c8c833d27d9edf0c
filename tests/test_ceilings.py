"""Physical ceilings (ipcbench/judging/ceilings.py): link peak, same-GPU memory ceiling, all-to-all NVLink
aggregate, on small synthetic frames and metas; and the report's "impossible numbers" flag."""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synth  # noqa: E402
from ipcbench.record.meta import Meta, parse_meta  # noqa: E402
from ipcbench.record.run import derive_facts, load_run  # noqa: E402
from ipcbench.judging import ceilings  # noqa: E402

K, M = 1 << 10, 1 << 20
PEAK = 478.125  # 18 NVLink 4 links x 26.5625 GB/s: the ceiling (an entry without its generation keeps its peak)
META = {
    "gpus": {"h": [{"index": g, "name": "NVIDIA H200", "uuid": f"GPU-{g}", "l2_bytes": 60 * M, "mem_bw_gbps": 4800.0}
                   for g in range(4)]},
    "topology": {"h": {
        "links": [{"src_gpu": s, "dst_gpu": d, "kind": "nvswitch", "nvlink_count": 18, "per_link_gbps": 26.5625,
                   "peak_gbps": PEAK} for s in range(4) for d in range(4) if s != d],
        "per_gpu": [{"active": 18, "version": 6} for _ in range(4)]}},
}


def frame(*rows: dict) -> pd.DataFrame:
    """Rows with the columns the ceilings read; each dict gives what differs from a 256M copy/ce push 0->1."""
    base = dict(run_id="r", host="h", suite="copy", method="ce", direction="push", src_rank=0, dst_rank=1,
                src_gpu=0, dst_gpu=1, same_gpu=False, bytes=256 * M, time_us_median=1.0, bw_gbps_median=100.0,
                kind="bandwidth", verified=True, note="")
    out = []
    for r in rows:
        x = {**base, **r}
        x["same_gpu"] = x["src_gpu"] == x["dst_gpu"] and x["src_gpu"] >= 0
        out.append(x)
    df = pd.DataFrame(out)
    derive_facts(df, Meta())  # engine, pattern, ... from what the suites declare, as for a run read back
    return df


def impossible(df: pd.DataFrame, meta=META):
    return ceilings.impossible_rows(df, parse_meta(meta) if meta is not None else Meta())


def flagged(df: pd.DataFrame, meta=META) -> list[int]:
    return list(impossible(df, meta).index)


# ------------------------------------------------------------------------------------------ link peak

def test_link_peak_one_way_and_bidir():
    df = frame(dict(bw_gbps_median=PEAK * 1.01),  # within the 2% tolerance
               dict(bw_gbps_median=PEAK * 1.05),  # above
               dict(direction="bidir", bw_gbps_median=PEAK * 1.9),  # bidir counts both ways: 2x the peak
               dict(direction="bidir", bw_gbps_median=PEAK * 2.1),
               dict(direction="pull", src_gpu=3, dst_gpu=2, bw_gbps_median=500.0))
    out = impossible(df)
    assert list(out.index) == [1, 3, 4]
    assert list(out["check"]) == ["link"] * 3
    assert out.loc[3, "ceiling_gbps"] == pytest.approx(2 * PEAK)
    assert "above the link's ceiling 478 GB/s" in out.loc[1, "reason"] and "bidir" in out.loc[3, "reason"]
    assert set(out.columns) >= set(df.columns) | set(ceilings.COLUMNS)


def test_link_listed_one_way_holds_both_ways_and_unknown_links_are_skipped():
    meta = copy.deepcopy(META)
    meta["topology"]["h"]["links"] = [{"src_gpu": 0, "dst_gpu": 1, "peak_gbps": 50.0}]  # PCIe-like
    df = frame(dict(src_gpu=1, dst_gpu=0, bw_gbps_median=60.0), dict(src_gpu=2, dst_gpu=3, bw_gbps_median=9e9),
               dict(host="other", bw_gbps_median=9e9))
    assert flagged(df, meta) == [0]
    assert parse_meta(meta).link_peaks() == {("h", 0, 1): 50.0, ("h", 1, 0): 50.0}


def test_only_bandwidth_rows_of_a_pair_are_checked():
    df = frame(dict(kind="latency", direction="oneway", bw_gbps_median=float("nan")),
               dict(kind="op", direction="op", suite="handles", method="ipc_get_mem_handle",
                    bw_gbps_median=float("nan")),
               dict(kind="error", direction="op", method="err_open_own_handle", bw_gbps_median=float("nan")),
               dict(dst_rank=-1, dst_gpu=-1, bw_gbps_median=9e9))  # an aggregate row: no single link
    assert flagged(df) == []


def test_no_meta_or_no_topology_checks_nothing():
    df = frame(dict(bw_gbps_median=9e9), dict(src_gpu=0, dst_gpu=0, bw_gbps_median=9e9))
    assert flagged(df, None) == [] and flagged(df, {}) == []
    assert flagged(df, {"gpus": {"h": [{"index": 0, "name": "x"}]}}) == []  # no l2_bytes / mem_bw_gbps
    assert impossible(df.iloc[0:0]).empty


# ------------------------------------------------------------------------------------------ same-GPU memory

def test_same_gpu_copy_above_half_the_memory_bandwidth():
    """The real case: a same-GPU pool_sm_read bidir row at 4,017 GB/s at 256 MiB on an H200."""
    df = frame(dict(suite="pool", method="pool_sm_read", direction="bidir", src_gpu=0, dst_gpu=0,
                    src_rank=0, dst_rank=2, bw_gbps_median=4017.0),
               dict(src_gpu=1, dst_gpu=1, bw_gbps_median=2300.0),  # below 2400 (+2%)
               dict(src_gpu=2, dst_gpu=2, bytes=32 * M, bw_gbps_median=4017.0),  # fits in L2: allowed
               dict(src_gpu=3, dst_gpu=3, bw_gbps_median=2420.0))  # within the tolerance
    out = impossible(df)
    assert list(out.index) == [0]
    assert out.loc[0, "check"] == "memory" and out.loc[0, "ceiling_gbps"] == pytest.approx(2400.0)
    assert "half its 4,800 GB/s memory bandwidth" in out.loc[0, "reason"] and "60M L2" in out.loc[0, "reason"]


def test_gpu_limits_need_both_fields():
    meta = {"gpus": {"h": [{"index": 0, "l2_bytes": 1, "mem_bw_gbps": 2.0}, {"index": 1, "l2_bytes": 1},
                           {"index": 2, "mem_bw_gbps": None, "l2_bytes": 5}]}}
    df = frame(*(dict(src_gpu=g, dst_gpu=g, bw_gbps_median=9e9) for g in range(3)))
    assert flagged(df, meta) == [0]


# ------------------------------------------------------------------------------------------ all-to-all

def alltoall(bw: float, **extra) -> list[dict]:
    """GPU 0's flows to GPUs 1..3 and one to itself, each at `bw` GB/s."""
    return [dict(method="ce_alltoall", src_gpu=0, dst_gpu=d, dst_rank=d, bw_gbps_median=bw, **extra)
            for d in (1, 2, 3, 0)]


def test_alltoall_flows_of_one_gpu_above_its_nvlink_aggregate():
    df = frame(*alltoall(200.0), *alltoall(150.0, bytes=4 * M))
    out = impossible(df)
    assert list(out.index) == [0, 1, 2]  # the three cross-GPU flows at 256M (600 > 478); not the same-GPU flow
    assert set(out["check"]) == {"alltoall"}
    assert out["value_gbps"].tolist() == [600.0] * 3
    assert "3 cross-GPU flows at 256M sum to 600 GB/s" in out.loc[0, "reason"]
    assert "18 links x 26.5625 GB/s" in out.loc[0, "reason"]


def test_alltoall_sums_every_rank_on_the_gpu_and_needs_per_gpu():
    """Two ranks on GPU 0 each send to GPU 1: both flows leave GPU 0 at once."""
    df = frame(dict(method="ce_alltoall", src_rank=0, dst_rank=1, bw_gbps_median=300.0),
               dict(method="ce_alltoall", src_rank=2, dst_rank=1, bw_gbps_median=300.0))
    assert flagged(df) == [0, 1]
    meta = copy.deepcopy(META)
    del meta["topology"]["h"]["per_gpu"]
    assert flagged(df, meta) == []
    assert parse_meta(META).nvlink_aggregate()[("h", 0)] == (PEAK, 18, 26.5625)


def test_several_checks_on_one_row():
    df = frame(dict(method="ce_alltoall", bw_gbps_median=600.0), dict(method="ce_alltoall", dst_gpu=2,
                                                                      bw_gbps_median=10.0))
    out = impossible(df)
    assert out.loc[0, "check"] == "link+alltoall" and out.loc[1, "check"] == "alltoall"
    assert out.loc[0, "ceiling_gbps"] == pytest.approx(PEAK)


# ------------------------------------------------------------------------------------------ real runs, report

def test_a_real_run_with_impossible_alltoall_rows_is_caught():
    """tests/data/impossible/README.md: a run from before the all-to-all was timed on one window."""
    run = Path(__file__).resolve().parent / "data" / "impossible" / "20261122-194200-vm"
    r = load_run(run / "results.csv")
    out = ceilings.impossible_rows(r.frame, r.meta)
    assert len(out) and set(out["method"]) == {"ce_alltoall"} and set(out["check"]) == {"alltoall"}


def test_committed_runs_have_no_impossible_rows():
    """Every run shipped under results/ comes from the current code, which times concurrent flows on one
    window: none of its rows may be above a physical ceiling."""
    runs = sorted((Path(__file__).resolve().parents[1] / "results").glob("*/results.csv"))
    assert runs, "no committed run under results/"
    for run in map(load_run, runs):
        out = ceilings.impossible_rows(run.frame, run.meta)
        assert len(out) == 0, (run.label, out.head().to_dict("records"))
        assert run.meta.gpus[run.meta.hosts[0]][0].mem_bw_gbps, "the memory ceiling needs mem_bw_gbps"


def test_report_flags_impossible_numbers(tmp_path, capsys):
    from ipcbench.report import command as report

    run = synth.make_run(tmp_path / "results", suites=["copy"], sizes=[4 * K, 64 * M])
    header, records = synth.read_csv(run)
    i = next(k for k, r in enumerate(records) if r[header.index("method")] == "ce" and
             r[header.index("direction")] == "push" and r[header.index("src_gpu")] == "0" and
             r[header.index("dst_gpu")] == "1" and r[header.index("bytes")] == str(64 * M))
    synth.set_samples(run, i, [64 * M / 700e3] * 5)  # 700 GB/s on a 478 GB/s link
    parser = argparse.ArgumentParser()
    report.add_arguments(parser)
    rc = report.run(parser.parse_args([str(tmp_path / "results"), "--no-figures", "--out", str(tmp_path / "rep")]))
    out, _ = capsys.readouterr()
    assert rc == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    html = (tmp_path / "rep" / "report.html").read_text()
    title = ("Impossible numbers (above a physical ceiling: a bug or a mis-timed measurement, never a number to "
             "quote): 1")
    for text in (md, out, html):
        assert title in text
        assert "1 impossible numbers" in text
    assert "0 impossible numbers" not in md
    line = next(x for x in md.splitlines() if x.startswith("| 20261122-190000-synth | hostA | copy/ce push | 0→1 "))
    assert "| 700.0 | 478.1 |" in line and "above the link's ceiling" in line
    summary = next(x for x in md.splitlines() if x.startswith("| copy | ce | push |"))
    assert "impossible 1" in summary
