"""run/console.py: the progress line (with a fake clock) and the end-of-run matrices (pure text)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from ipcbench.results import Row
from ipcbench.run import console
from ipcbench.run.console import Progress, matrices


class Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def clock(monkeypatch):
    c = SimpleNamespace(t=1000.0)
    monkeypatch.setattr(console, "time", SimpleNamespace(monotonic=lambda: c.t))
    return c


def test_log_lines_are_throttled_and_show_elapsed_and_eta(clock):
    out = io.StringIO()
    p = Progress({"copy": 4.0, "kernel": 2.0}, stream=out, every=5.0)
    clock.t = 1001.0
    p.advance("copy", "ce push", 1.0, 1, 4)  # first line: printed
    clock.t = 1002.0
    p.advance("copy", "ce push", 1.0, 1, 4)  # 1 s later: held back
    clock.t = 1008.0
    p.advance("copy", "ce pull", 1.0, 1, 4)  # 7 s later: printed
    clock.t = 1009.0
    p.advance("copy", "ce bidir", 1.0, 1, 4)  # the suite is done: printed at once
    lines = out.getvalue().splitlines()
    assert lines == [
        f"[copy    ]     1/4     {'ce push':24s} elapsed    1.0 s  ETA    5.0 s",
        f"[copy    ]     3/4     {'ce pull':24s} elapsed    8.0 s  ETA    8.0 s",
        f"[copy    ]     4/4     {'ce bidir':24s} elapsed    9.0 s  ETA    4.5 s",
    ]
    clock.t = 1010.0
    p.advance("kernel", "sm_read pull", 2.0, 2, 2)
    assert out.getvalue().splitlines()[-1].endswith("elapsed   10.0 s  ETA    0.0 s")


def test_terminal_rewrites_the_line_and_ends_it_with_the_suite(clock):
    out = Tty()
    p = Progress({"copy": 2.0}, stream=out)
    clock.t = 1001.0
    p.advance("copy", "a", 1.0, 1, 2)
    p.advance("copy", "b", 1.0, 1, 2)
    text = out.getvalue()
    assert text.startswith("\r[copy    ]     1/2 ") and "\r[copy    ]     2/2 " in text
    assert text.count("\n") == 1 and text.endswith("\n")


def test_disabled_progress_prints_nothing_but_counts(clock):
    out = io.StringIO()
    p = Progress({"copy": 2.0}, enabled=False, stream=out)
    p.advance("copy", "a", 2.0, 3, 3)
    assert out.getvalue() == "" and p.counts["copy"] == 3 and p.done_units == 2.0


def row(src, dst, nbytes, bw, direction="push", verified=True, host="h", method="ce", src_gpu=None):
    return Row(run_id="r", host=host, suite="copy", method=method, direction=direction, src_rank=src,
               dst_rank=dst, src_gpu=src if src_gpu is None else src_gpu, dst_gpu=dst, same_gpu=False,
               bytes=nbytes, iterations=1, samples=3, time_us_median=1.0, time_us_min=1.0, time_us_max=1.0,
               bw_gbps_median=bw, bw_gbps_max=bw, cv=0.0, verified=verified, note="")


def test_matrix_of_the_largest_size_marks_unverified_cells():
    rows = [row(0, 1, 1024, 1.0), row(0, 1, 65536, 300.0), row(1, 0, 65536, 250.5, verified=False),
            row(0, 2, 65536, 123.4), row(2, 0, 65536, None)]
    text = matrices(rows)
    lines = text.splitlines()
    assert lines[0] == "copy/ce push at 64K: GB/s, row rank(GPU) -> column"
    assert lines[1] == "        " + "".join(f"{s:>9s}" for s in ("0(0)", "1(1)", "2(2)"))
    assert lines[2] == f"{'0(0)':>8s}{'-':>9s}{300.0:8.1f} {123.4:8.1f} "
    assert lines[3] == f"{'1(1)':>8s}{250.5:8.1f}!{'-':>9s}{'-':>9s}"
    assert lines[4] == f"{'2(2)':>8s}{'-':>9s}{'-':>9s}{'-':>9s}"  # no bandwidth for 2 -> 0: not shown


def test_bidir_matrix_is_symmetric_and_host_filter_applies():
    rows = [row(0, 1, 4096, 500.0, direction="bidir"), row(0, 1, 4096, 9.0, direction="bidir", host="other"),
            row(0, 1, 4096, 7.0, method="ce_alltoall", src_gpu=-1)]
    text = matrices(rows, host="h")
    assert "copy/ce bidir at 4K: GB/s, row rank(GPU) <-> column" in text
    assert text.count("500.0") == 2 and "9.0" not in text and "ce_alltoall" not in text
    assert matrices([]) == ""


def test_a_ring_only_matrix_shows_the_ring_and_dashes_elsewhere():
    """--serial-pairs ring: a host-staged matrix has i -> i+1 only; every rank still gets its row and column."""
    rows = [row(i, (i + 1) % 4, 4096, 50.0 + i) for i in range(4)]
    lines = matrices(rows).splitlines()
    assert lines[1] == "        " + "".join(f"{f'{k}({k})':>9s}" for k in range(4))
    for i in range(4):
        cells = [lines[2 + i][8 + 9 * j: 17 + 9 * j].strip() for j in range(4)]
        assert cells == [f"{50.0 + i:.1f}" if j == (i + 1) % 4 else "-" for j in range(4)]
