"""`ipcbench check` fails closed and never crashes (issue 27): every output path and input file is checked
before any GPU work or judging (one line on stderr, exit 2); check never writes into a run directory; an error
while writing an output after judging is exit 2, never 1 (exit 1 drains a healthy node); and on every nasty
input of a newcomer's the exit code is 0, 1 or 2 with no traceback."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, ipcbench_cli, launcher_free_env

DATA = REPO / "tests" / "data"
H200X2 = DATA / "h200x2" / "20261123-090753-vm"


def check(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return ipcbench_cli("check", *args, cwd=cwd, env=launcher_free_env())


@pytest.fixture
def run(tmp_path) -> Path:
    """A copy of the committed 2 x H200 run (a healthy node), free to be damaged."""
    dst = tmp_path / "run"
    shutil.copytree(H200X2, dst)
    return dst


def _snapshot(run: Path) -> dict:
    return {p.name: p.read_bytes() for p in run.iterdir()}


def _refused(p: subprocess.CompletedProcess, words: str = "") -> None:
    """Exit 2, one line on stderr (with `words`), no traceback, no verdict printed: nothing was judged."""
    assert p.returncode == 2, (p.returncode, p.stdout[-500:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert words in p.stderr, p.stderr
    assert "verdict:" not in p.stdout, p.stdout


# ---- the cases ("Exit-code contract broken") ---------------------------------------------------------

def test_a_junit_file_in_a_directory_that_does_not_exist_is_refused_before_judging(run):
    _refused(check("--from", str(run), "--junit", "/nonexistent/dir/x.xml"), "--junit /nonexistent/dir/x.xml")


def test_a_prometheus_path_that_is_a_directory_is_refused_before_judging(run, tmp_path):
    _refused(check("--from", str(run), "--prometheus", str(tmp_path)), "is a directory")


def test_a_thresholds_file_that_is_not_utf8_is_refused(run, tmp_path):
    f = tmp_path / "t.toml"
    f.write_bytes(b'[[expect]]\ngpu = "NVIDIA H200\xff\xfe"\n')
    _refused(check("--from", str(run), "--thresholds", str(f)), f"--thresholds {f}")


def test_outputs_over_the_judged_runs_files_are_refused_and_the_run_is_kept(run):
    before = _snapshot(run)
    _refused(check("--from", str(run), "--junit", str(run / "results.csv"), "--prometheus", str(run / "meta.json")),
             "run directory")
    assert _snapshot(run) == before


def test_sizes_that_are_not_sizes_are_refused_with_from(run):
    _refused(check("--from", str(run), "--sizes", "abc"), "--sizes")


# ---- never into a run directory ------------------------------------------------------------------------------

def test_an_output_inside_the_judged_run_directory_is_refused(run):
    _refused(check("--from", str(run), "--junit", str(run / "check.xml")), "run directory")
    assert not (run / "check.xml").exists()


def test_an_output_over_a_baseline_runs_file_is_refused(run, tmp_path):
    base = tmp_path / "base"
    shutil.copytree(H200X2, base)
    before = _snapshot(base)
    _refused(check("--from", str(run), "--baseline", str(base), "--prometheus", str(base / "meta.json")),
             "run directory")
    assert _snapshot(base) == before


def test_an_output_reached_through_a_relative_path_or_a_link_is_still_refused(run, tmp_path):
    link = tmp_path / "alias"
    link.symlink_to(run)
    _refused(check("--from", str(run), "--junit", str(link / "results.csv")), "run directory")
    _refused(check("--from", "run", "--junit", "run/../run/meta.json", cwd=tmp_path), "run directory")


def test_one_path_for_two_outputs_is_refused(run, tmp_path):
    f = str(tmp_path / "out")
    _refused(check("--from", str(run), "--junit", f, "--prometheus", f), "the same file")


# ---- an output that fails after judging: exit 2, never 1 -----------------------------------------------------

def test_an_error_while_writing_an_output_after_judging_is_exit_2(run, tmp_path, monkeypatch):
    """The outputs are checked first; an OSError that still comes while writing (a disk that fills up) is
    one line and exit 2, also when the node failed (exit 1 drains a node on what may be a full disk)."""
    from types import SimpleNamespace

    from ipcbench.check import command, outputs

    def full(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outputs, "write_junit", full)
    ns = SimpleNamespace(from_run=str(run), thresholds=None, no_defaults=False, baseline=None, other_baseline=False,
                         threshold="10%", no_peers=False, peer_drop="20%", methods=None, sizes=None, json=False,
                         junit=str(tmp_path / "check.xml"), prometheus=None, verbose=False, any_host=False, out=None,
                         timeout=120.0, dry_run=False, topology=None, ranks=None, quiet=True)
    from ipcbench.errors import UsageError

    with pytest.raises(UsageError, match=r"--junit .*check.xml: cannot write \(No space left on device\)"):
        command.run(command.Options(ns, []))


# ---- --from judges any node's run -------------------------------------------------------------------------------

def test_another_nodes_run_is_judged(run):
    """The README promises `check --from` on a login node: a run made on another host is judged as any run
    (the drain script guards its own host); --any-host stays accepted, as a no-op."""
    import csv

    meta = (run / "meta.json").read_text()
    assert '"hosts": [\n    "vm"\n  ]' in meta
    (run / "meta.json").write_text(meta.replace('"vm"', '"elsewhere"'))  # every field that names the host
    with open(run / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    with open(run / "results.csv", "w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(rows[0]))
        out.writeheader()
        out.writerows({**r, "host": "elsewhere"} for r in rows)
    p = check("--from", str(run))
    assert p.returncode == 0, p.stdout + p.stderr
    assert check("--from", str(run), "--any-host").returncode == 0
    assert "no-op" in check("--help").stdout.replace("\n", " ")


# ---- nasty inputs: 0, 1 or 2, never a traceback ------------------------------------------------------------------

def _nasty(tmp_path: Path, run: Path) -> dict[str, list[str]]:
    """name -> check's arguments, each a newcomer's mistake or a damaged file (made in tmp_path)."""
    t = tmp_path
    (t / "empty.toml").write_text("")
    (t / "list.toml").write_text("expect = [1, 2]\n")
    (t / "scalar.toml").write_text("expect = 3\n")
    (t / "types.toml").write_text('[[expect]]\ngpu = 5\nlink = "nvswitch"\nmethod = "ce"\ndirection = "push"\n'
                                  'sizes = "64M:1G"\nfloor_gbps = 340\nwhy = "x"\n')
    (t / "inf.toml").write_text('[[expect]]\ngpu = "NVIDIA H200"\nlink = "nvswitch"\nmethod = "ce"\ndirection = '
                                '"push"\nsizes = "64M:1G"\nfloor_gbps = inf\nwhy = "x"\n')
    (t / "nan.toml").write_text((t / "inf.toml").read_text().replace("inf", "nan"))
    (t / "sizes.toml").write_text((t / "inf.toml").read_text().replace("floor_gbps = inf", "floor_gbps = 1")
                                  .replace('"64M:1G"', '"4K:8K:16K"'))
    (t / "method.toml").write_text((t / "inf.toml").read_text().replace("floor_gbps = inf", "floor_gbps = 1")
                                   .replace('method = "ce"', 'method = ["ce"]'))
    (t / "binary.toml").write_bytes(bytes(range(256)))
    only_meta = t / "only-meta"
    only_meta.mkdir()
    shutil.copy(run / "meta.json", only_meta / "meta.json")
    garbage = t / "garbage"
    garbage.mkdir()
    (garbage / "results.csv").write_bytes(b"\x00\xff garbage,,,\n" * 20)
    (garbage / "meta.json").write_text("{}")
    empty = t / "empty-run"
    empty.mkdir()
    (empty / "results.csv").write_text("")
    header = t / "header-only"
    header.mkdir()
    (header / "results.csv").write_text((run / "results.csv").read_text().splitlines()[0] + "\n")
    bad_meta = t / "bad-meta"
    shutil.copytree(run, bad_meta)
    (bad_meta / "meta.json").write_bytes(b"\xff\xfe[1, 2")
    list_meta = t / "list-meta"
    shutil.copytree(run, list_meta)
    (list_meta / "meta.json").write_text("[1, 2, 3]")
    odd_meta = t / "odd-meta"
    shutil.copytree(run, odd_meta)
    (odd_meta / "meta.json").write_text(json.dumps({"hosts": 5, "gpus": [1], "topology": "x", "ranks": [1, "a"]}))
    bad_value = t / "bad-value"
    shutil.copytree(run, bad_value)
    lines = (run / "results.csv").read_text().splitlines()
    lines[1] = lines[1].replace(",bandwidth,", ",bandwidth,").replace("true", "maybe", 1)
    (bad_value / "results.csv").write_text("\n".join(lines) + "\n")
    two = t / "two-runs"
    shutil.copytree(run, two / "a")
    shutil.copytree(run, two / "b")
    fifo = t / "fifo"
    os.mkfifo(fifo)
    a_file = t / "a-file"
    a_file.write_text("x")
    r = str(run)
    full = _a_full_device(t)
    return {
        "empty thresholds": ["--from", r, "--thresholds", str(t / "empty.toml")],
        "thresholds: expect is a list of numbers": ["--from", r, "--thresholds", str(t / "list.toml")],
        "thresholds: expect is a number": ["--from", r, "--thresholds", str(t / "scalar.toml")],
        "thresholds: gpu is a number": ["--from", r, "--thresholds", str(t / "types.toml")],
        "thresholds: an infinite floor": ["--from", r, "--thresholds", str(t / "inf.toml")],
        "thresholds: a NaN floor": ["--from", r, "--thresholds", str(t / "nan.toml")],
        "thresholds: three sizes in a range": ["--from", r, "--thresholds", str(t / "sizes.toml")],
        "thresholds: a method list": ["--from", r, "--thresholds", str(t / "method.toml")],
        "thresholds: binary": ["--from", r, "--thresholds", str(t / "binary.toml")],
        "thresholds: a directory": ["--from", r, "--thresholds", str(t)],
        "thresholds: missing": ["--from", r, "--thresholds", str(t / "missing.toml")],
        "a run dir with only meta.json": ["--from", str(only_meta)],
        "a results.csv of garbage": ["--from", str(garbage)],
        "an empty results.csv": ["--from", str(empty)],
        "a results.csv with only its header": ["--from", str(header)],
        "a meta.json not UTF-8 nor JSON": ["--from", str(bad_meta)],
        "a meta.json that is a list": ["--from", str(list_meta)],
        "a meta.json of wrong types": ["--from", str(odd_meta)],
        "a row whose verified is neither true nor false": ["--from", str(bad_value)],
        "a tree of two runs": ["--from", str(two)],
        "a baseline that does not exist": ["--from", r, "--baseline", str(t / "nowhere")],
        "a baseline of garbage": ["--from", r, "--baseline", str(garbage)],
        "junit into a FIFO": ["--from", r, "--junit", str(fifo)],
        "prometheus into /dev/full": ["--from", r, "--prometheus", str(full)],
        "junit under a file": ["--from", r, "--junit", str(a_file / "x.xml")],
        "junit on a read-only file system": ["--from", r, "--junit", "/proc/ipcbench-check.xml"],
        "junit is empty": ["--from", r, "--junit", ""],
        "sizes empty": ["--from", r, "--sizes", ""],
        "sizes negative": ["--from", r, "--sizes", "-4K"],
        "sizes abc without --from": ["--sizes", "abc", "--dry-run"],
        "threshold not a fraction": ["--from", r, "--baseline", r, "--threshold", "abc"],
        "peer drop negative": ["--from", r, "--peer-drop", "-5%"],
        "methods all commas": ["--from", r, "--methods", ",,,"],
        "out is a file": ["--out", str(a_file), "--dry-run"],
    }


def _a_full_device(t: Path) -> Path:
    """/dev/full for a user; for root (who may create files in /dev, and whose writer's rename would replace the
    device with a file) a device of the same numbers made in the test's own directory."""
    if os.geteuid() != 0:
        return Path("/dev/full")
    dev = t / "full"
    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    return dev


NASTY = ["empty thresholds", "thresholds: expect is a list of numbers", "thresholds: expect is a number",
         "thresholds: gpu is a number", "thresholds: an infinite floor", "thresholds: a NaN floor",
         "thresholds: three sizes in a range", "thresholds: a method list", "thresholds: binary",
         "thresholds: a directory", "thresholds: missing", "a run dir with only meta.json", "a results.csv of garbage",
         "an empty results.csv", "a results.csv with only its header", "a meta.json not UTF-8 nor JSON",
         "a meta.json that is a list", "a meta.json of wrong types", "a row whose verified is neither true nor false",
         "a tree of two runs", "a baseline that does not exist", "a baseline of garbage", "junit into a FIFO",
         "prometheus into /dev/full", "junit under a file", "junit on a read-only file system", "junit is empty",
         "sizes empty", "sizes negative", "sizes abc without --from", "threshold not a fraction",
         "peer drop negative", "methods all commas", "out is a file"]
# Inputs a newcomer can mean: judged (exit 0/1/2 by the run), not refused as bad input. (A meta.json of wrong
# types is refused: the record names the field, record/meta_schema.py.)
JUDGED: set[str] = set()


@pytest.mark.parametrize("name", NASTY)
def test_nasty_input_is_an_exit_code_of_the_contract_and_never_a_traceback(name, run, tmp_path):
    p = check(*_nasty(tmp_path, run)[name])
    assert p.returncode in (0, 1, 2), (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr + p.stdout, p.stderr[-2000:]
    if name not in JUDGED:
        _refused(p)
    if name == "prometheus into /dev/full":  # the device is still a device, not a file of check's
        assert (tmp_path / "full" if os.geteuid() == 0 else Path("/dev/full")).is_char_device()


def test_the_nasty_list_is_whole(run, tmp_path):
    assert sorted(_nasty(tmp_path, run)) == sorted(NASTY)


def test_outputs_are_checked_before_measuring(tmp_path):
    """Without --from (the measuring path): a bad --junit is refused by the options, before the runner starts
    MPI or touches a GPU (on this GPU-less machine a run would say so instead)."""
    _refused(check("--junit", "/nonexistent/dir/x.xml"), "--junit /nonexistent/dir/x.xml")
    _refused(check("--out", str(tmp_path / "run"), "--junit", str(tmp_path / "run" / "x.xml")), "run directory")


def test_a_measuring_out_directory_that_cannot_be_one_is_refused_before_measuring(run, tmp_path):
    """--out is the runner's rule (run/outdir.py), asked by check's options before MPI or a GPU."""
    f = tmp_path / "a-file"
    f.write_text("x")
    _refused(check("--out", str(f)), "exists and is not a directory")
    _refused(check("--out", str(run)), "already holds a run")
