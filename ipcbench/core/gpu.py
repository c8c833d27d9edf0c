"""Per-rank GPU context: the device, its streams, kernels from kernels/*.cu, the gate, fill/verify.

Everything that launches a kernel or owns device memory goes through here, so that the rest of the
code deals in raw device pointers (ints) and never in framework arrays. This module imports CuPy at
import time: cli.py and the report never import it (docs/architecture.md). cuda.bindings is optional here
(the UUID fallback, green contexts): imported where it is used, its absence an answer, not an error.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from importlib import resources

import numpy as np
import cupy
from cupy.cuda import runtime
from cupy_backends.cuda.api import driver

from ipcbench.core import bulk
from ipcbench.core.poll import wait_until
from ipcbench.core.sm_copy import CopyShape
from ipcbench.errors import GpuError

GATE_TIMEOUT_S = 10.0
THREADS = 512
# An SM copy runs all passes of a batch in one launch (the kernel loops, as nvbandwidth does: no launch
# gaps between passes) only when the buffer is at least this many times the GPU's L2. Below that, a
# second pass inside the same kernel reads the peer's data back from the reader's own caches: seen on an
# H200 pair, sm_read "reached" 650-4,385 GB/s from 1 MiB to 64 MiB over a 478 GB/s link. Smaller copies
# therefore launch once per pass, and each transfer is a complete kernel.
LOOP_IN_KERNEL_L2_FACTOR = 4
STAMP_OFF = 64  # byte offset of the two %globaltimer stamps in the per-GPU scratch block
BULK_COUNTER_SLOTS = 64  # bulk-copy counter pairs per allocation (one pair per stream)


def prepared_launch(fn, blocks: int, threads: int, smem: int, stream_ptr: int, args: tuple):
    """A zero-argument callable that launches `fn` with `args` (ctypes scalars): cuLaunchKernel through CuPy's
    driver binding with the argument block packed once. A RawKernel call packs its arguments at every launch:
    an SM copy's 512 launches of one sample cost the host ~5-9 ms behind the gate (a profile of `all` on two
    H100s: launch_copy 10-18 µs a call); the prepared launch is the same driver call, so the GPU sees the same
    kernels (tests/bench_host_costs.py measures both)."""
    params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
    f, pp = fn.kernel.ptr, ctypes.addressof(params)
    launch = driver.launchKernel

    def go() -> None:
        launch(f, blocks, 1, 1, threads, 1, 1, smem, stream_ptr, pp, 0)

    go.keep = (args, params)  # type: ignore[attr-defined]  # the packed arguments live as long as the callable
    return go


def kernel_source(name: str) -> tuple[str, str]:
    """(source text, include dir) of kernels/<name>.cu, found as package data (works from a wheel too)."""
    root = resources.files("ipcbench.kernels")
    src = (root / f"{name}.cu").read_text()
    return src, str(root)


@dataclass
class GpuInfo:
    index: int
    name: str
    uuid: str
    pci_bus_id: str
    sm_count: int
    memory_bytes: int
    cc: str
    l2_bytes: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def device_count() -> int:
    try:
        return runtime.getDeviceCount()
    except runtime.CUDARuntimeError:
        return 0


def device_info(index: int) -> GpuInfo:
    """CUDA device `index`: name, UUID, PCI bus id, SMs, memory, compute capability, L2 (a GpuInfo)."""
    p = runtime.getDeviceProperties(index)
    raw = p.get("uuid", b"")
    if not (isinstance(raw, (bytes, bytearray)) and len(raw) == 16):
        raw = _uuid_bytes(index)  # CuPy cuts the 16 raw bytes at a zero byte (seen: GPU-unknown-0)
    if raw is not None and len(raw) == 16:
        h = bytes(raw).hex()
        uuid = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    else:
        uuid = f"GPU-unknown-{index}"
    name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
    pci = f"{p['pciDomainID']:08x}:{p['pciBusID']:02x}:{p['pciDeviceID']:02x}.0"
    return GpuInfo(index, name, uuid, pci, int(p["multiProcessorCount"]), int(p["totalGlobalMem"]),
                   f"{p['major']}.{p['minor']}", int(p.get("l2CacheSize", 0)))


def _uuid_bytes(index: int) -> bytes | None:
    """The device's 16-byte UUID from the driver API (cuda.bindings), or None."""
    try:
        from cuda.bindings import driver

        err, dev = driver.cuDeviceGet(index)
        if err != driver.CUresult.CUDA_SUCCESS:
            return None
        err, uu = driver.cuDeviceGetUuid(dev)
        return bytes(uu.bytes) if err == driver.CUresult.CUDA_SUCCESS else None
    except Exception:
        return None


class _StreamHandle:
    """A raw CUstream as an object of the CUDA stream protocol (__cuda_stream__: version 0, handle)."""

    def __init__(self, ptr: int):
        self.ptr = ptr

    def __cuda_stream__(self):
        return 0, self.ptr


def _ok(res, what: str):
    """A cuda.bindings driver call's result without its status: GpuError naming the call where it failed."""
    err, *out = res if isinstance(res, tuple) else (res,)
    if int(err) != 0:
        raise GpuError(f"{what}: {err}")
    return out[0] if len(out) == 1 else out


def _external_stream(ptr: int, device: int):
    """A CuPy stream over a stream CuPy did not make (a green context's): Stream.from_external where CuPy has
    it (ExternalStream is deprecated there), else ExternalStream."""
    if hasattr(cupy.cuda.Stream, "from_external"):
        return cupy.cuda.Stream.from_external(_StreamHandle(ptr))
    return cupy.cuda.ExternalStream(ptr, device)


class Gpu:
    """The device this rank drives, with a work stream, a host-mapped gate flag and loaded kernels."""

    def __init__(self, index: int, copy_shape: CopyShape | None = None, bulk_shape: bulk.BulkShape | None = None):
        self.index = index
        self.device = cupy.cuda.Device(index)
        self.device.use()
        self.info = device_info(index)
        self.sm_count = self.info.sm_count
        self.l2_bytes = self.info.l2_bytes or (64 << 20)
        self.loop_in_kernel_bytes = LOOP_IN_KERNEL_L2_FACTOR * self.l2_bytes
        self._counter = runtime.malloc(256)
        self.allocations: list[int] = [self._counter]
        # Each stream's pair of piece counters for the bulk-copy kernel (kernels/bulk.cu takes its pieces
        # from them; the kernel leaves them zeroed), one per stream made by new_stream, from zeroed slabs.
        self._bulk_next: dict[int, int] = {}
        self._bulk_slab = 0
        self._placement: bulk.Placement | None = None  # where bulk copies run (bulk_placement)
        self._green: tuple | None = None  # (green context, its stream's handle, the cupy stream) for @N
        self._lanes: list[tuple] = []  # (green context, stream handle, cupy stream) per context lane (lanes)
        self._smids = 0  # device words where a bulk launch writes its CTAs' SMs (bulk_sms_seen)
        self.stream = self.new_stream()
        self._modules: dict[str, cupy.RawModule] = {}
        self._functions: dict[tuple, object] = {}
        self.copy_shape = copy_shape or CopyShape()
        self.bulk_shape = bulk_shape or bulk.BulkShape()
        self._bulk_fn = None
        # Host-mapped words: [0] gate release counter, [1] gate timeout status, [2] the last gate's SM clock
        # (kHz), [3..] scratch.
        self._host_ptr = runtime.hostAlloc(4096, runtime.hostAllocMapped)
        self.host_words = (ctypes.c_uint * 1024).from_address(self._host_ptr)
        ctypes.memset(self._host_ptr, 0, 4096)
        self._gate_target = 0

    # ---- kernels -------------------------------------------------------------------------------
    def module(self, name: str, defines: tuple[str, ...] = ()) -> cupy.RawModule:
        key = name + "|" + ",".join(defines)
        mod = self._modules.get(key)
        if mod is None:
            src, inc = kernel_source(name)
            opts = ("-std=c++17", f"-I{inc}") + tuple(f"-D{d}" for d in defines)
            mod = cupy.RawModule(code=src, options=opts)
            mod.compile()
            self._modules[key] = mod
        return mod

    def function(self, module: str, fn: str, defines: tuple[str, ...] = ()):
        """A kernel of a compiled module, looked up once: graph captures launch it hundreds of times a batch."""
        key = (module, fn, defines)
        f = self._functions.get(key)
        if f is None:
            f = self._functions[key] = self.module(module, defines).get_function(fn)
        return f

    def blocks_for(self, nbytes: int, bytes_per_thread: int, per_sm: int = 4, threads: int = THREADS) -> int:
        need = -(-max(nbytes, 1) // (threads * bytes_per_thread))
        return int(max(1, min(self.sm_count * per_sm, need)))

    # ---- memory --------------------------------------------------------------------------------
    def malloc(self, nbytes: int) -> int:
        try:
            ptr = runtime.malloc(nbytes)
        except runtime.CUDARuntimeError as e:
            raise GpuError(f"cudaMalloc({nbytes}) on GPU {self.index} failed: {e}") from None
        self.allocations.append(ptr)
        return ptr

    def free(self, ptr: int) -> None:
        if ptr in self.allocations:
            self.allocations.remove(ptr)
            runtime.free(ptr)

    def free_memory(self) -> int:
        return runtime.memGetInfo()[0]

    # ---- stream primitives: the seam a CPU test's fake GPU provides (tests/fakes.py) -----------
    def new_stream(self):
        s = cupy.cuda.Stream(non_blocking=True)
        self._add_counters(s)
        return s

    def _add_counters(self, s) -> None:
        """The stream's pair of bulk-copy piece counters, now, not at its first bulk copy (which may be inside
        a graph capture), from zeroed slabs of BULK_COUNTER_SLOTS pairs."""
        n = len(self._bulk_next)
        if n % BULK_COUNTER_SLOTS == 0:
            self._bulk_slab = self.malloc(BULK_COUNTER_SLOTS * 16)
            runtime.memset(self._bulk_slab, 0, BULK_COUNTER_SLOTS * 16)
        self._bulk_next[s.ptr] = self._bulk_slab + 16 * (n % BULK_COUNTER_SLOTS)

    def event(self, timing: bool = True):
        return cupy.cuda.Event(disable_timing=not timing)

    def elapsed_ms(self, start, stop) -> float:
        return cupy.cuda.get_elapsed_time(start, stop)

    def copy_async(self, dst: int, src: int, nbytes: int, stream) -> None:
        """One copy-engine transfer (cudaMemcpyAsync, any direction) enqueued on `stream`."""
        runtime.memcpyAsync(dst, src, nbytes, runtime.memcpyDefault, stream.ptr)

    # ---- launches ------------------------------------------------------------------------------
    def copier(self, src: int, dst: int, nbytes: int, loops: int = 1, stream=None):
        """launch() -> one SM copy kernel (kernels/copy.cu) of `loops` passes of dst[0:nbytes] = src[0:nbytes] on
        `stream`, prepared once (prepared_launch): what a batch of small copies calls hundreds of times."""
        shape = self.copy_shape
        fn = self.function("copy", "copy_v16", (f"UNROLL={shape.unroll}",))
        blocks = self.blocks_for(nbytes, 16 * shape.unroll, shape.blocks_per_sm, shape.threads)
        s = stream or self.stream
        return prepared_launch(fn, blocks, shape.threads, 0, s.ptr,
                               (ctypes.c_uint64(src), ctypes.c_uint64(dst), ctypes.c_uint64(nbytes),
                                ctypes.c_int32(loops)))

    def launch_copy(self, src: int, dst: int, nbytes: int, loops: int = 1, stream=None) -> None:
        self.copier(src, dst, nbytes, loops, stream)()

    def table(self, values: list[int]) -> int:
        """A device array of 64-bit words (pointers for a kernel that takes many), kept until close()."""
        ptr = self.malloc(8 * max(1, len(values)))
        words = np.asarray(values, dtype=np.uint64)
        runtime.memcpy(ptr, words.ctypes.data, 8 * len(values), runtime.memcpyHostToDevice)
        return ptr

    def a2a_writer(self, src: int, dsts: int, npeers: int, nbytes: int, loops: int = 1, stream=None):
        """launch() -> one all-to-all kernel (kernels/alltoall.cu a2a_write): `src` stored into each of the `npeers`
        destinations of the device table `dsts`, `loops` passes; --sm-copy's shape over the whole grid, a multiple of
        npeers blocks (each peer's share of the GPU's blocks)."""
        shape = self.copy_shape
        fn = self.function("alltoall", "a2a_write", (f"UNROLL={shape.unroll}",))
        per_peer = self.blocks_for(nbytes, 16 * shape.unroll, shape.blocks_per_sm, shape.threads)
        blocks = npeers * max(1, min(per_peer, self.sm_count * shape.blocks_per_sm // npeers))
        s = stream or self.stream
        return prepared_launch(fn, blocks, shape.threads, 0, s.ptr,
                               (ctypes.c_uint64(src), ctypes.c_uint64(dsts), ctypes.c_int32(npeers),
                                ctypes.c_uint64(nbytes), ctypes.c_int32(loops)))

    def a2a_barrier(self, post: int, npeers: int, mine: int, n: int, me: int, seq: int, status: int, stream=None):
        """launch() -> one device-side barrier between the node's GPUs (kernels/alltoall.cu a2a_barrier): post this
        rank's count through the device table `post`, wait for every peer's in `mine` (n words, `me` skipped);
        gives up after the gate's timeout, writing 1 into `status`."""
        fn = self.function("alltoall", "a2a_barrier")
        s = stream or self.stream
        return prepared_launch(fn, 1, 32, 0, s.ptr,
                               (ctypes.c_uint64(post), ctypes.c_int32(npeers), ctypes.c_uint64(mine),
                                ctypes.c_int32(n), ctypes.c_int32(me), ctypes.c_uint64(seq), ctypes.c_uint64(status),
                                ctypes.c_uint64(int(GATE_TIMEOUT_S * 1e9))))

    def read_word(self, ptr: int) -> int:
        """One 32-bit word of device memory (a kernel's status), read after the stream was waited for."""
        out = np.zeros(1, dtype=np.uint32)
        runtime.memcpy(out.ctypes.data, ptr, 4, runtime.memcpyDeviceToHost)
        return int(out[0])

    def feature_support(self, name: str) -> tuple[bool, str | None]:
        """(can this GPU run the steps that need feature `name` (in Step.needs), why not). The runner asks every
        rank of a node and marks the feature unavailable when any says no (ipc/sharers.setup_gpu_features)."""
        if name == bulk.FEATURE:
            p = runtime.getDeviceProperties(self.index)
            return bulk.support(self.info.cc, f"GPU {self.index} ({self.info.name})", self.bulk_shape,
                                p.get("sharedMemPerBlockOptin"), p.get("sharedMemPerMultiprocessor"), self.sm_count)
        return False, f"unknown GPU feature {name!r}"

    def _bulk_kernel(self):
        """kernels/bulk.cu's bulk_copy for this run's --sm-bulk shape, compiled once, allowed its shared memory."""
        if self._bulk_fn is None:
            ok, why = self.feature_support(bulk.FEATURE)
            if not ok:
                raise GpuError(why)
            fn = self.function("bulk", "bulk_copy", self.bulk_shape.defines())
            fn.max_dynamic_shared_size_bytes = self.bulk_shape.smem_bytes  # over 48 KiB needs the opt-in
            fn.preferred_shared_memory_carveout = 100  # all of L1/shared as shared: B CTAs per SM fit
            self._bulk_fn = fn
        return self._bulk_fn

    def bulk_copier(self, src: int, dst: int, nbytes: int, loops: int = 1, stream=None, smids: int = 0):
        """launch() -> `loops` passes of dst[0:nbytes] = src[0:nbytes] in one launch of the bulk-copy kernel
        (Hopper's cp.async.bulk through shared memory; core/bulk.py plans the pieces and the grid for the kernel's
        placement), prepared once (prepared_launch). `smids`: device words where each CTA writes its SM (0: none)."""
        if (src | dst) % bulk.ALIGN:
            raise GpuError(f"bulk copy: src 0x{src:x} and dst 0x{dst:x} must be {bulk.ALIGN}-byte aligned")
        p = bulk.plan(nbytes, self.bulk_shape, self.sm_count, loops, self.bulk_placement().sms)
        fn = self._bulk_kernel()
        s = stream or self.stream
        nxt = self._bulk_next.get(s.ptr) if p.dynamic else 0  # 0: dealt statically, no counter
        if nxt is None:
            raise GpuError("bulk copy on a stream not made by Gpu.new_stream (it has no piece counter)")
        c = ctypes
        return prepared_launch(fn, p.blocks, bulk.THREADS, p.smem, s.ptr,
                               (c.c_uint64(src), c.c_uint64(dst), c.c_uint64(nbytes), c.c_uint32(p.piece),
                                c.c_uint64(p.pieces), c.c_int32(loops), c.c_uint64(nxt), c.c_uint32(p.grab),
                                c.c_uint64(smids)))

    def launch_bulk_copy(self, src: int, dst: int, nbytes: int, loops: int = 1, stream=None, smids: int = 0) -> None:
        self.bulk_copier(src, dst, nbytes, loops, stream, smids)()

    def bulk_placement(self) -> bulk.Placement:
        """Where bulk copies run (core/bulk.Placement): for --sm-bulk ...@N a green context of N SMs, made once,
        or, where none can be made, the reason why not."""
        if self._placement is None:
            green = (0, "")
            if self.bulk_shape.sms and self.bulk_shape.sms < self.sm_count:
                green = self._make_green(self.bulk_shape.sms)
            self._placement = bulk.placement(self.bulk_shape, self.sm_count, green)
        return self._placement

    def bulk_stream(self):
        """The stream bulk copies are enqueued on: the green context's where the kernel is confined to N SMs
        (work there runs on those SMs only, and graphs captured there keep to them), else the work stream."""
        confined = self.bulk_placement().confined  # first: it makes the green context (_make_green)
        return self._green[2] if confined and self._green is not None else self.stream

    def _make_green(self, n: int) -> tuple[int, str]:
        """A green context of at least n SMs and a stream in it (cuda.bindings' driver API, CUDA >= 12.4):
        (its SM count, "") or (0, why not). The driver rounds n up to its partition granularity."""
        try:
            from cuda.bindings import driver as d

            dev, res = self._sm_resource()
            groups, _, _ = _ok(d.cuDevSmResourceSplitByCount(1, res, 0, n), "cuDevSmResourceSplitByCount")
            self._green = self._green_stream(dev, groups[0])
        except ImportError as e:
            return 0, f"no cuda.bindings ({e})"
        except (GpuError, AttributeError) as e:  # AttributeError: bindings older than green contexts
            return 0, f"no green context of {n} SMs: {e}"
        return int(groups[0].sm.smCount), ""

    def lanes(self, k: int) -> list:
        """`k` streams, each in its own green context over every SM of the device (core/lanes.py: a row's samples
        spread over contexts, since a small copy's level belongs to the context that issues it). Made once, at the
        run's setup; each stream gets its bulk-copy piece counters. Green contexts, not cuCtxCreate: 1.6 ms and
        10 MiB each instead of 0.3 s and 1 GiB, and work enqueued on their streams from the primary context reaches
        every buffer at its rate (docs/measurement.md). Raises GpuError where the driver cannot make them."""
        if len(self._lanes) < k:
            dev, res = self._sm_resource()
            while len(self._lanes) < k:
                self._lanes.append(self._green_stream(dev, res))
        return [lane[2] for lane in self._lanes[:k]]

    def _sm_resource(self):
        """(the device, its SM resource) for green contexts (cuda.bindings' driver API)."""
        from cuda.bindings import driver as d

        dev = _ok(d.cuDeviceGet(self.index), "cuDeviceGet")
        return dev, _ok(d.cuDeviceGetDevResource(dev, d.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM),
                        "cuDeviceGetDevResource")

    def _green_stream(self, dev, resource) -> tuple:
        """(green context, raw stream, CuPy stream with its bulk-copy counters): one green context over `resource`
        (the device's SMs, or a group split from them) and a stream in it; close() destroys both."""
        from cuda.bindings import driver as d

        desc = _ok(d.cuDevResourceGenerateDesc([resource], 1), "cuDevResourceGenerateDesc")
        gctx = _ok(d.cuGreenCtxCreate(desc, dev, d.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM),
                   "cuGreenCtxCreate")
        raw = _ok(d.cuGreenCtxStreamCreate(gctx, d.CUstream_flags.CU_STREAM_NON_BLOCKING, 0), "cuGreenCtxStreamCreate")
        s = _external_stream(int(raw), self.index)
        self._add_counters(s)
        return gctx, raw, s

    def bulk_sms_seen(self, src: int, dst: int, nbytes: int, stream=None) -> int:
        """One bulk copy of nbytes (un-gated, waited for) whose CTAs write the SM they run on: on how many
        distinct SMs they ran. The measured side of the kernel's placement (rows' sms_used)."""
        p = bulk.plan(nbytes, self.bulk_shape, self.sm_count, 1, self.bulk_placement().sms)
        words = self.sm_count * 32
        if not self._smids:
            self._smids = self.malloc(4 * words)
        s = stream or self.stream
        runtime.memsetAsync(self._smids, 0xFF, 4 * words, s.ptr)
        self.launch_bulk_copy(src, dst, nbytes, 1, s, smids=self._smids)
        out = np.zeros(p.blocks, dtype=np.uint32)
        runtime.memcpyAsync(out.ctypes.data, self._smids, 4 * p.blocks, runtime.memcpyDeviceToHost, s.ptr)
        self.wait(s, what="the bulk kernel's SM check")
        return len(set(out.tolist()) - {0xFFFFFFFF})

    def fill(self, ptr: int, nbytes: int, seed: int, stream=None) -> None:
        fn = self.function("pattern", "fill")
        s = stream or self.stream
        with s:
            fn((self.blocks_for(nbytes, 16),), (THREADS,), (np.uint64(ptr), np.uint64(nbytes), np.uint32(seed)))

    def verify(self, ptr: int, nbytes: int, seed: int, stream=None) -> int:
        """Count words of ptr[0:nbytes] that differ from pattern(seed); waits for the result."""
        fn = self.function("pattern", "verify")
        s = stream or self.stream
        runtime.memsetAsync(self._counter, 0, 8, s.ptr)
        with s:
            fn((self.blocks_for(nbytes, 16),), (THREADS,),
               (np.uint64(ptr), np.uint64(nbytes), np.uint32(seed), np.uint64(self._counter)))
        out = np.zeros(1, dtype=np.uint64)
        runtime.memcpyAsync(out.ctypes.data, self._counter, 8, runtime.memcpyDeviceToHost, s.ptr)
        self.wait(s, what="verify kernel")
        return int(out[0])

    def corrupt(self, ptr: int, nbytes: int, stream=None) -> None:
        """Overwrite up to 16 bytes in the middle of ptr[0:nbytes] (the IPCBENCH_FAULT_CORRUPT test hook)."""
        s = stream or self.stream
        n = min(16, nbytes)
        runtime.memsetAsync(ptr + ((nbytes - n) // 2 // 4) * 4, 0x5A, n, s.ptr)

    def gate(self, stream=None) -> int:
        """Enqueue a gate kernel; returns the ticket to pass to release()."""
        self._gate_target += 1
        fn = self.function("gate", "gate")
        s = stream or self.stream
        with s:
            fn((1,), (32,), (np.uint64(self._host_ptr), np.uint32(self._gate_target),
                             np.uint64(self._host_ptr + 4), np.uint64(int(GATE_TIMEOUT_S * 1e9))))
        return self._gate_target

    def release(self, ticket: int) -> None:
        self.host_words[0] = ticket

    def gate_timed_out(self, ticket: int) -> bool:
        return self.host_words[1] == ticket

    def gate_clock_mhz(self) -> float | None:
        """The SM clock the last released gate ran at while it held its stream (kernels/gate.cu: clock64 over
        %globaltimer), MHz; None where the gate held too briefly to tell. Read after the stream was waited for."""
        khz = int(self.host_words[2])
        return khz / 1e3 if khz else None

    def stamp(self, slot: int, stream=None) -> None:
        """Write the GPU's %globaltimer (ns) into stamp slot 0 or 1 when the stream reaches this point."""
        fn = self.function("gate", "stamp")
        s = stream or self.stream
        with s:
            fn((1,), (32,), (np.uint64(self._counter + STAMP_OFF + 8 * slot),))

    def read_stamps(self) -> tuple[int, int]:
        """The two stamps of the last stamped segment (call after the stream was waited for)."""
        out = np.zeros(2, dtype=np.uint64)
        runtime.memcpy(out.ctypes.data, self._counter + STAMP_OFF, 16, runtime.memcpyDeviceToHost)
        return int(out[0]), int(out[1])

    def wait(self, stream=None, timeout: float = 60.0, what: str = "GPU work", spin: bool = True) -> None:
        """Synchronize a stream, but give up with an error after `timeout` seconds instead of hanging (`spin`:
        core/poll.wait_until's)."""
        s = stream or self.stream
        ev = self.event(timing=False)
        ev.record(s)
        wait_until(lambda: ev.done, timeout, f"{what} on GPU {self.index}", max_sleep=1e-4, error=GpuError, spin=spin)

    def close(self) -> None:
        try:
            self.device.synchronize()
        finally:
            for ptr in list(self.allocations):
                runtime.free(ptr)
            self.allocations.clear()
            runtime.freeHost(self._host_ptr)
            greens = ([self._green] if self._green is not None else []) + self._lanes
            if greens:
                from cuda.bindings import driver as d

                for gctx, raw, _ in greens:
                    d.cuStreamDestroy(raw)
                    d.cuGreenCtxDestroy(gctx)
                self._green, self._lanes = None, []
