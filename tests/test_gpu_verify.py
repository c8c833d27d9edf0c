"""A corrupted destination must give verified=false and exit code 1 (skipped without a GPU).

IPCBENCH_FAULT_CORRUPT=ce makes the receiving rank overwrite 16 bytes of what the copy engine delivered,
on the GPU, before the real verification kernel runs: this proves the check runs and is counted, not that
a fake says so. Other methods in the same run must stay verified.
"""

from __future__ import annotations

import os

import pytest

from gpu_mpi import run_ipcbench


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_corrupted_destination_fails_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("IPCBENCH_FAULT_CORRUPT", "ce")
    p, rows = run_ipcbench(tmp_path / "run", 2, "copy", "kernel", "--sizes", "4K,1M", "--samples", "2",
                           "--min-time", "1", "--timeout", "60", "--quiet")
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    assert "FAILED verification" in p.stderr
    ce = [r for r in rows if r["method"] == "ce"]
    others = [r for r in rows if r["method"] != "ce"]
    assert ce and others
    for r in ce:
        assert r["verified"] == "false", r
        assert "mismatched words" in r["note"], r
    for r in others:
        assert r["verified"] == "true", r
    assert os.path.exists(tmp_path / "run" / "meta.json")
