"""The catalogue (ipcbench/catalogue/): one table of methods, suites' rows and link rates that the measuring side
builds on and the reading side reads; these tests pin that the measuring side's own names agree with it."""

from __future__ import annotations

from ipcbench.catalogue import links, methods, suites
from ipcbench.core import link_rates
from ipcbench.core.methods import ENGINES, METHODS


def test_the_measuring_methods_are_the_catalogues_facts():
    assert list(METHODS) == list(methods.METHOD_FACTS)
    for name, m in METHODS.items():
        f = methods.METHOD_FACTS[name]
        assert (m.name, m.engine, m.style, m.buffers, m.directions, m.about) == \
            (f.name, f.engine, f.style, f.buffers, f.directions, f.about)
    assert set(methods.ENGINES) == set(ENGINES)
    assert {e for e, eng in ENGINES.items() if eng.two_sided} == set(methods.TWO_SIDED_ENGINES)


def test_every_row_name_the_suites_write_is_declared():
    """The handle costs and the all-to-all name their rows in the measuring code: each name is the catalogue's."""
    from ipcbench.suites.alltoall import NEEDS, SCHEDULES
    from ipcbench.suites.handles_core import CORE_COSTS
    from ipcbench.suites.handles_pool import POOL_COSTS
    from ipcbench.suites.handles_vmm import VMM_COSTS

    for c in (POOL_COSTS, CORE_COSTS, VMM_COSTS):
        assert set(c.exporter_rows + c.importer_rows) == set(suites.HANDLE_CALLS[c.label])
    assert set(SCHEDULES) == set(NEEDS) == set(suites.ALLTOALL_ROWS) == set(suites.ROWS["alltoall"])
    for name, method in suites.ALLTOALL_ROWS.items():  # an all-to-all's engine is its yardstick method's
        assert SCHEDULES[name].engine == METHODS[method].engine == suites.ROWS["alltoall"][name].engine
    for suite, names in suites.SUITE_METHODS.items():
        assert all(methods.suite_of(n) == suite for n in names)


def test_link_rates_have_one_implementation():
    assert link_rates.rates_of_entry is links.rates_of_entry and link_rates.NVLINK is links.NVLINK
