"""The one wait loop: poll a condition with a growing sleep until it holds or a deadline passes.

Every wait on another rank or on the GPU goes through `wait_until`, so that no wait can hang (a dead
peer becomes an error naming what was awaited) and so that the polling lag is the same everywhere.
`max_sleep=0` busy-polls (pair barriers that start a timed region: both sides must leave at once).
"""

from __future__ import annotations

import time
from typing import Callable

FIRST_SLEEP_S = 2e-6
MAX_SLEEP_S = 5e-5  # a sample waits ~5 times (GPU, peers): the lag adds to every sample (0.2 ms: 10% of a run)


class WaitTimeout(RuntimeError):
    """A condition did not hold within its timeout; the message says what was awaited."""


def wait_until(done: Callable[[], object], timeout: float, what: str, max_sleep: float = MAX_SLEEP_S,
               error: type[Exception] = WaitTimeout, clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep):
    """Return done()'s first true value; raise `error` after `timeout` seconds of false ones."""
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
