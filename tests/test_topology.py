"""core/topology.py's link table from a fake NVML (a stand-in for pynvml's module, fed link states and
PCIe values): this tests the classification and peak arithmetic, not a machine's topology."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ipcbench.core import topology
from ipcbench.core.topology import gpu_links, nvml_driver_version, nvml_gpu_count, nvml_link_kinds, nvml_mig_modes


class NVMLError(Exception):
    pass


class FakeNvml:
    """GPUs by PCI bus id; each has a list of NVLink far ends (None = link down; a bus id string = a GPU
    there; a (type, bus) tuple = a far end of that NVML remote device type, e.g. SWITCH), an NVLink
    version enum and PCIe (gen, width, max gen, max width). `remote_type`: "ok" answers
    nvmlDeviceGetNvLinkRemoteDeviceType, "missing" is a binding without it, "not_found" a driver without it
    (NVML_ERROR_FUNCTION_NOT_FOUND)."""

    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 18
    NVML_NVLINK_DEVICE_TYPE_GPU, NVML_NVLINK_DEVICE_TYPE_IBMNPU, NVML_NVLINK_DEVICE_TYPE_SWITCH = 0, 1, 2
    NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 255
    NVMLError = NVMLError

    def __init__(self, gpus: dict, fail_state_at: int | None = None, no_pcie: bool = False,
                 no_version: bool = False, remote_type: str = "ok"):
        self.gpus = gpus
        self.fail_state_at = fail_state_at
        self.no_pcie = no_pcie
        self.no_version = no_version
        self.remote_type = remote_type
        self.shutdowns = 0

    def __getattribute__(self, name):
        if name == "nvmlDeviceGetNvLinkRemoteDeviceType" and object.__getattribute__(self, "remote_type") == "missing":
            raise AttributeError(name)
        return object.__getattribute__(self, name)

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

    def _far(self, h, link) -> tuple[int, str]:
        remote = self.gpus[h]["links"][link]
        return remote if isinstance(remote, tuple) else (self.NVML_NVLINK_DEVICE_TYPE_GPU, remote)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        remote = self._far(h, link)[1]
        if remote == "?":
            raise NVMLError("unknown remote")
        return SimpleNamespace(busId=remote.encode())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        if self.remote_type == "not_found":
            raise NVMLError("Function Not Found")
        return self._far(h, link)[0]

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

    def nvmlDeviceGetMigMode(self, h):
        mig = self.gpus[h].get("mig")
        if mig is None:
            raise NVMLError("Not Supported")
        return list(mig)

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


SWITCH = [(2, f"00000000:{b}:00.0") for b in ("A1", "A2", "A3", "A4")]  # NVML_NVLINK_DEVICE_TYPE_SWITCH
GEN5 = (5, 16, 5, 16)
# PCIe gen5 x16 per direction: 16 lanes x 32 GT/s x 128/130 / 8 bits (PCIe 5.0 base specification)
GEN5_X16 = 16 * 32 * 128 / 130 / 8  # 63.015 GB/s


def switch_links(n: int) -> list:
    """n links spread over the four switches, as on an HGX board."""
    return [SWITCH[k % 4] for k in range(n)]


def bridged_box() -> dict:
    """4 GPUs, NVLink 4 bridges (12 links) only on 0<->1 and 2<->3; everything else over PCIe gen5 x16."""
    return {BUS[0]: dict(links=[BUS[1]] * 12, version=6, pcie=GEN5),
            BUS[1]: dict(links=[BUS[0]] * 12, version=6, pcie=GEN5),
            BUS[2]: dict(links=[BUS[3]] * 12, version=6, pcie=GEN5),
            BUS[3]: dict(links=[BUS[2]] * 12, version=6, pcie=GEN5)}


HGX_BUS = [f"00000000:{b:02X}:00.0" for b in (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)]


def hgx(links: int = 18) -> dict:
    return {b: dict(links=switch_links(links), version=6, pcie=GEN5) for b in HGX_BUS}


def kinds(table) -> dict:
    return {(e["src_gpu"], e["dst_gpu"]): e["kind"] for e in table["links"]}


def test_bridged_box_calls_only_the_bridged_pairs_nvlink(monkeypatch):
    """The issue's box: 0<->2 etc. have no NVLink path and are PCIe (not nvswitch at 12 x 26.5625)."""
    use(monkeypatch, FakeNvml(bridged_box()))
    t = gpu_links(CUDA_BUS)
    bridged = {(0, 1), (1, 0), (2, 3), (3, 2)}
    assert kinds(t) == {(i, j): "nvlink" if (i, j) in bridged else "pcie" for i in range(4) for j in range(4) if i != j}
    e = link(t, 0, 1)
    assert (e["nvlink_count"], e["nvlink_version"], e["per_link_gbps"]) == (12, "4.0", 25.0)
    assert e["peak_gbps"] == pytest.approx(300.0) and e["ceiling_gbps"] == pytest.approx(318.75)
    assert e["kind_reason"] == "12 direct NVLinks between GPU 0 and GPU 1" and e["rate_convention"] == 2
    for i, j in ((0, 2), (0, 3), (1, 2), (3, 0)):
        e = link(t, i, j)
        assert (e["nvlink_count"], e["pcie_gen"], e["pcie_width"], e["per_link_gbps"]) == (0, 5, 16, None)
        assert e["peak_gbps"] == pytest.approx(GEN5_X16) and e["ceiling_gbps"] == pytest.approx(GEN5_X16)
        assert e["kind_reason"] == "no NVLink path between them: PCIe"
    assert t["per_gpu"][0]["gpu_links"] == 12 and t["per_gpu"][0]["switch_links"] == 0


def test_hgx_every_pair_through_the_switch(monkeypatch):
    """8 GPUs x 18 NVLink 4 links to four switches: every pair nvswitch, 18 links, 450 / 478.125 GB/s."""
    use(monkeypatch, FakeNvml(hgx()))
    t = gpu_links(HGX_BUS)
    assert len(t["links"]) == 56 and set(kinds(t).values()) == {"nvswitch"}
    e = link(t, 3, 6)
    assert (e["nvlink_count"], e["per_link_gbps"], e["per_link_ceiling_gbps"]) == (18, 25.0, 26.5625)
    assert e["peak_gbps"] == pytest.approx(450.0) and e["ceiling_gbps"] == pytest.approx(478.125)
    assert e["kind_reason"] == "both on NVSwitch: min(18, 18) switch links"
    assert t["per_gpu"][0]["remote_types"] == ["switch"] * 18 and t["per_gpu"][0]["switch_links"] == 18


def test_pcie_only_uses_the_smaller_generation_and_width(monkeypatch):
    gpus = {BUS[0]: dict(links=[], version=None, pcie=(4, 16, 5, 16)),
            BUS[1]: dict(links=[], version=None, pcie=(4, 8, 4, 8))}
    use(monkeypatch, FakeNvml(gpus))
    e = link(gpu_links(CUDA_BUS[:2]), 0, 1)
    assert (e["kind"], e["pcie_gen"], e["pcie_width"], e["nvlink_count"]) == ("pcie", 4, 8, 0)
    assert e["peak_gbps"] == pytest.approx(8 * 16 * 128 / 130 / 8) == e["ceiling_gbps"]
    assert e["nvlink_version"] is None


def test_mixed_box_switch_pairs_take_the_smaller_count_and_the_odd_gpu_is_pcie(monkeypatch):
    """GPUs 0-2 on NVSwitch (GPU 1 with 12 of its 18 links up), GPU 3 on PCIe only."""
    gpus = {BUS[0]: dict(links=switch_links(18), version=6, pcie=GEN5),
            BUS[1]: dict(links=switch_links(12) + [None] * 6, version=6, pcie=GEN5),
            BUS[2]: dict(links=switch_links(18), version=6, pcie=GEN5),
            BUS[3]: dict(links=[], version=None, pcie=(4, 16, 4, 16))}
    use(monkeypatch, FakeNvml(gpus))
    t = gpu_links(CUDA_BUS)
    assert kinds(t) == {(i, j): "pcie" if 3 in (i, j) else "nvswitch" for i in range(4) for j in range(4) if i != j}
    assert (link(t, 0, 2)["nvlink_count"], link(t, 0, 1)["nvlink_count"], link(t, 1, 2)["nvlink_count"]) == (18, 12, 12)
    assert link(t, 1, 0)["kind_reason"] == "both on NVSwitch: min(12, 18) switch links"
    assert link(t, 0, 1)["peak_gbps"] == pytest.approx(12 * 25.0)
    assert link(t, 0, 1)["ceiling_gbps"] == pytest.approx(12 * 26.5625)
    e = link(t, 0, 3)  # gen5 on one side, gen4 on the other: the link trains to gen4
    assert (e["pcie_gen"], e["pcie_width"]) == (4, 16) and e["peak_gbps"] == pytest.approx(16 * 16 * 128 / 130 / 8)
    assert link(t, 3, 0)["nvlink_version"] == "4.0"  # recorded from whichever GPU has NVLink


@pytest.mark.parametrize("how", ["missing", "not_found"])
def test_without_the_remote_type_switch_pairs_are_unknown(monkeypatch, how):
    """A binding or driver without nvmlDeviceGetNvLinkRemoteDeviceType: an HGX's far ends are buses that
    are none of the GPUs, so no pair can be told apart from PCIe: unknown, with why, and no rates."""
    use(monkeypatch, FakeNvml(hgx(), remote_type=how))
    t = gpu_links(HGX_BUS)
    assert set(kinds(t).values()) == {"unknown"}
    e = link(t, 0, 1)
    assert (e["peak_gbps"], e["ceiling_gbps"], e["per_link_gbps"], e["nvlink_count"]) == (None, None, None, 0)
    assert e["kind_reason"] == ("cannot tell NVSwitch from PCIe: GPU 0 has 18 NVLinks whose far end NVML does not "
                                "name (far ends a1:00.0, a2:00.0, a3:00.0, a4:00.0, none of these GPUs; remote "
                                "device type not readable here)")
    assert t["per_gpu"][0]["remote_types"] == [None] * 18 and t["per_gpu"][0]["unknown_links"] == 18


@pytest.mark.parametrize("how", ["missing", "not_found"])
def test_without_the_remote_type_bridges_and_pcie_are_still_told(monkeypatch, how):
    """Far ends that are our GPUs need no remote type; a GPU with no NVLink cannot be on a switch."""
    use(monkeypatch, FakeNvml(bridged_box(), remote_type=how))
    t = gpu_links(CUDA_BUS)
    assert kinds(t)[0, 1] == "nvlink" and kinds(t)[0, 2] == "pcie" and link(t, 2, 3)["nvlink_count"] == 12
    gpus = {BUS[0]: dict(links=switch_links(18), version=6, pcie=GEN5), BUS[1]: dict(links=[], version=None, pcie=GEN5)}
    use(monkeypatch, FakeNvml(gpus, remote_type=how))
    assert kinds(gpu_links(CUDA_BUS[:2])) == {(0, 1): "pcie", (1, 0): "pcie"}


def test_far_ends_of_other_kinds(monkeypatch):
    """NVML's UNKNOWN answer is unknown; a switch needs no bus id; a GPU this run does not see is no path;
    NVLinks to CPUs on both sides may carry the pair through the CPUs: unknown."""
    outside = "00000000:99:00.0"  # a GPU hidden from the run (CUDA_VISIBLE_DEVICES)
    gpus = {BUS[0]: dict(links=[(255, "00000000:A1:00.0")], version=6, pcie=GEN5),
            BUS[1]: dict(links=[(2, "?")] * 2, version=6, pcie=GEN5)}
    use(monkeypatch, FakeNvml(gpus))
    e = link(gpu_links(CUDA_BUS[:2]), 1, 0)
    assert e["kind"] == "unknown"
    assert e["kind_reason"].endswith("(far ends a1:00.0, none of these GPUs; remote device type UNKNOWN)")
    gpus = {BUS[0]: dict(links=[(2, "?")] * 2, version=6, pcie=GEN5),
            BUS[1]: dict(links=[(2, "?")] * 3 + [outside], version=6, pcie=GEN5)}
    use(monkeypatch, FakeNvml(gpus))
    t = gpu_links(CUDA_BUS[:2])
    assert (link(t, 0, 1)["kind"], link(t, 0, 1)["nvlink_count"]) == ("nvswitch", 2)
    assert t["per_gpu"][1]["gpu_links"] == 0 and t["per_gpu"][1]["switch_links"] == 3
    npu = (1, "00000000:04:00.0")
    gpus = {BUS[0]: dict(links=[npu] * 3, version=3, pcie=(3, 16, 3, 16)),
            BUS[1]: dict(links=[npu] * 3, version=3, pcie=(3, 16, 3, 16)),
            BUS[2]: dict(links=[], version=None, pcie=(3, 16, 3, 16))}
    use(monkeypatch, FakeNvml(gpus))
    t = gpu_links(CUDA_BUS[:3])
    assert kinds(t)[0, 1] == "unknown" and "through the CPUs" in link(t, 0, 1)["kind_reason"]
    assert kinds(t)[0, 2] == "pcie"  # GPU 2 reaches the CPU over PCIe: that bounds the pair


def test_direct_links_count_from_the_side_that_names_more(monkeypatch):
    """GPU 0 cannot read the far ends' bus ids, GPU 1 can: the 4 links are still counted."""
    gpus = {BUS[0]: dict(links=[(0, "?")] * 4, version=6, pcie=GEN5),
            BUS[1]: dict(links=[BUS[0]] * 4, version=6, pcie=GEN5)}
    use(monkeypatch, FakeNvml(gpus))
    t = gpu_links(CUDA_BUS[:2])
    assert (link(t, 0, 1)["kind"], link(t, 0, 1)["nvlink_count"]) == ("nvlink", 4) == (link(t, 1, 0)["kind"], 4)


def test_direct_nvlink_counts_links_to_that_gpu(monkeypatch):
    """GPU 0 and 1 share 4 NVLink 4.0 links; GPU 0 has 2 more to GPU 2 (a mesh); 1 and 2 have none."""
    gpus = {BUS[0]: dict(links=[BUS[1]] * 4 + [BUS[2]] * 2, version=6, pcie=GEN5),
            BUS[1]: dict(links=[BUS[0]] * 4, version=6, pcie=GEN5),
            BUS[2]: dict(links=[BUS[0]] * 2, version=6, pcie=(4, 16, 4, 16))}
    nv = use(monkeypatch, FakeNvml(gpus))
    t = gpu_links(CUDA_BUS[:3])
    assert t["nvml"] and t["driver"] == "570.86.15" and nv.shutdowns == 1
    e = link(t, 0, 1)
    assert (e["kind"], e["nvlink_count"], e["nvlink_version"]) == ("nvlink", 4, "4.0")
    assert e["peak_gbps"] == pytest.approx(4 * 25.0)
    assert link(t, 0, 2)["nvlink_count"] == 2 and link(t, 2, 0)["nvlink_count"] == 2
    # 1 <-> 2 have no direct link and no switch: PCIe, although both have NVLinks
    assert link(t, 1, 2)["kind"] == "pcie" and link(t, 1, 2)["nvlink_count"] == 0
    assert link(t, 1, 2)["pcie_gen"] == 4 and link(t, 1, 2)["pcie_width"] == 16
    assert len(t["links"]) == 6 and t["per_gpu"][0]["active"] == 6


def test_unknown_values_leave_rates_empty(monkeypatch):
    """No NVLink version and no PCIe info: links are still classified, peaks and ceilings are None."""
    gpus = {BUS[0]: dict(links=[BUS[1], (0, "?")], version=6, pcie=None),
            BUS[1]: dict(links=[BUS[0]], version=6, pcie=None)}
    use(monkeypatch, FakeNvml(gpus, no_pcie=True, no_version=True))
    t = gpu_links(CUDA_BUS[:2])
    e = link(t, 0, 1)
    assert e["kind"] == "nvlink" and e["nvlink_count"] == 1 and e["peak_gbps"] is None and e["ceiling_gbps"] is None
    assert e["peak_basis"] == "NVLink generation unknown"
    assert t["per_gpu"][0]["remotes"] == ["43:00.0", "?"] and t["per_gpu"][0]["pcie_gen"] is None
    gpus = {BUS[0]: dict(links=[], version=None, pcie=None), BUS[1]: dict(links=[], version=None, pcie=None)}
    use(monkeypatch, FakeNvml(gpus, no_pcie=True))
    e = link(gpu_links(CUDA_BUS[:2]), 0, 1)
    assert e["kind"] == "pcie" and e["peak_gbps"] is None and e["ceiling_gbps"] is None


def test_link_state_errors_stop_the_scan(monkeypatch):
    gpus = {BUS[0]: dict(links=[BUS[1]] * 4, version=6, pcie=GEN5),
            BUS[1]: dict(links=[BUS[0]] * 4, version=6, pcie=GEN5)}
    use(monkeypatch, FakeNvml(gpus, fail_state_at=2))
    t = gpu_links(CUDA_BUS[:2])
    assert t["per_gpu"][0]["active"] == 2 and link(t, 0, 1)["nvlink_count"] == 2


def test_without_nvml_the_table_is_empty_and_never_an_error(monkeypatch):
    def missing():
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(topology, "_nvml", missing)
    assert gpu_links(CUDA_BUS[:2]) == {"nvml": False, "error": "No module named 'pynvml'", "links": []}
    assert nvml_driver_version() is None and nvml_gpu_count() is None and nvml_link_kinds() is None
    assert nvml_mig_modes(CUDA_BUS[:1]) is None


def test_mig_modes_per_gpu(monkeypatch):
    gpus = {BUS[0]: dict(mig=(1, 1)), BUS[1]: dict(mig=(0, 1)), BUS[2]: dict()}
    nv = use(monkeypatch, FakeNvml(gpus))
    assert nvml_mig_modes(CUDA_BUS[:3]) == [{"current": 1, "pending": 1}, {"current": 0, "pending": 1},
                                            {"current": None, "pending": None, "error": "Not Supported"}]
    assert nv.shutdowns == 1


def test_link_kinds_without_cuda(monkeypatch):
    gpus = {b: dict(links=switch_links(18), version=6, pcie=GEN5) for b in BUS}
    use(monkeypatch, FakeNvml(gpus))
    assert nvml_link_kinds() == ["nvswitch"] * 12
    use(monkeypatch, FakeNvml({BUS[0]: gpus[BUS[0]]}))
    assert nvml_link_kinds() is None  # one GPU: no pairs


@pytest.mark.parametrize("box, gpus, remote_type, concurrent", [
    (hgx, 8, "ok", True), (bridged_box, 4, "ok", False), (hgx, 8, "missing", False),
    (bridged_box, 4, "missing", False)])
def test_pair_mode_from_the_link_kinds(monkeypatch, box, gpus, remote_type, concurrent):
    """Rounds of pairs only behind a switch: a bridged box (nvlink + pcie) and a switch NVML cannot name
    (unknown: not proven disjoint) are measured one pair at a time, and their serial steps keep every pair."""
    from ipcbench.core.schedule import decide_mode

    use(monkeypatch, FakeNvml(box(), remote_type=remote_type))
    found = nvml_link_kinds()
    assert len(found) == gpus * (gpus - 1)
    mode = decide_mode("auto", 1, found, gpus)
    assert mode.concurrent is concurrent and mode.serial.ring is concurrent
    if not concurrent:
        assert "pairs may share a link" in mode.reason


def test_driver_version_and_gpu_count(monkeypatch):
    nv = use(monkeypatch, FakeNvml({BUS[0]: {}, BUS[1]: {}, BUS[2]: {}}))
    assert nvml_driver_version() == "570.86.15" and nvml_gpu_count() == 3 and nv.shutdowns == 2


def test_bus_ids_compare_across_spellings():
    assert topology._norm_bus("00000000:1B:00.0") == topology._norm_bus("0000:1b:00.0") == "1b:00.0"
    assert topology._norm_bus("weird") == "weird"
