"""A row's identity, written once: the host, the GPU pair, the method, its direction and the size. check's judge
(an invalid row kept out of the baseline), compare's table (its identifying columns) and the selftest's rows against
their anchors all name a row by RowKey, and a GPU pair in words by pair_name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class RowKey:
    """What names a row across runs and verdicts (two runs' rows of one key are the same measurement)."""

    host: str
    src_gpu: int
    dst_gpu: int
    method: str
    direction: str
    bytes: int

    COLUMNS: ClassVar[tuple[str, ...]] = ("host", "src_gpu", "dst_gpu", "method", "direction", "bytes")

    @classmethod
    def of(cls, r) -> RowKey:
        """The key of a row: anything with the key's fields as attributes (a results.Row, a frame's itertuples
        row, a compare table's row)."""
        return cls(str(r.host), int(r.src_gpu), int(r.dst_gpu), str(r.method), str(r.direction), int(r.bytes))

    @property
    def pair(self) -> str:
        """The GPU pair in check's words (pair_name), its ranks unknown: the row as matched across runs."""
        return pair_name(self.src_gpu, self.dst_gpu)


def pair_name(src_gpu: int, dst_gpu: int, src_rank: int | None = None, dst_rank: int | None = None) -> str:
    """A GPU pair in check's words: "GPU 0 -> GPU 1"; two ranks on one GPU "GPU 0 ranks 2 -> 3", or "GPU 0 (same
    GPU)" where the ranks are not known (a row matched across runs)."""
    if src_gpu != dst_gpu:
        return f"GPU {src_gpu} -> GPU {dst_gpu}"
    if src_rank is None or dst_rank is None:
        return f"GPU {src_gpu} (same GPU)"
    return f"GPU {src_gpu} ranks {src_rank} -> {dst_rank}"


def pair_cell(src_gpu: int, dst_gpu: int, same_gpu: bool) -> str:
    """A GPU pair in a table's cell: "0→1", "0→0 (same GPU)", "all" for a row of every GPU (an all-to-all)."""
    pair = f"{src_gpu}→{dst_gpu}" if src_gpu >= 0 and dst_gpu >= 0 else "all"
    return pair + (" (same GPU)" if same_gpu else "")
