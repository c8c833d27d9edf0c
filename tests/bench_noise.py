"""Is a row's stated noise honest? Read several runs of the same code on the same node and hold every row's
spread between runs against the noise it states.

A device-side analysis (not a test; it reads recorded runs, so it also runs anywhere). For every row present
in all runs (matched on suite, method, direction, GPUs, bytes), it takes the runs' medians, their common median,
and each run's stated `noise`: a row is *honest* when every run's median lies within that run's own stated noise
of the common median (issue "Same code, same verdict": at least 90% of rows, with rows of 64 MiB and more keeping
a median stated noise of at most 0.5%). Prints the share of honest rows overall, by engine x size band, the
rows that are not, and the SM clock each run's rows ran at (where the runs recorded it).

Usage: python tests/bench_noise.py RUN_DIR RUN_DIR ... [--worst 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys


def band(nbytes: int) -> str:
    if nbytes <= 256 << 10:
        return "<=256K"
    if nbytes < 64 << 20:
        return "512K-32M"
    return ">=64M"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--worst", type=int, default=25)
    args = ap.parse_args()
    from ipcbench.record.run import load_run, locate

    runs = [load_run(locate(p)) for p in args.runs]
    if len(runs) < 2:
        print("give two or more runs", file=sys.stderr)
        return 2
    key = ["suite", "method", "direction", "src_gpu", "dst_gpu", "bytes"]
    tables = []
    for r in runs:
        f = r.frame
        f = f[(f["kind"] != "error")]
        tables.append({tuple(row[k] for k in key): row for _, row in f.iterrows()})
    common = set(tables[0]).intersection(*tables[1:])
    out = []
    for k in sorted(common):
        rows = [t[k] for t in tables]
        unit = "bw_gbps_median" if rows[0]["kind"] == "bandwidth" else "time_us_median"
        vals = [float(r[unit]) for r in rows]
        if any(v != v or v <= 0 for v in vals):
            continue
        med = statistics.median(vals)
        noises = [float(r["noise"]) if r["noise"] == r["noise"] and r["noise"] is not None else float("nan")
                  for r in rows]
        dev = [abs(v / med - 1) for v in vals]
        honest = all(d <= n for d, n in zip(dev, noises) if n == n) and all(n == n for n in noises)
        engine = str(rows[0].get("engine", "")) or str(rows[0]["method"])
        out.append({"key": k, "engine": engine, "band": band(int(k[5])), "spread": (max(vals) - min(vals)) / med,
                    "noise": statistics.median(n for n in noises if n == n) if any(n == n for n in noises) else
                    float("nan"), "worst_dev": max(dev), "honest": honest, "timing": str(rows[0].get("timing", ""))})
    n = len(out)
    ok = sum(o["honest"] for o in out)
    print(f"{len(runs)} runs, {n} rows in all of them: {ok} ({ok / max(n, 1):.1%}) honest "
          "(every run's median within its own stated noise of the common median)")
    big = [o for o in out if o["band"] == ">=64M"]
    if big:
        print(f"rows >= 64M: {sum(o['honest'] for o in big)}/{len(big)} honest, median stated noise "
              f"{statistics.median(o['noise'] for o in big if o['noise'] == o['noise']):.3%}")
    print("engine band | rows | honest | median spread between runs | median stated noise")
    groups: dict = {}
    for o in out:
        groups.setdefault((o["engine"], o["band"]), []).append(o)
    for (engine, b), g in sorted(groups.items()):
        noises = [o["noise"] for o in g if o["noise"] == o["noise"]]
        print(f"{engine} {b} | {len(g)} | {sum(o['honest'] for o in g) / len(g):.0%} | "
              f"{statistics.median(o['spread'] for o in g):.2%} | "
              f"{statistics.median(noises) if noises else float('nan'):.2%}")
    bad = sorted((o for o in out if not o["honest"]), key=lambda o: -(o["worst_dev"] - o["noise"]))
    if bad:
        print(f"not honest ({len(bad)}), worst first: row | spread | worst deviation | stated noise | timing")
        for o in bad[:args.worst]:
            print(f"  {' '.join(map(str, o['key']))} | {o['spread']:.2%} | {o['worst_dev']:.2%} | {o['noise']:.2%} | "
                  f"{o['timing']}")
    clocks = [r.frame["sm_clock_mhz"] for r in runs if "sm_clock_mhz" in r.frame.columns]
    for r, c in zip(runs, clocks):
        c = c.dropna()
        if len(c):
            print(f"{r.label}: SM clock {c.min():.0f}-{c.max():.0f} MHz (median {c.median():.0f}) over {len(c)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
