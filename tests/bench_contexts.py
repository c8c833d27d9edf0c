"""Where does a small copy's per-process level live, and what would sampling it over K CUDA contexts cost?

A device benchmark (not a test), run under MPI inside a real ipcbench setup (run/runner.start: the run's buffers of
every kind, own and each peer's imported once), two ranks:

  mpirun -np 2 python tests/bench_contexts.py OUT K [--green]   # each rank appends one JSON object to OUT.rank<N>
  python tests/bench_contexts.py --summary FILE...        # the table below, from those files

Each rank makes K new contexts (cuCtxCreate; with --green, green contexts over every SM: cuGreenCtxCreate and
cuCtxFromGreenCtx) beside its primary one and records:
- costs: seconds to make the K contexts, the device memory each takes (cudaMemGetInfo before and after);
- access: a copy-engine copy and an SM copy kernel issued from a new context into the peer's buffer (push) and from
  it (pull), for every buffer kind the run shares (legacy IPC, pool, VMM, cuda.core), each checked word by word;
  the SM kernel loaded three ways: a context-independent library (cuLibraryLoadData), CuPy's module (loaded in the
  primary context), a module loaded in the new context;
- levels: per context (the primary first), GPU time per copy of `count` back-to-back copies behind a gate kernel
  (the gate's flag in host-mapped memory), copy engine and SM kernel, 4 KiB / 64 KiB / 1 MiB, into the peer's buffer.
  The rank's own source buffer is the run's (allocated in the primary context).

What it found on one H200, two ranks (2026-11-29, tests/data/contexts-h200x1-1129; docs/measurement.md):
- every buffer kind, own and the peer's, is reachable from a new context by both engines, every word right; the
  kernel must come from a library (CuPy's primary-context module gives CUDA_ERROR_INVALID_HANDLE there);
- a context costs 0.26-0.33 s to make and about 1 GiB of device memory;
- a copy-engine copy issued from a new context whose source was cudaMalloc'd in the primary context takes 9-13 us
  instead of 1.5-2.1 (the driver's path between contexts); from VMM memory (mapped for the device, not a context) it
  runs at the primary's rate; an SM kernel reads either at its rate: per-context sampling needs each context's own
  buffers for the copy engine;
- per-context levels spread (relative standard deviation over the new contexts) 4.6-5.4% for a 4 KiB copy-engine
  copy (two modes, 1.58-1.63 or 1.75-1.81 us), 2.7-3.9% at 64 KiB and 1 MiB, 2.6-3.9% for a 4 KiB SM copy,
  2.0-2.6% at 64 KiB and 1 MiB;
- green contexts over every SM (--green) cost 1.6 ms and 10 MiB each, reach every buffer, launch CuPy's kernels, time
  the copy engine from primary-context memory at its rate, and spread 2.5-4.5% as contexts do.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import statistics
import sys
import tempfile
import time

SIZES = (4096, 65536, 1 << 20)
COUNTS = (64, 256)
GATE_TIMEOUT_NS = int(3e9)
LEVELS_BUDGET_S = 12.0  # each rank's levels stop here (a bench run must end inside a device call)
LIMITS = ("CU_LIMIT_STACK_SIZE", "CU_LIMIT_PRINTF_FIFO_SIZE", "CU_LIMIT_MALLOC_HEAP_SIZE")


def _ck(r):
    err, *rest = r if isinstance(r, tuple) else (r,)
    if int(err) != 0:
        raise RuntimeError(str(err))
    return rest[0] if len(rest) == 1 else (rest or None)


def _cubin(name: str, defines=()) -> bytes:
    """kernels/<name>.cu compiled by NVRTC for sm_90 (a cubin any context can load)."""
    from cuda.bindings import nvrtc

    from ipcbench.core.gpu import kernel_source

    src, inc = kernel_source(name)
    prog = _ck(nvrtc.nvrtcCreateProgram(src.encode(), f"{name}.cu".encode(), 0, [], []))
    opts = [b"--gpu-architecture=sm_90", b"-std=c++17", f"-I{inc}".encode()] + [f"-D{d}".encode() for d in defines]
    _ck(nvrtc.nvrtcCompileProgram(prog, len(opts), opts))
    n = _ck(nvrtc.nvrtcGetCUBINSize(prog))
    out = b" " * n
    _ck(nvrtc.nvrtcGetCUBIN(prog, out))
    return out


class Bench:
    """One rank's contexts, kernels and the run's buffers."""

    def __init__(self, session, k: int, green: bool = False):
        from cuda.bindings import driver as cu
        from cupy.cuda import runtime

        self.cu, self.rt = cu, runtime
        self.s, self.ctx, self.gpu, self.w = session, session.ctx, session.gpu, session.world
        self.me = self.w.local_rank
        self.peer = 1 - self.me
        dev = _ck(cu.cuDeviceGet(self.gpu.index))
        self.primary = _ck(cu.cuCtxGetCurrent())
        free0 = runtime.memGetInfo()[0]
        t0 = time.perf_counter()
        self.contexts = [self._green(dev) if green else _ck(cu.cuCtxCreate(None, 0, dev)) for _ in range(k)]
        _ck(cu.cuCtxSetCurrent(self.contexts[0]))
        limits = {n: int(_ck(cu.cuCtxGetLimit(getattr(cu.CUlimit, n)))) for n in LIMITS}
        _ck(cu.cuCtxSetCurrent(self.primary))
        self.cost = {"contexts_s": time.perf_counter() - t0, "green": green, "limits": limits,
                     "mib_per_context": (free0 - runtime.memGetInfo()[0]) / k / 2**20}
        shape = self.gpu.copy_shape
        self.shape = shape
        libs = {n: _ck(cu.cuLibraryLoadData(_cubin(n, d), None, None, 0, None, None, 0))
                for n, d in (("copy", (f"UNROLL={shape.unroll}",)), ("gate", ()))}
        self.copy_kernel = _ck(cu.cuLibraryGetKernel(libs["copy"], b"copy_v16"))
        self.gate_kernel = _ck(cu.cuLibraryGetKernel(libs["gate"], b"gate"))
        self.host = runtime.hostAlloc(4096, runtime.hostAllocMapped | runtime.hostAllocPortable)
        ctypes.memset(self.host, 0, 4096)
        self.words = (ctypes.c_uint * 1024).from_address(self.host)
        self.ticket = 0

    def _green(self, dev):
        """A green context over every SM of the device, as a context (cuCtxFromGreenCtx)."""
        cu = self.cu
        res = _ck(cu.cuDeviceGetDevResource(dev, cu.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM))
        desc = _ck(cu.cuDevResourceGenerateDesc([res], 1))
        g = _ck(cu.cuGreenCtxCreate(desc, dev, cu.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM))
        return _ck(cu.cuCtxFromGreenCtx(g))

    def current(self, c) -> None:
        _ck(self.cu.cuCtxSetCurrent(c))

    def sync(self, stream_ptr: int, what: str, timeout: float = 5.0) -> None:
        cu = self.cu
        t = time.monotonic()
        while True:
            r = cu.cuStreamQuery(cu.CUstream(stream_ptr))[0]
            if int(r) == 0:
                return
            if int(r) != int(cu.CUresult.CUDA_ERROR_NOT_READY):
                raise RuntimeError(f"{what}: {r}")
            if time.monotonic() - t > timeout:
                raise RuntimeError(f"{what}: still running after {timeout} s")

    def launch(self, f, args: tuple, blocks: int, threads: int, stream_ptr: int) -> None:
        from cupy_backends.cuda.api import driver

        params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        driver.launchKernel(int(f), blocks, 1, 1, threads, 1, 1, 0, stream_ptr, ctypes.addressof(params), 0)

    def copy(self, engine: str, f, src: int, dst: int, n: int, stream_ptr: int) -> None:
        if engine == "ce":
            self.rt.memcpyAsync(dst, src, n, self.rt.memcpyDefault, stream_ptr)
            return
        s = self.shape
        blocks = self.gpu.blocks_for(n, 16 * s.unroll, s.blocks_per_sm, s.threads)
        self.launch(f, (ctypes.c_uint64(src), ctypes.c_uint64(dst), ctypes.c_uint64(n), ctypes.c_int32(1)),
                    blocks, s.threads, stream_ptr)

    def ends(self, kind: str, direction: str) -> tuple[int, int, int]:
        """(src, dst, seed the destination must hold) of a push into the peer or a pull from it."""
        b = self.ctx.buffers[kind]
        if direction == "push":
            return b.src, b.peer_inbox_slot(self.peer, self.me), 1000 + self.w.rank
        return b.peer_src[self.peer], b.inbox_slot(self.peer), 1000 + self.w.node_ranks[self.peer]


def access(b: Bench) -> dict:
    """Every buffer kind, both engines, push and pull, issued from the first new context: "ok" or what failed."""
    n = 1 << 20
    for kind in b.ctx.buffers:
        b.gpu.fill(b.ctx.buffers[kind].src, n, 1000 + b.w.rank)
    b.gpu.wait()
    b.w.node_barrier()
    cupy_fn = b.gpu.function("copy", "copy_v16", (f"UNROLL={b.shape.unroll}",)).kernel.ptr
    out: dict = {}
    for turn in range(2):
        if b.me == turn:
            for kind in sorted(b.ctx.buffers):
                for direction in ("push", "pull"):
                    for engine, f in (("ce", None), ("sm", b.copy_kernel)):
                        out[f"{kind}/{engine}/{direction}"] = _one_access(b, kind, engine, direction, f, n)
            out["legacy/sm-cupy-module/push"] = _one_access(b, "legacy", "sm", "push", cupy_fn, n)
        b.w.node_barrier()
    return out


def _one_access(b: Bench, kind: str, engine: str, direction: str, f, n: int) -> str:
    import cupy

    src, dst, seed = b.ends(kind, direction)
    b.gpu.fill(dst, n, 4242)
    b.gpu.wait()
    try:
        b.current(b.contexts[0])
        try:
            st = cupy.cuda.Stream(non_blocking=True)
            b.copy(engine, f, src, dst, n, st.ptr)
            b.sync(st.ptr, "access copy")
        finally:
            b.current(b.primary)
    except Exception as e:  # noqa: BLE001 - a bench records what failed
        return "ERROR " + str(e)[:160]
    bad = b.gpu.verify(dst, n, seed)
    return "ok" if bad == 0 else f"{bad} wrong words"


def levels(b: Bench) -> list[dict]:
    """Per context (0: the primary), per engine, size and count: us per copy of three gated batches."""
    import cupy

    lanes = []
    for c in [b.primary, *b.contexts]:
        b.current(c)
        lanes.append((c, cupy.cuda.Stream(non_blocking=True), cupy.cuda.Event(), cupy.cuda.Event()))
    b.current(b.primary)
    out: list[dict] = []
    t0 = time.monotonic()
    for turn in range(2):
        if b.me == turn:
            for engine, kind in (("ce", "legacy"), ("sm", "legacy"), ("ce", "vmm")):
                if kind not in b.ctx.buffers:
                    continue
                src, dst, _ = b.ends(kind, "push")
                for n in SIZES:
                    for count in COUNTS:
                        for i, lane in enumerate(lanes):
                            rec = {"engine": engine, "kind": kind, "bytes": n, "count": count, "context": i}
                            if time.monotonic() - t0 > LEVELS_BUDGET_S:
                                out.append({**rec, "error": f"not measured: past {LEVELS_BUDGET_S:g} s"})
                                continue
                            try:
                                _timed(b, lane, engine, src, dst, n, 4)
                                rec["us"] = [_timed(b, lane, engine, src, dst, n, count) for _ in range(3)]
                            except Exception as e:  # noqa: BLE001
                                rec["error"] = str(e)[:160]
                            out.append(rec)
        b.w.node_barrier()
    return out


def _timed(b: Bench, lane, engine: str, src: int, dst: int, n: int, count: int) -> float:
    c, st, e0, e1 = lane
    b.current(c)
    try:
        b.ticket += 1
        t = b.ticket
        b.launch(b.gate_kernel, (ctypes.c_uint64(b.host), ctypes.c_uint32(t), ctypes.c_uint64(b.host + 4),
                                 ctypes.c_uint64(GATE_TIMEOUT_NS)), 1, 32, st.ptr)
        e0.record(st)
        for _ in range(count):
            b.copy(engine, b.copy_kernel, src, dst, n, st.ptr)
        e1.record(st)
        b.words[0] = t
        b.sync(st.ptr, "timed batch")
        if b.words[1] == t:
            raise RuntimeError("the gate timed out")
        import cupy

        return cupy.cuda.get_elapsed_time(e0, e1) * 1e3 / count
    finally:
        b.current(b.primary)


def measure(out: str, k: int, green: bool) -> None:
    from ipcbench.config import RunConfig
    from ipcbench.run import runner

    cfg = RunConfig.from_options(suites=["copy", "kernel", "pool", "vmm"], sizes="4K,64K,1M",
                                 out=tempfile.mkdtemp(prefix="bench_contexts"), quiet=True, timeout=60)
    s = runner.start(cfg)
    b = Bench(s, k, green)
    rec = {"rank": s.world.rank, "pid": os.getpid(), "contexts": k, "cost": b.cost, "access": access(b),
           "levels": levels(b)}
    with open(f"{out}.rank{s.world.rank}", "a") as f:
        f.write(json.dumps(rec) + "\n")
    runner.release(s)


def summary(paths: list[str]) -> None:
    """Per rank process: costs, failed accesses, and per row its contexts' spread (relative sd), the primary's value
    and the contexts' mean."""
    for path in paths:
        for line in open(path):
            rec = json.loads(line)
            kind = "green contexts" if rec["cost"].get("green") else "contexts"
            print(f"{path} rank {rec['rank']}: {rec['contexts']} {kind} in {rec['cost']['contexts_s']:.2f} s, "
                  f"{rec['cost']['mib_per_context']:.0f} MiB each; access not ok: "
                  f"{ {k: v for k, v in rec['access'].items() if v != 'ok'} }")
            for row, vals in sorted(context_values(rec).items()):
                new = vals[1:]
                mean = statistics.mean(new)
                sd = statistics.stdev(new) / mean
                se = 100 * sd / math.sqrt(len(new))
                print(f"  {row[0]:>2} {row[1]:>6} {row[2]:>8} x{row[3]:<3} primary {vals[0]:7.3f} us, "
                      f"{len(new)} contexts mean {mean:7.3f} sd {100 * sd:4.1f}% (se {se:4.2f}%)")


def context_values(rec: dict) -> dict[tuple, list[float]]:
    """(engine, kind, bytes, count) -> each context's value (its fastest of three batches), context 0 first."""
    rows: dict[tuple, dict[int, float]] = {}
    for x in rec["levels"]:
        if "us" in x:
            rows.setdefault((x["engine"], x["kind"], x["bytes"], x["count"]), {})[x["context"]] = min(x["us"])
    return {k: [v[i] for i in sorted(v)] for k, v in rows.items() if len(v) > 2}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--summary"]:
        summary(sys.argv[2:])
    else:
        args = [a for a in sys.argv[1:] if a != "--green"]
        measure(args[0], int(args[1]) if len(args) > 1 else 8, "--green" in sys.argv)
