"""The one wait loop: poll a condition with a growing sleep until it holds or a deadline passes.

Every wait on another rank or on the GPU goes through `wait_until`, so that no wait can hang (a dead
peer becomes the caller's error, one of the project's, naming what was awaited) and so that the polling
lag is the same everywhere.
`max_sleep=0` busy-polls (pair barriers that start a timed region: both sides must leave at once).
"""

from __future__ import annotations

import time
from typing import Callable

FIRST_SLEEP_S = 2e-6
MAX_SLEEP_S = 5e-5  # a sample waits ~5 times (GPU, peers): the lag adds to every sample (0.2 ms: 10% of a run)


def wait_until(done: Callable[[], object], timeout: float, what: str, *, error: type[Exception],
               max_sleep: float = MAX_SLEEP_S, clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep):
    """Return done()'s first true value; raise `error` (one of the project's, ipcbench/errors.py, naming what
    was awaited) after `timeout` seconds of false ones."""
    value = done()
    if value:
        return value
    deadline = clock() + timeout
    delay = FIRST_SLEEP_S
    while True:
        if clock() > deadline:
            raise error(f"timed out after {timeout:g} s waiting for {what}")
        if max_sleep > 0:
            sleep(delay)
            delay = min(delay * 2, max_sleep)
        value = done()
        if value:
            return value
