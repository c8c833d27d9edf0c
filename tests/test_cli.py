"""CLI without a GPU: sizes parsing, one-line input errors with exit 2, --help/--version, plan of `all`."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import launcher_free_env, mpiexec_or_skip

from ipcbench.sizes import SizeError, fmt_size, parse_size, parse_sizes
from ipcbench.suites.registry import ORDER as SUITE_ORDER, plan, resolve


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "ipcbench", *args], capture_output=True, text=True, timeout=60,
                          env=env)


@pytest.mark.parametrize("text,value", [("4K", 4096), ("256M", 256 << 20), ("1G", 1 << 30), ("8", 8),
                                        ("8B", 8), ("4k", 4096), ("2MiB", 2 << 20), (" 64 K ", 64 << 10)])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("bad", ["", "4Q", "-4K", "0", "K", "1.5M", "4KK"])
def test_parse_size_rejects(bad):
    with pytest.raises(SizeError):
        parse_size(bad)


def test_parse_sizes_ranges():
    assert parse_sizes("4K:256M") == [4096 << i for i in range(17)]
    assert parse_sizes("4K:256M:x4") == [4096 << (2 * i) for i in range(9)]
    assert parse_sizes("4K:64K", default_step=4) == [4096, 16384, 65536]
    assert parse_sizes("8,4K,8") == [8, 4096]
    assert parse_sizes("4K:10K") == [4096, 8192, 10240]  # the upper end is always measured


@pytest.mark.parametrize("bad", ["256M:4K", "4K:1M:x1", "4K:1M:y", "4K:1M:x2:3", ",", "4K:"])
def test_parse_sizes_rejects(bad):
    with pytest.raises(SizeError):
        parse_sizes(bad)


def test_fmt_size():
    assert [fmt_size(n) for n in (4, 4096, 256 << 20, 1 << 30, 1000, 6144)] == ["4", "4K", "256M", "1G", "1000", "6K"]


def test_resolve_all_and_unknown():
    assert resolve(["all"])[:2] == ["copy", "kernel"]
    assert resolve(["kernel", "copy", "kernel"]) == ["kernel", "copy"]
    with pytest.raises(KeyError, match="unknown suite 'nope'"):
        resolve(["nope"])


def test_plan_pairs_and_counts():
    sizes = parse_sizes("4K:256M")
    steps = plan(["copy", "kernel", "alltoall"], 4, sizes)
    by_label = {s.label: s for s in steps}
    assert len(by_label["ce push"].pairs) == 12 and len(by_label["ce bidir"].pairs) == 6
    assert by_label["ce push"].measurements == 12 * 17
    assert by_label["ce all-to-all"].all_ranks and min(by_label["ce all-to-all"].sizes) >= 4 << 20
    assert "sm_read pull" in by_label and "sm_write push" in by_label
    # two ranks: no all-to-all step (it would be the bidirectional pair again)
    assert not any(s.all_ranks for s in plan(["copy", "alltoall"], 2, sizes))
    assert set(SUITE_ORDER) >= {"copy", "kernel", "pool", "latency"}


@pytest.mark.parametrize("args,needle", [
    (["nosuch"], "unknown suite 'nosuch'"),
    (["all", "--sizes", "4Q"], "not a size: '4Q'"),
    (["all", "--sizes", "0"], "size must be positive"),
    (["all", "--sizes", "2T"], "larger than any GPU"),
    (["all", "--samples", "0"], "--samples must be in 1..1000"),
    (["all", "--samples", "100000"], "--samples must be in 1..1000"),
    (["all", "--min-time", "-1"], "--min-time"),
    (["all", "--min-time", "5000"], "--min-time"),
    (["all", "--timeout", "0"], "--timeout must be in [5, 86400]"),
    (["all", "--timeout", "0.001"], "--timeout must be in [5, 86400]"),
    (["all", "--sizes", "3"], "multiples of 4 bytes"),
    (["all", "--sizes", "1,2,3"], "multiples of 4 bytes"),
    (["all", "--noise", "0"], "--noise"),
    (["all", "--max-time", "0.001"], "--max-time"),
    (["all", "--sm-copy", "3x100x5"], "--sm-copy"),
    (["all", "--bogus"], "unrecognized arguments"),
    # each said nothing, or lacked the option's name, before
    (["all", "--sizes", "0"], "--sizes: size must be positive: '0'"),
    (["all", "--sizes", ","], "--sizes: no sizes in ','"),
    (["all", "--json"], "--json goes with --dry-run"),
    (["all", "--topology", "nvswitch"], "--topology goes with --dry-run"),
    (["all", "--dry-run", "--topology", "torus"], "invalid choice: 'torus'"),
])
def test_bad_input_is_one_line_exit_2(args, needle):
    p = run_cli(*args)
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert needle in lines[0] and lines[0].startswith("ipcbench: error:")


def _run_mpi(n, *args, cwd=None):
    env = launcher_free_env()
    return subprocess.run([mpiexec_or_skip(), "-n", str(n), sys.executable, "-m", "ipcbench", *args],
                          capture_output=True,
                          text=True, timeout=60, env=env, cwd=cwd)


@pytest.mark.timeout(120)
def test_unwritable_out_ends_every_rank(tmp_path):
    """A setup error seen by rank 0 (its --out is a file) ends every rank with exit 2, at once (it used to leave
    rank 1 spinning past --timeout)."""
    f = tmp_path / "file"
    f.write_text("x")
    p = _run_mpi(2, "all", "--out", str(f / "sub"), "--timeout", "30")
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--out" in lines[0], p.stderr


@pytest.mark.timeout(120)
def test_existing_run_is_refused_and_left_alone(tmp_path):
    """--out naming a directory that holds a run: exit 2 on every rank, its files untouched."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.csv").write_text("keep me\n")
    (run / "meta.json").write_text("{}")
    p = _run_mpi(2, "all", "--out", str(run), "--timeout", "30")
    assert p.returncode == 2 and "already holds a run" in p.stderr, p.stderr
    assert (run / "results.csv").read_text() == "keep me\n" and (run / "meta.json").read_text() == "{}"


@pytest.mark.timeout(120)
def test_failed_start_leaves_no_directory(tmp_path):
    """No GPU here: every rank stops with one message and no empty run directory is left behind."""
    from conftest import gpu_count

    if gpu_count():
        pytest.skip("this machine has a GPU")
    p = _run_mpi(2, "copy", "--sizes", "4K", "--timeout", "30", cwd=tmp_path)
    assert p.returncode == 2 and "no CUDA GPU" in p.stderr, p.stderr
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


def test_single_rank_needs_mpirun():
    p = run_cli("copy", "--sizes", "4K")
    assert p.returncode == 2
    assert "mpirun -np N" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_info_without_gpu():
    from conftest import gpu_count

    if gpu_count():
        pytest.skip("this machine has a GPU")
    p = run_cli("info")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "GPU" in p.stderr


def test_help_and_version_are_instant_and_gpu_free():
    p = run_cli("--help")
    assert p.returncode == 0 and "mpirun -np 4 ipcbench all" in p.stdout
    p = run_cli("--version")
    assert p.returncode == 0 and p.stdout.startswith("ipcbench ")
    code = "import sys, ipcbench.cli; print('cupy' in sys.modules, 'mpi4py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.strip() == "False False"


@pytest.mark.parametrize("cmd", ["all", "copy", "info", "report", "compare", "selftest", "check"])
def test_every_commands_help_prints(cmd):
    """`ipcbench check --help` once ended in a traceback: a help text's bare '%' (argparse formats help with %)."""
    p = run_cli(cmd, "--help")
    assert p.returncode == 0 and p.stdout.startswith("usage: ipcbench") and not p.stderr, p.stderr[-500:]


def test_dry_run_without_mpirun_needs_gpus_or_mpirun():
    """Alone, --dry-run plans one rank per GPU that NVML sees; with none here it says to use mpirun."""
    from conftest import gpu_count

    if gpu_count():
        pytest.skip("this machine has GPUs")
    p = run_cli("all", "--dry-run")
    assert p.returncode == 2 and "mpirun -np N" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_help_says_compare_takes_several_bases():
    """`ipcbench --help` said `compare BASE NEW`; compare takes one or several BASE runs."""
    p = run_cli("--help")
    assert p.returncode == 0 and "`ipcbench compare BASE [BASE…] NEW`" in " ".join(p.stdout.split())


def _plan(n: int, *args: str) -> dict:
    import json

    p = _run_mpi(n, "all", "--dry-run", "--json", *args)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


@pytest.mark.timeout(200)
def test_a_dry_run_says_what_it_assumes():
    """A dry run on a machine without NVML (a login node) estimated 120 s for 4 GPUs, assuming pairs one at a time
    without saying so, where the README says 57 s for an NVSwitch node: it says what it assumes, and --topology
    plans for a node that is not this machine."""
    from conftest import gpu_count

    if gpu_count():
        pytest.skip("this machine has GPUs (and NVML): the plan is this machine's")
    here = _plan(4)
    assert here["topology"] == "unknown" and here["pair_mode"]["mode"] == "sequential"
    assert any("links are unknown (no NVML here), so pairs are measured one at a time" in a and "--topology" in a
               for a in here["assumptions"])
    node = _plan(4, "--topology", "nvswitch")
    assert node["topology"] == "--topology nvswitch" and node["pair_mode"]["mode"] == "concurrent"
    assert any("every GPU pair is linked by nvswitch" in a for a in node["assumptions"])
    assert node["estimated_s"] < 0.6 * here["estimated_s"]
    text = _run_mpi(4, "all", "--dry-run", "--topology", "pcie").stdout
    assert "estimated duration:" in text and "assuming:" in text and "linked by pcie" in text


@pytest.mark.parametrize("args,needle", [
    (["all", "--sizes", ""], "--sizes: empty"),  # was taken for the default sweep
    (["all", "--sizes=-4K"], "--sizes: not a size: '-4K'"),
    (["all", "--sizes", "-4K"], "argument --sizes: expected one argument"),  # argparse reads -4K as an option
    (["all", "--sizes", "4K:1K"], "--sizes: bad range '4K:1K'"),
    (["all", "--sizes", "1.5K"], "--sizes: not a size: '1.5K'"),
    (["all", "--sizes", "abc"], "--sizes: not a size: 'abc'"),
    (["all", "--sizes", "4K:1M:x1"], "--sizes: bad step"),
    (["all", "--sizes", "4:10"], "multiples of 4 bytes"),
    (["all", "--sizes", " "], "--sizes: empty"),
    (["copy", "--dry-run", "--sizes", ""], "--sizes: empty"),
])
def test_nonsense_sizes_are_one_line_exit_2_before_any_gpu_work(args, needle):
    """`--sizes ''` ran the default sweep; each is refused by build_config, before MPI or CUDA is touched."""
    p = run_cli(*args)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert needle in lines[0] and lines[0].startswith("ipcbench: error:"), lines[0]


def test_helps_defaults_are_the_codes():
    """The defaults `ipcbench --help` quotes come from the constants the run uses (config.py), not from copies."""
    from ipcbench.config import DEFAULT_RULE, DEFAULT_SIZES, QUICK_RULE, QUICK_SIZES

    text = " ".join(run_cli("--help").stdout.split())
    # The default is not `--sizes 4K:256M`: without --sizes the twin steps take every other size (thin_twins),
    # so --help that said "default 4K:256M" named a value that, given, measures more
    from ipcbench.suites.registry import TWIN_STRIDE

    assert TWIN_STRIDE == 2
    assert (f"(default: {DEFAULT_SIZES} in x2 steps, the twin steps (pool, vmm, cuda.core) at every other size; "
            f"--sizes {DEFAULT_SIZES} given measures every step at every size; {QUICK_SIZES} with --quick)") in text
    from ipcbench.core.sampler import SHORT_BELOW

    assert (f"(default {DEFAULT_RULE.min_time_s * 1e3:g}, "
            f"{DEFAULT_RULE.min_time_s * DEFAULT_RULE.short_factor * 1e3:g} under {SHORT_BELOW >> 20} MiB; with "
            f"--quick {QUICK_RULE.min_time_s * 1e3:g}, {QUICK_RULE.min_time_s * QUICK_RULE.short_factor * 1e3:g} under "
            f"{SHORT_BELOW >> 20} MiB; a value given is every row's)") in text  # rows under 64 MiB: half (README)
    assert f"(default {DEFAULT_RULE.noise * 100:g}, {QUICK_RULE.noise * 100:g} with --quick)" in text
    assert f"(default {DEFAULT_RULE.max_time_s:g}, {QUICK_RULE.max_time_s:g} with --quick)" in text
    assert f"{DEFAULT_RULE.min_samples}-{DEFAULT_RULE.max_samples} samples" in text
    assert f"{QUICK_RULE.min_samples}-{QUICK_RULE.max_samples} samples" in text


def _used_dirs(tmp_path):
    """The --out directories a run must refuse, each with the words of its refusal."""
    only_meta = tmp_path / "only-meta"  # a run that never got to results.csv (or one still starting)
    only_meta.mkdir()
    (only_meta / "meta.json").write_text("{}")
    unrelated = tmp_path / "home"
    unrelated.mkdir()
    (unrelated / "notes.txt").write_text("mine")
    results = tmp_path / "results"  # the parent of runs
    (results / "20260101-000000-node").mkdir(parents=True)
    (results / "20260101-000000-node" / "results.csv").write_text("keep me\n")
    return [(only_meta, "holds meta.json"), (unrelated, "is not empty"), (results, "holds runs")]


def test_out_is_a_new_or_empty_directory(tmp_path):
    from ipcbench.run.outdir import choose_run_dir

    for d, words in _used_dirs(tmp_path):
        path, err = choose_run_dir(str(d), "ignored")
        assert path is None and err and err.startswith(f"--out {d}: ") and words in err, (d, err)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert choose_run_dir(str(empty), "ignored") == (empty, None)
    root = tmp_path / "fresh" / "results"  # the default root, empty or not there yet: still the parent of runs
    for make in (lambda: root.mkdir(parents=True), lambda: None):
        path, err = choose_run_dir(str(root), "ignored", root=str(root))
        assert path is None and err and "is where runs go" in err, err
        make()


@pytest.mark.timeout(200)
def test_a_dry_run_checks_out_as_a_run_would(tmp_path):
    """`--dry-run --out DIR` said nothing of a DIR the run would refuse: now the same one line, exit 2, and the
    directory untouched."""
    for d, words in [*_used_dirs(tmp_path), (tmp_path / "home" / "notes.txt" / "sub", "is a file")]:
        before = sorted(p.name for p in d.iterdir()) if d.is_dir() else None
        p = _run_mpi(2, "all", "--dry-run", "--topology", "nvswitch", "--out", str(d))
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert p.returncode == 2 and len(lines) == 1 and words in lines[0], p.stderr
        assert (sorted(p.name for p in d.iterdir()) if d.is_dir() else None) == before
    ok = _run_mpi(2, "all", "--dry-run", "--topology", "nvswitch", "--out", str(tmp_path / "new"))
    assert ok.returncode == 0 and not (tmp_path / "new").exists(), ok.stderr


DATA = Path(__file__).resolve().parent / "data"


def _shell(cmd: str, tmp_path):
    """cmd under bash, ipcbench's stderr kept apart from the pipe's reader: (exit status of ipcbench, its stderr)."""
    err = tmp_path / "stderr"
    p = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd} 2>{err}"], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env={**os.environ, "PYTHONUNBUFFERED": ""})
    return p.returncode, err.read_text()


IPCB = f"{sys.executable} -m ipcbench"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("cmd", [
    f"report {DATA / 'h200x2'} --out r --no-figures",
    f"compare {DATA / 'compare' / 'quiet1'} {DATA / 'compare' / 'loaded'}",
    "--help",
])
def test_a_closed_pipe_ends_quietly(cmd, tmp_path):
    """`ipcbench report … | head -1` ended in a BrokenPipeError traceback: now it ends as a Unix tool does when its
    reader goes away (killed by SIGPIPE: the shell's 141), saying nothing. The pipe's reader is closed before
    ipcbench starts, so that its first write meets the closed pipe whatever the timing."""
    import signal

    read, write = os.pipe()
    os.close(read)
    try:
        p = subprocess.run([sys.executable, "-m", "ipcbench", *cmd.split()], stdout=write, stderr=subprocess.PIPE,
                           text=True, timeout=120, cwd=tmp_path)
    finally:
        os.close(write)
    assert p.returncode == -signal.SIGPIPE and p.stderr == "", p.stderr


@pytest.mark.timeout(300)
@pytest.mark.parametrize("cmd", [
    f"report {DATA / 'h200x2'} --out r --no-figures",
    f"compare {DATA / 'compare' / 'quiet1'} {DATA / 'compare' / 'loaded'}",
])
def test_a_full_disk_is_one_line_exit_2(cmd, tmp_path):
    """stdout on a full disk (/dev/full) ended in an OSError traceback."""
    status, err = _shell(f"{IPCB} {cmd} >/dev/full", tmp_path)
    lines = [ln for ln in err.splitlines() if ln.strip() and "warning" not in ln]
    assert status == 2 and len(lines) == 1 and "No space left on device" in lines[0], err


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_report_files_that_cannot_be_written_are_one_line_exit_2(tmp_path):
    """The figures of a report into a directory that cannot be written: one line naming the file, exit 2."""
    out = tmp_path / "r"
    out.mkdir()
    out.chmod(0o500)
    try:
        status, err = _shell(f"{IPCB} report {DATA / 'h200x2'} --out {out} --quiet", tmp_path)
    finally:
        out.chmod(0o700)
    lines = [ln for ln in err.splitlines() if ln.strip() and "warning" not in ln]
    assert status == 2 and len(lines) == 1 and "Permission denied" in lines[0] and str(out) in lines[0], err


def test_a_run_that_cannot_write_its_results_is_one_line_exit_2(capsys):
    """A run whose results.csv or meta.json meets a full disk ended with an `OSError:` line and exit 1 (= "a row
    failed" / "unhealthy"): it is a setup problem, one line, exit 2 (cli._guarded)."""
    from ipcbench.cli import _guarded

    def full():
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "results/x/results.csv")

    assert _guarded(full) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["ipcbench: error: results/x/results.csv: No space left on device"], err

    def peer_gone():  # an OSError that is no file's: still the run's failure, exit 1, named by its type
        raise ConnectionResetError(errno.ECONNRESET, os.strerror(errno.ECONNRESET))

    assert _guarded(peer_gone) == 1
    assert capsys.readouterr().err.startswith("ipcbench: error: rank 0: ConnectionResetError: ")

    def pidfd_refused():  # a file errno without a file (pidfd_getfd under Yama: EPERM): the run's failure, exit 1
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))

    assert _guarded(pidfd_refused) == 1
    assert capsys.readouterr().err.startswith("ipcbench: error: rank 0: PermissionError: ")


@pytest.mark.timeout(300)
def test_a_figure_that_cannot_be_written_is_one_line_exit_2(tmp_path):
    """Writing a report's figure failed with an OSError traceback (here: a directory where the PNG goes, which
    even root cannot write over): one line naming the file, exit 2."""
    run = DATA / "h200x2" / "20261123-090753-vm"
    out = tmp_path / "r"
    (out / f"{run.name}-latency.png").mkdir(parents=True)
    status, err = _shell(f"{IPCB} report {run} --out {out} --quiet", tmp_path)
    lines = [ln for ln in err.splitlines() if ln.strip() and "warning" not in ln]
    assert status == 2 and len(lines) == 1, err
    assert lines[0].startswith("ipcbench: error: ") and f"{run.name}-latency.png: Is a directory" in lines[0], lines


def test_quick_asks_for_one_rank_pair_per_gpu_pair_and_check_does_not():
    """--quick (a fleet check of links) measures one rank pair per GPU pair where ranks share GPUs; the full run and
    `check` (which judges every rank pair it expects) measure every rank pair."""
    import argparse

    from ipcbench.check.command import Options, add_arguments
    from ipcbench.cli import _bench_parser
    from ipcbench.config import build_config

    assert build_config(_bench_parser().parse_args(["all", "--quick"])).gpu_pairs
    assert not build_config(_bench_parser().parse_args(["all"])).gpu_pairs
    p = argparse.ArgumentParser()
    add_arguments(p)
    ns = p.parse_args([])
    cfg = Options(ns, []).config()
    assert cfg.quick and not cfg.gpu_pairs
