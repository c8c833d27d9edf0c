"""`ipcbench check` on a real GPU machine of any GPU count: two ranks, on one GPU (the same-GPU pair every
machine has) or on GPUs 0 and 1 (one rank each, where there are two or more GPUs), judged by the shipped
expectations of its GPU and link (judging/defaults.toml). What is asserted follows the topology the run
recorded (its meta.json's ranks, its verdict's links), never an assumed one:

- a quiet node is healthy (exit 0), and every row the shipped expectations name for its GPU model and link at
  the sizes check measures was judged against them;
- with a neighbour loading what the pair uses (tests/neighbour_load.py: copies within GPU 0 where both ranks
  share it, GPU 0 -> GPU 1 over the link where they do not) the check exits 1, and every failure is on that
  pair's link kind; across GPUs the small messages are among the failures (the copy engine's 4K rows: a
  neighbour on NVLink slowed 4K-256K copies by 25-33% and left 256M alone).

The wall time, start-up included, is printed (read with -s). Skipped without a GPU, and where the GPU or the
link has no shipped expectation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import gpu_count
from gpu_mpi import mpiexec_cmd

NEIGHBOUR = Path(__file__).with_name("neighbour_load.py")
SMALL = 4096
SPREAD_SET = "NVIDIA H100 80GB HBM3"  # its cross-GPU 4K ceilings keep ~15% (judging/defaults.toml); others ~2x


def _check(out: Path) -> tuple[subprocess.CompletedProcess, dict, float]:
    cmd = mpiexec_cmd(2) + [sys.executable, "-m", "ipcbench", "check", "--out", str(out), "--json"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    wall = time.monotonic() - t0
    print(f"check wall time, start-up included: {wall:.1f} s")
    print(p.stdout[-3000:])
    print(p.stderr[-2000:], file=sys.stderr)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("{")), None)
    verdict = json.loads(line) if line else {}
    return p, verdict, wall


def _gpus_of_the_ranks(out: Path) -> list[int]:
    """The GPU of each rank, as the run recorded it (meta.json's ranks)."""
    ranks = json.loads((out / "meta.json").read_text())["ranks"]
    return [int(r["gpu"]) for r in sorted(ranks, key=lambda r: r["rank"])]


def _skip_without_expectations(verdict: dict) -> None:
    assert verdict, "no JSON verdict on stdout"
    if any("no expectation for" in c["reason"] or "link is unknown" in c["reason"] for c in verdict["checks"]):
        pytest.skip("no shipped expectation for this GPU or link (give --thresholds)")


def _named_by_the_shipped_expectations(model: str, link: str) -> set[tuple[str, str, int]]:
    """(method, direction, bytes) of every row check measures that the shipped expectations name for this
    GPU model and link (bidir rows are judged once per pair)."""
    from ipcbench.check import plan
    from ipcbench.judging import expect
    from ipcbench.sizes import parse_sizes

    sizes = parse_sizes(plan.SIZES)
    return {(e.method, e.direction, n) for e in expect.defaults()
            if e.link == link and e.for_gpu(model) and e.method in plan.METHODS_JUDGED
            for n in sizes if e.lo <= n <= e.hi}


@pytest.mark.gpu
@pytest.mark.timeout(320)
def test_check_on_a_quiet_node_is_healthy(tmp_path):
    out = tmp_path / "check"
    p, verdict, _ = _check(out)
    _skip_without_expectations(verdict)
    gpus = _gpus_of_the_ranks(out)
    links = {c["link"] for c in verdict["checks"] if c["source"] == "thresholds"}
    if len(set(gpus)) == 1:  # two ranks on one GPU
        assert links == {"same_gpu"}, (gpus, links)
    else:  # one rank per GPU: one link kind between them
        assert len(links) == 1 and "same_gpu" not in links, (gpus, links)
    # This test's own process may hold a context on the GPUs (other GPU tests of the session made one): the node's
    # evidence names it as another job's process (judging/evidence_rules), and that is the only failure allowed here.
    failed = [c for c in verdict["checks"] if c["status"] != "pass"]
    assert all(c["source"] == "evidence" and f"pid {os.getpid()} " in c["reason"] for c in failed), failed
    assert p.returncode == (1 if failed else 0), p.stderr[-2000:]
    assert verdict["verdict"] == ("unhealthy" if failed else "healthy")
    (model,) = verdict["gpu_models"]
    (link,) = links
    judged = {(c["method"], c["direction"], c["bytes"]) for c in verdict["checks"] if c["source"] == "thresholds"}
    named = _named_by_the_shipped_expectations(model, link)
    assert named and named <= judged, sorted(named - judged)


@pytest.mark.gpu
@pytest.mark.timeout(320)
def test_a_neighbour_on_what_the_pair_uses_makes_the_node_unhealthy(tmp_path):
    src, dst = (0, 1) if gpu_count() >= 2 else (0, 0)  # where check's two ranks go: GPUs 0 and 1, or GPU 0
    load = subprocess.Popen([sys.executable, str(NEIGHBOUR), "120", str(src), str(dst)], stdout=subprocess.PIPE,
                            text=True)
    out = tmp_path / "check"
    try:
        assert load.stdout is not None and "loading" in load.stdout.readline()
        p, verdict, _ = _check(out)
    finally:
        load.terminate()
        load.wait(timeout=30)
    _skip_without_expectations(verdict)
    gpus = _gpus_of_the_ranks(out)
    assert sorted(set(gpus)) == sorted({src, dst}), (gpus, src, dst)  # the neighbour loads the pair measured
    assert p.returncode == 1, p.stderr[-2000:]
    every = [c for c in verdict["checks"] if c["status"] == "fail"]
    # the neighbour is another job's process on the GPUs measured: the node's evidence names it (judging/evidence_rules)
    assert any(str(load.pid) in c["reason"] for c in every if c["source"] == "evidence"), every
    failed = [c for c in every if c["source"] != "evidence"]  # and the rows it slowed fail their floors
    assert failed and verdict["reason"].startswith("FAIL: ")
    if src == dst:
        assert all(c["link"] == "same_gpu" and c["pair"].startswith("GPU 0 ranks") for c in failed), failed
    else:
        assert all(c["link"] != "same_gpu" and {c["src_gpu"], c["dst_gpu"]} == {0, 1} for c in failed), failed
        if verdict["gpu_models"] == [SPREAD_SET]:  # 4K ceilings from the run-to-run spread (not twice the time)
            assert any(c["bytes"] == SMALL and c["method"] == "ce" for c in failed), failed
