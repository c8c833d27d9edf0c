"""readiness.py's items from fake /proc trees, a fake /dev/shm usage and given GPU readings: this tests the
decisions and the consequence lines, not a machine (no namespace, shared memory or GPU is touched)."""

from __future__ import annotations

import os
from collections import namedtuple

import pytest

from ipcbench import readiness

MiB = 1 << 20
Usage = namedtuple("Usage", "total used free")
# suites/staged_plan defaults: a 64 KiB flag area + 3 slots of 16 MiB chunks (page-aligned)
DEFAULT_NEED = 64 * 1024 + 3 * 16 * MiB


def fake_proc(tmp_path, pid: str | None = "pid:[4026531836]", ipc: str | None = "ipc:[4026531839]",
              ptrace: str | None = None):
    """A /proc with self/ns links named like the kernel's (the targets need not exist) and Yama's file."""
    ns = tmp_path / "proc" / "self" / "ns"
    ns.mkdir(parents=True)
    for name, target in (("pid", pid), ("ipc", ipc)):
        if target is not None:
            os.symlink(target, ns / name)
    if ptrace is not None:
        yama = tmp_path / "proc" / "sys" / "kernel" / "yama"
        yama.mkdir(parents=True)
        (yama / "ptrace_scope").write_text(ptrace + "\n")
    return str(tmp_path / "proc")


def test_host_namespaces_are_the_kernels_initial_inodes(tmp_path):
    """include/linux/proc_ns.h: PROC_PID_INIT_INO 0xEFFFFFFC, PROC_IPC_INIT_INO 0xEFFFFFFF."""
    proc = fake_proc(tmp_path)
    pid, ipc = readiness.pid_namespace_item(proc), readiness.ipc_namespace_item(proc)
    assert (pid.value, pid.ok, pid.facts) == ("pid:[4026531836], the host's", True,
                                              {"id": "pid:[4026531836]", "inode": 4026531836, "host": True})
    assert (ipc.value, ipc.ok) == ("ipc:[4026531839], the host's", True)
    assert pid.consequence == ("ranks in different PID namespaces (other containers or pods) cannot use CUDA IPC "
                               "between them; run `ipcbench info` in each and compare this id")
    assert "/dev/shm" in ipc.consequence and "docker --ipc=host" in ipc.consequence


def test_a_containers_namespaces_print_their_ids_to_compare(tmp_path):
    proc = fake_proc(tmp_path, pid="pid:[4026532601]", ipc="ipc:[4026531836]")  # the PID ns's number, as IPC
    pid, ipc = readiness.pid_namespace_item(proc), readiness.ipc_namespace_item(proc)
    assert (pid.value, pid.ok) == ("pid:[4026532601], not the host's (a container's or a pod's)", None)
    assert ipc.value.startswith("ipc:[4026531836], not the host's") and ipc.ok is None
    assert pid.line().startswith("  ??  PID namespace: pid:[4026532601], not the host's")


def test_unreadable_namespaces_say_so(tmp_path):
    proc = fake_proc(tmp_path, pid=None, ipc="weird")
    pid, ipc = readiness.pid_namespace_item(proc), readiness.ipc_namespace_item(proc)
    assert pid.value.startswith("unreadable (") and pid.ok is None and pid.facts["id"] is None
    assert (ipc.value, ipc.ok) == ("weird (not an id this tool can place)", None)


def test_dev_shm_of_dockers_default_size_is_enough_but_said(tmp_path):
    item = readiness.dev_shm_item("/dev/shm", {}, lambda p: Usage(64 * MiB, 4 * MiB, 60 * MiB))
    assert item.facts == {"size_bytes": 64 * MiB, "free_bytes": 60 * MiB, "need_bytes": DEFAULT_NEED}
    assert item.ok is True and item.value == ("64.0 MiB, 60.0 MiB free; the host-staged path needs 48.1 MiB "
                                              "(16M x 3 slots + flags, one pair at a time)")
    assert item.consequence == ("enough for shm_staged; 64.0 MiB is Docker's default, shared with NCCL's and MPI's "
                                "shared-memory transports")
    big = readiness.dev_shm_item("/dev/shm", {}, lambda p: Usage(32 << 30, 0, 32 << 30))
    assert big.ok is True and big.consequence == "enough for shm_staged" and big.value.startswith("32.0 GiB")


def test_dev_shm_too_small_for_the_segment(tmp_path):
    item = readiness.dev_shm_item("/dev/shm", {}, lambda p: Usage(64 * MiB, 40 * MiB, DEFAULT_NEED - 1))
    assert item.ok is False and item.consequence.startswith("shm_staged cannot allocate its segment")
    assert "docker --shm-size" in item.consequence and "IPCBENCH_SHM_CHUNK" in item.consequence
    # the need follows IPCBENCH_SHM_*: 4 x 64 MiB + flags no longer fit 64 MiB free
    env = {"IPCBENCH_SHM_CHUNK": "64M", "IPCBENCH_SHM_SLOTS": "4"}
    item = readiness.dev_shm_item("/dev/shm", env, lambda p: Usage(1 << 30, 0, 200 * MiB))
    assert item.facts["need_bytes"] == 64 * 1024 + 4 * 64 * MiB and item.ok is False
    assert "(64M x 4 slots + flags" in item.value


def test_dev_shm_absent_or_a_bad_setting(tmp_path):
    item = readiness.dev_shm_item(str(tmp_path / "none"), {})
    assert item.ok is False and item.value.startswith("absent (") and item.facts == {"need_bytes": DEFAULT_NEED}
    item = readiness.dev_shm_item("/dev/shm", {"IPCBENCH_SHM_SLOTS": "99"}, lambda p: pytest.fail("not read"))
    assert item.ok is False and "IPCBENCH_SHM_SLOTS=99" in item.consequence


@pytest.mark.parametrize("text, value, others", [
    (None, "absent (no Yama)", "can here"), ("0", "0 (classic)", "can here"),
    ("1", "1 (restricted)", "fail between sibling ranks here (they need 0, or CAP_SYS_PTRACE)"),
    ("3", "3 (no attach)", "fail between sibling ranks")])
def test_ptrace_scope_never_stops_ipcbench(tmp_path, text, value, others):
    item = readiness.ptrace_scope_item(fake_proc(tmp_path, ptrace=text))
    assert (item.value, item.ok) == (value, True)
    assert item.consequence.startswith("ipcbench passes fds over a Unix socket (SCM_RIGHTS), not pidfd_getfd: "
                                       "unaffected; tools that take a peer's fds with pidfd_getfd ")
    assert others in item.consequence


def test_ptrace_scope_unreadable(tmp_path):
    item = readiness.ptrace_scope_item(fake_proc(tmp_path, ptrace="x"))
    assert item.value.startswith("unreadable (") and item.ok is True


def test_host_items_in_order(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    items = readiness.host_items(fake_proc(tmp_path), str(shm), {}, lambda p: Usage(MiB, 0, MiB))
    assert [i.name for i in items] == ["pid_namespace", "ipc_namespace", "dev_shm", "event_files", "ptrace_scope"]
    assert [i.ok for i in items] == [True, True, False, True, True]
    assert items[2].as_dict()["facts"]["free_bytes"] == MiB


def fake_shm(tmp_path, names: dict[str, int]):
    """A /dev/shm holding files of these names and sizes."""
    shm = tmp_path / "shm"
    shm.mkdir()
    for name, size in names.items():
        (shm / name).write_bytes(b"\0" * size)
    return str(shm)


KiB = 1 << 10
ENDED = {0x1E6, 0x1E7}.__contains__  # the pids of issue 43's `all --quick` run, ended


def test_event_files_of_ended_processes_are_named_counted_sized_and_not_removed(tmp_path):
    shm = fake_shm(tmp_path, {"cuda.shm.0.1e6.1": 80 * KiB, "cuda.shm.0.1e7.1": 80 * KiB, "cuda.shm.0.2aa.1": 80 * KiB,
                              "ipcbench-staged-x": 4 * KiB})
    item = readiness.event_files_item(shm, alive=lambda pid: not ENDED(pid), proc=fake_proc(tmp_path))
    assert (item.name, item.ok) == ("event_files", False)
    assert item.value == ("2 left by ended processes, 160 KiB: cuda.shm.0.1e6.1 (pid 486), cuda.shm.0.1e7.1 "
                          "(pid 487); 1 of running processes")
    assert item.consequence == (
        "the CUDA driver's files for interprocess event handles (cudaIpcGetEventHandle), which neither destroying the "
        "event nor the process's end removes; nothing uses them once their process has ended, and each holds "
        f"/dev/shm memory until removed (enough fill it); remove them with: rm -f {shm}/cuda.shm.0.1e6.1 "
        f"{shm}/cuda.shm.0.1e7.1")
    assert item.facts == {"count": 2, "bytes": 160 * KiB, "running": 1,
                          "files": [{"name": "cuda.shm.0.1e6.1", "pid": 486, "bytes": 80 * KiB},
                                    {"name": "cuda.shm.0.1e7.1", "pid": 487, "bytes": 80 * KiB}]}
    assert len(os.listdir(shm)) == 4  # info says, never removes
    assert item.line().startswith(f"  NO  CUDA event files in {shm}: 2 left by ended processes, 160 KiB: ")


def test_many_event_files_are_removed_by_a_rule_not_a_list(tmp_path):
    shm = fake_shm(tmp_path, {f"cuda.shm.0.{pid:x}.1": 80 * KiB for pid in range(0x7FFFFF00, 0x7FFFFF06)})
    item = readiness.event_files_item(shm, proc=fake_proc(tmp_path))  # pids no machine has: ended
    assert item.ok is False and item.facts["count"] == 6 and item.facts["bytes"] == 480 * KiB
    assert item.value.endswith("(pid 2147483395) and 2 more")
    assert item.consequence.endswith("remove them with: " + readiness.REMOVE_ENDED.format(dir=shm))


def test_the_removal_command_follows_the_rule_that_names_the_files(tmp_path):
    """The command info prints removes exactly the files stale() calls ended (ipc/event_files.NAME, pid above 0, no
    process): never a file of pid 0, a name of another shape or a running process's, and it stops at none of them."""
    import shutil
    import subprocess

    from ipcbench.ipc import event_files

    if shutil.which("bash") is None:
        pytest.skip("no bash")
    ended = [0x7FFFFF00, 0x7FFFFF01]
    names = [f"cuda.shm.0.{ended[0]:x}.1", f"cuda.shm.{ended[1]:x}.2", "cuda.shm.0.0.1", "cuda.shm.0.zz.1",
             f"cuda.shm.0.{os.getpid():x}.1", "cuda.shm.0.7ffffff0.1.extra", "ipcbench-staged-x"]
    shm = fake_shm(tmp_path, {n: 1 for n in names})
    want = sorted(n for n in names if n not in {f.name for f in event_files.stale(shm)})
    p = subprocess.run(["bash", "-c", readiness.REMOVE_ENDED.format(dir=shm).removeprefix("bash -c ")[1:-1]],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode in (0, 1) and p.stderr == "", p.stderr  # the loop's last test may be false: no error said
    assert sorted(os.listdir(shm)) == want == sorted(names[2:])


def test_no_event_files_left_is_ok(tmp_path):
    shm = fake_shm(tmp_path, {f"cuda.shm.0.{os.getpid():x}.1": 80 * KiB, "ipcbench-staged-x": 1})
    item = readiness.event_files_item(shm, proc=fake_proc(tmp_path))
    assert (item.ok, item.value) == (True, "none left by ended processes; 1 of running processes")
    assert item.consequence.endswith("removes; ipcbench removes its own at the end of every run")
    assert readiness.event_files_item(str(tmp_path / "none")).value == "none left by ended processes"


def test_event_files_in_a_container_sharing_the_hosts_dev_shm_cannot_be_judged(tmp_path):
    """A PID namespace of its own over the host's IPC namespace (docker --ipc=host): a pid not seen here may run in
    another container; with its own IPC namespace too, /dev/shm is usually its own, and the files are judged."""
    shm = fake_shm(tmp_path, {"cuda.shm.0.1e6.1": 80 * KiB})
    shared = readiness.event_files_item(shm, alive=lambda pid: False,
                                        proc=fake_proc(tmp_path / "a", pid="pid:[4026532601]"))
    assert shared.ok is None
    assert ("this is not the host's PID namespace: a process of another container sharing this /dev/shm is not seen "
            "here, so check before removing; remove them") in shared.consequence
    own = readiness.event_files_item(shm, alive=lambda pid: False,
                                     proc=fake_proc(tmp_path / "b", pid="pid:[4026532601]", ipc="ipc:[4026532602]"))
    assert own.ok is False and "not the host's PID namespace" in own.consequence


def test_mig_modes():
    on = readiness.mig_item(0, {"current": 1, "pending": 1})
    assert (on.value, on.ok, on.label) == ("on", False, "MIG, GPU 0")
    assert on.consequence == ("no CUDA IPC or P2P across MIG instances: ranks on different instances of this GPU "
                              "cannot share memory")
    off = readiness.mig_item(1, {"current": 0, "pending": 1})
    assert (off.value, off.ok) == ("off (on after the next GPU reset)", True) and off.facts["gpu"] == 1
    assert readiness.mig_item(0, {"current": 1, "pending": 0}).value == "on (off after the next GPU reset)"
    none = readiness.mig_item(0, {"current": None, "pending": None, "error": "Not Supported"})
    assert (none.value, none.ok) == ("not supported by this GPU", True)
    odd = readiness.mig_item(0, {"current": None, "pending": None, "error": "Unknown Error"})
    assert (odd.value, odd.ok) == ("unreadable (Unknown Error)", None)
    assert (readiness.mig_item(0, None).value, readiness.mig_item(0, None).ok) == ("unknown (no NVML)", None)


NOT_PERMITTED = (False, "CUDA_ERROR_NOT_PERMITTED: no IMEX channel, /dev/nvidia-caps-imex-channels absent")


def test_fabric_handles_supported_but_not_permitted():
    item = readiness.fabric_item(0, True, NOT_PERMITTED)
    assert item.value == ("supported by the device; NOT permitted here (CUDA_ERROR_NOT_PERMITTED: no IMEX channel, "
                          "/dev/nvidia-caps-imex-channels absent)")
    assert item.ok is False and item.consequence.endswith("tools that share memory by fabric handle fail here")
    assert "ipcbench shares within a node through POSIX fds and does not need them" in item.consequence
    ok = readiness.fabric_item(1, True, (True, "permitted"))
    assert (ok.value, ok.ok) == ("supported by the device; permitted", True)
    no = readiness.fabric_item(0, "no (GPU 0 does not support fabric handles)", None)
    assert (no.value, no.ok) == ("not supported by the device (GPU 0 does not support fabric handles)", False)
    assert readiness.fabric_item(0, None, None).ok is None
    unknown = readiness.fabric_item(0, True, (None, "probe failed (OSError: no libcuda)"))
    assert unknown.ok is None and unknown.value.endswith("not known whether permitted here (probe failed (OSError: "
                                                         "no libcuda))")
    assert readiness.fabric_item(0, True, None).value.endswith("(not tried)")


def test_p2p_one_line_per_pair_without_it():
    items = readiness.p2p_items([[1, 1, 0], [1, 1, 1], [0, 1, 1]])
    assert [(i.facts["src_gpu"], i.facts["dst_gpu"]) for i in items] == [(0, 2), (2, 0)]
    assert items[0].line() == ("  NO  P2P, GPU 0 -> GPU 2: none: GPU 0 cannot reach GPU 2's memory directly: IPC "
                               "between ranks on these GPUs either fails to map or copies through host memory "
                               "(host-staged bandwidth, not the link's)")
    (every,) = readiness.p2p_items([[1, 1], [1, 1]])
    assert (every.value, every.ok) == ("every pair of the 2 GPUs", True)
    assert readiness.p2p_items([[1]]) == []
    assert readiness.p2p_items([[0, 1], [1, 0]])[0].value == "every pair of the 2 GPUs"  # a GPU and itself: no pair
