"""The errors a user sees. Each is one line naming the rank, the call or the option concerned, under one prefix
(`error_line`, `warning_line`: every command, every rank says `ipcbench: error: ...`)."""

from __future__ import annotations

PROG = "ipcbench"


def error_line(msg: str) -> str:
    """The one form of every error ipcbench prints, whatever the command: `ipcbench: error: MSG`."""
    return f"{PROG}: error: {msg}"


def warning_line(msg: str) -> str:
    """The one form of every warning: `ipcbench: warning: MSG`."""
    return f"{PROG}: warning: {msg}"


class UsageError(Exception):
    """Bad input or an unusable setup, decided before any measurement: one line, exit code 2."""


class WorldError(RuntimeError):
    """A problem of the job as a whole (rank layout, binding, a peer that stopped answering)."""


class MeasureError(RuntimeError):
    """A measurement that could not be taken (a gate or flag that timed out, a protocol out of step)."""


class GpuError(RuntimeError):
    """A CUDA-side failure with the context (call, rank) needed to act on it."""


class ShareError(RuntimeError):
    """A failed export/import of memory or events between processes, naming the rank and CUDA call."""


class StagedError(MeasureError):
    """A failure of a host-staged path (shm segment, registration, a flag wait that timed out)."""


class PipelineError(MeasureError):
    """The producer/consumer ring stopped: a flag wait timed out on one side."""


class ResultsError(Exception):
    """A results file (results.csv, meta.json) that cannot be used; the message names the file and line."""
