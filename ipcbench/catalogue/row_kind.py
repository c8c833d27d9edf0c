"""A row's kind: the facts that decide how far a row moves between runs, and so how its noise is stated (core/rows.py),
when its sampling may stop (core/context.py) and how compare judges it (judging/significance.py, bounds.py).

Computed here once, for one row (`RowKind`) or for a frame's columns (`band_index`, `time_sliced_mask`): its engine,
timing, whether its two ranks share a GPU, MPS, and from those whether the two processes' kernels are time-sliced, and
its size band (where a row's run-to-run movement changes character: docs/measurement.md). Pure; numpy only inside
the column functions.
"""

from __future__ import annotations

from dataclasses import dataclass

SMALL, MID, LARGE = "<= 256K", "256K-64M", ">= 64M"
BANDS = (SMALL, MID, LARGE)
SMALL_UP_TO = 256 << 10  # the small band's largest size (inclusive)
LARGE_FROM = 64 << 20  # the large band's smallest size: bandwidth-bound transfers
HANDOFF = "handoff"  # the timing of a hand-off between two processes' kernels (ping-pongs, the ring, shm staging)


def band(nbytes: int) -> str:
    """The size band of a transfer of `nbytes`."""
    return BANDS[band_of(nbytes)]


def band_of(nbytes: int) -> int:
    """Index into BANDS of one size."""
    return 0 if nbytes <= SMALL_UP_TO else (1 if nbytes < LARGE_FROM else 2)


def time_sliced(timing: str, same_gpu: bool, mps: bool | None) -> bool:
    """A hand-off between two processes of one GPU without MPS (`mps` false or not recorded): its time is the GPU
    scheduler's time slice, not a link's (two H100 runs minutes apart: rows 0.48x to 2.3x of each other)."""
    return timing == HANDOFF and bool(same_gpu) and not mps


@dataclass(frozen=True)
class RowKind:
    """One row's kind: `engine` and `timing` as its facts say (results.RowFacts), `same_gpu`, `mps` (None: not
    recorded) and its size in bytes."""

    engine: str
    timing: str
    nbytes: int
    same_gpu: bool = False
    mps: bool | None = None
    contexts: int = 1  # the contexts its samples spread over (core/lanes.py): more than one, its own floors

    @classmethod
    def of_row(cls, row) -> "RowKind":
        """The kind of a results.Row (or anything with its attributes) once its facts are described."""
        return cls(str(row.engine), str(row.timing), int(row.bytes), bool(row.same_gpu), row.mps,
                   int(getattr(row, "contexts", None) or 1))

    @property
    def band(self) -> str:
        return band(self.nbytes)

    @property
    def time_sliced(self) -> bool:
        return time_sliced(self.timing, self.same_gpu, self.mps)


def band_index(nbytes):
    """Index into BANDS of each size (an array of bytes): band_of over a column."""
    import numpy as np

    b = np.asarray(nbytes, dtype=float)
    return np.where(b <= SMALL_UP_TO, 0, np.where(b < LARGE_FROM, 1, 2))


def time_sliced_mask(timing, same_gpu, mps):
    """time_sliced over columns (array-likes; `mps` may hold missing values, read as not under MPS)."""
    import numpy as np
    import pandas as pd

    sliced_mps = pd.Series(mps, dtype="object").fillna(False).astype(bool).to_numpy()
    return (np.asarray(timing, dtype=object) == HANDOFF) & np.asarray(same_gpu, dtype=bool) & ~sliced_mps
