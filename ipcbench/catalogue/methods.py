"""The transfer methods as facts: which engine moves the bytes, how (push or pull), between which buffers,
in which directions. core/methods.py gives each its behaviour (Method: engines, batches); the reader needs
only these facts (a row's engine, access and sharing mechanism; which suite measures a method). Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass

from ipcbench.results import ACCESS, RowFacts

ENGINES = ("ce", "sm", "sm_bulk", "nccl")  # what moves a transfer's bytes (core/methods.ENGINES: their code)
TWO_SIDED_ENGINES = ("nccl",)  # both ranks drive matched operations; the engine's library shares the memory


@dataclass(frozen=True)
class MethodFacts:
    name: str
    engine: str  # one of ENGINES
    style: str  # the one-way direction this method drives: "push" (P2P write) or "pull" (P2P read)
    buffers: str  # a buffer kind of ipc/sharers.BUFFER_KINDS: "legacy", "pool", "vmm", "core"
    directions: tuple[str, ...]
    about: str

    @property
    def mechanism(self) -> str:
        """How the two processes share the memory: the buffer kind, or a two-sided engine's own library."""
        return self.engine if self.engine in TWO_SIDED_ENGINES else self.buffers


def _m(name, engine, style, buffers, directions, about) -> MethodFacts:
    return MethodFacts(name, engine, style, buffers, directions, about)


METHOD_FACTS: dict[str, MethodFacts] = {m.name: m for m in (
    _m("ce", "ce", "push", "legacy", ("push", "pull", "bidir"),
       "cudaMemcpyAsync between a local buffer and a peer's legacy-IPC buffer"),
    _m("sm_read", "sm", "pull", "legacy", ("pull", "bidir"),
       "SM kernel on the destination GPU loading from the peer's legacy-IPC buffer"),
    _m("sm_write", "sm", "push", "legacy", ("push", "bidir"),
       "SM kernel on the source GPU storing into the peer's legacy-IPC buffer"),
    _m("sm_bulk_read", "sm_bulk", "pull", "legacy", ("pull", "bidir"),
       "bulk-copy kernel (cp.async.bulk, Hopper) on the destination GPU pulling the peer's legacy-IPC buffer"),
    _m("sm_bulk_write", "sm_bulk", "push", "legacy", ("push", "bidir"),
       "bulk-copy kernel (cp.async.bulk, Hopper) on the source GPU pushing into the peer's legacy-IPC buffer"),
    _m("pool_ce", "ce", "push", "pool", ("push", "pull", "bidir"),
       "cudaMemcpyAsync to/from a pointer imported from the peer's IPC memory pool"),
    _m("pool_sm_read", "sm", "pull", "pool", ("pull", "bidir"),
       "SM kernel loading from a pointer imported from the peer's memory pool"),
    _m("pool_sm_write", "sm", "push", "pool", ("push", "bidir"),
       "SM kernel storing into a pointer imported from the peer's memory pool"),
    _m("core_ce", "ce", "push", "core", ("push", "pull"),
       "cudaMemcpyAsync to/from a buffer imported through cuda.core (Buffer.from_ipc_descriptor)"),
    _m("vmm_ce", "ce", "push", "vmm", ("push", "pull", "bidir"),
       "cudaMemcpyAsync to/from the peer's cuMemCreate allocation, imported from its POSIX fd and mapped here"),
    _m("vmm_sm_read", "sm", "pull", "vmm", ("pull", "bidir"),
       "SM kernel loading from the peer's cuMemCreate allocation mapped here (cuMemMap)"),
    _m("vmm_sm_write", "sm", "push", "vmm", ("push", "bidir"),
       "SM kernel storing into the peer's cuMemCreate allocation mapped here (cuMemMap)"),
    _m("nccl", "nccl", "push", "legacy", ("push", "bidir"),
       "ncclSend on the source rank, ncclRecv on the destination (a 2-rank communicator per GPU pair)"),
)}


def facts_of(method: MethodFacts, **kw) -> RowFacts:
    """The facts of a method's rows: its engine, its sharing mechanism, its style as its access."""
    return RowFacts(engine=method.engine, mechanism=method.mechanism, access=ACCESS[method.style], **kw)


def method_facts(names: list[str] | tuple[str, ...]) -> dict[str, RowFacts]:
    return {name: facts_of(METHOD_FACTS[name]) for name in names}


def suite_of(method_name: str) -> str:
    """The suite whose rows a method's are (the one `ipcbench all` measures it in): copy for the legacy copy
    engine, kernel for the legacy kernels, pool for memory-pool and cuda.core memory, vmm for VMM memory."""
    m = METHOD_FACTS[method_name]
    if m.buffers == "legacy":
        return "copy" if m.engine == "ce" else "kernel"
    return "vmm" if m.buffers == "vmm" else "pool"
