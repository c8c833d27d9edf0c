"""End-to-end `nccl` suite beside `copy` under MPI on a GPU machine with two GPUs and NCCL (skipped without
either).

Runs `MPIEXEC -n 2 python -m ipcbench copy nccl --sizes 4K:256M:x16 --out TMP` and checks that every nccl row
is there (push, bidir, oneway, pingpong), verified, and plausible, prints NCCL beside the copy engine at
every size, then makes the report and checks its NCCL comparison. A second run corrupts what NCCL
delivered (IPCBENCH_FAULT_CORRUPT=nccl) and must fail verification. No timing assertions beyond sanity
bounds: what NCCL reaches is what this prints.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpu_mpi import run_ipcbench

SIZES = [4096 << (4 * i) for i in range(5)]  # 4K .. 256M, x16


def need_two_gpus_and_nccl():
    from conftest import gpu_count
    from ipcbench.ipc.nccl import nccl_support

    if gpu_count() < 2:
        pytest.skip("the nccl suite measures cross-GPU pairs: needs two GPUs")
    ok, why = nccl_support()
    if not ok:
        pytest.skip(f"no NCCL: {why}")


def show(rows) -> None:
    """NCCL beside the copy engine, per size (pair 0->1), and the small-message times."""
    def by(method, direction, suite):
        return {int(r["bytes"]): r for r in rows
                if (r["method"], r["direction"], r["suite"]) == (method, direction, suite)
                and (r["src_rank"], r["dst_rank"]) == ("0", "1")}

    print("\n GB/s (pair 0->1)" + "".join(f"  {h:>12}" for h in ("ce push", "nccl push", "ce bidir", "nccl bidir")))
    ce, nc, ceb, ncb = by("ce", "push", "copy"), by("nccl", "push", "nccl"), by("ce", "bidir", "copy"), \
        by("nccl", "bidir", "nccl")
    for s in SIZES:
        cells = [d[s]["bw_gbps_median"] if s in d else "-" for d in (ce, nc, ceb, ncb)]
        print(f" {s:>16}" + "".join(f"  {float(c):12.1f}" if c != "-" else f"  {c:>12}" for c in cells))
    print("\n nccl one way (us): " + ", ".join(f"{b} B {float(r['time_us_median']):.2f}"
                                              for b, r in sorted(by("nccl", "oneway", "nccl").items())))
    pp = by("nccl_pingpong", "oneway", "nccl")
    print(" nccl pingpong one way (us): " + ", ".join(f"{float(r['time_us_median']):.2f}" for r in pp.values()))
    notes = {r["note"].split("; ")[-1] for r in rows if r["suite"] == "nccl"}
    print(" how NCCL ran: " + " | ".join(sorted(notes)))


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_nccl_suite_end_to_end(tmp_path):
    need_two_gpus_and_nccl()
    out = tmp_path / "run"
    p, rows = run_ipcbench(out, 2, "copy", "nccl", "--sizes", "4K:256M:x16", "--timeout", "120", timeout=840)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    nccl = [r for r in rows if r["suite"] == "nccl"]
    show(rows)
    got = {(r["method"], r["direction"], r["src_rank"], r["dst_rank"]) for r in nccl}
    for key in (("nccl", "push", "0", "1"), ("nccl", "push", "1", "0"), ("nccl", "bidir", "0", "1"),
                ("nccl", "oneway", "0", "1"), ("nccl", "oneway", "1", "0"), ("nccl_pingpong", "oneway", "0", "1")):
        assert key in got, (key, sorted(got))
    for r in nccl:
        assert r["verified"] == "true" and int(r["checks"]) >= int(r["samples"]), r
        t = float(r["time_us_median"])
        assert 0 < float(r["time_us_min"]) <= t <= float(r["time_us_max"]) < 1e6, r
        assert "NCCL 2." in r["note"], r
        if r["direction"] == "oneway":
            assert r["kind"] == "latency" and r["bw_gbps_median"] == "" and 0.5 < t < 1000, r
    for direction in ("push", "bidir"):
        assert {int(r["bytes"]) for r in nccl if r["direction"] == direction} == set(SIZES), direction
    big = {r["direction"]: float(r["bw_gbps_median"]) for r in nccl
           if r["method"] == "nccl" and int(r["bytes"]) == SIZES[-1] and r["src_rank"] == "0"}
    assert 50 < big["push"] < 1000 and 100 < big["bidir"] < 2000, big
    rep = subprocess.run([sys.executable, "-m", "ipcbench", "report", str(out), "--no-figures"], capture_output=True,
                         text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr[-2000:]
    assert "Against NCCL" in rep.stdout and "What IPC buys over NCCL" in rep.stdout, rep.stdout[-3000:]
    print(rep.stdout[:3000])


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_a_corrupted_nccl_receive_fails_the_run(tmp_path, monkeypatch):
    need_two_gpus_and_nccl()
    monkeypatch.setenv("IPCBENCH_FAULT_CORRUPT", "nccl")
    p, rows = run_ipcbench(tmp_path / "run", 2, "nccl", "--sizes", "64K,4M", "--samples", "2", "--min-time", "1",
                           "--timeout", "60", "--quiet")
    assert p.returncode == 1 and "FAILED verification" in p.stderr, (p.returncode, p.stderr[-2000:])
    bad = [r for r in rows if r["method"] == "nccl"]
    assert bad and all(r["verified"] == "false" and "mismatched words" in r["note"] for r in bad)
    assert all(r["verified"] == "true" for r in rows if r["method"] == "nccl_pingpong")
