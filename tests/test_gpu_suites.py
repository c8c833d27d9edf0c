"""End-to-end `handles` and `pipeline` suites under MPI on a GPU machine (skipped without a GPU)."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from gpu_mpi import mpiexec_cmd


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_handles_and_pipeline(tmp_path):
    out = tmp_path / "run"
    cmd = mpiexec_cmd(2) + [sys.executable, "-m", "ipcbench", "handles", "pipeline", "--sizes", "64K:4M:x4",
                            "--samples", "3", "--timeout", "60", "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=540)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = list(csv.DictReader(open(out / "results.csv", newline="")))
    by_method = {}
    for r in rows:
        by_method.setdefault((r["suite"], r["method"]), []).append(r)
    for m in ("ipc_get_mem_handle", "ipc_open_mem_handle_first", "ipc_open_mem_handle_repeat",
              "ipc_close_mem_handle", "ipc_get_event_handle", "ipc_open_event_handle",
              "err_open_freed_handle", "err_open_own_handle", "err_host_pointer_handle",
              "err_open_exited_owner_handle", "pool_export_fd", "pool_export_pointer", "fd_transfer",
              "pool_import", "pool_import_pointer"):
        assert ("handles", m) in by_method, m
    for d in (2, 4, 8):
        assert ("pipeline", f"ring_d{d}") in by_method and ("pipeline", f"ring_d{d}_latency") in by_method
    for r in rows:
        t = float(r["time_us_median"])
        assert 0 < float(r["time_us_min"]) <= t <= float(r["time_us_max"]) < 1e6, r
        if r["method"].startswith("err_"):
            # error-path probes are not transfers: kind "error", never "verified"; the note says whether the
            # message named the rank and the call
            assert r["kind"] == "error" and r["verified"] == "false", r
            assert r["note"].startswith("clear error:") and "rank" in r["note"] and "cudaIpc" in r["note"], r
            continue
        assert r["verified"] == "true", r
        if r["suite"] == "handles":
            assert r["direction"] == "op" and r["bw_gbps_median"] == ""
        if r["suite"] == "pipeline" and r["direction"] == "push":
            assert float(r["bw_gbps_median"]) > 0 and "p99_us=" in r["note"]
        if r["suite"] == "pipeline" and r["direction"] == "oneway":
            assert "p99_us=" in r["note"] and r["bw_gbps_median"] == ""


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_every_suite_writes_the_rows_it_planned(tmp_path):
    """`all` on two ranks, read back: the reader holds results.csv to the planned rows meta.json records
    (record/agreement.py refuses a row missing, doubled or not planned), so every suite's declared rows (Step.writes)
    are what its code writes, on a real GPU."""
    from ipcbench.record.run import load_run

    out = tmp_path / "run"
    cmd = mpiexec_cmd(2) + [sys.executable, "-m", "ipcbench", "all", "--quick", "--samples", "3", "--timeout", "60",
                            "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=840)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    run = load_run(out / "results.csv")
    assert run.unchecked == "" and run.incomplete == "" and run.meta.planned_rows
    # a suite planned with no pair here writes nothing (NCCL measures no two ranks of one GPU), and says so in its plan
    suites = {s.suite for s in run.meta.planned_rows if s.pairs} - {s.suite for s in run.meta.skipped}
    assert suites <= set(run.frame["suite"]) and len(run.frame) == run.meta.rows
