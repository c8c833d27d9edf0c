"""Planning of the host-staged paths (pure, no CUDA): chunks of a message through staging slots, the
shared segment's layout, and the tuning knobs from the environment (IPCBENCH_{SHM,MPI}_{CHUNK,SLOTS})."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from ipcbench.ipc.shm import AGREE_TAG, FLAG_BYTES, PAGE  # noqa: F401  (AGREE_TAG: re-exported)
from ipcbench.sizes import SizeError, fmt_size, parse_size

MiB = 1 << 20
# H200 pair, 64M/256M, this pipeline (2026-11-22): 8M x 3 slots 49.0-49.2 GB/s, 8M x 2 48.5-48.8,
# 16M x 2 50.5-50.8, 16M x 3 50.7-51.0 (a one-process probe on the 4x H200 test machine: 3 x 8M best at 52.2).
SHM_CHUNK = 16 * MiB
SHM_SLOTS = 3
# mpi_staged, same pair (Open MPI 4.1.6): 4M x 3 7.0-7.7 GB/s, 2M x 4 7.0-7.6, 1M x 3 5.8-6.3,
# 16M x 3 5.5-7.1, unchunked 5.1-5.3 (the naive blocking path: 6): chunked 4M it is.
MPI_CHUNK = 4 * MiB
MPI_SLOTS = 3
MAX_SLOTS = 16
MAX_CHUNK = 1 << 30

# uint32 word indices inside the flag area (64 bytes apart)
FULL_WORD = 0  # + 16 * slot
FREE_WORD = 256  # + 16 * slot
ABORT_WORD = 512
STATUS_WORD = {"src": 528, "dst": 544}
TIMEOUT_CODE = {"src": 1, "dst": 2}  # which wait timed out (written into that side's status word)

FLAG_TIMEOUT_S = 10.0

DATA_TAG = 4242  # mpi_staged chunks


@dataclass(frozen=True)
class ChunkPlan:
    """How one message of `nbytes` is cut into chunks that cycle through `slots` staging buffers."""

    nbytes: int
    chunk: int  # bytes per chunk (the last one may be shorter)
    slots: int

    @property
    def n_chunks(self) -> int:
        return -(-self.nbytes // self.chunk)

    def spans(self) -> list[tuple[int, int]]:
        """(offset, length) of every chunk of one message."""
        return [(o, min(self.chunk, self.nbytes - o)) for o in range(0, self.nbytes, self.chunk)]

    def describe(self) -> str:
        n = self.n_chunks
        return f"{n} chunk{'s' if n > 1 else ''} of {fmt_size(self.chunk)} through {self.slots} slots"


def plan_chunks(nbytes: int, chunk_max: int, slots: int) -> ChunkPlan:
    """chunk = min(nbytes, chunk_max): a small message is one chunk; a large one ceil(n / chunk_max)."""
    if nbytes <= 0:
        raise ValueError(f"message size must be positive (got {nbytes})")
    if not (0 < chunk_max <= MAX_CHUNK):
        raise ValueError(f"chunk size must be in 1..{MAX_CHUNK} bytes (got {chunk_max})")
    if not (1 <= slots <= MAX_SLOTS):
        raise ValueError(f"slots must be in 1..{MAX_SLOTS} (got {slots})")
    return ChunkPlan(nbytes, min(nbytes, chunk_max), slots)


def slot_of(chunk_index: int, slots: int) -> int:
    """Chunks use the slots round-robin, across message boundaries too (so small messages pipeline)."""
    return chunk_index % slots


def shm_layout(chunk: int, slots: int) -> tuple[int, int]:
    """(segment bytes, bytes per slot): a flag area, then `slots` page-aligned chunk buffers."""
    per_slot = -(-chunk // PAGE) * PAGE
    return FLAG_BYTES + slots * per_slot, per_slot


def shm_segment_bytes(env: Mapping[str, str] | None = None) -> int:
    """The /dev/shm segment one shm_staged pair maps at sizes of a chunk or more (IPCBENCH_SHM_* or the
    defaults): what /dev/shm must hold free, as staged pairs run one at a time."""
    p = staged_params(env)
    return shm_layout(p["shm_chunk"], p["shm_slots"])[0]


def staged_params(env: Mapping[str, str] | None = None) -> dict[str, int]:
    """Chunk sizes and slot counts from the environment (IPCBENCH_{SHM,MPI}_{CHUNK,SLOTS}) or defaults."""
    source = os.environ if env is None else env
    out = {}
    for key, default, kind in (("IPCBENCH_SHM_CHUNK", SHM_CHUNK, "size"), ("IPCBENCH_SHM_SLOTS", SHM_SLOTS, "int"),
                               ("IPCBENCH_MPI_CHUNK", MPI_CHUNK, "size"), ("IPCBENCH_MPI_SLOTS", MPI_SLOTS, "int")):
        text = source.get(key)
        if text is None or not text.strip():
            value = default
        else:
            try:
                value = parse_size(text) if kind == "size" else int(text)
            except (SizeError, ValueError):
                raise ValueError(f"{key}={text!r} is not a valid {'size' if kind == 'size' else 'number'}") from None
        if kind == "int" and not (1 <= value <= MAX_SLOTS):
            raise ValueError(f"{key}={value}: slots must be in 1..{MAX_SLOTS}")
        if kind == "size" and not (0 < value <= MAX_CHUNK):
            raise ValueError(f"{key}={value}: chunk must be in 1..{MAX_CHUNK} bytes")
        out[key[len("IPCBENCH_"):].lower()] = value
    return out
