"""tools/shm_targets.py without a GPU: the run's pids it reads from a meta.json, the ranks it finds under a launcher,
and the targets it runs (issue 43's list). Its runs are the GPU machine's (tests/test_gpu_shm.py says how)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import tool
from ipcbench.catalogue.suites import ORDER


def test_the_runs_pids_are_its_ranks_and_its_helpers(tmp_path):
    targets = tool("shm_targets")
    meta = {"ranks": [{"rank": 0, "pid": 486}, {"rank": 1, "pid": 487}],
            "evidence": {"snapshots": [{"own_pids": [486, 487, 490]}, {"own_pids": [486, 487]}]}}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    assert targets.run_pids(tmp_path) == {486: "rank 0", 487: "rank 1", 490: "helper"}
    assert targets.run_pids(tmp_path / "none") == {}


def test_the_ranks_under_a_launcher_are_found_by_their_command_line():
    targets = tool("shm_targets")
    code = ("import subprocess, sys; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)', "
            "'-m', 'ipcbench']); print(c.pid, flush=True); c.wait()")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())  # type: ignore[union-attr]
        assert targets.ranks_of(parent.pid) == [child]
    finally:
        subprocess.run(["kill", str(child)])
        parent.wait(timeout=30)


def test_the_targets_are_the_issues():
    names = [t.name for t in tool("shm_targets").targets()]
    assert names == ["all", "all-quick", *(f"suite-{s}" for s in ORDER), "check", "selftest", "verify-fail",
                     "peer-failure", "sigint", "sigterm", "sigkill-rank", "sigkill-all"]
    t = {t.name: t for t in tool("shm_targets").targets()}
    assert t["verify-fail"].env == {"IPCBENCH_FAULT_CORRUPT": "ce"} and t["verify-fail"].expect == 1
    assert all(t[n].act is not None and t[n].expect == "any" for n in names[-4:])
    assert t["peer-failure"].act is not None and t["peer-failure"].expect == "not 0"
    assert [n for n in names if t[n].leaves] == ["sigkill-all"]
