"""Command line: `ipcbench SUITE… | all | info | report | compare`.

Nothing CUDA or MPI is imported at module import, so `--help`, `report` and `compare` are instant and
work on machines without a GPU. Input errors are one line on stderr and exit code 2, before any GPU work.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import time
from pathlib import Path

from ipcbench import __version__
from ipcbench.catalogue.suites import ORDER as SUITE_NAMES

# config.py (and through it core/ and suites/) is imported by the parser of a measuring command only: `report` and
# `compare` load no module of the measuring side (tests/test_layering.py runs them and looks).


def _err(msg: str, code: int = 2, reason: bool = False, as_json: bool = False) -> int:
    """One error line on stderr (errors.error_line, every command alike), from rank 0 only under mpirun; `reason`:
    a gate's (check's) exit 2, which also says its last REASON: line on stdout (a JSON object with `as_json`)."""
    from ipcbench.core.world import launcher_rank

    if (launcher_rank() or 0) == 0:  # under mpirun only rank 0 speaks
        _say_refusal(msg, reason, as_json)
    return code


def _say_refusal(msg: str, reason: bool, as_json: bool = False) -> None:
    from ipcbench.errors import error_line

    print(error_line(msg), file=sys.stderr, flush=True)
    if reason:
        from ipcbench.check.outputs import refusal

        print(refusal(msg, as_json), flush=True)


class _Parser(argparse.ArgumentParser):
    reason = False  # check's parser: its exit 2 ends in a REASON: line too

    def error(self, message):  # one line, exit 2, only rank 0 under mpirun; the help of the command given
        raise SystemExit(_err(f"{message} (see `{self.prog} --help`)", reason=self.reason))


def _bench_parser() -> argparse.ArgumentParser:
    from ipcbench.config import DEFAULT_SIZES, PAIRS_MODES, QUICK_RULE, QUICK_SIZES, SERIAL_PAIRS, TOPOLOGIES

    p = _Parser(
        prog="ipcbench",
        description="Measure how fast the GPUs of one node exchange data across processes through CUDA IPC. "
                    "Run under MPI, one rank per GPU: `mpirun -np 4 ipcbench all`.",
        epilog="Other commands: `ipcbench info` (GPUs, topology, IPC checks; no MPI), "
               "`ipcbench report PATH…`, `ipcbench compare BASE [BASE…] NEW`, `mpirun -np 2 ipcbench selftest` "
               "(can this instrument be trusted here? its rows against an independent anchor), `mpirun -np N "
               "ipcbench check` or `ipcbench check --from RUN` (is this node healthy? a gate: exit 0/1/2).",
    )
    p.add_argument("suites", nargs="+", metavar="SUITE",
                   help=f"all, or one or more of: {', '.join(SUITE_NAMES)}")
    p.add_argument("--sizes", help=f"message sizes: LO:HI[:xF] or a comma list, B/K/M/G suffixes "
                                   f"(default: {DEFAULT_SIZES} in x2 steps, the twin steps (pool, vmm, cuda.core) "
                                   f"at every other size; --sizes {DEFAULT_SIZES} given measures every step at "
                                   f"every size; {QUICK_SIZES} with --quick)")
    p.add_argument("--quick", action="store_true",
                   help=f"a fleet check: every GPU pair and method at {QUICK_SIZES.replace(',', ' and ')} "
                        f"only, latency at 3 sizes, one-pair-at-a-time steps on a ring (--serial-pairs), a "
                        f"looser stopping rule ({QUICK_RULE.min_samples}-{QUICK_RULE.max_samples} samples of >= "
                        f"{QUICK_RULE.min_time_s * 1e3:g} ms, {QUICK_RULE.noise * 100:g}%% noise); every row still "
                        f"verified")
    _sampling_arguments(p)
    p.add_argument("--pairs", choices=PAIRS_MODES, default="auto",
                   help="measure pairs one at a time (sequential), disjoint pairs at once (concurrent), or also every "
                        "one-way row in permutation rounds, each GPU sending once and receiving once (permutation); "
                        "auto: concurrent only where pairs cannot share a link, permutation rounds where measured to "
                        "hold (default auto)")
    p.add_argument("--serial-pairs", choices=SERIAL_PAIRS, default="auto",
                   help="which pairs the steps that run one pair at a time (host-staged paths, handle costs, "
                        "ping-pongs, pipeline) measure: all ordered pairs, or a ring (each GPU once as sender "
                        "and once as receiver: N pairs, not N(N-1)); auto: a ring where each GPU has one rank "
                        "and either 4 or more GPUs are all linked through NVSwitch or --quick is given, all "
                        "elsewhere (default auto). GPU-to-GPU transfer steps always measure every pair")
    p.add_argument("--no-verify", action="store_true", help="skip the destination check (rows say so)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="give up on any wait for another rank after S seconds (default 300)")
    p.add_argument("--out", metavar="DIR", help="run directory (default results/<run-id>)")
    p.add_argument("--dry-run", action="store_true", help="print the plan (nodes, pairs, sizes, duration); no GPU work")
    p.add_argument("--json", action="store_true", help="with --dry-run: the plan as one JSON object on stdout")
    p.add_argument("--topology", choices=TOPOLOGIES,
                   help="with --dry-run: plan for a node whose GPU pairs are all linked this way (one rank per GPU), "
                        "not for this machine (a login node without GPUs, or another node type)")
    p.add_argument("--ranks", type=int, metavar="N",
                   help="with --dry-run, started without mpirun: plan N ranks on the node (a login node: "
                        "`ipcbench all --dry-run --topology nvswitch --ranks 8`); under mpirun, the ranks started")
    p.add_argument("--quiet", action="store_true", help="no progress lines or matrices")
    p.add_argument("--sm-copy", default=None, metavar="BxTxU",
                   help="SM copy kernel shape: blocks per SM x threads per block x 16-byte loads in flight "
                        "per thread (default 8x512x4; for tuning)")
    p.add_argument("--sm-bulk", default=None, metavar="BxSxC[@N]",
                   help="bulk-copy kernel shape (sm_bulk_read/sm_bulk_write, Hopper): CTAs per SM x pipeline "
                        "stages x chunk KiB per stage, @N: on N SMs only (default 2x4x16 on every SM; for "
                        "tuning, and to see how few SMs fill a link)")
    p.add_argument("--version", action="version", version=f"ipcbench {__version__}")
    return p


def _sampling_arguments(p: argparse.ArgumentParser) -> None:
    """The stopping rule's options (core/sampler.py; their defaults config.DEFAULT_RULE and QUICK_RULE)."""
    from ipcbench.config import DEFAULT_RULE, QUICK_RULE

    p.add_argument("--samples", type=int,
                   help=f"exactly N timed samples per measurement (default: the stopping rule, "
                        f"{DEFAULT_RULE.min_samples}-{DEFAULT_RULE.max_samples} samples until the median is known "
                        f"to --noise)")
    p.add_argument("--min-time", type=float, metavar="MS", help=f"minimum duration of one sample in ms (default "
                                                                f"{_min_time_words(DEFAULT_RULE)}; with --quick "
                                                                f"{_min_time_words(QUICK_RULE)}; a value given is "
                                                                f"every row's)")
    p.add_argument("--noise", type=float, metavar="PCT",
                   help="stop sampling when the median is known to within PCT percent (the half-width of its "
                        "distribution-free 90%% interval over the median) "
                        f"(default {DEFAULT_RULE.noise * 100:g}, {QUICK_RULE.noise * 100:g} with --quick)")
    p.add_argument("--placements", type=int, metavar="N",
                   help="places of its buffers a row's samples rotate over, so that its median and noise hold where "
                        f"a buffer lies (default {DEFAULT_RULE.placements}: one place; docs/measurement.md)")
    p.add_argument("--contexts", type=int, metavar="K",
                   help="CUDA contexts (green contexts) each sample of a row under 64 MiB spreads its transfers "
                        "over, so that the row states the noise measured between them instead of its kind's floor "
                        f"(default {DEFAULT_RULE.contexts}; 1: the primary context alone; docs/measurement.md)")
    p.add_argument("--max-time", type=float, metavar="S",
                   help=f"stop sampling one measurement after S seconds of samples "
                        f"(default {DEFAULT_RULE.max_time_s:g}, {QUICK_RULE.max_time_s:g} with --quick)")


def _min_time_words(rule) -> str:
    """"2, 1 under 64 MiB": a rule's sample length, and its rows' under SHORT_BELOW (SamplingRule.short_factor)."""
    from ipcbench.core.sampler import SHORT_BELOW

    short = f", {rule.min_time_s * rule.short_factor * 1e3:g} under {SHORT_BELOW >> 20} MiB" \
        if rule.short_factor != 1 else ""
    return f"{rule.min_time_s * 1e3:g}{short}"


def _bench(argv: list[str]) -> int:
    from ipcbench.config import build_config
    from ipcbench.errors import UsageError

    ns = _bench_parser().parse_args(argv)
    ns.argv = argv
    try:
        cfg = build_config(ns)  # every rank parses the same argv: every rank stops here alike
    except UsageError as e:
        return _err(str(e))
    from ipcbench.run.runner import run

    return _guarded(lambda: run(cfg))


# What a file that cannot be written fails with: a full disk or quota, a read-only or unwritable place, a path
# through a file or onto a directory
_FILE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR,
                errno.ENOENT, errno.EFBIG}


def _write_error(e: OSError) -> str:
    """One line for a file that could not be used (written, mostly: a full disk, a read-only or unwritable
    place), naming it; stdout's own errors carry no file name."""
    return f"{e.filename or 'standard output'}: {e.strerror or e}"


def _closed_pipe() -> int:
    """The reader of stdout went away (`ipcbench report … | head`): end as a Unix tool does, killed by SIGPIPE,
    saying nothing (the shell sees 141). stdout is pointed at /dev/null first, so that nothing is flushed into
    the closed pipe on the way out."""
    import signal

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)
    return 141  # not reached where SIGPIPE ends the process


def _writing(command) -> int:
    """A command that prints and writes files, without MPI: a closed pipe ends it quietly, a file or stdout that
    cannot be written (OSError: a full disk, an unwritable directory) is one line and exit 2."""
    try:
        code = command()
        sys.stdout.flush()  # a full disk shows here, not in the interpreter's exit (a traceback there)
        return code
    except BrokenPipeError:
        return _closed_pipe()
    except OSError as e:
        return _err(_write_error(e))


# The launchers whose ranks know their job only through their own family of MPI: (the variable the launcher sets,
# its name, whether its ranks' library is Open MPI: Hydra's are MPICH, Intel MPI or MVAPICH, all of MPICH's family)
OPEN_MPI = "Open MPI"  # how Open MPI's library version string starts
LAUNCHERS = (("OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun", True),
             ("HYDI_CONTROL_FD", "MPICH's mpiexec (Hydra)", False))
SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE")  # how many ranks the launcher started


def launcher_mismatch(library: str, env, world_size: int | None = None) -> str | None:
    """Why this rank cannot join the job its launcher started (None: it can): a launcher of another MPI than the
    one mpi4py runs on (Open MPI's mpirun with a pip-installed MPICH: MPICH aborts in PMIx; MPICH's mpiexec with
    Open MPI: every rank a job of its own), or, once MPI is up, a world of one rank where the launcher started
    several. `library`: MPI.Get_library_version(); `env`: the environment."""
    lib = " ".join(library.strip().splitlines()[0].split()) if library.strip() else "an unknown MPI"
    for var, launcher, open_mpi in LAUNCHERS:
        if var in env and lib.startswith(OPEN_MPI) != open_mpi:
            return (f"started by {launcher}, but mpi4py runs on {lib}: each rank would be a job of its own; start it "
                    f"with the launcher of mpi4py's MPI (the mpiexec beside this Python, {Path(sys.executable).parent})"
                    f", or use an mpi4py built for the launcher's MPI")
    started = max((int(env[v]) for v in SIZE_VARS if env.get(v, "").isdigit()), default=1)
    if world_size == 1 and started > 1:
        return (f"the launcher started {started} ranks, but MPI sees each as a job of one ({lib}): start it with the "
                f"launcher of mpi4py's MPI (the mpiexec beside this Python, {Path(sys.executable).parent})")
    return None


def _start_mpi() -> str | None:
    """Initialise MPI as importing mpi4py would (its thread level; finalised at exit), after one look at which MPI
    it is and which launcher started this rank (launcher_mismatch): a mismatch is one line and exit 2, never a PMIx
    abort nor N runs of one rank each. MPI already up (a second command in one process): nothing to do."""
    import mpi4py

    if "mpi4py.MPI" not in sys.modules:
        mpi4py.rc.initialize = False  # MPI_Get_library_version may be called before MPI_Init (MPI-4, 8.1.1)
        mpi4py.rc.finalize = True
    from mpi4py import MPI

    if MPI.Is_initialized():
        return None
    problem = launcher_mismatch(MPI.Get_library_version(), os.environ)
    if problem:
        return problem
    levels = {"single": MPI.THREAD_SINGLE, "funneled": MPI.THREAD_FUNNELED, "serialized": MPI.THREAD_SERIALIZED}
    MPI.Init_thread(levels.get(str(mpi4py.rc.thread_level), MPI.THREAD_MULTIPLE))
    return launcher_mismatch(MPI.Get_library_version(), os.environ, MPI.COMM_WORLD.Get_size())


def _guarded(command, reason: bool = False, as_json: bool = False) -> int:
    """Run a command that may start MPI: a launcher of another MPI is one line (launcher_mismatch); a usage error
    is one line from rank 0 and exit 2 on every rank (`reason`: with check's REASON: line); any other error takes
    the whole job down with its message (MPI Abort)."""
    from ipcbench.errors import UsageError, WorldError, error_line

    problem = _start_mpi()
    if problem:
        return _err(problem, reason=reason, as_json=as_json)
    try:
        return command()
    except UsageError as e:
        from mpi4py import MPI

        # Every rank reaches the same conclusion (decisions are collective): rank 0 says it once.
        if MPI.COMM_WORLD.rank == 0:
            _say_refusal(str(e), reason, as_json)
        return 2
    except KeyboardInterrupt:
        raise
    except BrokenPipeError:
        return _closed_pipe()
    except Exception as e:  # any rank's failure takes the whole job down with its message
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        sys.stdout.flush()
        # results.csv or meta.json on a full, read-only or unwritable disk: a setup problem (exit 2), not the
        # node's nor the measurement's; any other error (a peer gone: ConnectionError, a CUDA error) exit 1
        # a file's error names its file; the same errno without one (a pidfd refused: EPERM, a socket) is the run's
        code = 2 if isinstance(e, OSError) and e.errno in _FILE_ERRNOS and e.filename else 1
        if code == 2:
            sys.stderr.write(error_line(_write_error(e)) + "\n")
        else:
            kind = "" if isinstance(e, WorldError) else f"{type(e).__name__}: "
            sys.stderr.write(error_line(f"rank {comm.rank}: {kind}{e}") + "\n")
        sys.stderr.flush()
        if os.environ.get("IPCBENCH_TRACEBACK"):
            import traceback

            traceback.print_exc()
        _release_event_files()  # before Abort: the driver's /dev/shm files of this rank's events (issue 43)
        if comm.size > 1:
            # Give the launcher's proxy a moment to forward the message before Abort tears the job down
            # (seen under load: mpiexec returned with an empty stderr).
            time.sleep(0.5)
            comm.Abort(code)
        return code
    finally:  # every other way out (a usage error, a KeyboardInterrupt, a run that never reached its release)
        _release_event_files()


def _release_event_files() -> None:
    """A run's event files in /dev/shm removed where it did not release them itself (run/shm_release.py): nothing
    to do unless a run was armed in this process."""
    armed = sys.modules.get("ipcbench.run.shm_release")  # imported by run/runner.py, which arms a run
    if armed is not None:
        armed.release_now()


# What a terminal that cannot show a character reads instead (a stdout or stderr whose encoding is not UTF-8:
# PYTHONIOENCODING=ascii, a C locale); anything else: its compatibility decomposition's ASCII, else "?". Files are
# written in UTF-8 whatever the terminal.
ASCII_FALLBACKS = {"µ": "u", "×": "x", "…": "...", "–": "-", "—": "--", "·": "-", "→": "->", "←": "<-", "±": "+/-",
                   "≥": ">=", "≤": "<=", "✓": "ok", "✗": "X", "√": "sqrt", "◆": "*", "▲": "^", "’": "'", "“": '"',
                   "”": '"'}
FALLBACK_ERRORS = "ipcbench-ascii"  # the codecs error handler that writes them


def _fallback(e: UnicodeError) -> tuple[str, int]:
    """The codecs error handler: each character the stream cannot encode as its ASCII fallback."""
    import unicodedata

    if not isinstance(e, UnicodeEncodeError):
        raise e
    out = []
    for ch in e.object[e.start:e.end]:
        plain = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode("ascii")
        out.append(ASCII_FALLBACKS.get(ch) or plain or "?")
    return "".join(out), e.end


def terminal_fallbacks(streams=None) -> None:
    """Point every terminal stream that cannot encode what ipcbench prints (µ, →, ✓, ×, ≤, –, …) at its ASCII
    fallbacks, so that report, compare, check and a dry run print under any locale instead of ending in a
    UnicodeEncodeError (or, under mpiexec, an MPI_Abort); UTF-8 streams are left as they are."""
    import codecs

    try:
        codecs.lookup_error(FALLBACK_ERRORS)
    except LookupError:
        codecs.register_error(FALLBACK_ERRORS, _fallback)
    for stream in streams or (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "utf-8"
        try:
            "".join(ASCII_FALLBACKS).encode(encoding)
        except (UnicodeEncodeError, LookupError):
            if hasattr(stream, "reconfigure"):
                stream.reconfigure(errors=FALLBACK_ERRORS)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    terminal_fallbacks()
    return _writing(lambda: _command(argv))


def _check(args: list[str]) -> int:
    """`ipcbench check`: a gate, so every exit 2 (bad input, a run it cannot read, a setup that cannot measure)
    ends, as its verdict does, in a REASON: line (check/outputs.refusal)."""
    from ipcbench.check import command as check
    from ipcbench.errors import UsageError

    p = _Parser(prog="ipcbench check", description=(check.__doc__ or "").strip().splitlines()[0])
    p.reason = True
    check.add_arguments(p)
    ns = p.parse_args(args)
    try:
        opts = check.Options(ns, args)
        if ns.from_run:  # a recorded run: no MPI, no GPU
            return check.run(opts)
    except UsageError as e:
        return _err(str(e), reason=True, as_json=ns.json)
    return _guarded(lambda: check.run(opts), reason=True, as_json=ns.json and not ns.dry_run)


def _command(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        _bench_parser().print_help()
        print("\ncommands: all | " + " | ".join(SUITE_NAMES) + " | info | report | compare | selftest | check")
        return 0 if argv else 2
    if argv[0] == "--version":
        from ipcbench.run.meta import source_digest

        print(f"ipcbench {__version__} (source {source_digest()}: meta.json's source_digest of runs made by this code)")
        return 0
    cmd = argv[0]
    if cmd == "info":
        p = _Parser(prog="ipcbench info", description="IPC readiness (namespaces, /dev/shm, ptrace, MIG, fabric "
                                                      "handles, P2P), GPUs, NVML topology, P2P matrix, IPC feature "
                                                      "checks, versions. One process, no MPI needed; exit 2 without "
                                                      "a GPU, after the host's items.")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        args = p.parse_args(argv[1:])
        from ipcbench.info import run as info_run

        return info_run(args)
    if cmd == "check":
        return _check(argv[1:])
    if cmd == "selftest":
        from ipcbench.errors import UsageError
        from ipcbench.selftest import command as selftest

        p = _Parser(prog="ipcbench selftest", description=(selftest.__doc__ or "").strip().splitlines()[0])
        selftest.add_arguments(p)
        ns = p.parse_args(argv[1:])
        try:
            cfg, names, tolerance = selftest.build(ns, argv[1:])
        except UsageError as e:
            return _err(str(e))
        return _guarded(lambda: selftest.run(cfg, names, tolerance, ns.cross))
    if cmd in ("report", "compare"):
        import importlib

        mod = importlib.import_module({"report": "ipcbench.report.command",
                                       "compare": "ipcbench.report.compare_command"}[cmd])
        p = _Parser(prog=f"ipcbench {cmd}", description=(mod.__doc__ or "").strip().splitlines()[0])
        mod.add_arguments(p)
        return mod.run(p.parse_args(argv[1:]))
    return _bench(argv)


if __name__ == "__main__":
    raise SystemExit(main())
