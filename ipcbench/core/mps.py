"""MPS (CUDA Multi-Process Service): do the ranks' contexts run under it?

Without MPS, two processes on one GPU get it in time slices (milliseconds each): two kernels that
wait on each other (ping-pongs, flag-driven pipelines, the host-staged flag kernels) take turns. Under
MPS they run at the same time. Same-GPU rows differ by orders of magnitude between the two (on an H100:
sm_pingpong one way 2,192 µs vs 0.462 µs), so every run records which it was.

Two halves, so that the decision is testable without a GPU:
- `read(index)`: one process's raw readings for its GPU, taken after its context exists (the runner
  calls it once the GPU is selected; `ipcbench info` after its probes). Never raises. It reads
  CU_DEVICE_ATTRIBUTE_MPS_ENABLED (the driver's answer: "contexts created on this device are shared
  through MPS"; through cuda.bindings, else cudaDevAttrMpsEnabled through CuPy), the compute mode
  (EXCLUSIVE_PROCESS is the usual setting with MPS, but MPS does not need it), the client environment
  (CUDA_MPS_PIPE_DIRECTORY), whether an MPS control pipe exists in the pipe directory the driver would
  use, and IPCBENCH_EXPECT_MPS (set by jobs/mps.sh: what the job meant to run).
- `decide(readings)`: every node-local rank's readings -> per-GPU status, where it came from, one line
  saying what was found (and where the readings disagree), and an error when the run must not go on:
  ranks that share a GPU but do not agree (one an MPS client, one not), or a status that is not the one
  IPCBENCH_EXPECT_MPS asked for. Pure; the runner applies it on every rank alike (run/runner.py).

`read` never raises, so its CUDA imports (cuda.bindings, CuPy's runtime) are inside its tries: a process
without either, or without a driver, gets readings that say why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"  # where clients look for the control daemon without CUDA_MPS_PIPE_DIRECTORY
ATTRIBUTE = "CU_DEVICE_ATTRIBUTE_MPS_ENABLED"
ATTR_MPS_ENABLED = 133  # CU_DEVICE_ATTRIBUTE_MPS_ENABLED == cudaDevAttrMpsEnabled (CUDA 12.x+)
COMPUTE_MODES = {0: "DEFAULT", 1: "EXCLUSIVE_THREAD", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}
EXPECT_ENV = "IPCBENCH_EXPECT_MPS"
PIPE_SOURCE = "MPS control pipe (attribute unreadable)"


# ---- the CUDA reads ------------------------------------------------------------------------------

def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e) else ""


def _read_attribute(index: int) -> tuple[bool | None, str | None, str | None]:
    """(MPS enabled, how it was read, why it could not be read). The driver API first (cuda.bindings),
    then the runtime's attribute of the same number through CuPy."""
    errors = []
    try:
        from cuda.bindings import driver

        attr = getattr(driver.CUdevice_attribute, ATTRIBUTE, None)
        if attr is None:
            errors.append(f"cuda.bindings has no {ATTRIBUTE} (too old)")
        else:
            ok = driver.CUresult.CUDA_SUCCESS
            (err,) = driver.cuInit(0)
            if err == ok:
                err, dev = driver.cuDeviceGet(index)
            if err == ok:
                err, value = driver.cuDeviceGetAttribute(attr, dev)
            if err == ok:
                return bool(value), "cuda.bindings cuDeviceGetAttribute", None
            errors.append(f"cuDeviceGetAttribute: {getattr(err, 'name', err)}")
    except Exception as e:  # no cuda.bindings, no driver library
        errors.append(f"cuda.bindings: {type(e).__name__}: {_first_line(e)}")
    try:
        from cupy.cuda import runtime

        value = runtime.deviceGetAttribute(getattr(runtime, "cudaDevAttrMpsEnabled", ATTR_MPS_ENABLED), index)
        return bool(value), "cupy cudaDeviceGetAttribute", None
    except Exception as e:
        errors.append(f"cudaDeviceGetAttribute({ATTR_MPS_ENABLED}): {_first_line(e) or type(e).__name__}")
    return None, None, "; ".join(errors)


def _read_compute_mode(index: int) -> int | None:
    try:
        from cupy.cuda import runtime

        return int(runtime.deviceGetAttribute(runtime.cudaDevAttrComputeMode, index))
    except Exception:
        return None


def read(index: int, environ=None) -> dict:
    """This process's raw MPS readings for GPU `index` (call once its context exists). Never raises."""
    env = os.environ if environ is None else environ
    enabled, how, error = _read_attribute(index)
    pipe = env.get("CUDA_MPS_PIPE_DIRECTORY") or None
    return {"gpu": index, "mps_enabled": enabled, "read_by": how, "error": error,
            "compute_mode": _read_compute_mode(index), "pipe_dir": pipe,
            "control_pipe": os.path.exists(os.path.join(pipe or DEFAULT_PIPE_DIR, "control")),
            "expect": env.get(EXPECT_ENV) or None}


# ---- the decision (pure) -------------------------------------------------------------------------

@dataclass
class MpsStatus:
    gpus: dict[int, bool]  # GPU index -> its ranks' contexts run under MPS
    source: str  # how the statuses were known
    note: str  # one line: what was found, and where readings disagree
    error: str | None = None  # the run must not go on (every rank raises it alike)
    readings: list[dict] = field(default_factory=list)

    def as_meta(self) -> dict:
        return {"gpus": {str(g): v for g, v in sorted(self.gpus.items())}, "source": self.source,
                "note": self.note, "readings": self.readings}


def mode_name(mode: int | None) -> str:
    return "unreadable" if mode is None else COMPUTE_MODES.get(mode, f"unknown ({mode})")


def rank_status(r: dict) -> tuple[bool, str]:
    """(under MPS, source) for one rank's readings: the attribute where it was readable; otherwise an
    inference from the control pipe (the driver connects to a daemon whose pipe it finds)."""
    if r.get("mps_enabled") is not None:
        return bool(r["mps_enabled"]), ATTRIBUTE
    return bool(r.get("control_pipe")), PIPE_SOURCE


def _who(r: dict, i: int) -> str:
    return f"rank {r.get('rank', i)}"


def _ranks(ids: list) -> str:
    return f"rank{'s' if len(ids) > 1 else ''} {', '.join(str(x) for x in ids)}"


def _pipe(r: dict) -> str:
    return r.get("pipe_dir") or DEFAULT_PIPE_DIR


def _gpu_list(gpus: list[int]) -> str:
    return ("GPU " if len(gpus) == 1 else "GPUs ") + ", ".join(str(g) for g in gpus)


def decide(readings: list[dict], host: str = "") -> MpsStatus:
    """Per-GPU MPS status from every node-local rank's `read()` (in node-local rank order)."""
    where = f" on {host}" if host else ""
    by_gpu: dict[int, list[tuple[int, dict]]] = {}
    for i, r in enumerate(readings):
        by_gpu.setdefault(r["gpu"], []).append((i, r))
    gpus: dict[int, bool] = {}
    sources: list[str] = []
    clauses: dict[str, list[int]] = {}
    checks: list[str] = []
    said: dict[str, list] = {}  # a remark about ranks -> the ranks it is about (said once for all of them)
    errors: list[str] = []
    for g, members in sorted(by_gpu.items()):
        states = [(i, r, *rank_status(r)) for i, r in members]
        on = [r.get("rank", i) for i, r, s, _ in states if s]
        off = [r.get("rank", i) for i, r, s, _ in states if not s]
        for _, _, _, src in states:
            if src not in sources:
                sources.append(src)
        if on and off:
            pipes = sorted({f"{_who(r, i)}: {_pipe(r)}" for i, r in members})
            errors.append(f"GPU {g}{where} is shared by ranks that do not agree on MPS: {_ranks(on)} "
                          f"{'run' if len(on) > 1 else 'runs'} under MPS, {_ranks(off)} "
                          f"{'do' if len(off) > 1 else 'does'} not (pipe directories {'; '.join(pipes)}); "
                          f"same-GPU numbers would mix two setups: give every rank the same MPS environment "
                          f"(CUDA_MPS_PIPE_DIRECTORY)")
        status = bool(on) and not off
        gpus[g] = status
        how = _how_read(members)
        clauses.setdefault(_clause(status, members, how), []).append(g)
        checks += _mode_checks(g, status, members)
        for text, rank in _remarks(members):
            said.setdefault(text, []).append(rank)
        if status and len({_pipe(r) for _, r in members}) > 1:
            checks.append(f"GPU {g}: its ranks use different pipe directories")
        errors += _expect_errors(g, where, status, bool(on and off), how, members)
    checks += [f"{_ranks(ids)}: {text}" for text, ids in said.items()]
    return MpsStatus(gpus=gpus, source=" + ".join(sources), note=_note(by_gpu, gpus, clauses, checks),
                     error=errors[0] if errors else None, readings=list(readings))


def _how_read(members: list[tuple[int, dict]]) -> list[str]:
    """What was read of one GPU's ranks: the attribute's values, or that it was unreadable and the pipe."""
    return sorted({f"{ATTRIBUTE}={int(r['mps_enabled'])}" if r.get("mps_enabled") is not None
                   else f"attribute unreadable, control pipe {'found' if r.get('control_pipe') else 'absent'}"
                   for _, r in members})


def _clause(status: bool, members: list[tuple[int, dict]], how: list[str]) -> str:
    """What was found on one GPU, in one clause (GPUs with the same clause are merged in the note)."""
    modes = sorted({mode_name(r.get("compute_mode")) for _, r in members})
    n = len(members)
    clause = (f"{'MPS' if status else 'no MPS'} ({n} rank{'s' if n != 1 else ''}; {', '.join(how)}; "
              f"compute mode {'/'.join(modes)}")
    if status:
        clause += f"; pipe {', '.join(sorted({_pipe(r) for _, r in members}))}"
    return clause + ")"


def _mode_checks(g: int, status: bool, members: list[tuple[int, dict]]) -> list[str]:
    """Where the compute mode does not tell the same story as the MPS status."""
    modes = sorted({mode_name(r.get("compute_mode")) for _, r in members})
    if status and "EXCLUSIVE_PROCESS" not in modes and modes != ["unreadable"]:
        return [f"GPU {g} is under MPS in compute mode {'/'.join(modes)} (EXCLUSIVE_PROCESS is usual with MPS; "
                f"not required)"]
    if not status and "EXCLUSIVE_PROCESS" in modes:
        return [f"GPU {g} is in compute mode EXCLUSIVE_PROCESS but not under MPS"]
    return []


def _remarks(members: list[tuple[int, dict]]) -> list[tuple[str, int]]:
    """(remark, rank) where one rank's readings do not tell the same story: an unreadable attribute, a driver
    and a control pipe that disagree."""
    out = []
    for i, r in members:
        enabled = r.get("mps_enabled")
        if enabled is None:
            text = (f"{ATTRIBUTE} unreadable ({r.get('error') or 'no reason given'}); MPS inferred from the "
                    f"control pipe in {_pipe(r)}")
        elif enabled and not r.get("control_pipe"):
            text = f"the driver reports MPS but there is no control pipe in {_pipe(r)}"
        elif not enabled and r.get("control_pipe"):
            text = (f"an MPS control pipe exists in {_pipe(r)} but the driver reports no MPS (a daemon of "
                    f"another user, or one that refused this client?)")
        else:
            continue
        out.append((text, r.get("rank", i)))
    return out


def _expect_errors(g: int, where: str, status: bool, disagree: bool, how: list[str],
                   members: list[tuple[int, dict]]) -> list[str]:
    """IPCBENCH_EXPECT_MPS against what one GPU runs: a value that is not 0 or 1, or a status it did not ask
    for (not said again where the GPU's ranks disagree among themselves)."""
    errors = []
    for e in sorted({r["expect"] for _, r in members if r.get("expect") is not None}):
        if e not in ("0", "1"):
            errors.append(f"{EXPECT_ENV}={e}: must be 0 or 1")
        elif (e == "1") != status and not disagree:
            errors.append(f"{EXPECT_ENV}={e} (the job asked for {'MPS' if e == '1' else 'no MPS'}) but GPU {g}"
                          f"{where} {'does not run' if e == '1' else 'runs'} under MPS "
                          f"({', '.join(how)}; pipe {', '.join(sorted({_pipe(r) for _, r in members}))})")
    return errors


def _note(by_gpu: dict, gpus: dict[int, bool], clauses: dict[str, list[int]], checks: list[str]) -> str:
    """The one line: a clause per group of GPUs, what it means for same-GPU kernels, then the checks."""
    shared = [g for g, m in by_gpu.items() if len(m) > 1]
    parts = [f"{_gpu_list(gs)}: {c}" for c, gs in clauses.items()]
    if not shared:
        parts.append("no GPU has two ranks, so MPS changes no row")
    elif all(gpus[g] for g in shared):
        parts.append("same-GPU kernels run concurrently")
    elif not any(gpus[g] for g in shared):
        parts.append("same-GPU kernels are time-sliced")
    return "; ".join(parts + checks)


def summary(meta_mps: dict) -> str:
    """One line for the console from meta.json's "mps" ({host: as_meta()})."""
    if len(meta_mps) == 1:
        return next(iter(meta_mps.values()))["note"]
    return "; ".join(f"{h}: {m['note']}" for h, m in meta_mps.items())
