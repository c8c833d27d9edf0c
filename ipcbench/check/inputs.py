"""Where `ipcbench check` writes, checked before any GPU work or judging: a gate fails closed (exit 2, one line)
on a typo in its arguments, never after it has judged (exit 1 would drain a healthy node), and never writes into
a run directory (the run it judges, a --baseline run, the run it measures).

An output path must name a regular file (or none yet) in an existing directory this process can create files
in (tried: a read-only file system or a directory of another user says no here, not after judging); a
directory, a FIFO or a device (/dev/full) is refused, as is one path for two outputs. Pure of GPU and MPI.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from ipcbench.errors import UsageError


def output_path(flag: str, text: str) -> Path:
    """The resolved path of an output flag's value; UsageError "FLAG PATH: why" where it cannot be written."""
    if not text.strip():
        raise UsageError(f"{flag}: an empty path")
    p = Path(text)
    where = f"{flag} {text}"
    try:
        st = p.stat()
    except FileNotFoundError:
        st = None
    except OSError as e:  # e.g. a component that is a file: ENOTDIR
        raise UsageError(f"{where}: cannot be written ({e.strerror or e})") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{where}: is a directory (name a file)")
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{where}: is not a regular file (a FIFO, a socket or a device): name a file")
        if not os.access(p, os.W_OK):
            raise UsageError(f"{where}: cannot be written (no permission)")
    parent = p.parent
    if not parent.is_dir():
        what = "does not exist" if not parent.exists() else "is not a directory"
        raise UsageError(f"{where}: its directory {parent} {what}")
    try:  # what writing there will need (the Prometheus writer renames a file of its own into place)
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".ipcbench-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UsageError(f"{where}: cannot write in {parent} ({e.strerror or e})") from None
    return p.resolve()


def check_outputs(outputs: dict[str, str | None], run_dirs: list[Path], inputs: dict[str, str | None]) -> None:
    """Every output flag given (flag -> path) writable, no two the same file, none inside a run directory nor
    over an input file; UsageError otherwise."""
    seen: dict[Path, str] = {}
    runs = [d.resolve() for d in run_dirs]
    read = {Path(v).resolve(): k for k, v in inputs.items() if v}
    for flag, text in outputs.items():
        if text is None:
            continue
        p = Path(text).resolve() if text.strip() else None
        for d in runs:  # first: the worst mistake, said as such even where the directory is yet to be made
            if p is not None and d in p.parents:
                raise UsageError(f"{flag} {text}: inside the run directory {d}: check never writes into a run "
                                 f"(its results.csv and meta.json are the record); name a file elsewhere")
        p = output_path(flag, text)
        if p in seen:
            raise UsageError(f"{flag} {text}: the same file as {seen[p]}")
        seen[p] = flag
        if p in read:
            raise UsageError(f"{flag} {text}: the file {read[p]} reads")
