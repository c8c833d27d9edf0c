"""The files CUDA's driver makes in /dev/shm for interprocess events, known by the pid in their names.

Taking an interprocess event's handle (cudaIpcGetEventHandle) makes the driver create a POSIX shared-memory file
there (seen on the GPU image: `cuda.shm.0.1e6.1`, 80 KiB, one per exporting process, named by its pid); a process
that opens the handle opens that file by name, which is why event handles, unlike memory handles, work only between
processes that share /dev/shm (LMCache/LMCache#4394, #4550). Neither cudaEventDestroy nor the process's exit removes
it (shared/TESTBED.md; issue 43: two more files after every `ipcbench all`), so it stays until someone unlinks it, and
a tool run in every job's prolog or every hour fills /dev/shm. Unlinking it while a process still maps it takes
only the name away (POSIX): the mapping lives on, a later open of the handle by name fails.

The name, as read here: `cuda.shm.` then two or three dot-separated hexadecimal fields, the owner's pid (in hex) the
second to last, a sequence number the last. The issue's examples have three (`0.1e6.1`: 0, pid 0x1e6, 1; the first
is 0 under root and 0x3e9 = 1001 in a user's example elsewhere, so probably the uid, which nothing here relies on);
shared/TESTBED.md writes `cuda.shm.<pid-hex>.<n>`, two; both put the pid second to last, as pyshmem's sweep of
these files reads them too. A name of any other form is no process's: never listed, never removed.

Pure (no CUDA): readiness.py lists the ones whose process is gone, run/shm_release.py removes a run's own, and
info.py the one its own probe made.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from typing import Callable, Iterable

from ipcbench.ipc.shm import SHM_DIR

PREFIX = "cuda.shm."
NAME = re.compile(r"cuda\.shm\.(?:[0-9a-fA-F]+\.)?([0-9a-fA-F]+)\.[0-9a-fA-F]+")  # the pid: the second to last


def owner_pid(name: str) -> int | None:
    """The pid a driver's event file is named by (`cuda.shm.0.1e6.1` -> 0x1e6), or None for any other name."""
    m = NAME.fullmatch(name)
    pid = int(m.group(1), 16) if m else 0
    return pid if pid > 0 else None


@dataclass(frozen=True)
class EventFile:
    """One driver file in /dev/shm: its path, the pid it is named by, its size (bytes)."""

    path: str
    pid: int
    size: int

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def listing(shm_dir: str = SHM_DIR) -> list[EventFile]:
    """Every driver event file in `shm_dir`, by name (files that vanish while listed are left out)."""
    try:
        names = sorted(os.listdir(shm_dir))
    except OSError:
        return []
    out = []
    for name in names:
        pid = owner_pid(name)
        if pid is None:
            continue
        path = os.path.join(shm_dir, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            out.append(EventFile(path, pid, int(st.st_size)))
    return out


def pid_alive(pid: int, proc: str = "/proc") -> bool:
    """Whether process `pid` runs in this PID namespace: not when /proc has no such entry or it is a zombie (ended,
    not yet reaped: a rank killed a moment ago). Without /proc, signal 0 decides (a zombie then counts as alive)."""
    try:
        with open(os.path.join(proc, str(pid), "stat")) as f:
            state = f.read().rsplit(")", 1)[-1].split()
        return not state or state[0] not in ("Z", "X")
    except FileNotFoundError:
        if os.path.isdir(proc) and os.path.exists(os.path.join(proc, "self")):
            return False
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, another user's
        return True
    return True


def of_pids(pids: Iterable[int], shm_dir: str = SHM_DIR) -> list[EventFile]:
    """The driver event files named by any of `pids`."""
    wanted = set(pids)
    return [f for f in listing(shm_dir) if f.pid in wanted]


def stale(shm_dir: str = SHM_DIR, alive: Callable[[int], bool] = pid_alive) -> list[EventFile]:
    """The driver event files whose process is gone (by `alive`, this PID namespace's view)."""
    return [f for f in listing(shm_dir) if not alive(f.pid)]


def remove(files: Iterable[EventFile]) -> list[str]:
    """Unlink each file; the names of those removed (one already gone, or not ours to remove, is skipped)."""
    done = []
    for f in files:
        try:
            os.unlink(f.path)
        except OSError:
            continue
        done.append(f.name)
    return done


def remove_own(shm_dir: str | None = None) -> list[str]:
    """Remove the files named by this process's pid: what its own event handles left (info's probe). In `shm_dir`,
    else this module's SHM_DIR as it is now (a test's)."""
    return remove(of_pids([os.getpid()], shm_dir or SHM_DIR))
