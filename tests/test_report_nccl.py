"""The report's NCCL comparison (report/tables.speedup_rows(baseline="nccl"), the "vs NCCL" tables and the
headline's NCCL line) on small hand-made frames and on a synthetic run with nccl rows (tests/synth.py).
Table logic only: the numbers are made up."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synth  # noqa: E402
from ipcbench.record.meta import Meta  # noqa: E402
from ipcbench.record.run import derive_facts  # noqa: E402
from ipcbench.report import tables as T  # noqa: E402
from test_report import md_table, num, run_report  # noqa: E402


def frame(rows) -> pd.DataFrame:
    """Rows (suite, method, direction, src_gpu, dst_gpu, bytes, GB/s) of one run on host h, cross-GPU."""
    df = pd.DataFrame(rows, columns=["suite", "method", "direction", "src_gpu", "dst_gpu", "bytes", "bw_gbps_median"])
    df = df.assign(run="r", host="h", src_rank=df["src_gpu"], dst_rank=df["dst_gpu"], same_gpu=False,
                   time_us_median=df["bytes"] / df["bw_gbps_median"] / 1e3)
    derive_facts(df, Meta())  # the engine of each row, from what the suites declare
    return T.add_scope(df)


SMALL = [
    ("copy", "ce", "push", 0, 1, 4096, 2.0), ("copy", "ce", "push", 0, 1, 1 << 28, 390.0),
    ("copy", "ce", "push", 1, 0, 1 << 28, 380.0), ("copy", "ce", "bidir", 0, 1, 1 << 28, 760.0),
    ("kernel", "sm_write", "push", 0, 1, 1 << 28, 370.0),
    ("nccl", "nccl", "push", 0, 1, 4096, 0.5), ("nccl", "nccl", "push", 0, 1, 1 << 28, 300.0),
    ("nccl", "nccl", "push", 1, 0, 1 << 28, 320.0), ("nccl", "nccl", "bidir", 0, 1, 1 << 28, 600.0),
    ("staged", "shm_staged", "push", 0, 1, 1 << 28, 50.0),
]


def test_vs_nccl_divides_by_nccl_at_the_same_pair_direction_kind_and_size():
    sp = T.speedup_rows(frame(SMALL), "nccl").set_index(["method", "direction", "src_gpu", "dst_gpu", "bytes"])
    assert sp.loc[("ce", "push", 0, 1, 1 << 28), "speedup"] == pytest.approx(390 / 300)
    assert sp.loc[("ce", "push", 1, 0, 1 << 28), "speedup"] == pytest.approx(380 / 320)
    assert sp.loc[("ce", "bidir", 0, 1, 1 << 28), "speedup"] == pytest.approx(760 / 600)  # bidir vs bidir
    assert sp.loc[("ce", "push", 0, 1, 4096), "speedup"] == pytest.approx(4.0)
    # sm_write 1->0 has no row; 0->1 has its pair's NCCL row
    assert sp.loc[("sm_write", "push", 0, 1, 1 << 28), "speedup"] == pytest.approx(370 / 300)
    methods = set(sp.index.get_level_values("method"))
    assert "nccl" not in methods and "shm_staged" not in methods  # baselines are never IPC


def test_nccl_is_a_baseline_not_an_ipc_method_of_the_staged_speedup():
    sp = T.speedup_rows(frame(SMALL))
    assert set(sp["method"]) == {"ce", "sm_write"}
    assert sp.set_index(["method", "direction", "src_gpu", "dst_gpu", "bytes"]).loc[
        ("ce", "push", 0, 1, 1 << 28), "speedup"] == pytest.approx(390 / 50)


def test_without_nccl_rows_there_is_no_nccl_speedup():
    no_nccl = frame([r for r in SMALL if r[0] != "nccl"])
    assert T.speedup_rows(no_nccl, "nccl").empty and T.best_staged(T.pair_rows(no_nccl), "nccl").empty


def test_the_glance_has_the_largest_and_the_smallest_size():
    g = T.speedup_glance(T.speedup_rows(frame(SMALL), "nccl")).set_index("method")
    assert g.loc["ce", "bytes"] == 1 << 28 and g.loc["ce", "speedup"] == pytest.approx((390 / 300 + 380 / 320) / 2)
    assert g.loc["ce", "small_bytes"] == 4096 and g.loc["ce", "small_speedup"] == pytest.approx(4.0)
    best = T.best_staged(T.pair_rows(frame(SMALL)), "nccl").iloc[0]
    assert (best.method, best.bytes, best.bw) == ("nccl", 1 << 28, pytest.approx(310.0))


def test_latency_glance_has_nccls_one_way_rows():
    df = frame(SMALL)
    lat = pd.DataFrame([("latency", "ce", "oneway", 0, 1, 4, 2.2), ("nccl", "nccl", "oneway", 0, 1, 4, 8.0),
                        ("nccl", "nccl_pingpong", "oneway", 0, 1, 4, 10.0)],
                       columns=["suite", "method", "direction", "src_gpu", "dst_gpu", "bytes", "time_us_median"])
    lat = lat.assign(run="r", host="h", src_rank=0, dst_rank=1, same_gpu=False, bw_gbps_median=None)
    derive_facts(lat, Meta())
    lat = T.add_scope(lat)
    g = T.latency_glance(pd.concat([df, lat], ignore_index=True)).set_index("method")
    assert list(g.index) == ["ce", "nccl", "nccl_pingpong"] and g.loc["nccl", "median"] == 8.0
    assert "nccl" in set(T.latency_glance(lat)["method"])


@pytest.fixture(scope="module")
def nccl_report(tmp_path_factory):
    import argparse
    import contextlib
    import io

    from ipcbench.report import command as report

    root = tmp_path_factory.mktemp("nccl")
    run_dir = synth.make_run(root / "results", suites=["copy", "kernel", "staged", "latency", "nccl"], nccl=True,
                             same_gpu=False)
    parser = argparse.ArgumentParser()
    report.add_arguments(parser)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = report.run(parser.parse_args([str(root / "results"), "--no-figures"]))
    return dict(rc=rc, out=out.getvalue(), md=(root / "results" / "report" / "report.md").read_text(),
                run_dir=run_dir)


def test_the_report_has_a_vs_nccl_table_that_holds_the_right_numbers(nccl_report):
    md, run_dir = nccl_report["md"], nccl_report["run_dir"]
    assert nccl_report["rc"] == 0
    table = md_table(md, "Speedup over NCCL (ncclSend/ncclRecv, same pair, kind of direction and size)",
                     after=f"## Run {run_dir.name}").set_index(["suite", "method", "direction"])
    df = synth_rows(run_dir)
    bw = df[df["bw_gbps_median"].notna()].assign(kind=lambda d: d["direction"].eq("bidir"))
    base = bw[bw["method"] == "nccl"].set_index(["kind", "bytes", "src_gpu", "dst_gpu"])["bw_gbps_median"]
    ipc = bw[~bw["method"].str.endswith("_staged") & (bw["method"] != "nccl")]
    assert set(table.index.get_level_values("method")) == set(ipc["method"])
    for (suite, method, direction), g in ipc.groupby(["suite", "method", "direction"]):
        big = g[g["bytes"] == g["bytes"].max()]
        sp = big["bw_gbps_median"].to_numpy() / base.reindex(
            list(zip(big["kind"], big["bytes"], big["src_gpu"], big["dst_gpu"]))).to_numpy()
        row = table.loc[(suite, method, direction)]
        assert num(row["speedup median"]) == pytest.approx(pd.Series(sp).median(), abs=0.0051)
        assert num(row["min"]) == pytest.approx(sp.min(), abs=0.0051)
        assert num(row["NCCL GB/s"]) > 0
    # the staged table is still there, without NCCL among its IPC methods
    staged = md_table(md, "Speedup over the best host-staged path", after=f"## Run {run_dir.name}")
    assert "nccl" not in set(staged["method"])


def test_the_headline_says_what_ipc_buys_over_nccl(nccl_report):
    md, out = nccl_report["md"], nccl_report["out"]
    m = re.search(r"\*\*Against NCCL\*\* \(ncclSend/ncclRecv, nccl suite\): NCCL reaches \*\*([\d.]+) GB/s\*\* at "
                  r"256M \(nccl/nccl push, median over pairs\); the best IPC method, (\S+ \w+), is \*\*([\d.]+)×\*\* "
                  r"NCCL at 256M; at 4K, [\d.]+–[\d.]+× depending on the method\.", md)
    assert m, md[:4000]
    assert 300 < float(m.group(1)) < 345 and m.group(2) == "copy/ce push" and 1.1 < float(m.group(3)) < 1.25
    glance = md_table(md, "What IPC buys over NCCL: speedup over ncclSend/ncclRecv, same pair, kind of direction "
                          "and size (median over pairs)")
    assert "× NCCL" in glance.columns and not glance["IPC method (best direction)"].str.contains("nccl").any()
    assert "Against NCCL" in out and "What IPC buys over NCCL" in out
    assert re.search(r"Smallest message, one way\*\* \(latency and nccl suites, median over pairs\): at 4 B: "
                     r".*nccl_pingpong [\d.]+ µs", md)


def test_a_run_without_nccl_has_no_nccl_in_its_report(tmp_path, capsys):
    synth.make_run(tmp_path / "results", suites=["copy", "staged"], same_gpu=False)
    rc, out, _ = run_report(capsys, tmp_path / "results", "--no-figures")
    md = (tmp_path / "results" / "report" / "report.md").read_text()
    assert rc == 0 and "Against NCCL" not in md + out and "over NCCL" not in md + out
    for text in (md.replace("**", ""), " ".join(out.split())):  # and the headline says why there is no NCCL row
        assert "No NCCL rows: the nccl suite was not run; IPC is not compared with NCCL here." in text


def synth_rows(run_dir: Path) -> pd.DataFrame:
    df = pd.read_csv(run_dir / "results.csv", keep_default_na=False, na_values=[""])
    return df[df["src_gpu"] != df["dst_gpu"]]
