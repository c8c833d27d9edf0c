"""Link rates: the one convention for a GPU pair's peak and ceiling, per direction (pure: no NVML).

Two numbers per link, both per direction, GB/s = 1e9 B/s:
- **peak**: the data rate the vendor quotes, what "% of peak" divides by. NVLink: NVIDIA's per-link figure
  (for H100/H200, 900 GB/s both ways over 18 links = 25 per link per direction).
- **ceiling**: the physical rate of the wire, which no measurement may exceed. NVLink: the signalling rate
  of a link (lanes x lane rate), what NVML and `nvidia-smi nvlink -s` report; NVIDIA does not publish the
  line code, so nothing is taken off it. PCIe: the transfer rate after the line code the PCIe
  specification fixes, which is also the figure quoted as the data rate, so peak == ceiling there.

`NVLINK` and `PCIE` hold the numbers and where each comes from (docs/architecture.md, "Link rates").
In the catalogue because both sides read it: core/topology.py records a link, record/meta.py reads it back.
`link_rates` computes a link's kind, peak and ceiling from the facts a link entry of meta.json records,
so runs recorded under an older convention can be re-read with this one (`rates_of_entry`).
"""

from __future__ import annotations

from dataclasses import dataclass

CONVENTION = 2  # recorded with every link entry (`rate_convention`); entries without it predate this module
LINK_KINDS = ("nvlink", "nvswitch", "pcie", "unknown")  # what a GPU pair is linked by (core/topology.py)
# --topology of a dry run (all, check, selftest): how every GPU pair of the node it plans for is linked
PLANNED_KINDS = ("nvswitch", "nvlink", "pcie")


@dataclass(frozen=True)
class NvlinkGen:
    """One NVLink generation, per link per direction: the quoted data rate and the signalling rate."""

    name: str
    peak_gbps: float | None
    ceiling_gbps: float | None
    source: str
    links: int | None = None  # the most NVLinks a GPU of this generation has (its source's "over N links")


# Keyed by the name ipcbench records (`nvlink_version`); NVML_ENUM maps nvmlDeviceGetNvLinkVersion to it.
NVLINK = {
    "1.0": NvlinkGen("1.0", 20.0, 20.0, "P100: 8 lanes x 20 Gb/s (NVIDIA's P100 figure: 160 GB/s both ways over "
                                        "4 links); no NVML reading known, so the ceiling is that same rate", 4),
    "2.0": NvlinkGen("2.0", 25.0, 25.78125, "V100: 300 GB/s both ways over 6 links; nvidia-smi nvlink -s on a V100 "
                                            "reads 25.781 GB/s per link (Azure/azhpc-diagnostics#73)", 6),
    "2.2": NvlinkGen("2.2", 25.0, 25.78125, "taken as 2.0 (same lane rate); no reading of its own", 6),
    "3.0": NvlinkGen("3.0", 25.0, 25.0, "A100: 600 GB/s both ways over 12 links; nvidia-smi nvlink -s reads 25 "
                                        "GB/s per link (NVIDIA/nccl#1054: 300 GB/s over 12 links)", 12),
    "3.1": NvlinkGen("3.1", 25.0, 25.0, "taken as 3.0", 12),
    "4.0": NvlinkGen("4.0", 25.0, 26.5625, "H100/H200: 900 GB/s both ways over 18 links; NVML and nvidia-smi "
                                           "nvlink -s read 26.562 GB/s per link (2 lanes x 106.25 Gb/s)", 18),
    "5.0": NvlinkGen("5.0", 50.0, 53.125, "B200: 1.8 TB/s both ways over 18 links; nvidia-smi nvlink -s on a "
                                          "GB200 reads 53.125 GB/s per link (NVIDIA/k8s-test-infra#371)", 18),
    "6.0": NvlinkGen("6.0", None, None, "no per-link figure known: no peak, no ceiling"),
}
# nvmlDeviceGetNvLinkVersion's enum (pynvml NVML_NVLINK_VERSION_x_y) -> the recorded name
NVML_ENUM = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0"}


@dataclass(frozen=True)
class PcieGen:
    """One PCIe generation: transfer rate per lane (GT/s) and the line code (payload bits / line bits)."""

    gts: float
    payload_bits: int
    line_bits: int
    code: str

    @property
    def lane_gbps(self) -> float:
        """GB/s per lane per direction after the line code."""
        return self.gts * self.payload_bits / self.line_bits / 8


# PCIe base specifications: 8b/10b up to Gen2, 128b/130b Gen3-5, Gen6 flits of 256 B of which 242 carry
# TLPs and DLLPs (the rest is CRC and FEC). Gen5 x16: 63.0 GB/s per direction.
PCIE = {1: PcieGen(2.5, 8, 10, "8b/10b"), 2: PcieGen(5.0, 8, 10, "8b/10b"), 3: PcieGen(8.0, 128, 130, "128b/130b"),
        4: PcieGen(16.0, 128, 130, "128b/130b"), 5: PcieGen(32.0, 128, 130, "128b/130b"),
        6: PcieGen(64.0, 242, 256, "242B/256B flits")}


@dataclass(frozen=True)
class LinkRates:
    """A link's kind and its two rates per direction (None where unknown), per NVLink link where it has
    them, and what each came from."""

    kind: str
    peak_gbps: float | None
    ceiling_gbps: float | None
    per_link_gbps: float | None  # NVLink only: the peak of one link
    per_link_ceiling_gbps: float | None  # NVLink only: the ceiling of one link
    peak_basis: str
    ceiling_basis: str

    def as_dict(self) -> dict:
        """The keys a link entry of meta.json carries (with `rate_convention`)."""
        return {"kind": self.kind, "peak_gbps": self.peak_gbps, "ceiling_gbps": self.ceiling_gbps,
                "per_link_gbps": self.per_link_gbps, "per_link_ceiling_gbps": self.per_link_ceiling_gbps,
                "peak_basis": self.peak_basis, "ceiling_basis": self.ceiling_basis,
                "rate_convention": CONVENTION}


def _times(n: int, rate: float | None) -> float | None:
    return n * rate if rate is not None and n > 0 else None


def link_rates(kind: str, nvlink_count: int | None = 0, nvlink_version: str | None = None,
               pcie_gen: int | None = None, pcie_width: int | None = None) -> LinkRates:
    """Peak and ceiling per direction of a link of `kind` (nvlink | nvswitch | pcie | unknown).

    NVLink (direct or through a switch): nvlink_count links x the generation's rate per link. PCIe: width
    x the generation's rate per lane. An unknown kind, generation, count or width gives None, never a
    guess; any other kind string is read as unknown."""
    if kind in ("nvlink", "nvswitch"):
        n = int(nvlink_count or 0)
        gen = NVLINK.get(str(nvlink_version)) if nvlink_version is not None else None
        if gen is None or gen.peak_gbps is None or n < 1:
            why = (f"NVLink {nvlink_version}: no rate known" if nvlink_version is not None and n >= 1
                   else "NVLink generation unknown" if n >= 1 else "no NVLink counted")
            return LinkRates(kind, None, None, gen.peak_gbps if gen else None, gen.ceiling_gbps if gen else None,
                             why, why)
        return LinkRates(kind, _times(n, gen.peak_gbps), _times(n, gen.ceiling_gbps), gen.peak_gbps,
                         gen.ceiling_gbps, f"{n} x {gen.peak_gbps:g} GB/s: NVLink {gen.name} data rate per link",
                         f"{n} x {gen.ceiling_gbps:g} GB/s: NVLink {gen.name} signalling rate per link")
    if kind == "pcie":
        pcie = PCIE.get(int(pcie_gen)) if pcie_gen else None
        width = int(pcie_width or 0)
        if pcie is None or width < 1:
            why = f"PCIe gen{pcie_gen} x{pcie_width}: no rate known"
            return LinkRates(kind, None, None, None, None, why, why)
        rate = width * pcie.lane_gbps
        basis = f"{width} lanes x {pcie.gts:g} GT/s {pcie.code}: PCIe gen{pcie_gen} after the line code"
        return LinkRates(kind, rate, rate, None, None, basis, basis)
    return LinkRates("unknown", None, None, None, None, "link kind unknown: no rate", "link kind unknown: no rate")


def rates_of_entry(entry: dict) -> LinkRates:
    """link_rates from a link entry of meta.json as recorded (any convention): its kind, nvlink_count,
    nvlink_version, pcie_gen, pcie_width."""
    return link_rates(str(entry.get("kind") or "unknown"), entry.get("nvlink_count"), entry.get("nvlink_version"),
                      entry.get("pcie_gen"), entry.get("pcie_width"))
