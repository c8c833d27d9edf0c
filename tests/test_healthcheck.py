"""jobs/healthcheck.sh (the Slurm HealthCheckProgram) without Slurm and without a GPU: a stand-in `scontrol`
that records its calls or fails as outside Slurm, and a stand-in `ipcbench` that exits as told. The script
says what it did: "drained" only when scontrol drained the node, "could not drain" otherwise."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "jobs" / "healthcheck.sh"
BASH = shutil.which("bash")


def _exe(d: Path, name: str, body: str) -> Path:
    p = d / name
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


def _healthcheck(tmp_path: Path, rc: int, scontrol_ok: bool, reason: str = "FAIL: GPU 0 -> GPU 1 ce push 4K",
                 node_reason: str = "") -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run the script judging a (stand-in) recorded run whose check exits `rc`; scontrol succeeds or fails as
    it does outside Slurm. Returns the script's result and scontrol's calls."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    calls = tmp_path / "scontrol.calls"
    show = f'echo "NodeName=n1 State=IDLE Reason={node_reason} [root@2026-11-25T10:00:00]"' if node_reason else "true"
    _exe(bin_, "scontrol", f'echo "$*" >> {calls}\n'
                           + ('case "$1" in -o) ' + show + ' ;; esac\nexit 0' if scontrol_ok else
                              'echo "slurm_load_partitions: Unable to contact slurm controller" >&2\nexit 1'))
    ipcbench = _exe(bin_, "ipcbench", f'echo "verdict: ..."\necho "REASON: {reason}"\nexit {rc}')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "IPCBENCH_"))}
    env.update(PATH=f"{bin_}:{env.get('PATH', '/usr/bin:/bin')}", IPCBENCH_HC_EXE=str(ipcbench),
               IPCBENCH_HC_FROM=str(tmp_path / "run"), IPCBENCH_HC_CONF=str(tmp_path / "no-conf"),
               SLURMD_NODENAME="n1")
    p = subprocess.run([BASH, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    return p, calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize("rc", [1, 2])
def test_outside_slurm_a_failed_drain_says_it_could_not_drain(tmp_path, rc):
    p, calls = _healthcheck(tmp_path, rc, scontrol_ok=False)
    assert any("state=drain" in c for c in calls)
    assert "could not drain n1" in p.stdout and "drained:" not in p.stdout, p.stdout
    assert "FAIL: GPU 0 -> GPU 1 ce push 4K" in p.stdout  # what it would have drained for


def test_in_slurm_an_unhealthy_node_is_drained_with_the_reason(tmp_path):
    p, calls = _healthcheck(tmp_path, 1, scontrol_ok=True)
    assert 'update nodename=n1 state=drain reason=ipcbench check: FAIL: GPU 0 -> GPU 1 ce push 4K' in calls
    assert "drained: ipcbench check: FAIL" in p.stdout and "could not" not in p.stdout


def test_a_healthy_node_this_script_drained_is_resumed_and_a_failed_resume_says_so(tmp_path):
    p, calls = _healthcheck(tmp_path, 0, scontrol_ok=True, reason="ok: 17 checks passed",
                            node_reason="ipcbench check: FAIL: old")
    assert "update nodename=n1 state=resume" in calls and "resumed (was: ipcbench check: FAIL: old)" in p.stdout


def test_a_recorded_run_of_another_host_is_judged_without_any_host(tmp_path):
    """check --from judges any host's run: the script no longer needs --any-host to test with one."""
    p, _ = _healthcheck(tmp_path, 0, scontrol_ok=True, reason="ok")
    assert "healthy: ok" in p.stdout
    assert "--any-host" not in SCRIPT.read_text()


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_shellcheck():
    r = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
