"""The bulk-copy methods (sm_bulk_read, sm_bulk_write) without a GPU: the --sm-bulk shape and its limits, which
GPUs may run them, how a copy is cut into bulk copies that CTAs take in turn (core/bulk.py), the method table and
the kernel suite's steps, and, on fakes (tests/fakes.py), that rows are verified where the fake GPU claims
compute capability 9.0 and that the steps are skipped with the reason where it claims 8.0. A fake tests this
LOGIC only: it copies bytes on the host as the plan says; whether kernels/bulk.cu does the same on a Hopper GPU
is tests/test_gpu_bulk.py's question. The kernel is compiled here for sm_90 where NVRTC can be loaded."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from fakes import FakeNode, HostMemory, FakeGpu
from ipcbench.cli import _bench_parser
from ipcbench.config import build_config
from ipcbench.core import bulk
from ipcbench.core.bulk import BulkShape
from ipcbench.core.methods import ENGINES, KERNEL_ENGINES, METHODS
from ipcbench.core.pair import SM_LOOP_MIN_SAMPLE_S, measure_pair, sample_factor
from ipcbench.core.sampler import SamplingRule
from ipcbench.errors import UsageError
from ipcbench.ipc.sharers import GPU_FEATURES
from ipcbench.suites.registry import plan
from test_run_on_fakes import cfg, fake_job, rows_of  # noqa: F401 - fake_job is a fixture

FAST = SamplingRule(min_time_s=2e-5)


# ---- the shape -----------------------------------------------------------------------------------

def test_default_shape():
    s = BulkShape()
    assert str(s) == "2x4x16" and s.chunk_bytes == 16 << 10
    assert s.smem_bytes == 4 * (16 << 10) + 4 * 8
    assert s.smem_per_sm <= bulk.SMEM_PER_SM
    assert s.defines() == ("BULK_CHUNK=16384", "BULK_STAGES=4")


@pytest.mark.parametrize("text, want", [("2x4x16", (2, 4, 16)), ("1x3x64", (1, 3, 64)), ("1X2X112", (1, 2, 112)),
                                        ("4x4x8k", (4, 4, 8)), ("32x2x1", (32, 2, 1)), ("2x4x16@16", (2, 4, 16, 16)),
                                        ("1x3x64@1", (1, 3, 64, 1))])
def test_parse(text, want):
    s = BulkShape.parse(text)
    assert (s.blocks_per_sm, s.stages, s.chunk_kib, s.sms) == (want + (0,))[:4]
    assert BulkShape.parse(str(s)) == s


@pytest.mark.parametrize("text, why", [
    ("2x4", "is not BxSxC"), ("axbxc", "is not BxSxC"), ("0x4x16", "B (CTAs per SM) in 1..32"),
    ("2x1x16", "S (stages) in 2..16"), ("2x4x0", "C (chunk KiB)"), ("1x16x16", "per CTA"),
    ("2x4x32", "per SM"), ("1x2x113", "C (chunk KiB)"), ("2x4x16@0", "N (SMs) in 1..1024"),
    ("2x4x16@", "is not BxSxC or BxSxC@N"), ("2x4x16@x", "is not BxSxC"),
])
def test_parse_refuses(text, why):
    with pytest.raises(ValueError, match=why.replace("(", r"\(").replace(")", r"\)")):
        BulkShape.parse(text)


def test_cli_option_reaches_the_config_and_meta():
    c = build_config(_bench_parser().parse_args(["kernel", "--sm-bulk", "1x3x32"]))
    assert c.bulk_shape == BulkShape(1, 3, 32) and c.options_meta()["sm_bulk"] == "1x3x32"
    c = build_config(_bench_parser().parse_args(["kernel"]))
    assert c.bulk_shape == BulkShape() and c.options_meta()["sm_bulk"] == "2x4x16"
    with pytest.raises(UsageError, match="--sm-bulk: '4x2x32'.*per SM"):
        build_config(_bench_parser().parse_args(["kernel", "--sm-bulk", "4x2x32"]))


# ---- which GPUs ----------------------------------------------------------------------------------

@pytest.mark.parametrize("cc, ok", [("9.0", True), ("10.0", True), ("12.0", True), ("8.0", False), ("8.9", False),
                                    ("7.0", False), ("weird", False)])
def test_support_by_compute_capability(cc, ok):
    got, why = bulk.support(cc, "GPU 0 (X)")
    assert got is ok and (why is None) is ok
    if not ok and cc != "weird":
        assert "compute capability >= 9.0" in why and f"GPU 0 (X) (compute capability {cc})" in why


def test_support_checks_the_shape_against_the_device():
    assert bulk.support("9.0", shape=BulkShape(1, 4, 32), smem_optin=227 << 10) == (True, None)
    assert bulk.support("9.0", shape=BulkShape(sms=132), sm_count=132) == (True, None)
    ok, why = bulk.support("9.0", "GPU 0", BulkShape(sms=133), sm_count=132)
    assert not ok and "133 SMs asked for" in why and "132" in why
    ok, why = bulk.support("12.0", "GPU 1", BulkShape(1, 4, 32), smem_optin=99 << 10)
    assert not ok and "--sm-bulk 1x4x32" in why and str(99 << 10) in why


# ---- the plan: pieces and CTAs -------------------------------------------------------------------

def covered(p, loops):
    """The launch's pieces in the order CTAs take them; asserts they go pass by pass and each pass tiles
    [0, body) exactly."""
    seq = bulk.sequence(p, loops)
    assert len(seq) == p.pieces * loops
    for k in range(loops):
        end = 0
        for off, size in seq[k * p.pieces:(k + 1) * p.pieces]:
            assert off == end, f"pass {k}: gap or overlap at {off} (expected {end})"
            assert off % 16 == 0 and size % 16 == 0 and 0 < size <= p.piece
            end = off + size
        assert end == p.body
    return seq


def take_like_the_kernel(total: int, blocks: int, stages: int, grab: int, seed: int,
                         dynamic: bool = True) -> tuple[Counter, list[int]]:
    """kernels/bulk.cu's loop, one step of one CTA at a time in a random order (CTAs at different speeds):
    each takes `grab` pieces at a time from the shared counter, S-1 pieces ahead of the one it stores,
    stops at the first stage that holds none, and the last CTA out zeroes the counters. Returns how often
    each piece was copied and the counters after. Not `dynamic`: CTA b takes pieces b, b+G, ... and the
    counters are never touched."""
    rng = random.Random(seed)
    counters = [0, 0]
    NONE = -1

    def take(cta):
        if not dynamic:
            g, cta["mine"] = cta["mine"], cta["mine"] + blocks
            if g >= total:
                cta["left"] = False
                return NONE
            return g
        if cta["left"] and cta["mine"] == cta["end"]:
            cta["mine"], counters[0] = counters[0], counters[0] + grab
            cta["end"] = cta["mine"] + grab
        g = NONE
        if cta["left"]:
            g = cta["mine"]
            cta["mine"] += 1
        if g == NONE or g >= total:
            cta["left"] = False
            return NONE
        return g

    ctas = []
    for b in range(blocks):
        cta = {"left": True, "i": 0, "done": False, "mine": 0 if dynamic else b, "end": 0}
        cta["held"] = [take(cta) for _ in range(stages - 1)] + [NONE]
        ctas.append(cta)
    copied: Counter = Counter()
    while not all(c["done"] for c in ctas):
        cta = rng.choice([c for c in ctas if not c["done"]])
        s = cta["i"] % stages
        if cta["held"][s] == NONE:
            cta["done"] = True
            if dynamic:
                counters[1] += 1
                if counters[1] == blocks:
                    counters[0] = counters[1] = 0
            continue
        copied[cta["held"][s]] += 1
        cta["held"][(cta["i"] + stages - 1) % stages] = take(cta)
        cta["i"] += 1
    return copied, counters


@pytest.mark.parametrize("total, blocks, stages, grab", [(1, 264, 4, 1), (7, 3, 2, 1), (1000, 264, 4, 1),
                                                         (5000, 32, 3, 5), (100, 100, 16, 1), (101, 4, 2, 33),
                                                         (7, 2, 4, 3)])
def test_taking_from_the_counter_copies_every_piece_once(total, blocks, stages, grab):
    """Whatever the CTAs' speeds, every piece of the sequence is copied exactly once and the counters end
    zeroed for the stream's next launch (a model of the kernel's loop: the logic, not the GPU)."""
    for seed in range(5):
        for dynamic in (True, False):
            copied, counters = take_like_the_kernel(total, blocks, stages, grab, seed, dynamic)
            assert copied == Counter(range(total)) and counters == [0, 0], f"dynamic={dynamic}"


@pytest.mark.parametrize("nbytes, loops, sms, dynamic", [
    (4096, 1, 0, False),          # one piece per CTA: the counter would only cost its round trips
    (32 << 20, 1, 0, False),      # 7.75 pieces per CTA
    (64 << 20, 1, 0, True),       # 15.5: drift starts to cost more than the counter
    (256 << 20, 110, 0, True),    # a sample's passes in one launch
    (4 << 20, 1, 8, True),        # 256 pieces over 16 CTAs
])
def test_counter_only_where_ctas_have_many_pieces(nbytes, loops, sms, dynamic):
    p = bulk.plan(nbytes, BulkShape(sms=sms), sm_count=132, loops=loops)
    assert p.dynamic == dynamic
    assert (p.pieces * loops // p.blocks >= bulk.DYNAMIC_MIN_SHARE) == dynamic


@pytest.mark.parametrize("sms, nbytes, loops, want", [
    (0, 256 << 20, 100, 1),     # the whole GPU: one piece per take
    (66, 256 << 20, 100, 2),    # half of it: twice the bytes per CTA per second
    (4, 256 << 20, 100, 33),    # 4 of 132 SMs
    (8, 256 << 20, 1, 17),
    (4, 4 << 20, 1, 8),         # 256 pieces over 8 CTAs: a quarter of a CTA's share
    (4, 4096, 1, 1),            # too small to give any CTA more than one
])
def test_grab_grows_as_the_grid_shrinks(sms, nbytes, loops, want):
    p = bulk.plan(nbytes, BulkShape(sms=sms), sm_count=132, loops=loops)
    assert p.grab == want
    assert p.grab * 4 <= max(4, p.pieces * loops // p.blocks)


@pytest.mark.parametrize("nbytes", [0, 4, 12, 16, 20, 4096, 4096 + 16, 4096 + 20, (1 << 20) + 48, (1 << 20) + 4,
                                    (64 << 20), (64 << 20) + 12, 3 * 16 * 1024 * 264 + 16])
@pytest.mark.parametrize("shape", [BulkShape(), BulkShape(1, 3, 64), BulkShape(4, 2, 1)])
def test_plan_tiles_the_copy(nbytes, shape):
    p = bulk.plan(nbytes, shape, sm_count=132)
    assert p.body + p.tail == nbytes and p.body % 16 == 0 and 0 <= p.tail < 16
    assert p.piece % 16 == 0 and 16 <= p.piece <= shape.chunk_bytes
    assert 1 <= p.blocks <= 132 * shape.blocks_per_sm and p.smem == shape.smem_bytes
    covered(p, 1)
    if p.body >= 132 * shape.blocks_per_sm * shape.chunk_bytes:
        assert p.piece == shape.chunk_bytes  # large copies move full chunks
    elif p.body:
        # smaller ones are cut so that every CTA has a piece: the smallest multiple of 16 B that spreads the
        # body over every CTA
        most = 132 * shape.blocks_per_sm
        assert p.piece == 16 or (p.piece - 16) * most < p.body <= p.piece * most


@pytest.mark.parametrize("nbytes, loops", [(256 << 20, 7), ((256 << 20) + 48, 3), (5000 * 16, 5), (16, 9)])
def test_passes_form_one_sequence(nbytes, loops):
    """Passes in one launch: the pieces of all passes form one sequence that the CTAs take from (so no CTA
    waits at a pass boundary), each pass still tiling the copy; the grid never has more CTAs than pieces."""
    p = bulk.plan(nbytes, BulkShape(), sm_count=132, loops=loops)
    covered(p, loops)
    assert p.blocks == min(132 * 2, p.pieces * loops)


@pytest.mark.parametrize("sms, want", [(0, 264), (16, 32), (1, 2), (200, 264)])
def test_plan_on_fewer_sms(sms, want):
    """`@N` caps the grid at N SMs' CTAs (never more SMs than the GPU has); the copy is still tiled exactly."""
    shape = BulkShape(sms=sms)
    p = bulk.plan(256 << 20, shape, sm_count=132, loops=3)
    assert p.blocks == want
    covered(p, 3)


@pytest.mark.parametrize("sms, green, confined, where, words", [
    (0, (0, ""), False, 132, "on all 132 SMs"),
    (200, (0, ""), False, 132, "on all 132 SMs"),
    (8, (8, ""), True, 8, "confined to 8 of 132 SMs by a green context ("),
    (4, (8, ""), True, 8, "confined to 8 of 132 SMs by a green context; 4 asked for"),
    (16, (0, "no green context of 16 SMs: CUDA_ERROR_NOT_SUPPORTED"), False, 16,
     "NOT confined to 16 SMs (no green context of 16 SMs: CUDA_ERROR_NOT_SUPPORTED)"),
])
def test_placement_says_where_the_kernel_may_run(sms, green, confined, where, words):
    """@N is a green context's SMs (rounded up by the driver), and the note says so; where none can be made
    the kernel runs unconfined, and the note never claims N SMs."""
    shape = BulkShape(sms=sms)
    p = bulk.placement(shape, 132, green)
    assert (p.confined, p.sms) == (confined, where)
    text = bulk.describe(shape, 132, p)
    assert words in text and f"--sm-bulk {shape}" in text
    if not confined and sms and sms < 132:
        assert "sms_used says on how many it ran" in text and "confined to" not in text.replace("NOT confined", "")


def test_plan_sizes_the_grid_for_the_placement():
    """A green context of 8 SMs where 4 were asked: the grid has 8 x B CTAs and takes pieces as 8 SMs do."""
    shape = BulkShape(sms=4)
    p8 = bulk.plan(256 << 20, shape, 132, 100, sms=8)
    assert p8.blocks == 16 and p8.grab == bulk.plan(256 << 20, BulkShape(sms=8), 132, 100).grab
    assert bulk.plan(256 << 20, shape, 132, 100).blocks == 8  # the shape's own ask without a placement


def test_plan_refuses_nonsense():
    with pytest.raises(ValueError):
        bulk.plan(-1, BulkShape(), 132)
    with pytest.raises(ValueError):
        bulk.plan(16, BulkShape(), 132, loops=0)


# ---- methods, suite, engine ----------------------------------------------------------------------

def test_method_table_and_feature():
    r, w = METHODS["sm_bulk_read"], METHODS["sm_bulk_write"]
    assert (r.engine, r.style, r.buffers, r.directions) == ("sm_bulk", "pull", "legacy", ("pull", "bidir"))
    assert (w.engine, w.style, w.buffers, w.directions) == ("sm_bulk", "push", "legacy", ("push", "bidir"))
    assert r.gpu_needs == w.gpu_needs == (bulk.FEATURE,) and bulk.FEATURE in GPU_FEATURES
    assert METHODS["sm_read"].gpu_needs == () and "sm_bulk" in KERNEL_ENGINES


def test_kernel_suite_steps():
    steps = {s.label: s for s in plan(["kernel"], 3, [4096, 1 << 20])}
    assert list(steps) == ["sm_read pull", "sm_read bidir", "sm_write push", "sm_write bidir", "sm_bulk_read pull",
                           "sm_bulk_read bidir", "sm_bulk_write push", "sm_bulk_write bidir"]
    for label in ("sm_bulk_read pull", "sm_bulk_write bidir"):
        assert steps[label].needs == ("legacy", "bulk_copy") and steps[label].rounds_ok
    assert steps["sm_read pull"].needs == ("legacy",)
    assert len(steps["sm_bulk_write push"].pairs) == 6 and len(steps["sm_bulk_read bidir"].pairs) == 3


def test_engine_loops_inside_one_launch_from_the_loop_size_and_samples_last_longer():
    gpu = FakeGpu(HostMemory(), l2_bytes=4096)  # loops in kernel from 16 KiB
    a, b = gpu.malloc(1 << 16), gpu.malloc(1 << 16)
    ENGINES["sm_bulk"].enqueue(gpu, gpu.stream, a, b, 1 << 16, 5)
    ENGINES["sm_bulk"].enqueue(gpu, gpu.stream, a, b, 4096, 3)
    assert [(n, loops) for n, loops, _ in gpu.bulk_launches] == [(1 << 16, 5), (4096, 1), (4096, 1), (4096, 1)]
    assert gpu.copies == 8
    m = METHODS["sm_bulk_read"]
    rule = SamplingRule(min_time_s=0.005, short_factor=1.0)
    assert sample_factor(m, 1 << 16, gpu, rule) == pytest.approx(SM_LOOP_MIN_SAMPLE_S / 0.005)
    assert sample_factor(m, 4096, gpu, rule) == 1.0


def test_a_fake_gpu_below_hopper_refuses_a_bulk_launch():
    gpu = FakeGpu(HostMemory(), cc="8.0")
    assert gpu.feature_support("bulk_copy")[0] is False
    with pytest.raises(AssertionError, match="compute capability >= 9.0"):
        gpu.launch_bulk_copy(gpu.malloc(64), gpu.malloc(64), 64)


# ---- on fakes: rows, and the unavailable path ----------------------------------------------------

@pytest.mark.parametrize("method, direction", [("sm_bulk_read", "pull"), ("sm_bulk_read", "bidir"),
                                               ("sm_bulk_write", "push"), ("sm_bulk_write", "bidir")])
def test_bulk_rows_are_verified_for_awkward_sizes(method, direction):
    """Sizes with tails and pieces of every kind (the fake GPU copies piece by piece as the plan deals them,
    so a byte the plan missed fails verification)."""
    sizes = [4, 20, 4096 + 16, 4096 + 20, 65536 + 48]
    slow = {"transfer_ns": lambda n: 1e6}  # 1 ms a transfer: few transfers in the 20 ms samples of in-kernel passes
    node = FakeNode(n=2, rule=FAST, slot_bytes=1 << 17, kinds=("legacy",), gpu_kw=[slow, slow])
    out = node.run(lambda ctx: measure_pair(ctx, "kernel", METHODS[method], direction, 0, 1, sizes))
    rows = out[0]
    assert [r.bytes for r in rows] == sizes
    assert all(r.verified and r.checks >= 1 for r in rows), [r.note for r in rows]
    driver = node.gpus[1] if direction == "pull" else node.gpus[0]
    assert driver.bulk_launches and not driver.launches  # the bulk kernel, not the plain one
    assert any(loops > 1 for _, loops, _ in driver.bulk_launches)  # 64 KiB: passes inside one launch


def test_a_broken_bulk_copy_fails_verification():
    node = FakeNode(n=2, rule=FAST, slot_bytes=8192, kinds=("legacy",), gpu_kw=[{"drop_copies": True}, {}])
    (row,), _ = node.run(lambda ctx: measure_pair(ctx, "kernel", METHODS["sm_bulk_write"], "push", 0, 1, [4096]))
    assert not row.verified


def test_run_on_hopper_fakes_measures_the_bulk_methods(fake_job, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    statuses, node = fake_job(cfg(out, suites=("kernel",), sizes=(1024, 4096 + 16), quiet=True,
                                  bulk_shape=BulkShape(1, 3, 8, sms=40)))
    assert statuses == [0, 0]
    rows = rows_of(out / "results.csv")
    got = {(r["method"], r["direction"]) for r in rows}
    assert {("sm_bulk_read", "pull"), ("sm_bulk_read", "bidir"), ("sm_bulk_write", "push"),
            ("sm_bulk_write", "bidir")} <= got
    assert all(r["verified"] == "true" for r in rows)
    assert json.loads((out / "meta.json").read_text())["options"]["sm_bulk"] == "1x3x8@40"
    for r in rows:  # each kernel row says how it ran
        if r["method"].startswith("sm_bulk_"):
            assert "cp.async.bulk kernel confined to 40 of 132 SMs by a green context" in r["note"]
            assert "--sm-bulk 1x3x8@40" in r["note"] and 1 <= int(r["sms_used"]) <= 40
        else:
            assert "SM copy kernel" in r["note"] and "--sm-copy 8x512x4" in r["note"] and r["sms_used"] == ""
    # the confined batches ran on the green context's stream, not the work stream
    for g in node.gpus:
        assert g.green_stream is not None


def test_without_green_contexts_the_rows_say_so_and_record_the_sms_seen(fake_job, tmp_path):  # noqa: F811
    """No green context can be made (a fake's answer): the bulk kernel runs unconfined, its rows say so and
    why, and sms_used holds how many SMs its CTAs were seen on (here: one per CTA, 2 x 16 = 32)."""
    out = tmp_path / "run"
    statuses, _ = fake_job(cfg(out, suites=("kernel",), sizes=(256 << 10,), quiet=True,
                               bulk_shape=BulkShape(2, 4, 16, sms=16)),
                           gpu_kw=[{"green_granularity": 0, "green_why": "no green context: fake says no"}] * 2)
    assert statuses == [0, 0]
    bulk_rows = [r for r in rows_of(out / "results.csv") if r["method"].startswith("sm_bulk_")]
    assert bulk_rows
    for r in bulk_rows:
        assert "NOT confined to 16 SMs (no green context: fake says no)" in r["note"]
        assert int(r["sms_used"]) == 32


@pytest.mark.parametrize("ccs", [("8.0", "8.0"), ("9.0", "8.0")])
def test_below_hopper_the_bulk_steps_are_skipped_with_the_reason(fake_job, tmp_path, capsys, ccs):  # noqa: F811
    """Any GPU of the node below 9.0: the sm_bulk steps write no rows and say why; the rest of the suite runs
    and the run succeeds (the feature is decided for the whole node, so both ranks of a pair agree)."""
    out = tmp_path / "run"
    statuses, node = fake_job(cfg(out, suites=("kernel",), sizes=(1024,)), gpu_kw=[{"cc": c} for c in ccs])
    assert statuses == [0, 0]
    rows = rows_of(out / "results.csv")
    assert {r["method"] for r in rows} == {"sm_read", "sm_write"} and all(r["verified"] == "true" for r in rows)
    text = capsys.readouterr().out
    first_bad = ccs.index("8.0")  # the reason of the first rank that lacks it
    for label in ("sm_bulk_read pull", "sm_bulk_read bidir", "sm_bulk_write push", "sm_bulk_write bidir"):
        assert (f"skipping {label}: sm_bulk methods need Hopper's bulk asynchronous copies (cp.async.bulk, "
                f"compute capability >= 9.0); this node has fake GPU {first_bad} (compute capability 8.0)") in text
    assert not any(g.bulk_launches for g in node.gpus)


# ---- the kernel compiles for Hopper (where NVRTC can be loaded) ---------------------------------

def nvrtc_or_skip():
    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()
        return nvrtc
    except Exception as e:  # no libnvrtc on this machine
        pytest.skip(f"NVRTC cannot be loaded here ({type(e).__name__})")


@pytest.mark.parametrize("shape", [BulkShape(), BulkShape(1, 3, 64), BulkShape(4, 2, 1), BulkShape(1, 16, 8)])
def test_the_kernel_compiles_for_sm_90(shape):
    """NVRTC compiles kernels/bulk.cu to a cubin for sm_90 (so ptxas accepts every bulk-copy and mbarrier
    instruction) for several shapes, and to one for sm_80 (where the kernel body is left out: the methods are
    never launched there). Needs only the NVRTC library, no GPU."""
    from ipcbench.core.gpu import kernel_source

    nvrtc = nvrtc_or_skip()
    src, include = kernel_source("bulk")
    for arch in ("sm_90", "sm_80"):
        prog = nvrtc.createProgram(src, "bulk.cu", [], [])
        opts = ["-std=c++17", f"-I{include}", f"-arch={arch}"] + [f"-D{d}" for d in shape.defines()]
        try:
            nvrtc.compileProgram(prog, opts)
        except Exception as e:
            pytest.fail(f"{arch} {shape}: {e}\n{nvrtc.getProgramLog(prog)}")
        assert len(nvrtc.getCUBIN(prog)) > 0
