"""Every output survives a terminal that is not UTF-8 (issue 37, item 7): `report`, `compare`, `check --from` and a dry
run print ASCII fallbacks for µ, →, ✓, ×, ≤, –, … under PYTHONIOENCODING=ascii (cli.terminal_fallbacks, the one
helper every command's terminal streams go through), while the files stay UTF-8; and `ipcbench … | head` under
mpiexec with several ranks ends quietly, never in an MPI_Abort or a traceback. Subprocesses: the real interpreter
start, its streams as the locale makes them."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import launcher_free_env, mpiexec_or_skip
from ipcbench.cli import ASCII_FALLBACKS, terminal_fallbacks

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "data" / "results-1126" / "h200x2-all-1"
OTHER = ROOT / "tests" / "data" / "results-1126" / "h200x2-all-2"


def ascii_env() -> dict[str, str]:
    return dict(launcher_free_env(), PYTHONIOENCODING="ascii")


def ipcbench(*argv, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ipcbench", *map(str, argv)], capture_output=True,
                          env=env or ascii_env(), timeout=300, cwd=ROOT)


def assert_ascii(p: subprocess.CompletedProcess) -> tuple[str, str]:
    for stream in (p.stdout, p.stderr):
        stream.decode("ascii")  # raises on any byte above 127
    out, err = p.stdout.decode(), p.stderr.decode()
    assert "Traceback" not in out + err and "UnicodeEncodeError" not in out + err, err
    return out, err


def test_the_report_prints_ascii_and_writes_utf8(tmp_path):
    p = ipcbench("report", RUN, "--no-figures", "--out", tmp_path)
    out, _ = assert_ascii(p)
    assert p.returncode == 0
    assert "h200x2-all-1 - vm - 2 x NVIDIA H200" in out and "  ok Healthy (ipcbench check: 75 checks" in out
    assert "Weakest pair 1->0: 394.3 GB/s" in out and "3.2-4.9x depending on the method" in out
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "**Weakest pair** 1→0: 394.3 GB/s" in md and "µs" in md


def test_compare_and_check_print_ascii():
    p = ipcbench("compare", RUN, OTHER)
    out, _ = assert_ascii(p)
    assert p.returncode == 0 and "verdict: no regression" in out
    p = ipcbench("check", "--from", RUN)
    out, _ = assert_ascii(p)
    assert p.returncode == 0 and "verdict: HEALTHY (exit 0)" in out


def test_a_bad_value_error_is_ascii_too(tmp_path):
    p = ipcbench("compare", RUN, OTHER, "--threshold", "2‰")
    _, err = assert_ascii(p)
    assert p.returncode == 2 and err.count("\n") == 1 and "2?" in err


def test_a_utf8_terminal_is_left_as_it_is():
    p = ipcbench("report", RUN, "--no-figures", "--out", "/dev/null/x", env=dict(launcher_free_env(),
                                                                                   PYTHONIOENCODING="utf-8"))
    assert p.returncode == 2 and "→" not in p.stderr.decode()
    buf = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    terminal_fallbacks([buf])
    buf.write("1→0 µs ✓")
    buf.flush()
    assert buf.buffer.getvalue().decode("utf-8") == "1→0 µs ✓"


def test_each_character_has_its_fallback():
    buf = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    terminal_fallbacks([buf])
    buf.write("0→1 2.2 µs ×4 ≤ ≥ ± 4K–1M … ✓ ✗ · é ⁰ 中")
    buf.flush()
    assert buf.buffer.getvalue().decode("ascii") == "0->1 2.2 us x4 <= >= +/- 4K-1M ... ok X - e 0 ?"
    assert all(v.isascii() for v in ASCII_FALLBACKS.values())


@pytest.mark.parametrize("encoding", ["ascii", "utf-8"])
def test_a_dry_run_under_mpiexec_piped_into_head_ends_quietly(encoding):
    """`mpiexec -n 2 ipcbench all --dry-run … | head -1`: the first line, and nothing on stderr (an ASCII terminal
    once ended the plan in a UnicodeEncodeError, which took the job down with MPI_Abort)."""
    mpiexec = mpiexec_or_skip()
    env = dict(launcher_free_env(), PYTHONIOENCODING=encoding)
    p = subprocess.Popen([mpiexec, "-n", "2", sys.executable, "-m", "ipcbench", "all", "--dry-run", "--topology",
                          "nvswitch"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    assert p.stdout is not None and p.stderr is not None
    first = p.stdout.readline()
    p.stdout.close()  # as head does after its line
    err = p.stderr.read().decode(errors="replace")
    p.wait(timeout=120)
    assert first == b"ipcbench plan (dry run: no GPU work)\n"
    assert "Abort" not in err and "Traceback" not in err and "Error" not in err, err
    assert p.returncode in (0, 141, -13), (p.returncode, err)  # done, or SIGPIPE as a Unix tool ends


def test_a_whole_ascii_dry_run_under_mpiexec_says_its_plan():
    mpiexec = mpiexec_or_skip()
    p = subprocess.run([mpiexec, "-n", "2", sys.executable, "-m", "ipcbench", "all", "--dry-run", "--topology",
                        "nvswitch"], capture_output=True, env=ascii_env(), timeout=120, cwd=ROOT)
    out, err = assert_ascii(p)
    assert p.returncode == 0 and "until the median is known to +/-0.50%" in out and not err, err
