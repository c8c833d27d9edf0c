"""The bulk-copy engine's pure logic (kernels/bulk.cu, methods sm_bulk_read / sm_bulk_write): the kernel
shape (`--sm-bulk BxSxC`), which GPUs can run it, and how a copy is cut into bulk copies that the CTAs
take in turn. No CUDA here: core/gpu.py launches what `plan` says, and the CPU tests' fake GPU copies piece
by piece what `sequence` says, so a planning mistake (a byte missed or copied twice) fails verification
there.

How the kernel moves bytes: each CTA's one issuing thread loops over its pieces with Hopper's bulk
asynchronous copies (the TMA unit): global -> shared memory (`cp.async.bulk...mbarrier::complete_tx`,
completion through an mbarrier per stage), then shared -> global (`cp.async.bulk...bulk_group`), with
`stages` buffers of `chunk` bytes in shared memory so that loads and stores of several pieces are in
flight at once. The peer's pointer is a plain global address (CUDA IPC maps it into the unified address
space), so the same kernel reads a peer (pull: sm_bulk_read, on the destination GPU) or writes one
(push: sm_bulk_write, on the source GPU).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

FEATURE = "bulk_copy"  # the GPU feature a step of these methods needs (Step.needs, Gpu.feature_support)
MIN_CC = (9, 0)  # cp.async.bulk and mbarrier expect_tx: PTX ISA 8.0, sm_90 (Hopper) and newer
THREADS = 32  # one warp per CTA: thread 0 issues every bulk copy, threads 0-15 of CTA 0 copy the tail
ALIGN = 16  # bulk copies move multiples of 16 bytes between 16-byte aligned addresses
BARRIER_BYTES = 8  # one 64-bit mbarrier per stage, after the stages in dynamic shared memory
# Shared memory of one Hopper SM (228 KiB) and the most one CTA may opt in to (227 KiB); the driver keeps
# 1 KiB per resident CTA for itself. A shape that does not fit is refused before the run starts.
SMEM_PER_SM = 228 << 10
SMEM_PER_CTA = 227 << 10
SMEM_RESERVED_PER_CTA = 1 << 10


@dataclass(frozen=True)
class BulkShape:
    """Launch shape of the bulk-copy kernel: CTAs per SM x pipeline stages x chunk KiB (one stage's buffer),
    and on how many SMs (`sms`, 0: every SM of the GPU). `--sm-bulk 2x4x16@16` runs the kernel confined to
    16 SMs (a green context: `Placement`): how many SMs it takes to fill a link is what a kernel that
    overlaps communication with compute leaves to the compute (tests/bench_bulk_sweep.py --sms sweeps it).

    Default 2 x 4 x 16 KiB (128 KiB of shared memory per SM). Why: one piece is in flight per stage but
    the one being stored, so each SM keeps 2 x 3 loads of 16 KiB (96 KiB) and up to 2 x 2 stores in flight;
    over 132 SMs that is about 12 MiB, far above what a 478 GB/s link needs to cover a few microseconds of
    latency (about 1-2 MiB), while two CTAs per SM keep issuing when one waits on its barrier. 16 KiB
    pieces (not 32 or 64) keep copies of a few MiB spread over every CTA. The choice is to be confirmed
    by a sweep of several --sm-bulk values at 256 MiB on a Hopper pair (tests/bench_bulk_sweep.py;
    docs/suites.md, docs/measurement.md).
    """

    blocks_per_sm: int = 2
    stages: int = 4
    chunk_kib: int = 16
    sms: int = 0  # SMs the grid covers; 0: all of them

    @classmethod
    def parse(cls, text: str) -> "BulkShape":
        body, at, sms_text = text.lower().partition("@")
        try:
            b, s, c = (int(x) for x in body.rstrip("k").split("x"))
            sms = int(sms_text) if at else 0
        except ValueError:
            raise ValueError(f"{text!r} is not BxSxC or BxSxC@N (e.g. 2x4x16: CTAs per SM x stages x chunk KiB; "
                             f"2x4x16@16: on 16 SMs)") from None
        if not (1 <= b <= 32 and 2 <= s <= 16 and 1 <= c <= 112):
            raise ValueError(f"{text!r}: B (CTAs per SM) in 1..32, S (stages) in 2..16, C (chunk KiB) in 1..112")
        if at and not 1 <= sms <= 1024:
            raise ValueError(f"{text!r}: N (SMs) in 1..1024")
        shape = cls(b, s, c, sms)
        if shape.smem_bytes > SMEM_PER_CTA:
            raise ValueError(f"{text!r}: {s} stages of {c} KiB need {shape.smem_bytes / 1024:.1f} KiB of shared "
                             f"memory per CTA (at most {SMEM_PER_CTA >> 10} KiB)")
        if shape.smem_per_sm > SMEM_PER_SM:
            raise ValueError(f"{text!r}: {b} CTAs of {shape.smem_bytes / 1024:.1f} KiB need "
                             f"{shape.smem_per_sm / 1024:.1f} KiB of shared memory per SM (at most "
                             f"{SMEM_PER_SM >> 10} KiB on Hopper): fewer CTAs, stages or KiB")
        return shape

    @property
    def chunk_bytes(self) -> int:
        return self.chunk_kib << 10

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory of one CTA: the stages' buffers, then one mbarrier per stage."""
        return self.stages * self.chunk_bytes + self.stages * BARRIER_BYTES

    @property
    def smem_per_sm(self) -> int:
        return self.blocks_per_sm * (self.smem_bytes + SMEM_RESERVED_PER_CTA)

    def defines(self) -> tuple[str, ...]:
        """The compile-time constants of kernels/bulk.cu for this shape."""
        return (f"BULK_CHUNK={self.chunk_bytes}", f"BULK_STAGES={self.stages}")

    def __str__(self) -> str:
        return f"{self.blocks_per_sm}x{self.stages}x{self.chunk_kib}" + (f"@{self.sms}" if self.sms else "")

    def sms_used(self, sm_count: int) -> int:
        """SMs asked for on a GPU of `sm_count` SMs (all of them without @N)."""
        return min(sm_count, self.sms) if self.sms else sm_count


@dataclass(frozen=True)
class Placement:
    """Where the bulk kernel's CTAs may run. `sms`: the SMs its grid is sized for. `confined`: a green
    context of exactly `sms` SMs holds the kernel there (the driver rounds a request up to its partition
    granularity: 8 SMs on Hopper); otherwise the block scheduler puts the grid where it likes (`why` says
    why it is not confined), and a grid of N x B one-warp CTAs spread over up to N x B SMs (seen on an
    H100: @16 with 2 CTAs per SM ran on 32). Rows record the SMs the CTAs were seen on (`sms_used`)."""

    sms: int
    confined: bool = False
    why: str = ""


def placement(shape: BulkShape, sm_count: int, green: tuple[int, str]) -> Placement:
    """The placement for this shape, given what a green context of shape.sms SMs came out as: (its SMs, why
    none could be made); (0, why) where there is none. Without @N: every SM, nothing to confine."""
    if not shape.sms or shape.sms >= sm_count:
        return Placement(sm_count)
    got, why = green
    if got > 0:
        return Placement(got, confined=True)
    return Placement(shape.sms_used(sm_count), confined=False, why=why)


def describe(shape: BulkShape, sm_count: int, where: Placement) -> str:
    """The row note's words for this shape and placement on a GPU of `sm_count` SMs."""
    detail = (f"({shape.blocks_per_sm} one-warp CTAs per SM, {shape.stages} stages x {shape.chunk_kib} KiB of "
              f"shared memory each; --sm-bulk {shape})")
    if not shape.sms or shape.sms >= sm_count:
        return f"cp.async.bulk kernel on all {sm_count} SMs {detail}"
    if where.confined:
        asked = "" if where.sms == shape.sms else f"; {shape.sms} asked for, the driver partitions SMs in larger groups"
        return f"cp.async.bulk kernel confined to {where.sms} of {sm_count} SMs by a green context{asked} {detail}"
    return (f"cp.async.bulk kernel NOT confined to {shape.sms} SMs ({where.why}): a grid for {where.sms} SMs placed by "
            f"the block scheduler, sms_used says on how many it ran {detail}")


def support(cc: str, name: str = "", shape: BulkShape | None = None, smem_optin: int | None = None,
            smem_per_sm: int | None = None, sm_count: int | None = None) -> tuple[bool, str | None]:
    """(can this GPU run the bulk-copy kernel, why not): compute capability >= 9.0, and, where the device's
    shared-memory limits and SM count are given, room for the shape."""
    gpu = f"{name} (compute capability {cc})" if name else f"a GPU of compute capability {cc}"
    try:
        major, minor = (int(x) for x in str(cc).split(".")[:2])
    except ValueError:
        return False, f"sm_bulk methods: unknown compute capability {cc!r}"
    if (major, minor) < MIN_CC:
        return False, (f"sm_bulk methods need Hopper's bulk asynchronous copies (cp.async.bulk, compute "
                       f"capability >= {MIN_CC[0]}.{MIN_CC[1]}); this node has {gpu}")
    shape = shape or BulkShape()
    if smem_optin is not None and shape.smem_bytes > smem_optin:
        return False, (f"--sm-bulk {shape}: {shape.smem_bytes} B of shared memory per CTA, but {gpu} allows "
                       f"{smem_optin} B")
    if sm_count is not None and shape.sms > sm_count:
        return False, f"--sm-bulk {shape}: {shape.sms} SMs asked for, but {gpu} has {sm_count}"
    if smem_per_sm is not None and shape.smem_per_sm > smem_per_sm:
        return False, (f"--sm-bulk {shape}: {shape.blocks_per_sm} CTAs need {shape.smem_per_sm} B of shared memory "
                       f"per SM, but {gpu} has {smem_per_sm} B")
    return True, None


@dataclass(frozen=True)
class BulkPlan:
    """One launch of kernels/bulk.cu for `nbytes` (its arguments and grid).

    body    bytes moved by bulk copies: nbytes rounded down to a multiple of 16
    tail    the bytes after the body (0-15), copied once per launch with plain loads/stores by CTA 0
    piece   bytes per bulk copy: a multiple of 16, at most the chunk; a copy too small to give every CTA a
            full chunk is cut into smaller pieces, one per CTA, so that it still uses the whole GPU
    pieces  pieces per pass (the last one is shorter when piece does not divide body)
    blocks  CTAs in the grid
    dynamic whether the CTAs take their pieces from the launch's counter (else dealt statically; see `plan`)
    grab    pieces a CTA takes from the counter at a time (see `plan`)
    smem    dynamic shared memory bytes per CTA
    """

    nbytes: int
    body: int
    tail: int
    piece: int
    pieces: int
    blocks: int
    smem: int
    dynamic: bool = False
    grab: int = 1


# CTAs take their pieces from a counter (kernels/bulk.cu) only when each has at least this many on average:
# the counter's round trips cost about 1.8 us a launch (H100: a 4 KiB - 1 MiB copy took 3.4-3.7 us instead
# of 1.6-1.9), while drift between statically dealt CTAs builds up with their pieces (256 MiB, 62 pieces
# each: 220 us static, 198 us taken; 32 MiB, 7.75 each: 24.2 us static, 25.2 taken; 64 MiB, 15.5 each:
# 49.9 static, 48.5 taken).
DYNAMIC_MIN_SHARE = 12


@functools.lru_cache(maxsize=1024)
def plan(nbytes: int, shape: BulkShape, sm_count: int, loops: int = 1, sms: int | None = None) -> BulkPlan:
    """The launch for `loops` passes of `nbytes` on a grid for `sms` SMs (the placement's; default: what the
    shape asks for) of a GPU of `sm_count` (cached: every transfer of a batch asks for the same launch)."""
    if nbytes < 0 or loops < 1 or sm_count < 1:
        raise ValueError("nbytes >= 0, loops >= 1 and sm_count >= 1")
    sms = sms or shape.sms_used(sm_count)
    body = nbytes - nbytes % ALIGN
    most = sms * shape.blocks_per_sm
    per_cta = -(-body // most)  # bytes per CTA if the body were spread evenly over every CTA
    piece = min(shape.chunk_bytes, max(ALIGN, -(-per_cta // ALIGN) * ALIGN))
    pieces = -(-body // piece)
    blocks = max(1, min(most, pieces * loops))
    # On N of the GPU's SMs each CTA moves about sm_count / N times the bytes per second it would on all of
    # them, so it takes that many pieces per atomicAdd: one round trip to the counter per piece held 4 SMs
    # to 201 GB/s (H100, 256 MiB local copies) where taking them statically gave 358. Never more than a
    # quarter of a CTA's share, so that a small copy still spreads over every CTA.
    share = pieces * loops // blocks
    grab = max(1, min(-(-sm_count // sms), share // 4))
    return BulkPlan(nbytes, body, nbytes - body, piece, pieces, blocks, shape.smem_bytes,
                    share >= DYNAMIC_MIN_SHARE, grab)


def sequence(p: BulkPlan, loops: int = 1) -> list[tuple[int, int]]:
    """(offset, size) of every bulk copy of a launch of `loops` passes: the kernel keeps one sequence
    g = 0 .. pieces*loops-1 (piece g % pieces of pass g // pieces). With `p.dynamic` each CTA takes the next
    piece from a counter when it has room for one, so which CTA copies which piece is timing (a slower CTA
    takes fewer) and every CTA ends within about one piece's time of the others; otherwise CTA b copies
    g = b, b+G, .... Either way what is copied, and how often, is this list (kernels/bulk.cu says why)."""
    out = []
    for g in range(p.pieces * loops):
        off = (g % p.pieces) * p.piece
        out.append((off, min(p.piece, p.body - off)))
    return out
