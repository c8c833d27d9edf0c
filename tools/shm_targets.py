"""`python tools/shm_targets.py LOG [--only NAME,...] [--out DIR]`: issue 43's targets on one GPU, and after each the
files CUDA's driver left in /dev/shm for the run's processes (ipc/event_files.py), into LOG and on stdout.

A tool of the project for the GPU machine (about 3 minutes on one H200; two ranks share the first GPU, Open MPI as
root gets --allow-run-as-root --oversubscribe): first a probe of the driver itself (two bare processes: which step
makes a file, which removes it), then each target: `all`, `all --quick`, every suite alone (--quick), check,
selftest, a verification failure (IPCBENCH_FAULT_CORRUPT), a peer's failure (a rank stopped until the other's
--timeout ends the job), SIGINT and SIGTERM to mpirun, SIGKILL of one rank, SIGKILL of every rank (what no run can
remove: `ipcbench info` must name it; the tool removes it afterwards), and `ipcbench info` itself. A signal is sent
once a file of the run's ranks is there (its events exist), or after a few seconds. The run's processes: meta.json's
ranks[].pid and the evidence's own_pids (its helper processes), and the ranks seen running (a run killed before
meta.json). Exit status 0 when every target holds; each target's line says PASS or FAIL and why.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ipcbench.catalogue.suites import ORDER
from ipcbench.ipc import event_files

SHM = event_files.SHM_DIR
SETTLE_S = 0.5  # after a job ends: mpirun's last reaping, a killed rank's handler
NOT_0, ANY = "not 0", "any"  # a Target's expected exit status beyond a number


class Log:
    """Lines to stdout and to the log file, flushed as they come (a killed tool keeps what it saw)."""

    def __init__(self, path: str):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(path, "w")

    def __call__(self, line: str = "") -> None:
        print(line, flush=True)
        self.fh.write(line + "\n")
        self.fh.flush()


def launcher(n: int = 2) -> list[str]:
    """mpirun for n ranks ($IPCBENCH_MPIEXEC, else mpirun/mpiexec on PATH); Open MPI as root needs its two flags."""
    exe = os.environ.get("IPCBENCH_MPIEXEC") or shutil.which("mpirun") or shutil.which("mpiexec")
    if not exe:
        raise SystemExit("shm_targets: no mpirun/mpiexec on PATH (set IPCBENCH_MPIEXEC)")
    cmd = [exe, "-n", str(n)]
    try:
        version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        version = ""
    if "Open MPI" in version and os.geteuid() == 0:
        cmd += ["--allow-run-as-root", "--oversubscribe"]
    return cmd


def one_gpu_env(extra: dict | None = None) -> dict:
    """The environment with only the first visible GPU (two ranks share it, on a machine of any GPU count)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return {**os.environ, "CUDA_VISIBLE_DEVICES": first or "0", "PYTHONUNBUFFERED": "1", **(extra or {})}


def run_pids(run_dir: Path) -> dict[int, str]:
    """The run's processes as its meta.json records them: every rank's pid, and the evidence's own_pids beyond them
    (the helper processes it started); {} without a readable meta.json (a run killed before it was written)."""
    try:
        meta = json.loads((run_dir / "meta.json").read_text())
    except (OSError, ValueError):
        return {}
    pids = {int(r["pid"]): f"rank {r.get('rank')}" for r in meta.get("ranks") or [] if r.get("pid")}
    for snap in (meta.get("evidence") or {}).get("snapshots") or []:
        for pid in snap.get("own_pids") or []:
            pids.setdefault(int(pid), "helper")
    return pids


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (/proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return out


def runs_ipcbench(pid: int) -> bool:
    """Whether process `pid` runs `python -m ipcbench` (a rank; not a launcher's proxy that names it in its own)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"\0-m\0ipcbench\0" in f.read()
    except OSError:
        return False


def ranks_of(launcher_pid: int) -> list[int]:
    """The ipcbench ranks under a launcher (its descendants running `-m ipcbench`), by pid."""
    found, todo = [], children(launcher_pid)
    while todo:
        pid = todo.pop()
        todo += children(pid)
        if runs_ipcbench(pid):
            found.append(pid)
    return sorted(found)


def described(files: list[event_files.EventFile], roles: dict[int, str]) -> str:
    return ", ".join(f"{f.name} ({roles.get(f.pid, 'pid %d' % f.pid)}, {f.size // 1024} KiB)" for f in files) or "none"


@dataclass
class Target:
    """One command of the issue's targets: `args` after `ipcbench`, an environment beyond one GPU's, the exit status
    that holds (NOT_0: a run ended by its error; ANY: by a signal, whatever mpirun then returns), what to do to it while
    it runs (`act(job, ranks) -> what was done`), and whether files may stay."""

    name: str
    args: list[str]
    expect: int | str = 0
    env: dict = field(default_factory=dict)
    act: Callable[[subprocess.Popen, list[int]], str] | None = None
    leaves: bool = False  # SIGKILL of every rank: the files stay, and `ipcbench info` must name them
    after_s: float = 25.0  # act this long after the start where no file has appeared by then


def signal_job(sig: int) -> Callable[[subprocess.Popen, list[int]], str]:
    def act(job: subprocess.Popen, ranks: list[int]) -> str:
        job.send_signal(sig)
        return f"{signal.Signals(sig).name} to mpirun (pid {job.pid})"

    return act


def signal_ranks(sig: int, every: bool) -> Callable[[subprocess.Popen, list[int]], str]:
    def act(job: subprocess.Popen, ranks: list[int]) -> str:
        chosen = ranks if every else ranks[-1:]
        for pid in chosen:
            os.kill(pid, sig)
        return f"{signal.Signals(sig).name} to rank pid(s) {chosen}"

    return act


def targets() -> list[Target]:
    """The issue's targets, in the order they run (about 3 minutes on one H200)."""
    signalled = ["latency", "handles", "pipeline"]  # interprocess events early, then a few seconds more
    return [Target("all", ["all"]), Target("all-quick", ["all", "--quick"]),
            *(Target(f"suite-{s}", [s, "--quick"]) for s in ORDER),
            Target("check", ["check"]), Target("selftest", ["selftest"]),
            Target("verify-fail", ["copy", "latency", "--quick"], expect=1, env={"IPCBENCH_FAULT_CORRUPT": "ce"}),
            Target("peer-failure", [*signalled, "--timeout", "8"], expect=NOT_0,
                   act=signal_ranks(signal.SIGSTOP, every=False)),
            Target("sigint", signalled, expect=ANY, act=signal_job(signal.SIGINT)),
            Target("sigterm", signalled, expect=ANY, act=signal_job(signal.SIGTERM)),
            Target("sigkill-rank", signalled, expect=ANY, act=signal_ranks(signal.SIGKILL, every=False)),
            Target("sigkill-all", signalled, expect=ANY, act=signal_ranks(signal.SIGKILL, every=True), leaves=True)]


@dataclass
class Outcome:
    name: str
    status: int | None
    wall_s: float
    roles: dict[int, str]
    left: list[event_files.EventFile]
    acted: str = ""
    on_file: bool = False  # acted once a file of the run's ranks was there (a signal with something to remove)
    verdict: str = ""


def watch(job: subprocess.Popen, t: Target, t0: float) -> tuple[dict[int, str], str, bool]:
    """Until the job ends: the ranks seen running, what was done to it (t.act, once a file of a rank is there or after
    t.after_s) and whether a file was there then."""
    seen: dict[int, str] = {}
    acted, on_file, killed = "", False, False
    while job.poll() is None:
        ranks = ranks_of(job.pid)
        seen.update({p: "rank (seen running)" for p in ranks if p not in seen})
        if t.act and not acted and len(ranks) >= 2:
            mine = event_files.of_pids(ranks, SHM)
            if mine or time.monotonic() - t0 > t.after_s:
                on_file = bool(mine)
                when = f"once {mine[0].name} was there" if mine else f"after {t.after_s:g} s, no file yet"
                acted = f"{t.act(job, ranks)} {when}, {time.monotonic() - t0:.1f} s in"
        if time.monotonic() - t0 > 540 and not killed:
            job.kill()
            acted, killed = acted + "; the tool killed mpirun after 540 s", True
        time.sleep(0.05)
    return seen, acted, on_file


def run_target(t: Target, out: Path, log: Log) -> Outcome:
    """Run one target under mpirun on one GPU, and read what stayed in /dev/shm of its processes."""
    run_dir = out / "runs" / t.name
    cmd = [*launcher(), sys.executable, "-m", "ipcbench", *t.args, "--out", str(run_dir)]
    cmd.append("--quiet")
    log(f"== {t.name}: {' '.join(cmd[cmd.index(sys.executable) + 2:])}" + "".join(f" [{k}={v}]"
                                                                                for k, v in t.env.items()))
    t0 = time.monotonic()
    with open(out / f"{t.name}.out", "w") as sink:
        job = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=one_gpu_env(t.env))
        seen, acted, on_file = watch(job, t, t0)
    wall = time.monotonic() - t0
    time.sleep(SETTLE_S)
    stray = [p for p in seen if event_files.pid_alive(p) and runs_ipcbench(p)]  # a rank left stopped: the GPU's
    for pid in stray:
        os.kill(pid, signal.SIGKILL)
    roles = {**seen, **run_pids(run_dir)}
    acted += f"; the tool killed rank(s) {stray} left running" if stray else ""
    return Outcome(t.name, job.returncode, wall, roles, event_files.of_pids(roles, SHM), acted, on_file)


def judge(o: Outcome, t: Target, log: Log) -> Outcome:
    """PASS where the exit status is one the target expects and no file of the run's processes stayed (for SIGKILL
    of every rank: each one that stayed is named by `ipcbench info`, then removed here)."""
    why = []
    if t.expect != ANY and ((o.status == 0) if t.expect == NOT_0 else (o.status != t.expect)):
        why.append(f"exit {o.status}, expected {t.expect}")
    if not o.roles:
        why.append("no pid of the run known (no meta.json, no rank seen)")
    if t.act and not o.acted:
        why.append("the run ended before the tool could act on it")
    elif t.act and not o.on_file:
        why.append("no file of the run's ranks was there when the tool acted: the target proves nothing")
    if t.leaves:
        named = info_names()
        unnamed = [f.name for f in o.left if f.name not in named]
        if unnamed:
            why.append(f"`ipcbench info` does not name {unnamed}")
        log(f"   ipcbench info names {len(named)} file(s) of ended processes: {sorted(named)}"
            + ("" if o.left else " (nothing of the run's stayed to name)"))
        log(f"   removed by the tool afterwards: {event_files.remove(o.left)}")
    elif o.left:
        why.append("files of the run's processes stayed")
    o.verdict = "PASS" if not why else "FAIL: " + "; ".join(why)
    log(f"   exit {o.status} in {o.wall_s:.1f} s{'; ' + o.acted if o.acted else ''}")
    log("   the run's processes: " + ", ".join(f"{p} ({r})" for p, r in sorted(o.roles.items())))
    log(f"   their files in {SHM}: {described(o.left, o.roles)}")
    log(f"   {o.verdict}")
    return o


def info_names() -> set[str]:
    """The files `ipcbench info --json` names as left by ended processes (its readiness item event_files)."""
    p = subprocess.run([sys.executable, "-m", "ipcbench", "info", "--json"], capture_output=True, text=True,
                       timeout=300, env=one_gpu_env())
    try:
        items = json.loads(p.stdout)["readiness"]
    except (ValueError, KeyError):
        return set()
    return {f["name"] for i in items if i["name"] == "event_files" for f in i["facts"]["files"]}


PROBE = r"""
import sys
from cupy.cuda import runtime
runtime.setDevice(0)
runtime.free(0)
ev = None
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "create":
        ev = runtime.eventCreateWithFlags(runtime.eventInterprocess | runtime.eventDisableTiming)
    elif cmd[0] == "handle":
        print(bytes(runtime.ipcGetEventHandle(ev)).hex(), flush=True)
        continue
    elif cmd[0] == "open":
        ev = runtime.ipcOpenEventHandle(bytes.fromhex(cmd[1]))
    elif cmd[0] == "destroy":
        runtime.eventDestroy(ev)
    print("ok", flush=True)
"""


def talk(proc: subprocess.Popen, line: str | None) -> str:
    """A line to a probe process and its answer; None: close its input and wait for it to exit."""
    assert proc.stdin is not None and proc.stdout is not None
    if line is None:
        proc.stdin.close()
        proc.wait(timeout=60)
        return ""
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


def probe(log: Log) -> None:
    """The driver alone: an exporting process A and an importing process B, /dev/shm listed after each step."""
    procs = {k: subprocess.Popen([sys.executable, "-c", PROBE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, env=one_gpu_env()) for k in "AB"}
    roles = {p.pid: f"process {k}" for k, p in procs.items()}
    log("== probe: the driver's files for one interprocess event (" +
        ", ".join(f"{r} pid {p}" for p, r in roles.items()) + ")")

    def step(what: str, who: str, line: str | None) -> str:
        answer = talk(procs[who], line)
        log(f"   after {what}: {described(event_files.of_pids(roles, SHM), roles)}")
        return answer

    talk(procs["B"], "noop")
    step("both started (a CUDA context each)", "A", "noop")
    step("A creates an interprocess event", "A", "create")
    handle = step("A takes its handle (cudaIpcGetEventHandle)", "A", "handle")
    step("B opens the handle (cudaIpcOpenEventHandle)", "B", f"open {handle}")
    step("B destroys the opened event", "B", "destroy")
    step("B exits", "B", None)
    step("A destroys its event", "A", "destroy")
    step("A creates a second event", "A", "create")
    step("A takes the second event's handle", "A", "handle")
    step("A destroys it", "A", "destroy")
    step("A exits", "A", None)
    log(f"   removed by the tool afterwards: {event_files.remove(event_files.of_pids(roles, SHM))}")


def info_itself(log: Log) -> Outcome:
    """`ipcbench info` probes event handles itself: no file of its own may stay."""
    before = {f.name for f in event_files.listing(SHM)}
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "ipcbench", "info"], capture_output=True, text=True, timeout=300,
                       env=one_gpu_env())
    new = [f for f in event_files.listing(SHM) if f.name not in before]
    line = next((ln for ln in p.stdout.splitlines() if "CUDA event files" in ln), "(no event files line)")
    log("== info: ipcbench info")
    log(f"   {line.strip()}")
    o = Outcome("info", p.returncode, time.monotonic() - t0, {}, new)
    o.verdict = "PASS" if p.returncode == 0 and not new else f"FAIL: exit {p.returncode}, new files {new}"
    log(f"   new files in {SHM}: {described(new, {})}; {o.verdict}")
    return o


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/shm_targets.py", description=(__doc__ or "").splitlines()[0])
    ap.add_argument("log", help="the log file to write")
    ap.add_argument("--out", help="where the runs go (default: beside the log, shm-runs/)")
    ap.add_argument("--only", help="comma-separated target names (probe, info, all, all-quick, suite-<name>, ...)")
    args = ap.parse_args(argv)
    log = Log(args.log)
    out = Path(args.out or Path(args.log).parent / "shm-runs")
    out.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    log(f"shm_targets: {SHM} before: {described(event_files.listing(SHM), {})}")
    if only is None or "probe" in only:
        try:
            probe(log)
        except (OSError, ValueError, subprocess.SubprocessError) as e:  # a probe process that died: its stderr above
            log(f"   the probe failed: {type(e).__name__}: {e}")
    outcomes = [judge(run_target(t, out, log), t, log) for t in targets() if only is None or t.name in only]
    if only is None or "info" in only:
        outcomes.append(info_itself(log))
    log()
    log(f"{'target':16s} {'exit':>5s} {'wall s':>7s}  verdict")
    for o in outcomes:
        log(f"{o.name:16s} {str(o.status):>5s} {o.wall_s:7.1f}  {o.verdict}")
    log(f"shm_targets: {SHM} after: {described(event_files.listing(SHM), {})}")
    return 0 if outcomes and all(o.verdict == "PASS" for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
