"""core/topology.py's link table from a fake NVML (a stand-in for pynvml's module, fed link states and
PCIe values): this tests the classification and peak arithmetic, not a machine's topology."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ipcbench.core import topology
from ipcbench.core.topology import (NVLINK_GBPS, PCIE_LANE_GBPS, gpu_links, nvml_driver_version, nvml_gpu_count,
                                    nvml_link_kinds)


class NVMLError(Exception):
    pass


class FakeNvml:
    """GPUs by PCI bus id; each has a list of NVLink remote bus ids (None = link down), an NVLink
    version enum and PCIe (gen, width, max gen, max width)."""

    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 18
    NVMLError = NVMLError

    def __init__(self, gpus: dict, fail_state_at: int | None = None, no_pcie: bool = False,
                 no_version: bool = False):
        self.gpus = gpus
        self.fail_state_at = fail_state_at
        self.no_pcie = no_pcie
        self.no_version = no_version
        self.shutdowns = 0

    def nvmlDeviceGetHandleByPciBusId(self, bus: bytes):
        """Like NVML, accept any domain width and case."""
        assert isinstance(bus, bytes)
        want = bus.decode().lower().split(":")[-2:]
        (h,) = [b for b in self.gpus if b.lower().split(":")[-2:] == want]
        return h

    def nvmlDeviceGetHandleByIndex(self, i):
        return list(self.gpus)[i]

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=h.encode())

    def nvmlDeviceGetNvLinkState(self, h, link):
        if self.fail_state_at is not None and link >= self.fail_state_at:
            raise NVMLError("not supported")
        links = self.gpus[h]["links"]
        return int(link < len(links) and links[link] is not None)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        remote = self.gpus[h]["links"][link]
        if remote == "?":
            raise NVMLError("unknown remote")
        return SimpleNamespace(busId=remote.encode())

    def nvmlDeviceGetNvLinkVersion(self, h, link):
        if self.no_version:
            raise NVMLError("no version")
        return self.gpus[h]["version"]

    def _pcie(self, h, i):
        if self.no_pcie:
            raise NVMLError("no PCIe info")
        return self.gpus[h]["pcie"][i]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._pcie(h, 0)

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._pcie(h, 1)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._pcie(h, 2)

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._pcie(h, 3)

    def nvmlSystemGetDriverVersion(self):
        return b"570.86.15"

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlShutdown(self):
        self.shutdowns += 1


BUS = ["00000000:1B:00.0", "00000000:43:00.0", "00000000:52:00.0", "00000000:61:00.0"]
CUDA_BUS = ["0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0"]  # CUDA's spelling


def use(monkeypatch, nv):
    monkeypatch.setattr(topology, "_nvml", lambda: nv)
    return nv


def link(table, i, j):
    (entry,) = [e for e in table["links"] if (e["src_gpu"], e["dst_gpu"]) == (i, j)]
    return entry


def test_direct_nvlink_counts_links_to_that_gpu(monkeypatch):
    """GPU 0 and 1 share 4 NVLink 4.0 links; GPU 0 has 2 more to GPU 2 (a mesh)."""
    gpus = {BUS[0]: dict(links=[BUS[1]] * 4 + [BUS[2]] * 2, version=6, pcie=(5, 16, 5, 16)),
            BUS[1]: dict(links=[BUS[0]] * 4, version=6, pcie=(5, 16, 5, 16)),
            BUS[2]: dict(links=[BUS[0]] * 2, version=6, pcie=(4, 16, 4, 16))}
    nv = use(monkeypatch, FakeNvml(gpus))
    t = gpu_links(CUDA_BUS[:3])
    assert t["nvml"] and t["driver"] == "570.86.15" and nv.shutdowns == 1
    e = link(t, 0, 1)
    assert (e["kind"], e["nvlink_count"], e["nvlink_version"]) == ("nvlink", 4, "4.0")
    assert e["peak_gbps"] == pytest.approx(4 * NVLINK_GBPS[6])
    assert link(t, 0, 2)["nvlink_count"] == 2 and link(t, 2, 0)["nvlink_count"] == 2
    # 1 <-> 2 have no direct link but both have active links: modelled as through a switch
    assert link(t, 1, 2)["kind"] == "nvswitch" and link(t, 1, 2)["nvlink_count"] == 2
    assert link(t, 1, 2)["pcie_gen"] == 4 and link(t, 1, 2)["pcie_width"] == 16
    assert len(t["links"]) == 6 and t["per_gpu"][0]["active"] == 6


def test_nvswitch_gives_the_smaller_link_count(monkeypatch):
    switch = "00000000:F0:00.0"
    gpus = {BUS[0]: dict(links=[switch] * 18, version=6, pcie=(5, 16, 5, 16)),
            BUS[1]: dict(links=[switch] * 12 + [None] * 6, version=6, pcie=(5, 16, 5, 16))}
    use(monkeypatch, FakeNvml(gpus))
    t = gpu_links(CUDA_BUS[:2])
    e = link(t, 0, 1)
    assert (e["kind"], e["nvlink_count"], e["per_link_gbps"]) == ("nvswitch", 12, NVLINK_GBPS[6])
    assert e["peak_gbps"] == pytest.approx(12 * 26.5625)


def test_pcie_only_uses_the_smaller_generation_and_width(monkeypatch):
    gpus = {BUS[0]: dict(links=[], version=None, pcie=(4, 16, 5, 16)),
            BUS[1]: dict(links=[], version=None, pcie=(4, 8, 4, 8))}
    use(monkeypatch, FakeNvml(gpus))
    e = link(gpu_links(CUDA_BUS[:2]), 0, 1)
    assert (e["kind"], e["pcie_gen"], e["pcie_width"], e["nvlink_count"]) == ("pcie", 4, 8, 0)
    assert e["peak_gbps"] == pytest.approx(8 * PCIE_LANE_GBPS[4]) and e["nvlink_version"] is None


def test_unknown_values_leave_peaks_empty(monkeypatch):
    """No NVLink version and no PCIe info: links are still classified, peaks are None."""
    gpus = {BUS[0]: dict(links=[BUS[1], "?"], version=6, pcie=None),
            BUS[1]: dict(links=[BUS[0]], version=6, pcie=None)}
    use(monkeypatch, FakeNvml(gpus, no_pcie=True, no_version=True))
    t = gpu_links(CUDA_BUS[:2])
    e = link(t, 0, 1)
    assert e["kind"] == "nvlink" and e["nvlink_count"] == 1 and e["peak_gbps"] is None
    assert t["per_gpu"][0]["remotes"] == ["43:00.0", "?"] and t["per_gpu"][0]["pcie_gen"] is None
    gpus = {BUS[0]: dict(links=[], version=None, pcie=None), BUS[1]: dict(links=[], version=None, pcie=None)}
    use(monkeypatch, FakeNvml(gpus, no_pcie=True))
    e = link(gpu_links(CUDA_BUS[:2]), 0, 1)
    assert e["kind"] == "pcie" and e["peak_gbps"] is None


def test_link_state_errors_stop_the_scan(monkeypatch):
    gpus = {BUS[0]: dict(links=[BUS[1]] * 4, version=6, pcie=(5, 16, 5, 16)),
            BUS[1]: dict(links=[BUS[0]] * 4, version=6, pcie=(5, 16, 5, 16))}
    use(monkeypatch, FakeNvml(gpus, fail_state_at=2))
    t = gpu_links(CUDA_BUS[:2])
    assert t["per_gpu"][0]["active"] == 2 and link(t, 0, 1)["nvlink_count"] == 2


def test_without_nvml_the_table_is_empty_and_never_an_error(monkeypatch):
    def missing():
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(topology, "_nvml", missing)
    assert gpu_links(CUDA_BUS[:2]) == {"nvml": False, "error": "No module named 'pynvml'", "links": []}
    assert nvml_driver_version() is None and nvml_gpu_count() is None and nvml_link_kinds() is None


def test_link_kinds_without_cuda(monkeypatch):
    switch = "00000000:F0:00.0"
    gpus = {b: dict(links=[switch] * 18, version=6, pcie=(5, 16, 5, 16)) for b in BUS}
    use(monkeypatch, FakeNvml(gpus))
    assert nvml_link_kinds() == ["nvswitch"] * 12
    use(monkeypatch, FakeNvml({BUS[0]: gpus[BUS[0]]}))
    assert nvml_link_kinds() is None  # one GPU: no pairs


def test_driver_version_and_gpu_count(monkeypatch):
    nv = use(monkeypatch, FakeNvml({BUS[0]: {}, BUS[1]: {}, BUS[2]: {}}))
    assert nvml_driver_version() == "570.86.15" and nvml_gpu_count() == 3 and nv.shutdowns == 2


def test_bus_ids_compare_across_spellings():
    assert topology._norm_bus("00000000:1B:00.0") == topology._norm_bus("0000:1b:00.0") == "1b:00.0"
    assert topology._norm_bus("weird") == "weird"
