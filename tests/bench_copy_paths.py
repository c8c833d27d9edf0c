"""Does the way a copy is enqueued change its number? Same bytes, same buffers, six ways, by size.

A device benchmark (not a test; docs/measurement.md says what it found): one process, GPU 0 to GPU 0 (or to
GPU 1 with --peer where there is one), N copies of each SIZE behind a gate kernel (the host is out of the
timed region, as behind nvbandwidth's spin kernel), events around the work, median of REPS repetitions:
  stream   N cudaMemcpyAsync calls on the stream: what an application enqueues (nvbandwidth's way)
  graph    one CUDA graph of the N copies captured, launched once (ipcbench's copy batching until 2026-11)
  graph1   a graph of one copy, launched N times
  split    one graph of the N copies, each cut into memcpy nodes of at most 256 MiB
  kernel   the SM copy kernel (kernels/copy.cu), one launch of N passes where the copy is >= 4 x L2, else
           N launches (what ipcbench enqueues for sm_* methods)
  kgraph   those launches captured in one graph
GB/s = bytes per copy x N / time, 1e9 B/s. Every copy is checked once per way (the destination is
poisoned first). Usage: python tests/bench_copy_paths.py [--peer] [--csv FILE] [SIZE ...]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys

from cupy.cuda import runtime

from ipcbench.core.gpu import Gpu
from ipcbench.sizes import fmt_size, parse_size

DEFAULT_SIZES = "4K 64K 1M 16M 64M 128M 256M 384M 508M 512M 516M 768M 1020M 1G 2G".split()
WAYS = ("stream", "graph", "graph1", "split", "kernel", "kgraph")
SPLIT = 256 << 20
TARGET_MS = 20.0
REPS = 7


# At most this many copies behind one gate: 512 same-GPU cudaMemcpyAsync calls behind a gate kernel blocked
# the host inside the call until the gate gave up (H100, 4 KiB; a same-GPU copy is a driver kernel launch,
# or two, and they fill the channel's push buffer).
MAX_N = 128


def copies_for(nbytes: int, gbps: float) -> int:
    """N so that the batch lasts about TARGET_MS at `gbps`, 4..MAX_N."""
    per_ms = nbytes / (gbps * 1e9) * 1e3
    return max(4, min(MAX_N, int(TARGET_MS / max(per_ms, 1e-4))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", default=DEFAULT_SIZES)
    ap.add_argument("--peer", action="store_true", help="copy GPU 0 -> GPU 1 (peer access) instead of 0 -> 0")
    ap.add_argument("--csv", help="also write the table here")
    ap.add_argument("--reps", type=int, default=REPS)
    a = ap.parse_args()
    sizes = [parse_size(s) for s in a.sizes]
    g = Gpu(0)
    big = max(sizes)
    src = g.malloc(big)
    if a.peer:
        if runtime.getDeviceCount() < 2:
            print("--peer needs two GPUs", file=sys.stderr)
            return 2
        runtime.deviceEnablePeerAccess(1)
        runtime.setDevice(1)
        dst = runtime.malloc(big)
        runtime.setDevice(0)
    else:
        dst = g.malloc(big)
    s = g.stream
    guess = 390.0 if a.peer else 1500.0

    def enqueue(way: str, nbytes: int, n: int) -> None:
        if way in ("stream", "graph"):
            for _ in range(n):
                runtime.memcpyAsync(dst, src, nbytes, runtime.memcpyDefault, s.ptr)
        elif way == "graph1":
            runtime.memcpyAsync(dst, src, nbytes, runtime.memcpyDefault, s.ptr)
        elif way == "split":
            for _ in range(n):
                for off in range(0, nbytes, SPLIT):
                    runtime.memcpyAsync(dst + off, src + off, min(SPLIT, nbytes - off), runtime.memcpyDefault, s.ptr)
        elif nbytes >= g.loop_in_kernel_bytes:
            g.launch_copy(src, dst, nbytes, n, s)
        else:
            for _ in range(n):
                g.launch_copy(src, dst, nbytes, 1, s)

    def capture(way: str, nbytes: int, n: int):
        s.begin_capture()
        try:
            enqueue("graph1" if way == "graph1" else ("kernel" if way == "kgraph" else way), nbytes, n)
        finally:
            graph = s.end_capture()
        graph.upload(s)
        s.synchronize()
        return graph

    def timed(way: str, nbytes: int, n: int, graph) -> float:
        start, stop = g.event(), g.event()
        ticket = g.gate(s)
        start.record(s)
        if way in ("stream", "kernel"):
            enqueue(way, nbytes, n)
        else:
            for _ in range(n if way == "graph1" else 1):
                graph.launch(s)
        stop.record(s)
        g.release(ticket)
        g.wait(s, what="a timed batch")
        if g.gate_timed_out(ticket):
            raise RuntimeError("gate timed out")
        return g.elapsed_ms(start, stop)

    rows = []
    print(f"GPU 0 -> GPU {1 if a.peer else 0} ({g.info.name}), GB/s (median of {a.reps}); N copies per timing")
    print(f"{'size':>6s} {'N':>4s} " + " ".join(f"{w:>8s}" for w in WAYS) + "  checked")
    for nbytes in sizes:
        n = copies_for(nbytes, guess)
        got, bad = {}, 0
        for way in WAYS:
            # One copy un-gated first: the driver loads a same-GPU copy's kernels lazily at its first use, and
            # a load behind a held gate waits for the gate (seen: every gated first use timed out).
            enqueue("graph1" if way in ("stream", "graph", "graph1") else "kernel" if way == "kgraph" else way,
                    nbytes, 1)
            s.synchronize()
            seed = (nbytes * 7 + len(way)) & 0xFFFFFFFF
            g.fill(src, nbytes, seed)
            g.fill(dst, nbytes, seed ^ 0x5A5A5A5A)
            g.wait(what="fill")
            graph = capture(way, nbytes, n) if way not in ("stream", "kernel") else None
            times = [timed(way, nbytes, n, graph) for _ in range(a.reps + 1)][1:]  # the first is a warm-up
            bad += g.verify(dst, nbytes, seed)
            got[way] = nbytes * n / (statistics.median(times) * 1e-3) / 1e9
            del graph
        rows.append({"bytes": nbytes, "n": n, **{w: round(v, 1) for w, v in got.items()}, "mismatches": bad})
        print(f"{fmt_size(nbytes):>6s} {n:4d} " + " ".join(f"{got[w]:8.1f}" for w in WAYS)
              + ("  ok" if not bad else f"  {bad} BAD WORDS"), flush=True)
    if a.csv:
        with open(a.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    g.close()
    return 1 if any(r["mismatches"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
