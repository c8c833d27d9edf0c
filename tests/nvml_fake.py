"""A stand-in for pynvml (nvidia-ml-py) for evidence/read.py's tests: GPUs described by plain data, errors
raised as the real binding raises them (NVMLError with `.value`, its NVMLError_NotSupported-style subclasses),
and a binding without a function raising AttributeError. It tests how the reader files each answer, not a GPU."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace


class NVMLError(Exception):
    """pynvml's NVMLError: `value` is the NVML return code; NVMLError(code) gives that code's subclass."""

    _classes: dict = {}

    def __new__(cls, value=999):
        if cls is NVMLError:
            cls = NVMLError._classes.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value=999):
        super().__init__(value)

    def __str__(self):
        return {2: "Invalid Argument", 3: "Not Supported", 4: "Insufficient Permissions", 12: "NVML Shared Library Not "
                "Found", 13: "Function Not Found"}.get(self.value, "Unknown Error")


def _subclass(name: str, code: int):
    cls = type(name, (NVMLError,), {"__new__": lambda c, *a: NVMLError.__new__(c, code)})
    NVMLError._classes[code] = cls
    return cls


NVMLError_InvalidArgument = _subclass("NVMLError_InvalidArgument", 2)
NVMLError_NotSupported = _subclass("NVMLError_NotSupported", 3)
NVMLError_NoPermission = _subclass("NVMLError_NoPermission", 4)
NVMLError_LibraryNotFound = _subclass("NVMLError_LibraryNotFound", 12)
NVMLError_FunctionNotFound = _subclass("NVMLError_FunctionNotFound", 13)


@dataclass
class FakeGpuData:
    """One GPU: `links` one state per NVLink (True up, False down; the links past them answer INVALID_ARGUMENT),
    `errors[link]` its counters, `clock_ns` the clock-event fields by id, `fields_code`: per-field return code for
    every field (3: the driver does not give them)."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-0"
    bus: str = "00000000:1B:00.0"
    links: list = field(default_factory=lambda: [True] * 18)
    version: int = 6  # NVML_NVLINK_VERSION_4_0
    speed_mbps: int = 26562
    errors: dict = field(default_factory=dict)  # link -> {counter code: count}
    error_counter_code: int = 0  # 3: nvmlDeviceGetNvLinkErrorCounter NOT_SUPPORTED
    fields_code: int = 0  # per-field nvmlReturn for the NVLink fields
    clock_ns: dict = field(default_factory=lambda: {74: 0, 76: 0, 269: 0, 270: 0, 271: 0, 75: 0, 77: 0, 79: 0})
    reasons: int = 0x1  # idle
    pcie: tuple = (5, 16, 5, 16)
    ecc: tuple = (0, 0)  # corrected, uncorrected (volatile)
    remap: tuple = (0, 0, 0, 0)
    processes: list = field(default_factory=list)  # (pid, used bytes or None)


class FakePynvml:
    """The calls and constants of pynvml that evidence/read.py uses. `missing`: names this binding lacks."""

    NVML_NVLINK_MAX_LINKS = 36  # as nvidia-ml-py 12.5xx and later: more slots than an H100 has links
    NVML_FEATURE_ENABLED = 1
    NVML_VOLATILE_ECC = 0
    NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    NVML_FI_DEV_NVLINK_GET_SPEED = 164
    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported

    def __init__(self, gpus: list[FakeGpuData], missing: tuple = (), init_error: Exception | None = None,
                 names: dict | None = None):
        self.gpus = gpus
        self.missing = set(missing)
        self.init_error = init_error
        self.names = names or {}
        self.calls = 0
        self.shutdowns = 0

    def __getattribute__(self, name):
        if name.startswith("nvml") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)
        if name.startswith("nvml"):
            object.__setattr__(self, "calls", object.__getattribute__(self, "calls") + 1)
        return object.__getattribute__(self, name)

    def nvmlInit(self):
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.gpus[i]

    def nvmlDeviceGetUUID(self, h):
        return h.uuid

    def nvmlDeviceGetName(self, h):
        return h.name.encode()

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=h.bus.encode())

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= len(h.links):
            raise NVMLError(2)
        if h.links[link] is None:
            raise NVMLError(3)
        return int(h.links[link])

    def nvmlDeviceGetNvLinkVersion(self, h, link):
        return h.version

    def nvmlDeviceGetNvLinkErrorCounter(self, h, link, counter):
        if h.error_counter_code:
            raise NVMLError(h.error_counter_code)
        return h.errors.get(link, {}).get(counter, 0)

    def nvmlDeviceGetFieldValues(self, h, ids):
        out = []
        for fid, scope in ids:
            code, value = 0, 0
            if fid in h.clock_ns:
                value = h.clock_ns[fid]
            elif fid == 164:
                code, value = h.fields_code, h.speed_mbps
            elif fid in (161, 162, 163):
                counter = {161: 0, 162: 1, 163: 2}[fid]
                code, value = h.fields_code, h.errors.get(scope, {}).get(counter, 0)
            else:
                code = 3
            out.append(SimpleNamespace(fieldId=fid, scopeId=scope, valueType=3, nvmlReturn=code,
                                       value=SimpleNamespace(ullVal=value)))
        return out

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return h.pcie[0]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return h.pcie[1]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return h.pcie[2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return h.pcie[3]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return h.reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return h.reasons

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        return h.ecc[kind]

    def nvmlDeviceGetRemappedRows(self, h):
        return h.remap

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in h.processes]

    def nvmlSystemGetProcessName(self, pid):
        if pid not in self.names:
            raise NVMLError(3)
        return self.names[pid].encode()


def h100(i: int, **kw) -> FakeGpuData:
    return FakeGpuData(uuid=f"GPU-{i:04d}", bus=f"00000000:{0x1B + 0x10 * i:02X}:00.0", **kw)
