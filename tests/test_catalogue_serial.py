"""The catalogue's SERIAL_SUITES (what compare reads to know whether --serial-pairs says anything of a run's rows)
held to the plan itself: the suites whose steps are walked one pair at a time (suites/registry.Step.serial)."""

from __future__ import annotations

import pytest

from ipcbench.catalogue.suites import ORDER, SERIAL_SUITES
from ipcbench.suites.registry import plan


@pytest.mark.parametrize("quick", [False, True])
def test_the_serial_suites_are_those_with_one_pair_at_a_time_steps(quick):
    steps = plan(list(ORDER), 4, [4096, 1 << 20], quick, not quick)
    assert sorted({s.suite for s in steps if s.serial}) == sorted(SERIAL_SUITES)
