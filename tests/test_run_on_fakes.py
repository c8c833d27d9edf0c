"""run/runner.run end to end on fakes: threads for ranks (fakes.FakeWorld), host memory for GPUs
(fakes.FakeGpu), a fake IPC driver for the buffer exchange (fakes.FakeCudaIpc), a fake device list. A
fake: this tests the run's orchestration (agreement on the directory, setup before anything is
written, buffers exchanged and released, rows and meta.json written, one exit status on every rank),
not a GPU."""

from __future__ import annotations

import csv
import json
import threading
from types import SimpleNamespace

import pytest

from fakes import FakeCudaIpc, FakeNode, run_ranks
from ipcbench import __version__
from ipcbench.config import RunConfig
from ipcbench.core import gpu as gpumod
from ipcbench.core.sampler import SamplingRule
from ipcbench.errors import UsageError
from ipcbench.ipc.buffers import BufferSet
from ipcbench.ipc.legacy import LegacyIpc
from ipcbench.run import meta, runner

FAST = SamplingRule(min_time_s=2e-5)


@pytest.fixture
def fake_job(monkeypatch):
    """Patch the run's entry points to the fakes; returns run(cfg, n) -> every rank's result."""
    local = threading.local()
    state = SimpleNamespace(node=None)

    def make_gpu(index, copy_shape=None, bulk_shape=None):
        g = state.node.gpus[local.world.local_rank]
        g.copy_shape = copy_shape or g.copy_shape  # the run's kernel shapes, as the real Gpu takes them
        g.bulk_shape = bulk_shape or g.bulk_shape
        return g

    monkeypatch.setattr(runner, "World", SimpleNamespace(create=lambda timeout: local.world))
    monkeypatch.setattr(gpumod, "device_count", lambda: state.node.n)
    monkeypatch.setattr(gpumod, "device_info", lambda i: gpumod.GpuInfo(i, "Fake GPU", f"GPU-fake-{i}",
                                                                     f"0000:{i + 1:02x}:00.0", 8, 1 << 30, "0.0"))
    monkeypatch.setattr(gpumod, "Gpu", make_gpu)
    monkeypatch.setattr(runner, "_node_topology", lambda: {"p2p_matrix": [[1, 1], [1, 1]], "nvml": False,
                                                           "links": []})
    monkeypatch.setattr(meta, "library_versions", lambda: {"mpi4py": "fake"})  # no MPI_Init in pytest
    from ipcbench.ipc import pool

    monkeypatch.setattr(pool, "pool_support", lambda index: (False, "no IPC pools on a fake GPU"))

    def run(cfg, n=2, entry=None, **node_kw):
        """entry(cfg) on every fake rank (default run/runner.run)."""
        state.node = FakeNode(n=n, kinds=(), **node_kw)
        FakeCudaIpc(state.node).install(monkeypatch)

        def rank(world):
            local.world = world
            try:
                return (entry or runner.run)(cfg)
            except UsageError as e:
                return f"UsageError: {e}"

        return run_ranks(rank, n=n), state.node

    return run


def cfg(out, **kw):
    args = dict(suites=("copy", "pool"), sizes=(1024, 4096), rule=FAST, out=str(out), pairs="auto",
                argv=("copy", "pool"))
    args.update(kw)
    return RunConfig(**args)


def rows_of(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_a_clean_run_writes_rows_and_meta_and_frees_everything(fake_job, tmp_path, capsys):
    out = tmp_path / "run"
    statuses, node = fake_job(cfg(out))
    assert statuses == [0, 0]
    rows = rows_of(out / "results.csv")
    assert len(rows) == 2 * 2 + 2 * 2 + 1 * 2  # push + pull over (0,1),(1,0), bidir over (0,1); two sizes
    assert all(r["verified"] == "true" and r["run_id"] == "run" for r in rows)
    m = json.loads((out / "meta.json").read_text())
    assert (m["status"], m["rows"], m["failed_rows"], m["ranks_per_gpu"]) == ("complete", 10, 0, 1)
    assert m["pair_mode"]["mode"] == "sequential" and m["versions"]["mpi4py"] == "fake"
    assert m["pair_mode"]["serial_pairs"] == {"coverage": "all", "requested": "auto", "reason": "2 ranks: few pairs"}
    assert m["options"]["serial_pairs"] == "auto"
    assert m["gpus"]["fakehost"][1]["uuid"] == "GPU-fake-1" and m["options"]["verify"] is True
    assert set(m["suite_wall_s"]) == {"copy"}
    text = capsys.readouterr().out
    assert f"ipcbench {__version__}: 2 ranks on 1 node(s), 2 GPU(s) per node (Fake GPU)" in text
    assert "skipping pool_ce push: no IPC pools on a fake GPU" in text
    assert "serial steps: every pair (--serial-pairs auto: 2 ranks: few pairs)" in text
    assert "copy/ce push at 4K: GB/s" in text and "10 rows in " in text
    assert node.memory.live() == set()  # every buffer freed, after its peer unmapped it


def test_a_corrupted_destination_fails_the_run_on_every_rank(fake_job, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("IPCBENCH_FAULT_CORRUPT", "ce")
    out = tmp_path / "run"
    statuses, _ = fake_job(cfg(out, suites=("copy",), quiet=True))
    assert statuses == [1, 1]
    assert all(r["verified"] == "false" and "mismatched words" in r["note"] for r in rows_of(out / "results.csv"))
    assert json.loads((out / "meta.json").read_text())["failed_rows"] == 10
    assert "row(s) FAILED verification" in capsys.readouterr().err


def test_an_existing_run_is_refused_before_anything_happens(fake_job, tmp_path):
    (tmp_path / "results.csv").write_text("old\n")
    statuses, node = fake_job(cfg(tmp_path))
    assert statuses[0] == statuses[1] and "already holds a run" in statuses[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]
    assert node.gpus[0].fills == []


def test_a_failed_setup_leaves_no_directory(fake_job, tmp_path):
    out = tmp_path / "run"
    statuses, _ = fake_job(cfg(out, sizes=(1 << 30,)), gpu_kw=[dict(free_bytes=1 << 30)] * 2)
    assert statuses[0] == statuses[1] and "use smaller --sizes" in statuses[0]
    assert not out.exists()


def test_one_rank_is_not_a_run(fake_job, tmp_path):
    statuses, _ = fake_job(cfg(tmp_path / "run"), n=1)
    assert statuses == ["UsageError: ipcbench measures pairs of processes: start it with mpirun -np N (N >= 2), "
                        "e.g. `mpirun -np 4 ipcbench all`"]


def test_dry_run_prints_the_plan_only(fake_job, tmp_path, capsys):
    statuses, node = fake_job(cfg(tmp_path / "run", dry_run=True, suites=("copy",)))
    assert statuses == [0, 0]
    text = capsys.readouterr().out
    assert text.startswith("ipcbench plan (dry run: no GPU work)") and "ce push" in text
    assert not (tmp_path / "run").exists() and node.gpus[0].fills == []


def test_buffer_sets_map_every_peer(monkeypatch):
    """A fake: BufferSet.create over FakeCudaIpc: a write into peer_inbox_slot(p, me) is what p reads in
    inbox_slot(me); the own rank maps its own buffers; destroy frees everything after every peer closed."""
    node = FakeNode(n=3, kinds=())
    drv = FakeCudaIpc(node).install(monkeypatch)

    def rank(world):
        g = node.gpus[world.local_rank]
        bs = BufferSet.create(world, LegacyIpc(g, world.rank), 5000)
        assert bs.slot_bytes == 8192 and bs.peer_src[world.local_rank] == bs.src
        assert set(bs.open_ms) == set(range(3)) - {world.local_rank}
        for p in range(3):
            g.fill(bs.peer_inbox_slot(p, world.local_rank), 8192, 100 * world.local_rank + p)
        world.node_barrier("every rank wrote")
        bad = [g.verify(bs.inbox_slot(s), 8192, 100 * s + world.local_rank) for s in range(3)]
        world.node_barrier("every rank checked")
        bs.destroy(world)
        return bad

    assert run_ranks(rank, n=3) == [[0, 0, 0]] * 3
    assert node.memory.live() == set() and all(v == 0 for v in drv.maps.values())


def test_dry_run_without_mpirun_plans_one_rank_per_gpu(fake_job, tmp_path, monkeypatch, capsys):
    from ipcbench.core import topology

    monkeypatch.setattr(topology, "nvml_gpu_count", lambda: 4)
    statuses, _ = fake_job(cfg(tmp_path / "run", dry_run=True, suites=("copy", "alltoall")), n=1)
    assert statuses == [0]
    text = capsys.readouterr().out
    assert "planning `mpirun -np 4`" in text and "ce all-to-all" in text  # planned for 4 ranks
    monkeypatch.setattr(topology, "nvml_gpu_count", lambda: None)
    statuses, _ = fake_job(cfg(tmp_path / "run", dry_run=True), n=1)
    assert "NVML sees 0 GPU(s) here" in statuses[0]


def test_concurrent_pairs_on_a_shared_gpu_are_refused_on_every_rank(fake_job, tmp_path, monkeypatch):
    monkeypatch.setattr(gpumod, "device_count", lambda: 1)  # both ranks on GPU 0
    statuses, _ = fake_job(cfg(tmp_path / "run", pairs="concurrent"))
    assert statuses[0] == statuses[1] and "--pairs concurrent: 2 ranks share a GPU" in statuses[0]
    assert not (tmp_path / "run").exists()


def test_pair_mode_follows_the_nodes_links():
    """auto: rounds only where every used GPU pair is on NVSwitch; unknown topology: one pair at a time."""
    switch = {"nvml": True, "links": [{"src_gpu": a, "dst_gpu": b, "kind": "nvswitch"}
                                      for a in range(4) for b in range(4) if a != b]}
    mixed = {"nvml": True, "links": switch["links"][:-1] + [{"src_gpu": 3, "dst_gpu": 2, "kind": "pcie"}]}

    def decide(topo, gpu_of=(0, 1, 2, 3), requested="auto"):
        return run_ranks(lambda w: runner._decide_pair_mode(w, requested, list(gpu_of), topo).mode, n=4)

    assert decide(switch) == ["concurrent"] * 4
    assert decide(mixed) == ["sequential"] * 4
    assert decide(None) == ["sequential"] * 4
    assert decide(mixed, gpu_of=(0, 1, 2, 0)) == ["sequential"] * 4  # ranks share GPU 0


def test_serial_pairs_follow_the_nodes_links_and_ranks():
    """auto: a ring behind NVSwitch with one rank per GPU, or under --quick; every pair where ranks share a GPU."""
    switch = {"nvml": True, "links": [{"src_gpu": a, "dst_gpu": b, "kind": "nvswitch"}
                                      for a in range(4) for b in range(4) if a != b]}
    pcie = {"nvml": True, "links": [{**ln, "kind": "pcie"} for ln in switch["links"]]}

    def cover(topo, gpu_of=(0, 1, 2, 3), serial="auto", quick=False):
        return run_ranks(lambda w: runner._decide_pair_mode(w, "auto", list(gpu_of), topo, serial,
                                                            quick).serial.coverage, n=4)

    assert cover(switch) == ["ring"] * 4
    assert cover(pcie) == ["all"] * 4 and cover(pcie, quick=True) == ["ring"] * 4
    assert cover(switch, gpu_of=(0, 1, 0, 1)) == ["all"] * 4  # two ranks per GPU: same-GPU pairs count
    assert cover(switch, gpu_of=(0, 1, 0, 1), quick=True) == ["all"] * 4
    assert cover(switch, serial="all") == ["all"] * 4 and cover(pcie, serial="ring") == ["ring"] * 4


def test_profile_per_rank(fake_job, tmp_path, monkeypatch):
    prof = tmp_path / "prof"
    monkeypatch.setenv("IPCBENCH_PROFILE", str(prof))
    statuses, _ = fake_job(cfg(tmp_path / "run", suites=("copy",), sizes=(4096,), quiet=True))
    assert statuses == [0, 0] and sorted(p.name for p in prof.iterdir()) == ["rank0.prof", "rank1.prof"]


def test_node_topology_from_cuda_and_nvml(monkeypatch):
    """A fake device list: the P2P matrix from cudaDeviceCanAccessPeer, the links from the NVML table."""
    from cupy.cuda import runtime

    from ipcbench.core import topology

    monkeypatch.setattr(runtime, "getDeviceCount", lambda: 3)
    monkeypatch.setattr(runtime, "deviceCanAccessPeer", lambda i, j: int(i + j != 3))
    monkeypatch.setattr(gpumod, "device_info", lambda i: gpumod.GpuInfo(i, "g", "u", f"bus{i}", 1, 1, "9.0"))
    monkeypatch.setattr(topology, "gpu_links", lambda buses: {"nvml": True, "links": [], "buses": buses})
    t = runner._node_topology()
    assert t == {"p2p_matrix": [[1, 1, 1], [1, 1, 0], [1, 0, 1]], "nvml": True, "links": [],
                 "buses": ["bus0", "bus1", "bus2"]}


def test_the_context_runs_each_release_once_the_last_added_first():
    from ipcbench.core.context import Ctx

    ctx = Ctx(world=None, gpu=None, buffers={}, rule=None, verify=True, run_id="x", gpu_of=[], node_ranks=[])
    done: list[str] = []
    for name in ("buffers", "events", "communicators"):
        ctx.add_cleanup(lambda name=name: done.append(name))
    ctx.clean_up()
    ctx.clean_up()
    assert done == ["communicators", "events", "buffers"]


def test_interprocess_events_are_released_with_the_context(monkeypatch):
    """latency's event ping-pong makes its interprocess events once per run (ctx.state) and hands their
    release to the context: after clean_up no event is left, owned or opened."""
    from ipcbench.suites import latency

    node = FakeNode()
    drv = FakeCudaIpc(node).install(monkeypatch)

    def rank(ctx):
        peer = 1 - ctx.world.local_rank
        first = latency._event_pair(ctx, peer)
        assert latency._event_pair(ctx, peer) == first  # cached: one pair of events per peer
        ctx.world.node_barrier("both opened")
        ctx.clean_up()

    node.run(rank)
    assert len(drv.events) == 2 and all(getattr(e, "destroyed", False) for e in drv.events.values())


def test_a_steps_prelude_runs_beside_the_setup_and_ends_before_the_first_measurement(fake_job, tmp_path,
                                                                                    monkeypatch):
    """Step.prelude: started on every rank once its GPU and context exist, before the buffers are set up; its
    wait() returns before either rank walks (logic only: fake GPUs, a prelude that logs)."""
    from dataclasses import replace

    events, lock = [], threading.Lock()

    def log(what):
        with lock:
            events.append(what)

    def prelude(ctx, pairs):
        log(f"start {ctx.world.local_rank} {pairs}")
        return lambda: log(f"wait {ctx.world.local_rank}")

    real_setup, real_walk, real_steps = runner._setup_buffers, runner.walk, RunConfig.steps
    monkeypatch.setattr(runner, "_setup_buffers", lambda ctx, *a: (log(f"setup {ctx.world.local_rank}"),
                                                                   real_setup(ctx, *a))[1])
    monkeypatch.setattr(runner, "walk", lambda *a, **k: (log("walk"), real_walk(*a, **k))[1])
    monkeypatch.setattr(RunConfig, "steps", lambda self, n: [replace(s, prelude=prelude) if i == 0 else s
                                                             for i, s in enumerate(real_steps(self, n))])
    statuses, _ = fake_job(cfg(tmp_path / "run", suites=("copy",), argv=("copy",)))
    assert statuses == [0, 0]
    first_walk = events.index("walk")
    assert sorted(events[:first_walk]) == ["setup 0", "setup 1", "start 0 [(0, 1), (1, 0)]",
                                           "start 1 [(0, 1), (1, 0)]", "wait 0", "wait 1"]
    for r in (0, 1):
        assert events.index(f"start {r} [(0, 1), (1, 0)]") < events.index(f"setup {r}") < events.index(f"wait {r}")
    assert events.count("walk") == 2 and all(e == "walk" for e in events[first_walk:])
