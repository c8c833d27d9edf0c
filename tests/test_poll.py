"""core/poll.wait_until with a fake clock and sleep (pure logic: no real waiting)."""

from __future__ import annotations

import pytest

from ipcbench.core.poll import FIRST_SLEEP_S, MAX_SLEEP_S, SPIN_S, wait_until
from ipcbench.errors import WorldError


class Clock:
    def __init__(self):
        self.t = 100.0
        self.sleeps = []

    def now(self):
        return self.t

    def sleep(self, s):
        self.sleeps.append(s)
        self.t += s


def test_returns_the_first_true_value_without_sleeping():
    c = Clock()
    assert wait_until(lambda: "ready", 1.0, "x", error=WorldError, clock=c.now, sleep=c.sleep) == "ready"
    assert c.sleeps == []


def test_spins_before_the_first_sleep():
    """A wait that ends within SPIN_S never sleeps (a sleep lasts the timer slack at least); one that does not
    starts sleeping once SPIN_S has passed."""
    c = Clock()
    polls = []

    def done():
        polls.append(c.t)
        c.t += SPIN_S / 10
        return len(polls) > 8

    assert wait_until(done, 1.0, "x", error=WorldError, clock=c.now, sleep=c.sleep)
    assert c.sleeps == []
    c2 = Clock()
    n = []

    def slow():
        n.append(1)
        c2.t += SPIN_S / 4
        return len(n) > 10

    wait_until(slow, 1.0, "x", error=WorldError, clock=c2.now, sleep=c2.sleep)
    assert 0 < len(c2.sleeps) <= 7 and c2.sleeps[0] == FIRST_SLEEP_S


def test_sleep_doubles_up_to_the_cap():
    c = Clock()

    def done():
        return 7 if len(c.sleeps) == 12 else 0

    assert wait_until(done, 10.0, "x", error=WorldError, clock=c.now, sleep=c.sleep) == 7
    assert c.sleeps[0] == FIRST_SLEEP_S and c.sleeps[1] == 2 * FIRST_SLEEP_S
    assert max(c.sleeps) == MAX_SLEEP_S and len(c.sleeps) == 12
    assert all(b == min(2 * a, MAX_SLEEP_S) for a, b in zip(c.sleeps, c.sleeps[1:]))


def test_timeout_names_what_was_awaited():
    c = Clock()
    with pytest.raises(WorldError, match=r"timed out after 0.01 s waiting for the peer"):
        wait_until(lambda: False, 0.01, "the peer", error=WorldError, clock=c.now, sleep=c.sleep)
    assert 0.01 <= sum(c.sleeps) <= 0.01 + MAX_SLEEP_S


def test_custom_error_type_and_busy_polling():
    c = Clock()
    polls = []

    def done():
        polls.append(1)
        c.t += 0.4  # time passes only while polling
        return False

    with pytest.raises(KeyError):
        wait_until(done, 1.0, "x", max_sleep=0, error=KeyError, clock=c.now, sleep=c.sleep)
    assert c.sleeps == [] and len(polls) == 4


def test_a_wait_that_must_not_spin_sleeps_from_its_first_miss():
    """spin=False (the wait on a timed batch, whose libraries' threads may share the core): no busy polls."""
    c = Clock()
    polls = []

    def done():
        polls.append(c.t)
        return len(polls) > 3

    assert wait_until(done, 1.0, "x", error=WorldError, clock=c.now, sleep=c.sleep, spin=False)
    assert c.sleeps[:3] == [FIRST_SLEEP_S, 2 * FIRST_SLEEP_S, 4 * FIRST_SLEEP_S] and len(polls) == 4


def test_the_event_ping_pong_chain_is_waited_for_without_spinning():
    """The cross-process event chain runs while both ranks wait for it: a rank bound to one core that polled it in a
    tight loop read the one-way time 2.3 or 4.6 us slower in a third of the runs on two H200s (suites/latency.py).
    Read from the source: the chain needs two processes' IPC events, which no fake here provides."""
    import inspect
    import re

    from ipcbench.suites import latency

    waits = re.findall(r"gpu\.wait\((.*?)\)\n", inspect.getsource(latency._event_chain), flags=re.S)
    chain = [w for w in waits if "ping-pong chain" in w]
    assert len(chain) == 1 and "spin=False" in chain[0], waits
