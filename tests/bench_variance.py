"""Why does a small peer transfer's rate hold still within a process and move between processes?

A device benchmark (not a test). One process drives GPU 0 and reaches GPU 1 through peer access (or GPU 0
itself with one GPU), as the selftest's anchors do, and times small transfers (4 KiB, 64 KiB, 1 MiB) of each
engine (copy engine push, SM kernel write and read, bulk-copy write) in ROUNDS rounds spread over a few seconds,
each round at PLACES places of the buffers (core/placement.py's offsets), each (round, place) REPS times. Every
measurement records the SM clock its gate ran at (kernels/gate.cu) and NVML's SM clock. Rounds from
`--reload-from` on change one thing first (`--vary`): module (the copy modules loaded afresh, at another
address), alloc (both buffers allocated afresh: other physical pages) or stream (a new stream: maybe another copy
engine, another hardware queue). The process prints one
JSON object per measurement; `--summary FILE...` reads the output of several processes and splits each row's
variance into its levels (rep within place, place, round (time, module), process), with the clock beside it.

Usage:
  python tests/bench_variance.py [--rounds 8] [--places 5] [--reload-from 4] [--vary module|alloc|stream] > p1.jsonl
  python tests/bench_variance.py --summary proc*.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

SIZES = (4096, 65536, 1 << 20)
ENGINES = ("ce_push", "sm_write", "sm_read", "bulk_write")
REPS = 3
TARGET_MS = 2.0
MAX_N = 512


def _cpu_and_node() -> tuple[int, int | None]:
    with open("/proc/self/stat") as f:
        cpu = int(f.read().rsplit(")", 1)[1].split()[36])
    node = None
    for entry in os.listdir(f"/sys/devices/system/cpu/cpu{cpu}"):
        if entry.startswith("node") and entry[4:].isdigit():
            node = int(entry[4:])
    return cpu, node


def measure(args) -> None:
    import cupy
    from cupy.cuda import runtime

    from ipcbench.core import placement
    from ipcbench.core.gpu import Gpu

    gpu = Gpu(0)
    other = 1 if runtime.getDeviceCount() > 1 else 0
    nv = None
    try:
        import pynvml

        pynvml.nvmlInit()
        nv = (pynvml, pynvml.nvmlDeviceGetHandleByIndex(0))
    except Exception:
        pass
    span = placement.place_offset(args.places - 1) + max(SIZES)
    local = gpu.malloc(span)
    if other != 0:
        try:
            runtime.deviceEnablePeerAccess(other)
        except runtime.CUDARuntimeError:
            pass
        with cupy.cuda.Device(other):
            remote = runtime.malloc(span)
    else:
        remote = gpu.malloc(span)
    stream = gpu.stream
    bulk_ok = gpu.feature_support("bulk_copy")[0]
    cpu, node = _cpu_and_node()
    pid = os.getpid()

    def enqueue(engine, src, dst, nbytes, n):
        for _ in range(n):
            if engine == "ce_push":
                gpu.copy_async(dst, src, nbytes, stream)
            elif engine in ("sm_write", "sm_read"):
                gpu.launch_copy(src, dst, nbytes, 1, stream)
            else:
                gpu.launch_bulk_copy(src, dst, nbytes, 1, stream)

    def timed(engine, src, dst, nbytes, n):
        start, stop = gpu.event(), gpu.event()
        ticket = gpu.gate(stream)
        start.record(stream)
        enqueue(engine, src, dst, nbytes, n)
        stop.record(stream)
        gpu.release(ticket)
        gpu.wait(stream)
        return gpu.elapsed_ms(start, stop), gpu.gate_clock_mhz()

    counts = {}
    t_start = time.time()
    for rnd in range(args.rounds):
        if rnd >= args.reload_from and args.vary == "module":
            gpu._modules.clear()
            gpu._functions.clear()
            gpu._bulk_fn = None
        elif rnd >= args.reload_from and args.vary == "stream":
            stream = gpu.new_stream()
        elif rnd >= args.reload_from and args.vary == "alloc":
            keep = (local, remote)  # held until the new ones exist, so the allocator cannot hand them back
            local = gpu.malloc(span)
            if other != 0:
                with cupy.cuda.Device(other):
                    remote = runtime.malloc(span)
            else:
                remote = gpu.malloc(span)
            del keep
        for engine in ENGINES:
            if engine == "bulk_write" and not bulk_ok:
                continue
            for nbytes in SIZES:
                for p in range(args.places):
                    off = placement.place_offset(p)
                    src, dst = (remote + off, local + off) if engine == "sm_read" else (local + off, remote + off)
                    enqueue(engine, src, dst, nbytes, 1)
                    gpu.wait(stream)
                    if (engine, nbytes) not in counts:
                        ms, _ = timed(engine, src, dst, nbytes, 1)
                        counts[(engine, nbytes)] = max(1, min(MAX_N, math.ceil(TARGET_MS / max(ms, 1e-4))))
                    n = counts[(engine, nbytes)]
                    for rep in range(REPS):
                        ms, clock = timed(engine, src, dst, nbytes, n)
                        nvml_clock = None
                        if nv is not None:
                            try:
                                nvml_clock = nv[0].nvmlDeviceGetClockInfo(nv[1], nv[0].NVML_CLOCK_SM)
                            except Exception:
                                pass
                        print(json.dumps({"pid": pid, "cpu": cpu, "node": node, "round": rnd, "place": p, "rep": rep,
                                          "engine": engine, "bytes": nbytes, "us": ms * 1e3 / n,
                                          "gate_mhz": clock, "nvml_mhz": nvml_clock,
                                          "t": round(time.time() - t_start, 3), "reloaded": rnd >= args.reload_from,
                                          "vary": args.vary}))
        sys.stdout.flush()
        time.sleep(args.gap)


def _spread(values) -> float:
    m = statistics.median(values)
    return (max(values) - min(values)) / m if m else float("nan")


def summary(paths) -> None:
    rows = [json.loads(line) for p in paths for line in open(p) if line.startswith("{")]
    procs = sorted({r["pid"] for r in rows})
    print(f"{len(rows)} measurements, {len(procs)} processes; cpu/node per process: "
          + ", ".join(f"{pid}:{next(r['cpu'] for r in rows if r['pid'] == pid)}/"
                      f"{next(r['node'] for r in rows if r['pid'] == pid)}" for pid in procs))
    clocks = [r["gate_mhz"] for r in rows if r["gate_mhz"]]
    if clocks:
        print(f"gate SM clock: {min(clocks):.0f}-{max(clocks):.0f} MHz, median {statistics.median(clocks):.0f}")
    nv = [r["nvml_mhz"] for r in rows if r["nvml_mhz"]]
    if nv:
        print(f"NVML SM clock: {min(nv)}-{max(nv)} MHz")
    varied = sorted({r.get("vary", "module") for r in rows})
    print(f"engine size | rep (within a place) | place (within a round) | round (nothing changed) | round "
          f"({'/'.join(varied)} changed) | process: medians over places and rounds | spread of those | "
          "of place-0-only medians")
    for engine in ENGINES:
        for nbytes in SIZES:
            sel = [r for r in rows if r["engine"] == engine and r["bytes"] == nbytes]
            if not sel:
                continue

            def grp(keys, rs):
                out = {}
                for r in rs:
                    out.setdefault(tuple(r[k] for k in keys), []).append(r["us"])
                return out

            rep = statistics.median(_spread(v) for v in grp(("pid", "round", "place"), sel).values())
            place_meds = grp(("pid", "round"), [dict(r, us=statistics.median(v)) for (pid, rnd, pl), v in
                                                 grp(("pid", "round", "place"), sel).items()
                                                 for r in [{"pid": pid, "round": rnd, "place": pl}]])
            place = statistics.median(_spread(v) for v in place_meds.values())
            round_meds = {}
            for (pid, rnd), v in place_meds.items():
                round_meds.setdefault(pid, {})[rnd] = statistics.median(v)
            reloaded = {r["round"] for r in sel if r["reloaded"]}
            same = statistics.median(_spread([m for rnd, m in d.items() if rnd not in reloaded])
                                     for d in round_meds.values())
            rel = [_spread([m for rnd, m in d.items() if rnd in reloaded]) for d in round_meds.values()]
            proc = {pid: statistics.median(d.values()) for pid, d in round_meds.items()}
            p0 = {pid: statistics.median(r["us"] for r in sel if r["pid"] == pid and r["place"] == 0) for pid in procs}
            gb = {pid: nbytes / m / 1e3 for pid, m in proc.items()}
            print(f"{engine} {nbytes} | {rep:.2%} | {place:.2%} | {same:.2%} | "
                  f"{statistics.median(rel):.2%} | " if len(reloaded) > 1 and rel else
                  f"{engine} {nbytes} | {rep:.2%} | {place:.2%} | {same:.2%} | - | ", end="")
            print(" ".join(f"{v:.3g}" for v in gb.values()) + f" GB/s | {_spread(list(proc.values())):.2%} | "
                  f"{_spread(list(p0.values())):.2%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--places", type=int, default=5)
    ap.add_argument("--reload-from", type=int, default=4)
    ap.add_argument("--gap", type=float, default=0.3, help="seconds between rounds")
    ap.add_argument("--vary", choices=("module", "alloc", "stream"), default="module",
                    help="what rounds from --reload-from on change first")
    ap.add_argument("--summary", nargs="+", metavar="FILE")
    args = ap.parse_args()
    if args.summary:
        summary(args.summary)
    else:
        measure(args)


if __name__ == "__main__":
    main()
