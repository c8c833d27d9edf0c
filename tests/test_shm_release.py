"""run/shm_release.py: the run removes the files CUDA's driver made in /dev/shm for its interprocess events (issue 43),
last of its releases, after every rank destroyed its events and closed its peers'; and at once where the run ends
early (an error, a KeyboardInterrupt, SIGTERM). On fakes and a fake /dev/shm (a temporary directory): the fake
driver makes the file when an event's handle is taken, as the real one does; no GPU."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest

from fakes import FakeCudaIpc
from ipcbench.core.context import Ctx
from ipcbench.ipc import event_files, sharers
from ipcbench.ipc.events import EventIpc
from ipcbench.run import runner, shm_release
from test_run_on_fakes import cfg, fake_job  # noqa: F401 - fake_job is a fixture

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def file_of(shm, pid: int, n: int = 1):
    """The name the driver gives the file of `pid`'s event handles (issue 43: cuda.shm.0.1e6.1, as root)."""
    return shm / f"cuda.shm.0.{pid:x}.{n}"


def ended_pids(n: int) -> list[int]:
    """Pids of processes that have ended (and were reaped)."""
    out = []
    for _ in range(n):
        child = subprocess.Popen([sys.executable, "-c", "pass"])
        child.wait()
        out.append(child.pid)
    return out


@pytest.fixture
def shm(tmp_path, monkeypatch):
    d = tmp_path / "shm"
    d.mkdir()
    monkeypatch.setattr(event_files, "SHM_DIR", str(d))
    yield d
    shm_release.release_now()  # nothing armed is left to the next test


def test_the_event_files_go_last_once_every_rank_destroyed_its_events(fake_job, shm, tmp_path,  # noqa: F811
                                                                      monkeypatch):
    """The run's releases, in the order clean_up runs them on each rank: its interprocess events (latency's, made
    during the walk), then the shared buffers, then the driver's file, removed only after both ranks destroyed
    their events (the release's node barrier)."""
    from ipcbench.suites import latency

    log, lock, drv = [], threading.Lock(), []

    def note(what: str) -> None:
        with lock:
            log.append(what)

    def take_handle(self, ev, real=FakeCudaIpc.ipcGetEventHandle):
        drv[:] = [self]
        file_of(shm, os.getpid()).touch()  # the ranks are threads: one pid, one file, as one process's
        return real(self, ev)

    @functools.wraps(EventIpc.close)
    def close(self, real=EventIpc.close):
        real(self)
        note(f"events {self.rank}")

    def destroy_buffers(ctx, real=sharers.destroy_buffers):
        real(ctx)
        note(f"buffers {ctx.world.rank}")

    def remove(files, real=event_files.remove):
        files = list(files)
        every_event_destroyed = all(getattr(e, "destroyed", False) for e in drv[0].events.values())
        note(f"files {threading.current_thread().name[-1]} {every_event_destroyed}")
        return real(files)

    def clean_up(self, real=Ctx.clean_up):
        note(f"releases {self.world.rank}: " + ", ".join(f.__qualname__ for f in self.cleanups))
        return real(self)

    def walk(ctx, *a, real=runner.walk, **k):
        latency._event_pair(ctx, 1 - ctx.world.local_rank)  # an event made, exported and the peer's opened
        return real(ctx, *a, **k)

    for owner, name, fn in ((FakeCudaIpc, "ipcGetEventHandle", take_handle), (EventIpc, "close", close),
                            (sharers, "destroy_buffers", destroy_buffers), (event_files, "remove", remove),
                            (Ctx, "clean_up", clean_up), (runner, "walk", walk)):
        monkeypatch.setattr(owner, name, fn)
    statuses, _ = fake_job(cfg(tmp_path / "run", suites=("copy",), quiet=True))
    assert statuses == [0, 0]
    for r in (0, 1):
        assert f"releases {r}: arm.<locals>.release, setup_buffers.<locals>.<lambda>, EventIpc.close" in log, log
        mine = [e for e in log if e.split(" ")[1] == str(r) and not e.startswith("releases")]
        assert mine == [f"events {r}", f"buffers {r}", f"files {r} True"], log
    assert list(shm.iterdir()) == [] and shm_release.armed() == 0


def stub_ctx(peers: list[int], barriers: list | None = None):
    """What arm reads of a context: a world whose node allgather gives this pid and `peers`, and the helper list."""
    world = SimpleNamespace(node_allgather=lambda value, what: [value, *peers],
                            node_barrier=lambda what: barriers.append(what) if barriers is not None else None)
    return SimpleNamespace(world=world, helper_pids=[])


def test_at_the_end_each_rank_removes_its_own_and_its_ended_helpers_files(shm):
    running_peer = os.getppid()
    ended_peer, ended_helper, stranger = ended_pids(3)
    barriers: list = []
    ctx = stub_ctx([ended_peer, running_peer], barriers)
    previous = signal.getsignal(signal.SIGTERM)
    release = shm_release.arm(ctx)
    assert signal.getsignal(signal.SIGTERM) is shm_release._on_sigterm and shm_release.armed() == 1
    ctx.helper_pids.append(ended_helper)  # a prelude's child, started after the run was armed
    for pid in (os.getpid(), ended_peer, running_peer, ended_helper, stranger):
        file_of(shm, pid).touch()
    file_of(shm, os.getpid(), 2).touch()
    release()
    assert barriers == ["every rank's interprocess events destroyed and closed"]
    assert sorted(p.name for p in shm.iterdir()) == sorted(file_of(shm, p).name for p in (ended_peer, running_peer,
                                                                                          stranger))
    assert shm_release.armed() == 0 and signal.getsignal(signal.SIGTERM) == previous


def test_an_early_end_removes_the_files_of_the_runs_ended_processes_too(shm):
    """An error's or a signal's release waits for no rank: this rank's files, and those of its helpers and of the
    node's ranks that have ended (a rank killed by SIGKILL); never a running process's, never another run's."""
    running_peer = os.getppid()
    ended_peer, ended_helper, stranger = ended_pids(3)
    ctx = stub_ctx([ended_peer, running_peer])
    shm_release.arm(ctx)
    ctx.helper_pids.append(ended_helper)
    for pid in (os.getpid(), ended_peer, running_peer, ended_helper, stranger):
        file_of(shm, pid).touch()
    removed = shm_release.release_now()
    assert sorted(removed) == sorted(file_of(shm, p).name for p in (os.getpid(), ended_peer, ended_helper))
    assert sorted(p.name for p in shm.iterdir()) == sorted(file_of(shm, p).name for p in (running_peer, stranger))
    assert shm_release.armed() == 0 and shm_release.release_now() == []


SIGTERMED = """
import os, signal, sys, time, types
from ipcbench.ipc import event_files
from ipcbench.run import shm_release
event_files.SHM_DIR = sys.argv[1]
world = types.SimpleNamespace(node_allgather=lambda value, what: [value, int(sys.argv[2])])
shm_release.arm(types.SimpleNamespace(world=world, helper_pids=[]))
open(os.path.join(sys.argv[1], f"cuda.shm.0.{os.getpid():x}.1"), "w").close()
os.kill(os.getpid(), signal.SIGTERM)  # as mpirun ends a rank: interrupted, or another rank failed
time.sleep(30)
print("still here", "pid", os.getpid())
"""


def test_sigterm_removes_the_files_then_ends_the_rank_as_sigterm_does(shm):
    (ended_peer,) = ended_pids(1)
    for pid in (ended_peer, os.getppid()):
        file_of(shm, pid).touch()
    p = subprocess.run([sys.executable, "-c", SIGTERMED, str(shm), str(ended_peer)], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert p.returncode == -signal.SIGTERM and "still here" not in p.stdout, p.stderr
    assert [f.name for f in shm.iterdir()] == [file_of(shm, os.getppid()).name]  # the rank's and its ended peer's


IGNORED = SIGTERMED.replace("shm_release.arm(", "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nshm_release.arm(")


def test_a_sigterm_the_process_ignored_before_the_run_leaves_its_files(shm):
    """SIGTERM ignored before the run was armed (nohup-like launchers): the rank goes on, so its files stay for the
    peers that open its handles; only its release at the end removes them."""
    (ended_peer,) = ended_pids(1)
    file_of(shm, ended_peer).touch()
    p = subprocess.run([sys.executable, "-c", IGNORED.replace("time.sleep(30)", "time.sleep(0.2)"), str(shm),
                        str(ended_peer)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0 and "still here" in p.stdout, p.stderr
    assert sorted(f.name for f in shm.iterdir()) == sorted([file_of(shm, ended_peer).name,
                                                            f"cuda.shm.0.{_child_pid(p):x}.1"])


def _child_pid(p) -> int:
    return int(p.stdout.split("pid ")[1].split()[0])


def test_a_failed_or_interrupted_command_removes_its_files(shm, capsys):
    """cli._guarded: a rank's error (before MPI_Abort, which mpirun's kill follows) and a KeyboardInterrupt remove
    the files of an armed run that never reached its release."""
    from ipcbench.cli import _guarded

    def fails():
        shm_release.arm(stub_ctx([]))
        file_of(shm, os.getpid()).touch()
        raise RuntimeError("a CUDA error")

    assert _guarded(fails) == 1 and list(shm.iterdir()) == []
    assert "RuntimeError: a CUDA error" in capsys.readouterr().err

    def interrupted():
        shm_release.arm(stub_ctx([]))
        file_of(shm, os.getpid()).touch()
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _guarded(interrupted)
    assert list(shm.iterdir()) == [] and shm_release.armed() == 0
