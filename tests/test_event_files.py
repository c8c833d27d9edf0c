"""ipc/event_files.py on a fake /dev/shm (a temporary directory): which names are the CUDA driver's event files
and whose, which of them belong to ended processes, and their removal. No GPU: the names are the ones the driver
gave on the GPU image (issue 43), the files empty stand-ins."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ipcbench.ipc import event_files


@pytest.mark.parametrize("name, pid", [
    ("cuda.shm.0.1e6.1", 0x1E6), ("cuda.shm.0.1e7.1", 0x1E7), ("cuda.shm.0.2aa.1", 0x2AA),  # issue 43's, as root
    ("cuda.shm.3e9.52f2.1", 0x52F2),  # another user's (uid 1001 = 0x3e9, probably)
    ("cuda.shm.1e6.1", 0x1E6),  # shared/TESTBED.md's cuda.shm.<pid-hex>.<n>
    ("cuda.shm.0.1e6.a", 0x1E6)])
def test_the_pid_is_the_second_to_last_field_in_hex(name, pid):
    assert event_files.owner_pid(name) == pid


@pytest.mark.parametrize("name", ["cuda.shm.1e6", "cuda.shm.0.1e6.1.2", "cuda.shm.0.xyz.1", "cuda.shm..1",
                                  "cuda.shm.0.0.1", "torch_486_1", "sem.cuda.shm.0.1e6.1", "cuda.shm.0.1e6.1 ",
                                  "psm_shm.0.1e6.1", "cuda.shm.0.-1e6.1"])
def test_no_other_name_is_a_processs(name):
    assert event_files.owner_pid(name) is None


def _touch(d, name: str, size: int = 0):
    path = d / name
    path.write_bytes(b"\0" * size)
    return path


def test_listing_takes_only_the_drivers_regular_files(tmp_path):
    _touch(tmp_path, "cuda.shm.0.1e6.1", 80 << 10)
    _touch(tmp_path, "cuda.shm.0.1e7.1", 100)
    _touch(tmp_path, "ipcbench-staged-1")
    (tmp_path / "cuda.shm.0.1e8.1").mkdir()
    os.symlink(tmp_path / "cuda.shm.0.1e6.1", tmp_path / "cuda.shm.0.1e9.1")
    found = event_files.listing(str(tmp_path))
    assert [(f.name, f.pid, f.size) for f in found] == [("cuda.shm.0.1e6.1", 0x1E6, 80 << 10),
                                                        ("cuda.shm.0.1e7.1", 0x1E7, 100)]
    assert event_files.listing(str(tmp_path / "absent")) == []


def test_of_pids_stale_and_remove(tmp_path):
    for name in ("cuda.shm.0.1e6.1", "cuda.shm.0.1e6.2", "cuda.shm.0.1e7.1", "cuda.shm.0.2aa.1"):
        _touch(tmp_path, name)
    d = str(tmp_path)
    assert [f.name for f in event_files.of_pids([0x1E6], d)] == ["cuda.shm.0.1e6.1", "cuda.shm.0.1e6.2"]
    ended = event_files.stale(d, alive=lambda pid: pid == 0x1E7)
    assert [f.name for f in ended] == ["cuda.shm.0.1e6.1", "cuda.shm.0.1e6.2", "cuda.shm.0.2aa.1"]
    gone = event_files.of_pids([0x2AA], d)
    os.unlink(gone[0].path)  # removed by someone else meanwhile: skipped, not an error
    assert event_files.remove(ended) == ["cuda.shm.0.1e6.1", "cuda.shm.0.1e6.2"]
    assert sorted(os.listdir(d)) == ["cuda.shm.0.1e7.1"]


def test_remove_own_takes_this_processs_files_only(tmp_path):
    own = _touch(tmp_path, f"cuda.shm.0.{os.getpid():x}.1")
    other = _touch(tmp_path, f"cuda.shm.0.{os.getppid():x}.1")
    assert event_files.remove_own(str(tmp_path)) == [own.name]
    assert not own.exists() and other.exists()


def test_a_process_is_alive_until_it_ends_and_a_zombie_has_ended():
    assert event_files.pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while event_files.pid_alive(child.pid) and time.monotonic() < deadline:  # exited, not reaped: a zombie
        time.sleep(0.01)
    assert not event_files.pid_alive(child.pid)
    child.wait()
    assert not event_files.pid_alive(child.pid)


def test_without_proc_signal_zero_decides(tmp_path):
    assert event_files.pid_alive(os.getpid(), proc=str(tmp_path / "none"))
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not event_files.pid_alive(child.pid, proc=str(tmp_path / "none"))
