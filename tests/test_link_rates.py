"""core/link_rates.py: the peak and ceiling of each link kind and generation, with the published values
written out here (not recomputed from the module's table), so that changing a rate fails a test."""

from __future__ import annotations

import pytest

from ipcbench.core.link_rates import CONVENTION, LINK_KINDS, NVLINK, NVML_ENUM, PCIE, link_rates, rates_of_entry

# Per link per direction, GB/s: (quoted data rate = peak, signalling rate = ceiling).
# P100 1.0: 160 GB/s both ways over 4 links; 8 lanes x 20 Gb/s (no NVML reading known: ceiling = peak).
# V100 2.0: 300 GB/s both ways over 6 links; `nvidia-smi nvlink -s` reads 25.781 (Azure/azhpc-diagnostics#73).
# A100 3.x: 600 GB/s both ways over 12 links; nvidia-smi reads 25 per link (NVIDIA/nccl#1054).
# H100/H200 4.0: 900 GB/s both ways over 18 links; NVML / nvidia-smi read 26.562 (2 lanes x 106.25 Gb/s).
# B200 5.0: 1.8 TB/s both ways over 18 links; nvidia-smi on a GB200 reads 53.125 (NVIDIA/k8s-test-infra#371).
PUBLISHED = {"1.0": (20.0, 20.0), "2.0": (25.0, 25.78125), "2.2": (25.0, 25.78125), "3.0": (25.0, 25.0),
             "3.1": (25.0, 25.0), "4.0": (25.0, 26.5625), "5.0": (50.0, 53.125)}


@pytest.mark.parametrize("version", sorted(PUBLISHED))
@pytest.mark.parametrize("kind", ["nvlink", "nvswitch"])
def test_nvlink_peak_and_ceiling_per_generation(kind, version):
    peak, ceiling = PUBLISHED[version]
    r = link_rates(kind, 6, version)
    assert (r.kind, r.per_link_gbps, r.per_link_ceiling_gbps) == (kind, peak, ceiling)
    assert (r.peak_gbps, r.ceiling_gbps) == (pytest.approx(6 * peak), pytest.approx(6 * ceiling))
    assert r.peak_basis == f"6 x {peak:g} GB/s: NVLink {version} data rate per link"
    assert r.ceiling_basis == f"6 x {ceiling:g} GB/s: NVLink {version} signalling rate per link"


def test_hopper_and_blackwell_totals_match_nvidias_figures():
    """18 links: H100/H200 450 per direction (900 both ways) under a 478.125 ceiling; B200 900 / 956.25."""
    h = link_rates("nvswitch", 18, "4.0")
    assert (h.peak_gbps, h.ceiling_gbps) == (450.0, 478.125)
    b = link_rates("nvswitch", 18, "5.0")
    assert (b.peak_gbps, b.ceiling_gbps) == (900.0, 956.25)


def test_every_nvml_version_has_a_documented_entry():
    """The NVML enum (pynvml NVML_NVLINK_VERSION_1_0 = 1 ... 6_0 = 8) maps onto the table; 6.0 has no rates."""
    assert NVML_ENUM == {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0"}
    assert set(NVML_ENUM.values()) == set(NVLINK) and all(NVLINK[v].source for v in NVLINK)
    r = link_rates("nvlink", 18, "6.0")
    assert (r.peak_gbps, r.ceiling_gbps, r.peak_basis) == (None, None, "NVLink 6.0: no rate known")


# PCIe per lane per direction after the line code (PCIe base specifications): GT/s x code / 8, x16 here.
PCIE_X16 = {1: 16 * 2.5 * 8 / 10 / 8,  # 4.0 GB/s
            2: 16 * 5.0 * 8 / 10 / 8,  # 8.0
            3: 16 * 8.0 * 128 / 130 / 8,  # 15.75
            4: 16 * 16.0 * 128 / 130 / 8,  # 31.51
            5: 16 * 32.0 * 128 / 130 / 8,  # 63.02
            6: 16 * 64.0 * 242 / 256 / 8}  # 121.0 (flit mode: 242 of 256 bytes carry TLPs and DLLPs)


@pytest.mark.parametrize("gen", sorted(PCIE_X16))
def test_pcie_peak_equals_ceiling_per_generation(gen):
    r = link_rates("pcie", 0, None, gen, 16)
    assert r.peak_gbps == pytest.approx(PCIE_X16[gen], rel=1e-12) and r.ceiling_gbps == r.peak_gbps
    assert (r.per_link_gbps, r.per_link_ceiling_gbps) == (None, None)
    assert r.peak_basis.startswith(f"16 lanes x {PCIE[gen].gts:g} GT/s {PCIE[gen].code}")
    assert link_rates("pcie", 0, None, gen, 8).peak_gbps == pytest.approx(PCIE_X16[gen] / 2)


def test_gen5_x16_is_about_63_gbps():
    assert link_rates("pcie", 0, None, 5, 16).peak_gbps == pytest.approx(63.015, abs=1e-3)


def test_unknowns_give_no_rates():
    for r in (link_rates("unknown", 18, "4.0", 5, 16), link_rates("bogus", 18, "4.0"),
              link_rates("nvlink", 4, None), link_rates("nvswitch", 0, "4.0"), link_rates("pcie", 0, None, None, 16),
              link_rates("pcie", 0, None, 5, None), link_rates("pcie", 0, None, 9, 16)):
        assert (r.peak_gbps, r.ceiling_gbps) == (None, None)
    assert link_rates("bogus", 18, "4.0").kind == "unknown"
    assert {link_rates(k, 18, "4.0", 5, 16).kind for k in (*LINK_KINDS, "bogus")} == set(LINK_KINDS)
    assert link_rates("nvlink", 4, None).peak_basis == "NVLink generation unknown"


def test_an_entry_recorded_under_the_old_convention_is_recomputed():
    """Before CONVENTION 2, NVLink 4.0 entries carried the signalling rate as their peak (478.125 over 18
    links); rates_of_entry reads only the facts, so the peak is 450 and 478.125 is the ceiling."""
    old = {"src_gpu": 0, "dst_gpu": 1, "kind": "nvswitch", "nvlink_count": 18, "per_link_gbps": 26.5625,
           "peak_gbps": 478.125, "pcie_gen": 5, "pcie_width": 16, "nvlink_version": "4.0"}
    r = rates_of_entry(old)
    assert (r.kind, r.peak_gbps, r.ceiling_gbps, r.per_link_gbps) == ("nvswitch", 450.0, 478.125, 25.0)
    pcie = rates_of_entry({"kind": "pcie", "nvlink_count": 0, "pcie_gen": 5, "pcie_width": 16, "peak_gbps": 63.0})
    assert pcie.peak_gbps == pytest.approx(63.015, abs=1e-3)
    assert rates_of_entry({}).kind == "unknown"
    d = r.as_dict()
    assert d["rate_convention"] == CONVENTION == 2
    assert set(d) == {"kind", "peak_gbps", "ceiling_gbps", "per_link_gbps", "per_link_ceiling_gbps", "peak_basis",
                      "ceiling_basis", "rate_convention"}


def test_the_run_model_reads_recorded_links_with_this_convention():
    """A run recorded with the old convention (NVLink 4.0 peak 478.125 = the signalling rate) reads back with
    peak 450 (what "% of peak" divides by) and ceiling 478.125 (what no row may exceed); an entry whose
    facts give no rate keeps what it recorded, its peak standing for the ceiling."""
    from ipcbench.record.meta import parse_meta

    old = {"src_gpu": 0, "dst_gpu": 1, "kind": "nvswitch", "nvlink_count": 18, "per_link_gbps": 26.5625,
           "peak_gbps": 478.125, "pcie_gen": 5, "pcie_width": 16, "nvlink_version": "4.0"}
    bare = {"src_gpu": 2, "dst_gpu": 3, "kind": "nvlink", "nvlink_count": 4, "peak_gbps": 100.0}
    meta = parse_meta({"topology": {"h": {"links": [old, bare]}}})
    assert meta.link_peaks()[("h", 0, 1)] == meta.link_peaks()[("h", 1, 0)] == 450.0
    assert meta.link_ceilings()[("h", 0, 1)] == 478.125
    assert meta.link_peaks()[("h", 2, 3)] == meta.link_ceilings()[("h", 2, 3)] == 100.0
