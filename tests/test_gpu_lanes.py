"""Sampling over contexts on a real GPU (core/lanes.py, Gpu.lanes): the lanes' green contexts are made, every copy
they carry lands, each lane's events time its own copies, and a run's small rows spread over them while the large,
the both-ways and the two-sided rows keep one context. Skipped without a GPU; the pair of GPUs test skips on one."""

from __future__ import annotations


import pytest

from gpu_mpi import run_ipcbench


def _gpu():
    from ipcbench.core.gpu import Gpu

    return Gpu(0)


@pytest.mark.gpu
def test_every_lane_carries_its_copies_and_times_them():
    from ipcbench.core import lanes
    from ipcbench.core.methods import METHODS
    from ipcbench.core.timing import time_batch

    gpu = _gpu()
    try:
        streams = gpu.lanes(8)
        events = [tuple(gpu.event() for _ in range(4)) for _ in streams]
        n = 1 << 16
        src, dst = gpu.malloc(n), gpu.malloc(n)
        for method in ("ce", "sm_write"):
            batch = METHODS[method].batch(gpu, src, dst, n, 512)
            lanes.warm(gpu, batch, streams)
            for sample in range(3):
                gpu.fill(src, n, 77 + sample)
                gpu.fill(dst, n, 5)
                gpu.wait()
                us = lanes.time_lanes(gpu, batch, streams, events, 16, sample)
                assert len(us) == 8 and all(0 < u < 50 for u in us), (method, us)
                assert gpu.verify(dst, n, 77 + sample) == 0, method
            # the lanes' mean time per transfer is the work stream's over a long segment, give or take the spread of
            # contexts (2-5% relative sd) and of processes: one segment of 512 on the primary context
            work = time_batch(gpu, batch.with_count(512)) * 1e3 / 512
            mean = sum(us) / len(us)
            assert 0.8 * work < mean < 1.2 * work, (method, work, us)
    finally:
        gpu.close()


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_a_runs_small_one_way_rows_spread_over_the_contexts(tmp_path):
    p, rows = run_ipcbench(tmp_path / "run", 2, "copy", "kernel", "--sizes", "4K,1M,64M", "--contexts", "16",
                           "--timeout", "60", timeout=280)
    assert p.returncode == 0 and rows, p.stdout[-3000:] + p.stderr[-3000:]
    for r in rows:
        assert r["verified"] == "true", r
        spread = int(r["bytes"]) < (64 << 20) and r["direction"] in ("push", "pull")
        if spread:
            assert int(r["contexts"]) == 16, r
            values = [float(x) for x in r["context_us"].split()]
            assert len(values) == 16 and all(v > 0 for v in values)
            assert 0 < float(r["noise_contexts"]) < 0.2, r
        else:
            assert r["contexts"] == "1" and r["context_us"] == "" and r["noise_contexts"] == "", r


def _gpus() -> int:
    from conftest import gpu_count

    return gpu_count()


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_a_pair_of_gpus_spreads_its_copies_over_the_contexts_of_the_gpu_that_issues_them(tmp_path):
    """Two ranks on two GPUs: the issuing rank's green contexts reach the peer GPU's buffer, peer access having been
    enabled in the primary context only (what this asks of the driver), and every word lands. Needs two GPUs: skips
    on one."""
    if _gpus() < 2:
        pytest.skip("needs two GPUs: one-GPU machines run the same-GPU test above")
    p, rows = run_ipcbench(tmp_path / "run", 2, "copy", "kernel", "--sizes", "4K,1M", "--contexts", "8",
                           "--timeout", "60", timeout=280)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    cross = [r for r in rows if r["same_gpu"] == "false" and r["direction"] in ("push", "pull")]
    assert cross and all(r["verified"] == "true" and r["contexts"] == "8" for r in cross)
