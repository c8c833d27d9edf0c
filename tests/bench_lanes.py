"""Why does a copy issued on a green context's stream from the primary context cost ~2 µs more than on the primary's
own stream, and which way of issuing it does not? A device benchmark (not a test), one process, one GPU:

  python tests/bench_lanes.py OUT.json

Per variant, 4 KiB and 1 MiB device-to-device copies (copy engine) and 4 KiB SM copy kernels, `COUNT` back to back
behind a gate kernel, timed by events; per lane where there are several. Variants (what differs is named):
- work: the primary context's work stream, gate on it (today's one-context sampling);
- green-from-primary: a stream of cuGreenCtxStreamCreate, the primary context current, events of the primary, the
  gate on the work stream and the lane waiting for it (the first lanes design: docs/measurement.md);
- green-own-gate: the same stream, its own gate kernel on it (no wait across streams);
- green-current: the green context made current (cuCtxFromGreenCtx) while enqueuing, its stream made there by CuPy,
  its events made there, its own gate (tests/bench_contexts.py --green's way, which timed 1.75-2.16 µs a 4 KiB copy);
- green-current-chain: 8 such lanes one after another behind one gate on the work stream, each waiting for the
  previous lane's stop event.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

COUNT = 32
REPEATS = 5


def _ck(r):
    err, *rest = r if isinstance(r, tuple) else (r,)
    if int(err) != 0:
        raise RuntimeError(str(err))
    return rest[0] if len(rest) == 1 else (rest or None)


def chain(gpu, batch, streams: list, events: list, per: int, warm: bool = False, inside=None) -> list[float]:
    """The first design: lanes (`streams[i]`, timed by `events[i]`) one after another behind one gate on the work
    stream, each waiting for the previous lane's stop event, `per` transfers each (with one untimed transfer before a
    lane's start event where `warm`; `inside(i, enqueue)` enqueues lane i, a green context made current); µs per
    transfer of each lane."""
    import cupy

    t = gpu.gate(gpu.stream)
    prev = gpu.event(timing=False)
    prev.record(gpu.stream)
    for i, (s, (start, stop)) in enumerate(zip(streams, events)):
        def enqueue(s=s, start=start, stop=stop, prev=prev):
            s.wait_event(prev)
            if warm:
                batch.enqueue_on(s, 1)
            start.record(s)
            batch.enqueue_on(s, per)
            stop.record(s)
        (inside or (lambda i, fn: fn()))(i, enqueue)
        prev = stop
    gpu.stream.wait_event(prev)
    gpu.release(t)
    gpu.wait(gpu.stream)
    return [cupy.cuda.get_elapsed_time(a, z) * 1e3 / per for a, z in events[:len(streams)]]


def long_segment_us(gpu, batch, count: int = 512) -> float:
    """µs per transfer of one gated segment of `count` transfers on the primary context's work stream: what a run of
    one context times (core/timing.time_batch; `batch` holds one segment of `count`)."""
    from ipcbench.core.timing import time_batch

    return time_batch(gpu, batch.with_count(count)) * 1e3 / count


def main(out: str) -> None:
    import cupy
    from cuda.bindings import driver as cu

    from ipcbench.core.gpu import Gpu, _external_stream
    from ipcbench.core.methods import METHODS

    gpu = Gpu(0)
    dev = _ck(cu.cuDeviceGet(0))
    primary = _ck(cu.cuCtxGetCurrent())
    res = _ck(cu.cuDeviceGetDevResource(dev, cu.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM))
    desc = _ck(cu.cuDevResourceGenerateDesc([res], 1))

    def green():
        return _ck(cu.cuGreenCtxCreate(desc, dev, cu.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM))

    n_big = 1 << 20
    src, dst = gpu.malloc(n_big), gpu.malloc(n_big)
    cases = [("ce", 4096), ("ce", n_big), ("sm_write", 4096)]
    batches = {c: METHODS[c[0]].batch(gpu, src, dst, c[1], COUNT) for c in cases}
    out_rows: list[dict] = []

    def timed(name: str, case, run) -> None:
        vals = []
        try:
            for _ in range(REPEATS):
                vals.append(run(batches[case]))
        except Exception as e:  # noqa: BLE001 - a bench records what failed
            out_rows.append({"variant": name, "case": list(case), "error": str(e)[:200]})
            return
        per = [statistics.median(v) if isinstance(v, list) else v for v in vals]
        out_rows.append({"variant": name, "case": list(case), "us_per_copy": per,
                         "lanes": vals[-1] if isinstance(vals[-1], list) else None})
        print(name, case, [round(x, 3) for x in per], flush=True)

    def gate_and(stream, events, enqueue):
        start, stop = events
        t = gpu.gate(stream)
        start.record(stream)
        enqueue(stream)
        stop.record(stream)
        gpu.release(t)
        gpu.wait(stream)
        return cupy.cuda.get_elapsed_time(start, stop) * 1e3 / COUNT

    # work
    ev = (gpu.event(), gpu.event())
    for c in cases:
        timed("work", c, lambda b: gate_and(gpu.stream, ev, lambda s: b.enqueue_on(s, COUNT)))

    # primary-chain: 8 streams of the primary context one after another (does chaining alone cost?)
    prim = [gpu.new_stream() for _ in range(8)]
    prim_events = [(gpu.event(), gpu.event()) for _ in prim]
    for c in cases:
        timed("primary-chain", c, lambda b: chain(gpu, b, prim, prim_events, COUNT // 8))

    # green-from-primary and green-own-gate
    g1 = green()
    raw = _ck(cu.cuGreenCtxStreamCreate(g1, cu.CUstream_flags.CU_STREAM_NON_BLOCKING, 0))
    gs = _external_stream(int(raw), 0)
    gpu._add_counters(gs)

    def from_primary(b):
        start, stop = ev
        t = gpu.gate(gpu.stream)
        prev = gpu.event(timing=False)
        prev.record(gpu.stream)
        gs.wait_event(prev)
        start.record(gs)
        b.enqueue_on(gs, COUNT)
        stop.record(gs)
        gpu.stream.wait_event(stop)
        gpu.release(t)
        gpu.wait(gpu.stream)
        return cupy.cuda.get_elapsed_time(start, stop) * 1e3 / COUNT

    for c in cases:
        batches[c].enqueue_on(gs, 1)
        gpu.wait(gs)
        timed("green-from-primary", c, from_primary)
        timed("green-own-gate", c, lambda b: gate_and(gs, ev, lambda s: b.enqueue_on(s, COUNT)))

    # green-current: the context current, its own CuPy stream and events
    lanes = []
    for _ in range(8):
        g = green()
        c_ctx = _ck(cu.cuCtxFromGreenCtx(g))
        _ck(cu.cuCtxSetCurrent(c_ctx))
        s = cupy.cuda.Stream(non_blocking=True)
        gpu._add_counters(s)
        lanes.append((c_ctx, s, (cupy.cuda.Event(), cupy.cuda.Event())))
        _ck(cu.cuCtxSetCurrent(primary))

    def in_ctx(c_ctx, fn):
        _ck(cu.cuCtxSetCurrent(c_ctx))
        try:
            return fn()
        finally:
            _ck(cu.cuCtxSetCurrent(primary))

    for c in cases:
        for c_ctx, s, e in lanes:
            in_ctx(c_ctx, lambda: (batches[c].enqueue_on(s, 1), gpu.wait(s)))
        c_ctx, s, e = lanes[0]
        timed("green-current", c, lambda b: in_ctx(c_ctx, lambda: gate_and(s, e, lambda st: b.enqueue_on(st, COUNT))))

        streams, events = [s for _, s, _ in lanes], [e for _, _, e in lanes]
        timed("green-current-chain", c, lambda b: chain(gpu, b, streams, events, COUNT // 8,
                                                        inside=lambda i, fn: in_ctx(lanes[i][0], fn)))
        timed("green-cupy-stream-chain-primary-current", c, lambda b: chain(gpu, b, streams, events, COUNT // 8))

    t0 = time.perf_counter()
    json.dump({"count": COUNT, "rows": out_rows, "s": time.perf_counter() - t0}, open(out, "w"), indent=1)


def geometry(out: str, modes=("chain", "warm", "host")) -> None:
    """--geometry: the chain's cost by its shape. For primary-context streams and green-context lanes (made with the
    primary context current, as Gpu.lanes makes them): L lanes of P copies each behind one gate, each lane waiting for
    the previous one's stop event, with or without one untimed copy at the start of each lane ("warm"); and L lanes
    run one at a time by the host (a gate on each lane's own stream, released and waited for, "host"). --pipelined:
core/lanes.time_lanes alone (a gate per lane, at most lanes.PENDING lanes queued). µs per copy
    (median over the lanes, and the lanes' min and max), and the host's wall per lane for "host"."""
    import cupy

    from ipcbench.core import lanes as lanes_mod
    from ipcbench.core.gpu import Gpu
    from ipcbench.core.methods import METHODS

    gpu = Gpu(0)
    n = 1 << 20
    src, dst = gpu.malloc(n), gpu.malloc(n)
    green = gpu.lanes(48)
    prim = [gpu.new_stream() for _ in range(48)]
    events = [(gpu.event(), gpu.event()) for _ in range(48)]
    rows = []
    for method, size in (("ce", 4096), ("sm_write", 4096), ("ce", 1 << 20)):
        b = METHODS[method].batch(gpu, src, dst, size, 8)
        lanes_mod.warm(gpu, b, green + prim)
        for kind, streams in (("primary", prim), ("green", green)):
            for lanes, per in ((1, 32), (2, 16), (8, 16), (8, 4), (48, 4), (48, 16)):
                for mode in modes:
                    got = []
                    t_host = 0.0
                    for _ in range(3):
                        if mode == "pipelined":  # core/lanes.time_lanes, as a run samples
                            lanes_mod.time_lanes(gpu, b, streams[:lanes], events[:lanes], per, len(got))
                        elif mode == "host":
                            t0 = time.perf_counter()
                            for i in range(lanes):
                                st, (a, z) = streams[i], events[i]
                                t = gpu.gate(st)
                                a.record(st)
                                b.enqueue_on(st, per)
                                z.record(st)
                                gpu.release(t)
                                gpu.wait(st, spin=True)
                            t_host += (time.perf_counter() - t0) / lanes / 3
                        else:
                            chain(gpu, b, streams[:lanes], events, per, warm=mode == "warm")
                        got.append([cupy.cuda.get_elapsed_time(*events[i]) * 1e3 / per for i in range(lanes)])
                    flat = [x for g in got for x in g]
                    rec = {"method": method, "bytes": size, "streams": kind, "lanes": lanes, "per": per, "mode": mode,
                           "median": statistics.median(flat), "min": min(flat), "max": max(flat),
                           "host_us_per_lane": t_host * 1e6 if mode == "host" else None}
                    rows.append(rec)
                    print(method, size, kind, f"L={lanes} P={per} {mode}: {rec['median']:.3f} "
                          f"[{rec['min']:.3f}, {rec['max']:.3f}]" + (f" host {t_host * 1e6:.0f} us/lane"
                                                                      if mode == "host" else ""), flush=True)
    json.dump(rows, open(out, "w"), indent=1)


def first_event(out: str) -> None:
    """--first: is a lane's bias its first transfer? 48 lanes of P transfers (one sample of core/lanes.time_lanes's
    shape: a gate per lane, at most two queued) with an event after the first transfer and one after the first two;
    per transfer: (stop - start) / P, (stop - first) / (P - 1), and the two-length difference
    ((stop - second) - (first - start)) / (P - 3), against the work stream's long segment (512 transfers)."""
    import cupy

    from ipcbench.core import lanes as lanes_mod
    from ipcbench.core.gpu import Gpu
    from ipcbench.core.methods import METHODS

    gpu = Gpu(0)
    n = 1 << 20
    src, dst = gpu.malloc(n), gpu.malloc(n)
    lanes = gpu.lanes(48)
    ev = [tuple(gpu.event() for _ in range(4)) for _ in lanes]
    rows = []
    for method, size, per in (("ce", 4096, 22), ("sm_write", 4096, 22), ("ce", 65536, 22), ("sm_write", 65536, 9),
                              ("ce", 1 << 20, 11), ("sm_read", 1 << 20, 8)):
        b = METHODS[method].batch(gpu, src, dst, size, 512)
        lanes_mod.warm(gpu, b, lanes)
        longs = [long_segment_us(gpu, b) for _ in range(5)]
        whole, after_first, diff = [], [], []
        for sample in range(5):
            lanes_mod.time_lanes(gpu, b, lanes, ev, per, sample)
            el = cupy.cuda.get_elapsed_time
            whole.append(statistics.fmean(el(e[0], e[3]) * 1e3 / per for e in ev))
            after_first.append(statistics.fmean(el(e[1], e[3]) * 1e3 / (per - 1) for e in ev))
            diff.append(statistics.fmean(((el(e[2], e[3]) - el(e[0], e[1])) * 1e3 / (per - 3)) for e in ev))
        rec = {"method": method, "bytes": size, "per": per, "long": statistics.median(longs),
               "whole": statistics.median(whole), "after_first": statistics.median(after_first),
               "difference": statistics.median(diff)}
        rows.append(rec)
        print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in rec.items()}, flush=True)
    json.dump(rows, open(out, "w"), indent=1)


def session(out: str, k: int = 16) -> None:
    """--session OUT [K]: inside a real ipcbench setup (mpirun -np 2; run/runner.start: the run's buffers, the peer's
    imported), rank 0 pushes into rank 1's legacy buffer, 4 KiB / 64 KiB / 1 MiB, copy engine and SM write, three ways
    in turn, five times each: the primary context's work stream, one segment of 512 transfers ("primary"); K lanes of
    core/lanes.time_lanes ("lanes": the run's estimate, the mean over the lanes); the same K lanes' whole segments
    (stop - start over the lane's transfers, "whole"). Appends one JSON line per rank 0 process to OUT."""
    import tempfile


    from ipcbench.config import RunConfig
    from ipcbench.core import lanes as lanes_mod
    from ipcbench.core.methods import METHODS
    from ipcbench.run import runner

    cfg = RunConfig.from_options(suites=["copy", "kernel"], sizes="4K,64K,1M", out=tempfile.mkdtemp(prefix="bl"),
                                 quiet=True, timeout=60, contexts=k)
    s = runner.start(cfg)
    ctx, gpu, w = s.ctx, s.gpu, s.world
    rec: dict = {"contexts": len(ctx.lanes), "rows": []}
    if w.local_rank == 0:
        b = ctx.buffers["legacy"]
        dst = b.peer_inbox_slot(1, 0)
        for method in ("ce", "sm_write"):
            for n in (4096, 65536, 1 << 20):
                batch = METHODS[method].batch(gpu, b.src, dst, n, 512)
                lanes_mod.warm(gpu, batch, ctx.lanes)
                per = 37 if n < (1 << 20) else 24
                got: dict = {"primary": [], "lanes": [], "whole": []}
                for _ in range(5):
                    got["primary"].append(long_segment_us(gpu, batch))
                    us = lanes_mod.time_lanes(gpu, batch, ctx.lanes, ctx.lane_events, per, len(got["lanes"]))
                    got["lanes"].append(statistics.fmean(us))
                    got["whole"].append(statistics.fmean(gpu.elapsed_ms(e[0], e[3]) * 1e3 / per
                                                         for e in ctx.lane_events))
                row = {"method": method, "bytes": n, **{key: statistics.median(v) for key, v in got.items()}}
                rec["rows"].append(row)
        with open(out, "a") as f:
            f.write(json.dumps(rec) + "\n")
    w.node_barrier("the bench")
    runner.release(s)


def variant(out: str, shape: str) -> None:
    """--variant OUT SHAPE: the size of a change made to the SM copy kernel, measured apart from ipcbench's runs and
    their contexts: one process, the primary context's work stream, 512-transfer segments (long_segment_us), a push of
    4 KiB, 64 KiB and 1 MiB into its own buffer by the default --sm-copy shape and by SHAPE, alternating, seven times
    each; the copy engine beside them as a control (the shape cannot touch it). JSON: per size, each's median µs and
    SHAPE's change."""
    from ipcbench.core import lanes as lanes_mod
    from ipcbench.core.gpu import Gpu
    from ipcbench.core.methods import METHODS
    from ipcbench.core.sm_copy import CopyShape

    gpu = Gpu(0)
    n = 1 << 20
    src, dst = gpu.malloc(n), gpu.malloc(n)
    rows = []
    for size in (4096, 65536, 1 << 20):
        got: dict[str, list[float]] = {"sm_write": [], f"sm_write@{shape}": [], "ce": []}
        batches = {m: METHODS[m].batch(gpu, src, dst, size, 512) for m in ("sm_write", "ce")}
        kernels = (("sm_write", CopyShape()), (f"sm_write@{shape}", CopyShape.parse(shape)), ("ce", None))
        for _ in range(7):
            for name, kernel in kernels:
                if kernel is not None:
                    gpu.copy_shape = kernel
                b = batches["ce" if kernel is None else "sm_write"]
                lanes_mod.warm(gpu, b, [gpu.stream])  # a new shape's first launch is not timed
                got[name].append(long_segment_us(gpu, b))
        gpu.copy_shape = CopyShape()
        med = {k: statistics.median(v) for k, v in got.items()}
        rows.append({"bytes": size, **med, "change": med[f"sm_write@{shape}"] / med["sm_write"] - 1})
        print(rows[-1], flush=True)
    json.dump(rows, open(out, "w"), indent=1)


if __name__ == "__main__":
    if sys.argv[1] == "--geometry":
        geometry(sys.argv[2])
    elif sys.argv[1] == "--variant":
        variant(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "--session":
        session(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 16)
    elif sys.argv[1] == "--first":
        first_event(sys.argv[2])
    elif sys.argv[1] == "--pipelined":
        geometry(sys.argv[2], ("pipelined",))
    else:
        main(sys.argv[1])
