"""Command line: `ipcbench SUITE… | all | info | report | compare`.

Nothing CUDA or MPI is imported at module import, so `--help`, `report` and `compare` are instant and
work on machines without a GPU. Input errors are one line on stderr and exit code 2, before any GPU work.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import __version__
from .sizes import SizeError, parse_sizes

SUITE_NAMES = ("copy", "kernel", "pool", "staged", "latency", "handles", "pipeline")
DEFAULT_SIZES = "4K:256M"
QUICK_SIZES = "4K:256M:x4"


def _err(msg: str, code: int = 2) -> int:
    from .world import launcher_rank

    if (launcher_rank() or 0) == 0:  # under mpirun only rank 0 speaks
        print(f"ipcbench: error: {msg}", file=sys.stderr, flush=True)
    return code


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, only rank 0 under mpirun
        raise SystemExit(_err(f"{message} (see `ipcbench --help`)"))


def _bench_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="ipcbench",
        description="Measure how fast the GPUs of one node exchange data across processes through CUDA IPC. "
                    "Run under MPI, one rank per GPU: `mpirun -np 4 ipcbench all`.",
        epilog="Other commands: `ipcbench info` (GPUs, topology, IPC checks; no MPI), "
               "`ipcbench report PATH…`, `ipcbench compare BASE NEW`.",
    )
    p.add_argument("suites", nargs="+", metavar="SUITE",
                   help=f"all, or one or more of: {', '.join(SUITE_NAMES)}")
    p.add_argument("--sizes", help=f"message sizes: LO:HI[:xF] or a comma list, B/K/M/G suffixes "
                                   f"(default {DEFAULT_SIZES}, x2 steps; {QUICK_SIZES} with --quick)")
    p.add_argument("--quick", action="store_true", help="coarser sizes (x4), 3 samples, 2 ms per sample")
    p.add_argument("--samples", type=int, help="timed samples per measurement (default 5, 3 with --quick)")
    p.add_argument("--min-time", type=float, metavar="MS",
                   help="minimum duration of one sample in ms (default 10, 2 with --quick)")
    p.add_argument("--no-verify", action="store_true", help="skip the destination check (rows say so)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="give up on any wait for another rank after S seconds (default 300)")
    p.add_argument("--out", metavar="DIR", help="run directory (default results/<run-id>)")
    p.add_argument("--dry-run", action="store_true", help="print the plan (nodes, pairs, sizes, duration); no GPU work")
    p.add_argument("--quiet", action="store_true", help="no progress lines or matrices")
    p.add_argument("--sm-copy", default=None, metavar="BxTxU",
                   help="SM copy kernel shape: blocks per SM x threads per block x 16-byte loads in flight "
                        "per thread (default from gpu.py; for tuning)")
    p.add_argument("--version", action="version", version=f"ipcbench {__version__}")
    return p


def _validate(args) -> None:
    from .suites import resolve

    try:
        args.suites_resolved = resolve(args.suites)
    except KeyError as e:
        raise SystemExit(_err(str(e.args[0])))
    spec = args.sizes or (QUICK_SIZES if args.quick else DEFAULT_SIZES)
    try:
        args.sizes_list = parse_sizes(spec)
    except SizeError as e:
        raise SystemExit(_err(str(e)))
    if max(args.sizes_list) > (1 << 40):
        raise SystemExit(_err(f"size {max(args.sizes_list)} is larger than any GPU's memory"))
    if args.samples is None:
        args.samples = 3 if args.quick else 5
    if args.samples < 1:
        raise SystemExit(_err(f"--samples must be at least 1 (got {args.samples})"))
    min_time = args.min_time if args.min_time is not None else (2.0 if args.quick else 10.0)
    if not (0 < min_time <= 10_000):
        raise SystemExit(_err(f"--min-time must be in (0, 10000] ms (got {min_time:g})"))
    args.min_time_s = min_time / 1e3
    if args.timeout <= 0:
        raise SystemExit(_err("--timeout must be positive"))
    from .gpu import CopyShape

    try:
        args.copy_shape = CopyShape.parse(args.sm_copy) if args.sm_copy else CopyShape()
    except ValueError as e:
        raise SystemExit(_err(f"--sm-copy: {e}"))
    if args.out and not args.dry_run:
        _check_out(args.out)


def _check_out(out: str) -> None:
    """Refuse an --out that cannot be created or written, before MPI or CUDA start (rank 0 checks)."""
    from .world import launcher_rank

    if (launcher_rank() or 0) != 0:
        return
    path = os.path.abspath(out)
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if os.path.exists(path) and not os.path.isdir(path):
        raise SystemExit(_err(f"--out {out}: exists and is not a directory"))
    if not os.access(probe, os.W_OK | os.X_OK):
        raise SystemExit(_err(f"--out {out}: {probe} is not writable"))


def _bench(argv: list[str]) -> int:
    args = _bench_parser().parse_args(argv)
    _validate(args)
    from .runner import UsageError, run
    from .world import WorldError

    try:
        return run(args, argv)
    except UsageError as e:
        # Every rank reaches the same conclusion (collective checks): rank 0 says it once.
        from mpi4py import MPI

        if MPI.COMM_WORLD.rank == 0:
            print(f"ipcbench: error: {e}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        raise
    except Exception as e:  # any rank's failure takes the whole job down with its message
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        sys.stdout.flush()
        kind = "" if isinstance(e, (WorldError,)) else f"{type(e).__name__}: "
        sys.stderr.write(f"ipcbench: rank {comm.rank}: {kind}{e}\n")
        sys.stderr.flush()
        if os.environ.get("IPCBENCH_TRACEBACK"):
            import traceback

            traceback.print_exc()
        if comm.size > 1:
            comm.Abort(1)
        return 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        _bench_parser().print_help()
        print("\ncommands: all | " + " | ".join(SUITE_NAMES) + " | info | report | compare")
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"ipcbench {__version__}")
        return 0
    cmd = argv[0]
    if cmd == "info":
        p = _Parser(prog="ipcbench info", description="GPUs, NVML topology, P2P matrix, IPC feature checks, "
                                                      "versions. One process, no MPI needed.")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        args = p.parse_args(argv[1:])
        from .info import run as info_run

        return info_run(args)
    if cmd in ("report", "compare"):
        import importlib

        mod = importlib.import_module(f".{cmd}", __package__)
        p = _Parser(prog=f"ipcbench {cmd}", description=(mod.__doc__ or "").strip().splitlines()[0])
        mod.add_arguments(p)
        return mod.run(p.parse_args(argv[1:]))
    return _bench(argv)


if __name__ == "__main__":
    raise SystemExit(main())
