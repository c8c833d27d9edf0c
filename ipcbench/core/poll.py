"""The one wait loop: poll a condition with a growing sleep until it holds or a deadline passes.

Every wait on another rank or on the GPU goes through `wait_until`, so that no wait can hang (a dead
peer becomes the caller's error, one of the project's, naming what was awaited) and so that the polling
lag is the same everywhere.
Every wait busy-polls for SPIN_S first, then sleeps, doubling from FIRST_SLEEP_S to `max_sleep`;
`max_sleep=0` busy-polls throughout (pair barriers that start a timed region: both sides must leave at once).
"""

from __future__ import annotations

import time
from typing import Callable

FIRST_SLEEP_S = 2e-6
MAX_SLEEP_S = 5e-5  # a sample waits ~5 times (GPU, peers): the lag adds to every sample (0.2 ms: 10% of a run)
# Busy-poll this long before the first sleep: most waits of a sample (a fill, a verify, the peer's exchange) end
# within it, and a sleep, however short it asks to be, lasts the kernel's timer slack (50 µs by default on Linux)
# at least: a profile of `all` on two H100s spent 210,000 sleeps in waits. Cores are not scarce here: one rank
# per GPU, and the CPU cost is bounded by this spin per wait.
SPIN_S = 2e-4
SPIN_POLLS = 10_000  # and at most this many polls (a clock that does not move cannot keep a wait spinning)
TIMER_SLACK_NS = 1000  # this process's sleeps overshoot by at most ~1 µs (prctl PR_SET_TIMERSLACK; Linux)


def _tighten_timer_slack() -> bool:
    """Ask Linux for a 1 µs timer slack (PR_SET_TIMERSLACK = 29) so the poll's short sleeps are short: best
    effort (False elsewhere or where refused)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(29, TIMER_SLACK_NS, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


TIMER_SLACK_SET = _tighten_timer_slack()


def wait_until(done: Callable[[], object], timeout: float, what: str, *, error: type[Exception],
               max_sleep: float = MAX_SLEEP_S, clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep, spin: bool = True):
    """Return done()'s first true value; raise `error` (one of the project's, ipcbench/errors.py, naming what
    was awaited) after `timeout` seconds of false ones. `spin=False`: sleep from the first miss (a wait during a
    timed batch, whose process may share its core with a library's progress thread: NCCL's proxy)."""
    value = done()
    if value:
        return value
    start = clock()
    deadline = start + timeout
    spin_until = start + ((SPIN_S if spin else 0.0) if max_sleep > 0 else timeout)
    delay = FIRST_SLEEP_S
    spins = 0
    while True:
        now = clock()
        if now > deadline:
            raise error(f"timed out after {timeout:g} s waiting for {what}")
        spins += 1
        if max_sleep > 0 and (now > spin_until or spins > SPIN_POLLS or not spin):
            sleep(delay)
            delay = min(delay * 2, max_sleep)
        value = done()
        if value:
            return value
