"""The suites and what their rows are: ORDER (the one list of suite names, in the order `all` runs them and
the report lists them) and ROWS, for each suite every method its rows name and that method's RowFacts (engine,
sharing mechanism, pattern, timing): the one declaration rows are described by when written
(suites/registry.describe_rows) and when an older run is read (record/run.derive_facts). A method a suite
writes that is not here has rows that do not say what they are (tests/test_row_facts.py).
"""

from __future__ import annotations

from typing import Mapping

from ipcbench.catalogue.methods import METHOD_FACTS, facts_of, method_facts
from ipcbench.results import RowFacts

ORDER: tuple[str, ...] = ("copy", "kernel", "pool", "vmm", "staged", "nccl", "alltoall", "latency", "handles",
                          "pipeline")
# The suites with steps measured one pair at a time over the pairs --serial-pairs leaves them (suites/registry.Step
# .serial: host-staged paths, ping-pongs, handle costs, the pipeline); a run of none of them (check's copy and kernel)
# has no such step, so its --serial-pairs says nothing of its rows (tests/test_catalogue_serial.py holds it to the plan)
SERIAL_SUITES: tuple[str, ...] = ("staged", "nccl", "latency", "handles", "pipeline")

# The methods of the suites that measure transfer methods (core/methods.METHODS) over pairs.
SUITE_METHODS: dict[str, tuple[str, ...]] = {
    "copy": ("ce",),
    "kernel": ("sm_read", "sm_write", "sm_bulk_read", "sm_bulk_write"),
    "pool": ("pool_ce", "pool_sm_read", "pool_sm_write", "core_ce"),
    "vmm": ("vmm_ce", "vmm_sm_read", "vmm_sm_write"),
}
# The all-to-all's rows (suites/alltoall.py), each with the method whose one pair alone is its yardstick (the report
# holds a GPU's all-to-all aggregate against that method's rate from the GPU, and against NCCL's all-to-all).
ALLTOALL_ROWS: dict[str, str] = {"ce_alltoall": "ce", "sm_alltoall": "sm_write", "nccl_alltoall": "nccl"}
PIPELINE_DEPTHS = (2, 4, 8)  # the ring depths of the pipeline suite (suites/pipeline.py)

# The handle costs of the mechanisms whose export is a POSIX fd, in the order each side writes them
# (suites/share_costs.ShareCosts: the exporter's rows, then the importer's).
SHARE_COST_ROWS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "pool": (("pool_export_fd", "pool_export_pointer", "fd_transfer"), ("pool_import", "pool_import_pointer")),
    "core": (("core_export_pool", "core_export_buffer"), ("core_import_pool", "core_import_buffer")),
    "vmm": (("vmm_create", "vmm_export_fd", "vmm_fd_transfer"),
            ("vmm_import", "vmm_map", "vmm_set_access", "vmm_unmap_release")),
}
# The handle costs: host API calls, by the sharing mechanism each costs (suites/handles*.py write them).
HANDLE_CALLS: dict[str, tuple[str, ...]] = {
    "legacy": ("ipc_get_mem_handle", "ipc_open_mem_handle_first", "ipc_open_mem_handle_repeat",
               "ipc_close_mem_handle", "err_open_freed_handle", "err_open_exited_owner_handle",
               "err_open_own_handle", "err_host_pointer_handle"),
    "event": ("ipc_get_event_handle", "ipc_open_event_handle"),
    **{mech: exports + imports for mech, (exports, imports) in SHARE_COST_ROWS.items()},
}


def _alltoall(method_name: str) -> RowFacts:
    """The facts of an all-to-all's rows: its yardstick method's engine and mechanism, every pair at once, timed over
    one window per GPU."""
    return facts_of(METHOD_FACTS[method_name], pattern="alltoall", timing="window")


STAGED: dict[str, RowFacts] = {"shm_staged": RowFacts("shm", "shm", timing="handoff"),
                               "mpi_staged": RowFacts("mpi", "mpi", timing="host")}
_RING = RowFacts("sm", "legacy", pattern="ring", timing="handoff", access="write")

ROWS: dict[str, Mapping[str, RowFacts]] = {
    **{suite: method_facts(names) for suite, names in SUITE_METHODS.items()},
    # copy/ce_alltoall: the rows of runs made before the alltoall suite (same facts as alltoall/ce_alltoall)
    "copy": {**method_facts(SUITE_METHODS["copy"]), "ce_alltoall": _alltoall("ce")},
    "alltoall": {name: _alltoall(method) for name, method in ALLTOALL_ROWS.items()},
    "staged": STAGED,
    "nccl": {**method_facts(["nccl"]),
             "nccl_pingpong": RowFacts("nccl", "nccl", pattern="pingpong", timing="handoff")},
    "latency": {**method_facts(["ce", "sm_write", "sm_read"]), **STAGED,
                "sm_pingpong": RowFacts("sm", "legacy", pattern="pingpong", timing="handoff", access="write"),
                "event_pingpong": RowFacts("event", "event", pattern="pingpong", timing="handoff")},
    "handles": {m: RowFacts("api", mech, pattern="op", timing="host") for mech, ms in HANDLE_CALLS.items()
                for m in ms},
    "pipeline": {name: _RING for d in PIPELINE_DEPTHS for name in (f"ring_d{d}", f"ring_d{d}_latency")},
}
ROWS = {name: ROWS[name] for name in ORDER}  # in suite order


def row_facts(suite: str, method: str) -> RowFacts | None:
    """What the rows of (suite, method) are; None for a name no suite writes."""
    return ROWS.get(suite, {}).get(method)
