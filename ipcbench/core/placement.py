"""Where in its buffers a sample's transfer lies: the samples of one row rotate over several placements.

A small transfer's rate depends on where its buffers lie (an H200 read 4 KiB copies at 2.558-2.666 GB/s by
allocation, each placement steady within 0.05%), and one process's buffers lie at one place for the whole run.
Measured at one place, a row's samples agree with each other and not with the next process's, whose buffers lie
elsewhere: its noise then says nothing about how far it moves between runs. Rotating the samples over
`placements` places of the allocation (a new 2 MiB page, another 64 KiB alignment and other address bits each)
puts that variation inside the run, so the median is taken over placements and the noise holds their spread
(docs/measurement.md, "What moves a row between runs").

Both ranks of a pair compute the same offset from numbers they hold alike (sample index, size, slot size).
"""

from __future__ import annotations

# The k-th place: (2 MiB + 64 KiB) x (2^k - 1): 0, 2.06M, 6.2M, 14.4M, 30.9M, 63.8M (the selftest's anchors use
# the first five: selftest/anchor.py).
STEP = (2 << 20) + (64 << 10)
MAX_PLACEMENTS = 8
# Every size up to this many bytes gets all of its places, whatever the largest size of the run (the buffers
# grow by the places' span where they must: run/runner.slot_with_places); larger transfers take the places that
# fit (a transfer of 64 MiB or more moves less than 0.3% between runs: nothing to place).
PLACED_BYTES = 32 << 20


def place_offset(k: int) -> int:
    return STEP * ((1 << k) - 1)


def usable(nbytes: int, slot_bytes: int, placements: int) -> int:
    """How many of the first `placements` places fit a transfer of `nbytes` in a slot of `slot_bytes` (>= 1)."""
    n = 1
    while n < min(placements, MAX_PLACEMENTS) and place_offset(n) + nbytes <= slot_bytes:
        n += 1
    return n


def offset(sample: int, nbytes: int, slot_bytes: int, placements: int) -> int:
    """Byte offset of sample `sample`'s source and destination within their slots."""
    return place_offset(sample % usable(nbytes, slot_bytes, placements))


def span(placements: int) -> int:
    """The slot room the places need beyond a transfer's own bytes."""
    return place_offset(max(1, min(placements, MAX_PLACEMENTS)) - 1)
