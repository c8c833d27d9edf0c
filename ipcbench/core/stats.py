"""Sample statistics and unit conversions (pure Python, no GPU) shared by every suite."""

from __future__ import annotations

import math
import statistics
import zlib
from dataclasses import dataclass


@dataclass
class Summary:
    """Per-transfer time statistics over samples, in µs, and bandwidth in GB/s (1e9 B/s)."""

    median_us: float
    min_us: float
    max_us: float
    cv: float
    bw_median: float | None
    bw_max: float | None


def summarize(times_us: list[float], bytes_per_transfer: int | None) -> Summary:
    if not times_us:
        raise ValueError("no samples")
    med = statistics.median(times_us)
    mean = statistics.fmean(times_us)
    sd = statistics.pstdev(times_us) if len(times_us) > 1 else 0.0
    cv = sd / mean if mean > 0 else math.nan
    lo, hi = min(times_us), max(times_us)
    if bytes_per_transfer:
        bw_med = bytes_per_transfer / (med * 1e-6) / 1e9 if med > 0 else None
        bw_max = bytes_per_transfer / (lo * 1e-6) / 1e9 if lo > 0 else None
    else:
        bw_med = bw_max = None
    return Summary(med, lo, hi, cv, bw_med, bw_max)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    v = sorted(values)
    k = max(0, min(len(v) - 1, math.ceil(q / 100 * len(v)) - 1))
    return v[k]


def seed_for(rank: int, nbytes: int, sample: int, label: str) -> int:
    """The fill pattern's seed: different for every source rank, size, sample and method."""
    return zlib.crc32(f"{rank}:{nbytes}:{sample}:{label}".encode()) & 0xFFFFFFFF


def poison_seed(seed: int) -> int:
    return seed ^ 0x5A5A5A5A
