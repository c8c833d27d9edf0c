"""Will IPC work here? `ipcbench info`'s readiness items, one fact each with its consequence.

Host items need no GPU: the PID and IPC namespaces (ranks in different containers cannot share GPU
memory), /dev/shm against what the host-staged path maps, the files CUDA's driver left there for interprocess
events of processes that have ended (ipc/event_files.py), Yama's ptrace_scope. GPU items: MIG mode,
fabric handles (supported by the device, and permitted here or not) and P2P per pair. Each reader takes
its root, its readings or its query as an argument, so that tests feed it fake /proc trees and fake
drivers; nothing here imports CUDA.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import asdict, dataclass, field

from ipcbench.ipc import event_files
from ipcbench.ipc.shm import SHM_DIR
from ipcbench.sizes import fmt_size
from ipcbench.suites.staged_plan import shm_segment_bytes, staged_params

# include/linux/proc_ns.h: the initial (host's) namespaces have fixed inode numbers.
HOST_NS_INODE = {"pid": 0xEFFFFFFC, "ipc": 0xEFFFFFFF}
PROC = "/proc"
YAMA = "sys/kernel/yama/ptrace_scope"
PTRACE_SCOPES = {0: "classic", 1: "restricted", 2: "admin-only", 3: "no attach"}
DOCKER_SHM = 64 << 20  # Docker's default /dev/shm


def _amount(n: int) -> str:
    """Bytes as MiB, or GiB from 1 GiB up, one decimal (free space is rarely a whole unit)."""
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


@dataclass(frozen=True)
class Item:
    """One readiness fact. ok: True nothing in IPC's way, False something is, None cannot tell here."""

    name: str  # key: pid_namespace, ipc_namespace, dev_shm, ptrace_scope, mig, fabric_handles, p2p
    label: str  # as printed
    value: str  # what was found, as printed
    ok: bool | None
    consequence: str
    facts: dict = field(default_factory=dict)  # the readings behind `value`

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        mark = {True: "ok", False: "NO", None: "??"}[self.ok]
        return f"  {mark}  {self.label}: {self.value}: {self.consequence}"


# ---- host ----------------------------------------------------------------------------------------

def namespace(kind: str, proc: str | None = None) -> dict:
    """This process's `kind` namespace: its id (as /proc/self/ns/<kind> names it), inode, and whether it is
    the host's (the initial namespace's fixed inode; None where unreadable)."""
    try:
        link = os.readlink(os.path.join(proc or PROC, "self", "ns", kind))
    except OSError as e:
        return {"id": None, "inode": None, "host": None, "error": e.strerror or str(e)}
    m = re.fullmatch(r"\w+:\[(\d+)\]", link)
    inode = int(m.group(1)) if m else None
    return {"id": link, "inode": inode, "host": None if inode is None else inode == HOST_NS_INODE[kind]}


def _ns_value(ns: dict) -> str:
    if ns["id"] is None:
        return f"unreadable ({ns.get('error')})"
    if ns["host"] is None:
        return f"{ns['id']} (not an id this tool can place)"
    return f"{ns['id']}, " + ("the host's" if ns["host"] else "not the host's (a container's or a pod's)")


def pid_namespace_item(proc: str | None = None) -> Item:
    ns = namespace("pid", proc)
    return Item("pid_namespace", "PID namespace", _ns_value(ns), True if ns["host"] else None,
                "ranks in different PID namespaces (other containers or pods) cannot use CUDA IPC between "
                "them; run `ipcbench info` in each and compare this id", ns)


def ipc_namespace_item(proc: str | None = None) -> Item:
    ns = namespace("ipc", proc)
    return Item("ipc_namespace", "IPC namespace", _ns_value(ns), True if ns["host"] else None,
                "ranks meet in POSIX shared memory (/dev/shm: the host-staged path, CUDA's interprocess "
                "events) and under MPS only where they share it; a container with its own IPC namespace "
                "usually has its own /dev/shm too (docker --ipc=host, or one pod); compare this id", ns)


def dev_shm_item(shm_dir: str = SHM_DIR, env: dict | None = None, usage=shutil.disk_usage) -> Item:
    """/dev/shm's size and free space against the segment one shm_staged pair maps (suites/staged_plan)."""
    try:
        need = shm_segment_bytes(env)
        p = staged_params(env)
        plan = f"{fmt_size(p['shm_chunk'])} x {p['shm_slots']} slots + flags, one pair at a time"
    except ValueError as e:
        return Item("dev_shm", shm_dir, "cannot say what the host-staged path needs", False, str(e), {})
    try:
        u = usage(shm_dir)
    except OSError as e:
        return Item("dev_shm", shm_dir, f"absent ({e.strerror or e})", False,
                    "shm_staged cannot run (its segment lives there); CUDA's interprocess events put files "
                    "there too", {"need_bytes": need})
    facts = {"size_bytes": int(u.total), "free_bytes": int(u.free), "need_bytes": need}
    value = f"{_amount(int(u.total))}, {_amount(int(u.free))} free; the host-staged path needs {_amount(need)} ({plan})"
    if u.free < need:
        return Item("dev_shm", shm_dir, value, False,
                    "shm_staged cannot allocate its segment and its rows fail: enlarge it (docker --shm-size, "
                    "a memory-backed emptyDir in a pod) or lower IPCBENCH_SHM_CHUNK / IPCBENCH_SHM_SLOTS", facts)
    small = (f"; {_amount(DOCKER_SHM)} is Docker's default, shared with NCCL's and MPI's shared-memory "
             f"transports" if u.total <= DOCKER_SHM else "")
    return Item("dev_shm", shm_dir, value, True, "enough for shm_staged" + small, facts)


EVENT_FILES = ("the CUDA driver's files for interprocess event handles (cudaIpcGetEventHandle), which neither "
               "destroying the event nor the process's end removes")
SHOWN_FILES = 4  # named in the line; every one in the facts (`ipcbench info --json`)
# Removes each cuda.shm file named as the driver names them (ipc/event_files.NAME: the pid in hex, second to last)
# whose pid is above 0 and has no /proc entry: the rule of stale(); any other name is left alone
REMOVE_ENDED = ('bash -c \'for f in {dir}/cuda.shm.*; do n=${{f##*/}}; '
                '[[ $n =~ ^cuda\\.shm\\.([0-9a-fA-F]+\\.)?([0-9a-fA-F]+)\\.[0-9a-fA-F]+$ ]] || continue; '
                'p=$((16#${{BASH_REMATCH[2]}})); [ "$p" -gt 0 ] && [ ! -e /proc/$p ] && rm -f -- "$f"; done\'')


def _kib(n: int) -> str:
    return f"{n / 1024:.0f} KiB" if n < 1 << 20 else _amount(n)


def event_files_item(shm_dir: str = SHM_DIR, alive=event_files.pid_alive, proc: str | None = None) -> Item:
    """The driver's event files in `shm_dir` whose process has ended (ipc/event_files.stale): named, counted and
    sized, with how to remove them; nothing is removed here. Judged in this PID namespace: where it is not the host's
    and /dev/shm may be shared with others (the host's IPC namespace), a pid not seen here may run elsewhere."""
    files = event_files.listing(shm_dir)
    ended = [f for f in files if not alive(f.pid)]
    total = sum(f.size for f in ended)
    running = f"; {len(files) - len(ended)} of running processes" if len(files) > len(ended) else ""
    facts = {"count": len(ended), "bytes": total, "running": len(files) - len(ended),
             "files": [{"name": f.name, "pid": f.pid, "bytes": f.size} for f in ended]}
    label = f"CUDA event files in {shm_dir}"
    if not ended:
        return Item("event_files", label, "none left by ended processes" + running, True,
                    f"{EVENT_FILES}; ipcbench removes its own at the end of every run", facts)
    names = ", ".join(f"{f.name} (pid {f.pid})" for f in ended[:SHOWN_FILES])
    more = f" and {len(ended) - SHOWN_FILES} more" if len(ended) > SHOWN_FILES else ""
    value = f"{len(ended)} left by ended processes, {_kib(total)}: {names}{more}{running}"
    how = ("rm -f " + " ".join(f.path for f in ended) if len(ended) <= SHOWN_FILES
           else REMOVE_ENDED.format(dir=shm_dir))
    pid_ns, ipc_ns = namespace("pid", proc)["host"], namespace("ipc", proc)["host"]
    elsewhere = ("; this is not the host's PID namespace: a process of another container sharing this /dev/shm is "
                 "not seen here, so check before removing" if pid_ns is not True else "")
    return Item("event_files", label, value, None if pid_ns is not True and ipc_ns is True else False,
                f"{EVENT_FILES}; nothing uses them once their process has ended, and each holds /dev/shm memory until "
                f"removed (enough fill it){elsewhere}; remove them with: {how}", facts)


def ptrace_scope_item(proc: str | None = None) -> Item:
    path = os.path.join(proc or PROC, YAMA)
    try:
        with open(path) as f:
            scope: int | None = int(f.read().strip())
    except FileNotFoundError:
        scope = None
    except (OSError, ValueError) as e:
        return Item("ptrace_scope", "ptrace_scope", f"unreadable ({e})", True,
                    "ipcbench passes fds over a Unix socket (SCM_RIGHTS), not pidfd_getfd: unaffected", {})
    value = "absent (no Yama)" if scope is None else f"{scope} ({PTRACE_SCOPES.get(scope, 'unknown')})"
    others = ("tools that take a peer's fds with pidfd_getfd can here" if not scope else
              "tools that take a peer's fds with pidfd_getfd fail between sibling ranks here (they need 0, "
              "or CAP_SYS_PTRACE)")
    return Item("ptrace_scope", "ptrace_scope", value, True,
                f"ipcbench passes fds over a Unix socket (SCM_RIGHTS), not pidfd_getfd: unaffected; {others}",
                {"ptrace_scope": scope})


def host_items(proc: str | None = None, shm_dir: str = SHM_DIR, env: dict | None = None,
               usage=shutil.disk_usage) -> list[Item]:
    """Everything that can be said without a GPU."""
    return [pid_namespace_item(proc), ipc_namespace_item(proc), dev_shm_item(shm_dir, env, usage),
            event_files_item(shm_dir, proc=proc), ptrace_scope_item(proc)]


# ---- GPUs ----------------------------------------------------------------------------------------

def mig_item(index: int, mode: dict | None) -> Item:
    """One GPU's MIG mode (core/topology.nvml_mig_modes; None: no NVML)."""
    label = f"MIG, GPU {index}"
    if not mode:
        return Item("mig", label, "unknown (no NVML)", None, "cannot tell whether this GPU is split into MIG "
                    "instances (no CUDA IPC or P2P across them)", {"gpu": index})
    facts = {"gpu": index, **mode}
    if mode.get("current") is None:
        if "not supported" in str(mode.get("error", "")).lower():
            return Item("mig", label, "not supported by this GPU", True, "the GPU is one device to every rank",
                        facts)
        return Item("mig", label, f"unreadable ({mode.get('error')})", None,
                    "cannot tell whether this GPU is split into MIG instances (no CUDA IPC or P2P across them)",
                    facts)
    pending = (f" ({'on' if mode['pending'] else 'off'} after the next GPU reset)"
               if mode.get("pending") is not None and mode["pending"] != mode["current"] else "")
    if mode["current"]:
        return Item("mig", label, "on" + pending, False,
                    "no CUDA IPC or P2P across MIG instances: ranks on different instances of this GPU cannot "
                    "share memory", facts)
    return Item("mig", label, "off" + pending, True, "the GPU is one device to every rank", facts)


FABRIC_USE = ("fabric handles carry memory across the nodes of an NVLink domain through IMEX; ipcbench shares "
              "within a node through POSIX fds and does not need them")


def fabric_item(index: int, supported, permitted) -> Item:
    """supported: vmm.fabric_support's answer (True or 'no (why)'); permitted: vmm.fabric_permitted's
    (True, why) / (False, why) / (None, why), or None where it was not tried."""
    label = f"fabric handles, GPU {index}"
    facts = {"gpu": index, "supported": supported, "permitted": None if permitted is None else list(permitted)}
    if supported is None:
        return Item("fabric_handles", label, "not known whether the device supports them", None, FABRIC_USE, facts)
    if supported is not True:
        why = str(supported)
        why = why[len("no "):] if why.startswith("no (") else f"({why})"
        return Item("fabric_handles", label, f"not supported by the device {why}", False, FABRIC_USE, facts)
    if permitted is None or permitted[0] is None:
        why = permitted[1] if permitted else "not tried"
        return Item("fabric_handles", label, f"supported by the device; not known whether permitted here ({why})",
                    None, FABRIC_USE, facts)
    if permitted[0]:
        return Item("fabric_handles", label, f"supported by the device; {permitted[1]}", True, FABRIC_USE, facts)
    return Item("fabric_handles", label, f"supported by the device; NOT permitted here ({permitted[1]})", False,
                FABRIC_USE + "; tools that share memory by fabric handle fail here", facts)


def p2p_items(matrix: list[list[int]]) -> list[Item]:
    """One item per ordered GPU pair without P2P (cudaDeviceCanAccessPeer), or one saying every pair has it."""
    n = len(matrix)
    items = [Item("p2p", f"P2P, GPU {i} -> GPU {j}", "none", False,
                  f"GPU {i} cannot reach GPU {j}'s memory directly: IPC between ranks on these GPUs either fails "
                  f"to map or copies through host memory (host-staged bandwidth, not the link's)",
                  {"src_gpu": i, "dst_gpu": j, "p2p": 0})
             for i in range(n) for j in range(n) if i != j and not matrix[i][j]]
    if items or n < 2:
        return items
    return [Item("p2p", "P2P", f"every pair of the {n} GPUs", True, "each GPU can map the others' memory", {})]
