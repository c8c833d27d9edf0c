"""Message sizes: parse `--sizes` specs like `4K:256M`, `4K:256M:x4`, `8,64,4K`, and print sizes binary."""

from __future__ import annotations

import re

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


class SizeError(ValueError):
    """A malformed size specification; the message says what was wrong."""


def parse_size(text: str) -> int:
    """`4K` -> 4096, `256M` -> 268435456, `8` or `8B` -> 8 (binary units, as nvbandwidth prints)."""
    m = _SIZE_RE.match(text)
    if not m:
        raise SizeError(f"not a size: {text!r} (use a number with an optional B/K/M/G suffix, e.g. 4K)")
    value = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if value <= 0:
        raise SizeError(f"size must be positive: {text!r}")
    return value


def parse_sizes(spec: str, default_step: int = 2) -> list[int]:
    """A range `LO:HI[:xF]` (geometric, factor F, default `default_step`) or a comma list of sizes."""
    spec = spec.strip()
    if not spec:
        raise SizeError("empty")
    if ":" in spec:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            raise SizeError(f"bad range {spec!r}: use LO:HI or LO:HI:xF")
        lo, hi = parse_size(parts[0]), parse_size(parts[1])
        step = default_step
        if len(parts) == 3:
            m = re.fullmatch(r"\s*[xX*]?(\d+)\s*", parts[2])
            if not m or int(m.group(1)) < 2:
                raise SizeError(f"bad step {parts[2]!r} in {spec!r}: use x2, x4, ... (factor >= 2)")
            step = int(m.group(1))
        if lo > hi:
            raise SizeError(f"bad range {spec!r}: {parts[0]} is larger than {parts[1]}")
        sizes, s = [], lo
        while s <= hi:
            sizes.append(s)
            s *= step
        if sizes[-1] != hi:
            sizes.append(hi)
        return sizes
    parts = spec.split(",")
    if not any(p.strip() for p in parts):
        raise SizeError(f"no sizes in {spec!r}")
    if not all(p.strip() for p in parts):  # "4K,,8K": a size left out, never skipped
        raise SizeError(f"an empty size in {spec!r} (two commas, or one at an end): list sizes as 8,4K,1M")
    return sorted({parse_size(p) for p in parts})


def fmt_size(n: int) -> str:
    """4096 -> '4K', 268435456 -> '256M', 1000 -> '1000' (exact binary units only, else bytes)."""
    for unit, mult in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{unit}"
    return f"{n}"
