"""Time `ipcbench report` on a synthetic fleet: 64 nodes x 8 GPUs, every suite, >= 250,000 rows.

    python tests/bench_report.py [--one-file] [--keep DIR]

--one-file writes the fleet as one multi-node run (one results.csv) instead of one run directory per node.
Prints the row count and the wall time of each step (the report with figures: the headline of 64 runs, the
figures of the first 2, heatmaps of 2 hosts, the fleet plot). Exit status 1 when the report with figures
takes 15 s or more on a 2-core machine, or the fleet has fewer than 250,000 rows.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import synth  # noqa: E402

K, M = 1 << 10, 1 << 20
MIN_ROWS = 250_000
BOUND_S = 15.0
FLEET_SIZES = [4 * K, 1 * M, 256 * M]
HOSTS = [f"node{i:02d}" for i in range(64)]


def make_fleet(root: Path, one_file: bool = False) -> Path:
    results = root / "results"
    if one_file:
        synth.make_run(results, run_id="fleet-job-4242", hosts=HOSTS, n_gpus=8, sizes=FLEET_SIZES,
                       host_scale={"node13": 0.8})
    else:
        for i, h in enumerate(HOSTS):
            synth.make_run(results, run_id=f"20261122-190000-{h}", hosts=(h,), n_gpus=8, sizes=FLEET_SIZES,
                           seed=i, host_scale={"node13": 0.8})
    return results


def count_rows(results: Path) -> int:
    return sum(sum(1 for _ in open(p)) - 1 for p in results.rglob("results.csv"))


def time_report(results: Path, *extra: str) -> tuple[float, int]:
    from ipcbench.report import command as report

    parser = argparse.ArgumentParser()
    report.add_arguments(parser)
    args = parser.parse_args([str(results), "--quiet", *extra])
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        rc = report.run(args)
    return time.perf_counter() - t0, rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one-file", action="store_true")
    ap.add_argument("--keep", metavar="DIR", help="write the fleet here and keep it")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(a.keep) if a.keep else Path(tmp)
        t0 = time.perf_counter()
        results = make_fleet(root, a.one_file)
        n = count_rows(results)
        print(f"fleet: {n} rows in {len(list(results.rglob('results.csv')))} file(s), "
              f"made in {time.perf_counter() - t0:.1f} s")
        dt, rc = time_report(results)
        print(f"ipcbench report (figures):    {dt:.2f} s (exit {rc})")
        dt2, rc2 = time_report(results, "--no-figures")
        print(f"ipcbench report --no-figures: {dt2:.2f} s (exit {rc2})")
        ok = rc == 0 and rc2 == 0 and dt < BOUND_S and n >= MIN_ROWS
        print(f"{'ok' if ok else 'FAIL'}: {n} rows (>= {MIN_ROWS}), {dt:.2f} s (< {BOUND_S:g} s)")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
