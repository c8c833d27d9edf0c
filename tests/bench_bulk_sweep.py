"""Which --sm-bulk shape moves peer data fastest? A device benchmark (not a test) for choosing BulkShape's default.

For each shape: `mpiexec -n 2 python -m ipcbench kernel --sizes SIZE --sm-bulk SHAPE` (one run each, two GPUs,
the default stopping rule), then one table: the median GB/s of every sm_bulk method and direction per shape
(the mean over the run's pairs), and beside it the plain sm_read / sm_write numbers of the same run, whose
spread over the runs shows how much of a difference between shapes is noise. Every row must be verified.

Usage: python tests/bench_bulk_sweep.py [--size 256M] [--out DIR] [--sms 8,16,32,66] [SHAPE ...]
       (default shapes: the default 2x4x16 and its neighbours; ~15 s each on 2 x H200)
       --sms N,...: each shape also on N SMs only (SHAPE@N): how few SMs reach the copy engine's rate
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile

from gpu_mpi import mpiexec_cmd

SHAPES = ["2x4x16", "1x2x32", "1x3x32", "1x4x32", "1x3x64", "2x2x16", "2x3x16", "2x3x32", "2x4x8", "4x2x8",
          "4x3x8", "4x2x16", "8x2x8"]
COLUMNS = [("sm_bulk_read", "pull"), ("sm_bulk_write", "push"), ("sm_bulk_read", "bidir"), ("sm_bulk_write", "bidir"),
           ("sm_read", "pull"), ("sm_write", "push")]


def run_one(shape: str, size: str, out: str) -> dict:
    cmd = mpiexec_cmd(2) + [sys.executable, "-m", "ipcbench", "kernel", "--sizes", size, "--sm-bulk", shape,
                            "--quiet", "--timeout", "120", "--out", out]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"{shape}: exit {p.returncode}\n{p.stderr[-2000:]}")
    rows = list(csv.DictReader(open(os.path.join(out, "results.csv"), newline="")))
    bad = [r for r in rows if r["verified"] != "true"]
    if bad:
        raise SystemExit(f"{shape}: {len(bad)} row(s) not verified, e.g. {bad[0]['method']} {bad[0]['direction']}")
    got: dict = {}
    for r in rows:
        got.setdefault((r["method"], r["direction"]), []).append(float(r["bw_gbps_median"]))
    return {k: sum(v) / len(v) for k, v in got.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", nargs="*", default=SHAPES)
    ap.add_argument("--size", default="256M")
    ap.add_argument("--out", default=None, help="keep the runs here (default: a temporary directory)")
    ap.add_argument("--sms", default="", help="comma list of SM counts: each shape also as SHAPE@N")
    a = ap.parse_args()
    if a.sms:
        a.shapes = [s for shape in a.shapes for s in [shape] + [f"{shape}@{n}" for n in a.sms.split(",")]]
    base = a.out or tempfile.mkdtemp(prefix="bulk-sweep-")
    print(f"{'shape':12s} " + " ".join(f"{m.replace('sm_', '')[:10] + '/' + d:>17s}" for m, d in COLUMNS), flush=True)
    for shape in a.shapes:
        bw = run_one(shape, a.size, os.path.join(base, shape))
        cells = [f"{bw[c]:17.1f}" if c in bw else f"{'-':>17s}" for c in COLUMNS]
        print(f"{shape:12s} " + " ".join(cells), flush=True)
    print(f"runs in {base}")


if __name__ == "__main__":
    main()
