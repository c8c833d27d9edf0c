"""The smaller things a user hits (issue 37, item 8): `report --out` into a run's directory is refused; compare's
bad values point to `ipcbench compare --help`; `--ranks N` plans N ranks without mpirun (a login node); an empty size
in a list is refused; a launcher of another MPI than mpi4py's is one line, never a PMIx abort nor N runs of one rank;
the README's check estimate is the dry run's."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import launcher_free_env, mpiexec_or_skip
from ipcbench.cli import launcher_mismatch, main
from ipcbench.sizes import SizeError, parse_sizes

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "data" / "results-1126" / "h200x2-check-1"
MPICH = "MPICH Version:      5.0.2\nMPICH Release date: Fri Sep 25 2025"
OPEN_MPI = "Open MPI v4.1.6, package: Debian OpenMPI, ident: 4.1.6, repo rev: v4.1.6, Sep 30, 2023"


def ipcbench(*argv, env=None, launcher=()) -> subprocess.CompletedProcess:
    return subprocess.run([*launcher, sys.executable, "-m", "ipcbench", *map(str, argv)], capture_output=True,
                          text=True, env=env or launcher_free_env(), timeout=300, cwd=ROOT)


def one_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    return lines[0]


# ------------------------------------------------------------------------------------------ report --out

@pytest.mark.parametrize("held", ["results.csv", "meta.json"])
def test_a_report_never_goes_into_a_runs_directory(tmp_path, capsys, held):
    other = tmp_path / "other-run"
    shutil.copytree(RUN, other)
    if held == "meta.json":
        (other / "results.csv").unlink()  # a run that never got to its results
    before = sorted(p.name for p in other.iterdir())
    rc = main(["report", str(RUN), "--no-figures", "--out", str(other)])
    out, err = capsys.readouterr()
    assert rc == 2 and not out
    assert one_line(err) == (f"ipcbench: error: --out {other} holds a run ({held}): a report never goes into a "
                             f"run's directory; name another (e.g. {other / 'report'})")
    assert sorted(p.name for p in other.iterdir()) == before


def test_a_report_beside_runs_is_written(tmp_path, capsys):
    rc = main(["report", str(RUN), "--no-figures", "--quiet", "--out", str(tmp_path / "runs" / "report")])
    capsys.readouterr()
    assert rc == 0 and (tmp_path / "runs" / "report" / "report.md").is_file()


# ------------------------------------------------------------------------------------------ compare's bad values

@pytest.mark.parametrize("args,needle", [
    (["--threshold", "x"], "argument --threshold: not a threshold: 'x' (use e.g. 0.05 or 5%)"),
    (["--alpha", "2"], "argument --alpha: significance level '2' out of range: use e.g. 0.01"),
    (["--format", "xml"], "argument --format: invalid choice: 'xml'"),
])
def test_compares_bad_values_point_to_its_own_help(capsys, args, needle):
    with pytest.raises(SystemExit) as e:
        main(["compare", str(RUN), str(RUN.with_name("h200x2-check-2")), *args])
    line = one_line(capsys.readouterr().err)
    assert e.value.code == 2 and line.startswith(f"ipcbench: error: {needle}")
    assert line.endswith("(see `ipcbench compare --help`)")


def test_the_bench_commands_errors_point_to_ipcbench_help(capsys):
    with pytest.raises(SystemExit):
        main(["all", "--bogus"])
    assert one_line(capsys.readouterr().err).endswith("(see `ipcbench --help`)")


# ------------------------------------------------------------------------------------------ --sizes

@pytest.mark.parametrize("spec", ["4K,,8K", "4K,8K,", ",4K", "4K, ,8K"])
def test_an_empty_size_in_a_list_is_refused(spec):
    with pytest.raises(SizeError, match="an empty size in"):
        parse_sizes(spec)
    with pytest.raises(SizeError, match="no sizes in"):
        parse_sizes(",")
    assert parse_sizes("8,4K,8") == [8, 4096]


def test_an_empty_size_is_one_line_before_any_work():
    p = ipcbench("all", "--dry-run", "--sizes", "4K,,8K")
    assert p.returncode == 2
    assert one_line(p.stderr) == ("ipcbench: error: --sizes: an empty size in '4K,,8K' (two commas, or one at an "
                                  "end): list sizes as 8,4K,1M")


# ------------------------------------------------------------------------------------------ --ranks

def plan(*argv, launcher=()) -> dict:
    p = ipcbench("all", "--dry-run", "--json", *argv, launcher=launcher)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def test_ranks_plans_a_node_without_mpirun_as_mpirun_would():
    """A login node: no GPU, no mpirun; `--topology nvswitch --ranks 8` plans what `mpirun -np 8` plans there."""
    alone = plan("--topology", "nvswitch", "--ranks", "8")
    assert alone["ranks"] == 8 and alone["pairs"] == 56 and alone["pair_mode"]["mode"] == "concurrent"
    launched = plan("--topology", "nvswitch", launcher=(mpiexec_or_skip(), "-n", "8"))
    for key in ("ranks", "pairs", "pair_mode", "steps", "measurements", "estimated_s"):
        assert alone[key] == launched[key], key
    text = ipcbench("all", "--dry-run", "--topology", "nvswitch", "--ranks", "4").stdout
    assert text.startswith("(started without mpirun: planning `mpirun -np 4`, as --ranks asks)\n")


@pytest.mark.parametrize("args,needle", [
    (["all", "--ranks", "4"], "--ranks goes with --dry-run"),
    (["all", "--dry-run", "--ranks", "1"], "--ranks must be in 2..1024 (got 1)"),
    (["all", "--dry-run", "--ranks", "4096"], "--ranks must be in 2..1024 (got 4096)"),
])
def test_ranks_out_of_place_is_one_line(args, needle):
    p = ipcbench(*args)
    assert p.returncode == 2 and needle in one_line(p.stderr)


def test_ranks_under_mpirun_is_one_line():
    p = ipcbench("all", "--dry-run", "--ranks", "4", launcher=(mpiexec_or_skip(), "-n", "2"))
    assert p.returncode == 2
    assert one_line(p.stderr) == ("ipcbench: error: --ranks plans without mpirun: under mpirun the plan is for the 2 "
                                  "ranks started")


def test_without_ranks_or_gpus_a_dry_run_says_how():
    from conftest import gpu_count

    if gpu_count():
        pytest.skip("this machine has GPUs")
    p = ipcbench("all", "--dry-run", "--topology", "nvswitch")
    assert p.returncode == 2 and "give --ranks N, or use `mpirun -np N" in one_line(p.stderr)


# ------------------------------------------------------------------------------------------ another MPI's launcher

def test_a_launcher_of_another_mpi_is_named():
    open_mpi_run = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"}
    hydra = {"HYDI_CONTROL_FD": "7", "PMI_SIZE": "2", "PMI_RANK": "0"}
    said = launcher_mismatch(MPICH, open_mpi_run)
    assert said is not None and said.startswith("started by Open MPI's mpirun, but mpi4py runs on MPICH Version: "
                                                "5.0.2: each rank would be a job of its own")
    said = launcher_mismatch(OPEN_MPI, hydra)
    assert said is not None and said.startswith("started by MPICH's mpiexec (Hydra), but mpi4py runs on Open MPI")
    assert launcher_mismatch(OPEN_MPI, open_mpi_run) is None and launcher_mismatch(MPICH, hydra) is None
    intel = "Intel(R) MPI Library 2021.13 for Linux* OS"  # MPICH's family, under its own Hydra
    assert launcher_mismatch(intel, hydra) is None and launcher_mismatch(intel, open_mpi_run) is not None
    assert launcher_mismatch(MPICH, {}) is None and launcher_mismatch(MPICH, {}, 1) is None


def test_a_world_of_one_where_the_launcher_started_several_is_named():
    said = launcher_mismatch(MPICH, {"PMI_SIZE": "4"}, world_size=1)
    assert said is not None and said.startswith("the launcher started 4 ranks, but MPI sees each as a job of one")
    assert launcher_mismatch(MPICH, {"PMI_SIZE": "4"}, world_size=4) is None
    assert launcher_mismatch(MPICH, {"PMI_SIZE": "1"}, world_size=1) is None


def test_open_mpis_launcher_with_mpich_is_one_line_before_mpi_starts():
    """Open MPI's mpirun sets OMPI_COMM_WORLD_*; the venv's MPICH would abort in PMIx. Each rank's environment as
    that launcher makes it: one line from rank 0, exit 2, MPI never started (rank 1 says nothing)."""
    lib = subprocess.run([sys.executable, "-c", "import mpi4py; mpi4py.rc.initialize = False\n"
                          "from mpi4py import MPI; print(MPI.Get_library_version())"], capture_output=True,
                         text=True, env=launcher_free_env()).stdout
    if lib.startswith("Open MPI"):
        pytest.skip("mpi4py runs on Open MPI here: its own launcher is no mismatch")
    for rank in (0, 1):
        env = dict(launcher_free_env(), OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_RANK=str(rank))
        p = ipcbench("all", "--dry-run", "--topology", "nvswitch", env=env)
        assert p.returncode == 2 and not p.stdout and "PMI" not in p.stderr, p.stderr
        if rank:
            assert not p.stderr.strip()
        else:
            assert one_line(p.stderr).startswith("ipcbench: error: started by Open MPI's mpirun, but mpi4py runs on ")


def test_open_mpis_own_mpirun_with_mpich_is_one_line():
    mpirun = shutil.which("mpirun.openmpi")
    if not mpirun:
        pytest.skip("no Open MPI launcher here")
    extra = ["--allow-run-as-root", "--oversubscribe"] if os.geteuid() == 0 else ["--oversubscribe"]
    p = ipcbench("all", "--dry-run", "--topology", "nvswitch", launcher=(mpirun, *extra, "-np", "2"))
    assert p.returncode != 0 and "unsupported PMI version" not in p.stderr and "Traceback" not in p.stderr
    ours = [ln for ln in p.stderr.splitlines() if ln.startswith("ipcbench")]
    assert len(ours) == 1 and ours[0].startswith("ipcbench: error: started by Open MPI's mpirun"), p.stderr


# ------------------------------------------------------------------------------------------ the README's numbers

def test_the_readmes_check_estimate_is_the_dry_runs():
    """`ipcbench check` on 8 GPUs through NVSwitch: the README says what the dry run estimates (it said ~10 s while
    the estimate was 6)."""
    p = subprocess.run([mpiexec_or_skip(), "-n", "8", sys.executable, "-m", "ipcbench", "check", "--dry-run",
                        "--topology", "nvswitch", "--json"], capture_output=True, text=True,
                       env=launcher_free_env(), timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    seconds = round(json.loads(p.stdout)["estimated_s"])
    readme = " ".join((ROOT / "README.md").read_text().split())
    said = re.search(r"every row verified; about (\d+) s on 8 GPUs through NVSwitch\)", readme)
    assert said and int(said.group(1)) == seconds, (said, seconds)
