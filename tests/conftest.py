"""Shared test setup: GPU tests skip cleanly without a GPU; tests/mpi/ is only collected under mpiexec."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

collect_ignore = []
REPO = Path(__file__).resolve().parents[1]
# Real runs the report and compare tests read: results/ (runs of the current code, shipped) and runs recorded
# with earlier code (2 x H200: cross-GPU pairs; one H100 and one H200: two ranks on one GPU, with and without MPS).
# IPCBENCH_RESULTS_DIR: only that.
RECORDED_REAL_RUNS = [REPO / "tests" / "data" / "h200x2", REPO / "tests" / "data" / "onegpu"]


def tool(name: str):
    """A module of tools/ (the project's own tools, outside the installed package: tools/costfit.py), by its path."""
    import importlib.util
    import sys

    key = f"ipcbench_tools.{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, REPO / "tools" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        sys.modules[key] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[key]


def real_runs() -> list[Path]:
    """Every real run directory (results.csv + meta.json) the real-run tests cover."""
    roots = ([Path(os.environ["IPCBENCH_RESULTS_DIR"])] if os.environ.get("IPCBENCH_RESULTS_DIR")
             else [REPO / "results", *RECORDED_REAL_RUNS])
    return [p.parent for root in roots for p in sorted(root.glob("*/results.csv"))
            if (p.parent / "meta.json").is_file()]


def has_cross_gpu_pairs(run_dir: Path) -> bool:
    import csv

    with open(run_dir / "results.csv", newline="") as f:
        return any(r["same_gpu"].lower() == "false" and r["src_gpu"] != r["dst_gpu"] for r in csv.DictReader(f))


# ------------------------------------------------------------------------------------ recorded runs, read once
# The recorded runs under results/ and tests/data/ are read by hundreds of tests (report, compare, check --from, the
# judging tests), and reading one (record/run.load_run: parse, derive the row facts, validate) costs 0.1-3 s.
# Within one pytest session each is read once: record/run.load_run is replaced by `load_recorded_run`, which reads a
# run under RECORDED_ROOTS the first time it is asked for it and hands every caller its own deep copy (a test may
# change the frame or the meta it got). Everything else (a run a test wrote under tmp_path) is read every time, as
# are runs whose results.csv, meta.json or nodes/ changed since (their stat is part of the key). In-process commands
# (cli.main, report, compare, check --from) read through it too. IPCBENCH_TEST_READ_EVERY_TIME=1 turns it off; a test
# that changes what load_run reads with (a validator, the catalogue, the schema, monkeypatched) takes the fixture
# `read_runs_every_time`.
RECORDED_ROOTS = (REPO / "results", REPO / "tests" / "data")
_real_load_run = None
_loaded: dict = {}
_every_time = False


@pytest.fixture
def read_runs_every_time(monkeypatch):
    """Within this test, every run is read anew (record/run.load_run itself), the recorded ones too."""
    monkeypatch.setitem(globals(), "_every_time", True)


def _stat_key(run_dir: Path, csv: Path) -> tuple:
    """What says that a run's files are the ones read before: (size, mtime, inode) of results.csv, meta.json and
    each file under nodes/ (a fleet run's part files, which load_run reads too)."""
    def one(p: Path) -> tuple:
        try:
            st = p.stat()
        except OSError:
            return (p.name, None)
        return (p.name, st.st_size, st.st_mtime_ns, st.st_ino)

    nodes = sorted((run_dir / "nodes").glob("*")) if (run_dir / "nodes").is_dir() else []
    return (one(csv), one(run_dir / "meta.json"), tuple(one(p) for p in nodes))


def load_recorded_run(csv_path, label=None):
    """record/run.load_run, each recorded run (under RECORDED_ROOTS) read once per session; a deep copy each call."""
    import copy

    path = Path(csv_path)
    absolute = path if path.is_absolute() else Path.cwd() / path
    try:
        recorded = any(absolute.resolve().is_relative_to(root) for root in RECORDED_ROOTS)
    except OSError:
        recorded = False
    if not recorded or _every_time:
        return _real_load_run(csv_path, label)
    key = (str(path), str(Path.cwd()) if not path.is_absolute() else "", label)
    stamp = _stat_key(absolute.parent, absolute)
    hit = _loaded.get(key)
    if hit is None or hit[0] != stamp:
        hit = _loaded[key] = (stamp, _real_load_run(csv_path, label))
    return copy.deepcopy(hit[1])


def _read_recorded_runs_once() -> None:
    """Point record/run.load_run, and every ipcbench module that imported it already, at load_recorded_run."""
    global _real_load_run
    import sys

    from ipcbench.record import run as run_module

    if _real_load_run is not None or os.environ.get("IPCBENCH_TEST_READ_EVERY_TIME"):
        return
    _real_load_run = run_module.load_run
    for name, module in list(sys.modules.items()):
        if name.startswith("ipcbench") and getattr(module, "load_run", None) is _real_load_run:
            module.load_run = load_recorded_run  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------ exhaustive sets, sampled
# A test over an exhaustive set (every ordered pair of runs, every choice of BASE runs) runs a fixed sample of it by
# default, and the rest of the set only where asked: the rest is marked `slow`, which pyproject.toml's addopts
# deselects (`-m 'not slow'`). Before a release: `python -m pytest -m slow` runs the rest, `python -m pytest -m ''`
# everything. The sample is drawn with SAMPLE_SEED, so it is the same in every run and on every machine.
SAMPLE_SEED = 44


def sample_indices(n: int, keep: int, seed: int = SAMPLE_SEED) -> set[int]:
    """`keep` of range(n), drawn with a fixed seed (all of them when keep >= n)."""
    import random

    return set(range(n)) if keep >= n else set(random.Random(seed).sample(range(n), keep))


def sampled(argnames, argvalues, keep: int, *, always=(), ids=None, seed: int = SAMPLE_SEED):
    """pytest.mark.parametrize(argnames, argvalues, ids=ids) over an exhaustive set, its values `always` and `keep`
    more drawn with `seed` run by default, every other value marked slow (run by `python -m pytest -m slow`)."""
    names = [n.strip() for n in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
    values = list(argvalues)
    chosen = {i for i, v in enumerate(values) if v in list(always)}
    rest = [i for i in range(len(values)) if i not in chosen]
    chosen |= {rest[i] for i in sample_indices(len(rest), keep, seed)}
    params = [pytest.param(*(v if len(names) > 1 else (v,)), marks=() if i in chosen else (pytest.mark.slow,))
              for i, v in enumerate(values)]
    return pytest.mark.parametrize(argnames, params, ids=ids)


def per_directory(runs: list[Path], keep: int = 1, seed: int = SAMPLE_SEED) -> list[Path]:
    """A sample of recorded runs: `keep` drawn with a fixed seed from each directory that holds them (each recorded
    set: one machine, one code)."""
    import random

    groups: dict[Path, list[Path]] = {}
    for run in runs:
        groups.setdefault(run.parent, []).append(run)
    out: list[Path] = []
    for d in sorted(groups):
        out += random.Random(f"{seed}:{d.name}").sample(groups[d], min(keep, len(groups[d])))
    return out


def ring_pairs(items: list, seed: int = SAMPLE_SEED) -> list[tuple]:
    """A sample of the ordered pairs of `items` in which each item is once first and once second: the items shuffled
    with a fixed seed, each paired with the next (the last with the first)."""
    import random

    order = list(items)
    random.Random(seed).shuffle(order)
    return [(a, b) for a, b in zip(order, order[1:] + order[:1])] if len(order) > 1 else []


# ------------------------------------------------------------------------------------ the CLI, in this process
# A test of what `ipcbench COMMAND …` prints and exits with calls `ipcbench_cli(COMMAND, …)`: the commands that start
# no MPI (report, compare, check --from, and --help or --version of any command) run here, through cli.main, as the
# console script runs them (its stdout and stderr UTF-8 pipes, its exit status, a traceback on stderr and status 1
# for an uncaught exception), without a new interpreter importing pandas each time (about a second), and reading
# each recorded run once (load_recorded_run). Any other command, and every call with `subprocess=True`, is a real
# `python -m ipcbench` process: keep a few of those for the entry point itself (tests/test_cli.py: exit codes, a
# closed pipe, the console script).
IN_PROCESS = ("report", "compare")


def runs_in_process(argv: list[str]) -> bool:
    """Whether `ipcbench ARGV` starts no MPI, so that it can run in this process."""
    if any(a in ("-h", "--help", "--version") for a in argv):
        return True
    return bool(argv) and (argv[0] in IN_PROCESS
                           or argv[0] == "check" and any(a == "--from" or a.startswith("--from=") for a in argv))


def ipcbench_cli(*argv, cwd=None, env=None, timeout: float = 120, subprocess: bool = False):
    """`ipcbench ARGV` (in `cwd`, with the environment `env`): a subprocess.CompletedProcess with its returncode and
    its stdout and stderr as text; in this process where the command starts no MPI (runs_in_process) unless
    `subprocess` is true, else `python -m ipcbench ARGV` in a process of its own (killed after `timeout` s)."""
    import io
    import subprocess as sp
    import sys
    import traceback

    args = [str(a) for a in argv]
    if subprocess or not runs_in_process(args):
        return sp.run([sys.executable, "-m", "ipcbench", *args], cwd=cwd, env=env, capture_output=True, text=True,
                      timeout=timeout)
    from ipcbench import cli

    def pipe() -> io.TextIOWrapper:
        return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="\n", write_through=True)

    out, err = pipe(), pipe()
    saved = sys.stdout, sys.stderr, os.getcwd(), dict(os.environ)
    sys.stdout, sys.stderr = out, err
    try:
        if cwd is not None:
            os.chdir(cwd)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        try:
            code = cli.main(args) or 0
        except SystemExit as e:  # argparse: --help (0), a usage error (2)
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
            if not isinstance(e.code, (int, type(None))):
                print(e.code, file=sys.stderr)
        except Exception:  # what the interpreter does with an uncaught exception
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        sys.stdout, sys.stderr = saved[0], saved[1]
        os.chdir(saved[2])
        if env is not None:
            os.environ.clear()
            os.environ.update(saved[3])
    text = [s.buffer.getvalue().decode("utf-8", errors="replace") for s in (out, err)]  # type: ignore[attr-defined]
    return sp.CompletedProcess(["ipcbench", *args], code, text[0], text[1])


def pytest_configure(config):
    # tests/mpi/ holds tests that must run under `mpiexec -n N python -m pytest --with-mpi tests/mpi`.
    # A plain `pytest` run reaches them through tests/test_mpi_launch.py, which starts mpiexec itself.
    if not config.getoption("--with-mpi", default=False):
        collect_ignore.append("mpi")
    _read_recorded_runs_once()


def gpu_count() -> int:
    """How many CUDA devices this process can use (0 without a driver, a device or cupy)."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


# A test kept only for `-m slow` (the whole of an exhaustive set) and the test of the same module that runs its sample
# by default: every slow test has a sibling that can still fail in the README's plain `python -m pytest`.
SLOW_ONLY = {"tests/test_rows_fuzz.py::test_every_damaged_run_is_refused_or_read_for_what_it_is":
             "test_a_sample_of_damaged_runs_is_refused_or_read_for_what_it_is"}


@pytest.hookimpl(tryfirst=True)  # before `-m 'not slow'` deselects: every item of a test is seen
def pytest_collection_modifyitems(config, items):
    _every_slow_test_keeps_a_sample(items)
    if gpu_count() > 0:
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _every_slow_test_keeps_a_sample(items) -> None:
    """A usage error where a test's every item is slow (conftest.sampled kept none by default) and SLOW_ONLY names no
    sibling of it that runs by default: an exhaustive set moved to `slow` must leave a sample behind."""
    fast, slow = set(), set()
    for item in items:
        name = item.nodeid.split("[")[0]
        (slow if item.get_closest_marker("slow") else fast).add(name)
    for name in sorted(slow - fast):
        sibling = SLOW_ONLY.get(name)
        if sibling is None or f"{name.split('::')[0]}::{sibling}" not in fast:
            raise pytest.UsageError(f"{name}: every item is slow, and no test of its module samples it by default "
                                    "(tests/conftest.py SLOW_ONLY)")


def mpiexec_or_skip() -> str:
    """mpiexec next to the interpreter (the venv's mpich wheel), else on PATH; skip the test without one."""
    import os
    import shutil
    import sys

    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    exe = here if os.path.exists(here) else shutil.which("mpiexec")
    if not exe:
        pytest.skip("no mpiexec next to sys.executable or on PATH (pip install mpich)")
    return exe


def launcher_free_env() -> dict[str, str]:
    """This process's environment without the variables of an MPI job it may be part of, so that a child
    mpiexec starts a job of its own."""
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "HYDRA_", "MPIR_", "OMPI_"))}


# How a swapped compare names each verdict (the mirror of a verdict when BASE and NEW change places).
MIRROR = {"regression": "improvement", "improvement": "regression", "missing": "new", "new": "missing",
          "unchanged": "unchanged", "not judged": "not judged"}


def _in_process(module: str, capsys, argv) -> tuple[int, str, str]:
    """`ipcbench COMMAND ARGV` of the command in ipcbench.report.<module>, in-process: (exit status, stdout, stderr)."""
    import argparse
    import importlib

    command = importlib.import_module(f"ipcbench.report.{module}")
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    rc = command.run(parser.parse_args([str(a) for a in argv]))
    out, err = capsys.readouterr()
    return rc, out, err


def run_report(capsys, *argv) -> tuple[int, str, str]:
    """`ipcbench report ARGV` in-process: (exit status, stdout, stderr)."""
    return _in_process("command", capsys, argv)


def run_compare(capsys, *argv) -> tuple[int, str, str]:
    """`ipcbench compare ARGV` in-process: (exit status, stdout, stderr)."""
    return _in_process("compare_command", capsys, argv)


@pytest.fixture(autouse=True)
def _no_run_left_armed():
    """A run a test left armed for its /dev/shm release (run/shm_release.py: a runner driven on fakes that raised
    before its release, as only cli._guarded's early end would disarm it) is disarmed after the test, and the
    SIGTERM handler it installed in pytest's process put back: the next test starts with no run of another armed."""
    yield
    import sys as _sys

    armed = _sys.modules.get("ipcbench.run.shm_release")
    if armed is None or not armed.armed():
        return
    with armed._LOCK:
        for run in list(armed._ARMED):
            armed._disarm(run)
