"""The run's release of the files CUDA's driver makes in /dev/shm for its interprocess events (ipc/event_files.py).

What makes them: the latency suite's event ping-pong (ipc/events.EventIpc: every rank exports one event per peer) and
the handles suite's event-handle rows (suites/handles.py: the exporter, an event per repetition); each exporting rank
gets a file named by its pid, which neither destroying its events nor its exit removes. The handles suite's exporting
child (its Step.prelude) exports a memory handle, which makes none, but it is the run's process too and any file of
its pid goes alike. So the run removes them itself:

- at its end (`arm`'s release, added first to the context's releases, so run last: after every event is destroyed
  and every peer's closed, after the shared buffers, then a node barrier past which no rank opens a handle by name),
  every rank those of its own pid and of the helpers it started, once they have ended;
- where it ends early (`release_now`: an error, before MPI_Abort; a KeyboardInterrupt; SIGTERM, which is how mpirun
  ends every rank when it is interrupted or a rank failed: SIGCONT, SIGTERM a second later, SIGKILL a second after
  that, Open MPI 4's odls), at once, waiting for no rank, with those of the node's other ranks that have ended (a rank
  killed by SIGKILL cannot remove its own).

A pid other than this rank's own is only taken once its process is gone: a pid reused names another program's files.
SIGKILL of every rank leaves the files: `ipcbench info` names them (readiness.event_files_item). A Python signal
handler runs between bytecodes: a rank held in one C call (CUDA's, MPI's) past mpirun's second leaves its file too.
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass
from typing import Any, Callable

from ipcbench.ipc import event_files

_LOCK = threading.RLock()  # re-entrant: SIGTERM's handler runs in the main thread, maybe while it holds the lock
_ARMED: list["RunFiles"] = []  # this process's runs not yet released (one; ranks are threads in the CPU tests)
_PREVIOUS: dict[int, Any] = {}  # the SIGTERM handler ours replaced, while ours is installed


@dataclass
class RunFiles:
    """One rank's share of a run's event files: its own pid, the helpers it started (the context's `helper_pids`
    list itself: a prelude adds to it after arming) and the node's other ranks, in `shm_dir`."""

    own: int
    helpers: list[int]
    peers: list[int]
    shm_dir: str

    def pids(self, peers: bool, alive: Callable[[int], bool]) -> list[int]:
        """This rank's pid, and those of its helpers (and, with `peers`, the node's other ranks) that have ended."""
        others = [*self.helpers, *(self.peers if peers else [])]
        return [self.own, *(p for p in others if p != self.own and not alive(p))]

    def remove(self, peers: bool, alive: Callable[[int], bool] = event_files.pid_alive) -> list[str]:
        return event_files.remove(event_files.of_pids(self.pids(peers, alive), self.shm_dir))


def arm(ctx) -> Callable[[], None]:
    """Collective over the node: every rank's pid gathered, this rank's run armed for an early end (release_now;
    SIGTERM's handler where this is the main thread). Returns the run's release at its end for ctx.add_cleanup, which
    the runner adds first, so that it runs after every other: a node barrier (every rank's events destroyed and the
    peers' closed), then this rank's files and its ended helpers' removed."""
    world = ctx.world
    me = os.getpid()
    pids = world.node_allgather(me, "the pids of this node's ranks")
    run = RunFiles(me, ctx.helper_pids, [p for p in pids if p != me], event_files.SHM_DIR)
    with _LOCK:
        _ARMED.append(run)
        _install()

    def release() -> None:
        world.node_barrier("every rank's interprocess events destroyed and closed")
        try:
            run.remove(peers=False)
        finally:
            _disarm(run)

    return release


def release_now() -> list[str]:
    """Every armed run of this process: its files removed at once (its own, its ended helpers' and the node's ended
    ranks') and disarmed; the names removed. Talks to no rank: an error's, a KeyboardInterrupt's or SIGTERM's."""
    with _LOCK:
        runs = list(_ARMED)
        removed = []
        for run in runs:
            try:
                removed += run.remove(peers=True)
            finally:
                _disarm(run)
    return removed


def armed() -> int:
    """How many runs of this process are armed (tests)."""
    with _LOCK:
        return len(_ARMED)


def _install() -> None:
    """SIGTERM's handler, once, from the main thread only (Python's rule; the CPU tests' ranks are threads), and
    never over a handler a library installed outside Python (getsignal's None), which Python could not call."""
    if signal.SIGTERM in _PREVIOUS or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is None:
        return
    _PREVIOUS[signal.SIGTERM] = previous
    signal.signal(signal.SIGTERM, _on_sigterm)


def _disarm(run: RunFiles) -> None:
    """The run released; the last one restores the SIGTERM handler ours replaced."""
    with _LOCK:
        if run in _ARMED:
            _ARMED.remove(run)
        if not _ARMED and signal.SIGTERM in _PREVIOUS and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _PREVIOUS.pop(signal.SIGTERM))


def _on_sigterm(signum, frame) -> None:
    """Remove the run's files, then end as SIGTERM would have without us (or as the handler ours replaced does)."""
    previous = _PREVIOUS.get(signal.SIGTERM, signal.SIG_DFL)
    if previous == signal.SIG_IGN:  # SIGTERM was ignored before the run: it goes on, and its peers still need them
        return
    release_now()
    if callable(previous):
        previous(signum, frame)
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
