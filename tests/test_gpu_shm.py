"""Issue 43 on a real GPU: the files CUDA's driver makes in /dev/shm for interprocess event handles. The driver leaves
one for a process that took an event's handle, after the event and the process are gone, and `ipcbench info` names
it; a run (`all --quick`, and the latency suite alone) leaves none of its processes' (their pids: meta.json's ranks
and the evidence's own_pids, its helpers). Two ranks share the first GPU. Skipped without a GPU. The other targets
(every suite, check, selftest, a failed verification, a peer's failure, SIGINT, SIGTERM, SIGKILL) are
tools/shm_targets.py's, which takes about 3 minutes."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from conftest import tool
from gpu_mpi import mpiexec_cmd
from ipcbench.ipc import event_files

EXPORTER = """
import os
from cupy.cuda import runtime
runtime.setDevice(0)
ev = runtime.eventCreateWithFlags(runtime.eventInterprocess | runtime.eventDisableTiming)
runtime.ipcGetEventHandle(ev)
runtime.eventDestroy(ev)
print(os.getpid())
"""


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_the_driver_leaves_a_file_of_an_exporting_process_and_info_names_it():
    targets = tool("shm_targets")
    p = subprocess.run([sys.executable, "-c", EXPORTER], capture_output=True, text=True, timeout=120,
                       env=targets.one_gpu_env())
    assert p.returncode == 0, p.stderr[-2000:]
    pid = int(p.stdout.split()[-1])
    left = event_files.of_pids([pid])
    if not left:
        pytest.skip("this driver leaves no /dev/shm file for an event handle: nothing for a run to remove")
    try:
        assert not event_files.pid_alive(pid)
        info = subprocess.run([sys.executable, "-m", "ipcbench", "info", "--json"], capture_output=True, text=True,
                              timeout=240, env=targets.one_gpu_env())
        item = next(i for i in json.loads(info.stdout)["readiness"] if i["name"] == "event_files")
        assert {f.name for f in left} <= {f["name"] for f in item["facts"]["files"]}, item
        assert item["ok"] in (False, None) and "remove them with: " in item["consequence"]
    finally:
        event_files.remove(left)


@pytest.mark.gpu
@pytest.mark.timeout(600)
@pytest.mark.parametrize("args, event_rows", [(["all", "--quick"], {"event_pingpong", "ipc_get_event_handle"}),
                                              (["latency", "--quick"], {"event_pingpong"})])
def test_a_run_leaves_no_file_of_its_processes(tmp_path, args, event_rows):
    targets = tool("shm_targets")
    out = tmp_path / "run"
    cmd = mpiexec_cmd(2) + [sys.executable, "-m", "ipcbench", *args, "--out", str(out), "--quiet"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=580, env=targets.one_gpu_env())
    print(p.stdout[-3000:])
    print(p.stderr[-3000:], file=sys.stderr)
    assert p.returncode == 0, p.stderr[-2000:]
    with open(out / "results.csv", newline="") as f:
        methods = {r["method"] for r in csv.DictReader(f)}
    assert event_rows <= methods  # the run took event handles: the driver made its files
    pids = targets.run_pids(out)
    assert sum(role.startswith("rank") for role in pids.values()) == 2, pids
    assert event_files.of_pids(pids) == [], (pids, os.listdir(event_files.SHM_DIR))
