"""evidence/take.ranks_seen: a process list that shows none of the run's own ranks cannot tell another job's
process from the run's own (pure: snapshots built by hand)."""

from __future__ import annotations

from evidence_synth import gpu
from ipcbench.evidence.model import ProcessReading, Snapshot
from ipcbench.evidence.take import UNSEEN_RANKS, ranks_seen


def snap(processes_per_gpu, own=(100, 101)):
    return Snapshot("h", "before", 1.0, [gpu(i, processes=ps) for i, ps in enumerate(processes_per_gpu)], list(own))


def test_the_runs_own_ranks_listed_keep_the_list():
    s = snap([[ProcessReading(100, 1, "python3")], [ProcessReading(101, 1, "python3"), ProcessReading(7, 1, "x")]])
    assert ranks_seen(s) is s


def test_no_rank_of_the_run_listed_makes_every_list_missing():
    """A container with its own PID namespace: NVML lists the host's pids (here 5100, 5101 for the ranks 100, 101):
    every rank would read as another job's process, so the item is missing, with why (check: cannot judge)."""
    s = ranks_seen(snap([[ProcessReading(5100, 1, "python3")], [ProcessReading(5101, 1, "python3")]]))
    assert all(not g.processes.ok and g.processes.missing == UNSEEN_RANKS for g in s.gpus)


def test_an_empty_list_while_the_ranks_hold_contexts_is_missing_too():
    s = ranks_seen(snap([[], []]))
    assert all(g.processes.missing == UNSEEN_RANKS for g in s.gpus)


def test_under_mps_the_server_holds_the_contexts():
    s = snap([[ProcessReading(900, 1, "nvidia-cuda-mps-server")], []])
    assert ranks_seen(s) is s
