"""What every command says when it stops (issue 44, items 1 and 9): one error prefix for every command and rank
(errors.error_line), every exit 2 of check ending in a REASON: line as its verdict does (check/outputs.refusal), and
a reader that goes away (`ipcbench check --from RUN --verbose | head -1`) ending check quietly, as report and
compare end. In-process (cli.main): no subprocess, no MPI."""

from __future__ import annotations

import io
import json

import pytest

from conftest import REPO
from ipcbench import cli

RESULTS = REPO / "results"
CHECK_RUN = RESULTS / "h200x4-check-1"
SELFTEST_RUN = RESULTS / "h200x4-selftest-1"


class HeadOne(io.TextIOBase):
    """stdout read by `head -1`: the first line is taken, then the reader is gone (every write after it raises
    BrokenPipeError, as a closed pipe does)."""

    encoding = "utf-8"

    def __init__(self):
        self.taken = ""

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if "\n" in self.taken:
            raise BrokenPipeError(32, "Broken pipe")
        self.taken += s
        return len(s)

    def flush(self) -> None:
        if "\n" in self.taken:
            raise BrokenPipeError(32, "Broken pipe")


def test_check_from_a_run_piped_into_head_ends_quietly(monkeypatch, capsys):
    """It said "cannot judge (BrokenPipeError...)" on stderr and exited 2: the judging's fail-closed net took the
    closed pipe for a failure to judge. Now it ends as report and compare do (cli._closed_pipe: SIGPIPE, nothing
    said; the shell's `| head -1` pipeline exits 0)."""
    closed = []
    monkeypatch.setattr(cli, "_closed_pipe", lambda: closed.append(True) or 141)
    capsys.readouterr()
    head = HeadOne()
    head.taken = "the first line, already read\n"  # the reader took one line and left
    monkeypatch.setattr("sys.stdout", head)
    code = cli.main(["check", "--from", str(CHECK_RUN), "--verbose"])
    assert (code, closed, capsys.readouterr().err) == (141, [True], "")


def main(argv: list[str]) -> int:
    """cli.main's exit status, as the process would exit (argparse's errors end in SystemExit)."""
    try:
        return cli.main(argv)
    except SystemExit as e:
        return int(e.code or 0)


def last_line(text: str) -> str:
    return text.rstrip("\n").splitlines()[-1]


@pytest.mark.parametrize("argv, words", [
    (["check", "--bogus"], "unrecognized arguments: --bogus (see `ipcbench check --help`)"),
    (["check", "--from", "/nonexistent/run"], "--from /nonexistent/run: /nonexistent/run: no such file or directory"),
    (["check", "--from", str(SELFTEST_RUN)], f"--from {SELFTEST_RUN}: a run of `ipcbench selftest`"),
    (["check", "--topology", "nvswitch"], "--topology plans a node that is not this machine"),
])
def test_every_exit_2_of_check_ends_in_a_reason_line(argv, words, capsys):
    """The README promises a last REASON: line, which a drain script (jobs/healthcheck.sh) takes as the node's
    reason; bad input and a run that is no check input ended without one."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.splitlines()[0].startswith(f"ipcbench: error: {words}"), err
    assert last_line(out).startswith(f"REASON: cannot judge: {words}"[:160]), out
    assert len(last_line(out)) <= len("REASON: ") + 160


def test_a_json_check_that_cannot_judge_says_it_in_one_object(capsys):
    assert cli.main(["check", "--json", "--from", "/nonexistent/run"]) == 2
    said = json.loads(capsys.readouterr().out)
    assert said == {"verdict": "cannot judge", "exit_code": 2,
                    "reason": "cannot judge: --from /nonexistent/run: /nonexistent/run: no such file or directory"}


def test_a_verdict_that_cannot_judge_keeps_its_reason_line_last(tmp_path, monkeypatch):
    """The verdict's own stderr line comes before the summary, so that in a terminal (stdout and stderr
    together) the REASON: line is the last one."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(CHECK_RUN, run)
    meta = json.loads((run / "meta.json").read_text())
    for gpus in meta["gpus"].values():
        for g in gpus:
            g["name"] = "NVIDIA X1"  # a GPU no expectation is shipped for
    (run / "meta.json").write_text(json.dumps(meta))
    terminal = io.StringIO()  # stdout and stderr on one terminal, in the order written
    monkeypatch.setattr("sys.stdout", terminal)
    monkeypatch.setattr("sys.stderr", terminal)
    assert cli.main(["check", "--from", str(run), "--no-peers"]) == 2
    said = terminal.getvalue()
    assert said.startswith("ipcbench check: cannot judge: ") and last_line(said).startswith("REASON: cannot judge: ")


@pytest.mark.parametrize("argv", [
    ["report", "/nonexistent/run"], ["compare", "/nonexistent/a", "/nonexistent/b"], ["check", "--bogus"],
    ["selftest", "--bogus"], ["all", "--bogus"], ["all", "--sizes", "3"], ["check", "--from", "/nonexistent/run"],
    ["info", "--bogus"],
])
def test_one_error_prefix_for_every_command(argv, capsys):
    """`ipcbench: error:` and `ipcbench check: error:` (and `ipcbench report: error:`, `ipcbench compare: error:`)
    were four prefixes of one thing."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ipcbench: error: ") and len(err.splitlines()) == 1, err
