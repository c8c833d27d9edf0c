"""Rank -> GPU mapping, per-rank GPU binding detection and the pair schedule (pure logic, no MPI/GPU)."""

import pytest

from ipcbench.core.world import (WorldError, binding_problem, gpu_for_local_rank, launcher_rank, ordered_pairs,
                            unordered_pairs)


def test_rank_to_gpu_modulo():
    assert [gpu_for_local_rank(r, 4) for r in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [gpu_for_local_rank(r, 1) for r in range(3)] == [0, 0, 0]
    with pytest.raises(WorldError):
        gpu_for_local_rank(0, 0)


def test_binding_detected_and_explained():
    msg = binding_problem(["GPU-a", "GPU-b", "GPU-c", "GPU-d"], [1, 1, 1, 1])
    assert msg and "--gpus-per-task" in msg and "CUDA IPC" in msg


def test_no_binding_problem_when_all_gpus_visible_or_shared():
    assert binding_problem(["GPU-a", "GPU-b"], [4, 4]) is None
    assert binding_problem(["GPU-a", "GPU-a"], [1, 1]) is None  # two ranks on the one GPU: same-GPU IPC
    assert binding_problem(["GPU-a"], [1]) is None


def test_pair_schedules():
    assert ordered_pairs(3) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    assert unordered_pairs(4) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert len(ordered_pairs(8)) == 56


def test_launcher_rank_from_env(monkeypatch):
    for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(v, raising=False)
    assert launcher_rank() is None
    monkeypatch.setenv("PMI_RANK", "3")
    assert launcher_rank() == 3
