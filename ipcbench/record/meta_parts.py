"""The typed parts of meta.json (a GPU, a rank, a link, a skipped step, the sampling rule, the pair mode), each
read from the part of an object record/meta_schema.py has already checked: a value here is of its type or
absent (None), never malformed. record/meta.Meta holds them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ipcbench.catalogue.links import rates_of_entry


@dataclass(frozen=True)
class GpuRecord:
    """One GPU of a host as meta.json lists it (NVML and CUDA at the start of the run)."""

    index: int
    name: str = "?"
    uuid: str | None = None
    cc: str | None = None
    sm_count: int | None = None
    memory_bytes: int | None = None
    l2_bytes: int | None = None
    mem_bw_gbps: float | None = None
    pci_bus_id: str | None = None

    @classmethod
    def from_json(cls, g: dict) -> "GpuRecord":
        return cls(g["index"], g.get("name", "?"), g.get("uuid") or None, g.get("cc"), g.get("sm_count"),
                   g.get("memory_bytes"), g.get("l2_bytes"), _float(g.get("mem_bw_gbps")), g.get("pci_bus_id"))

    def as_json(self) -> dict:
        """As a run writes it (core/gpu.GpuInfo's order, then NVML's memory bandwidth, null where NVML did not
        say); a fact not known is left out."""
        out = {"index": self.index, "name": self.name, "uuid": self.uuid, "pci_bus_id": self.pci_bus_id,
               "sm_count": self.sm_count, "memory_bytes": self.memory_bytes, "cc": self.cc, "l2_bytes": self.l2_bytes}
        return {**{k: v for k, v in out.items() if v is not None}, "mem_bw_gbps": self.mem_bw_gbps}


@dataclass(frozen=True)
class RankRecord:
    """One MPI rank of the run: its world rank, host, node-local rank, GPU (CUDA's index on its host), pid."""

    rank: int
    host: str
    gpu: int
    local_rank: int | None = None
    pid: int | None = None

    @classmethod
    def from_json(cls, r: dict) -> "RankRecord":
        return cls(r["rank"], r["host"], r["gpu"], r.get("local_rank"), r.get("pid"))

    def as_json(self) -> dict:
        out = {"rank": self.rank, "host": self.host, "local_rank": self.local_rank, "gpu": self.gpu, "pid": self.pid}
        return {k: v for k, v in out.items() if v is not None}


@dataclass(frozen=True)
class Link:
    """One GPU pair of a host's NVML link table: its kind (nvlink, nvswitch, pcie, unknown) and its one-way
    peak and ceiling, recomputed from the recorded facts with the one convention (catalogue/links.py), so runs
    recorded under an older convention read the same as new ones."""

    host: str
    src_gpu: int
    dst_gpu: int
    kind: str
    peak_gbps: float | None  # the quoted data rate: what "% of peak" divides by
    nvlink_count: int | None = None
    nvlink_version: str | None = None
    per_link_gbps: float | None = None  # one NVLink's peak
    ceiling_gbps: float | None = None  # the physical rate no measurement may exceed
    per_link_ceiling_gbps: float | None = None  # one NVLink's ceiling

    @classmethod
    def from_json(cls, host: str, entry: dict) -> "Link":
        """A link entry read with today's rate convention (catalogue/links.rates_of_entry), whatever the run
        recorded. Where its facts give no rate (an entry without the NVLink generation, say), the recorded
        rates are kept, the recorded peak standing for the ceiling when none was recorded."""
        src, dst, count, version = entry["src_gpu"], entry["dst_gpu"], entry.get("nvlink_count"), \
            entry.get("nvlink_version")
        r = rates_of_entry({"kind": entry.get("kind"), "nvlink_count": count, "nvlink_version": version,
                            "pcie_gen": entry.get("pcie_gen"), "pcie_width": entry.get("pcie_width")})
        if r.peak_gbps is None and r.ceiling_gbps is None:
            peak, per_link = _float(entry.get("peak_gbps")), _float(entry.get("per_link_gbps"))
            return cls(host, src, dst, entry.get("kind") or "", peak, count, version, per_link,
                       _float(entry.get("ceiling_gbps")) or peak,
                       _float(entry.get("per_link_ceiling_gbps")) or per_link)
        return cls(host, src, dst, r.kind, r.peak_gbps, count, version, r.per_link_gbps, r.ceiling_gbps,
                   r.per_link_ceiling_gbps)


@dataclass(frozen=True)
class Skipped:
    """A step that could not run, and why (a GPU feature missing, NCCL unavailable): run/walk.py records it, so
    a reader can say why some rows are absent instead of guessing (nvbandwidth writes WAIVED)."""

    suite: str
    step: str
    reason: str
    host: str = ""

    def as_json(self) -> dict:
        return {"suite": self.suite, "step": self.step, "reason": self.reason, "host": self.host}

    @classmethod
    def from_json(cls, v: dict) -> "Skipped":
        return cls(v["suite"], v["step"], v["reason"], v.get("host", ""))


@dataclass(frozen=True)
class SamplingRecord:
    """The sampling rule a run recorded (options.sampling; options' own min_time_ms and samples): what the
    report's options line and the cost fit read. None: not recorded."""

    noise: float | None = None
    min_samples: int | None = None
    max_samples: int | None = None
    max_time_s: float | None = None  # None: no limit (or not recorded)
    min_time_ms: float | None = None
    fixed_samples: int | None = None  # --samples N: every row took N samples

    @classmethod
    def from_options(cls, options: dict) -> "SamplingRecord":
        s = options.get("sampling", {})
        return cls(_float(s.get("noise")), s.get("min_samples"), s.get("max_samples"), _float(s.get("max_time_s")),
                   _float(options.get("min_time_ms", s.get("min_time_ms"))), options.get("samples"))


@dataclass(frozen=True)
class PairingRecord:
    """How the run's pairs were measured (meta.json's pair_mode): `mode` sequential or concurrent, as --pairs
    `requested` and why; the serial steps' coverage (every pair or a ring, as --serial-pairs asked and why);
    `one_per_gpu_pair`: --quick measured one rank pair per GPU pair where ranks share GPUs."""

    mode: str
    requested: str | None = None
    reason: str | None = None
    serial_coverage: str | None = None
    serial_requested: str | None = None
    serial_reason: str | None = None
    one_per_gpu_pair: bool = False

    @classmethod
    def from_json(cls, pm: dict) -> "PairingRecord | None":
        if "mode" not in pm:
            return None
        sp = pm.get("serial_pairs", {})
        return cls(pm["mode"], pm.get("requested"), pm.get("reason"), sp.get("coverage"), sp.get("requested"),
                   sp.get("reason"), "rank_pairs" in pm)


def _float(v) -> float | None:
    return None if v is None else float(v)
