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

ORDER: tuple[str, ...] = ("copy", "kernel", "pool", "vmm", "staged", "nccl", "latency", "handles", "pipeline")

# The methods of the suites that measure transfer methods (core/methods.METHODS) over pairs.
SUITE_METHODS: dict[str, tuple[str, ...]] = {
    "copy": ("ce",),
    "kernel": ("sm_read", "sm_write", "sm_bulk_read", "sm_bulk_write"),
    "pool": ("pool_ce", "pool_sm_read", "pool_sm_write", "core_ce"),
    "vmm": ("vmm_ce", "vmm_sm_read", "vmm_sm_write"),
}
ALLTOALL_METHODS = ("ce",)  # methods the copy suite also runs as an all-to-all (suites/alltoall.py)
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


def alltoall_name(method_name: str) -> str:
    """The method name of a method's all-to-all rows."""
    return f"{method_name}_alltoall"


STAGED: dict[str, RowFacts] = {"shm_staged": RowFacts("shm", "shm", timing="handoff"),
                               "mpi_staged": RowFacts("mpi", "mpi", timing="host")}
_RING = RowFacts("sm", "legacy", pattern="ring", timing="handoff", access="write")

ROWS: dict[str, Mapping[str, RowFacts]] = {
    **{suite: method_facts(names) for suite, names in SUITE_METHODS.items()},
    "copy": {**method_facts(SUITE_METHODS["copy"]),
             **{alltoall_name(m): facts_of(METHOD_FACTS[m], pattern="alltoall", timing="window")
                for m in ALLTOALL_METHODS}},
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
