"""The bulk-copy kernel (kernels/bulk.cu: cp.async.bulk through shared memory) on a real Hopper GPU.

1. One process, one GPU: dst[0:n] == src[0:n] for sizes with awkward tails and pieces, several shapes, one
   pass and several passes per launch, and not one byte written past n.
2. `mpiexec -n 2 python -m ipcbench kernel` over two GPUs: every sm_bulk row verified, no number above the
   link, and the bulk methods' bandwidth printed beside the plain SM kernels' (read with `-s`).
Skipped without a GPU, below compute capability 9.0, and (2) with fewer than two GPUs.
"""

from __future__ import annotations

import pytest

from conftest import gpu_count
from gpu_mpi import run_ipcbench

SIZES = [4, 16, 20, 4096, 4096 + 16, 4096 + 20, (1 << 20) + 4, (1 << 20) + 48, 64 << 20, (64 << 20) + 12]
GUARD = 256  # bytes after n that must keep their poison


def hopper_or_skip(index: int = 0):
    if gpu_count() < 1:
        pytest.skip("no CUDA GPU")
    from cupy.cuda import runtime

    p = runtime.getDeviceProperties(index)
    if (p["major"], p["minor"]) < (9, 0):
        pytest.skip(f"GPU {index} is compute capability {p['major']}.{p['minor']}: bulk copies need 9.0")


@pytest.fixture(scope="module")
def gpus():
    """One core.gpu.Gpu per shape on GPU 0 (each compiles its own kernel)."""
    hopper_or_skip()
    from ipcbench.core.bulk import BulkShape
    from ipcbench.core.gpu import Gpu

    made = {s: Gpu(0, bulk_shape=BulkShape.parse(s)) for s in ("2x4x16", "1x3x64", "4x2x1", "2x4x16@8")}
    yield made
    for g in made.values():
        g.close()


@pytest.mark.gpu
@pytest.mark.timeout(300)
@pytest.mark.parametrize("shape", ["2x4x16", "1x3x64", "4x2x1", "2x4x16@8"])
@pytest.mark.parametrize("loops", [1, 3])
def test_bulk_copy_is_exact(gpus, shape, loops):
    import cupy

    gpu = gpus[shape]
    assert gpu.feature_support("bulk_copy") == (True, None)
    for n in SIZES:
        if loops > 1 and n < 4096:
            continue
        src = cupy.random.randint(0, 256, size=n, dtype=cupy.uint8)
        dst = cupy.full(n + GUARD, 0xAB, dtype=cupy.uint8)
        cupy.cuda.Device(0).synchronize()
        gpu.launch_bulk_copy(src.data.ptr, dst.data.ptr, n, loops)
        gpu.wait(what=f"bulk copy of {n} B")
        bad = int(cupy.count_nonzero(dst[:n] != src))
        assert bad == 0, f"{shape}, {n} B, {loops} passes: {bad} bytes differ"
        assert bool(cupy.all(dst[n:] == 0xAB)), f"{shape}, {n} B: bytes past the end were written"


@pytest.mark.gpu
def test_bulk_copies_on_many_streams_each_take_every_piece(gpus):
    """Each stream has its own piece counters (kernels/bulk.cu), more streams than one slab holds included;
    two copies in a row on one stream find them zeroed (the last CTA out resets them): all exact."""
    import cupy

    from ipcbench.core import bulk
    from ipcbench.core.gpu import BULK_COUNTER_SLOTS

    gpu = gpus["2x4x16"]
    n = (64 << 20) + 48
    assert bulk.plan(n, gpu.bulk_shape, gpu.sm_count, 1).dynamic  # a copy that uses the counters
    src = cupy.random.randint(0, 256, size=n, dtype=cupy.uint8)
    streams = [gpu.new_stream() for _ in range(BULK_COUNTER_SLOTS + 6)]
    for s in (streams[0], streams[BULK_COUNTER_SLOTS - 1], streams[BULK_COUNTER_SLOTS], streams[-1]):
        for loops in (3, 1):
            dst = cupy.zeros(n, dtype=cupy.uint8)
            cupy.cuda.Device(0).synchronize()
            gpu.launch_bulk_copy(src.data.ptr, dst.data.ptr, n, loops, stream=s)
            gpu.wait(s, what="bulk copy on an extra stream")
            assert int(cupy.count_nonzero(dst != src)) == 0, f"stream {streams.index(s)}, {loops} passes"


@pytest.mark.gpu
def test_bulk_copy_refuses_misaligned_pointers(gpus):
    import cupy

    from ipcbench.errors import GpuError

    buf = cupy.zeros(1 << 16, dtype=cupy.uint8)
    with pytest.raises(GpuError, match="16-byte aligned"):
        gpus["2x4x16"].launch_bulk_copy(buf.data.ptr + 4, buf.data.ptr + 8192, 4096)


@pytest.mark.gpu
def test_local_bulk_copy_bandwidth_is_printed(gpus):
    """Not a claim: the same-GPU copy rate of each shape at 256 MiB, for the record (HBM read + write)."""
    import cupy

    n, loops = 256 << 20, 10
    src = cupy.ones(n, dtype=cupy.uint8)
    dst = cupy.zeros(n, dtype=cupy.uint8)
    cupy.cuda.Device(0).synchronize()
    for shape, gpu in gpus.items():
        gpu.launch_bulk_copy(src.data.ptr, dst.data.ptr, n, 1)  # warm
        a, b = gpu.event(), gpu.event()
        a.record(gpu.stream)
        gpu.launch_bulk_copy(src.data.ptr, dst.data.ptr, n, loops)
        b.record(gpu.stream)
        gpu.wait()
        ms = gpu.elapsed_ms(a, b)
        print(f"local bulk copy {shape}: {n * loops / ms / 1e6:.0f} GB/s")
        assert ms > 0


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_local_bulk_copy_by_sm_count_is_printed():
    """Not a claim: the same-GPU copy rate of the default shape on N SMs (--sm-bulk 2x4x16@N), 256 MiB, beside
    the copy engine's on the same buffers. Local HBM, not a link: how the kernel's rate grows with its SMs."""
    import cupy

    from ipcbench.core.bulk import BulkShape
    from ipcbench.core.gpu import Gpu

    hopper_or_skip()
    n, loops = 256 << 20, 10
    src = cupy.ones(n, dtype=cupy.uint8)
    dst = cupy.zeros(n, dtype=cupy.uint8)
    sms = cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    for k in sorted({4, 8, 16, 32, sms // 2, sms}):
        gpu = Gpu(0, bulk_shape=BulkShape(sms=k))
        try:
            def timed(enqueue):
                enqueue(1)
                a, b = gpu.event(), gpu.event()
                a.record(gpu.stream)
                enqueue(loops)
                b.record(gpu.stream)
                gpu.wait()
                return n * loops / gpu.elapsed_ms(a, b) / 1e6

            bulk = timed(lambda c: gpu.launch_bulk_copy(src.data.ptr, dst.data.ptr, n, c))
            dst.fill(0)
            gpu.launch_bulk_copy(src.data.ptr, dst.data.ptr, n, 1)
            gpu.wait()
            assert bool((dst == 1).all()), f"@{k}: the copy is not exact"
            line = f"local bulk copy 2x4x16@{k:<3d} ({k:3d} of {sms} SMs): {bulk:7.0f} GB/s"
            if k == sms:
                ce = timed(lambda c: [gpu.copy_async(dst.data.ptr, src.data.ptr, n, gpu.stream) for _ in range(c)])
                line += f"   (copy engine, same buffers: {ce:.0f} GB/s)"
            print(line)
        finally:
            gpu.close()


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_bulk_methods_over_two_gpus(tmp_path):
    if gpu_count() < 2:
        pytest.skip("needs two GPUs")
    hopper_or_skip(0)
    hopper_or_skip(1)
    p, rows = run_ipcbench(tmp_path / "run", 2, "kernel", "--sizes", "64M:256M:x4", "--timeout", "120")
    assert p.returncode == 0, p.stderr[-3000:]
    bulk = [r for r in rows if r["method"].startswith("sm_bulk_")]
    assert {(r["method"], r["direction"]) for r in bulk} == {
        ("sm_bulk_read", "pull"), ("sm_bulk_read", "bidir"), ("sm_bulk_write", "push"), ("sm_bulk_write", "bidir")}
    for r in rows:
        assert r["verified"] == "true" and int(r["checks"]) >= 1, r
        limit = 1000 if r["direction"] == "bidir" else 500  # NVLink 4 x 18: 478 GB/s per direction
        assert 20 < float(r["bw_gbps_median"]) < limit, r
    plain = {(r["method"].replace("bulk_", ""), r["direction"], r["src_rank"], r["dst_rank"], r["bytes"]):
             float(r["bw_gbps_median"]) for r in rows if not r["method"].startswith("sm_bulk_")}
    print("\nmethod          direction  pair   size    bulk GB/s  plain GB/s  bulk/plain")
    for r in sorted(bulk, key=lambda r: (r["method"], r["direction"], int(r["bytes"]), r["src_rank"])):
        key = (r["method"].replace("bulk_", ""), r["direction"], r["src_rank"], r["dst_rank"], r["bytes"])
        b, s = float(r["bw_gbps_median"]), plain.get(key)
        ratio = f"{b / s:10.3f}" if s else "         -"
        print(f"{r['method']:15s} {r['direction']:9s}  {r['src_rank']}->{r['dst_rank']}  {int(r['bytes']) >> 20:4d}M  "
              f"{b:9.1f}  {'-' if s is None else f'{s:10.1f}'}  {ratio}")


@pytest.mark.gpu
@pytest.mark.timeout(300)
@pytest.mark.parametrize("shape, want", [("2x4x16@8", 8), ("2x4x16@16", 16), ("1x4x16@4", 8), ("2x4x16", None)])
def test_at_n_runs_on_n_sms(shape, want):
    """--sm-bulk ...@N: the kernel is confined to a green context of N SMs (the driver rounds 4 up to its
    partition of 8 on Hopper), and its CTAs are SEEN (%smid) on exactly that many SMs, for a copy large enough
    to give every CTA work; without @N they cover every SM. The copy stays exact."""
    import cupy

    from ipcbench.core import bulk
    from ipcbench.core.gpu import Gpu

    hopper_or_skip()
    gpu = Gpu(0, bulk_shape=bulk.BulkShape.parse(shape))
    try:
        where = gpu.bulk_placement()
        n = 256 << 20
        src = cupy.random.randint(0, 256, size=n, dtype=cupy.uint8)
        dst = cupy.zeros(n, dtype=cupy.uint8)
        cupy.cuda.Device(0).synchronize()
        seen = gpu.bulk_sms_seen(src.data.ptr, dst.data.ptr, n, gpu.bulk_stream())
        note = bulk.describe(gpu.bulk_shape, gpu.sm_count, where)
        print(f"{shape}: {where}, CTAs seen on {seen} SMs; {note}")
        if want is None:
            assert not where.confined and seen == gpu.sm_count
        else:
            assert where.confined and where.sms == want and seen == want, (where, seen)
            assert f"confined to {want} of {gpu.sm_count} SMs" in note
        assert int(cupy.count_nonzero(dst != src)) == 0
    finally:
        gpu.close()
